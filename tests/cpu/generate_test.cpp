// Generation: the KV-cache path (prompt as one chunk, then one token at a time through
// attention_decode) gives the logits, and so the greedy tokens, of the full causal forward rerun on the
// growing sequence, with plain and scaled RoPE; the cache op itself matches attention_forward; sampling
// honours temperature, top-k, top-p and the seed; generate() stops where asked.
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/generate.h"
#include "model/model.h"
#include "ops/cpu/cpu_ops.h"

namespace tk {
namespace {

ModelConfig small_config(Arch arch) {
  ModelConfig c;
  c.name = "generate-test";
  c.arch = arch;
  c.vocab_size = 61;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = arch == Arch::Qwen3 ? 12 : 8;
  c.ffn_dim = 48;
  c.max_seq = 48;
  c.tied_embeddings = arch == Arch::Qwen2;
  c.qkv_bias = arch != Arch::Llama;
  c.o_bias = arch == Arch::Qwen3;
  c.qk_norm = arch == Arch::Qwen3;
  // Large weights make the next-token distributions peaked, so greedy choices are clear-cut.
  c.init_std = 0.25;
  return c;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); i++) {
    diff2 += double(a[i] - b[i]) * double(a[i] - b[i]);
    ref2 += double(b[i]) * double(b[i]);
  }
  return std::sqrt(diff2 / ref2);
}

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

class GreedyCache : public ::testing::TestWithParam<Arch> {};

void expect_cached_generation_equals_the_full_forward(const ModelConfig& cfg) {
  auto ops = make_cpu_ops(DType::F32);
  Model model(cfg, *ops, {1, 8, false});
  model.init_params(5);
  Generator gen(model, 40);

  std::vector<int32_t> sequence = {3, 17, 42, 8, 60, 25, 11};
  std::vector<float> cached = gen.prefill(sequence);
  const int n_new = 30;
  for (int i = 0; i < n_new; i++) {
    const std::vector<float> full = gen.logits_uncached(sequence);
    ASSERT_LT(relative_difference(cached, full), 1e-5) << "step " << i;
    const int32_t next = argmax(full);
    ASSERT_EQ(argmax(cached), next) << "step " << i;
    sequence.push_back(next);
    cached = gen.step(next);
  }
  EXPECT_EQ(gen.length(), 7 + n_new);

  SamplingOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = n_new;
  const std::vector<int32_t> generated = gen.generate({3, 17, 42, 8, 60, 25, 11}, greedy);
  EXPECT_EQ(generated, std::vector<int32_t>(sequence.begin() + 7, sequence.end()));
}

TEST_P(GreedyCache, CachedGenerationEqualsRerunningTheFullForward) {
  expect_cached_generation_equals_the_full_forward(small_config(GetParam()));
}

// Scaled RoPE, in generation as in the model: Llama 3's scaling with an original context of 16 tokens, so that
// it changes every frequency these 37 positions turn (wavelength 6.3 blended; 63, 628 and 6283 divided by 8),
// and a linear scaling.
TEST(GreedyCacheScaledRope, CachedGenerationEqualsRerunningTheFullForward) {
  ModelConfig cfg = small_config(Arch::Llama);
  cfg.rope_scaling = RopeScaling::llama3(8.0, 1.0, 4.0, 16);
  expect_cached_generation_equals_the_full_forward(cfg);
  cfg.rope_scaling = RopeScaling::linear(3.0);
  expect_cached_generation_equals_the_full_forward(cfg);
}

INSTANTIATE_TEST_SUITE_P(Architectures, GreedyCache, ::testing::Values(Arch::Llama, Arch::Qwen2, Arch::Qwen3));

// The op on its own: appending a sequence to the cache in uneven chunks gives, for every token, the
// output attention_forward gives for the whole sequence.
TEST(AttentionDecode, ChunkedCacheMatchesFullCausalAttention) {
  auto ops = make_cpu_ops(DType::F64);
  const int T = 11, Hq = 6, Hkv = 2, hd = 4, H3 = Hq + 2 * Hkv, max_len = 16;
  std::mt19937_64 rng(8);
  std::normal_distribution<double> normal;
  std::vector<double> qkv(size_t(T) * H3 * hd), full(size_t(T) * Hq * hd), lse(size_t(Hq) * T);
  for (double& x : qkv) x = normal(rng);
  const AttnShape all{1, T, Hq, Hkv, hd};
  ops->attention_forward(Tensor(full.data(), DType::F64, {1, T, Hq, hd}), Tensor(lse.data(), DType::F64, {1, Hq, T}),
                         Tensor(qkv.data(), DType::F64, {1, T, H3, hd}), Tensor(), all);

  std::vector<double> k_cache(size_t(max_len) * Hkv * hd), v_cache(k_cache.size()), out(size_t(T) * Hq * hd);
  const Tensor k(k_cache.data(), DType::F64, {max_len, Hkv, hd}), v(v_cache.data(), DType::F64, {max_len, Hkv, hd});
  int pos = 0;
  for (int chunk : {4, 1, 1, 3, 2}) {
    const AttnShape s{1, chunk, Hq, Hkv, hd};
    ops->attention_decode(Tensor(out.data() + size_t(pos) * Hq * hd, DType::F64, {chunk, Hq, hd}), k, v,
                          Tensor(qkv.data() + size_t(pos) * H3 * hd, DType::F64, {chunk, H3, hd}), pos, s);
    pos += chunk;
  }
  ASSERT_EQ(pos, T);
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < out.size(); i++) {
    diff2 += (out[i] - full[i]) * (out[i] - full[i]);
    ref2 += full[i] * full[i];
  }
  EXPECT_LT(std::sqrt(diff2 / ref2), 1e-13);
  EXPECT_THROW(ops->attention_decode(Tensor(out.data(), DType::F64, {1, Hq, hd}), k, v,
                                     Tensor(qkv.data(), DType::F64, {1, H3, hd}), max_len, {1, 1, Hq, Hkv, hd}),
               Error);
}

