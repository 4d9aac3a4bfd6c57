// --precision auto|bf16|fp8, the one definition train, bench, plan and profile share: what each spelling asks for
// (--fp8 is --precision fp8, --fp8-lm-head adds the LM head), and auto's choice, a pure function of the device, the
// model and the micro-batch that says why it chose what it chose.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/config.h"
#include "ops/device_info.h"

namespace tk {

// The precision of a run that names none: auto, since FP8 linears and the FP8 LM head (what auto picks where they
// pay) train within the seed spread of bf16 over the 300-step quality check (tests/gpu/run.sh fp8head, README).
// `--precision bf16` asks for bf16 whatever the GPU.
inline constexpr const char* kDefaultPrecision = "auto";

struct PrecisionChoice {
  bool fp8 = false;      // the linears' GEMMs in FP8
  bool lm_head = false;  // and the LM head's
  std::string reason;    // one line: "precision auto: fp8 (linears and LM head): ..."
};

// auto for a GPU (its name and compute capability; nothing: the CPU): FP8 for the linears (and the LM head) where it
// has FP8 tensor cores (GpuInfo::fp8_tensor_cores), every linear's shape at this micro-batch takes the FP8 path
// (ops/cuda/fp8_shapes.h) and the plan's speed model predicts a gain over bf16 (memory_plan.h, with the GPU's rates
// when the GPU table knows it); bf16 elsewhere, f32 on the CPU.
PrecisionChoice choose_precision(const std::optional<GpuInfo>& gpu, const ModelConfig& model, int batch, int seq,
                                 bool delayed_scaling);

// The precision of the flags --precision (auto, bf16, fp8; "" is kDefaultPrecision), --fp8 (precision fp8, which the
// command lines do not let --precision contradict), --fp8-scaling, --fp8-margin and --fp8-lm-head (fp8's LM head
// too) for the model at micro-batch batch x seq on `gpu` (nothing: the CPU). auto's line goes to `note` ("" otherwise);
// a tk::Error for an unknown precision and for --fp8-lm-head with another precision than fp8.
MatmulPrecision resolve_precision(const std::string& precision, bool fp8, const std::string& scaling, int margin,
                            bool lm_head, const std::optional<GpuInfo>& gpu, const ModelConfig& model, int batch,
                            int seq, std::string& note);

struct Recipe;
struct PlanTarget;
// As above for a plan (`tokamak plan`): auto's choice predicted for the recipe `r` itself (its micro-batch,
// accumulation, moments, logits chunk, GPUs and ZeRO stage) on `target`, so that its line gives the tokens/s the
// plan's table gives for that setting.
MatmulPrecision resolve_precision(const std::string& precision, bool fp8, const std::string& scaling, int margin,
                            bool lm_head, const std::optional<GpuInfo>& gpu, const Recipe& r, const PlanTarget& target,
                            std::string& note);

}  // namespace tk
