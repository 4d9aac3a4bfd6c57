// Fused LM head + cross-entropy. For each chunk of `rows` tokens:
//   1. logits[rows, V] = x_chunk w^T                      (cuBLASLt, bf16 out, f32 accumulate)
//   2. one block per row: f32 online logsumexp over V, loss = lse - logit[target], and, when a gradient is
//      wanted, dlogits = (softmax - onehot) * grad_scale written in place over the logits (bf16)
//   3. dx_chunk = dlogits w;  dw += dlogits^T x_chunk      (cuBLASLt)
// Why chunks of tokens rather than of the vocabulary: a token's loss needs the logsumexp over the whole
// vocabulary before any of its dlogits can be written. With vocabulary chunks the logits would have to be
// made twice (one pass for the logsumexp, a second to form dlogits): four LM-head GEMMs instead of three.
// With token chunks each row's full logits are at hand, so the three GEMMs are the minimum, and memory is
// still bounded by the chunk (rows x V bf16), never the f32 [N, V] logits.
#include "ops/cuda/cross_entropy.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

#include "ops/cuda/cuda_check.h"

namespace tk::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kVec = 8;       // bf16 per 16-byte load
constexpr int kInFlight = 4;  // 16-byte loads each thread issues before using the first

// A running (max, sum of exp(v - max)) pair: the online softmax state of a set of logits.
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  float m = fmaxf(a.m, b.m);
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ MaxSum add_values(MaxSum acc, const float* v, int n) {
  float vmax = v[0];
  for (int i = 1; i < n; i++) vmax = fmaxf(vmax, v[i]);
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += __expf(v[i] - vmax);
  return merge(acc, {vmax, s});
}

// Reduces one MaxSum per thread to the whole block's, in a fixed tree order (deterministic).
__device__ MaxSum block_reduce(MaxSum x) {
  __shared__ MaxSum warp_results[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, x.m, offset), __shfl_xor_sync(0xffffffffu, x.s, offset)};
    x = merge(x, other);
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_results[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = lane < kThreads / 32 ? warp_results[lane] : MaxSum{-INFINITY, 0.0f};
    for (int offset = 16; offset > 0; offset /= 2) {
      MaxSum other{__shfl_xor_sync(0xffffffffu, x.m, offset), __shfl_xor_sync(0xffffffffu, x.s, offset)};
      x = merge(x, other);
    }
    if (lane == 0) warp_results[0] = x;
  }
  __syncthreads();
  return warp_results[0];
}

// A row of V bf16 split into a scalar head (up to the first 16-byte boundary), a body of 16-byte vectors
// and a scalar tail: rows of an odd vocabulary (50257) start at any even address.
struct RowSplit {
  int64_t head, n_vec, tail_start;
};

__device__ __forceinline__ RowSplit split_row(const bf16* row, int64_t V) {
  auto addr = reinterpret_cast<uintptr_t>(row);
  int64_t head = int64_t((16 - addr % 16) % 16) / int64_t(sizeof(bf16));
  head = head < V ? head : V;
  int64_t n_vec = (V - head) / kVec;
  return {head, n_vec, head + n_vec * kVec};
}

__device__ __forceinline__ void unpack(const uint4& raw, float* v) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec / 2; i++) {
    float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

// Pass 1: this thread's share of the row's (max, sum exp).
__device__ MaxSum row_max_sum(const bf16* row, int64_t V, RowSplit sp) {
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t i = threadIdx.x; i < sp.head; i += kThreads) {
    float v = __bfloat162float(row[i]);
    acc = add_values(acc, &v, 1);
  }
  const uint4* body = reinterpret_cast<const uint4*>(row + sp.head);
  for (int64_t base = threadIdx.x; base < sp.n_vec; base += int64_t(kThreads) * kInFlight) {
    uint4 raw[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; u++) {
      int64_t i = base + int64_t(u) * kThreads;
      if (i < sp.n_vec) raw[u] = __ldg(body + i);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; u++) {
      if (base + int64_t(u) * kThreads < sp.n_vec) {
        float v[kVec];
        unpack(raw[u], v);
        acc = add_values(acc, v, kVec);
      }
    }
  }
  for (int64_t i = sp.tail_start + threadIdx.x; i < V; i += kThreads) {
    float v = __bfloat162float(row[i]);
    acc = add_values(acc, &v, 1);
  }
  return acc;
}

__device__ __forceinline__ float dlogit(float v, int64_t col, float lse, int64_t target, float scale) {
  float p = __expf(v - lse);
  return (p - (col == target ? 1.0f : 0.0f)) * scale;
}

