// The QKV epilogue: optional per-head RMSNorm of the q and k heads (Qwen3), then rotary position
// embedding ("rotate half", as Hugging Face), forward and backward, on qkv[N, (Hq + 2 Hkv) * hd] in place
// or out of place. One warp per token; the cos/sin of the token's position are fetched once and reused
// for all of its heads, and the loads of a batch of heads (up to 8 warp steps) are all issued before any
// of them is used, so that a token's heads are in flight together rather than one warp step at a time.
// Small rows without norms (Qwen2.5-0.5B) take a pipelined kernel instead: a warp per run of tokens, the
// next tokens' rows and cos/sin rows copied into shared memory (cp.async) while one is rotated.
#include <cuda_pipeline.h>

#include <algorithm>
#include <type_traits>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

constexpr int kWarps = 8;                // tokens per block at a time
constexpr int kMaxHeadDim = 256;
// Rows of the norm weights' partial-gradient scratch: 2048 warps at most, which an H100/H200 holds at once.
constexpr int kMaxNormBackwardBlocks = 256;

// Lane layout. A head vector splits into halves lo = u[0, hd/2) and hi = u[hd/2, hd), paired elementwise.
// L lanes serve one head (32 / L heads per warp step); the lane at position `sub` of its group owns, for
// k < C, the V pairs starting at pair index (sub + k L) V: V = 8 gives two 16-byte loads per chunk
// (hd in {64, 128, 256}, L = hd / 16, C = 1); V = 1, L = 32, C = 4 serves any even hd <= 256.
// A warp step covers 32 / L heads; U steps (a batch) are loaded at once.
template <int V_, int L_, int C_, int U_>
struct Layout {
  static constexpr int V = V_, L = L_, C = C_, U = U_;
};

template <int V, int L, int C>
struct LaneMap {
  static constexpr int kSlots = 32 / L;  // heads per warp step
  // The head dim when the layout fixes it (16-byte accesses: hd = 16 L), else 0: known at compile time, the
  // offsets of a batch's heads are immediates rather than a register pair each.
  static constexpr int kHeadDim = V == 8 ? 2 * L * V * C : 0;
  int slot, sub;
  __device__ LaneMap() : slot((threadIdx.x & 31) / L), sub((threadIdx.x & 31) % L) {}
  __device__ int pair(int k) const { return (sub + k * L) * V; }
};

// cos/sin(p * inv_freq[i]) in double, rounded to f32: the table's values, and the fallback past it
// (not inlined: the double-precision code would cost the kernels registers).
__device__ __noinline__ float2 rope_angle(int64_t p, int i, const double* inv_freq) {
  const double f = double(p) * inv_freq[i];
  return make_float2(float(cos(f)), float(sin(f)));
}

// The cos/sin of a lane's pairs for one token's position p, from the table when it covers p, else computed.
// The kernels compute before a token's head loads (a call: nothing large is then live across it) and look up
// after them (a load that waits on p: it must not hold the head loads back).
__device__ __forceinline__ bool table_covers(const float2* table, int max_pos, int64_t p) {
  return table && p >= 0 && p < max_pos;
}

template <int V, int C, class Lanes>
__device__ __forceinline__ void lookup_angles(float (&c)[C][V], float (&s)[C][V], const float2* table, int64_t p,
                                              const Lanes& lm, int half) {
#pragma unroll
  for (int k = 0; k < C; k++) {
    if (lm.pair(k) >= half) continue;
    const float2* t = table + p * half + lm.pair(k);
    if constexpr (V == 8) {
#pragma unroll
      for (int j = 0; j < V / 2; j++) {
        float4 q = reinterpret_cast<const float4*>(t)[j];
        c[k][2 * j] = q.x, s[k][2 * j] = q.y, c[k][2 * j + 1] = q.z, s[k][2 * j + 1] = q.w;
      }
    } else {
      float2 q = t[0];
      c[k][0] = q.x, s[k][0] = q.y;
    }
  }
}

template <int V, int C, class Lanes>
__device__ __forceinline__ void compute_angles(float (&c)[C][V], float (&s)[C][V], int64_t p, const Lanes& lm,
                                               int hd, const double* inv_freq) {
#pragma unroll
  for (int k = 0; k < C; k++) {
    if (lm.pair(k) >= hd / 2) continue;
#pragma unroll
    for (int e = 0; e < V; e++) {
      float2 q = rope_angle(p, lm.pair(k) + e, inv_freq);
      c[k][e] = q.x, s[k][e] = q.y;
    }
  }
}

struct RopeArgs {
  const int32_t* positions;
  const float2* table;
  int max_pos;
  int64_t N;
  int n_q, n_rot, n_kv, hd;  // q heads, q + k heads, value heads, head dim
  const double* inv_freq;    // [hd / 2]
  float eps;
};

