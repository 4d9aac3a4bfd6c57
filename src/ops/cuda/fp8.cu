// FP8 operands for the linear layers' GEMMs (per-tensor scaling): the absolute maximum of a bf16
// tensor, and its cast to e4m3 or e5m2 with the scale q = fmax / amax, written as is and/or transposed
// (cuBLASLt's FP8 GEMMs on Hopper take both operands with the contraction dimension contiguous, so the
// backward's GEMMs need transposed copies). Everything here is exact and order-free: the max is the same
// whichever order the atomics land in, and each output byte is one rounding of one input.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/swiglu.cuh"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Grid-stride over groups of 8 (16-byte loads when aligned); per block one atomicMax on the float's bits,
// which order non-negative floats as unsigned integers do.
__global__ void __launch_bounds__(kThreads) amax_kernel(float* amax, const __nv_bfloat16* x, int64_t n, bool vec) {
  float m = 0.f;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  if (vec) {
    const int64_t groups = n / kVec;
    for (int64_t g = blockIdx.x * int64_t(kThreads) + threadIdx.x; g < groups; g += stride) {
      float v[kVec];
      load_bf16(v, x + g * kVec);
#pragma unroll
      for (int j = 0; j < kVec; j++) m = fmaxf(m, fabsf(v[j]));
    }
    for (int64_t i = groups * kVec + blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += stride)
      m = fmaxf(m, fabsf(__bfloat162float(x[i])));
  } else {
    for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += stride)
      m = fmaxf(m, fabsf(__bfloat162float(x[i])));
  }
  __shared__ float warps[kThreads / 32];
  m = warp_max(m);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < kThreads / 32 ? warps[threadIdx.x] : 0.f;
    m = warp_max(m);
    if (threadIdx.x == 0 && m > 0.f) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(m));
  }
}

template <Fp8Format F>
__device__ __forceinline__ float fp8_max() {
  return F == Fp8Format::E4M3 ? 448.f : 57344.f;
}

// q = fmax / amax; 1 when amax is 0 or not finite (all zeros, or an overflow the loss will show anyway).
template <Fp8Format F>
__device__ __forceinline__ float quant_scale(const float* amax) {
  const float a = *amax;
  return (a > 0.f && isfinite(a)) ? fp8_max<F>() / a : 1.f;
}

template <Fp8Format F>
__device__ __forceinline__ __nv_fp8x2_storage_t to_fp8x2(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, F == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
}

// A tile of kTile x kTile of a source's columns per block, cast into K tiles of the output: the source gives, at
// row r and columns c .. c + 7 of its own width, K groups of 8 values that land at columns offset[k] + c of x8
// [rows, cols] and at rows offset[k] + c of its transpose xt8 [cols, rows]. A plain bf16 tensor is one group
// (Bf16Source); SwiGLU's backward gives dgate and dup from the same reads (SwigluGradSource), so its gradient is
// cast without ever being written in bf16. Each thread converts groups of 8 (8-byte stores into x8); with xt8
// the bytes also go through shared memory and leave as rows of the transpose, 16 bytes per thread. The width
// is a multiple of 8; rows and width need not fill the last tiles.
// With amax_seen, the block's largest |value| goes to *amax_seen by an atomicMax on the float's bits
// (non-negative floats order as their bits do), only when it exceeds the value there already: tens of thousands
// of blocks' atomics on one address would serialise, and after the first blocks few have a larger maximum.
// (Measured against a 64 x 128 tile with the transpose through 4-byte words and byte permutes, a block a run of
// tiles: that was slower in every mode, 80% / 66% / 68% of the copy as is / transposed / both against this
// kernel's 96% / 72% / 77%; bench/history/kernels.md.)
constexpr int kTile = 64;
constexpr int kPitch = kTile + 4;  // bytes per shared row (a multiple of 4); spreads the column reads over banks

