// The QKV epilogue: optional per-head RMSNorm of the q and k heads (Qwen3), then rotary position
// embedding ("rotate half", as Hugging Face), forward and backward, on qkv[N, (Hq + 2 Hkv) * hd] in place
// or out of place. One warp per token; the cos/sin of the token's position are fetched once and reused
// for all of its heads.
#include <algorithm>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/reduce.cuh"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

constexpr int kWarps = 8;                // tokens per block at a time
constexpr int kMaxHeadDim = 256;
constexpr int kMaxNormBackwardBlocks = 1024;  // rows of the norm weights' partial-gradient scratch

// Lane layout. A head vector splits into halves lo = u[0, hd/2) and hi = u[hd/2, hd), paired elementwise.
// L lanes serve one head (32 / L heads per warp step); the lane at position `sub` of its group owns, for
// k < C, the V pairs starting at pair index (sub + k L) V: V = 8 gives two 16-byte loads per chunk
// (hd a power of two in [16, 256], L = hd / 16, C = 1); V = 1, L = 32, C = 4 serves any even hd <= 256.
template <int V_, int L_, int C_>
struct Layout {
  static constexpr int V = V_, L = L_, C = C_;
};

template <int V, int L, int C>
struct LaneMap {
  static constexpr int kSlots = 32 / L;  // heads per warp step
  int slot, sub;
  __device__ LaneMap() : slot((threadIdx.x & 31) / L), sub((threadIdx.x & 31) % L) {}
  __device__ int pair(int k) const { return (sub + k * L) * V; }
};

// cos/sin(p * theta^(-2i/hd)) in double, rounded to f32: the table's values, and the fallback past it
// (not inlined: the double-precision code would cost the kernels registers).
__device__ __noinline__ float2 rope_angle(int64_t p, int i, int hd, float theta) {
  const double f = double(p) * pow(double(theta), -2.0 * i / hd);
  return make_float2(float(cos(f)), float(sin(f)));
}

template <int V>
__device__ __forceinline__ void load_angles(float (&c)[V], float (&s)[V], const float2* table, int max_pos,
                                            int64_t p, int i0, int hd, float theta) {
  if (table && p >= 0 && p < max_pos) {
    const float2* t = table + p * (hd / 2) + i0;
    if constexpr (V == 8) {
#pragma unroll
      for (int k = 0; k < V / 2; k++) {
        float4 q = reinterpret_cast<const float4*>(t)[k];
        c[2 * k] = q.x, s[2 * k] = q.y, c[2 * k + 1] = q.z, s[2 * k + 1] = q.w;
      }
    } else {
      float2 q = t[0];
      c[0] = q.x, s[0] = q.y;
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; k++) {
      float2 q = rope_angle(p, i0 + k, hd, theta);
      c[k] = q.x, s[k] = q.y;
    }
  }
}

// Value heads pass through unchanged: copy them unless the output is the input.
template <int V>
__device__ void copy_value_heads(__nv_bfloat16* out, const __nv_bfloat16* in, int n_values) {
  if (out == in) return;
  const int lane = threadIdx.x & 31;
  for (int e = lane * V; e < n_values; e += 32 * V) {
    float v[V];
    load_bf16(v, in + e);
    store_bf16(out + e, v);
  }
}

struct RopeArgs {
  const int32_t* positions;
  const float2* table;
  int max_pos;
  int64_t N;
  int n_q, n_rot, n_kv, hd;  // q heads, q + k heads, value heads, head dim
  float theta, eps;
};

// The norm weights of this lane's pairs, lo and hi halves, kept packed (used once per head).
template <int V, int C>
struct NormWeights {
  PackedBf16<V> q[C][2], k[C][2];
  __device__ void load(const __nv_bfloat16* q_w, const __nv_bfloat16* k_w, int k_chunk, int pair, int half) {
    load_packed(q[k_chunk][0], q_w + pair);
    load_packed(q[k_chunk][1], q_w + half + pair);
    load_packed(k[k_chunk][0], k_w + pair);
    load_packed(k[k_chunk][1], k_w + half + pair);
  }
  __device__ void get(float (&w)[V], bool is_q, int k_chunk, int part) const {
    const PackedBf16<V> chosen = is_q ? q[k_chunk][part] : k[k_chunk][part];  // a copy: stays in registers
    unpack(w, chosen);
  }
};

