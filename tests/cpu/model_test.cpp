// Model on the CPU backend (float32): it memorises a short repeated sequence with AdamW; document
// masking makes a packed row equal its documents run apart; smaller batches than planned give what a
// model planned for them gives; gradients accumulate; initialisation is deterministic and HF-like;
// bad tokens are refused.
#include <cstring>
#include <map>
#include <cmath>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/model.h"
#include "ops/cpu/cpu_ops.h"
#include "plan/flag_values.h"

namespace tk {
namespace {

ModelConfig small_config(Arch arch = Arch::Llama) {
  ModelConfig c;
  c.name = "model-test";
  c.arch = arch;
  c.vocab_size = 53;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_dim = 64;
  c.max_seq = 64;
  c.tied_embeddings = arch != Arch::Llama;
  c.qkv_bias = arch == Arch::Qwen2;
  c.qk_norm = arch == Arch::Qwen3;
  return c;
}

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, V - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = token(rng);
  return ids;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); i++) {
    diff2 += double(a[i] - b[i]) * double(a[i] - b[i]);
    ref2 += double(b[i]) * double(b[i]);
  }
  return std::sqrt(diff2 / ref2);
}

TEST(Model, MemorisesARepeatedSequenceWithAdamW) {
  const ModelConfig cfg = small_config(Arch::Qwen3);
  const int B = 2, T = 24;
  auto ops = make_cpu_ops(DType::F32);
  Model model(cfg, *ops, {B, T, false});
  model.init_params(7);
  // A period-6 pattern of distinct tokens: each token determines the next one.
  const std::vector<int32_t> pattern = {11, 42, 3, 29, 50, 17};
  std::vector<int32_t> ids;
  for (int i = 0; i < B * (T + 1); i++) ids.push_back(pattern[(i + i / (T + 1)) % pattern.size()]);
  OwnedBatch data(B, T, ids);

  const int64_t P = model.layout().total;
  Tensor m(ops->allocate(P * sizeof(float)), DType::F32, {P}), v(ops->allocate(P * sizeof(float)), DType::F32, {P});
  ops->zero(m);
  ops->zero(v);
  AdamWConfig adam;
  adam.lr = 1e-2f;
  adam.weight_decay = 0.0f;
  const auto segments = model.layout().segments();
  double first = 0, last = 0;
  for (int step = 1; step <= 150; step++) {
    model.zero_grads();
    LossSum loss = model.forward_backward(data.batch(), 1.0f / float(B * T));
    if (step == 1) first = loss.mean();
    last = loss.mean();
    adam.step = step;
    ops->adamw_update(model.params(), Tensor(), model.grads(), m, v, Tensor(), Tensor(), segments, adam);
  }
  EXPECT_NEAR(first, std::log(double(cfg.vocab_size)), 0.5);  // starts near uniform
  EXPECT_LT(last, 0.02) << "first loss " << first;
  EXPECT_LT(model.forward(data.batch()).mean(), 0.02);
  ops->release(m.data);
  ops->release(v.data);
}

// With doc_mask, a row packing documents A and B scores exactly as A (followed by B's first token as
// its last target) and B run as separate rows without masking: attention stays inside each document
// and positions restart at B.
TEST(Model, DocumentMaskingSeparatesPackedDocuments) {
  const ModelConfig cfg = small_config(Arch::Llama);
  auto ops = make_cpu_ops(DType::F32);
  const int T = 20, split = 8;
  Model masked(cfg, *ops, {1, T, true});
  masked.init_params(3);
  Model plain(cfg, *ops, {1, T, false});
  plain.set_params_f32(masked.params_f32());

  std::vector<int32_t> row = random_tokens(T + 1, cfg.vocab_size, 5);
  OwnedBatch packed(1, T, row, {{0, split}}, true), unmasked(1, T, row);
  OwnedBatch doc_a(1, split, std::vector<int32_t>(row.begin(), row.begin() + split + 1));
  OwnedBatch doc_b(1, T - split, std::vector<int32_t>(row.begin() + split, row.end()));
  const double together = masked.forward(packed.batch()).sum;
  const double apart = plain.forward(doc_a.batch()).sum + plain.forward(doc_b.batch()).sum;
  EXPECT_NEAR(together, apart, 1e-5 * std::abs(apart));
  // Without the mask the packed row is one document and scores differently.
  EXPECT_GT(std::abs(plain.forward(unmasked.batch()).sum - apart), 1e-3);
  // A batch made for the other setting is refused: its positions would be wrong.
  EXPECT_THROW(plain.forward(packed.batch()), Error);
  EXPECT_THROW(masked.forward(unmasked.batch()), Error);
}