struct Bf16Source {  // x [rows, cols] as it is
  static constexpr int K = 1;
  const __nv_bfloat16* x;
  int64_t rows, cols;
  __host__ __device__ int64_t width() const { return cols; }
  __host__ __device__ int64_t out_cols() const { return cols; }
  __host__ __device__ int64_t offset(int) const { return 0; }
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, float (&v)[K][kVec]) const {
    load_bf16(v[0], x + r * cols + c);
  }
};

// dgate_up [rows, 2 f] of SwiGLU's backward from dout [rows, f] and gate_up [rows, 2 f], each value rounded to
// bf16 as swiglu_backward stores it, so that the bytes are those of swiglu_backward followed by quantize_fp8.
struct SwigluGradSource {
  static constexpr int K = 2;
  const __nv_bfloat16 *dout, *gate_up;
  int64_t rows, f;
  __host__ __device__ int64_t width() const { return f; }
  __host__ __device__ int64_t out_cols() const { return 2 * f; }
  __host__ __device__ int64_t offset(int k) const { return k * f; }
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, float (&v)[K][kVec]) const {
    float g[kVec], u[kVec], dy[kVec];
    load_bf16(g, gate_up + r * 2 * f + c);
    load_bf16(u, gate_up + r * 2 * f + f + c);
    load_bf16(dy, dout + r * f + c);
#pragma unroll
    for (int j = 0; j < kVec; j++) {
      float dg, du;
      swiglu_grad(g[j], u[j], dy[j], dg, du);
      v[0][j] = __bfloat162float(__float2bfloat16_rn(dg));
      v[1][j] = __bfloat162float(__float2bfloat16_rn(du));
    }
  }
};

// SwiGLU's forward out = silu(g) u from gate_up [rows, 2 f], rounded to bf16 as swiglu_forward stores it (and
// stored into out [rows, f] when out is given), so that the bytes are those of swiglu_forward followed by
// quantize_fp8. The guard of such a cast recomputes the values from gate_up the same way (out null).
struct SwigluSource {
  static constexpr int K = 1;
  const __nv_bfloat16* gate_up;
  __nv_bfloat16* out;
  int64_t rows, f;
  __host__ __device__ int64_t width() const { return f; }
  __host__ __device__ int64_t out_cols() const { return f; }
  __host__ __device__ int64_t offset(int) const { return 0; }
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, float (&v)[K][kVec]) const {
    float g[kVec], u[kVec];
    load_bf16(g, gate_up + r * 2 * f + c);
    load_bf16(u, gate_up + r * 2 * f + f + c);
#pragma unroll
    for (int j = 0; j < kVec; j++) v[0][j] = __bfloat162float(__float2bfloat16_rn(swiglu_value(g[j], u[j])));
    if (out) store_bf16(out + r * f + c, v[0]);
  }
};

// RMSNorm's output h * rstd * w from its input h [rows, cols] (the rounded sum of the residual add), the saved rstd
// and the weight, rounded to bf16 as rmsnorm_forward stores it (the same products in the same order), so that the
// bytes are those of the norm's output followed by quantize_fp8.
struct RmsnormSource {
  static constexpr int K = 1;
  const __nv_bfloat16* h;
  const float* rstd;
  const __nv_bfloat16* w;
  int64_t rows, cols;
  __host__ __device__ int64_t width() const { return cols; }
  __host__ __device__ int64_t out_cols() const { return cols; }
  __host__ __device__ int64_t offset(int) const { return 0; }
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, float (&v)[K][kVec]) const {
    float hv[kVec], wv[kVec];
    load_bf16(hv, h + r * cols + c);
    load_bf16(wv, w + c);
    const float rs = rstd[r];
#pragma unroll
    for (int j = 0; j < kVec; j++) v[0][j] = __bfloat162float(__float2bfloat16_rn(hv[j] * rs * wv[j]));
  }
};