template <int V, int L, int C, bool kNorm>
__global__ void __launch_bounds__(32 * kWarps)
    qk_norm_rope_forward_kernel(__nv_bfloat16* qkv_out, float* qk_rstd, const __nv_bfloat16* qkv_in,
                                const __nv_bfloat16* q_norm_w, const __nv_bfloat16* k_norm_w, RopeArgs a) {
  const LaneMap<V, L, C> lm;
  const int half = a.hd / 2, width = (a.n_rot + a.n_kv) * a.hd;
  NormWeights<V, C> nw;
#pragma unroll
  for (int k = 0; k < C; k++)
    if (kNorm && lm.pair(k) < half) nw.load(q_norm_w, k_norm_w, k, lm.pair(k), half);
  for (int64_t n = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; n < a.N; n += int64_t(gridDim.x) * kWarps) {
    const int64_t p = a.positions[n];
    float cs[C][V], sn[C][V];
#pragma unroll
    for (int k = 0; k < C; k++)
      if (lm.pair(k) < half) load_angles(cs[k], sn[k], a.table, a.max_pos, p, lm.pair(k), a.hd, a.theta);
    const __nv_bfloat16* in_row = qkv_in + n * width;
    __nv_bfloat16* out_row = qkv_out + n * width;
    for (int h0 = 0; h0 < a.n_rot; h0 += lm.kSlots) {  // every lane runs every step: the norm shuffles
      const int h = h0 + lm.slot;
      const bool active = h < a.n_rot;
      float u[C][2][V];
      float ss = 0.f;
#pragma unroll
      for (int k = 0; k < C; k++) {
        if (!active || lm.pair(k) >= half) continue;
        load_bf16(u[k][0], in_row + h * a.hd + lm.pair(k));
        load_bf16(u[k][1], in_row + h * a.hd + half + lm.pair(k));
#pragma unroll
        for (int e = 0; e < V; e++) ss += u[k][0][e] * u[k][0][e] + u[k][1][e] * u[k][1][e];
      }
      if constexpr (kNorm) {
        const float r = 1.f / sqrtf(group_sum<L>(ss) / float(a.hd) + a.eps);
#pragma unroll
        for (int k = 0; k < C; k++)
#pragma unroll
          for (int part = 0; part < 2; part++) {
            float w[V];
            nw.get(w, h < a.n_q, k, part);
#pragma unroll
            for (int e = 0; e < V; e++) u[k][part][e] = u[k][part][e] * r * w[e];
          }
        if (active && lm.sub == 0) qk_rstd[n * a.n_rot + h] = r;
      }
#pragma unroll
      for (int k = 0; k < C; k++) {
        if (!active || lm.pair(k) >= half) continue;
        float lo[V], hi[V];
#pragma unroll
        for (int e = 0; e < V; e++) {
          lo[e] = u[k][0][e] * cs[k][e] - u[k][1][e] * sn[k][e];
          hi[e] = u[k][1][e] * cs[k][e] + u[k][0][e] * sn[k][e];
        }
        store_bf16(out_row + h * a.hd + lm.pair(k), lo);
        store_bf16(out_row + h * a.hd + half + lm.pair(k), hi);
      }
    }
    copy_value_heads<V>(out_row + a.n_rot * a.hd, in_row + a.n_rot * a.hd, a.n_kv * a.hd);
  }
}

