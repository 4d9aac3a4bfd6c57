// The training loop: backend, model, data, AdamW and the LR schedule put together; gradient
// accumulation to a global batch given in tokens; a log line per step on the terminal and in
// RUN_DIR/log.jsonl; periodic validation; checkpoints, bitwise resume, and a clean stop on a signal.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/loader.h"
#include "dist/communicator.h"
#include "model/model.h"
#include "ops/gpu_clocks.h"
#include "train/machine_fit.h"
#include "train/metrics.h"
#include "train/precision_choice.h"
#include "train/step_communication.h"

namespace tk {

// Every `tokamak train` flag; the JSON keys are the flag names with '_' for '-'.
struct TrainConfig {
  std::string model = "tiny";  // preset, config.json, HF model directory, checkpoint or run directory
  std::string data;            // a directory written by `tokamak prepare`
  std::string out;             // the run directory
  std::string tokenizer;       // the data's tokenizer; "" takes the one recorded in the data's meta.json
  std::string device = "auto";
  int batch = 8;               // micro-batch rows B
  int seq = 256;               // sequence length T
  int64_t batch_tokens = 0;    // global batch in tokens (0: batch * seq); a multiple of batch * seq
  bool doc_mask = false;       // attention stays within documents
  std::string recompute = "none";
  std::string offload = "none";  // "optimizer": AdamW state and master weights in host memory (same results)
  int64_t offload_chunk = int64_t(16) << 20;  // elements of the optimizer state per device round trip
  std::string moments = "f32";  // AdamW's m and v: f32, bf16 or int8 (ops.h adamw_update)
  // data parallelism's ZeRO stage: 0 replicated, 1 optimizer state sharded, 2 gradients too, 3 parameters too; -1 (not
  // given): 0, or the budget search's choice on many ranks
  int zero = -1;
  bool gemm_tuning = true;     // cuBLASLt algorithms chosen by timing, kept in the cache (ops/backend.h)
  std::string precision = kDefaultPrecision;  // auto, bf16 or fp8 (train/precision_choice.h)
  bool fp8 = false;           // the linear layers' GEMMs in FP8 (CUDA, sm_89+; ops/backend.h Precision): precision fp8
  std::string fp8_scaling = "delayed";  // delayed | current (CudaOps::set_fp8)
  int fp8_margin = 1;                   // delayed scaling's headroom: the scale from 2^margin x the history's amax
  bool fp8_lm_head = false;             // with fp8, the LM head's GEMMs in FP8 too (CudaOps::set_fp8_lm_head)
  std::string memory_budget;   // e.g. "16GiB": micro-batch (at most `batch`), recompute, offload and the logits chunk chosen to fit (GPU)
  int logits_chunk_mib = 0;    // the LM head's logits chunk in MiB (CUDA); 0: 512, or the budget search's choice
  int vocab_size = 0;          // a fresh model's vocabulary instead of its preset's / config's (0: keep)
  int64_t steps = 1000;
  double lr = 3e-4;
  double min_lr_ratio = 0.1;
  int64_t warmup = 100;
  std::string schedule = "cosine";  // cosine, linear or wsd
  double decay_fraction = 0.2;      // wsd: the share of the steps spent decaying
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8, weight_decay = 0.1;
  double grad_clip = 1.0;      // global gradient norm limit; <= 0 disables clipping
  uint64_t seed = 1234;        // initial weights and data order
  int64_t eval_every = 0;      // validate every N steps (0: only at the end)
  int64_t eval_tokens = 65536; // tokens per validation (0: never validate)
  int64_t save_every = 0;      // checkpoint every N steps (0: only at the end)
  int keep_checkpoints = 3;    // keep the newest K checkpoints (0: all)
  int64_t log_every = 1;       // a terminal line every N steps (log.jsonl keeps every step: run_log.h)
  std::string tensorboard;     // TensorBoard's event files: "" the run directory, "none" none, else this directory
  double peak_tflops = 0;      // the GPU's peak for MFU when it is not in the table

  // What to do with the run directory; not part of the recipe, so not saved with it.
  bool resume = false;
  std::string resume_from;     // checkpoint or run directory; "" = the latest checkpoint in `out`
  bool overwrite = false;      // replace the run in `out`; with resume: delete checkpoints after the one resumed from