// One source tile at (r0, c0) cast with scale q into x8 and/or xt8 (the block's threads together); returns the
// largest |value| this thread converted. With xt8 it holds a barrier, so every thread of the block must call it.
template <Fp8Format F, class Src>
__device__ __forceinline__ float cast_tile(uint8_t (&tiles)[Src::K][kTile][kPitch], uint8_t* x8, uint8_t* xt8,
                                           const Src& src, int64_t r0, int64_t c0, float q) {
  constexpr int K = Src::K, kGroupsPerRow = kTile / kVec;  // 8
  const int64_t rows = src.rows, width = src.width(), cols = src.out_cols();
  float m = 0.f;
#pragma unroll
  for (int it = 0; it < kTile * kGroupsPerRow / kThreads; it++) {
    const int g = it * kThreads + threadIdx.x;
    const int tr = g / kGroupsPerRow, tc = (g % kGroupsPerRow) * kVec;
    const int64_t r = r0 + tr, c = c0 + tc;
    if (r < rows && c < width) {
      float v[K][kVec];
      src(r, c, v);
#pragma unroll
      for (int k = 0; k < K; k++) {
        union {
          __nv_fp8x2_storage_t pair[4];
          uint2 word;
        } out;
#pragma unroll
        for (int j = 0; j < kVec / 2; j++) {
          m = fmaxf(m, fmaxf(fabsf(v[k][2 * j]), fabsf(v[k][2 * j + 1])));
          out.pair[j] = to_fp8x2<F>(v[k][2 * j] * q, v[k][2 * j + 1] * q);
        }
        if (x8) *reinterpret_cast<uint2*>(x8 + r * cols + src.offset(k) + c) = out.word;
        if (xt8) {  // two 4-byte stores: the pitch keeps rows 4-byte (not 8-byte) aligned
          *reinterpret_cast<uint32_t*>(&tiles[k][tr][tc]) = out.word.x;
          *reinterpret_cast<uint32_t*>(&tiles[k][tr][tc + 4]) = out.word.y;
        }
      }
    }
  }
  if (!xt8) return m;
  __syncthreads();
  // Row c of the transpose holds column c of the tile: thread t writes 16 of its bytes (rows 16 s .. 16 s + 15).
  const int tc = threadIdx.x / 4, seg = (threadIdx.x % 4) * 16;
  const int64_t c = c0 + tc, r = r0 + seg;
  if (c < width && r < rows) {
#pragma unroll
    for (int k = 0; k < K; k++) {
      union {
        uint8_t b[16];
        uint4 word;
      } out;
#pragma unroll
      for (int j = 0; j < 16; j++) out.b[j] = tiles[k][seg + j][tc];
      uint8_t* dst = xt8 + (src.offset(k) + c) * rows + r;
      if (r + 16 <= rows && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
        *reinterpret_cast<uint4*>(dst) = out.word;
      } else {
        for (int j = 0; j < 16 && r + j < rows; j++) dst[j] = out.b[j];
      }
    }
  }
  return m;
}

template <Fp8Format F, class Src>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(uint8_t* x8, uint8_t* xt8, float* dequant, Src src, const float* amax, float* amax_seen) {
  __shared__ __align__(16) uint8_t tiles[Src::K][kTile][kPitch];
  __shared__ float warps[kThreads / 32];
  const float q = quant_scale<F>(amax);
  if (dequant && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *dequant = 1.f / q;
  float m = cast_tile<F>(tiles, x8, xt8, src, int64_t(blockIdx.y) * kTile, int64_t(blockIdx.x) * kTile, q);
  if (!amax_seen) return;
  m = warp_max(m);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = 0.f;
#pragma unroll
    for (int i = 0; i < kThreads / 32; i++) b = fmaxf(b, warps[i]);
    if (b > *static_cast<volatile float*>(amax_seen))
      atomicMax(reinterpret_cast<unsigned int*>(amax_seen), __float_as_uint(b));
  }
}