// The q and k norm weights in shared memory (registers are what bounds the heads in flight): the block
// stages them once; a lane reads the V weights of its chunk as one access.
struct NormWeights {
  alignas(16) __nv_bfloat16 w[2][kMaxHeadDim];  // q, then k
  // Every thread of the block must call it (it ends with a barrier).
  __device__ void stage(const __nv_bfloat16* q_w, const __nv_bfloat16* k_w, int hd) {
    for (int i = threadIdx.x; i < 2 * hd; i += blockDim.x) w[i / hd][i % hd] = i < hd ? q_w[i] : k_w[i - hd];
    __syncthreads();
  }
  // The weights of columns [i, i + V) of the q (is_q) or k head.
  template <int V>
  __device__ void get(float (&out)[V], bool is_q, int i) const {
    PackedBf16<V> packed;
    load_packed(packed, &w[is_q ? 0 : 1][i]);
    unpack(out, packed);
  }
};

// Two blocks (16 warps) per SM, 128 registers a thread: enough warps that their loads keep the memory busy,
// and room for a batch of kMaxSteps steps (fewer in the norm backward and the scalar layout) without spilling.
constexpr int kMinBlocks = 2;

// The heads a token's warp visits: in place, the value heads are already where they belong.
__device__ __forceinline__ int visited_heads(const void* out, const void* in, const RopeArgs& a) {
  return out == in ? a.n_rot : a.n_rot + a.n_kv;
}

// Head h of the lane's unit k in the batch starting at head h0 (all lanes run every unit: the norm shuffles).
template <int V, int L, int C>
__device__ __forceinline__ int unit_head(const LaneMap<V, L, C>& lm, int h0, int k) {
  return h0 + k * lm.kSlots + lm.slot;
}

// One warp per token (tokens n, n + gridDim.x * kWarps, ...; the next position is read a token ahead). Per
// batch of U warp steps: all loads first, then per head the norm, the rotation and the stores; value heads
// are stored as loaded. The first batch is peeled so that the cos/sin lookup sits between its loads and
// their use.
template <int V, int L, int C, int U, bool kNorm>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)
    qk_norm_rope_forward_kernel(__nv_bfloat16* qkv_out, float* qk_rstd, const __nv_bfloat16* qkv_in,
                                const __nv_bfloat16* q_norm_w, const __nv_bfloat16* k_norm_w, RopeArgs a) {
  const LaneMap<V, L, C> lm;
  const int hd = lm.kHeadDim ? lm.kHeadDim : a.hd, half = hd / 2, width = (a.n_rot + a.n_kv) * hd;
  const int n_heads = visited_heads(qkv_out, qkv_in, a), batch = U * lm.kSlots;
  const int64_t stride = int64_t(gridDim.x) * kWarps;
  __shared__ NormWeights nw;
  if (kNorm) nw.stage(q_norm_w, k_norm_w, hd);
  int64_t n = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= a.N) return;  // a whole warp
  int64_t p_next = a.positions[n];
  for (; n < a.N; n += stride) {
    const int64_t p = p_next;
    if (n + stride < a.N) p_next = a.positions[n + stride];
    const __nv_bfloat16* in_row = qkv_in + n * width;
    __nv_bfloat16* out_row = qkv_out + n * width;
    const bool from_table = table_covers(a.table, a.max_pos, p);
    float cs[C][V], sn[C][V];
    if (!from_table) compute_angles(cs, sn, p, lm, hd, a.inv_freq);
    PackedBf16<V> x[U][C][2];
    auto load_batch = [&](int h0) {
#pragma unroll
      for (int k = 0; k < U; k++) {
        const int h = unit_head(lm, h0, k);
#pragma unroll
        for (int c = 0; c < C; c++) {
          if (h >= n_heads || lm.pair(c) >= half) continue;
          load_packed(x[k][c][0], in_row + h * hd + lm.pair(c));
          load_packed(x[k][c][1], in_row + h * hd + half + lm.pair(c));
        }
      }
    };
    auto finish_batch = [&](int h0) {
#pragma unroll
      for (int k = 0; k < U; k++) {
        const int h = unit_head(lm, h0, k);
        const bool rotated = h < a.n_rot;  // else a value head (or past the last head)
        float u[C][2][V];
#pragma unroll
        for (int c = 0; c < C; c++)
#pragma unroll
          for (int part = 0; part < 2; part++) {
            if (rotated && lm.pair(c) < half) {
              unpack(u[c][part], x[k][c][part]);
            } else {
#pragma unroll
              for (int e = 0; e < V; e++) u[c][part][e] = 0.f;
            }
          }
        if constexpr (kNorm) {
          float ss = 0.f;
#pragma unroll
          for (int c = 0; c < C; c++)
#pragma unroll
            for (int e = 0; e < V; e++) ss += u[c][0][e] * u[c][0][e] + u[c][1][e] * u[c][1][e];
          const float r = 1.f / sqrtf(group_sum<L>(ss) / float(hd) + a.eps);
#pragma unroll
          for (int c = 0; c < C; c++)
#pragma unroll
            for (int part = 0; part < 2; part++) {
              float w[V];
              nw.get(w, h < a.n_q, part * half + lm.pair(c));
#pragma unroll
              for (int e = 0; e < V; e++) u[c][part][e] = u[c][part][e] * r * w[e];
            }
          if (rotated && lm.sub == 0) qk_rstd[n * a.n_rot + h] = r;
        }
#pragma unroll
        for (int c = 0; c < C; c++) {
          if (h >= n_heads || lm.pair(c) >= half) continue;
          if (!rotated) {
            store_packed(out_row + h * hd + lm.pair(c), x[k][c][0]);
            store_packed(out_row + h * hd + half + lm.pair(c), x[k][c][1]);
            continue;
          }
          float lo[V], hi[V];
#pragma unroll
          for (int e = 0; e < V; e++) {
            lo[e] = u[c][0][e] * cs[c][e] - u[c][1][e] * sn[c][e];
            hi[e] = u[c][1][e] * cs[c][e] + u[c][0][e] * sn[c][e];
          }
          store_bf16(out_row + h * hd + lm.pair(c), lo);
          store_bf16(out_row + h * hd + half + lm.pair(c), hi);
        }
      }
    };
    load_batch(0);
    if (from_table) lookup_angles(cs, sn, a.table, p, lm, half);
    finish_batch(0);
    for (int h0 = batch; h0 < n_heads; h0 += batch) {
      load_batch(h0);
      finish_batch(h0);
    }
  }
}