std::vector<float> test_logits() { return {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 1.9f, -3.0f}; }

TEST(Sampling, GreedyAndDegenerateTruncationsPickTheMaximum) {
  std::mt19937_64 rng(1);
  SamplingOptions o;
  o.temperature = 0;
  EXPECT_EQ(sample_token(test_logits(), o, rng), 1);
  o.temperature = 5.0f;
  o.top_k = 1;
  for (int i = 0; i < 20; i++) EXPECT_EQ(sample_token(test_logits(), o, rng), 1);
  o.top_k = 0;
  o.top_p = 0.01f;
  for (int i = 0; i < 20; i++) EXPECT_EQ(sample_token(test_logits(), o, rng), 1);
}

// Empirical frequencies against softmax(logits / temperature), renormalised over what top-k / top-p keep.
std::map<int32_t, double> frequencies(const SamplingOptions& o, int draws) {
  std::mt19937_64 rng(o.seed);
  std::map<int32_t, double> f;
  for (int i = 0; i < draws; i++) f[sample_token(test_logits(), o, rng)] += 1.0 / draws;
  return f;
}

std::map<int32_t, double> expected(float temperature, const std::vector<int32_t>& kept) {
  const std::vector<float> l = test_logits();
  std::map<int32_t, double> p;
  double total = 0;
  for (int32_t id : kept) total += p[id] = std::exp(l[id] / temperature);
  for (auto& [id, v] : p) v /= total;
  return p;
}

void expect_close(const std::map<int32_t, double>& got, const std::map<int32_t, double>& want) {
  for (const auto& [id, freq] : got) EXPECT_TRUE(want.count(id)) << "token " << id << " should never be drawn";
  for (const auto& [id, p] : want) {
    const double freq = got.count(id) ? got.at(id) : 0.0;
    EXPECT_NEAR(freq, p, 0.015) << "token " << id;
  }
}

TEST(Sampling, FrequenciesFollowTheTruncatedSoftmax) {
  SamplingOptions o;
  o.seed = 42;
  o.temperature = 1.0f;
  expect_close(frequencies(o, 20000), expected(1.0f, {0, 1, 2, 3, 4, 5, 6}));
  o.temperature = 0.7f;
  o.top_k = 3;
  expect_close(frequencies(o, 20000), expected(0.7f, {1, 5, 3}));
  // top_p = 0.6 at temperature 1: p(1) = 0.34 and p(5) = 0.31 reach it; p(3) would be next.
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 0.6f;
  expect_close(frequencies(o, 20000), expected(1.0f, {1, 5}));
}

// Ids 4, 5 and 6 stand for a padded vocabulary's extra rows: 5 holds the second largest logit, never drawn.
TEST(Sampling, IdsPastTheVocabularyLimitAreNeverDrawn) {
  SamplingOptions o;
  o.seed = 7;
  o.vocab_limit = 4;
  expect_close(frequencies(o, 20000), expected(1.0f, {0, 1, 2, 3}));
  o.top_k = 3;
  expect_close(frequencies(o, 20000), expected(1.0f, {0, 1, 3}));
  std::vector<float> padded_max = test_logits();
  padded_max[6] = 10.0f;
  std::mt19937_64 rng(1);
  o.temperature = 0;
  EXPECT_EQ(sample_token(padded_max, o, rng), 1);
  o.vocab_limit = 7;
  EXPECT_EQ(sample_token(padded_max, o, rng), 6);
  o.vocab_limit = -1;
  EXPECT_THROW(sample_token(padded_max, o, rng), Error);
}

TEST(Sampling, SameSeedSameTokens) {
  SamplingOptions o;
  o.seed = 9;
  std::mt19937_64 a(o.seed), b(o.seed), c(o.seed + 1);
  std::vector<int32_t> xa, xb, xc;
  for (int i = 0; i < 50; i++) {
    xa.push_back(sample_token(test_logits(), o, a));
    xb.push_back(sample_token(test_logits(), o, b));
    xc.push_back(sample_token(test_logits(), o, c));
  }
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
}

TEST(Generate, StopsAtTheStopTokenOrWhenTheCallbackSays) {
  const ModelConfig cfg = small_config(Arch::Llama);
  auto ops = make_cpu_ops(DType::F32);
  Model model(cfg, *ops, {1, 8, false});
  model.init_params(13);
  Generator gen(model, 32);
  SamplingOptions o;
  o.temperature = 0;
  o.max_new_tokens = 20;
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> free_run = gen.generate(prompt, o);
  ASSERT_EQ(free_run.size(), 20u);
  o.stop_token = free_run[4];
  const std::vector<int32_t> stopped = gen.generate(prompt, o);
  EXPECT_LE(stopped.size(), 5u);
  EXPECT_EQ(stopped.back(), o.stop_token);
  o.stop_token = -1;
  int seen = 0;
  const std::vector<int32_t> cut = gen.generate(prompt, o, [&](int32_t) { return ++seen < 6; });
  EXPECT_EQ(cut, std::vector<int32_t>(free_run.begin(), free_run.begin() + 6));
  o.max_new_tokens = 30;  // 3 + 30 > 32 positions
  EXPECT_THROW(gen.generate(prompt, o), Error);
  EXPECT_THROW(gen.prefill({1, cfg.vocab_size}), Error);
}

}  // namespace
}  // namespace tk
