// ZeRO 2's gradients at the model's level, as one process (world size 1: the same calls) and under `mpirun -np 2`
// and `-np 3` (the MPI communicator, CPU backend), and, built with TK_DIST_TEST_CUDA, on one GPU (NCCL, the CUDA
// backend). Each rank's model stages every unit's backward and DataParallel reduce-scatters it into the rank's slice
// at every micro-batch: after several micro-batches the slices hold what one process accumulates from all the ranks'
// micro-batches (within 1e-5 relative; bitwise at one rank, where the staging adds exactly what the whole buffer
// would), tied and untied LM heads alike; zeroing covers the slices (a second step from zero repeats the first
// bitwise); and the model holds its slice of the gradients plus the staging, not the whole buffer. All of it with the
// slices on the device and in host memory (gradient offload: each slice brought up into its chunk before the unit's
// backward and the reduced chunk taken down after, on the copy queues).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/batch.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/session.h"
#include "model/grad_staging.h"
#include "model/model.h"
#include "model_testing.h"
#include "ops/cpu/cpu_ops.h"
#include "train/data_parallel.h"
#ifdef TK_DIST_TEST_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/device_info.h"
#endif

namespace {

using namespace tk;

dist::Communicator* g_comm = nullptr;
Ops* g_ops = nullptr;

constexpr int kB = 2, kT = 8, kMicroBatches = 3;  // each rank's micro-batches in a step

int W() { return g_comm->world_size(); }
int me() { return g_comm->rank(); }

ModelConfig config(bool tied) {
  ModelConfig c = tk::testing::tiny_llama_config();
  c.n_layers = 4;
  c.tied_embeddings = tied;
  return c;
}

// One process's micro-batch j of the step (the loader deals j = k N + r to rank r as its k-th).
OwnedBatch micro_batch(int j, int vocab) {
  std::mt19937_64 rng(1000 + uint64_t(j));
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> ids(size_t(kB) * (kT + 1));
  for (int32_t& t : ids) t = token(rng);
  return OwnedBatch(kB, kT, ids);
}

// Where the reduced model keeps its slices: on the device, or in host memory (ModelOptions::offload_grads).
enum class Home { device, host };

ModelOptions options(bool reduced, Home home = Home::device) {
  ModelOptions o;
  o.offload_grads = reduced && home == Home::host;
  o.B = kB;
  o.T = kT;
  o.unit_multiple = zero_unit_multiple(W(), 2, MomentPrecision::F32);  // the same layout for both models
  if (reduced) {
    o.reduced_grads = true;
    o.grad_shards = W();
    o.grad_shard = me();
  }
  return o;
}

// This rank's slice of each unit of a whole [P] gradient, in unit order: what a reduced model's grads() holds.
std::vector<float> my_slices(const ParamLayout& layout, const std::vector<float>& whole) {
  std::vector<float> out;
  for (size_t k = 0; k < layout.units(); k++) {
    const int64_t chunk = layout.unit_size(k) / W(), begin = layout.unit_begin[k] + me() * chunk;
    out.insert(out.end(), whole.begin() + begin, whole.begin() + begin + chunk);
  }
  return out;
}

// This rank's micro-batches of one step into the reduced model (the hook reduces each backward), its slices read back.
std::vector<float> reduced_step(Model& model, float scale) {
  model.zero_grads();
  for (int k = 0; k < kMicroBatches; k++) {
    const OwnedBatch b = micro_batch(k * W() + me(), model.config().vocab_size);
    model.forward_backward(b.batch(), scale);
  }
  g_comm->synchronize();
  std::vector<float> out(size_t(model.grads().numel()));
  if (model.grads_on_host()) {
    g_ops->synchronize();
    std::memcpy(out.data(), model.grads().data, out.size() * sizeof(float));
  } else {
    g_ops->download_f32(out.data(), model.grads());
  }
  return out;
}

// (tied LM head, where the slices live)
class ReducedGradients : public ::testing::TestWithParam<std::tuple<bool, Home>> {
 protected:
  bool tied() const { return std::get<0>(GetParam()); }
  Home home() const { return std::get<1>(GetParam()); }
};

TEST_P(ReducedGradients, SlicesHoldWhatOneProcessAccumulates) {
  const ModelConfig cfg = config(tied());
  const float scale = 1.0f / float(kMicroBatches * W() * kB * kT);
  Model whole(cfg, *g_ops, options(false));
  whole.init_params(5);
  for (int j = 0; j < kMicroBatches * W(); j++) whole.forward_backward(micro_batch(j, cfg.vocab_size).batch(), scale);
  const std::vector<float> expected = my_slices(whole.layout(), whole.grads_f32());

  Model model(cfg, *g_ops, options(true, home()));
  ASSERT_EQ(model.grads_on_host(), home() == Home::host);
  model.init_params(5);
  DataParallel dp(*g_comm, model, 2);
  const std::vector<float> first = reduced_step(model, scale);
  ASSERT_EQ(first.size(), expected.size());
  if (W() == 1) {
    EXPECT_EQ(first, expected);  // the staging adds what the whole buffer would, in the same order
  } else {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < first.size(); i++) {
      diff += (double(first[i]) - expected[i]) * (double(first[i]) - expected[i]);
      norm += double(expected[i]) * expected[i];
    }
    EXPECT_GT(norm, 0);
    EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm));
  }
  EXPECT_EQ(reduced_step(model, scale), first);  // zero_grads clears the slices, the staging starts clean
}

TEST_P(ReducedGradients, TheModelHoldsItsSliceAndTheStaging) {
  const ModelConfig cfg = config(tied());
  Model model(cfg, *g_ops, options(true, home()));
  const ParamLayout& layout = model.layout();
  const size_t f32 = sizeof(float);
  EXPECT_EQ(size_t(model.grads().numel()), size_t(layout.total / W()));
  const auto [outer, layer] = gradient_stage_elements(cfg, layout);
  // In host memory, the device holds the staging alone.
  const size_t on_device = home() == Home::host ? 0 : size_t(layout.total / W());
  EXPECT_EQ(model.gradient_bytes(), (on_device + size_t(outer + 2 * layer)) * f32);
  Model plain(cfg, *g_ops, options(false));
  EXPECT_EQ(plain.gradient_bytes(), size_t(layout.total) * f32);
  if (W() > 1) EXPECT_THROW(model.grads_f32(), Error) << "the whole gradient is on no rank";
}

INSTANTIATE_TEST_SUITE_P(LmHeadAndHome, ReducedGradients,
                         ::testing::Combine(::testing::Values(true, false), ::testing::Values(Home::device, Home::host)),
                         [](const ::testing::TestParamInfo<std::tuple<bool, Home>>& p) {
                           return std::string(std::get<0>(p.param) ? "Tied" : "Untied") +
                                  (std::get<1>(p.param) == Home::host ? "InHostMemory" : "OnTheDevice");
                         });

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    dist::Session session(dist::read_world());
#ifdef TK_DIST_TEST_CUDA
    if (gpu_count() == 0) {
      std::fprintf(stderr, "no CUDA device: nothing run\n");
      return session.finish(0);
    }
    auto ops = make_cuda_ops(session.world().local_rank);
    const bool nccl = true;
#else
    auto ops = make_cpu_ops(DType::F32);
    const bool nccl = false;
#endif
    g_ops = ops.get();
    auto comm = dist::make_communicator(session, nccl);
    g_comm = comm.get();
    if (session.world().rank > 0) GTEST_FLAG_SET(brief, true);
    const int failed = RUN_ALL_TESTS();
    comm.reset();
    return session.finish(failed);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
