// DeviceMemory: the CUDA backend's memory and copy queues. Every device allocation is cudaMalloc'd and recorded
// under a label in the ledger the memory plan is printed from; host memory for offloaded state is page-locked;
// and copies may run on an upload and a download queue of their own, ordered against the compute stream by a ring
// of events (ops.h, copy queues).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "ops/memory_ledger.h"
#include "ops/ops.h"

namespace tk::cuda {

class DeviceMemory {
 public:
  explicit DeviceMemory(cudaStream_t compute) : compute_(compute) {}
  // Waits for the copy queues, then frees them, their events and every allocation left.
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // cudaMalloc (256-byte aligned), recorded under `label`; out of memory is a tk::Error saying what did not fit.
  void* allocate(size_t bytes, const char* label);
  // The bytes allocated at p; a tk::Error when p was not allocated here.
  size_t bytes_of(void* p) const;
  void release(void* p);
  std::vector<MemoryRow> rows() const { return ledger_.rows(); }
  void seal() { ledger_.seal(); }

  // Page-locked (cudaMallocHost), so that copies of it run at the full PCIe/NVLink-C2C rate.
  static void* allocate_host(size_t bytes, const char* label);
  static void release_host(void* p);

  // The stream of a queue: the compute stream, or a copy queue created on its first use.
  cudaStream_t queue(Ops::Queue q);
  void copy_async(void* dst, const void* src, size_t bytes, Ops::Queue q);
  int record_event(Ops::Queue q);
  void wait_event(Ops::Queue waiter, int event);

 private:
  cudaStream_t compute_;
  cudaStream_t upload_ = nullptr, download_ = nullptr;
  // An event may be recorded again once every wait on it has been queued, which record/wait pairs in program
  // order guarantee long before the ring comes round.
  std::vector<cudaEvent_t> events_;
  size_t next_event_ = 0;
  MemoryLedger ledger_;
};

}  // namespace tk::cuda
