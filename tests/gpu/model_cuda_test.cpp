// The whole model on the CUDA backend (bf16 activations, fp32 gradients) against the CPU reference (fp32)
// with the same weights and batch: the loss and every parameter tensor's gradient, for the three
// architectures at head dims 64 and 128, GQA, a sequence length that is not a power of two, and document
// masking. Also: two CUDA runs give bitwise the same loss and gradients, and a smaller batch than planned works.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/log.h"
#include "gpu_testing.h"
#include "model/model.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/device_info.h"
#include "plan/flag_values.h"
#include "plan/recipe.h"

namespace tk {
namespace {

// Relative error bounds that fit bf16 activations through a few layers (8 significant bits each,
// rounding at every op boundary): the loss is an average and much tighter than any one gradient.
constexpr double kLossTol = 5e-3;
constexpr double kGradTol = 4e-2;

ModelConfig config_for(Arch arch, int head_dim, int heads, int kv_heads) {
  ModelConfig c;
  c.name = "cuda-model-test";
  c.arch = arch;
  c.vocab_size = 1000 + 37;  // not a multiple of any tile
  c.head_dim = head_dim;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.d_model = arch == Arch::Qwen3 ? 256 : heads * head_dim;  // Qwen3's head_dim is free of the width
  c.n_layers = 3;
  c.ffn_dim = 704;
  c.max_seq = 1024;
  c.tied_embeddings = arch != Arch::Llama;
  c.qkv_bias = arch == Arch::Qwen2;
  c.qk_norm = arch == Arch::Qwen3;
  c.rope_theta = 10000.0;
  return c;
}

// Random tokens, each row one document unless document starts are given (the batch is then for document masking).
OwnedBatch random_batch(int B, int T, int V, uint64_t seed, const std::vector<std::vector<int32_t>>& doc_starts = {}) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, V - 1);
  std::vector<int32_t> tokens(size_t(B) * (T + 1));
  for (int32_t& t : tokens) t = token(rng);
  return OwnedBatch(B, T, tokens, doc_starts, !doc_starts.empty());
}

struct Result {
  LossSum loss;
  std::vector<float> grads;
};

Result run(Ops& ops, const ModelConfig& cfg, int B, int T, const std::vector<float>& params, const Batch& batch,
           bool doc_mask = false) {
  Model model(cfg, ops, {B, T, doc_mask});
  model.set_params_f32(params);
  model.zero_grads();
  Result r;
  r.loss = model.forward_backward(batch, 1.0f / float(int64_t(batch.B) * batch.T));
  r.grads = model.grads_f32();
  return r;
}

struct Case {
  std::string name;
  Arch arch;
  int head_dim, heads, kv_heads, B, T;
  std::vector<std::vector<int32_t>> doc_starts = {};  // per row; given: train with document masking
};

class ModelCuda : public ::testing::TestWithParam<Case> {};

TEST_P(ModelCuda, LossAndEveryGradientMatchTheCpuReference) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  const ModelConfig cfg = config_for(c.arch, c.head_dim, c.heads, c.kv_heads);
  auto cpu = make_cpu_ops(DType::F32);
  auto gpu = make_cuda_ops();

  // HF-like random weights, rounded to bf16 so that both backends start from the same values; norm
  // weights and biases made non-trivial so that their gradients and effects are exercised.
  std::vector<float> params;
  {
    Model init(cfg, *cpu, {1, 8, false});
    init.init_params(2024);
    params = init.params_f32();
  }
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<float> jitter(-0.2f, 0.2f);
  const ParamLayout layout = ParamLayout::build(cfg);
  for (const ParamInfo& e : layout.params) {
    const bool vector = e.shape.size() == 1;
    for (int64_t i = 0; i < e.numel; i++) {
      float& p = params[size_t(e.offset + i)];
      if (vector) p += jitter(rng);
      p = round_bf16(p);
    }
  }
  const OwnedBatch data = random_batch(c.B, c.T, cfg.vocab_size, 7, c.doc_starts);
  const bool doc_mask = !c.doc_starts.empty();
  const Result ref = run(*cpu, cfg, c.B, c.T, params, data.batch(), doc_mask);
  const Result out = run(*gpu, cfg, c.B, c.T, params, data.batch(), doc_mask);

  const double loss_err = std::abs(out.loss.mean() - ref.loss.mean()) / std::abs(ref.loss.mean());
  EXPECT_LT(loss_err, kLossTol) << "loss cuda " << out.loss.mean() << " cpu " << ref.loss.mean();
  double worst = 0;
  std::string worst_name;
  for (const ParamInfo& e : layout.params) {
    const double err = rel_error(&out.grads[size_t(e.offset)], &ref.grads[size_t(e.offset)], size_t(e.numel));
    EXPECT_LT(err, kGradTol) << "gradient of " << e.name;
    if (err > worst) worst = err, worst_name = e.name;
  }
  log::info("{}: loss {:.6f} vs {:.6f} (rel {:.2e}); worst gradient {} rel {:.2e}", c.name, out.loss.mean(),
           ref.loss.mean(), loss_err, worst_name, worst);

  // Bitwise determinism: the same step again on a fresh model.
  const Result again = run(*gpu, cfg, c.B, c.T, params, data.batch(), doc_mask);
  EXPECT_EQ(again.loss.sum, out.loss.sum);
  EXPECT_EQ(0, std::memcmp(again.grads.data(), out.grads.data(), out.grads.size() * sizeof(float)))
      << "two CUDA runs gave different gradients";
}