TEST(Model, SmallerBatchThanPlannedMatchesAModelPlannedForIt) {
  const ModelConfig cfg = small_config(Arch::Qwen2);
  auto ops = make_cpu_ops(DType::F32);
  Model big(cfg, *ops, {3, 16, false});
  big.init_params(11);
  Model exact(cfg, *ops, {2, 9, false});
  exact.set_params_f32(big.params_f32());
  OwnedBatch data(2, 9, random_tokens(2 * 10, cfg.vocab_size, 12));
  big.zero_grads();
  exact.zero_grads();
  LossSum a = big.forward_backward(data.batch(), 0.05f);
  LossSum b = exact.forward_backward(data.batch(), 0.05f);
  EXPECT_EQ(a.count, 18);
  EXPECT_NEAR(a.sum, b.sum, 1e-5 * b.sum);
  EXPECT_LT(relative_difference(big.grads_f32(), exact.grads_f32()), 1e-5);
}

TEST(Model, ForwardMatchesForwardBackwardAndGradientsAccumulate) {
  const ModelConfig cfg = small_config(Arch::Qwen3);
  auto ops = make_cpu_ops(DType::F32);
  Model model(cfg, *ops, {2, 12, false});
  model.init_params(21);
  OwnedBatch data(2, 12, random_tokens(2 * 13, cfg.vocab_size, 22));
  model.zero_grads();
  const double with_grads = model.forward_backward(data.batch(), 1.0f).sum;
  const std::vector<float> once = model.grads_f32();
  EXPECT_EQ(model.forward(data.batch()).sum, with_grads);
  EXPECT_EQ(model.grads_f32(), once);  // forward() leaves gradients alone
  model.forward_backward(data.batch(), 1.0f);
  std::vector<float> twice = model.grads_f32();
  for (float& g : twice) g *= 0.5f;
  EXPECT_LT(relative_difference(twice, once), 1e-6);
  model.zero_grads();
  for (float g : model.grads_f32()) ASSERT_EQ(g, 0.0f);
}

TEST(Model, InitialisationIsDeterministicAndHuggingFaceLike) {
  ModelConfig cfg = small_config(Arch::Qwen2);
  cfg.init_std = 0.05;
  auto ops = make_cpu_ops(DType::F32);
  Model a(cfg, *ops, {1, 8, false}), b(cfg, *ops, {1, 8, false});
  a.init_params(99);
  b.init_params(99);
  const std::vector<float> pa = a.params_f32();
  EXPECT_EQ(pa, b.params_f32());
  b.init_params(100);
  EXPECT_NE(pa, b.params_f32());
  // Batches of 7 values: tensors split across batches, parts starting at odd elements (mid Box-Muller pair).
  b.init_params(99, 7);
  EXPECT_EQ(pa, b.params_f32());

  std::vector<bool> covered(pa.size(), false);
  for (const ParamInfo& t : a.layout().params) {
    double sum = 0, sum2 = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel; i++) {
      sum += pa[i];
      sum2 += double(pa[i]) * pa[i];
      covered[i] = true;
    }
    if (t.shape.size() == 2) {
      const double mean = sum / t.numel, std_dev = std::sqrt(sum2 / t.numel - mean * mean);
      EXPECT_NEAR(mean, 0.0, 0.01) << t.name;
      EXPECT_NEAR(std_dev, 0.05, 0.005) << t.name;
    } else if (t.name.find(".bias") != std::string::npos) {
      EXPECT_EQ(sum2, 0.0) << t.name;
    } else {
      EXPECT_EQ(sum, double(t.numel)) << t.name;  // norm weights are ones
      EXPECT_EQ(sum2, double(t.numel)) << t.name;
    }
  }
  for (size_t i = 0; i < pa.size(); i++)
    if (!covered[i]) ASSERT_EQ(pa[i], 0.0f) << "alignment padding at " << i;
}

