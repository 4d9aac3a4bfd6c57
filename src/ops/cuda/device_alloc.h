// DeviceAlloc: how the CUDA building blocks (matmul, attention, cross-entropy) get device memory from
// their owner, CudaOps, so that every byte is counted in its allocation report under a label; and
// GrowingBuffer, the scratch that is allocated on first use and grows only when a larger shape first needs it.
#pragma once
#include <cstddef>
#include <functional>

namespace tk::cuda {

struct DeviceAlloc {
  std::function<void*(size_t bytes, const char* label)> allocate;  // 256-byte aligned device memory
  std::function<void(void* p)> release;
};

// The scratch rule of the CUDA backend: a buffer is allocated the first time an op needs it and grows
// (free, then allocate) only when a shape larger than any before asks for more. A training step repeats
// the shapes of the first, so no step after the first allocates. The owner of the DeviceAlloc frees what
// is left when it is destroyed.
class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;

  // A buffer of at least `bytes`; grown through `alloc` (the old contents are not kept).
  void* ensure(const DeviceAlloc& alloc, size_t bytes, const char* label) {
    if (bytes > bytes_ || ptr_ == nullptr) {
      if (ptr_) alloc.release(ptr_);
      ptr_ = nullptr;  // stays empty if the allocation throws
      bytes_ = 0;
      ptr_ = alloc.allocate(bytes > 0 ? bytes : 1, label);
      bytes_ = bytes;
    }
    return ptr_;
  }
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tk::cuda
