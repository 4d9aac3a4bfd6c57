// CudaOps' timing marks and NVTX ranges, for `tokamak profile`: a mark is a cudaEvent recorded on the
// compute stream, so it fires when the GPU gets there, not when the host queued it; the events come from
// a pool that timing_reset() recycles, so a profiled step creates none once the first step has run.
#include <nvtx3/nvToolsExt.h>

#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_ops.h"

namespace tk {

struct CudaOps::TimingEvents {
  std::vector<cudaEvent_t> events;  // created on demand, kept until the backend goes
  size_t used = 0;                  // events[0, used) hold the marks taken since the last reset

  ~TimingEvents() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);  // errors are beyond reporting in a destructor
  }

  cudaEvent_t at(int64_t mark) const {
    TK_CHECK(mark >= 0 && size_t(mark) < used, "timing mark {} is not one taken since the last timing_reset()", mark);
    return events[size_t(mark)];
  }
};

int64_t CudaOps::timing_mark() {
  if (!timing_) timing_ = std::make_shared<TimingEvents>();
  TimingEvents& t = *timing_;
  if (t.used == t.events.size()) {
    cudaEvent_t e = nullptr;
    TK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));  // with timing: no cudaEventDisableTiming
    t.events.push_back(e);
  }
  TK_CUDA_CHECK(cudaEventRecord(t.events[t.used], stream()));
  return int64_t(t.used++);
}

double CudaOps::timing_elapsed_ms(int64_t a, int64_t b) {
  TK_CHECK(timing_ != nullptr, "timing_elapsed_ms: no timing mark was taken");
  cudaEvent_t ea = timing_->at(a), eb = timing_->at(b);
  TK_CUDA_CHECK(cudaEventSynchronize(eb));
  TK_CUDA_CHECK(cudaEventSynchronize(ea));
  float ms = 0;
  TK_CUDA_CHECK(cudaEventElapsedTime(&ms, ea, eb));
  return double(ms);
}

void CudaOps::timing_reset() {
  if (timing_) timing_->used = 0;
}

void CudaOps::range_push(const char* name) { nvtxRangePushA(name); }

void CudaOps::range_pop() { nvtxRangePop(); }

}  // namespace tk
