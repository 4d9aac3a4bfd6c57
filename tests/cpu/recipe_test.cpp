// The recipe: train's flags give each part its settings (the Model's options, AdamW's, the backend's), the flags
// that name no setting are refused, a model is built with its weights named to the backend, and FP8 delayed
// scaling's state goes to and from a checkpoint's JSON by parameter name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/error.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/cpu/cpu_ops.h"
#include "plan/recipe.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tk {
namespace {

// --precision: auto by default, with its line (on the CPU: f32), bf16 as asked, fp8 as --fp8.
TEST(Recipe, PrecisionFlagsGiveTheBackendsPrecision) {
  TrainConfig c;
  const ModelConfig qwen = ModelConfig::preset("qwen2.5-0.5b");
  EXPECT_EQ(c.precision, "auto");
  Recipe r = train_recipe(c, qwen, false);
  EXPECT_FALSE(r.backend.precision.fp8);
  EXPECT_EQ(r.precision_note, "precision auto: f32 (the CPU backend computes in float32)");
  c.precision = "bf16";
  r = train_recipe(c, qwen, false);
  EXPECT_FALSE(r.backend.precision.fp8);
  EXPECT_EQ(r.precision_note, "precision bf16: the CPU backend computes in float32 (bf16 is the CUDA backend's)")
      << "not a float32 run without a word";
  r = train_recipe(c, qwen, true);
  EXPECT_TRUE(r.precision_note.empty()) << "bf16 on a GPU is what was asked";
  c.precision = "fp8";
  c.fp8_lm_head = true;
  r = train_recipe(c, qwen, true);
  EXPECT_TRUE(r.backend.precision.fp8_lm_head());
  EXPECT_EQ(r.zero_stage, 0);
  EXPECT_EQ(r.world_size, 1);
}

TEST(Recipe, TrainFlagsGiveEachPartItsSettings) {
  TrainConfig c;
  c.batch = 4;
  c.seq = 512;
  c.batch_tokens = 4096;
  c.doc_mask = true;
  c.recompute = "norm,swiglu";
  c.offload = "optimizer,gradients";
  c.offload_chunk = 4096;
  c.moments = "bf16";
  c.beta2 = 0.99;
  c.fp8 = true;
  c.fp8_margin = 2;
  c.fp8_lm_head = true;
  c.logits_chunk_mib = 1024;
  c.gemm_tuning = false;
  const ModelConfig qwen = ModelConfig::preset("qwen2.5-0.5b");  // d 896, ffn 4864, qkv 1152: FP8's shapes
  const Recipe r = train_recipe(c, qwen, true);
  EXPECT_EQ(r.accumulation, 2);
  EXPECT_EQ(r.offload_name(), "optimizer,gradients");

  const ModelOptions mo = r.model_options();
  EXPECT_EQ(mo.B, 4);
  EXPECT_EQ(mo.T, 512);
  EXPECT_TRUE(mo.doc_mask);
  EXPECT_EQ(mo.recompute.describe(), "norm,swiglu");
  EXPECT_TRUE(mo.offload_grads);
  EXPECT_TRUE(mo.fp8_kept_inputs) << "delayed scaling (the default) on the GPU at FP8's shapes";

  const AdamWOptions& ao = r.adamw_options();
  EXPECT_EQ(ao.beta2, 0.99);
  EXPECT_EQ(ao.moments, MomentPrecision::BF16);
  EXPECT_TRUE(ao.offload);
  EXPECT_EQ(ao.offload_chunk, 4096);

  const BackendOptions& b = r.backend;
  EXPECT_TRUE(b.precision.fp8);
  EXPECT_TRUE(b.precision.delayed);
  EXPECT_EQ(b.precision.margin, 2);
  EXPECT_TRUE(b.precision.fp8_lm_head());
  EXPECT_FALSE(b.gemm_tuning);
  EXPECT_EQ(b.logits_chunk_bytes, size_t(1) << 30);
  EXPECT_TRUE(r.lm_head_fp8_shapes());  // 2,048 tokens, d 896, V 151,936

  // The CPU keeps no FP8 input; current scaling fuses no cast.
  EXPECT_FALSE(train_recipe(c, qwen, false).model_options().fp8_kept_inputs);
  c.fp8_scaling = "current";
  EXPECT_FALSE(train_recipe(c, qwen, true).model_options().fp8_kept_inputs);
  // The logits chunk defaults to the backend's.
  c.logits_chunk_mib = 0;
  EXPECT_EQ(train_recipe(c, qwen, true).logits_chunk_bytes(), size_t(512) << 20);
}

TEST(Recipe, FlagsThatNameNoSettingAreRefused) {
  const ModelConfig tiny = ModelConfig::preset("tiny");
  auto refused = [&](auto change, const std::string& what) {
    TrainConfig c;
    change(c);
    try {
      train_recipe(c, tiny, true);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused([](TrainConfig& c) { c.offload = "disk"; }, "--offload must be none, optimizer or optimizer,gradients");
  refused([](TrainConfig& c) { c.fp8_lm_head = true; }, "needs --fp8");
  refused([](TrainConfig& c) { c.fp8 = true, c.fp8_scaling = "sometimes"; },
          "--fp8-scaling must be one of delayed, current, not 'sometimes'");
  refused([](TrainConfig& c) { c.fp8 = true, c.fp8_margin = 9; }, "--fp8-margin must be 0 to 8, not 9");
  refused([](TrainConfig& c) { c.moments = "fp4"; }, "fp4");
}

// FP8 on the CPU backend is refused when the settings are applied, naming what it needs.
TEST(Recipe, Fp8OnTheCpuBackendIsRefused) {
  auto cpu = make_cpu_ops(DType::F32);
  BackendOptions s;
  s.precision.fp8 = true;
  EXPECT_THROW(configure_backend(*cpu, s), Error);
  s.precision.fp8 = false;
  s.gemm_tuning = true;
  s.logits_chunk_bytes = size_t(1) << 30;
  EXPECT_NO_THROW(configure_backend(*cpu, s)) << "the CPU has nothing to tune";
}

// make_model names every parameter where the ops find it: the backend keeps per-weight state by these names.
TEST(Recipe, TheModelsWeightsAreNamedWhereTheOpsFindThem) {
  auto cpu = make_cpu_ops(DType::F32);
  Recipe r;
  r.model = ModelConfig::preset("tiny");
  r.gpu = false;
  r.batch = 2;
  r.seq = 16;
  const std::unique_ptr<Model> model = make_model(r, *cpu);
  const std::vector<Ops::NamedWeight> named = named_weights(*model);
  const ParamLayout& layout = model->layout();
  ASSERT_EQ(named.size(), layout.params.size());
  for (size_t i = 0; i < named.size(); i++) {
    EXPECT_EQ(named[i].name, layout.params[i].name);
    EXPECT_EQ(named[i].weight.data, model->params().as<float>() + layout.params[i].offset) << named[i].name;
    EXPECT_EQ(named[i].weight.numel(), layout.params[i].numel) << named[i].name;
  }
}

// The checkpoint's "fp8_scaling" by parameter name: a round trip, the form older checkpoints hold, a name the model
// does not have, and nothing at all.
TEST(CheckpointFp8Scaling, GoesToAndFromJsonByParameterName) {
  const ParamLayout layout = ParamLayout::build(ModelConfig::preset("tiny"));
  Ops::Fp8ScalingState st;
  st.history_len = 16;
  st.steps = 3;
  st.amax["model.layers.0.mlp.down_proj.weight"] = std::vector<float>(51, 0.5f);
  st.amax["model.layers.1.self_attn.q_proj.weight"] = std::vector<float>(51, 0.25f);
  const nlohmann::json j = fp8_scaling_json(st);
  const Ops::Fp8ScalingState back = fp8_scaling_from_json(j, layout, "test");
  EXPECT_EQ(back.history_len, 16);
  EXPECT_EQ(back.steps, 3);
  EXPECT_EQ(back.amax, st.amax);

  const nlohmann::json saved = nlohmann::json::parse(
      R"({"amax": {"model.layers.0.mlp.down_proj.weight": [1.5, 0.25, 3.0]}, "history_len": 16, "steps": 7})");
  EXPECT_EQ(fp8_scaling_json(fp8_scaling_from_json(saved, layout, "test")).dump(), saved.dump());

  nlohmann::json other = j;
  other["amax"]["model.layers.9.mlp.up_proj.weight"] = std::vector<float>(51, 1.f);
  EXPECT_THROW(fp8_scaling_from_json(other, layout, "test"), Error);
  EXPECT_TRUE(fp8_scaling_json(Ops::Fp8ScalingState()).is_null());
  EXPECT_TRUE(fp8_scaling_from_json(nullptr, layout, "test").amax.empty());
}

}  // namespace
}  // namespace tk