// The sum of each lane's norm-weight gradients over the block, in a fixed order: the warp's head slots
// (lanes sub, sub + L, ... own the same pairs) by shuffles, then the warps in order through shared memory,
// to dw_partial[block, 2 hd] (q columns, then k columns).
template <int V, int L, int C>
__device__ void write_norm_grad_partial(float* dw_partial, float (&acc_q)[C][2][V], float (&acc_k)[C][2][V],
                                        const LaneMap<V, L, C>& lm, int hd) {
  __shared__ float warp_sums[kWarps][2 * kMaxHeadDim];
  const int half = hd / 2, warp = threadIdx.x / 32;
#pragma unroll
  for (int k = 0; k < C; k++)
#pragma unroll
    for (int part = 0; part < 2; part++)
#pragma unroll
      for (int e = 0; e < V; e++)
#pragma unroll
        for (int o = L; o < 32; o <<= 1) {
          acc_q[k][part][e] += __shfl_xor_sync(0xffffffffu, acc_q[k][part][e], o);
          acc_k[k][part][e] += __shfl_xor_sync(0xffffffffu, acc_k[k][part][e], o);
        }
  if (lm.slot == 0) {
#pragma unroll
    for (int k = 0; k < C; k++) {
      if (lm.pair(k) >= half) continue;
#pragma unroll
      for (int part = 0; part < 2; part++)
#pragma unroll
        for (int e = 0; e < V; e++) {
          const int i = part * half + lm.pair(k) + e;
          warp_sums[warp][i] = acc_q[k][part][e];
          warp_sums[warp][hd + i] = acc_k[k][part][e];
        }
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * hd; c += blockDim.x) {
    float total = 0.f;
    for (int w = 0; w < kWarps; w++) total += warp_sums[w][c];
    dw_partial[int64_t(blockIdx.x) * 2 * hd + c] = total;
  }
}

// The backward, per rotated head: g = the rotation undone on dout; with norms (u the forward's input,
// r its saved rstd, w the weight): du = r w g - u r^3 mean(w g u), and dw += g u r per lane, folded per
// block at the end (write_norm_grad_partial).
template <int V, int L, int C, bool kNorm>
__global__ void __launch_bounds__(32 * kWarps, kNorm ? 2 : 4)  // at most 128 / 64 registers
    qk_norm_rope_backward_kernel(__nv_bfloat16* dqkv_in, float* dw_partial, const __nv_bfloat16* dqkv_out,
                                 const __nv_bfloat16* qkv_in, const float* qk_rstd, const __nv_bfloat16* q_norm_w,
                                 const __nv_bfloat16* k_norm_w, RopeArgs a) {
  const LaneMap<V, L, C> lm;
  const int half = a.hd / 2, width = (a.n_rot + a.n_kv) * a.hd;
  NormWeights<V, C> nw;
  float acc_q[C][2][V], acc_k[C][2][V];
#pragma unroll
  for (int k = 0; k < C; k++) {
#pragma unroll
    for (int e = 0; e < V; e++) acc_q[k][0][e] = acc_q[k][1][e] = acc_k[k][0][e] = acc_k[k][1][e] = 0.f;
    if (kNorm && lm.pair(k) < half) nw.load(q_norm_w, k_norm_w, k, lm.pair(k), half);
  }
  for (int64_t n = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; n < a.N; n += int64_t(gridDim.x) * kWarps) {
    const int64_t p = a.positions[n];
    float cs[C][V], sn[C][V];
#pragma unroll
    for (int k = 0; k < C; k++)
      if (lm.pair(k) < half) load_angles(cs[k], sn[k], a.table, a.max_pos, p, lm.pair(k), a.hd, a.theta);
    const __nv_bfloat16* dout_row = dqkv_out + n * width;
    const __nv_bfloat16* in_row = qkv_in + n * width;
    __nv_bfloat16* din_row = dqkv_in + n * width;
    for (int h0 = 0; h0 < a.n_rot; h0 += lm.kSlots) {  // every lane runs every step: the norm shuffles
      const int h = h0 + lm.slot;
      const bool active = h < a.n_rot, is_q = h < a.n_q;
      float g[C][2][V], u[C][2][V];
      float dot = 0.f;
#pragma unroll
      for (int k = 0; k < C; k++) {
        if (!active || lm.pair(k) >= half) continue;
        float d_lo[V], d_hi[V];
        load_bf16(d_lo, dout_row + h * a.hd + lm.pair(k));
        load_bf16(d_hi, dout_row + h * a.hd + half + lm.pair(k));
        if constexpr (kNorm) {
          load_bf16(u[k][0], in_row + h * a.hd + lm.pair(k));
          load_bf16(u[k][1], in_row + h * a.hd + half + lm.pair(k));
        }
#pragma unroll
        for (int e = 0; e < V; e++) {
          g[k][0][e] = d_lo[e] * cs[k][e] + d_hi[e] * sn[k][e];
          g[k][1][e] = d_hi[e] * cs[k][e] - d_lo[e] * sn[k][e];
        }
        if constexpr (kNorm) {
#pragma unroll
          for (int part = 0; part < 2; part++) {
            float w[V];
            nw.get(w, is_q, k, part);
#pragma unroll
            for (int e = 0; e < V; e++) dot += g[k][part][e] * w[e] * u[k][part][e];
          }
        }
      }
      if constexpr (kNorm) {
        dot = group_sum<L>(dot);
        const float r = active ? qk_rstd[n * a.n_rot + h] : 0.f;
        const float c3 = r * r * r * dot / float(a.hd);
#pragma unroll
        for (int k = 0; k < C; k++) {
          if (!active || lm.pair(k) >= half) continue;
#pragma unroll
          for (int part = 0; part < 2; part++) {
            float w[V];
            nw.get(w, is_q, k, part);
#pragma unroll
            for (int e = 0; e < V; e++) {
              const float dw = g[k][part][e] * u[k][part][e] * r;
              if (is_q) acc_q[k][part][e] += dw;
              else acc_k[k][part][e] += dw;
              g[k][part][e] = r * w[e] * g[k][part][e] - u[k][part][e] * c3;
            }
          }
        }
      }
#pragma unroll
      for (int k = 0; k < C; k++) {
        if (!active || lm.pair(k) >= half) continue;
        store_bf16(din_row + h * a.hd + lm.pair(k), g[k][0]);
        store_bf16(din_row + h * a.hd + half + lm.pair(k), g[k][1]);
      }
    }
    copy_value_heads<V>(din_row + a.n_rot * a.hd, dout_row + a.n_rot * a.hd, a.n_kv * a.hd);
  }
  if (kNorm && dw_partial) write_norm_grad_partial(dw_partial, acc_q, acc_k, lm, a.hd);
}

__global__ void rope_table_kernel(float2* table, int max_pos, int hd, float theta) {
  const int half = hd / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(max_pos) * half) return;
  table[idx] = rope_angle(idx / half, int(idx % half), hd, theta);
}

