// Targets the loss mask leaves out are -1 (kUntrainedTarget, as the loader writes them), the ignore index the model
// passes to the LM head's cross-entropy: such a target adds no loss and no gradient, so the losses and gradients of a
// batch split into two complementary masks add up to those of the whole batch, and a batch of none trained has
// none.
#include <gtest/gtest.h>

#include <cmath>

#include "core/batch.h"
#include "op_test_support.h"
#include "ops/cpu/cpu_ops.h"

namespace tk::testing {
namespace {

TEST(MaskedTargets, UntrainedTargetsAddNoLossAndNoGradient) {
  CpuOps<double> ops;
  Rng rng(21);
  const int N = 40, V = 29, d = 6;
  Array<double> x({N, d}), w({V, d});
  rng.fill_normal(x.v);
  rng.fill_normal(w.v, 0.5);
  std::vector<int32_t> all_targets(N);
  for (int32_t& t : all_targets) t = rng.integer(0, V - 1);

  struct Result {
    std::vector<double> losses, dx, dw;
  };
  auto run = [&](auto keep) {
    Array<double> losses({N}), dx({N, d}), dw({V, d});
    Array<int32_t> targets({N});
    for (int n = 0; n < N; n++) targets[n] = keep(n) ? all_targets[size_t(n)] : kUntrainedTarget;
    ops.lm_head_cross_entropy(losses.t, dx.t, dw.t, x.t, w.t, targets.t, 1.0f, kUntrainedTarget);
    return Result{losses.v, dx.v, dw.v};
  };
  const Result all = run([](int) { return true; });
  const Result some = run([](int n) { return n % 3 != 0; });
  const Result rest = run([](int n) { return n % 3 == 0; });
  const Result none = run([](int) { return false; });
  for (int n = 0; n < N; n++) {
    EXPECT_EQ(n % 3 != 0 ? rest.losses[size_t(n)] : some.losses[size_t(n)], 0.0) << "token " << n;
    EXPECT_NEAR(some.losses[size_t(n)] + rest.losses[size_t(n)], all.losses[size_t(n)], 1e-12);
  }
  for (size_t i = 0; i < all.dx.size(); i++) EXPECT_NEAR(some.dx[i] + rest.dx[i], all.dx[i], 1e-12);
  for (size_t i = 0; i < all.dw.size(); i++) EXPECT_NEAR(some.dw[i] + rest.dw[i], all.dw[i], 1e-12);
  for (double v : none.losses) EXPECT_EQ(v, 0.0);
  for (double v : none.dx) EXPECT_EQ(v, 0.0);
  for (double v : none.dw) EXPECT_EQ(v, 0.0);
}

TEST(MaskedTargets, BatchesCountTheirTrainedTargets) {
  OwnedBatch batch(2, 4, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(batch.batch().trained, 8);
  batch.batch().targets[1] = kUntrainedTarget;
  batch.batch().targets[6] = kUntrainedTarget;
  EXPECT_EQ(count_trained(batch.batch()), 6);
}

}  // namespace
}  // namespace tk::testing