INSTANTIATE_TEST_SUITE_P(
    Archs, ModelCuda,
    ::testing::Values(Case{"llama_hd64_gqa4to1", Arch::Llama, 64, 8, 2, 2, 200},
                      Case{"qwen2_hd64_gqa7to1_bias_tied", Arch::Qwen2, 64, 14, 2, 3, 129},
                      Case{"qwen3_hd128_qknorm", Arch::Qwen3, 128, 4, 2, 2, 320},
                      Case{"llama_hd128_gqa4to1_T1000", Arch::Llama, 128, 8, 2, 1, 1000},
                      // Documents of 1 token, of a tile and more, a row of one document; T = 129 pads the
                      // mask's rows.
                      Case{"qwen2_hd64_gqa7to1_docmask", Arch::Qwen2, 64, 14, 2, 3, 200,
                           {{0, 1, 2, 60, 188}, {0}, {0, 128, 129, 150}}},
                      Case{"qwen3_hd128_qknorm_docmask_T129", Arch::Qwen3, 128, 4, 2, 2, 129,
                           {{0, 64, 65, 128}, {0, 100}}}),
    [](const auto& info) { return info.param.name; });

TEST(ModelCudaBatch, ASmallerBatchThanPlannedGivesWhatAModelPlannedForItGives) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  const ModelConfig cfg = config_for(Arch::Llama, 64, 8, 2);
  auto gpu = make_cuda_ops();
  std::vector<float> params;
  {
    Model init(cfg, *gpu, {1, 8, false});
    init.init_params(5);
    params = init.params_f32();
  }
  const OwnedBatch data = random_batch(2, 96, cfg.vocab_size, 3);
  const Result planned_small = run(*gpu, cfg, 2, 96, params, data.batch());
  const Result planned_big = run(*gpu, cfg, 4, 256, params, data.batch());
  EXPECT_EQ(planned_small.loss.sum, planned_big.loss.sum);
  EXPECT_EQ(0, std::memcmp(planned_small.grads.data(), planned_big.grads.data(), params.size() * sizeof(float)));
}

