// Memory ops of the CPU backend: host memory is device memory, so allocation is aligned_alloc and
// transfers are copies, converting between the host's float32 and the tensor's dtype where asked.
#include <cstdlib>
#include <cstring>

#include "core/bf16.h"
#include "ops/cpu/cpu_ops.h"

namespace tk {

namespace {

constexpr size_t kAlignment = 256;

void check_float_tensor(const Tensor& t, const char* op) {
  TK_CHECK(!t.empty(), "{}: the tensor is missing", op);
  TK_CHECK(t.dtype == DType::F32 || t.dtype == DType::F64 || t.dtype == DType::BF16,
           "{}: {} is not a floating-point tensor", op, t.describe());
}

}  // namespace

template <class T>
void* CpuOps<T>::allocate(size_t bytes, const char* label) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment);
  TK_CHECK(p != nullptr, "out of host memory: could not allocate {} bytes for {}", bytes, label);
  ledger_.add(p, bytes, label);
  return p;
}

// A release waits for every queued copy, as a CUDA free waits for the device.
template <class T>
void CpuOps<T>::release(void* p) {
  synchronize();
  ledger_.remove(p);
  std::free(p);
}

template <class T>
void CpuOps<T>::release_host(void* p) {
  synchronize();
  Ops::release_host(p);
}

template <class T>
void CpuOps<T>::copy_async(void* dst, const void* src, size_t bytes, Queue q) {
  if (deferred_) {
    deferred_->copy(dst, src, bytes, q);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

template <class T>
void CpuOps<T>::zero(const Tensor& t) {
  if (!t.empty()) std::memset(t.data, 0, t.nbytes());
}

template <class T>
void CpuOps<T>::upload_f32(const Tensor& dst, const float* src) {
  check_float_tensor(dst, "upload_f32");
  int64_t n = dst.numel();
  switch (dst.dtype) {
    case DType::F32: std::memcpy(dst.data, src, size_t(n) * 4); break;
    case DType::F64:
      for (int64_t i = 0; i < n; i++) dst.as<double>()[i] = src[i];
      break;
    default:
      for (int64_t i = 0; i < n; i++) dst.as<uint16_t>()[i] = float_to_bf16(src[i]);
      break;
  }
}

template <class T>
void CpuOps<T>::download_f32(float* dst, const Tensor& src) {
  check_float_tensor(src, "download_f32");
  int64_t n = src.numel();
  switch (src.dtype) {
    case DType::F32: std::memcpy(dst, src.data, size_t(n) * 4); break;
    case DType::F64:
      for (int64_t i = 0; i < n; i++) dst[i] = float(src.as<double>()[i]);
      break;
    default:
      for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_float(src.as<uint16_t>()[i]);
      break;
  }
}

template <class T>
void CpuOps<T>::convert(const Tensor& dst, const Tensor& src) {
  check_float_tensor(dst, "convert");
  check_float_tensor(src, "convert");
  TK_CHECK(dst.numel() == src.numel(), "convert: {} and {} differ in size", dst.describe(), src.describe());
  if (dst.dtype == src.dtype) {
    std::memmove(dst.data, src.data, src.nbytes());
    return;
  }
  auto read = [&](int64_t i) {
    return src.dtype == DType::F64   ? src.as<double>()[i]
           : src.dtype == DType::F32 ? double(src.as<float>()[i])
                                     : double(bf16_to_float(src.as<uint16_t>()[i]));
  };
  for (int64_t i = 0; i < src.numel(); i++) {
    if (dst.dtype == DType::F64) dst.as<double>()[i] = read(i);
    else if (dst.dtype == DType::F32) dst.as<float>()[i] = float(read(i));
    else dst.as<uint16_t>()[i] = float_to_bf16(float(read(i)));  // f64 -> bf16 through f32, as upload_f32 rounds
  }
}

template <class T>
void CpuOps<T>::upload(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

template <class T>
void CpuOps<T>::download(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

#define TK_INSTANTIATE_MEMORY(T)                                             \
  template void* CpuOps<T>::allocate(size_t, const char*);                              \
  template void CpuOps<T>::release(void*);                                   \
  template void CpuOps<T>::release_host(void*);                              \
  template void CpuOps<T>::copy_async(void*, const void*, size_t, Queue);    \
  template void CpuOps<T>::zero(const Tensor&);                              \
  template void CpuOps<T>::upload_f32(const Tensor&, const float*);          \
  template void CpuOps<T>::download_f32(float*, const Tensor&);              \
  template void CpuOps<T>::convert(const Tensor&, const Tensor&);            \
  template void CpuOps<T>::upload(void*, const void*, size_t);               \
  template void CpuOps<T>::download(void*, const void*, size_t);
TK_INSTANTIATE_MEMORY(float)
TK_INSTANTIATE_MEMORY(double)

}  // namespace tk
