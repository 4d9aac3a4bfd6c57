// Causal attention backward of our own for head_dim 64 on Hopper (sm_90a: warpgroup MMA), deterministic.
//
// One CTA per (batch row b, kv head g, pair of blocks of 128 keys: n - 1 - p and p), two warpgroups of 64 keys each.
// For each of its kv blocks it walks the query blocks (64 rows) that see those keys, and for each the q heads of its
// GQA group, so that dK and dV of the whole group accumulate in its registers (summed over heads in a fixed order,
// written once, no cross-head reduction). Per (q block i, head h), each warpgroup w, with K_w and V_w its keys:
//   S^T = K_w Q^T, dP^T = V_w dO^T                 (operands in shared memory, K-major, 128-byte swizzle)
//   P^T = exp(S^T scale - lse), masked causally; dS^T = P^T (dP^T - D), D = rowsum(dO O)
//   dV_w += P^T dO, dK_w += dS^T Q                 (A from registers, B MN-major: the same tiles)
// then, with both warpgroups' dS^T in shared memory, warpgroup w takes dQ's columns 32 w .. 32 w + 31 over all 128
// keys: dQ[:, w] = dS K[:, w] (A and B MN-major, B from a 64-byte offset inside the swizzle atom), so no part is
// handed between them; dK and dQ take the softmax scale at the end.
// Pairing a high kv block (few q blocks) with a low one (many) gives every CTA the same work: one wave of equal
// CTAs where they fit. dQ of a q block sums the parts of every kv block at or under it in a fixed order into an f32
// buffer: a CTA waits until the q block's counter says it is its turn, stores (the first) or adds (vector atomics,
// one kv block at a time: the same sums on every run), and moves the counter on; a last small kernel scales the
// sums and rounds them to bf16 into dqkv. The order is the order the kv blocks reach the q block: the high block of
// a pair walks its q blocks upwards from its diagonal, the low one downwards from the top, so a kv block's step
// count is its arrival time, no two arrive together, and in the steady state nobody waits. Counters are moved on in
// batches (one fence a batch), and always before a CTA waits; a CTA waits only on CTAs of its own (b, g), which
// are adjacent in the grid and launch together: no deadlock. A small kernel before sets D and the counters to 0.
//
// bench/NOTES.md ("The attention backward of our own") has the counts, the prediction and the measurements.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "ops/cuda/attention_schedule.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

constexpr int kHd = 64;        // head_dim
constexpr int kBlockM = 64;    // queries an iteration
constexpr int kBlockN = 128;   // keys a CTA
constexpr int kThreads = 256;  // two warpgroups
// Shared memory (bytes from a 1,024-aligned base): 64-row bf16 tiles of 128-byte rows in the 128-byte swizzle.
constexpr int kTile = 64 * 128;
constexpr int kOffK = 0;                       // K [128 keys][64]
constexpr int kOffV = kOffK + 2 * kTile;       // V [128 keys][64]
constexpr int kOffQ = kOffV + 2 * kTile;       // Q [2 stages][64 queries][64]
constexpr int kOffDO = kOffQ + 2 * kTile;      // dO [2 stages][64 queries][64]
constexpr int kOffDS = kOffDO + 2 * kTile;     // dS^T [128 keys][64 queries] (each warpgroup its 64 rows)
constexpr int kOffLse = kOffDS + 2 * kTile;    // lse [2 stages][64], f32
constexpr int kOffD = kOffLse + 2 * 64 * 4;    // D [2 stages][64], f32
constexpr int kOffFlag = kOffD + 2 * 64 * 4;   // the "must wait" flag
constexpr int kSmemBytes = kOffFlag + 16 + 1024;  // + room to align the base

