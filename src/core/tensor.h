// Tensor: a non-owning view (pointer, dtype, up to 4 dims, row-major contiguous) passed to ops.
// Memory is owned by the arena of whichever backend allocated it; a Tensor never frees anything.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace tk {

enum class DType : uint8_t { F32, F64, BF16, I32, U16, U32, I8, U8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: return 8;
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::BF16: case DType::U16: return 2;
    case DType::I8: case DType::U8: return 1;
  }
  return 0;
}
const char* dtype_name(DType t);

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<int64_t, 4> shape{};

  Tensor() = default;
  Tensor(void* p, DType t, std::initializer_list<int64_t> dims) : data(p), dtype(t), ndim(int(dims.size())) {
    TK_CHECK(dims.size() <= 4, "tensor rank {} > 4", dims.size());
    int i = 0;
    for (int64_t d : dims) shape[i++] = d;
  }

  bool empty() const { return data == nullptr; }
  explicit operator bool() const { return data != nullptr; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
  }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  template <class T> T* as() const { return static_cast<T*>(data); }
  // A view of the same bytes with other dims (numel must match).
  Tensor view(std::initializer_list<int64_t> dims) const;
  // Rows [begin, end) of the leading dimension.
  Tensor rows(int64_t begin, int64_t end) const;
  std::string describe() const;  // "bf16[8, 2048, 896]"
};

}  // namespace tk