// The guard after a delayed-scaling cast: the blocks exit at once unless the cast saw a larger |x| than its
// scale (*seen > *amax: values saturated); then they cast the source again with *seen (x8, xt8, *dequant
// rewritten), each block a run of tiles, and the last block to finish (by *counter) sets *amax = *seen and
// *counter = 0. No block writes *amax before every block has read it, so all take the same branch.
template <Fp8Format F, class Src>
__device__ __forceinline__ void guard_body(uint8_t (&tiles)[Src::K][kTile][kPitch], uint8_t* x8, uint8_t* xt8,
                                           float* dequant, const Src& src, float* amax, const float* seen,
                                           unsigned int* counter, int64_t tiles_x, int64_t n_tiles) {
  const float a = *amax, s = *seen;
  if (!(s > a) || !isfinite(s)) return;
  const float q = fp8_max<F>() / s;
  if (dequant && blockIdx.x == 0 && threadIdx.x == 0) *dequant = 1.f / q;
  for (int64_t t = blockIdx.x; t < n_tiles; t += gridDim.x) {
    cast_tile<F>(tiles, x8, xt8, src, (t / tiles_x) * kTile, (t % tiles_x) * kTile, q);
    __syncthreads();  // the next tile reuses the shared tiles
  }
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(counter, 1u) == gridDim.x - 1) {
      *amax = s;
      *counter = 0;
      counter[1]++;  // the recasts, for the step's count (fp8_commit_amax)
    }
  }
}

template <Fp8Format F, class Src>
__global__ void __launch_bounds__(kThreads)
    guard_kernel(uint8_t* x8, uint8_t* xt8, float* dequant, Src src, float* amax, const float* seen,
                 unsigned int* counter, int64_t tiles_x, int64_t n_tiles) {
  __shared__ __align__(16) uint8_t tiles[Src::K][kTile][kPitch];
  guard_body<F>(tiles, x8, xt8, dequant, src, amax, seen, counter, tiles_x, n_tiles);
}

// The guards of several bf16 casts in one launch: each block looks at every operand in turn, so a guard that finds
// nothing to do costs one launch of one block an SM, and a linear's casts (x, w, dy) all end before its GEMMs.
struct GuardBatch {
  Fp8GuardOperand op[kFp8MaxGuarded];
  int64_t tiles_x[kFp8MaxGuarded], n_tiles[kFp8MaxGuarded];
  int n;
};

__global__ void __launch_bounds__(kThreads) guard_batch_kernel(const __grid_constant__ GuardBatch b) {
  __shared__ __align__(16) uint8_t tiles[1][kTile][kPitch];
  for (int i = 0; i < b.n; i++) {
    const Fp8GuardOperand& o = b.op[i];
    auto guard = [&](const auto& src) {
      if (o.format == Fp8Format::E4M3) {
        guard_body<Fp8Format::E4M3>(tiles, o.x8, o.xt8, o.dequant, src, o.amax, o.seen, o.counter, b.tiles_x[i],
                                    b.n_tiles[i]);
      } else {
        guard_body<Fp8Format::E5M2>(tiles, o.x8, o.xt8, o.dequant, src, o.amax, o.seen, o.counter, b.tiles_x[i],
                                    b.n_tiles[i]);
      }
    };
    if (o.gate_up) {
      guard(SwigluSource{o.gate_up, nullptr, o.rows, o.cols});
    } else if (o.rstd) {
      guard(RmsnormSource{o.x, o.rstd, o.norm_w, o.rows, o.cols});
    } else {
      guard(Bf16Source{o.x, o.rows, o.cols});
    }
  }
}

__global__ void commit_kernel(float* slots, float* history, int n, int history_len, int position, float margin,
                              unsigned long long* recasts) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float* slot = slots + int64_t(i) * kFp8SlotFloats;
  float* h = history + int64_t(i) * history_len;
  h[position] = slot[1];
  float m = 0.f;
  for (int j = 0; j < history_len; j++) m = fmaxf(m, h[j]);
  slot[0] = m * margin;  // a power of two: exact
  slot[1] = 0.f;
  unsigned* count = reinterpret_cast<unsigned*>(slot + 3);
  if (*count) {
    if (recasts) atomicAdd(recasts, (unsigned long long)*count);  // integers: the same total in any order
    *count = 0;
  }
}