// The norm weights' gradient sums of a block, in shared memory: lane l of warp w owns acc[w][q/k][part][t][l]
// for its C*V columns of each half (t = c V + e), which no other thread touches until the block folds them,
// in a fixed order (warps, then head slots), into dw_partial[block, 2 hd] (q columns, then k columns).
template <int V, int L, int C>
struct NormGradSums {
  float acc[kWarps][2][2][C * V][32];
  __device__ void zero() {
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
#pragma unroll
    for (int qk = 0; qk < 2; qk++)
#pragma unroll
      for (int part = 0; part < 2; part++)
#pragma unroll
        for (int t = 0; t < C * V; t++) acc[warp][qk][part][t][lane] = 0.f;
  }
  __device__ void add(bool is_q, int part, int c, const float (&dw)[V]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
#pragma unroll
    for (int e = 0; e < V; e++) acc[warp][is_q ? 0 : 1][part][c * V + e][lane] += dw[e];
  }
  // Every thread of the block must call it.
  __device__ void write(float* dw_partial, int hd) {
    __syncthreads();
    const int half = hd / 2;
    for (int col = threadIdx.x; col < 2 * hd; col += blockDim.x) {
      // col -> (q/k, half, column j of the half) -> the owning (c, sub, e): j = (sub + c L) V + e.
      const int qk = col / hd, part = (col % hd) / half, j = col % half;
      const int c = j / (L * V), sub = (j % (L * V)) / V, e = j % V;
      float total = 0.f;
      for (int w = 0; w < kWarps; w++)
#pragma unroll
        for (int slot = 0; slot < 32 / L; slot++) total += acc[w][qk][part][c * V + e][slot * L + sub];
      dw_partial[int64_t(blockIdx.x) * 2 * hd + col] = total;
    }
  }
};