// Pass 2: dlogits = (softmax - onehot(target)) * scale, in place (scale 0 writes zeros: ignored rows).
__device__ void write_dlogits(bf16* row, int64_t V, RowSplit sp, float lse, int64_t target, float scale) {
  for (int64_t i = threadIdx.x; i < sp.head; i += kThreads)
    row[i] = __float2bfloat16(dlogit(__bfloat162float(row[i]), i, lse, target, scale));
  uint4* body = reinterpret_cast<uint4*>(row + sp.head);
  for (int64_t base = threadIdx.x; base < sp.n_vec; base += int64_t(kThreads) * kInFlight) {
    uint4 raw[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; u++) {
      int64_t i = base + int64_t(u) * kThreads;
      if (i < sp.n_vec) raw[u] = body[i];
    }
#pragma unroll
    for (int u = 0; u < kInFlight; u++) {
      int64_t i = base + int64_t(u) * kThreads;
      if (i < sp.n_vec) {
        float v[kVec];
        unpack(raw[u], v);
        int64_t col0 = sp.head + i * kVec;
        uint4 out;
        __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int j = 0; j < kVec / 2; j++) {
          o[j] = __floats2bfloat162_rn(dlogit(v[2 * j], col0 + 2 * j, lse, target, scale),
                                       dlogit(v[2 * j + 1], col0 + 2 * j + 1, lse, target, scale));
        }
        body[i] = out;
      }
    }
  }
  for (int64_t i = sp.tail_start + threadIdx.x; i < V; i += kThreads)
    row[i] = __float2bfloat16(dlogit(__bfloat162float(row[i]), i, lse, target, scale));
}

// One block per token row of the chunk.
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows(bf16* logits, float* losses, const int32_t* targets, int64_t V, float grad_scale,
                       int ignore_index, bool write_grad) {
  bf16* row = logits + int64_t(blockIdx.x) * V;
  RowSplit sp = split_row(row, V);
  MaxSum total = block_reduce(row_max_sum(row, V, sp));
  float lse = total.m + logf(total.s);

  int64_t target = targets[blockIdx.x];
  bool ignored = target == ignore_index;
  bool in_range = target >= 0 && target < V;
  if (threadIdx.x == 0) {
    float loss = ignored ? 0.0f : in_range ? lse - __bfloat162float(row[target]) : NAN;
    losses[blockIdx.x] = loss;
  }
  if (!write_grad) return;
  __syncthreads();  // row[target] is read above before pass 2 overwrites it
  write_dlogits(row, V, sp, lse, in_range ? target : -1, ignored ? 0.0f : grad_scale);
}

// The FP8 LM head's dlogits scale: e5m2's largest value over their bound grad_scale (each |softmax - onehot| is at
// most 1), so that (softmax - onehot) * kDlogitScale is what the cast writes, and grad_scale / kDlogitScale what
// the GEMMs multiply back by.
constexpr float kDlogitScale = 57344.f;

// As cross_entropy_rows, but the dlogits go to dl8 [rows, V] in e5m2, scaled by kDlogitScale (0 for an ignored
// target), and the logits are left as they are. V % 16 == 0 and 16-byte aligned rows: no head, no tail.
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_fp8(const bf16* logits, uint8_t* dl8, float* dequant, float* losses, const int32_t* targets,
                           int64_t V, float grad_scale, int ignore_index) {
  const bf16* row = logits + int64_t(blockIdx.x) * V;
  const RowSplit sp{0, V / kVec, V};
  MaxSum total = block_reduce(row_max_sum(row, V, sp));
  const float lse = total.m + logf(total.s);
  const int64_t target = targets[blockIdx.x];
  const bool ignored = target == ignore_index, in_range = target >= 0 && target < V;
  if (threadIdx.x == 0) losses[blockIdx.x] = ignored ? 0.0f : in_range ? lse - __bfloat162float(row[target]) : NAN;
  if (blockIdx.x == 0 && threadIdx.x == 0) *dequant = grad_scale / kDlogitScale;
  const float scale = ignored ? 0.0f : kDlogitScale;
  const int64_t t = in_range ? target : -1;
  const uint4* body = reinterpret_cast<const uint4*>(row);
  uint2* out = reinterpret_cast<uint2*>(dl8 + int64_t(blockIdx.x) * V);
  for (int64_t base = threadIdx.x; base < sp.n_vec; base += int64_t(kThreads) * kInFlight) {
    uint4 raw[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; u++) {
      const int64_t i = base + int64_t(u) * kThreads;
      if (i < sp.n_vec) raw[u] = __ldg(body + i);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; u++) {
      const int64_t i = base + int64_t(u) * kThreads;
      if (i < sp.n_vec) {
        float v[kVec];
        unpack(raw[u], v);
        union {
          __nv_fp8x2_storage_t pair[kVec / 2];
          uint2 word;
        } o;
#pragma unroll
        for (int j = 0; j < kVec / 2; j++) {
          const float a = dlogit(v[2 * j], i * kVec + 2 * j, lse, t, scale);
          const float b = dlogit(v[2 * j + 1], i * kVec + 2 * j + 1, lse, t, scale);
          o.pair[j] = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E5M2);
        }
        out[i] = o.word;
      }
    }
  }
}

