// Deterministic reductions shared by the fused kernels: warp and block sums that every thread of a block
// ends with bitwise the same value of, and the second pass that folds per-block partial columns
// [blocks, cols] into a parameter gradient in a fixed order (no floating-point atomics anywhere).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/cuda_check.h"

namespace tk::cuda {

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sums over each aligned group of G consecutive lanes (G a power of two <= 32); every lane of a group
// gets its group's sum.
template <int G>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// v[r] = the sum of v[r] over the whole block, for R values at once; all threads get the same bits
// (each adds the warp totals in warp order). smem holds R*32 floats; a caller that reduces again before
// all threads have passed another barrier must alternate between two buffers.
template <int R>
__device__ __forceinline__ void block_sum(float (&v)[R], float* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int r = 0; r < R; r++) v[r] = warp_sum(v[r]);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; r++) smem[r * 32 + warp] = v[r];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < R; r++) {
    float total = 0.f;
    for (int w = 0; w < n_warps; w++) total += smem[r * 32 + w];
    v[r] = total;
  }
}

// out[c] += sum over b < n_blocks of partial[b * stride + c], for c < cols, always in the same order:
// thread row y sums blocks y, y+kRows, ... and the kRows row sums are then added in row order.
// Block: 32 columns x kRows rows of threads; grid: ceil(cols / 32). (A template, so that every .cu file
// including this header can instantiate it.)
template <int kRows>
__global__ void __launch_bounds__(32 * kRows)
    column_reduce_kernel(float* out, const float* partial, int n_blocks, int cols, int stride) {
  __shared__ float row_sums[kRows][33];
  const int c = blockIdx.x * 32 + threadIdx.x, y = threadIdx.y;
  float s = 0.f;
  if (c < cols) {
    int b = y;
    for (; b + 3 * kRows < n_blocks; b += 4 * kRows) {  // four loads in flight
      float a0 = partial[int64_t(b) * stride + c];
      float a1 = partial[int64_t(b + kRows) * stride + c];
      float a2 = partial[int64_t(b + 2 * kRows) * stride + c];
      float a3 = partial[int64_t(b + 3 * kRows) * stride + c];
      s += a0, s += a1, s += a2, s += a3;
    }
    for (; b < n_blocks; b += kRows) s += partial[int64_t(b) * stride + c];
  }
  row_sums[y][threadIdx.x] = s;
  __syncthreads();
  if (y == 0 && c < cols) {
    float total = 0.f;
    for (int r = 0; r < kRows; r++) total += row_sums[r][threadIdx.x];
    out[c] += total;
  }
}

inline void column_reduce_add(float* out, const float* partial, int n_blocks, int cols, int stride,
                              cudaStream_t s) {
  constexpr int kRows = 8;
  column_reduce_kernel<kRows><<<(cols + 31) / 32, dim3(32, kRows), 0, s>>>(out, partial, n_blocks, cols, stride);
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