// The backward, per rotated head: g = the rotation undone on dout; with norms (u the forward's input,
// r its saved rstd, w the weight): du = r w g - u r^3 mean(w g u), and dw += g u r per lane, folded per
// block at the end (NormGradSums). Value heads pass dout through. Batches, position prefetch
// and load order are the forward's.
template <int V, int L, int C, int U, bool kNorm>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)
    qk_norm_rope_backward_kernel(__nv_bfloat16* dqkv_in, float* dw_partial, const __nv_bfloat16* dqkv_out,
                                 const __nv_bfloat16* qkv_in, const float* qk_rstd, const __nv_bfloat16* q_norm_w,
                                 const __nv_bfloat16* k_norm_w, RopeArgs a) {
  const LaneMap<V, L, C> lm;
  const int hd = lm.kHeadDim ? lm.kHeadDim : a.hd, half = hd / 2, width = (a.n_rot + a.n_kv) * hd;
  const int n_heads = visited_heads(dqkv_in, dqkv_out, a), batch = U * lm.kSlots;
  const int64_t stride = int64_t(gridDim.x) * kWarps;
  __shared__ NormWeights nw;
  __shared__ NormGradSums<V, L, C> sums;
  if (kNorm) {
    nw.stage(q_norm_w, k_norm_w, hd);
    sums.zero();
  }
  int64_t n = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  int64_t p_next = n < a.N ? a.positions[n] : 0;
  for (; n < a.N; n += stride) {
    const int64_t p = p_next;
    if (n + stride < a.N) p_next = a.positions[n + stride];
    const __nv_bfloat16* dout_row = dqkv_out + n * width;
    const __nv_bfloat16* in_row = qkv_in + n * width;
    __nv_bfloat16* din_row = dqkv_in + n * width;
    const bool from_table = table_covers(a.table, a.max_pos, p);
    float cs[C][V], sn[C][V];
    if (!from_table) compute_angles(cs, sn, p, lm, hd, a.inv_freq);
    PackedBf16<V> dx[U][C][2], x[kNorm ? U : 1][C][2];
    float rr[U];
    auto load_batch = [&](int h0) {
#pragma unroll
      for (int k = 0; k < U; k++) {
        const int h = unit_head(lm, h0, k);
        rr[k] = kNorm && h < a.n_rot ? qk_rstd[n * a.n_rot + h] : 0.f;
#pragma unroll
        for (int c = 0; c < C; c++) {
          if (h >= n_heads || lm.pair(c) >= half) continue;
          load_packed(dx[k][c][0], dout_row + h * hd + lm.pair(c));
          load_packed(dx[k][c][1], dout_row + h * hd + half + lm.pair(c));
          if (kNorm && h < a.n_rot) {
            load_packed(x[k][c][0], in_row + h * hd + lm.pair(c));
            load_packed(x[k][c][1], in_row + h * hd + half + lm.pair(c));
          }
        }
      }
    };
    auto finish_batch = [&](int h0) {
#pragma unroll
      for (int k = 0; k < U; k++) {
        const int h = unit_head(lm, h0, k);
        const bool rotated = h < a.n_rot, is_q = h < a.n_q;
        float g[C][2][V];
#pragma unroll
        for (int c = 0; c < C; c++) {
          float d_lo[V], d_hi[V];
          if (rotated && lm.pair(c) < half) {
            unpack(d_lo, dx[k][c][0]);
            unpack(d_hi, dx[k][c][1]);
          } else {
#pragma unroll
            for (int e = 0; e < V; e++) d_lo[e] = d_hi[e] = 0.f;
          }
#pragma unroll
          for (int e = 0; e < V; e++) {
            g[c][0][e] = d_lo[e] * cs[c][e] + d_hi[e] * sn[c][e];
            g[c][1][e] = d_hi[e] * cs[c][e] - d_lo[e] * sn[c][e];
          }
        }
        if constexpr (kNorm) {
          float dot = 0.f;
#pragma unroll
          for (int c = 0; c < C; c++) {
            if (!rotated || lm.pair(c) >= half) continue;
#pragma unroll
            for (int part = 0; part < 2; part++) {
              float w[V], u[V];
              nw.get(w, is_q, part * half + lm.pair(c));
              unpack(u, x[k][c][part]);
#pragma unroll
              for (int e = 0; e < V; e++) dot += g[c][part][e] * w[e] * u[e];
            }
          }
          dot = group_sum<L>(dot);
          const float r = rr[k], c3 = r * r * r * dot / float(hd);
#pragma unroll
          for (int c = 0; c < C; c++) {
            if (!rotated || lm.pair(c) >= half) continue;
#pragma unroll
            for (int part = 0; part < 2; part++) {
              float w[V], u[V], dw[V];
              nw.get(w, is_q, part * half + lm.pair(c));
              unpack(u, x[k][c][part]);
#pragma unroll
              for (int e = 0; e < V; e++) {
                dw[e] = g[c][part][e] * u[e] * r;
                g[c][part][e] = r * w[e] * g[c][part][e] - u[e] * c3;
              }
              sums.add(is_q, part, c, dw);
            }
          }
        }
#pragma unroll
        for (int c = 0; c < C; c++) {
          if (h >= n_heads || lm.pair(c) >= half) continue;
          if (!rotated) {
            store_packed(din_row + h * hd + lm.pair(c), dx[k][c][0]);
            store_packed(din_row + h * hd + half + lm.pair(c), dx[k][c][1]);
            continue;
          }
          store_bf16(din_row + h * hd + lm.pair(c), g[c][0]);
          store_bf16(din_row + h * hd + half + lm.pair(c), g[c][1]);
        }
      }
    };
    load_batch(0);
    if (from_table) lookup_angles(cs, sn, a.table, p, lm, half);
    finish_batch(0);
    for (int h0 = batch; h0 < n_heads; h0 += batch) {
      load_batch(h0);
      finish_batch(h0);
    }
  }
  if (kNorm && dw_partial) sums.write(dw_partial, hd);
}