// --fp8 with delayed scaling (--fp8-scaling delayed): the first step scales as current scaling does, bitwise; after
// end_step the next step scales by the committed amax (so unlike current scaling on the same batch, and
// close to it); and that step is bitwise the same on another backend given the saved state (by parameter name, as
// a checkpoint's round trip gives it; the weights at other addresses) under every recompute policy.
TEST(ModelCudaFp8, DelayedScalingCarriesAcrossStepsPoliciesAndBackends) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  const ModelConfig cfg = config_for(Arch::Llama, 64, 8, 2);
  const int B = 2, T = 256;
  std::vector<float> params;
  {
    auto cpu = make_cpu_ops(DType::F32);
    Model init(cfg, *cpu, {1, 8, false});
    init.init_params(37);
    params = init.params_f32();
  }
  const OwnedBatch first = random_batch(B, T, cfg.vocab_size, 8), second = random_batch(B, T, cfg.vocab_size, 9);
  auto step = [&](Model& model, const Batch& batch) {
    model.zero_grads();
    Result r;
    r.loss = model.forward_backward(batch, 1.0f / float(B * T));
    r.grads = model.grads_f32();
    return r;
  };
  auto current = std::make_unique<CudaOps>(0);
  current->set_fp8(true, CudaOps::Fp8Scaling::Current);
  auto delayed = std::make_unique<CudaOps>(0);
  delayed->set_fp8(true, CudaOps::Fp8Scaling::Delayed);
  Model model(cfg, *delayed, {B, T, false});
  model.set_params_f32(params);
  delayed->name_weights(named_weights(model));  // the state is kept by parameter name

  const Result d1 = step(model, first.batch()), c1 = run(*current, cfg, B, T, params, first.batch());
  EXPECT_EQ(d1.loss.sum, c1.loss.sum);
  EXPECT_EQ(0, std::memcmp(d1.grads.data(), c1.grads.data(), c1.grads.size() * sizeof(float)))
      << "the first delayed step is not current scaling";
  delayed->end_step();
  const Ops::Fp8ScalingState state = delayed->fp8_scaling_state();
  EXPECT_EQ(state.steps, 1);
  EXPECT_EQ(state.history_len, CudaOps::kFp8HistoryLen);
  EXPECT_EQ(state.amax.size(), size_t(4 * cfg.n_layers)) << "one entry per linear layer";
  EXPECT_EQ(state.amax.count("model.layers.0.self_attn.q_proj.weight"), 1u) << "the fused qkv weight by its first name";
  for (const auto& [name, amax] : state.amax)
    for (int r = 0; r < 3; r++) {
      ASSERT_EQ(amax.size(), size_t(3 * state.history_len + 3)) << name;
      EXPECT_EQ(amax[size_t(3 * state.history_len + r)], 0.f) << name << " operand " << r << ": seen after the commit";
      EXPECT_GT(amax[size_t(r * state.history_len)], 0.f) << name << " operand " << r << ": no amax recorded";
      EXPECT_EQ(amax[size_t(r * state.history_len + 1)], 0.f) << name << " operand " << r << ": a second step recorded";
    }

  const Result d2 = step(model, second.batch()), c2 = run(*current, cfg, B, T, params, second.batch());
  EXPECT_NE(0, std::memcmp(d2.grads.data(), c2.grads.data(), c2.grads.size() * sizeof(float)))
      << "the second step scaled as current scaling does: the history was not used";
  EXPECT_LT(std::abs(d2.loss.mean() - c2.loss.mean()) / std::abs(c2.loss.mean()), 1e-2);
  // Two FP8 roundings of the same step (each within FP8's bounds of the exact one: ModelCudaFp8 above).
  EXPECT_LT(rel_error(d2.grads.data(), c2.grads.data(), d2.grads.size()), 0.3);

  // The saved state on another backend whose model's weights are named there (as make_model names them).
  auto restore = [&](CudaOps& ops, Model& again) {
    ops.name_weights(named_weights(again));
    ops.set_fp8_scaling_state(state);
  };
  for (const char* policy : {"none", "block", "norm,swiglu", "attention,qkv"}) {
    auto fresh = std::make_unique<CudaOps>(0);
    fresh->set_fp8(true, CudaOps::Fp8Scaling::Delayed);
    ModelOptions o{B, T, false};
    o.recompute = parse_recompute(policy);
    Model again(cfg, *fresh, o);
    again.set_params_f32(params);
    restore(*fresh, again);
    const Result r = step(again, second.batch());
    EXPECT_EQ(r.loss.sum, d2.loss.sum) << policy;
    EXPECT_EQ(0, std::memcmp(r.grads.data(), d2.grads.data(), d2.grads.size() * sizeof(float)))
        << policy << ": the restored state did not give the same step";
  }

  // SwiGLU's gradient cast to FP8 as it is computed (the default) gives bitwise the step of swiglu_backward and
  // the linear's cast apart.
  {
    EXPECT_GE(delayed->fp8_fused_casts(), int64_t(cfg.n_layers)) << "the second step did not take the fused cast";
    auto apart = std::make_unique<CudaOps>(0);
    apart->set_fp8(true, CudaOps::Fp8Scaling::Delayed);
    apart->set_fp8_fusion(false);
    Model again(cfg, *apart, {B, T, false});
    again.set_params_f32(params);
    restore(*apart, again);
    const Result r = step(again, second.batch());
    EXPECT_EQ(apart->fp8_fused_casts(), 0);
    EXPECT_EQ(r.loss.sum, d2.loss.sum);
    EXPECT_EQ(0, std::memcmp(r.grads.data(), d2.grads.data(), d2.grads.size() * sizeof(float)))
        << "the fused cast did not give the step of the casts apart";
  }

  // The norms' and SwiGLU's outputs kept only as their linears' one-byte x^T (ModelOptions::fp8_kept_inputs, as the
  // trainer sets it with delayed scaling): the first step (no history: the casts from bf16 scratch) and the second
  // (the fused casts) bitwise those of the bf16-sized activations.
  {
    auto kept_ops = std::make_unique<CudaOps>(0);
    kept_ops->set_fp8(true, CudaOps::Fp8Scaling::Delayed);
    ModelOptions o{B, T, false};
    o.fp8_kept_inputs = true;
    for (const char* which : {"x_attn", "x_mlp", "act"}) ASSERT_TRUE(kept_fp8_input(cfg, o, which)) << which;
    Model kept(cfg, *kept_ops, o);
    kept.set_params_f32(params);
    const Result k1 = step(kept, first.batch());
    EXPECT_EQ(k1.loss.sum, d1.loss.sum);
    EXPECT_EQ(0, std::memcmp(k1.grads.data(), d1.grads.data(), d1.grads.size() * sizeof(float)))
        << "the first step with one-byte inputs differs";
    kept_ops->end_step();
    const Result k2 = step(kept, second.batch());
    EXPECT_EQ(k2.loss.sum, d2.loss.sum);
    EXPECT_EQ(0, std::memcmp(k2.grads.data(), d2.grads.data(), d2.grads.size() * sizeof(float)))
        << "the second step with one-byte inputs differs";
    // Without FP8 fusion a one-byte activation has no path: a clear error, not a write past it.
    kept_ops->set_fp8_fusion(false);
    EXPECT_THROW(step(kept, first.batch()), Error);
  }

  // What the casts have seen since the last commit (an evaluation between two steps, here the second step) is
  // part of the state too: committed on another backend, it gives the same histories.
  const Ops::Fp8ScalingState mid = delayed->fp8_scaling_state();
  auto other = std::make_unique<CudaOps>(0);
  other->set_fp8(true, CudaOps::Fp8Scaling::Delayed);
  other->name_weights(named_weights(model));
  other->set_fp8_scaling_state(mid);
  delayed->end_step();
  other->end_step();
  const Ops::Fp8ScalingState committed = delayed->fp8_scaling_state();
  EXPECT_EQ(committed.amax, other->fp8_scaling_state().amax);
  for (const auto& [name, amax] : committed.amax)
    EXPECT_GT(amax[1], 0.f) << name << ": the second step's x amax was not committed";
}