struct Params {
  const bf16* qkv;
  const bf16* dout;
  const float* lse;
  const float* D;
  bf16* dqkv;
  float* dq_acc;  // [B, Hq, T, 64] f32
  int* counters;  // [B, Hq, T / 64]: the parts a q block's dQ has taken
  int B, T, Hq, Hkv;
  float scale;
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TK_WGMMA 1

// Byte offset of 16-byte chunk c of row r in a tile with the 128-byte swizzle.
__device__ __forceinline__ uint32_t swizzled(int r, int c) { return uint32_t(r * 128 + ((c ^ (r & 7)) << 4)); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// A shared-memory matrix descriptor: 128-byte swizzle, LBO 16 bytes, SBO 1,024 bytes (8 rows of 128 bytes).
__device__ __forceinline__ uint64_t desc(uint32_t addr) {
  return uint64_t((addr >> 4) & 0x3fff) | (uint64_t(16 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

#define TK_ACC32                                                                                                    \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),       \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),         \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),        \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define TK_REGS32                                                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}"

// d (+)= A B^T, m64n64k16, both from shared memory; kTransA / kTransB: 1 for an MN-major operand.
template <int kTransA, int kTransB>
__device__ __forceinline__ void mma_ss(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TK_REGS32 ", %32, %33, p, 1, 1, %35, %36;\n}\n"
      : TK_ACC32
      : "l"(da), "l"(db), "r"(accumulate), "n"(kTransA), "n"(kTransB));
}

// d += A B^T, m64n64k16, A from registers (the m16n8k16 fragment of the warp's 16 rows), B MN-major.
__device__ __forceinline__ void mma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TK_REGS32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : TK_ACC32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
#undef TK_ACC32
#undef TK_REGS32

// d (+)= A B^T, m64n32k16, A and B MN-major from shared memory.
__device__ __forceinline__ void mma_ss_n32_mn(float (&d)[16], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// rows x 64 bf16 from global (row stride ld elements) into a swizzled tile: 16-byte chunks, all 256 threads.
__device__ __forceinline__ void load_tile(uint32_t dst, const bf16* src, int64_t ld, int rows) {
  for (int c = threadIdx.x; c < rows * 8; c += kThreads) {
    const int r = c >> 3, k = c & 7;
    cp_async16(dst + swizzled(r, k), src + r * ld + k * 8);
  }
}
#endif

namespace sch = attn_schedule;

__global__ void __launch_bounds__(kThreads, 1) attention_backward_kernel(Params p) {
#ifdef TK_WGMMA
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw);
  const float* const s_lse = reinterpret_cast<const float*>(smem + kOffLse);
  const float* const s_D = reinterpret_cast<const float*>(smem + kOffD);

  const int tid = threadIdx.x, wg = tid >> 7, t = tid & 127, warp = t >> 5, lane = tid & 31;
  // The CTAs of a (b, g) are adjacent in the grid: they wait only on each other, and launch together.
  const int n_kv = p.T / kBlockN, n_pairs = (n_kv + 1) / 2, n_q = p.T / kBlockM;
  const int bg = int(blockIdx.x / uint32_t(n_pairs)), pair = int(blockIdx.x % uint32_t(n_pairs));
  const int b = bg / p.Hkv, g = bg % p.Hkv, group = p.Hq / p.Hkv;
  // The pair's kv blocks (j_up == j_down: the middle block of an odd n_kv, alone) and walks: attention_schedule.h.
  const int j_up = sch::up_block(pair, n_kv), j_down = sch::down_block(pair);
  const int steps_up = sch::steps_up(pair, n_kv), iters = sch::steps(pair, n_kv) * group;
  const int64_t ld = int64_t(p.Hq + 2 * p.Hkv) * kHd, ld_o = int64_t(p.Hq) * kHd;
  const bf16* const qkv_b = p.qkv + int64_t(b) * p.T * ld;
  const bf16* const dout_b = p.dout + int64_t(b) * p.T * ld_o;
  // Iteration it: its kv block, q block and head.
  struct Work {
    int j, i, h;
  };
  auto work = [&](int it) {
    const sch::Step st = sch::step_of(pair, it / group, n_kv);
    return Work{st.j, st.i, g * group + it % group};
  };
  // dQ's counters are moved on in batches (one fence a batch); the next kv block in a q block's order arrives at
  // least `group` iterations later.
  const int batch = (group + 1) / 2 < 4 ? (group + 1) / 2 : 4;
  // Both warpgroups add their halves of dQ's columns in the q block's turn, behind one counter per q block.
  int released = 0;  // the iterations before this one have had their counters moved on
  auto counter_of = [&](const Work& w) { return p.counters + (int64_t(b) * p.Hq + w.h) * n_q + w.i; };
  auto move_on = [&](int until) {  // thread 0, after every thread's fence and a barrier
    for (int k = released; k < until; k++) {
      const Work w = work(k);
      int* const c = counter_of(w);
      asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(c), "r"(sch::turn(w.i, w.j, n_kv) + 1) : "memory");
    }
  };
  auto load_kv = [&](int j) {
    load_tile(base + kOffK, qkv_b + int64_t(j) * kBlockN * ld + int64_t(p.Hq + g) * kHd, ld, kBlockN);
    load_tile(base + kOffV, qkv_b + int64_t(j) * kBlockN * ld + int64_t(p.Hq + p.Hkv + g) * kHd, ld, kBlockN);
  };
  auto prefetch = [&](int it, int stage) {  // iteration it's Q, dO, lse and D into `stage`
    const Work w = work(it);
    load_tile(base + kOffQ + stage * kTile, qkv_b + int64_t(w.i) * kBlockM * ld + int64_t(w.h) * kHd, ld, kBlockM);
    load_tile(base + kOffDO + stage * kTile, dout_b + int64_t(w.i) * kBlockM * ld_o + int64_t(w.h) * kHd, ld_o,
              kBlockM);
    const int64_t row = (int64_t(b) * p.Hq + w.h) * p.T + int64_t(w.i) * kBlockM;
    if (tid < 16) cp_async16(base + kOffLse + stage * 256 + tid * 16, p.lse + row + tid * 4);
    else if (tid < 32) cp_async16(base + kOffD + stage * 256 + (tid - 16) * 16, p.D + row + (tid - 16) * 4);
  };
  load_kv(j_up);
  prefetch(0, 0);
  cp_async_commit();

  float dk[32], dv[32];
#pragma unroll
  for (int e = 0; e < 32; e++) dk[e] = 0.f, dv[e] = 0.f;
  // dK and dV of kv block j, summed over the group's heads in order: bf16 into dqkv (dK scaled here: dS is not).
  auto write_dkv = [&](int j) {
    const int r = warp * 16 + (lane >> 2);
    bf16* const dk_out = p.dqkv + (int64_t(b) * p.T + int64_t(j) * kBlockN + wg * 64) * ld + int64_t(p.Hq + g) * kHd;
    bf16* const dv_out = dk_out + int64_t(p.Hkv) * kHd;
#pragma unroll
    for (int jj = 0; jj < 8; jj++) {
      const int c = jj * 8 + 2 * (lane & 3);
#pragma unroll
      for (int half = 0; half < 2; half++) {
        const int row = r + 8 * half;
        *reinterpret_cast<__nv_bfloat162*>(dk_out + row * ld + c) =
            __floats2bfloat162_rn(dk[4 * jj + 2 * half] * p.scale, dk[4 * jj + 2 * half + 1] * p.scale);
        *reinterpret_cast<__nv_bfloat162*>(dv_out + row * ld + c) =
            __floats2bfloat162_rn(dv[4 * jj + 2 * half], dv[4 * jj + 2 * half + 1]);
      }
    }
  };
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const uint32_t sK = base + kOffK + wg * kTile, sV = base + kOffV + wg * kTile, sDS = base + kOffDS + wg * kTile;
  const int row0 = wg * 64 + warp * 16 + (lane >> 2);  // this thread's rows of the kv block: row0 and row0 + 8

  for (int it = 0; it < iters; it++) {
    const int stage = it & 1;
    const Work w = work(it);
    cp_async_wait_all();
    fence_async_shared();
    const bool release = it - released == batch;
    if (release) __threadfence();  // this thread's dQ adds of the batch performed
    __syncthreads();  // this stage loaded; every thread done with the last iteration (its stage, dS^T, s_dq)
    if (release) {
      if (tid == 0) move_on(it);
      released = it;
    }
    const bool switch_kv = it == steps_up * group;  // the pair's second kv block starts
    if (switch_kv) {
      write_dkv(j_up);
#pragma unroll
      for (int e = 0; e < 32; e++) dk[e] = 0.f, dv[e] = 0.f;
      load_kv(j_down);
      cp_async_commit();
    }
    const int turn = sch::turn(w.i, w.j, n_kv);
    int* const counter = counter_of(w);
    int seen = turn;
    if (tid == 0 && turn > 0)  // read early: its latency hides behind the products below
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
    if (it + 1 < iters) prefetch(it + 1, stage ^ 1);
    cp_async_commit();
    if (switch_kv) {  // the new K and V in (all but the newest group: the prefetch just issued)
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
      fence_async_shared();
      __syncthreads();
    }
    const uint32_t sQ = base + kOffQ + stage * kTile, sDO = base + kOffDO + stage * kTile;

    float s[32], dp[32];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ks++) mma_ss<0, 0>(s, desc(sK + 32 * ks), desc(sQ + 32 * ks), ks);
#pragma unroll
    for (int ks = 0; ks < 4; ks++) mma_ss<0, 0>(dp, desc(sV + 32 * ks), desc(sDO + 32 * ks), ks);
    wgmma_commit();
    wgmma_wait_all();

    // P^T and dS^T (unscaled: the scale is applied to dK and dQ at the end), as the bf16 A fragments of the next
    // products: pa[ks] covers queries 16 ks .. 16 ks + 15. The causal mask only where a key can pass a query.
    uint32_t pa[4][4], da[4][4];
    const float* lse = s_lse + stage * 64;
    const float* Dq = s_D + stage * 64;
    const int key0 = w.j * kBlockN + row0, q_first = w.i * kBlockM;
    const bool masked = w.j * kBlockN + wg * 64 + 63 > q_first;
#pragma unroll
    for (int jj = 0; jj < 8; jj++) {
      const int q = jj * 8 + 2 * (lane & 3);  // local query of elements 4 jj + 0 (and + 1)
      const float l0 = lse[q] * 1.4426950408889634f, l1 = lse[q + 1] * 1.4426950408889634f;
      const float D0 = Dq[q], D1 = Dq[q + 1];
      float pr[4], ds[4];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float x;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(x) : "f"(s[4 * jj + e] * scale_log2 - ((e & 1) ? l1 : l0)));
        if (masked && key0 + (e >= 2 ? 8 : 0) > q_first + q + (e & 1)) x = 0.f;
        pr[e] = x;
        ds[e] = x * (dp[4 * jj + e] - ((e & 1) ? D1 : D0));
      }
      pa[jj >> 1][(jj & 1) * 2 + 0] = pack_bf16(pr[0], pr[1]);
      pa[jj >> 1][(jj & 1) * 2 + 1] = pack_bf16(pr[2], pr[3]);
      da[jj >> 1][(jj & 1) * 2 + 0] = pack_bf16(ds[0], ds[1]);
      da[jj >> 1][(jj & 1) * 2 + 1] = pack_bf16(ds[2], ds[3]);
    }
    // dS^T into shared memory ([key][query], swizzled) for dQ = dS K.
    {
      const int r = warp * 16 + (lane >> 2);
#pragma unroll
      for (int jj = 0; jj < 8; jj++) {
        const int q = jj * 8 + 2 * (lane & 3);
        const uint32_t off0 = swizzled(r, jj) + (q & 7) * 2, off1 = swizzled(r + 8, jj) + (q & 7) * 2;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sDS + off0), "r"(da[jj >> 1][(jj & 1) * 2 + 0]));
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sDS + off1), "r"(da[jj >> 1][(jj & 1) * 2 + 1]));
      }
    }
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ks++) mma_rs(dv, pa[ks], desc(sDO + 2048 * ks));
#pragma unroll
    for (int ks = 0; ks < 4; ks++) mma_rs(dk, da[ks], desc(sQ + 2048 * ks));
    wgmma_commit();
    fence_async_shared();
    __syncthreads();  // both warpgroups' dS^T written: dQ takes all 128 keys
    // dQ[:, 32 wg .. 32 wg + 31] = dS K[:, those columns]: B from a 64-byte offset inside the swizzle atom.
    float dq[16];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 8; ks++)
      mma_ss_n32_mn(dq, desc(base + kOffDS + 2048 * ks), desc(base + kOffK + 64 * wg + 2048 * ks), ks);
    wgmma_commit();
    wgmma_wait_all();

    // Into dQ's f32 sum, in turn: the first part stores, the later ones add (vector atomics, one kv block at a
    // time: the same sums on every run); attention_backward_dq_kernel scales and rounds the sums afterwards.
    if (turn > 0) {
      // Before waiting, this CTA's own batch of counters is moved on: a CTA that waits holds back no other's turn
      // (with both kinds of walks, the CTA waited for may itself be waiting for one of those counters).
      volatile int* const must_wait = reinterpret_cast<volatile int*>(smem + kOffFlag);
      if (tid == 0) *must_wait = seen != turn;
      __syncthreads();
      if (*must_wait && released < it) {
        __threadfence();
        __syncthreads();
        if (tid == 0) move_on(it);
        released = it;
      }
      if (tid == 0) {
        for (int64_t spins = 0; seen != turn; spins++) {
          if (spins > (int64_t(1) << 26)) __trap();  // seconds: a kv block before it never came; fail, do not hang
          __nanosleep(64);
          asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
        }
      }
      __syncthreads();
    }
    float* acc = p.dq_acc + ((int64_t(b) * p.Hq + w.h) * p.T + int64_t(w.i) * kBlockM) * kHd;
    const int r = warp * 16 + (lane >> 2);
