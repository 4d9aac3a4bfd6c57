// Tensor view helpers: reshaping, row slices and a printable description for error messages.
#include "core/tensor.h"

#include <fmt/format.h>

namespace tk {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::U16: return "u16";
    case DType::U32: return "u32";
    case DType::I8: return "i8";
    case DType::U8: return "u8";
  }
  return "?";
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, dims);
  TK_CHECK(t.numel() == numel(), "cannot view {} as {} elements", describe(), t.numel());
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  TK_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], "bad row range [{}, {}) of {}", begin, end, describe());
  Tensor t = *this;
  int64_t row = numel() / (shape[0] ? shape[0] : 1);
  t.data = static_cast<char*>(data) + size_t(begin * row) * dtype_size(dtype);
  t.shape[0] = end - begin;
  return t;
}

std::string Tensor::describe() const {
  std::string s = fmt::format("{}[", dtype_name(dtype));
  for (int i = 0; i < ndim; i++) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "]";
}

}  // namespace tk
