// DeferredCopies: the CPU backend's copy queues run as late as the Ops contract allows (ops.h, "copy queues"), so that
// CI, which has no GPU, tests how the offload pipelines order their copies. Every op of the CPU backend runs at its
// call, the compute queue's copies too; a copy on the upload or download queue runs only when something must see it
// done: the compute queue waiting for an event recorded after it (directly, or through the other copy queue),
// synchronize(), or a release of memory (a CUDA free waits for the device). A wait that an offload pipeline is missing
// then shows as wrong numbers on the CPU: a download that reads its buffer after the compute queue has reused it, an
// upload that the compute queue reads before it has run, an upload of host memory that a download has not yet
// written. The events are a ring of 64 as the CUDA backend's: a wait on an id recorded again waits for the newer
// record. Turned on by TOKAMAK_CPU_DEFERRED_QUEUES=1 (core/deferred_queues.h; the tests that run the offload pipelines
// so); off, a copy runs at its call.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>

#include "ops/ops.h"

namespace tk {

class DeferredCopies {
 public:
  void copy(void* dst, const void* src, size_t bytes, Ops::Queue q);
  int record(Ops::Queue q);
  void wait(Ops::Queue waiter, int event);
  // Runs every copy still queued (synchronize, a release).
  void run_all();

 private:
  // A queued step of a copy queue: a copy, or a wait for another queue to have run its first `through` steps.
  struct Step {
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    int wait_queue = -1;  // >= 0: a wait
    uint64_t through = 0;
  };
  struct Event {
    int queue = -1;  // -1: never recorded; 0: the compute queue (always passed)
    uint64_t through = 0;
  };
  static constexpr size_t kEvents = 64;
  // Runs queue q's steps until its first `through` steps have run.
  void run_through(int q, uint64_t through);

  std::array<std::deque<Step>, 3> queued_;  // [upload], [download]: the steps not yet run ([compute] stays empty)
  std::array<uint64_t, 3> enqueued_{}, ran_{};
  std::array<Event, kEvents> events_{};
  uint64_t next_event_ = 0;
};

}  // namespace tk