// ---- small tokens without norms: a warp per run of tokens, pipelined through shared memory -------------
// For hd in {64, 128, 256}, no q/k norms, aligned pointers, and a row small enough that kPipeStages of them
// per warp fit (Qwen2.5-0.5B: 18 heads of 64, 2,304 bytes). Warp g of the G launched takes the tokens
// [g N / G, (g + 1) N / G). Its pipeline holds kPipeStages tokens in shared memory: while token j is
// rotated, tokens j + 1 .. j + kPipeStages - 1 are in flight. A token's stage is its visited heads as they
// lie in the row (copied as flat 16-byte chunks, lane l taking chunks l, l + 32, ...) followed by the
// cos/sin row of its position (copied from the table, or computed when the table does not cover it); the
// positions are read 32 tokens at a time, a batch ahead. The rotation runs in place in shared memory, lane
// l taking the 8-pair chunk q = l % (hd / 16) of heads l / (hd / 16), + 32 / (hd / 16), ... (so its cos/sin
// are 16 values per token), and the stage then goes out as flat 16-byte chunks, value heads included.
constexpr int kPipeWarps = 4;
constexpr int kPipeStages = 4;
constexpr size_t kPipeSmemBytes = 48 * 1024;  // a block's, at most: no opt-in, several blocks per SM

// Bytes of one stage, sized for the whole row (so in place and out of place take the same path).
size_t pipe_stage_bytes(const RopeArgs& a) {
  return size_t(a.n_rot + a.n_kv) * a.hd * sizeof(__nv_bfloat16) + size_t(a.hd / 2) * sizeof(float2);
}
bool pipe_fits(const RopeArgs& a, bool aligned) {
  return aligned && (a.hd == 64 || a.hd == 128 || a.hd == 256) &&
         size_t(kPipeWarps) * kPipeStages * pipe_stage_bytes(a) <= kPipeSmemBytes;
}