// ZeRO 3's parameters on one GPU: every unit gathered, in turn, into one of two buffers the units share (as
// DataParallel gathers them, here from a whole copy on the same device).
class TwoSharedBuffers final : public ParameterSource {
 public:
  TwoSharedBuffers(Ops& ops, const Model& whole) : ops_(ops), whole_(whole) {
    int64_t largest = 0;
    for (size_t k = 0; k < whole.layout().units(); k++) largest = std::max(largest, whole.layout().unit_size(k));
    for (Tensor& t : buffers_) t = Tensor(ops.allocate(size_t(largest) * 2, "test: gathered unit"), DType::BF16, {largest});
  }
  ~TwoSharedBuffers() override {
    ops_.synchronize();
    for (Tensor& t : buffers_) ops_.release(t.data);
  }
  Tensor gather_unit(size_t unit) override {
    next_ = 1 - next_;
    const int64_t n = whole_.layout().unit_size(unit);
    const char* from = static_cast<const char*>(whole_.params().data) + size_t(whole_.layout().unit_begin[unit]) * 2;
    ops_.copy_async(buffers_[next_].data, from, size_t(n) * 2, Ops::Queue::compute);
    return buffers_[next_].rows(0, n);
  }

 private:
  Ops& ops_;
  const Model& whole_;
  Tensor buffers_[2];
  int next_ = 0;
};

