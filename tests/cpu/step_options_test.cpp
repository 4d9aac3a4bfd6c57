// StepOptions: one validation for the flags and the config file alike (sizes, overflowing global batches,
// enumerations, non-finite numbers), one recipe builder for train, bench, profile and plan, the FP8 margin carried into
// the plan's FP8 candidates, and a config value its field cannot hold refused rather than cut.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "plan/flag_values.h"
#include "plan/memory_plan.h"
#include "plan/step_options.h"
#include "train/train_config.h"

namespace tk {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& words) { return text.find(words) != std::string::npos; }

TEST(StepOptions, TheDefaultsAreValid) {
  EXPECT_EQ(error_of([] { check_step_options(StepOptions{}); }), "");
  EXPECT_EQ(error_of([] { check_train_config(TrainConfig{}); }), "");
}

TEST(StepOptions, EachBadValueIsNamedByItsFlag) {
  auto refused = [](auto change, const std::string& words) {
    StepOptions o;
    change(o);
    const std::string e = error_of([&] { check_step_options(o); });
    EXPECT_TRUE(has(e, words)) << "expected '" << words << "', got '" << e << "'";
  };
  refused([](StepOptions& o) { o.batch = 0; }, "--batch must be at least 1, not 0");
  refused([](StepOptions& o) { o.seq = -4; }, "--seq must be at least 1");
  refused([](StepOptions& o) { o.logits_chunk_mib = 65537; }, "--logits-chunk must be 0 to 65536");
  refused([](StepOptions& o) { o.fp8_margin = 9; }, "--fp8-margin must be 0 to 8, not 9");
  refused([](StepOptions& o) { o.zero = 4; }, "--zero 4");
  refused([](StepOptions& o) { o.device = "tpu"; }, "--device must be one of auto, cpu, cuda, not 'tpu'");
  refused([](StepOptions& o) { o.precision = "fp4"; }, "--precision must be one of auto, bf16, fp8");
  refused([](StepOptions& o) { o.fp8 = true, o.precision = "bf16"; }, "contradicts --precision bf16");
  refused([](StepOptions& o) { o.fp8_lm_head = true; }, "it needs --fp8");
  refused([](StepOptions& o) { o.offload = "disk"; }, "--offload must be none, optimizer or optimizer,gradients");
  refused([](StepOptions& o) { o.recompute = "all"; }, "unknown recompute policy 'all'");
  refused([](StepOptions& o) { o.moments = "fp4"; }, "--moments must be f32, bf16 or int8, not 'fp4'");
  refused([](StepOptions& o) { o.peak_tflops = std::nan(""); }, "--peak-tflops must be a finite number");
  refused([](StepOptions& o) { o.peak_tflops = INFINITY; }, "--peak-tflops must be a finite number");
  refused([](StepOptions& o) { o.memory_budget = "lots"; }, "lots");
  refused([](StepOptions& o) { o.seed = uint64_t(1) << 63; }, "--seed");
}

// Sizes derived from the flags never wrap: a global batch whose count of micro-batches an int cannot hold, or that is
// no whole number of micro-batches, is refused, not trained as a step of -1 or 1 micro-batch.
TEST(StepOptions, GlobalBatchesThatOverflowAreRefused) {
  StepOptions o;
  o.batch = 1;
  o.seq = 32;
  o.batch_tokens = 9223372036854775776;  // -1 micro-batches once cut to an int
  EXPECT_TRUE(has(error_of([&] { check_step_options(o); }), "a step can take"));
  o.batch_tokens = 137438953504;  // 4,294,967,297 micro-batches of 32: 1 once cut to an int
  EXPECT_TRUE(has(error_of([&] { check_step_options(o); }), "a step can take"));
  o.batch_tokens = 100;
  EXPECT_TRUE(has(error_of([&] { check_step_options(o); }), "is not a multiple of the micro-batch's 32 tokens"));
  o.batch_tokens = 128;
  EXPECT_EQ(accumulation_steps(o, 1), 4);
  EXPECT_EQ(accumulation_steps(o, 2), 2);
  EXPECT_TRUE(has(error_of([&] { accumulation_steps(o, 3); }), "which 3 ranks cannot share equally"));
  o.batch_tokens = 0;  // one micro-batch on each rank
  EXPECT_EQ(global_batch_tokens(o, 4), 128);
  EXPECT_EQ(accumulation_steps(o, 4), 1);
}