template <int HD, bool kBackward>
__global__ void __launch_bounds__(32 * kPipeWarps)
    rope_pipelined_kernel(__nv_bfloat16* out, const __nv_bfloat16* in, RopeArgs a, int n_heads) {
  constexpr int kHalf = HD / 2, kQ = HD / 16, kHeadChunks = HD / kVec, kTableChunks = kHalf / 2;
  static_assert(32 % kQ == 0, "a lane keeps its pair chunk across warp steps");
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, q = lane % kQ;
  const int64_t width = int64_t(a.n_rot + a.n_kv) * HD;
  const int data_chunks = n_heads * kHeadChunks, rot_units = a.n_rot * kQ;
  const int stage_chunks = (a.n_rot + a.n_kv) * kHeadChunks + kTableChunks;  // pipe_stage_bytes / 16
  uint4* const mine = smem + size_t(warp) * kPipeStages * stage_chunks;
  const int64_t G = int64_t(gridDim.x) * kPipeWarps, g = int64_t(blockIdx.x) * kPipeWarps + warp;
  const int64_t t0 = g * a.N / G, t1 = (g + 1) * a.N / G;
  const int count = int(t1 - t0);
  // Positions: lane l holds those of tokens t0 + 32 b + l (batch b, of the token being issued) and of the
  // next batch.
  int pos_cur = t0 + lane < t1 ? a.positions[t0 + lane] : 0;
  int pos_next = t0 + 32 + lane < t1 ? a.positions[t0 + 32 + lane] : 0;
  auto issue = [&](int j) {  // always commits (an empty group past the end)
    if (j < count) {
      uint4* st = mine + (j % kPipeStages) * stage_chunks;
      const uint4* src = reinterpret_cast<const uint4*>(in + (t0 + j) * width);
      for (int i = lane; i < data_chunks; i += 32) __pipeline_memcpy_async(st + i, src + i, 16);
      if (j % 32 == 0 && j > 0) {
        pos_cur = pos_next;
        pos_next = t0 + j + 32 + lane < t1 ? a.positions[t0 + j + 32 + lane] : 0;
      }
      const int64_t p = __shfl_sync(0xffffffffu, pos_cur, j % 32);
      uint4* tab = st + (a.n_rot + a.n_kv) * kHeadChunks;
      if (table_covers(a.table, a.max_pos, p)) {
        const uint4* row = reinterpret_cast<const uint4*>(a.table + p * kHalf);
#pragma unroll
        for (int i = lane; i < kTableChunks; i += 32) __pipeline_memcpy_async(tab + i, row + i, 16);
      } else {
        for (int i = lane; i < kHalf; i += 32) reinterpret_cast<float2*>(tab)[i] = rope_angle(p, i, a.inv_freq);
      }
    }
    __pipeline_commit();
  };

  for (int j = 0; j < kPipeStages - 1; j++) issue(j);
  for (int j = 0; j < count; j++) {
    issue(j + kPipeStages - 1);  // into the stage token j - 1 used (the barriers below ordered its readers)
    __pipeline_wait_prior(kPipeStages - 1);
    __syncwarp();  // every lane's copies of token j have landed, and are visible to the whole warp
    uint4* st = mine + (j % kPipeStages) * stage_chunks;
    float cs[8], sn[8];
    const float4* t4 = reinterpret_cast<const float4*>(st + (a.n_rot + a.n_kv) * kHeadChunks) + 4 * q;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const float4 v = t4[k];
      cs[2 * k] = v.x, sn[2 * k] = v.y, cs[2 * k + 1] = v.z, sn[2 * k + 1] = v.w;
    }
    for (int u = lane; u < rot_units; u += 32) {
      uint4* lo_p = st + (u / kQ) * kHeadChunks + q;
      PackedBf16<kVec> lo_b, hi_b;
      lo_b.raw = lo_p[0], hi_b.raw = lo_p[kQ];
      float x0[kVec], x1[kVec], lo[kVec], hi[kVec];
      unpack(x0, lo_b), unpack(x1, hi_b);
#pragma unroll
      for (int e = 0; e < kVec; e++) {
        if constexpr (kBackward) {
          lo[e] = x0[e] * cs[e] + x1[e] * sn[e];
          hi[e] = x1[e] * cs[e] - x0[e] * sn[e];
        } else {
          lo[e] = x0[e] * cs[e] - x1[e] * sn[e];
          hi[e] = x1[e] * cs[e] + x0[e] * sn[e];
        }
      }
      pack(lo_b, lo), pack(hi_b, hi);
      lo_p[0] = lo_b.raw, lo_p[kQ] = hi_b.raw;
    }
    __syncwarp();  // the rotated chunks, and the cos/sin reads done before the stage is refilled
    uint4* dst = reinterpret_cast<uint4*>(out + (t0 + j) * width);
    for (int i = lane; i < data_chunks; i += 32) dst[i] = st[i];
    // (lane l refills, next, only chunks it has just stored itself, or the table after the barrier above)
  }
}

template <int HD, bool kBackward>
void launch_pipelined(__nv_bfloat16* out, const __nv_bfloat16* in, const RopeArgs& a, int n_heads, cudaStream_t s) {
  auto kernel = rope_pipelined_kernel<HD, kBackward>;
  const size_t smem = size_t(kPipeWarps) * kPipeStages * pipe_stage_bytes(a);
  int per_sm = 0;
  const int sms = sm_count();
  TK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kPipeWarps, smem));
  // One wave of resident blocks (no reductions: the grid does not change any result).
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(ceil_div(a.N, kPipeWarps), int64_t(sms) * per_sm));
  kernel<<<blocks, 32 * kPipeWarps, smem, s>>>(out, in, a, n_heads);
  TK_CUDA_CHECK_LAUNCH();
}

// True if it launched (else the caller takes the batched kernels).
template <bool kBackward>
bool try_pipelined(__nv_bfloat16* out, const __nv_bfloat16* in, const RopeArgs& a, bool aligned, cudaStream_t s) {
  if (!pipe_fits(a, aligned)) return false;
  const int n_heads = out == in ? a.n_rot : a.n_rot + a.n_kv;
  switch (a.hd) {
    case 64: launch_pipelined<64, kBackward>(out, in, a, n_heads, s); break;
    case 128: launch_pipelined<128, kBackward>(out, in, a, n_heads, s); break;
    default: launch_pipelined<256, kBackward>(out, in, a, n_heads, s); break;
  }
  return true;
}