// FP8 delayed scaling with sharded parameters (ZeRO 3): the weights pass through buffers the units share, yet each
// keeps its own scales and history (Ops::alias_weights, Model::weight_identities), so steps are bitwise those of
// the whole model and the saved state names the same weights with the same values.
TEST(ModelCudaFp8, ShardedParametersKeepTheirScalesPerWeight) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  const ModelConfig cfg = config_for(Arch::Llama, 64, 8, 2);
  const int B = 2, T = 256;
  ModelOptions whole_options{B, T, false};
  whole_options.unit_multiple = 128;
  ModelOptions sharded_options = whole_options;
  sharded_options.param_shards = 2;  // this rank holds half of each unit; the source gathers the whole
  std::vector<float> params;
  {
    auto cpu = make_cpu_ops(DType::F32);
    Model init(cfg, *cpu, whole_options);
    init.init_params(41);
    params = init.params_f32();
  }
  auto plain_ops = std::make_unique<CudaOps>(0), sharded_ops = std::make_unique<CudaOps>(0);
  for (CudaOps* ops : {plain_ops.get(), sharded_ops.get()}) ops->set_fp8(true, CudaOps::Fp8Scaling::Delayed);
  Model plain(cfg, *plain_ops, whole_options);
  plain.set_params_f32(params);
  plain_ops->name_weights(named_weights(plain));
  Model store(cfg, *sharded_ops, whole_options);  // the whole weights the gathers copy from (not named)
  store.set_params_f32(params);
  Model sharded(cfg, *sharded_ops, sharded_options);
  ASSERT_TRUE(sharded.params_sharded());
  TwoSharedBuffers source(*sharded_ops, store);
  sharded.set_parameter_source(&source);
  sharded_ops->name_weights(named_weights(sharded));

  for (uint64_t seed : {11, 12, 13}) {
    const OwnedBatch batch = random_batch(B, T, cfg.vocab_size, seed);
    const LossSum a = plain.forward_backward(batch.batch(), 1.0f / float(B * T));
    const LossSum b = sharded.forward_backward(batch.batch(), 1.0f / float(B * T));
    EXPECT_EQ(a.sum, b.sum) << "step of seed " << seed;
    plain_ops->end_step();
    sharded_ops->end_step();
  }
  const Ops::Fp8ScalingState p = plain_ops->fp8_scaling_state(), s = sharded_ops->fp8_scaling_state();
  EXPECT_EQ(s.amax.size(), size_t(4 * cfg.n_layers)) << "one entry per linear layer, as the whole model's";
  EXPECT_EQ(p.amax, s.amax) << "the sharded model's weights shared their scales";
  EXPECT_EQ(p.steps, s.steps);
  const std::vector<float> plain_grads = plain.grads_f32(), sharded_grads = sharded.grads_f32();
  EXPECT_EQ(0, std::memcmp(plain_grads.data(), sharded_grads.data(), plain_grads.size() * sizeof(float)));
}

}  // namespace
}  // namespace tk

