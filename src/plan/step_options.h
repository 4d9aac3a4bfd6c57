// StepOptions: what a training step computes and how, as a person gives it (flags, a config file's keys): the one
// description that `train`, `profile`, `bench` and `plan` share. cli/step_options.h adds it to a command line;
// check_step_options() is its one validation; make_recipe() the one function that turns it into the Recipe every
// part is built from (recipe.h). The flag strings are read by flag_values.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "model/config.h"
#include "ops/device_info.h"
#include "plan/flag_values.h"
#include "plan/memory_plan.h"
#include "plan/precision_choice.h"
#include "plan/recipe.h"

namespace tk {

struct StepOptions {
  std::string model = "tiny";  // preset, config.json, HF model directory, checkpoint or run directory
  std::string data;            // a directory written by `tokamak prepare`
  std::string tokenizer;       // the data's tokenizer; "" takes the one recorded in the data's meta.json
  int vocab_size = 0;          // a fresh model's vocabulary instead of its preset's / config's (0: keep)
  uint64_t seed = 1234;        // initial weights and data order
  std::string device = "auto";  // auto, cpu or cuda
  int batch = 8;                // micro-batch rows B
  int seq = 256;                // sequence length T
  int64_t batch_tokens = 0;     // global batch in tokens (0: batch * seq on each rank); a multiple of batch * seq
  bool doc_mask = false;        // attention stays within documents
  std::string recompute = "none";
  std::string offload = "none";                // none, optimizer or optimizer,gradients
  int64_t offload_chunk = int64_t(16) << 20;  // elements of the optimizer state per device round trip
  std::string moments = "f32";                 // AdamW's m and v: f32, bf16 or int8
  // data parallelism's ZeRO stage: 0 replicated, 1 optimizer state sharded, 2 gradients too, 3 parameters too; -1 (not
  // given): 0, or the budget search's choice on many ranks
  int zero = -1;
  bool gemm_tuning = true;                    // cuBLASLt algorithms chosen by timing, kept in the cache
  std::string precision = kDefaultPrecision;  // auto, bf16 or fp8 (precision_choice.h)
  bool fp8 = false;                           // the same as precision fp8
  std::string fp8_scaling = "delayed";        // delayed | current
  int fp8_margin = 1;                         // delayed scaling's headroom: the scale from 2^margin x the amax
  bool fp8_lm_head = false;                   // with fp8, the LM head's GEMMs in FP8 too
  std::string memory_budget;  // e.g. "16GiB": micro-batch, recompute, offload and logits chunk chosen to fit (GPU)
  int logits_chunk_mib = 0;   // the LM head's logits chunk in MiB (CUDA); 0: 512, or the budget search's choice
  double peak_tflops = 0;     // the GPU's peak for MFU when it is not in the table (0: the table's)
};

// A tk::Error naming the option (by its flag) for any value outside what the options allow: a size below one, a
// global batch that is not a whole number of micro-batches (or whose count of them overflows), a misspelt
// enumeration, a precision that contradicts --fp8, a non-finite number, a memory budget that is not a size.
void check_step_options(const StepOptions& o);

// The micro-batches a step takes on each of `world` ranks: --batch-tokens over (--batch x --seq x world), one
// each when --batch-tokens is 0. A tk::Error where the ranks cannot share them equally.
int accumulation_steps(const StepOptions& o, int world);
// The tokens of one optimizer step over all ranks.
int64_t global_batch_tokens(const StepOptions& o, int world);

// The recipe of the options for `model` (its vocabulary already chosen) on the CUDA backend (gpu) or the CPU's, on
// `world` data-parallel ranks: the micro-batch and accumulation, precision (--precision auto decides for `device`,
// the GPU the run is for; its line goes to Recipe::precision_note), recompute, offload, AdamW's state and the
// backend's tuning. The ZeRO stage is the one given (0 when not). The optimizer's hyperparameters (AdamWOptions'
// beta1, beta2, eps, weight_decay, max_grad_norm) are a run's, not a step's: they keep their defaults here.
Recipe make_recipe(const StepOptions& o, const ModelConfig& model, bool gpu, const std::optional<GpuInfo>& device,
                   int world = 1);

// --memory-budget (o.memory_budget, not empty) for `base` on `target`: the fastest micro-batch (at most --batch) with
// its accumulation, recompute policy, offload and logits chunk (unless --logits-chunk fixes it) whose planned memory
// fits, for the same tokens a step (memory_plan.h choose_plan); on many ranks (base.world_size > 1) each rank's
// memory, and the ZeRO stage too unless --zero gives it (choose_zero_stage). `line` gets what was chosen, the line
// train and bench print.
MemoryPlan fit_memory_budget(const Recipe& base, const StepOptions& o, PlanTarget target, std::string& line);

}  // namespace tk