// dq_norm_w[i] += sum over blocks b of partial[b, 0, i], dk_norm_w[i] += the same of partial[b, 1, i] (either
// output may be null), in a fixed order: thread row y sums blocks y, y + 32, ... of column blockIdx.x * 32 +
// threadIdx.x, then warp y adds the 32 row sums of column blockIdx.x * 32 + y by shuffles. Block: 32 x 32.
__global__ void __launch_bounds__(1024)
    norm_grad_reduce_kernel(float* dq_norm_w, float* dk_norm_w, const float* partial, int n_blocks, int hd) {
  __shared__ float row_sums[32][33];
  const int cols = 2 * hd, x = threadIdx.x, y = threadIdx.y, c = blockIdx.x * 32 + x;
  float s = 0.f;
  if (c < cols) {
    int b = y;
    for (; b + 96 < n_blocks; b += 128) {  // four loads in flight
      const float a0 = partial[int64_t(b) * cols + c], a1 = partial[int64_t(b + 32) * cols + c];
      const float a2 = partial[int64_t(b + 64) * cols + c], a3 = partial[int64_t(b + 96) * cols + c];
      s += a0, s += a1, s += a2, s += a3;
    }
    for (; b < n_blocks; b += 32) s += partial[int64_t(b) * cols + c];
  }
  row_sums[y][x] = s;
  __syncthreads();
  const float total = warp_sum(row_sums[x][y]);
  const int col = blockIdx.x * 32 + y;
  if (x != 0 || col >= cols) return;
  float* out = col < hd ? dq_norm_w : dk_norm_w;
  if (out) out[col < hd ? col : col - hd] += total;
}

__global__ void rope_table_kernel(float2* angles, int max_pos, int hd, const double* inv_freq) {
  const int half = hd / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(max_pos) * half) return;
  angles[idx] = rope_angle(idx / half, int(idx % half), inv_freq);
}

// The frequencies' part of a table, padded so that the angles after it stay 256-byte aligned.
size_t rope_freq_bytes(int head_dim) { return (size_t(head_dim / 2) * sizeof(double) + 255) / 256 * 256; }

RopeArgs rope_args(const int32_t* positions, const RopeTable& rope, int64_t N, QkvShape s, float eps) {
  TK_CUDA_REQUIRE(s.head_dim >= 2 && s.head_dim % 2 == 0 && s.head_dim <= kMaxHeadDim,
                  "qk_norm_rope: head_dim must be even and at most %d, got %d", kMaxHeadDim, s.head_dim);
  TK_CUDA_REQUIRE(s.n_heads > 0 && s.n_kv_heads > 0, "qk_norm_rope: %d query heads and %d key/value heads",
                  s.n_heads, s.n_kv_heads);
  TK_CUDA_REQUIRE(rope.inv_freq != nullptr, "qk_norm_rope: the RoPE table holds no frequencies (rope_table_fill)");
  return {positions, rope.angles, rope.max_pos, N, s.n_heads, s.n_heads + s.n_kv_heads, s.n_kv_heads, s.head_dim,
          rope.inv_freq, eps};
}

// Warp steps a batch loads at once, at most (what 128 registers hold without spilling): 8 registers a step
// and lane; the norm backward also holds the forward's input; the scalar layout's steps are wider.
constexpr int kMaxSteps = 8;
constexpr int kMaxNormBackwardSteps = 2;
constexpr int kMaxScalarSteps = 4;

// 16-byte accesses need hd in {64, 128, 256} (whole 8-pair chunks, L = hd / 16 lanes dividing the warp; a
// narrower head has too few pairs for them to pay) and aligned pointers; anything else takes the scalar
// layout. A batch is U in {2, 4, 8} warp steps: the fewest batches of at most kMax steps that cover n_heads
// heads (a batch's unused steps cost registers, not bandwidth).
template <int kMax, int V, int L, int C, class F>
void launch_batched(int n_heads, F&& launch) {
  constexpr int max_steps = V == 8 ? kMax : std::min(kMax, kMaxScalarSteps);
  const int64_t steps = ceil_div(n_heads, 32 / L), per_batch = ceil_div(steps, ceil_div(steps, max_steps));
  if (per_batch <= 2 || max_steps == 2) return launch(Layout<V, L, C, 2>{});
  if constexpr (max_steps >= 4) {
    if (per_batch <= 4 || max_steps == 4) return launch(Layout<V, L, C, 4>{});
  }
  if constexpr (max_steps >= 8) return launch(Layout<V, L, C, 8>{});
}

