// DeviceMemory (device_memory.h): allocations through the ledger, page-locked host memory, and the copy queues
// with their ring of events.
#include "ops/cuda/device_memory.h"

#include "core/error.h"
#include "core/format.h"
#include "core/log.h"
#include "ops/cuda/cuda_check.h"

namespace tk::cuda {

DeviceMemory::~DeviceMemory() {
  // Errors are beyond reporting in a destructor.
  for (cudaStream_t s : {upload_, download_})
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (void* p : ledger_.pointers()) cudaFree(p);
}

void* DeviceMemory::allocate(size_t bytes, const char* label) {
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);  // cudaMalloc aligns to at least 256 bytes
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky out-of-memory status
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail("out of GPU memory: {} for '{}' did not fit ({} already held by tokamak, {} free of {}); lower the "
         "micro-batch or the sequence length ({})",
         format_bytes(double(bytes)), label, format_bytes(double(ledger_.total())), format_bytes(double(free_b)),
         format_bytes(double(total_b)), cudaGetErrorString(err));
  }
  ledger_.add(p, bytes, label);
  log::debug("cuda: allocated {} for {}", format_bytes(double(bytes)), label);
  return p;
}

size_t DeviceMemory::bytes_of(void* p) const {
  TK_CHECK(ledger_.contains(p), "release: {} was not allocated by this CUDA backend", p);
  return ledger_.bytes_of(p);
}

void DeviceMemory::release(void* p) {
  TK_CHECK(ledger_.contains(p), "release: {} was not allocated by this CUDA backend", p);
  TK_CUDA_CHECK(cudaFree(p));
  ledger_.remove(p);
}

void* DeviceMemory::allocate_host(size_t bytes, const char* label) {
  void* p = nullptr;
  cudaError_t err = cudaMallocHost(&p, bytes ? bytes : 1);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("could not page-lock {} of host memory for '{}' ({}); free host memory or offload less",
         format_bytes(double(bytes)), label, cudaGetErrorString(err));
  }
  log::debug("cuda: page-locked {} of host memory for {}", format_bytes(double(bytes)), label);
  return p;
}

void DeviceMemory::release_host(void* p) {
  if (p) cudaFreeHost(p);
}

cudaStream_t DeviceMemory::queue(Ops::Queue q) {
  if (q == Ops::Queue::compute) return compute_;
  cudaStream_t& s = q == Ops::Queue::upload ? upload_ : download_;
  if (!s) TK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void DeviceMemory::copy_async(void* dst, const void* src, size_t bytes, Ops::Queue q) {
  TK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, queue(q)));
}

int DeviceMemory::record_event(Ops::Queue q) {
  constexpr size_t kEvents = 64;
  if (events_.empty()) {
    events_.resize(kEvents);
    for (cudaEvent_t& e : events_) TK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  const int id = int(next_event_++ % kEvents);
  TK_CUDA_CHECK(cudaEventRecord(events_[size_t(id)], queue(q)));
  return id;
}

void DeviceMemory::wait_event(Ops::Queue waiter, int event) {
  TK_CHECK(event >= 0 && size_t(event) < events_.size(), "wait_event: no event {} was recorded", event);
  TK_CUDA_CHECK(cudaStreamWaitEvent(queue(waiter), events_[size_t(event)], 0));
}

}  // namespace tk::cuda