#pragma unroll
    for (int jj = 0; jj < 4; jj++) {
      const int c = 32 * wg + jj * 8 + 2 * (lane & 3);
#pragma unroll
      for (int half = 0; half < 2; half++) {
        float2* at = reinterpret_cast<float2*>(acc + (r + 8 * half) * kHd + c);
        const float2 v = make_float2(dq[4 * jj + 2 * half], dq[4 * jj + 2 * half + 1]);
        if (turn == 0) __stcg(at, v);
        else atomicAdd(at, v);
      }
    }
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) move_on(iters);
  write_dkv(j_down);
#else
  __trap();  // built without sm_90a code: the host never launches it (attention_backward_fused_supported)
#endif
}

// D[b, h, t] = sum over the head's 64 columns of dO O (f32), eight threads a row; and the dQ counters to 0.
__global__ void attention_backward_prep_kernel(float* D, int* counters, int64_t n_counters, const bf16* dout,
                                               const bf16* out, int64_t rows, int T, int Hq) {
  const int64_t gid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t c = gid; c < n_counters; c += int64_t(gridDim.x) * blockDim.x) counters[c] = 0;
  const int64_t row = gid >> 3;  // (b T + t) Hq + h
  const int part = int(gid & 7);
  float sum = 0.f;
  if (row < rows) {
    float a[8], o[8];
    load_bf16<8>(a, dout + row * kHd + part * 8);
    load_bf16<8>(o, out + row * kHd + part * 8);
#pragma unroll
    for (int e = 0; e < 8; e++) sum += a[e] * o[e];
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  sum += __shfl_xor_sync(0xffffffffu, sum, 4);
  if (row < rows && part == 0) {
    const int64_t h = row % Hq, bt = row / Hq, t = bt % T, b = bt / T;
    D[(b * Hq + h) * T + t] = sum;
  }
}