template <int kMax, class F>
void dispatch_layout(int hd, bool aligned, int n_heads, F&& launch) {
  if (aligned) {
    switch (hd) {
      case 64: return launch_batched<kMax, 8, 4, 1>(n_heads, launch);
      case 128: return launch_batched<kMax, 8, 8, 1>(n_heads, launch);
      case 256: return launch_batched<kMax, 8, 16, 1>(n_heads, launch);
      default: break;
    }
  }
  launch_batched<kMax, 1, 32, kMaxHeadDim / 2 / 32>(n_heads, launch);
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

size_t rope_table_bytes(int max_pos, int head_dim) {
  return rope_freq_bytes(head_dim) + size_t(max_pos) * size_t(head_dim / 2) * sizeof(float2);
}

RopeTable rope_table_fill(void* buffer, int max_pos, int head_dim, const double* inv_freq, cudaStream_t s) {
  auto* freq = static_cast<double*>(buffer);
  auto* angles = reinterpret_cast<float2*>(static_cast<char*>(buffer) + rope_freq_bytes(head_dim));
  TK_CUDA_CHECK(cudaMemcpyAsync(freq, inv_freq, size_t(head_dim / 2) * sizeof(double), cudaMemcpyHostToDevice, s));
  const int64_t n = int64_t(max_pos) * (head_dim / 2);
  if (n > 0) {
    rope_table_kernel<<<ceil_div(n, 256), 256, 0, s>>>(angles, max_pos, head_dim, freq);
    TK_CUDA_CHECK_LAUNCH();
  }
  return {freq, angles, max_pos};
}

void qk_norm_rope_forward(bf16* qkv_out, float* qk_rstd, const bf16* qkv_in, const bf16* q_norm_w,
                          const bf16* k_norm_w, const int32_t* positions, const RopeTable& rope, int64_t N,
                          QkvShape shape, float eps, cudaStream_t s) {
  const RopeArgs a = rope_args(positions, rope, N, shape, eps);
  TK_CUDA_REQUIRE((q_norm_w == nullptr) == (k_norm_w == nullptr) && (!q_norm_w || qk_rstd),
                  "qk_norm_rope_forward: q and k norm weights come together, with a qk_rstd output");
  if (N == 0) return;
  const bool aligned = all_aligned({qkv_out, qkv_in, rope.angles});  // the norm weights are staged
  if (!q_norm_w && try_pipelined<false>(qkv_out, qkv_in, a, aligned, s)) return;
  const int n_heads = qkv_out == qkv_in ? a.n_rot : a.n_rot + a.n_kv;
  const int64_t blocks = std::min<int64_t>(ceil_div(N, kWarps), int64_t(1) << 30);
  dispatch_layout<kMaxSteps>(a.hd, aligned, n_heads, [&](auto layout) {
    using T = decltype(layout);
    if (q_norm_w)
      qk_norm_rope_forward_kernel<T::V, T::L, T::C, T::U, true>
          <<<blocks, 32 * kWarps, 0, s>>>(qkv_out, qk_rstd, qkv_in, q_norm_w, k_norm_w, a);
    else
      qk_norm_rope_forward_kernel<T::V, T::L, T::C, T::U, false>
          <<<blocks, 32 * kWarps, 0, s>>>(qkv_out, qk_rstd, qkv_in, q_norm_w, k_norm_w, a);
    TK_CUDA_CHECK_LAUNCH();
  });
}

size_t qk_norm_rope_backward_scratch_bytes(int64_t N, QkvShape shape) {
  return size_t(norm_backward_blocks(N)) * 2 * size_t(shape.head_dim) * sizeof(float);
}

void qk_norm_rope_backward(bf16* dqkv_in, float* dq_norm_w, float* dk_norm_w, const bf16* dqkv_out,
                           const bf16* qkv_in, const float* qk_rstd, const bf16* q_norm_w, const bf16* k_norm_w,
                           const int32_t* positions, const RopeTable& rope, int64_t N, QkvShape shape,
                           void* scratch, size_t scratch_bytes, cudaStream_t s) {
  const RopeArgs a = rope_args(positions, rope, N, shape, 0.f);
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
  const bool aligned = all_aligned({dqkv_in, dqkv_out, qkv_in, rope.angles});  // the norm weights are staged
  if (!norm && try_pipelined<true>(dqkv_in, dqkv_out, a, aligned, s)) return;
  const int n_heads = dqkv_in == dqkv_out ? a.n_rot : a.n_rot + a.n_kv;
  auto launch = [&](auto layout, auto norm_kernel) {
    using T = decltype(layout);
    qk_norm_rope_backward_kernel<T::V, T::L, T::C, T::U, decltype(norm_kernel)::value>
        <<<blocks, 32 * kWarps, 0, s>>>(dqkv_in, partial, dqkv_out, qkv_in, qk_rstd, q_norm_w, k_norm_w, a);
    TK_CUDA_CHECK_LAUNCH();
  };
  if (norm)
    dispatch_layout<kMaxNormBackwardSteps>(a.hd, aligned, n_heads,
                                           [&](auto layout) { launch(layout, std::true_type{}); });
  else
    dispatch_layout<kMaxSteps>(a.hd, aligned, n_heads, [&](auto layout) { launch(layout, std::false_type{}); });
  if (!want_dw) return;
  norm_grad_reduce_kernel<<<ceil_div(2 * a.hd, 32), dim3(32, 32), 0, s>>>(dq_norm_w, dk_norm_w, partial, blocks, a.hd);
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