// in [rows, cols] -> out [cols, rows], bytes, through a 64 x 64 tile in shared memory; rows and cols multiples of
// 16 (a 16-byte piece is wholly in or out). 256 threads: each moves 16 bytes in and 16 out.
constexpr int kTT = 64, kTPitch = kTT + 4;
__global__ void __launch_bounds__(256) transpose_bytes_kernel(uint8_t* out, const uint8_t* in, int64_t rows,
                                                              int64_t cols) {
  __shared__ __align__(16) uint8_t tile[kTT][kTPitch];
  const int64_t r0 = int64_t(blockIdx.y) * kTT, c0 = int64_t(blockIdx.x) * kTT;
  {
    const int tr = threadIdx.x / 4, tc = (threadIdx.x % 4) * 16;
    if (r0 + tr < rows && c0 + tc < cols) {
      const uint4 v = *reinterpret_cast<const uint4*>(in + (r0 + tr) * cols + c0 + tc);
      uint32_t* dst = reinterpret_cast<uint32_t*>(&tile[tr][tc]);
      dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
    }
  }
  __syncthreads();
  const int oc = threadIdx.x / 4, seg = (threadIdx.x % 4) * 16;  // out row c0 + oc, its bytes r0 + seg ..
  if (c0 + oc < cols && r0 + seg < rows) {
    union {
      uint8_t b[16];
      uint4 word;
    } o;
#pragma unroll
    for (int j = 0; j < 16; j++) o.b[j] = tile[seg + j][oc];
    *reinterpret_cast<uint4*>(out + (c0 + oc) * rows + r0 + seg) = o.word;
  }
}

}  // namespace

void cross_entropy_chunk_fp8(const bf16* logits, uint8_t* dl8, float* dequant, float* losses, const int32_t* targets,
                             int64_t rows, int64_t V, float grad_scale, int ignore_index, cudaStream_t stream) {
  TK_CUDA_REQUIRE(V % 16 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(dl8) % 8 == 0,
                  "cross_entropy_chunk_fp8: V (%lld) must be a multiple of 16 and the buffers aligned", (long long)V);
  if (rows <= 0) return;
  cross_entropy_rows_fp8<<<unsigned(rows), kThreads, 0, stream>>>(logits, dl8, dequant, losses, targets, V,
                                                                   grad_scale, ignore_index);
  TK_CUDA_CHECK_LAUNCH();
}

void transpose_bytes(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols, cudaStream_t stream) {
  TK_CUDA_REQUIRE(rows % 16 == 0 && cols % 16 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(out) % 16 == 0,
                  "transpose_bytes: %lld x %lld must be multiples of 16 and the buffers 16-byte aligned",
                  (long long)rows, (long long)cols);
  if (rows <= 0 || cols <= 0) return;
  const dim3 grid(unsigned((cols + kTT - 1) / kTT), unsigned((rows + kTT - 1) / kTT));
  transpose_bytes_kernel<<<grid, 256, 0, stream>>>(out, in, rows, cols);
  TK_CUDA_CHECK_LAUNCH();
}

void cross_entropy_chunk(bf16* logits, float* losses, const int32_t* targets, int64_t rows, int64_t V,
                         float grad_scale, int ignore_index, bool write_grad, cudaStream_t stream) {
  if (rows <= 0) return;
  cross_entropy_rows<<<unsigned(rows), kThreads, 0, stream>>>(logits, losses, targets, V, grad_scale, ignore_index,
                                                               write_grad);
  TK_CUDA_CHECK_LAUNCH();
}

void lm_head_cross_entropy(Matmul& matmul, bf16* logits, int64_t chunk_rows, float* losses, bf16* dx, float* dw,
                           const bf16* x, const bf16* w, const int32_t* targets, int64_t N, int64_t d, int64_t V,
                           float grad_scale, int ignore_index, cudaStream_t stream) {
  TK_CUDA_REQUIRE(chunk_rows > 0 && N > 0 && d > 0 && V > 0,
                  "lm_head_cross_entropy needs a non-empty shape, got N=%lld d=%lld V=%lld", (long long)N,
                  (long long)d, (long long)V);
  bool want_grad = dx != nullptr || dw != nullptr;
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    int64_t rows = std::min(chunk_rows, N - r0);
    const bf16* x_chunk = x + r0 * d;
    matmul.linear_forward(logits, x_chunk, w, nullptr, rows, d, V);
    cross_entropy_chunk(logits, losses + r0, targets + r0, rows, V, grad_scale, ignore_index, want_grad, stream);
    if (dx) matmul.linear_backward_input(dx + r0 * d, logits, w, rows, d, V);
    if (dw) matmul.linear_backward_weight(dw, logits, x_chunk, rows, d, V);
  }
}

}  // namespace tk::cuda