RopeArgs rope_args(const int32_t* positions, const float2* table, int max_pos, int64_t N, QkvShape s, float theta,
                   float eps) {
  TK_CUDA_REQUIRE(s.head_dim >= 2 && s.head_dim % 2 == 0 && s.head_dim <= kMaxHeadDim,
                  "qk_norm_rope: head_dim must be even and at most %d, got %d", kMaxHeadDim, s.head_dim);
  TK_CUDA_REQUIRE(s.n_heads > 0 && s.n_kv_heads > 0, "qk_norm_rope: %d query heads and %d key/value heads",
                  s.n_heads, s.n_kv_heads);
  return {positions, table, max_pos, N, s.n_heads, s.n_heads + s.n_kv_heads, s.n_kv_heads, s.head_dim, theta, eps};
}

// 16-byte accesses need hd a power of two in [16, 256] (whole 8-pair chunks, L = hd / 16 lanes dividing
// the warp) and aligned pointers; anything else takes the scalar layout.
template <class F>
void dispatch_layout(int hd, bool aligned, F&& launch) {
  if (aligned) {
    switch (hd) {
      case 16: return launch(Layout<8, 1, 1>{});
      case 32: return launch(Layout<8, 2, 1>{});
      case 64: return launch(Layout<8, 4, 1>{});
      case 128: return launch(Layout<8, 8, 1>{});
      case 256: return launch(Layout<8, 16, 1>{});
      default: break;
    }
  }
  launch(Layout<1, 32, kMaxHeadDim / 2 / 32>{});
}

bool all_aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

// The norm backward's grid: blocks of kWarps warps, each warp taking every (blocks * kWarps)-th token; a
// function of N alone, so that the per-block partial sums of the weight gradients are the same every run.
int norm_backward_blocks(int64_t N) { return int(std::min<int64_t>(kMaxNormBackwardBlocks, ceil_div(N, kWarps))); }

}  // namespace

size_t rope_table_bytes(int max_pos, int head_dim) { return size_t(max_pos) * size_t(head_dim / 2) * sizeof(float2); }

void rope_table_fill(float2* table, int max_pos, int head_dim, float theta, cudaStream_t s) {
  const int64_t n = int64_t(max_pos) * (head_dim / 2);
  if (n == 0) return;
  rope_table_kernel<<<ceil_div(n, 256), 256, 0, s>>>(table, max_pos, head_dim, theta);
  TK_CUDA_CHECK_LAUNCH();
}

