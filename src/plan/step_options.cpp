// StepOptions (step_options.h): the one validation of a step's options and the one recipe they make.
#include "plan/step_options.h"

#include <cmath>
#include <limits>

#include "core/checked.h"
#include "core/error.h"
#include "core/format.h"

namespace tk {

namespace {

void check_one_of(const std::string& flag, const std::string& value, std::initializer_list<const char*> allowed) {
  std::string names;
  for (const char* a : allowed) {
    if (value == a) return;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", a);
  }
  fail("--{} must be one of {}, not '{}'", flag, names, value);
}

}  // namespace

void check_step_options(const StepOptions& o) {
  TK_CHECK(o.batch >= 1, "--batch must be at least 1, not {}", o.batch);
  TK_CHECK(o.seq >= 1, "--seq must be at least 1, not {}", o.seq);
  TK_CHECK(o.batch_tokens >= 0, "--batch-tokens must not be negative, not {}", o.batch_tokens);
  TK_CHECK(o.vocab_size >= 0, "--vocab-size must not be negative, not {}", o.vocab_size);
  TK_CHECK(o.seed <= uint64_t(std::numeric_limits<int64_t>::max()), "--seed {} is larger than {}", o.seed,
           std::numeric_limits<int64_t>::max());
  TK_CHECK(o.offload_chunk >= 1, "--offload-chunk must be at least 1, not {}", o.offload_chunk);
  TK_CHECK(o.zero >= -1 && o.zero <= 3, "--zero {}: the stages are 0, 1, 2 and 3 (docs/distributed.md)", o.zero);
  TK_CHECK(o.logits_chunk_mib >= 0 && o.logits_chunk_mib <= kMaxLogitsChunkMib,
           "--logits-chunk must be 0 to {} MiB, not {}", kMaxLogitsChunkMib, o.logits_chunk_mib);
  TK_CHECK(std::isfinite(o.peak_tflops) && o.peak_tflops >= 0,
           "--peak-tflops must be a finite number, at least 0, not {}", o.peak_tflops);
  check_one_of("device", o.device, {"auto", "cpu", "cuda"});
  check_one_of("precision", o.precision, {"auto", "bf16", "fp8"});
  TK_CHECK(!o.fp8 || o.precision == "auto" || o.precision == "fp8",
           "--fp8 is --precision fp8: it contradicts --precision {}", o.precision);
  check_one_of("fp8-scaling", o.fp8_scaling, {"delayed", "current"});
  TK_CHECK(o.fp8_margin >= 0 && o.fp8_margin <= kMaxFp8Margin, "--fp8-margin must be 0 to {}, not {}", kMaxFp8Margin,
           o.fp8_margin);
  TK_CHECK(!o.fp8_lm_head || o.fp8 || o.precision == "fp8",
           "--fp8-lm-head puts the LM head's GEMMs in FP8 with the linears': it needs --fp8 (or --precision fp8)");
  parse_recompute(o.recompute);
  parse_offload(o.offload);
  parse_moments(o.moments);
  if (!o.memory_budget.empty()) {
    const double budget = parse_bytes(o.memory_budget);
    TK_CHECK(std::isfinite(budget) && budget > 0, "--memory-budget {} is not a size above zero", o.memory_budget);
  }
  accumulation_steps(o, 1);  // the global batch a whole number of micro-batches, and their count an int
}

int64_t global_batch_tokens(const StepOptions& o, int world) {
  const int64_t micro = int64_t(o.batch) * o.seq;
  return o.batch_tokens > 0 ? o.batch_tokens : checked_mul<int64_t>(micro, world, "the tokens of a step");
}

int accumulation_steps(const StepOptions& o, int world) {
  const int64_t micro = int64_t(o.batch) * o.seq;
  // The sizes' own rule (checked.h): positive, a micro-batch an int indexes, a whole number of them that an int counts.
  const int micro_batches = micro_batches_per_step(global_batch_tokens(o, world), o.batch, o.seq);
  TK_CHECK(micro_batches % world == 0,
           "--batch-tokens {} is {} micro-batches of {} tokens, which {} ranks cannot share equally: each rank takes "
           "a whole number of them (raise --batch-tokens to a multiple of {} tokens, or lower --batch)",
           global_batch_tokens(o, world), micro_batches, micro, world, micro * world);
  return micro_batches / world;
}

Recipe make_recipe(const StepOptions& o, const ModelConfig& model, bool gpu, const std::optional<GpuInfo>& device,
                   int world) {
  check_step_options(o);
  Recipe r;
  r.model = model;
  r.gpu = gpu;
  r.batch = o.batch;
  r.seq = o.seq;
  r.world_size = world;
  r.accumulation = accumulation_steps(o, world);
  r.zero_stage = std::max(o.zero, 0);  // -1: not given (0, unless --memory-budget on many ranks chooses)
  r.doc_mask = o.doc_mask;
  r.recompute = parse_recompute(o.recompute);
  r.optimizer.moments = parse_moments(o.moments);
  r.optimizer.offload_chunk = o.offload_chunk;
  const Offload offload = parse_offload(o.offload);
  r.optimizer.offload = offload.optimizer;
  r.offload_gradients = offload.gradients;
  r.backend.precision = resolve_precision(o.precision, o.fp8, o.fp8_scaling, o.fp8_margin, o.fp8_lm_head,
                                         gpu ? device : std::nullopt, model, r.batch, r.seq, r.precision_note);
  // The CPU backend has one precision: asked for bf16, it says so rather than run float32 without a word.
  if (!gpu && !o.fp8 && o.precision == "bf16")
    r.precision_note = "precision bf16: the CPU backend computes in float32 (bf16 is the CUDA backend's)";
  r.backend.gemm_tuning = o.gemm_tuning;
  if (o.logits_chunk_mib > 0) r.backend.logits_chunk_bytes = size_t(o.logits_chunk_mib) << 20;
  return r;
}

MemoryPlan fit_memory_budget(const Recipe& base, const StepOptions& o, PlanTarget target, std::string& line) {
  TK_CHECK(base.gpu, "--memory-budget plans device memory: it needs the CUDA backend (--device cuda)");
  const double budget = parse_bytes(o.memory_budget);
  const int64_t global = global_batch_tokens(o, base.world_size);
  target.choose_logits_chunk = o.logits_chunk_mib == 0;
  std::string stage;
  MemoryPlan p;
  if (base.data_parallel || base.world_size > 1) {
    const StageChoice choice = choose_zero_stage(zero_stage_recipes(base, o.zero), global, budget, target);
    p = choice.plan;
    stage = fmt::format(" per GPU on {} ranks: ZeRO {} ({}),", base.world_size, p.recipe.zero_stage, choice.why);
  } else {
    p = choose_plan(base, global, budget, target);
  }
  const Recipe& r = p.recipe;
  line = fmt::format("memory budget {}{}: micro-batch {} x {} with {} accumulation step(s), recompute {}, offload {}, "
                     "logits chunk {}; planned {}",
                     format_bytes(budget), stage, r.batch, r.seq, r.accumulation, r.recompute.describe(),
                     r.offload_name(), format_bytes(double(r.logits_chunk_bytes())), format_bytes(p.total_bytes));
  return p;
}

}  // namespace tk
