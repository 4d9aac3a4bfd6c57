// The loss of a fine-tune's masked batch: targets the loss mask leaves out (kUntrainedTarget) count in neither the
// loss nor its gradient, which equals float64 finite differences of the mean over the trained targets; and over a
// step of several micro-batches the mean is over every trained target of the global batch (a micro-batch of one
// trained token weighs one token, not a micro-batch's share), as one micro-batch holding all their rows computes it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/batch.h"
#include "data/loader.h"
#include "model/model.h"
#include "ops/cpu/cpu_ops.h"
#include "optim/optimizer.h"
#include "train/trainer.h"

namespace tk {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.name = "masked";
  c.arch = Arch::Llama;
  c.vocab_size = 53;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.d_model = 32;
  c.ffn_dim = 40;
  c.max_seq = 16;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-5;
  return c;
}

void randomise(Model& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  if (m.params().dtype == DType::F64) {
    double* p = m.params().as<double>();
    for (const ParamInfo& t : m.layout().params)
      for (int64_t i = 0; i < t.numel; i++) p[t.offset + i] = t.shape.size() == 2 ? 0.15 * normal(rng) : 1.0;
  } else {
    float* p = m.params().as<float>();
    for (const ParamInfo& t : m.layout().params)
      for (int64_t i = 0; i < t.numel; i++) p[t.offset + i] = float(t.shape.size() == 2 ? 0.15 * normal(rng) : 1.0);
  }
}

// Rows of random tokens, each one document; `trained[b]` of row b's targets trained on (its last ones).
OwnedBatch masked_batch(int B, int T, int V, const std::vector<int>& trained, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, V - 1);
  std::vector<int32_t> tokens(size_t(B) * (T + 1));
  for (int32_t& t : tokens) t = token(rng);
  OwnedBatch batch(B, T, tokens);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T - trained[size_t(b)]; t++) batch.batch().targets[size_t(b) * T + t] = kUntrainedTarget;
  return batch;
}

TEST(MaskedLoss, UntrainedTargetsAreLeftOutOfTheLossAndItsGradient) {
  const ModelConfig cfg = small_config();
  const int B = 2, T = 8;
  auto ops = make_cpu_ops(DType::F64);
  Model model(cfg, *ops, {B, T, false});
  randomise(model, 7);
  const OwnedBatch data = masked_batch(B, T, cfg.vocab_size, {3, 8}, 11);
  const LossSum masked = model.forward(data.batch());
  ASSERT_EQ(masked.count, 11) << "3 + 8 trained targets";
  const OwnedBatch whole = masked_batch(B, T, cfg.vocab_size, {8, 8}, 11);  // the same tokens, all trained
  const LossSum all = model.forward(whole.batch());
  EXPECT_EQ(all.count, 16);
  EXPECT_GT(std::abs(all.sum - masked.sum), 1e-3) << "the left-out targets' losses are not in the sum";

  const double trained = double(masked.count);
  model.zero_grads();
  model.forward_backward(data.batch(), float(1.0 / trained));
  const double* grad = model.grads().as<double>();
  double* param = model.params().as<double>();
  auto loss = [&] { return model.forward(data.batch()).sum / trained; };
  std::mt19937_64 rng(3);
  const double h = 1e-5;
  for (const ParamInfo& t : model.layout().params) {
    double diff2 = 0, ref2 = 0;
    for (int k = 0; k < 24; k++) {
      const int64_t i = t.offset + int64_t(rng() % uint64_t(t.numel));
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
    if (ref2 == 0) continue;  // a sample that missed every trained path (rare rows of the embedding)
    EXPECT_LT(std::sqrt(diff2 / ref2), 1e-5) << t.name;  // 1/11 passes through a float
  }
}

// Micro-batches handed out in order, for accumulate_gradients.
class ListLoader : public DataLoader {
 public:
  explicit ListLoader(std::vector<const Batch*> batches) : batches_(std::move(batches)) {}
  const Batch& next() override { return *batches_[next_++ % batches_.size()]; }
  double take_wait_seconds() override { return 0; }
  nlohmann::json state() const override { return next_; }
  void restore(const nlohmann::json& s) override { next_ = s.get<size_t>(); }
  int64_t batches_per_epoch() const override { return int64_t(batches_.size()); }
  int64_t tokens_in_split() const override { return 0; }
  int64_t vocab_size() const override { return 53; }
  uint64_t tokenizer_fingerprint() const override { return 0; }

 private:
  std::vector<const Batch*> batches_;
  size_t next_ = 0;
};

// One long example and a short one, in two micro-batches of one row: the step's gradient is the mean over their 9
// trained targets, as one micro-batch of both rows gives it, not the mean of the two micro-batches' means.
TEST(MaskedLoss, AStepsMeanIsOverTheTrainedTargetsOfTheGlobalBatch) {
  const ModelConfig cfg = small_config();
  const int T = 8;
  auto ops = make_cpu_ops(DType::F32);
  const OwnedBatch both = masked_batch(2, T, cfg.vocab_size, {1, 8}, 5);
  OwnedBatch first(1, T), second(1, T);
  for (int t = 0; t < T; t++)
    for (auto [part, row] : {std::pair{&first, 0}, {&second, 1}}) {
      const Batch& from = both.batch();
      const Batch& to = part->batch();
      to.inputs[t] = from.inputs[row * T + t];
      to.targets[t] = from.targets[row * T + t];
      to.positions[t] = from.positions[row * T + t];
      to.segments[t] = from.segments[row * T + t];
    }

  // Reference: one micro-batch of both rows, its 9 trained targets' mean.
  Model whole(cfg, *ops, {2, T, false});
  randomise(whole, 9);
  whole.zero_grads();
  const LossSum w = whole.forward_backward(both.batch(), float(1.0 / 9));
  ASSERT_EQ(w.count, 9);
  AdamWOptions o;
  o.max_grad_norm = 0;
  AdamW whole_opt(whole, o);
  const double reference_norm = whole_opt.step(1e-3).grad_norm;

  // The trainer's way: two micro-batches of one row, each scaled by 1 / (the step's 16 tokens), then the update's
  // multiplier for 9 trained of 16.
  Model split(cfg, *ops, {1, T, false});
  randomise(split, 9);
  split.zero_grads();
  ListLoader loader({&first.batch(), &second.batch()});
  const LossSum s = accumulate_gradients(split, loader, 2, 1);
  EXPECT_EQ(s.count, 9);
  EXPECT_NEAR(s.mean(), w.mean(), 1e-6 * std::abs(w.mean()));
  AdamW split_opt(split, o);
  const double multiplier = trained_mean_multiplier(16, s.count);
  EXPECT_DOUBLE_EQ(multiplier, 16.0 / 9.0);
  EXPECT_NEAR(split_opt.step(1e-3, multiplier).grad_norm, reference_norm, 1e-5 * reference_norm);
  const std::vector<float> a = whole.params_f32(), b = split.params_f32();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(a[i], b[i], 1e-6) << i;
  // Unmasked data: the multiplier is exactly 1, so its update is bitwise what it was.
  EXPECT_EQ(trained_mean_multiplier(16, 16), 1.0);
  EXPECT_EQ(trained_mean_multiplier(16, 0), 1.0);
}

}  // namespace
}  // namespace tk
