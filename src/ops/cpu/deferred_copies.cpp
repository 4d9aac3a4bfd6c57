// The CPU backend's deferred copy queues (deferred_copies.h).
#include "ops/cpu/deferred_copies.h"

#include <cstring>

#include "core/error.h"

namespace tk {

void DeferredCopies::copy(void* dst, const void* src, size_t bytes, Ops::Queue q) {
  const int i = int(q);
  if (q == Ops::Queue::compute) {
    std::memcpy(dst, src, bytes);
    return;
  }
  queued_[size_t(i)].push_back(Step{dst, src, bytes, -1, 0});
  enqueued_[size_t(i)]++;
}

int DeferredCopies::record(Ops::Queue q) {
  const int id = int(next_event_++ % kEvents);
  events_[size_t(id)] = Event{int(q), enqueued_[size_t(q)]};
  return id;
}

void DeferredCopies::wait(Ops::Queue waiter, int event) {
  TK_CHECK(event >= 0 && size_t(event) < kEvents, "wait_event: no event {} was recorded", event);
  const Event e = events_[size_t(event)];
  // Never recorded (as a CUDA event never recorded: no wait), on the compute queue (it has run all it was given), or
  // on the waiter's own queue (which runs in order): nothing to wait for.
  if (e.queue <= 0 || e.queue == int(waiter)) return;
  if (waiter == Ops::Queue::compute) {
    run_through(e.queue, e.through);
  } else {
    queued_[size_t(waiter)].push_back(Step{nullptr, nullptr, 0, e.queue, e.through});
    enqueued_[size_t(waiter)]++;
  }
}

void DeferredCopies::run_all() {
  // A step of one queue may wait for the other's; running each to its end runs both.
  for (int q : {1, 2}) run_through(q, enqueued_[size_t(q)]);
}

void DeferredCopies::run_through(int q, uint64_t through) {
  std::deque<Step>& steps = queued_[size_t(q)];
  while (ran_[size_t(q)] < through) {
    const Step s = steps.front();
    steps.pop_front();
    ran_[size_t(q)]++;
    if (s.wait_queue >= 0) {
      run_through(s.wait_queue, s.through);
    } else {
      std::memcpy(s.dst, s.src, s.bytes);
    }
  }
}

}  // namespace tk