namespace tk {
namespace {

// On CUDA too, recomputing gives bitwise the loss and gradients of keeping everything: the recomputation
// repeats the forward's kernels on the same inputs (RMSNorm normalises the rounded residual either way).
TEST(ModelCudaRecompute, EveryPolicyGivesBitwiseTheSameGradients) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (Arch arch : {Arch::Llama, Arch::Qwen3}) {
    const ModelConfig cfg = config_for(arch, 64, 8, 2);
    auto gpu = make_cuda_ops();
    const OwnedBatch data = random_batch(2, 256, cfg.vocab_size, 17);
    std::vector<float> params;
    {
      Model init(cfg, *gpu, {1, 8, false});
      init.init_params(23);
      params = init.params_f32();
    }
    auto run_policy = [&](const char* policy) {
      ModelOptions o{2, 256, false};
      o.recompute = parse_recompute(policy);
      Model model(cfg, *gpu, o);
      model.set_params_f32(params);
      model.zero_grads();
      Result r;
      r.loss = model.forward_backward(data.batch(), 1.0f / 512);
      r.grads = model.grads_f32();
      return r;
    };
    const Result none = run_policy("none");
    for (const char* policy : {"norm", "swiglu", "attention", "qkv", "block", "norm,swiglu,attention,qkv"}) {
      const Result r = run_policy(policy);
      EXPECT_EQ(r.loss.sum, none.loss.sum) << policy;
      EXPECT_EQ(0, std::memcmp(r.grads.data(), none.grads.data(), none.grads.size() * sizeof(float)))
          << policy << " changed the gradients";
    }
  }
}

// --fp8: the whole model with FP8 linears against the CPU reference, within FP8's bounds (each linear's operands
// rounded to 3 or 2 mantissa bits: a few percent per GEMM, averaged in the loss); unlike the bf16 run; bitwise
// repeatable; and every recompute policy bitwise the same (a recomputed operand has the same maximum, so the
// same scale).
TEST(ModelCudaFp8, CloseToTheReferenceDeterministicAndRecomputeInvariant) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (Arch arch : {Arch::Llama, Arch::Qwen2}) {
    const ModelConfig cfg = config_for(arch, 64, 8, 2);
    const int B = 2, T = 256;
    auto cpu = make_cpu_ops(DType::F32);
    auto bf16 = make_cuda_ops();
    auto fp8 = std::make_unique<CudaOps>(0);
    fp8->set_fp8(true);
    std::vector<float> params;
    {
      Model init(cfg, *cpu, {1, 8, false});
      init.init_params(31);
      params = init.params_f32();
      for (float& p : params) p = round_bf16(p);
    }
    const OwnedBatch data = random_batch(B, T, cfg.vocab_size, 5);
    const Result ref = run(*cpu, cfg, B, T, params, data.batch());
    const Result plain = run(*bf16, cfg, B, T, params, data.batch());
    const Result out = run(*fp8, cfg, B, T, params, data.batch());
    const double loss_err = std::abs(out.loss.mean() - ref.loss.mean()) / std::abs(ref.loss.mean());
    EXPECT_LT(loss_err, 2e-2) << "loss fp8 " << out.loss.mean() << " cpu " << ref.loss.mean();
    const ParamLayout layout = ParamLayout::build(cfg);
    double worst = 0;
    std::string worst_name;
    for (const ParamInfo& e : layout.params) {
      const double err = rel_error(&out.grads[size_t(e.offset)], &ref.grads[size_t(e.offset)], size_t(e.numel));
      EXPECT_LT(err, 0.3) << "gradient of " << e.name;
      if (err > worst) worst = err, worst_name = e.name;
    }
    log::info("fp8 {}: loss {:.6f} vs {:.6f} (rel {:.2e}); worst gradient {} rel {:.2e}", int(arch), out.loss.mean(),
              ref.loss.mean(), loss_err, worst_name, worst);
    EXPECT_NE(0, std::memcmp(plain.grads.data(), out.grads.data(), out.grads.size() * sizeof(float)))
        << "--fp8 changed nothing: the FP8 path did not run";

    const Result again = run(*fp8, cfg, B, T, params, data.batch());
    EXPECT_EQ(again.loss.sum, out.loss.sum);
    EXPECT_EQ(0, std::memcmp(again.grads.data(), out.grads.data(), out.grads.size() * sizeof(float)))
        << "two FP8 runs gave different gradients";
    for (const char* policy : {"norm,swiglu", "attention,qkv", "block"}) {
      ModelOptions o{B, T, false};
      o.recompute = parse_recompute(policy);
      Model model(cfg, *fp8, o);
      model.set_params_f32(params);
      model.zero_grads();
      const LossSum loss = model.forward_backward(data.batch(), 1.0f / float(B * T));
      const std::vector<float> grads = model.grads_f32();
      EXPECT_EQ(loss.sum, out.loss.sum) << policy;
      EXPECT_EQ(0, std::memcmp(grads.data(), out.grads.data(), grads.size() * sizeof(float)))
          << policy << " changed the FP8 gradients";
    }
  }
}

}  // namespace
}  // namespace tk