void qk_norm_rope_forward(bf16* qkv_out, float* qk_rstd, const bf16* qkv_in, const bf16* q_norm_w,
                          const bf16* k_norm_w, const int32_t* positions, const float2* rope_table, int max_pos,
                          int64_t N, QkvShape shape, float theta, float eps, cudaStream_t s) {
  const RopeArgs a = rope_args(positions, rope_table, max_pos, N, shape, theta, eps);
  TK_CUDA_REQUIRE((q_norm_w == nullptr) == (k_norm_w == nullptr) && (!q_norm_w || qk_rstd),
                  "qk_norm_rope_forward: q and k norm weights come together, with a qk_rstd output");
  if (N == 0) return;
  const bool aligned = all_aligned({qkv_out, qkv_in, q_norm_w, k_norm_w, rope_table});
  dispatch_layout(a.hd, aligned, [&](auto layout) {
    using T = decltype(layout);
    const int64_t blocks = ceil_div(N, kWarps);
    if (q_norm_w)
      qk_norm_rope_forward_kernel<T::V, T::L, T::C, true>
          <<<blocks, 32 * kWarps, 0, s>>>(qkv_out, qk_rstd, qkv_in, q_norm_w, k_norm_w, a);
    else
      qk_norm_rope_forward_kernel<T::V, T::L, T::C, false>
          <<<blocks, 32 * kWarps, 0, s>>>(qkv_out, qk_rstd, qkv_in, q_norm_w, k_norm_w, a);
    TK_CUDA_CHECK_LAUNCH();
  });
}

size_t qk_norm_rope_backward_scratch_bytes(int64_t N, QkvShape shape) {
  return size_t(norm_backward_blocks(N)) * 2 * size_t(shape.head_dim) * sizeof(float);
}

void qk_norm_rope_backward(bf16* dqkv_in, float* dq_norm_w, float* dk_norm_w, const bf16* dqkv_out,
                           const bf16* qkv_in, const float* qk_rstd, const bf16* q_norm_w, const bf16* k_norm_w,
                           const int32_t* positions, const float2* rope_table, int max_pos, int64_t N,
                           QkvShape shape, float theta, void* scratch, size_t scratch_bytes, cudaStream_t s) {
  const RopeArgs a = rope_args(positions, rope_table, max_pos, N, shape, theta, 0.f);
  const bool norm = q_norm_w != nullptr;
  TK_CUDA_REQUIRE((q_norm_w == nullptr) == (k_norm_w == nullptr) && (!norm || (qkv_in && qk_rstd)),
                  "qk_norm_rope_backward: q and k norm weights come together, with the forward's input and rstd");
  if (N == 0) return;
  const bool want_dw = norm && (dq_norm_w || dk_norm_w);
  const int blocks = want_dw ? norm_backward_blocks(N) : int(std::min<int64_t>(ceil_div(N, kWarps), 1 << 30));
  float* partial = want_dw ? static_cast<float*>(scratch) : nullptr;
  TK_CUDA_REQUIRE(!want_dw || scratch_bytes >= qk_norm_rope_backward_scratch_bytes(N, shape),
                  "qk_norm_rope_backward: the scratch buffer holds %zu bytes, %zu are needed", scratch_bytes,
                  qk_norm_rope_backward_scratch_bytes(N, shape));
  const bool aligned = all_aligned({dqkv_in, dqkv_out, qkv_in, q_norm_w, k_norm_w, rope_table});
  dispatch_layout(a.hd, aligned, [&](auto layout) {
    using T = decltype(layout);
    if (norm)
      qk_norm_rope_backward_kernel<T::V, T::L, T::C, true><<<blocks, 32 * kWarps, 0, s>>>(
          dqkv_in, partial, dqkv_out, qkv_in, qk_rstd, q_norm_w, k_norm_w, a);
    else
      qk_norm_rope_backward_kernel<T::V, T::L, T::C, false><<<blocks, 32 * kWarps, 0, s>>>(
          dqkv_in, partial, dqkv_out, qkv_in, qk_rstd, q_norm_w, k_norm_w, a);
    TK_CUDA_CHECK_LAUNCH();
  });
  if (dq_norm_w && want_dw) column_reduce_add(dq_norm_w, partial, blocks, a.hd, 2 * a.hd, s);
  if (dk_norm_w && want_dw) column_reduce_add(dk_norm_w, partial + a.hd, blocks, a.hd, 2 * a.hd, s);
}

}  // namespace tk::cuda
