// BufferCarver: lays planned buffers out back to back in one allocation, each 256-byte aligned. A plan
// runs twice: once without a base to measure the bytes, then over the allocation to hand out tensors.
// shaped() then views a buffer (sized for the largest input) with the shape of the current one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/checked.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tk {

class BufferCarver {
 public:
  explicit BufferCarver(char* base = nullptr) : base_(base) {}
  // Sizes come from the config and the batch shape: checked, so that an absurd shape is an error
  // before the allocation, not a wrapped size that carves overlapping buffers.
  Tensor take(DType dtype, int64_t numel) {
    Tensor t(base_ ? base_ + used_ : nullptr, dtype, {numel});
    const char* what = "the planned buffers' size";
    const size_t bytes = checked_mul(checked_cast<size_t>(numel, what), dtype_size(dtype), what);
    used_ = checked_add(used_, checked_add(bytes, size_t(255), what) / 256 * 256, what);
    return t;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// `buffer` seen with `dims` (at most its elements); an absent buffer stays absent.
inline Tensor shaped(const Tensor& buffer, std::initializer_list<int64_t> dims) {
  if (buffer.empty()) return Tensor();
  Tensor t(buffer.data, buffer.dtype, dims);
  TK_CHECK(t.numel() <= buffer.numel(), "a step needs {} elements of a buffer planned for {}", t.numel(),
           buffer.numel());
  return t;
}

}  // namespace tk
