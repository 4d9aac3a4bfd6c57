// --precision auto's choice, on the CPU: bf16 on GPUs without FP8 tensor cores (Ampere), FP8 linears and LM head on
// Ada, Hopper and consumer Blackwell at the bench shapes, bf16 with the reason where the shapes do not take the FP8
// path, f32 on the CPU; and what --precision, --fp8 and --fp8-lm-head mean together.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/config.h"
#include "plan/precision_choice.h"

namespace tk {
namespace {

bool has(const std::string& text, const std::string& words) { return text.find(words) != std::string::npos; }

GpuInfo gpu(const std::string& name, int major, int minor) { return {name, 0, major, minor, 0}; }

TEST(PrecisionChoice, AmpereHasNoFp8) {
  const ModelConfig cfg = ModelConfig::preset("llama3.2-1b");
  for (const GpuInfo& d : {gpu("NVIDIA A100-SXM4-80GB", 8, 0), gpu("NVIDIA GeForce RTX 3090", 8, 6)}) {
    const PrecisionChoice c = choose_precision(d, cfg, 8, 2048, true);
    EXPECT_FALSE(c.fp8) << d.name;
    EXPECT_TRUE(has(c.reason, "precision auto: bf16: " + d.name)) << c.reason;
    EXPECT_TRUE(has(c.reason, "has no FP8 tensor cores")) << c.reason;
  }
}

TEST(PrecisionChoice, AdaHopperAndBlackwellTakeFp8WithTheLmHead) {
  for (const char* preset : {"qwen2.5-0.5b", "llama3.2-1b"}) {
    const ModelConfig cfg = ModelConfig::preset(preset);
    for (const GpuInfo& d : {gpu("NVIDIA GeForce RTX 4090", 8, 9), gpu("NVIDIA L4", 8, 9),
                                     gpu("NVIDIA H200", 9, 0), gpu("NVIDIA GeForce RTX 5090", 12, 0),
                                     gpu("A GPU the table lacks", 8, 9)}) {
      const PrecisionChoice c = choose_precision(d, cfg, 8, 2048, true);
      EXPECT_TRUE(c.fp8 && c.lm_head) << preset << " on " << d.name << ": " << c.reason;
      EXPECT_TRUE(has(c.reason, "precision auto: fp8 (linears and LM head): " + d.name +
                                    " has FP8 tensor cores and every linear of this shape takes the FP8 path"))
          << c.reason;
    }
  }
}

TEST(PrecisionChoice, ShapesOffTheFp8PathStayBf16) {
  // 100 tokens a micro-batch: cuBLASLt's FP8 GEMMs need multiples of 16.
  const PrecisionChoice c =
      choose_precision(gpu("NVIDIA H200", 9, 0), ModelConfig::preset("llama3.2-1b"), 1, 100, true);
  EXPECT_FALSE(c.fp8);
  EXPECT_TRUE(has(c.reason, "precision auto: bf16: the linears of this shape do not take the FP8 path")) << c.reason;
  EXPECT_TRUE(has(c.reason, "100 tokens a micro-batch")) << c.reason;
  // The tiny preset's vocabulary (50257) keeps its LM head off the FP8 path, whatever the linears do.
  const PrecisionChoice tiny = choose_precision(gpu("NVIDIA H200", 9, 0), ModelConfig::preset("tiny"), 8, 256, true);
  EXPECT_FALSE(tiny.lm_head) << tiny.reason;
  if (tiny.fp8) EXPECT_TRUE(has(tiny.reason, "the vocabulary (50257) a multiple of 16")) << tiny.reason;
}

TEST(PrecisionChoice, TheCpuComputesInF32) {
  const PrecisionChoice c = choose_precision(std::nullopt, ModelConfig::preset("llama3.2-1b"), 8, 2048, true);
  EXPECT_FALSE(c.fp8);
  EXPECT_EQ(c.reason, "precision auto: f32 (the CPU backend computes in float32)");
}

TEST(PrecisionChoice, FlagsResolveToOnePrecision) {
  const ModelConfig cfg = ModelConfig::preset("llama3.2-1b");
  const GpuInfo h200 = gpu("NVIDIA H200", 9, 0);
  std::string note;
  auto resolve = [&](const std::string& precision, bool fp8, bool lm_head) {
    return resolve_precision(precision, fp8, "delayed", 1, lm_head, h200, cfg, 8, 2048, note);
  };
  EXPECT_EQ(std::string(kDefaultPrecision), "auto");  // what it picks passed the 300-step quality check
  EXPECT_TRUE(resolve("", false, false).fp8_lm_head());  // no --precision: the default, auto
  EXPECT_TRUE(has(note, "precision auto: fp8")) << note;
  EXPECT_FALSE(resolve("bf16", false, false).fp8);
  EXPECT_TRUE(note.empty());
  EXPECT_TRUE(resolve("bf16", true, false).fp8);  // --fp8 is precision fp8
  EXPECT_FALSE(resolve("fp8", false, false).lm_head);
  EXPECT_TRUE(resolve("fp8", false, true).fp8_lm_head());
  const MatmulPrecision chosen = resolve("auto", false, false);
  EXPECT_TRUE(chosen.fp8_lm_head());
  EXPECT_TRUE(chosen.delayed);
  EXPECT_TRUE(has(note, "precision auto: fp8")) << note;
  EXPECT_THROW(resolve("bf16", false, true), Error);  // --fp8-lm-head needs fp8
  EXPECT_THROW(resolve("fp16", false, false), Error);
  resolve_precision("auto", false, "delayed", 1, false, std::nullopt, cfg, 8, 2048, note);
  EXPECT_TRUE(has(note, "f32")) << note;
}

}  // namespace
}  // namespace tk
