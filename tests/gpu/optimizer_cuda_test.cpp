// AdamW on the CUDA backend with f32, bf16 and int8 moments (train --moments): a few training steps of a
// small model give bitwise the same weights and moments with the state on the device, offloaded to host
// memory in chunks (cut inside the parameter tensors), and restored from the f32 moments a checkpoint
// holds; and narrow moments stay near the f32 moments' weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/device_info.h"
#include "optim/optimizer.h"

namespace tk {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.name = "cuda-optimizer-test";
  c.arch = Arch::Llama;
  c.vocab_size = 1000 + 37;
  c.head_dim = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_model = 256;
  c.n_layers = 2;
  c.ffn_dim = 704;
  c.max_seq = 256;
  c.tied_embeddings = false;
  return c;
}

OwnedBatch skewed_batch(int B, int T, int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // A skewed distribution, so the steps have something to learn.
  std::geometric_distribution<int32_t> token(0.02);
  std::vector<int32_t> tokens(size_t(B) * (T + 1));
  for (int32_t& t : tokens) t = std::min(token(rng), V - 1);
  return OwnedBatch(B, T, tokens);
}

struct State {
  std::vector<float> weights, m, v;
  std::vector<double> losses;
};

constexpr int kB = 2, kT = 128, kSteps = 6;

// Steps [from, to) of a run on batches seeded by the step; `restore` starts from a saved state.
State train(Ops& ops, MomentPrecision moments, bool offload, int from, int to, const State* restore) {
  const ModelConfig cfg = small_config();
  Model model(cfg, ops, {kB, kT, false});
  model.init_params(11);
  AdamWOptions o;
  o.moments = moments;
  o.offload = offload;
  o.offload_chunk = 1000;  // 768: whole int8 blocks, cutting the parameter tensors
  AdamW opt(model, o);
  if (restore) {
    opt.set_weights_f32(restore->weights);
    opt.set_state_f32(restore->m, restore->v, from);
  }
  State s;
  for (int step = from; step < to; step++) {
    const OwnedBatch data = skewed_batch(kB, kT, cfg.vocab_size, 100 + uint64_t(step));
    model.zero_grads();
    s.losses.push_back(model.forward_backward(data.batch(), 1.0f / float(kB * kT)).sum);
    opt.step(2e-3);
  }
  s.weights = opt.weights_f32();
  s.m = opt.exp_avg_f32();
  s.v = opt.exp_avg_sq_f32();
  return s;
}

// The fp32 master weights start as the bf16 parameters, converted on the device (Ops::convert), bit for bit.
TEST(OptimizerCuda, MasterWeightsStartAsTheParameters) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_cuda_ops();
  Model model(small_config(), *gpu, {kB, kT, false});
  model.init_params(11);
  AdamW opt(model, AdamWOptions{});
  ASSERT_TRUE(opt.has_master_weights());
  const std::vector<float> params = model.params_f32(), master = opt.weights_f32();
  EXPECT_EQ(master, params);
  EXPECT_GT(std::count_if(params.begin(), params.end(), [](float x) { return x != 0 && x != 1; }), 1000);
}

TEST(OptimizerCuda, MomentsOnDeviceOffloadedAndRestoredGiveTheSameBits) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_cuda_ops();
  State f32_run;
  for (MomentPrecision moments : {MomentPrecision::F32, MomentPrecision::BF16, MomentPrecision::Int8}) {
    SCOPED_TRACE(moments_name(moments));
    const State device = train(*gpu, moments, false, 0, kSteps, nullptr);
    const State offloaded = train(*gpu, moments, true, 0, kSteps, nullptr);
    EXPECT_EQ(offloaded.losses, device.losses);
    EXPECT_EQ(offloaded.weights, device.weights);
    EXPECT_EQ(offloaded.m, device.m);
    EXPECT_EQ(offloaded.v, device.v);
    // Stop half-way, keep what a checkpoint keeps (f32 weights and moments), continue in a new optimizer.
    const State first = train(*gpu, moments, false, 0, kSteps / 2, nullptr);
    const State rest = train(*gpu, moments, false, kSteps / 2, kSteps, &first);
    std::vector<double> losses = first.losses;
    losses.insert(losses.end(), rest.losses.begin(), rest.losses.end());
    EXPECT_EQ(losses, device.losses);
    EXPECT_EQ(rest.weights, device.weights);
    EXPECT_EQ(rest.m, device.m);
    EXPECT_EQ(rest.v, device.v);
    EXPECT_LT(device.losses.back(), device.losses.front());
    if (moments == MomentPrecision::F32) {
      f32_run = device;
      continue;
    }
    // Near the f32 moments' run: the weights' displacement from the start within a few percent.
    const State start = train(*gpu, MomentPrecision::F32, false, 0, 0, nullptr);
    double num = 0, den = 0;
    for (size_t i = 0; i < start.weights.size(); i++) {
      const double d_ref = double(f32_run.weights[i]) - start.weights[i];
      const double d = double(device.weights[i]) - start.weights[i];
      num += (d - d_ref) * (d - d_ref);
      den += d_ref * d_ref;
    }
    EXPECT_LE(std::sqrt(num / den), moments == MomentPrecision::BF16 ? 0.02 : 0.15);
  }
}

}  // namespace
}  // namespace tk
