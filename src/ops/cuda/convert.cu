// f32 <-> bf16 conversion kernels, for uploads and downloads of float data (upload_f32 / download_f32):
// 8 elements per thread with 16-byte accesses when the pointers allow, element by element otherwise.
// And a fill with hashed values, for scratch operands (the GEMM tuning's).
#include <algorithm>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

constexpr int kThreads = 256;

template <int V> __device__ void load_values(float (&v)[V], const float* p) { load_f32(v, p); }
template <int V> __device__ void load_values(float (&v)[V], const __nv_bfloat16* p) { load_bf16(v, p); }
template <int V> __device__ void store_values(float* p, const float (&v)[V]) { store_f32(p, v); }
template <int V> __device__ void store_values(__nv_bfloat16* p, const float (&v)[V]) { store_bf16(p, v); }

// Thread t converts elements [t V, t V + V); n is a multiple of V.
template <int V, class Dst, class Src>
__global__ void __launch_bounds__(kThreads) convert_kernel(Dst* dst, const Src* src, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * V;
  if (i >= n) return;
  float v[V];
  load_values(v, src + i);
  store_values(dst + i, v);
}

// The largest multiple of 8 with 16-byte accesses (when both pointers are aligned), the rest one by one.
template <class Dst, class Src>
void convert(Dst* dst, const Src* src, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t vector_part = (aligned16(dst) && aligned16(src)) ? n / kVec * kVec : 0;
  if (vector_part > 0) {
    convert_kernel<kVec><<<ceil_div(vector_part / kVec, kThreads), kThreads, 0, s>>>(dst, src, vector_part);
    TK_CUDA_CHECK_LAUNCH();
  }
  if (n > vector_part) {
    convert_kernel<1><<<ceil_div(n - vector_part, kThreads), kThreads, 0, s>>>(dst + vector_part, src + vector_part,
                                                                               n - vector_part);
    TK_CUDA_CHECK_LAUNCH();
  }
}

__global__ void fill_uniform_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t x = uint64_t(i) * 0x9e3779b97f4a7c15ull + seed;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    p[i] = __float2bfloat16_rn(float(x >> 40) * 0x1.0p-23f - 1.f);
  }
}

}  // namespace

void fill_uniform_bf16(bf16* p, int64_t n, uint64_t seed, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 4096);
  fill_uniform_kernel<<<blocks, kThreads, 0, s>>>(p, n, seed);
  TK_CUDA_CHECK_LAUNCH();
}

void f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t s) { convert(dst, src, n, s); }
void bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t s) { convert(dst, src, n, s); }

}  // namespace tk::cuda
