// The CPU backend's deferred copy queues (ops/cpu/deferred_copies.h): a copy on the upload or download queue runs no
// sooner than something must see it done, and then in its queue's order and after the waits queued before it; the
// compute queue's copies run at once; events are a ring of 64. (The offload pipelines run under them in the
// *_deferred_queues ctest entries.)
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/deferred_queues.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/deferred_copies.h"

namespace tk {
namespace {

using Q = Ops::Queue;

TEST(DeferredCopies, ACopyQueueRunsWhenTheComputeQueueWaitsForIt) {
  DeferredCopies d;
  int host = 7, device = 0;
  d.copy(&device, &host, sizeof(int), Q::upload);
  EXPECT_EQ(device, 0) << "nothing has waited for the upload";
  const int uploaded = d.record(Q::upload);
  host = 8;  // an upload reads its source when it runs: here, late
  d.wait(Q::compute, uploaded);
  EXPECT_EQ(device, 8);
  d.copy(&device, &host, sizeof(int), Q::compute);
  EXPECT_EQ(device, 8);
  host = 9;
  d.copy(&device, &host, sizeof(int), Q::compute);
  EXPECT_EQ(device, 9) << "the compute queue's copies run at their call";
}

TEST(DeferredCopies, AWaitCoversOnlyWhatWasQueuedBeforeTheRecord) {
  DeferredCopies d;
  int a = 1, b = 2, x = 0, y = 0;
  d.copy(&x, &a, sizeof(int), Q::download);
  const int first = d.record(Q::download);
  d.copy(&y, &b, sizeof(int), Q::download);
  d.wait(Q::compute, first);
  EXPECT_EQ(x, 1);
  EXPECT_EQ(y, 0);
  d.run_all();
  EXPECT_EQ(y, 2);
}

TEST(DeferredCopies, AQueueWaitingForTheOtherRunsItFirst) {
  DeferredCopies d;
  int device = 5, host = 0, back = 0;
  d.copy(&host, &device, sizeof(int), Q::download);
  d.wait(Q::upload, d.record(Q::download));
  d.copy(&back, &host, sizeof(int), Q::upload);
  device = 6;  // the download has not run: it reads 6
  d.wait(Q::compute, d.record(Q::upload));
  EXPECT_EQ(host, 6);
  EXPECT_EQ(back, 6) << "the upload ran after the download it waited for";
}

TEST(DeferredCopies, WithoutAWaitTheQueuesDoNotOrderEachOther) {
  DeferredCopies d;
  int device = 5, host = 0, back = -1;
  d.copy(&host, &device, sizeof(int), Q::download);
  d.copy(&back, &host, sizeof(int), Q::upload);
  d.wait(Q::compute, d.record(Q::upload));
  EXPECT_EQ(back, 0) << "the upload read host memory the download had not yet written";
}

TEST(DeferredCopies, EventsOnTheComputeQueueOrNeverRecordedAreNoWait) {
  DeferredCopies d;
  int a = 1, x = 0;
  d.copy(&x, &a, sizeof(int), Q::upload);
  d.wait(Q::compute, d.record(Q::compute));
  d.wait(Q::compute, 63);
  EXPECT_EQ(x, 0);
  EXPECT_THROW(d.wait(Q::compute, 64), Error);
}

TEST(DeferredCopies, AnIdRecordedAgainWaitsForTheNewerRecord) {
  DeferredCopies d;
  int a = 1, b = 2, x = 0, y = 0;
  d.copy(&x, &a, sizeof(int), Q::upload);
  const int id = d.record(Q::upload);
  for (int i = 0; i < 63; i++) d.record(Q::compute);
  d.copy(&y, &b, sizeof(int), Q::upload);
  EXPECT_EQ(d.record(Q::upload), id) << "a ring of 64";
  d.wait(Q::compute, id);
  EXPECT_EQ(y, 2);
}

// The CPU backend defers its copy queues when the environment asks at its making, and a release runs what is queued.
TEST(DeferredQueues, TheCpuBackendDefersItsCopyQueuesWhenAsked) {
  ::setenv("TOKAMAK_CPU_DEFERRED_QUEUES", "1", 1);
  const std::unique_ptr<Ops> deferred = make_cpu_ops(DType::F32);
  ::unsetenv("TOKAMAK_CPU_DEFERRED_QUEUES");
  const std::unique_ptr<Ops> at_once = make_cpu_ops(DType::F32);
  for (Ops* ops : {deferred.get(), at_once.get()}) {
    int host = 3;
    int* device = static_cast<int*>(ops->allocate(sizeof(int), "test"));
    *device = 0;
    ops->copy_async(device, &host, sizeof(int), Q::upload);
    EXPECT_EQ(*device, ops == at_once.get() ? 3 : 0);
    ops->wait_event(Q::compute, ops->record_event(Q::upload));
    EXPECT_EQ(*device, 3);
    host = 4;
    ops->copy_async(device, &host, sizeof(int), Q::upload);
    ops->synchronize();
    EXPECT_EQ(*device, 4);
    ops->release(device);
  }
}

TEST(DeferredQueues, TheEnvironmentTurnsThemOn) {
  ::unsetenv("TOKAMAK_CPU_DEFERRED_QUEUES");
  EXPECT_FALSE(deferred_queues_requested());
  ::setenv("TOKAMAK_CPU_DEFERRED_QUEUES", "0", 1);
  EXPECT_FALSE(deferred_queues_requested());
  ::setenv("TOKAMAK_CPU_DEFERRED_QUEUES", "1", 1);
  EXPECT_TRUE(deferred_queues_requested());
  ::setenv("TOKAMAK_CPU_DEFERRED_QUEUES", "yes", 1);
  EXPECT_THROW(deferred_queues_requested(), Error);
  ::unsetenv("TOKAMAK_CPU_DEFERRED_QUEUES");
}

}  // namespace
}  // namespace tk