TEST(StepOptions, RunOptionsThatNoRunCanHaveAreRefused) {
  auto refused = [](auto change, const std::string& words) {
    TrainConfig c;
    change(c);
    const std::string e = error_of([&] { check_train_config(c); });
    EXPECT_TRUE(has(e, words)) << "expected '" << words << "', got '" << e << "'";
  };
  refused([](TrainConfig& c) { c.grad_clip = std::nan(""); }, "--grad-clip must be a finite number");
  refused([](TrainConfig& c) { c.adam_eps = INFINITY; }, "--adam-eps must be a finite number");
  refused([](TrainConfig& c) { c.weight_decay = INFINITY; }, "--weight-decay must be a finite number");
  refused([](TrainConfig& c) { c.adam_eps = 0; }, "--adam-eps must be above 0");
  refused([](TrainConfig& c) { c.beta2 = 1; }, "--beta1 and --beta2 must be in [0, 1)");
  refused([](TrainConfig& c) { c.save_every = -2; }, "--save-every");
  refused([](TrainConfig& c) { c.schedule = "sideways"; }, "unknown learning-rate schedule 'sideways'");
  refused([](TrainConfig& c) { c.batch = 0; }, "--batch must be at least 1");  // and the step's own checks
}

// One builder: the recipe of the same options is the same for every command, and carries each setting.
TEST(StepOptions, TheRecipeCarriesEverySetting) {
  StepOptions o;
  o.batch = 4;
  o.seq = 512;
  o.batch_tokens = 8192;
  o.doc_mask = true;
  o.recompute = "swiglu,norm";
  o.offload = "optimizer";
  o.offload_chunk = 4096;
  o.moments = "int8";
  o.zero = 2;
  o.precision = "fp8";
  o.fp8_scaling = "current";
  o.fp8_margin = 3;
  o.fp8_lm_head = true;
  o.logits_chunk_mib = 256;
  o.gemm_tuning = false;
  const ModelConfig qwen = ModelConfig::preset("qwen2.5-0.5b");
  const Recipe r = make_recipe(o, qwen, true, std::nullopt, 2);
  EXPECT_EQ(r.batch, 4);
  EXPECT_EQ(r.seq, 512);
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.accumulation, 2);  // 8,192 tokens over 2 ranks of 2,048-token micro-batches
  EXPECT_TRUE(r.doc_mask);
  EXPECT_EQ(r.recompute.describe(), "norm,swiglu");
  EXPECT_EQ(r.offload_name(), "optimizer");
  EXPECT_EQ(r.optimizer.offload_chunk, 4096);
  EXPECT_EQ(r.optimizer.moments, MomentPrecision::Int8);
  EXPECT_EQ(r.zero_stage, 2);
  EXPECT_TRUE(r.backend.precision.fp8);
  EXPECT_FALSE(r.backend.precision.delayed);
  EXPECT_EQ(r.backend.precision.margin, 3);
  EXPECT_TRUE(r.backend.precision.fp8_lm_head());
  EXPECT_EQ(r.logits_chunk_bytes(), size_t(256) << 20);
  EXPECT_FALSE(r.backend.gemm_tuning);
  o.zero = -1;  // not given: stage 0 unless a budget search chooses
  EXPECT_EQ(make_recipe(o, qwen, true, std::nullopt, 2).zero_stage, 0);
}

// The plan's FP8 candidates take --fp8-margin as the run would (they were planned at margin 1 whatever was given).
TEST(StepOptions, ThePlansFp8CandidatesKeepTheMargin) {
  StepOptions o;
  o.precision = "bf16";
  o.fp8_margin = 4;
  o.seq = 2048;
  const Recipe base = make_recipe(o, ModelConfig::preset("qwen2.5-0.5b"), true, std::nullopt);
  PlanTarget target;
  target.try_fp8 = true;
  int fp8_candidates = 0;
  for (const MemoryPlan& p : plan_candidates(base, base.micro_tokens(), target))
    if (p.recipe.backend.precision.fp8) {
      fp8_candidates++;
      EXPECT_EQ(p.recipe.backend.precision.margin, 4);
    }
  EXPECT_GT(fp8_candidates, 0);
}

// A config file's value goes into its field exactly, or is refused: an int flag cannot hold 4294967298, which
// nlohmann's conversion would cut to 2.
TEST(StepOptions, ValuesThatDoNotFitTheirFieldAreRefused) {
  for (const char* key : {"batch", "seq", "vocab_size", "keep_checkpoints"}) {
    SCOPED_TRACE(key);
    nlohmann::json j = TrainConfig().to_json();
    j[key] = 4294967298ll;
    EXPECT_TRUE(has(error_of([&] { TrainConfig::from_json(j); }), std::string(key) + " = 4294967298 does not fit"));
  }
  nlohmann::json j = TrainConfig().to_json();
  j["seed"] = -1;
  EXPECT_TRUE(has(error_of([&] { TrainConfig::from_json(j); }), "seed = -1 does not fit"));
  j = TrainConfig().to_json();
  j["lr"] = 1e-3;
  j["batch"] = 16;
  const TrainConfig c = TrainConfig::from_json(j);
  EXPECT_EQ(c.lr, 1e-3);
  EXPECT_EQ(c.batch, 16);
}

}  // namespace
}  // namespace tk