// dQ: the f32 sums [B, Hq, T, 64] (of dS unscaled) times the scale, rounded to bf16 into dqkv [B, T, Hq + 2 Hkv, 64]; a thread per 8 values.
__global__ void attention_backward_dq_kernel(bf16* dqkv, const float* dq_acc, int64_t n8, int T, int Hq, int64_t ld,
                                             float scale) {
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n8) return;
  const int64_t row = k >> 3, t = row % T, bh = row / T, h = bh % Hq, b = bh / Hq;
  float v[8];
  const float4 a = __ldcs(reinterpret_cast<const float4*>(dq_acc) + 2 * k);
  const float4 c = __ldcs(reinterpret_cast<const float4*>(dq_acc) + 2 * k + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
#pragma unroll
  for (int e = 0; e < 8; e++) v[e] *= scale;
  store_bf16<8>(dqkv + (b * T + t) * ld + h * kHd + (k & 7) * 8, v);
}

struct Scratch {
  float* D;
  float* dq_acc;
  int* counters;
  int64_t n_counters;
  size_t total;
};

Scratch carve(void* p, int B, int T, int Hq) {
  Scratch s{};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    void* at = p ? static_cast<char*>(p) + off : nullptr;
    off += (bytes + 255) / 256 * 256;
    return at;
  };
  s.D = static_cast<float*>(take(size_t(B) * Hq * T * sizeof(float)));
  s.dq_acc = static_cast<float*>(take(size_t(B) * Hq * T * kHd * sizeof(float)));
  s.n_counters = int64_t(B) * Hq * (T / kBlockM);
  s.counters = static_cast<int*>(take(size_t(s.n_counters) * sizeof(int)));
  s.total = off;
  return s;
}