  nlohmann::json to_json() const;
  // Keys absent from j keep their defaults.
  static TrainConfig from_json(const nlohmann::json& j);
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0;          // mean over the global batch (nats per token)
  double lr = 0;
  double grad_norm = 0;     // before clipping
  double clip_scale = 1;
  int64_t tokens_seen = 0;  // after this step
  double seconds = 0;       // wall time of the step
  StepMetrics metrics;
  StepCommunication communication;  // data parallel: each rank's communication and data wait; empty for one process
  ClockSummary clocks;              // the GPU's clock and power over the step (empty on the CPU, or not read)
};

struct TrainResult {
  std::string run_dir;
  std::string checkpoint;   // the last one written
  int64_t step = 0;         // the last step completed
  double loss = 0;          // its training loss
  double val_loss = -1;     // the last validation loss (-1: none)
  int exit_code = 0;        // 0, or 128 + the signal that stopped the run (after its checkpoint was saved)
};

class Trainer {
 public:
  // comm: this rank's communicator in a data-parallel run (docs/distributed.md), nullptr for one process. Every rank
  // runs the same Trainer; rank 0 owns the run directory, its log and the model's weights in each checkpoint.
  explicit Trainer(TrainConfig cfg, dist::Communicator* comm = nullptr) : cfg_(std::move(cfg)), comm_(comm) {}
  // Called after each step is logged (tests and tools watch the run with it).
  std::function<void(const StepRecord&)> on_step;
  // Trains to cfg.steps, or until SIGINT, SIGTERM or SIGHUP (then saves and returns 130, 143 or 129 as exit_code).
  // A non-finite loss or gradient is a tk::Error that leaves the last checkpoint as it was; a failure after a step
  // (a log write on a full disk) is a tk::Error once that step is saved, or saying that it could not be.
  TrainResult run();

 private:
  TrainConfig cfg_;
  dist::Communicator* comm_;
};

// What tools that run the trainer's own steps (`tokamak profile`) put between the trainer and its parts.
struct StepHooks {
  // Receives the backend's ops and returns the ops that the model and optimizer are built on.
  std::function<std::unique_ptr<Ops>(std::unique_ptr<Ops>)> wrap_ops;
  // Receives the training data's loader and returns the one the steps read from.
  std::function<std::unique_ptr<DataLoader>(std::unique_ptr<DataLoader>)> wrap_loader;
};

// The steps of a training run without its run directory: the trainer's own set-up (backend, data,
// model, AdamW, LR schedule) from a TrainConfig, then steps 1, 2, ... run and timed exactly as `tokamak
// train` runs them, but never logged, validated or checkpointed.
class TrainingSteps {
 public:
  // A tk::Error for a config that train would refuse, or one that asks to resume. comm: as Trainer's (nullptr for one
  // process); on many ranks the steps are train's data-parallel steps (the same DataParallel, ZeRO stage and sharded
  // optimizer), each StepRecord with every rank's communication and data wait, so every rank constructs its
  // TrainingSteps and calls next_step() as often as the others.
  explicit TrainingSteps(TrainConfig cfg, StepHooks hooks = {}, dist::Communicator* comm = nullptr);
  ~TrainingSteps();
  TrainingSteps(const TrainingSteps&) = delete;
  TrainingSteps& operator=(const TrainingSteps&) = delete;

  void print_plan() const;     // the model, batch, backend and memory lines train prints
  StepRecord next_step();
  const TrainConfig& config() const;  // as resolved (absolute paths, batch_tokens filled in)
  const Model& model() const;
  const ThroughputModel& throughput() const;
  bool gpu() const;
  int accumulation_steps() const;
  int64_t tokens_per_step() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A step whose loss or gradient norm is not finite: the weights have diverged. The trainer records the step in
// log.jsonl (run_log.h) and stops, keeping the last checkpoint.
struct DivergedError : Error {
  DivergedError(const std::string& what, int64_t step, double loss, double grad_norm)
      : Error(what), step(step), loss(loss), grad_norm(grad_norm) {}
  int64_t step;
  double loss;       // NaN where the loss was not computed to its end
  double grad_norm;  // NaN where no gradient norm was computed
};

class DataParallel;

// One optimizer step's gradients on this rank: `micro_steps` batches from the loader, each backpropagated with
// grad_scale = 1 / (tokens in the global batch, `ranks` x micro_steps micro-batches), so the gradients accumulated
// (and, with `dp`, summed across the ranks in the last micro-batch's backward) are those of the mean loss over the
// global batch. A non-finite loss is a DivergedError naming the step and micro-batch. Returns this rank's loss.
LossSum accumulate_gradients(Model& model, DataLoader& loader, int micro_steps, int64_t step,
                             DataParallel* dp = nullptr);

}  // namespace tk
