// The memory plan without a GPU: what a training run of a recipe (recipe.h) holds on the device, component by
// component (the labels the backends give their allocations); and the search `tokamak plan` and `train
// --memory-budget` run: the fastest setting that fits a budget.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "plan/recipe.h"
#include "plan/zero_plan.h"

namespace tk {

struct PlanRow {
  std::string component;
  double bytes = 0;
  bool exact = true;  // false: an estimate (cuDNN's workspace, the CUDA context)
  bool host = false;  // held in host memory (offload), not counted in the device total
};

// What --fp8 buys, measured on the H200 at the bench shapes (bench/NOTES.md, FP8 linears): the linears' FP8
// GEMMs ran this much faster than bf16, and casting their operands moved this many bytes per byte the bf16
// GEMMs read and write. The plan's speed and the profile's FP8 advice both use them.
constexpr double kFp8GemmSpeedup = 1.6;
constexpr double kFp8CastBytesPerGemmByte = 1.2;
// The LM head's GEMMs (--fp8-lm-head: [tokens, d] x [d, V], V of 128-152k) gain more: measured on the H200 at the
// bench shapes, --fp8 -> --fp8 --fp8-lm-head saved 8.1 ms of a 95.4 ms 0.5B step and 15.2 ms of 180.8 at 1B, the
// casts included (bench/NOTES.md, the LM head in FP8).
constexpr double kFp8LmHeadGemmSpeedup = 2.0;
// The bytes --fp8-lm-head's casts move beyond the bf16 head's in one micro-batch of `tokens`: per token and
// vocabulary entry the softmax rows write the e5m2 dlogits (1 byte where bf16's took 2) and their transpose moves 2
// (+1); per token x's cast (2 read, 2 written a feature); the weight's (2 read, 2 written an element, and with
// current scaling 2 more for its amax pass).
inline double fp8_lm_head_cast_bytes(const ModelConfig& c, double tokens, bool delayed) {
  const double V = c.vocab_size, d = c.d_model;
  return tokens * (V + 4 * d) + (delayed ? 4 : 6) * V * d;
}
// --fp8-scaling delayed drops the amax passes: per linear the casts move 6 E_x + 4 E_y + 6 W bytes instead of
// 10 E_x + 6 E_y + 10 W (E_x, E_y: input and output elements, W: weights), ~0.6 of current scaling's.
constexpr double kFp8DelayedCastShare = 0.6;

// The logits chunks a budget search tries (PlanTarget::choose_logits_chunk).
constexpr size_t kLogitsChunkChoices[] = {size_t(512) << 20, size_t(1024) << 20, size_t(2048) << 20};

// The device a plan is for, and what a budget search may change besides the micro-batch, the recompute policy and
// the offload.
struct PlanTarget {
  double peak_flops = 989e12;      // dense bf16 peak, for the speed prediction
  // Achieved / peak on the GEMMs: 0.75 (times N / (N + 1024) for small micro-batches) fits the H200's bench
  // configs within -3% to +6% with the attention at its own rates below (bench/NOTES.md).
  double matmul_efficiency = 0.75;
  // Achieved / peak of the causal attention at sequence 2048, forward and backward (cuDNN's fused kernels,
  // deterministic backward): 326-333 and 173-175 TFLOP/s of the H200's 989 at head_dim 64 (bench/NOTES.md, the
  // profiles). Attention runs far below the GEMMs' rate, so timing its FLOPs as GEMMs made narrow models (where its
  // share is larger) look faster than they are. Other sequences: attention_sequence_factor.
  double attention_forward_efficiency = 0.33;
  double attention_backward_efficiency = 0.175;
  double bandwidth = 4.0e12;       // bytes/s of the memory-bound ops
  // Bytes/s each way between page-locked host memory and the device, both ways at once: 47 GB/s measured
  // on the H200 machine's PCIe 5 link (bench/NOTES.md); a PCIe 4 x16 link gives about half (a card's own:
  // gpu_specs.h host_bandwidth).
  double host_bandwidth = 45e9;
  // Page-locked host memory a setting may take (offload), 0: no limit. Pinned pages cannot be swapped, so
  // a plan past the machine's memory would fail at start or starve the rest of the system.
  double host_memory_limit = 0;
  // The limit was given (plan --host-memory), not local_host_memory_limit's share of this machine: what a refusal
  // names.
  bool host_memory_limit_given = false;
  // The SM count of a device that runs tokamak's own attention backward (Hopper: own_attention_backward_sms,
  // hopper_multiprocessors), 0 for one that runs cuDNN's. Where it applies (head_dim 64, T % 128 == 0,
  // ceil(T / 256) <= this, no document mask) its f32 dQ sums replace cuDNN's dP workspace in the plan.
  int own_attention_sms = 0;
  // The LM head's bf16 logits chunk (the recipe's, 512 MiB by default): each chunk's weight-gradient GEMM reads and
  // writes the f32 LM-head gradient once, so larger chunks move fewer bytes. With this the candidates also try
  // kLogitsChunkChoices, so that a budget search spends memory left over on the chunk when nothing faster wants it.
  bool choose_logits_chunk = false;
  // With this the candidates also try FP8 (the linears, and the LM head where its shapes allow; delayed scaling),
  // for a device with FP8 tensor cores: what `plan --gpu` searches when no precision is given.
  bool try_fp8 = false;
  // Bus bandwidth between the GPUs of a data-parallel run, bytes/s (zero_plan.h: NVLink 4 by default).
  double link_bandwidth = kNvlinkBusBandwidth;
};

// The causal attention's rate grows with the sequence T (each query tile loops over more keys, and the diagonal's
// partly masked tiles are a smaller share of the work): PlanTarget's efficiencies at 2048 times 2 T / (T + 2048),
// 1.6 at 8192. Llama-3.1-8B on the H200 gives 1.6 at 8192 (bench/NOTES.md: 13.8k tok/s where the rates of 2048
// predicted 11.0k, and 17.9k at 2048 where they predicted 16.7k: the attention's part at 8192 when the rest of the
// step is off by as much as at 2048); sequences other than 2048 and 8192 are not measured.
inline double attention_sequence_factor(int seq) { return 2.0 * seq / (seq + 2048.0); }

// Seconds per token of one GPU in the predicted step, by what bounds each part: the GEMMs and attention (FLOPs at
// the efficiencies), the memory-bound ops and the optimizer (bytes at the bandwidth), the offload's transfers (bytes
// at the host link), and the collectives the backward does not hide (ZeRO, zero_plan.h).
struct StepTimes {
  double matmul = 0, memory = 0, optimizer = 0, offload = 0, communication = 0;
  double total() const { return matmul + memory + optimizer + offload + communication; }
};

struct MemoryPlan {
  // The setting planned: the recipe with the micro-batch, accumulation, recompute policy, offload and logits chunk
  // of this candidate (offload only on the GPU; the logits chunk resolved to bytes).
  Recipe recipe;
  std::vector<PlanRow> rows;
  double total_bytes = 0;
  double predicted_tokens_per_s = 0;
  double recompute_flops_per_token = 0;
  double host_bytes = 0;  // the host rows' sum
  StepTimes time;
  ZeroCommunication communication;  // one GPU's, per optimizer step (nothing on one GPU)
  // Fits the device budget, and the host memory limit when offloading: every GPU's host rows, the GPUs of a
  // data-parallel plan sharing one host (train --gpus N).
  double host_bytes_of_all_gpus() const { return host_bytes * recipe.world_size; }
  bool fits(double budget_bytes, const PlanTarget& target) const {
    return (budget_bytes <= 0 || total_bytes <= budget_bytes) &&
           (target.host_memory_limit <= 0 || host_bytes_of_all_gpus() <= target.host_memory_limit);
  }
};

// What this machine allows offload to pin: 80% of its physical memory (0 when unknown).
double local_host_memory_limit();

// The plan of one setting: what the recipe's run holds on its device (the CPU's memory when !recipe.gpu); under ZeRO
// (recipe.zero_stage, recipe.world_size) what one GPU holds: stage 1 divides the fp32 master weights and AdamW's
// moments by N, stage 2 the gradients too (plus the three unit-sized buffers each unit's backward is staged in
// before it is reduce-scattered, model/grad_staging.h), stage 3 the parameters too (plus two units gathered: the one
// in use and the one prefetched). predicted_tokens_per_s is the whole run's, every GPU's tokens; 0 for a CPU recipe,
// which the speed model (GPU rates and efficiencies) does not describe: its candidates keep their order (the largest
// micro-batch and the least recompute first).
MemoryPlan plan_memory(const Recipe& r, const PlanTarget& target);

// Every setting tried for a global batch of global_tokens (B * T * accumulation * world size), fastest first, and
// whether it fits `budget_bytes`. The micro-batch halves from base.batch down to 1; policies go from none to block,
// each with the optimizer state on the device, offloaded, and offloaded with the gradients (GPU recipes; one GPU
// only for the gradients, which data parallelism reduces on the device); the rest
// of the recipe (the model, T, the precision unless target.try_fp8, which ZeRO 3 on many GPUs leaves at bf16, the
// moments, the ZeRO stage) is kept.
std::vector<MemoryPlan> plan_candidates(const Recipe& base, int64_t global_tokens, const PlanTarget& target);
// The fastest candidate that fits, or a tk::Error naming the smallest footprint and its largest component.
MemoryPlan choose_plan(const Recipe& base, int64_t global_tokens, double budget_bytes, const PlanTarget& target);

// The budget search over ZeRO stages (train --memory-budget on N ranks, plan --gpus N --memory-budget): `stages` is
// the run's recipe at each stage allowed, lowest first (all four, or the one --zero names); each is searched as
// choose_plan does, and the chosen plan is the fastest of the stages' (per-GPU memory from plan_memory, whose
// sharding is the stage's; tokens/s with the stage's exposed communication, zero_plan.h). So the lowest stage that
// fits wins, it moving the fewest bytes, unless a higher one is predicted faster; an equal prediction keeps the lower
// one. None fitting is a tk::Error naming the smallest footprint of all the stages, its stage and its largest part.
struct StageChoice {
  MemoryPlan plan;
  // Each stage's prediction or that it does not fit, e.g. "ZeRO 0 does not fit; ZeRO 1 81234 tokens/s".
  std::string why;
};
StageChoice choose_zero_stage(const std::vector<Recipe>& stages, int64_t global_tokens, double budget_bytes,
                              const PlanTarget& target);
// The stages such a search chooses among: base at `given` (--zero), or at each of 0-3 when given < 0.
std::vector<Recipe> zero_stage_recipes(const Recipe& base, int given);

// "16GiB", "24 GB", "1.5TiB", "800MiB", or plain bytes.
double parse_bytes(const std::string& text);
std::string format_plan(const MemoryPlan& p, double budget_bytes);
// The predicted speed's parts and the rates behind them: what bounds the step ("" for a CPU recipe).
std::string format_speed(const MemoryPlan& p, const PlanTarget& target);
// "bf16", "fp8 (linears)" or "fp8 (linears and LM head)": what the backend runs (f32 on the CPU).
std::string precision_name(const Recipe& r);

}  // namespace tk