// Whether sm_90a code was built and the current device is compute capability 9.0 (asked once).
bool hopper_code_runs() {
#if defined(TK_HAVE_SM90A)
  static const bool runs = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) return false;
    return major == 9 && minor == 0;
  }();
  return runs;
#else
  return false;
#endif
}

}  // namespace

bool attention_backward_fused_supported(int T, int head_dim) {
  return head_dim == kHd && T > 0 && T % kBlockN == 0 && hopper_code_runs();
}

size_t attention_backward_fused_scratch_bytes(int B, int T, int Hq) { return carve(nullptr, B, T, Hq).total; }

void attention_backward_fused(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                              int B, int T, int Hq, int Hkv, int head_dim, void* scratch, size_t scratch_bytes,
                              cudaStream_t s) {
  TK_CUDA_REQUIRE(head_dim == kHd && T % kBlockN == 0 && Hkv > 0 && Hq % Hkv == 0,
                  "attention_backward_fused: head_dim %d, T %d, heads %d:%d are not supported", head_dim, T, Hq, Hkv);
  const Scratch sc = carve(scratch, B, T, Hq);
  TK_CUDA_REQUIRE(scratch_bytes >= sc.total, "attention_backward_fused: scratch of %zu bytes, %zu needed",
                  scratch_bytes, sc.total);
  const int64_t rows = int64_t(B) * T * Hq;
  attention_backward_prep_kernel<<<ceil_div(rows * 8, 256), 256, 0, s>>>(sc.D, sc.counters, sc.n_counters, dout,
                                                                         out, rows, T, Hq);
  TK_CUDA_CHECK_LAUNCH();
  Params p{qkv, dout, lse, sc.D, dqkv, sc.dq_acc, sc.counters, B, T, Hq, Hkv, float(1.0 / std::sqrt(double(head_dim)))};
  TK_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     kSmemBytes));
  attention_backward_kernel<<<B * Hkv * ((T / kBlockN + 1) / 2), kThreads, kSmemBytes, s>>>(p);
  TK_CUDA_CHECK_LAUNCH();
  const int64_t n8 = int64_t(B) * Hq * T * kHd / 8;
  attention_backward_dq_kernel<<<ceil_div(n8, 256), 256, 0, s>>>(dqkv, sc.dq_acc, n8, T, Hq,
                                                                int64_t(Hq + 2 * Hkv) * kHd, p.scale);
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
