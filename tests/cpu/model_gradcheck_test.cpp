// The whole model's backward against central finite differences of its loss, in float64: every
// parameter tensor (all elements of the small ones, a random sample of the large ones), for each
// architecture (Llama; Qwen2 with q/k/v biases; Qwen3 with q/k norms and a query width unlike the model
// width; attention biases), tied and untied heads, with and without document masking, all with GQA.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/model.h"
#include "ops/cpu/cpu_ops.h"

namespace tk {
namespace {

struct Case {
  const char* name;
  Arch arch;
  bool tied, doc_mask, attention_bias;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelConfig tiny_config(const Case& k) {
  ModelConfig c;
  c.name = k.name;
  c.arch = k.arch;
  c.vocab_size = 67;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.d_model = k.arch == Arch::Qwen3 ? 24 : 32;  // Qwen3: q width 32 differs from the model width
  c.ffn_dim = 40;
  c.max_seq = 16;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-5;
  c.tied_embeddings = k.tied;
  c.qkv_bias = k.arch == Arch::Qwen2 || k.attention_bias;
  c.o_bias = k.arch != Arch::Qwen2 && k.attention_bias;
  c.qk_norm = k.arch == Arch::Qwen3;
  return c;
}

// Random parameters: matrices and biases around zero, norm weights around one (none exactly at
// their initial values, so every term of every gradient is exercised).
void randomise(Model& m, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  double* p = m.params().as<double>();
  for (const ParamInfo& t : m.layout().params) {
    const bool bias = t.name.find(".bias") != std::string::npos;
    for (int64_t i = 0; i < t.numel; i++) {
      const double z = normal(rng);
      p[t.offset + i] = t.shape.size() == 2 ? 0.15 * z : bias ? 0.1 * z : 1.0 + 0.2 * z;
    }
  }
}

OwnedBatch random_batch(int B, int T, int V, bool doc_mask, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> token(0, V - 1);
  std::vector<int32_t> tokens(size_t(B) * (T + 1));
  for (int32_t& t : tokens) t = token(rng);
  // Row 0: two documents; row 1: three, the last starting at the final target only.
  return OwnedBatch(B, T, tokens, {{0, 3}, {0, 5, T}}, doc_mask);
}

class ModelGradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGradCheck, EveryParameterMatchesFiniteDifferences) {
  const Case& k = GetParam();
  const ModelConfig cfg = tiny_config(k);
  const int B = 2, T = 8;  // N = 16: the loss scale 1/N is exact in the float the API takes
  auto ops = make_cpu_ops(DType::F64);
  Model model(cfg, *ops, {B, T, k.doc_mask});
  std::mt19937_64 rng(2024);
  randomise(model, rng);
  const OwnedBatch data = random_batch(B, T, cfg.vocab_size, k.doc_mask, rng);

  // L = mean loss over the N targets.
  const double N = double(B) * T;
  model.zero_grads();
  model.forward_backward(data.batch(), float(1.0 / N));
  const double* grad = model.grads().as<double>();
  double* param = model.params().as<double>();
  auto loss = [&] { return model.forward(data.batch()).sum / N; };

  // Every tensor; of the larger ones a random sample of elements (each check costs two forwards).
  const double h = 1e-5;
  const int64_t kSample = 96;
  for (const ParamInfo& t : model.layout().params) {
    std::vector<int64_t> elements(size_t(t.numel));
    std::iota(elements.begin(), elements.end(), t.offset);
    std::shuffle(elements.begin(), elements.end(), rng);
    elements.resize(size_t(std::min(t.numel, kSample)));
    double diff2 = 0, ref2 = 0;
    for (int64_t i : elements) {
      const double saved = param[i];
      param[i] = saved + h;
      const double up = loss();
      param[i] = saved - h;
      const double down = loss();
      param[i] = saved;
      const double numeric = (up - down) / (2 * h);
      diff2 += (grad[i] - numeric) * (grad[i] - numeric);
      ref2 += numeric * numeric;
    }
    ASSERT_GT(ref2, 0.0) << t.name << " has no gradient at all";
    EXPECT_LT(std::sqrt(diff2 / ref2), 1e-6) << t.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ModelGradCheck,
                         ::testing::Values(Case{"llama_untied", Arch::Llama, false, false, false},
                                           Case{"llama_tied_docmask", Arch::Llama, true, true, false},
                                           Case{"qwen2_bias_tied", Arch::Qwen2, true, false, false},
                                           Case{"qwen2_untied_docmask", Arch::Qwen2, false, true, false},
                                           Case{"qwen3_qknorm_untied_docmask", Arch::Qwen3, false, true, false},
                                           Case{"qwen3_attention_bias_tied", Arch::Qwen3, true, false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tk
