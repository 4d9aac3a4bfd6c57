// --precision (precision_choice.h): the flags' meaning and auto's choice, predicted by the memory plan's speed model.
#include "plan/precision_choice.h"
#include "plan/flag_values.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "plan/gpu_specs.h"
#include "plan/memory_plan.h"

namespace tk {
namespace {

double predicted_tokens_per_s(Recipe r, const MatmulPrecision& precision, const PlanTarget& target) {
  r.backend.precision = precision;
  return plan_memory(r, target).predicted_tokens_per_s;
}

// auto's choice on a GPU for the recipe `shape` (its precision ignored), predicted on `target`.
PrecisionChoice choose_on_gpu(const GpuInfo& device, const Recipe& shape, const PlanTarget& target,
                              bool delayed_scaling) {
  const ModelConfig& model = shape.model;
  if (!device.fp8_tensor_cores())
    return {false, false,
            fmt::format("precision auto: bf16: {} (compute capability {}.{}) has no FP8 tensor cores (they start at "
                        "8.9: Ada, Hopper, Blackwell)",
                        device.name, device.cc_major, device.cc_minor)};
  const int64_t N = shape.micro_tokens();
  if (!shape.linears_fp8_shapes())
    return {false, false,
            fmt::format("precision auto: bf16: the linears of this shape do not take the FP8 path (cuBLASLt's FP8 "
                        "GEMMs need every dimension a multiple of 16; d_model {}, q {}, q/k/v {}, FFN {}, {} tokens "
                        "a micro-batch)",
                        model.d_model, model.q_dim(), model.qkv_dim(), model.ffn_dim, N)};
  const double bf16 = predicted_tokens_per_s(shape, MatmulPrecision{}, target);
  const double linears = predicted_tokens_per_s(shape, {true, delayed_scaling, 1, false}, target);
  const bool head_shapes = shape.lm_head_fp8_shapes();
  const double head = head_shapes ? predicted_tokens_per_s(shape, {true, delayed_scaling, 1, true}, target) : 0;
  const std::string why = fmt::format("{} has FP8 tensor cores and every linear of this shape takes the FP8 path",
                                      device.name);
  const std::string gpus =
      shape.world_size > 1 ? fmt::format(" on {} GPUs (ZeRO {})", shape.world_size, shape.zero_stage) : "";
  if (head > linears && head > bf16)
    return {true, true,
            fmt::format("precision auto: fp8 (linears and LM head): {}; the plan predicts {:.0f} tokens/s{} against "
                        "{:.0f} in bf16",
                        why, head, gpus, bf16)};
  if (linears > bf16)
    return {true, false,
            fmt::format("precision auto: fp8 (linears; the LM head stays bf16: {}): {}; the plan predicts {:.0f} "
                        "tokens/s{} against {:.0f} in bf16",
                        head_shapes ? "its FP8 GEMMs are predicted no faster"
                                    : fmt::format("its FP8 GEMMs need the vocabulary ({}) a multiple of 16",
                                                  model.vocab_size),
                        why, linears, gpus, bf16)};
  return {false, false,
          fmt::format("precision auto: bf16: {}, but the plan predicts FP8 no faster here ({:.0f} against {:.0f} "
                      "tokens/s{} in bf16: the casts cost what the GEMMs save)",
                      why, std::max(linears, head), bf16, gpus)};
}

// What the flags ask for, and auto's choice from `choose` (called only for auto).
template <class Choose>
MatmulPrecision resolve(const std::string& precision, bool fp8, const std::string& scaling, int margin, bool lm_head,
                  std::string& note, const Choose& choose) {
  note.clear();
  const std::string asked = fp8 ? "fp8" : precision.empty() ? kDefaultPrecision : precision;
  TK_CHECK(asked == "auto" || asked == "bf16" || asked == "fp8", "--precision is '{}': it must be auto, bf16 or fp8",
           asked);
  TK_CHECK(!lm_head || asked == "fp8",
           "--fp8-lm-head puts the LM head's GEMMs in FP8 with the linears': it needs --fp8 (or --precision fp8)");
  if (asked != "auto") return parse_matmul_precision(asked == "fp8", scaling, margin, lm_head);
  const PrecisionChoice choice = choose(scaling != "current");
  note = choice.reason;
  return parse_matmul_precision(choice.fp8, scaling, margin, choice.lm_head);
}

}  // namespace

PrecisionChoice choose_precision(const std::optional<GpuInfo>& gpu, const ModelConfig& model, int batch, int seq,
                                 bool delayed_scaling) {
  if (!gpu) return {false, false, "precision auto: f32 (the CPU backend computes in float32)"};
  Recipe shape;
  shape.model = model;
  shape.batch = batch;
  shape.seq = seq;
  const GpuSpec* spec = gpu_spec_by_device_name(gpu->name);
  return choose_on_gpu(*gpu, shape, spec ? plan_target_for(*spec) : PlanTarget{}, delayed_scaling);
}

MatmulPrecision resolve_precision(const std::string& precision, bool fp8, const std::string& scaling, int margin,
                            bool lm_head, const std::optional<GpuInfo>& gpu, const ModelConfig& model, int batch,
                            int seq, std::string& note) {
  return resolve(precision, fp8, scaling, margin, lm_head, note,
                 [&](bool delayed) { return choose_precision(gpu, model, batch, seq, delayed); });
}

MatmulPrecision resolve_precision(const std::string& precision, bool fp8, const std::string& scaling, int margin,
                            bool lm_head, const std::optional<GpuInfo>& gpu, const Recipe& r, const PlanTarget& target,
                            std::string& note) {
  return resolve(precision, fp8, scaling, margin, lm_head, note, [&](bool delayed) {
    return gpu ? choose_on_gpu(*gpu, r, target, delayed) : choose_precision(gpu, r.model, r.batch, r.seq, delayed);
  });
}

}  // namespace tk