TEST(Model, RefusesTokensOutsideTheVocabularyAndOversizedBatches) {
  const ModelConfig cfg = small_config();
  auto ops = make_cpu_ops(DType::F32);
  Model model(cfg, *ops, {1, 8, false});
  model.init_params(1);
  // An input, and the last target (position T of the row's window, which no input holds).
  for (int position : {4, 8}) {
    std::vector<int32_t> ids = random_tokens(9, cfg.vocab_size, 2);
    ids[size_t(position)] = cfg.vocab_size + 3;
    OwnedBatch bad(1, 8, ids);
    try {
      model.forward(bad.batch());
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("token id {} (row 0, position {}) is outside the vocabulary",
                                                       cfg.vocab_size + 3, position)),
                std::string::npos)
          << e.what();
    }
  }
  OwnedBatch big(2, 8, random_tokens(18, cfg.vocab_size, 3));
  EXPECT_THROW(model.forward(big.batch()), Error);
  EXPECT_THROW(Model(cfg, *ops, {1, cfg.max_seq + 1, false}), Error);
}

}  // namespace
}  // namespace tk

namespace tk {
namespace {

// Every recompute policy, alone and combined, gives bitwise the loss and gradients of keeping everything,
// for each architecture; and it keeps less.
TEST(ModelRecompute, EveryPolicyGivesBitwiseTheSameGradientsWithLessMemory) {
  for (Arch arch : {Arch::Llama, Arch::Qwen2, Arch::Qwen3}) {
    const ModelConfig cfg = small_config(arch);
    const int B = 2, T = 16;
    auto ops = make_cpu_ops(DType::F32);
    OwnedBatch data(B, T, random_tokens(size_t(B) * (T + 1), cfg.vocab_size, 11));
    std::vector<float> params;
    auto run = [&](const std::string& policy, size_t* kept_bytes) {
      ModelOptions o{B, T, false};
      o.recompute = parse_recompute(policy);
      Model model(cfg, *ops, o);
      if (params.empty()) {
        model.init_params(3);
        params = model.params_f32();
      }
      model.set_params_f32(params);
      model.zero_grads();
      LossSum loss = model.forward_backward(data.batch(), 0.1f);
      for (const MemoryRow& r : ops->memory_rows())
        if (r.label == "activations kept for the backward") *kept_bytes = r.bytes;
      return std::pair{loss.sum, model.grads_f32()};
    };
    size_t kept_none = 0;
    const auto [loss0, grads0] = run("none", &kept_none);
    for (const char* policy : {"norm", "swiglu", "attention", "qkv", "block", "norm,swiglu", "qkv,attention,swiglu",
                               "norm,swiglu,attention,qkv"}) {
      size_t kept = 0;
      const auto [loss, grads] = run(policy, &kept);
      EXPECT_EQ(loss, loss0) << policy;
      EXPECT_EQ(0, std::memcmp(grads.data(), grads0.data(), grads0.size() * sizeof(float))) << policy << " arch "
                                                                                         << int(arch);
      EXPECT_LT(kept, kept_none) << policy;
    }
  }
}

TEST(ModelRecompute, PoliciesParseAndDescribe) {
  EXPECT_EQ(parse_recompute("none").describe(), "none");
  EXPECT_EQ(parse_recompute("swiglu,norm").describe(), "norm,swiglu");
  EXPECT_EQ(parse_recompute("block").describe(), "block");
  EXPECT_THROW(parse_recompute("norm,everything"), Error);
  const ModelConfig cfg = small_config();
  EXPECT_EQ(parse_recompute("norm,swiglu").flops_per_token(cfg, 16), 0.0);
  // qkv: one GEMM [d -> q + 2k] forward per layer, 2 FLOPs per multiply-add.
  EXPECT_EQ(parse_recompute("qkv").flops_per_token(cfg, 16),
            cfg.n_layers * 2.0 * cfg.d_model * (cfg.q_dim() + 2 * cfg.kv_dim()));
}

// model_memory() predicts exactly what a Model allocates, by label, for every policy.
TEST(ModelRecompute, PredictedMemoryEqualsWhatTheModelAllocates) {
  for (const char* policy : {"none", "norm,swiglu", "block"}) {
    const ModelConfig cfg = small_config(Arch::Qwen3);
    ModelOptions o{3, 20, false};
    o.recompute = parse_recompute(policy);
    auto ops = make_cpu_ops(DType::F32);
    Model model(cfg, *ops, o);
    std::map<std::string, size_t> held;
    for (const MemoryRow& r : ops->memory_rows()) held[r.label] = r.bytes;
    for (const auto& [label, bytes] : model_memory(cfg, o, DType::F32, DType::F32)) {
      EXPECT_EQ(held[label], bytes) << label << " with " << policy;
    }
  }
}

}  // namespace
}  // namespace tk