template <class Src>
void launch_cast(uint8_t* x8, uint8_t* xt8, float* dequant, const Src& src, const float* amax, float* amax_seen,
                 Fp8Format format, cudaStream_t s) {
  const dim3 grid(unsigned(ceil_div(src.width(), kTile)), unsigned(ceil_div(src.rows, kTile)));
  TK_CHECK(grid.y <= 65535, "FP8 cast: {} rows is more than this kernel's grid takes", src.rows);
  if (format == Fp8Format::E4M3) {
    quantize_kernel<Fp8Format::E4M3, Src><<<grid, kThreads, 0, s>>>(x8, xt8, dequant, src, amax, amax_seen);
  } else {
    quantize_kernel<Fp8Format::E5M2, Src><<<grid, kThreads, 0, s>>>(x8, xt8, dequant, src, amax, amax_seen);
  }
  TK_CUDA_CHECK_LAUNCH();
}

// A guard's blocks, whatever the operands: four an SM (at most one a tile). Exiting at once then costs one short
// wave, and a recast (every step early in training, while the amax grows past its history) runs near the cast's
// rate; one block an SM halved that rate (bench/history/fp8-first-days.md).
unsigned guard_blocks(int64_t n_tiles) { return unsigned(std::min<int64_t>(n_tiles, 4 * int64_t(sm_count()))); }

template <class Src>
void launch_guard(uint8_t* x8, uint8_t* xt8, float* dequant, const Src& src, float* amax, const float* seen,
                  unsigned int* counter, Fp8Format format, cudaStream_t s) {
  const int64_t tiles_x = ceil_div(src.width(), kTile), n_tiles = tiles_x * ceil_div(src.rows, kTile);
  const unsigned grid = guard_blocks(n_tiles);
  if (format == Fp8Format::E4M3) {
    guard_kernel<Fp8Format::E4M3, Src>
        <<<grid, kThreads, 0, s>>>(x8, xt8, dequant, src, amax, seen, counter, tiles_x, n_tiles);
  } else {
    guard_kernel<Fp8Format::E5M2, Src>
        <<<grid, kThreads, 0, s>>>(x8, xt8, dequant, src, amax, seen, counter, tiles_x, n_tiles);
  }
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp8_guard(uint8_t* x8, uint8_t* xt8, float* dequant, const bf16* x, int64_t rows, int64_t cols, float* amax,
               const float* seen, unsigned int* counter, Fp8Format format, cudaStream_t s) {
  const Fp8GuardOperand op{x8, xt8, dequant, x, rows, cols, amax, seen, counter, format};
  fp8_guard_all(&op, 1, s);
}

void fp8_guard_all(const Fp8GuardOperand* ops, int n, cudaStream_t s) {
  TK_CHECK(n >= 0 && n <= kFp8MaxGuarded, "fp8_guard_all: {} operands, at most {} a launch", n, kFp8MaxGuarded);
  GuardBatch b{};
  int m = 0;
  int64_t most = 0;
  for (int i = 0; i < n; i++) {
    if (ops[i].rows <= 0 || ops[i].cols <= 0) continue;
    b.op[m] = ops[i];
    b.tiles_x[m] = ceil_div(ops[i].cols, kTile);
    b.n_tiles[m] = b.tiles_x[m] * ceil_div(ops[i].rows, kTile);
    most = std::max(most, b.n_tiles[m]);
    m++;
  }
  if (m == 0) return;
  b.n = m;
  guard_batch_kernel<<<guard_blocks(most), kThreads, 0, s>>>(b);
  TK_CUDA_CHECK_LAUNCH();
}

void swiglu_backward_fp8(uint8_t* dy8, uint8_t* dyt8, float* dequant, const bf16* dout, const bf16* gate_up,
                         int64_t N, int f, float* amax, float* amax_seen, unsigned int* counter, Fp8Format format,
                         cudaStream_t s) {
  TK_CHECK(f > 0 && f % kVec == 0 && aligned16(dout) && aligned16(gate_up),
           "swiglu_backward_fp8: the hidden width ({}) must be a multiple of 8 and the inputs 16-byte aligned", f);
  TK_CHECK(!dy8 || (reinterpret_cast<uintptr_t>(dy8) & 7) == 0, "swiglu_backward_fp8: dy8 must be 8-byte aligned");
  if (N <= 0) return;
  const SwigluGradSource src{dout, gate_up, N, f};
  launch_cast(dy8, dyt8, dequant, src, amax, amax_seen, format, s);
  launch_guard(dy8, dyt8, dequant, src, amax, amax_seen, counter, format, s);
}

void swiglu_forward_fp8(bf16* out, uint8_t* x8, uint8_t* xt8, float* dequant, const bf16* gate_up, int64_t N,
                        int f, const float* amax, float* amax_seen, Fp8Format format, cudaStream_t s) {
  TK_CHECK(f > 0 && f % kVec == 0 && (!out || aligned16(out)) && aligned16(gate_up),
           "swiglu_forward_fp8: the hidden width ({}) must be a multiple of 8 and the tensors 16-byte aligned", f);
  TK_CHECK((reinterpret_cast<uintptr_t>(x8) & 7) == 0, "swiglu_forward_fp8: x8 must be 8-byte aligned");
  if (N <= 0) return;
  launch_cast(x8, xt8, dequant, SwigluSource{gate_up, out, N, f}, amax, amax_seen, format, s);
}

void rmsnorm_cast_fp8(uint8_t* x8, uint8_t* xt8, float* dequant, const bf16* h, const float* rstd, const bf16* w,
                      int64_t N, int d, const float* amax, float* amax_seen, Fp8Format format, cudaStream_t s) {
  TK_CHECK(d > 0 && d % kVec == 0 && aligned16(h) && aligned16(w),
           "rmsnorm_cast_fp8: the width ({}) must be a multiple of 8 and the tensors 16-byte aligned", d);
  TK_CHECK((reinterpret_cast<uintptr_t>(x8) & 7) == 0, "rmsnorm_cast_fp8: x8 must be 8-byte aligned");
  if (N <= 0) return;
  launch_cast(x8, xt8, dequant, RmsnormSource{h, rstd, w, N, d}, amax, amax_seen, format, s);
}

void fp8_commit_amax(float* slots, float* history, int n, int history_len, int position, float margin,
                     unsigned long long* recasts, cudaStream_t s) {
  TK_CHECK(position >= 0 && position < history_len, "fp8_commit_amax: position {} outside a history of {}", position,
           history_len);
  TK_CHECK(margin >= 1.f && std::exp2(std::round(std::log2(margin))) == margin,
           "fp8_commit_amax: the margin ({}) must be a power of two, 1 or more", margin);
  if (n <= 0) return;
  commit_kernel<<<unsigned(ceil_div(n, 256)), 256, 0, s>>>(slots, history, n, history_len, position, margin,
                                                           recasts);
  TK_CUDA_CHECK_LAUNCH();
}

void amax_bf16(float* amax, const bf16* x, int64_t n, cudaStream_t s) {
  TK_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), s));
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>(ceil_div(ceil_div(n, kVec), kThreads), 132 * 8);
  amax_kernel<<<unsigned(blocks), kThreads, 0, s>>>(amax, x, n, aligned16(x));
  TK_CUDA_CHECK_LAUNCH();
}

void quantize_fp8(uint8_t* x8, uint8_t* xt8, float* dequant, const bf16* x, int64_t rows, int64_t cols,
                  const float* amax, Fp8Format format, cudaStream_t s, float* amax_seen) {
  TK_CHECK(cols % kVec == 0 && aligned16(x), "quantize_fp8: the row length ({}) must be a multiple of 8 and x "
           "16-byte aligned", cols);
  TK_CHECK(!x8 || (reinterpret_cast<uintptr_t>(x8) & 7) == 0, "quantize_fp8: x8 must be 8-byte aligned");
  if (rows <= 0 || cols <= 0) return;
  launch_cast(x8, xt8, dequant, Bf16Source{x, rows, cols}, amax, amax_seen, format, s);
}

}  // namespace tk::cuda
