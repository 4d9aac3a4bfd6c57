// Causal attention backward of our own for head_dim 64 on Hopper (sm_90a: warpgroup MMA), deterministic.
//
// One CTA per (batch row b, kv head g, pair of blocks of 128 keys: n - 1 - p and p): two consumer warpgroups and a
// hand-over warpgroup of which one thread works (its registers, by setmaxnreg, go to the consumers). For each of its
// kv blocks the CTA walks the query blocks (128 rows) that see those keys, and for each the q heads of its GQA group,
// so that dK and dV of the whole group accumulate in registers (summed over heads in a fixed order, written once, no
// cross-head reduction). Per (q block i, head h), consumer warpgroup w, with K_w and V_w its 64 keys:
//   S^T = K_w Q^T, dP^T = V_w dO^T                 (m64n128: operands in shared memory, K-major, 128-byte swizzle)
//   P^T = exp(S^T scale - lse), masked causally; dS^T = P^T (dP^T - D), D = rowsum(dO O); dS^T to shared memory
//   dV_w += P^T dO                                  (A from registers, B MN-major)
//   dK_w += dS^T Q                                  (A = its rows of dS^T, K-major; B MN-major)
// and, with both warpgroups' dS^T in shared memory, warpgroup w takes dQ's rows 64 w .. 64 w + 63 over all 128
// keys: dQ_w = dS_w K (A and B MN-major); dK and dQ take the softmax scale at the end.
// Pairing a high kv block (few q blocks) with a low one (many) gives every CTA the same work: one wave of equal
// CTAs where they fit. dQ of a q block sums the parts of every kv block at or under it in a fixed order into an f32
// buffer: each consumer warpgroup writes its part to one of two shared-memory buffers (mbarriers full / empty), and
// the hand-over thread gives it to the bulk-copy unit, which stores it (the first part) or adds it (the later ones,
// cp.reduce.async.bulk: f32 adds in L2, one part at a time) to the buffer, behind a counter per q block that
// says whose turn it is. A part is released (its counter moved on) once its add has completed, checked an iteration
// later; the consumers never wait for any of it. A last small kernel scales the sums and rounds them to bf16 into
// dqkv. The order is the order the kv blocks reach the q block (attention_schedule.h): the high block of a pair walks
// its q blocks upwards from its diagonal, the low one downwards from the top, so a kv block's step count is its
// arrival time, and in the steady state nobody waits. The hand-over thread releases its pending parts before it
// waits, and a CTA waits only on CTAs of its own (b, g), adjacent in the grid: no deadlock. A small kernel before
// sets D and the counters to 0.
//
// bench/history/2026-11-30-day6.md (and days 5, 7, 8) has the counts, the predictions and the measurements.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ops/cuda/attention_schedule.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

constexpr int kHd = attn_schedule::kHeadDim;  // 64
constexpr int kBlock = attn_schedule::kBlock;  // queries an iteration, keys a kv block: 128
constexpr int kThreads = 256;     // the two consumer warpgroups
constexpr int kThreadsAll = 384;  // and the hand-over warpgroup (one thread of it works)
// Shared memory (bytes from a 1,024-aligned base): bf16 tiles of 128-byte rows in the 128-byte swizzle.
constexpr int kRows128 = 128 * 128;            // a 128-row tile
constexpr int kOffK = 0;                       // K [128 keys][64]
constexpr int kOffV = kOffK + kRows128;        // V [128 keys][64]
constexpr int kOffQ = kOffV + kRows128;        // Q [2 stages][128 queries][64]
constexpr int kOffDO = kOffQ + 2 * kRows128;   // dO [2 stages][128 queries][64]
constexpr int kOffDS = kOffDO + 2 * kRows128;  // dS^T [2 halves of the queries][128 keys][64 queries]
constexpr int kDqPart = 64 * 64 * 4;           // a warpgroup's dQ part, f32 in accumulator order
constexpr int kOffDQ = kOffDS + 2 * kRows128;  // [2 buffers][2 warpgroups] parts
constexpr int kOffLse = kOffDQ + 4 * kDqPart;  // lse [2 stages][128], f32
constexpr int kOffD = kOffLse + 2 * 128 * 4;   // D [2 stages][128], f32
constexpr int kOffBar = kOffD + 2 * 128 * 4;  // mbarriers: full [2 warpgroups][2 buffers], then empty [2][2]
constexpr int kSmemBytes = kOffBar + 8 * 8 + 1024;  // + room to align the base

struct Params {
  const bf16* qkv;
  const bf16* dout;
  const float* lse;
  const float* D;
  bf16* dqkv;
  float* dq_acc;  // [B, Hq, n, 2 halves] parts of 64 x 64 f32 in accumulator order (attention_backward_dq_kernel)
  int* counters;  // [B, Hq, n]: the parts the q block's dQ has taken
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

// The bulk-copy unit: a part of `bytes` from shared memory stored to, or added (f32) to, global memory.
__device__ __forceinline__ void bulk_store(float* dst, uint32_t src, int bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_add_f32(float* dst, uint32_t src, int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void bulk_wait() {  // all but the newest kPending groups completed (their writes done)
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void release(int* counter, int value) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");  // the bulk unit's writes before the generic release
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(counter), "r"(value) : "memory");
}
__device__ __forceinline__ int load_acquire(const int* counter) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
  return v;
}

__device__ __forceinline__ void consumer_bar() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Until the phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// A shared-memory matrix descriptor: 128-byte swizzle, LBO 16 bytes, SBO 1,024 bytes (8 rows of 128 bytes).
__device__ __forceinline__ uint64_t desc(uint32_t addr) {
  return uint64_t((addr >> 4) & 0x3fff) | (uint64_t(16 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// d (+)= A B^T, m64n128k16, both from shared memory, K-major.
__device__ __forceinline__ void mma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
      "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
      "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
      "%59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(accumulate));
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

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// 128 x 64 bf16 from global (row stride ld elements) into a swizzled tile: 16-byte chunks, all 256 threads.
__device__ __forceinline__ void load_tile(uint32_t dst, const bf16* src, int64_t ld) {
#pragma unroll
  for (int k = 0; k < 128 * 8 / kThreads; k++) {
    const int c = threadIdx.x + k * kThreads, r = c >> 3, ch = c & 7;
    cp_async16(dst + swizzled(r, ch), src + r * ld + ch * 8);
  }
}
#endif

namespace sch = attn_schedule;

__global__ void __launch_bounds__(kThreadsAll, 1) attention_backward_kernel(Params p) {
#ifdef TK_WGMMA
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw);
  const float* const s_lse = reinterpret_cast<const float*>(smem + kOffLse);
  const float* const s_D = reinterpret_cast<const float*>(smem + kOffD);

  const int tid = threadIdx.x, wg = tid >> 7, t = tid & 127, warp = t >> 5, lane = tid & 31;
  // The CTAs of a (b, g) are adjacent in the grid: they wait only on each other, and launch together.
  const int n = p.T / kBlock, n_pairs = sch::pairs(n);
  const int bg = int(blockIdx.x / uint32_t(n_pairs)), pair = int(blockIdx.x % uint32_t(n_pairs));
  const int b = bg / p.Hkv, g = bg % p.Hkv, group = p.Hq / p.Hkv;
  // The pair's kv blocks (j_up == j_down: the middle block of an odd n, alone) and walks: attention_schedule.h.
  const int j_up = sch::up_block(pair, n), j_down = sch::down_block(pair);
  const int steps_up = sch::steps_up(pair, n), iters = sch::steps(pair, n) * group;
  const int64_t ld = int64_t(p.Hq + 2 * p.Hkv) * kHd, ld_o = int64_t(p.Hq) * kHd;
  const bf16* const qkv_b = p.qkv + int64_t(b) * p.T * ld;
  const bf16* const dout_b = p.dout + int64_t(b) * p.T * ld_o;
  // Iteration it: its kv block, q block and head.
  struct Work {
    int j, i, h;
  };
  auto work = [&](int it) {
    const sch::Step st = sch::step_of(pair, it / group, n);
    return Work{st.j, st.i, g * group + it % group};
  };
  auto load_kv = [&](int j) {
    load_tile(base + kOffK, qkv_b + int64_t(j) * kBlock * ld + int64_t(p.Hq + g) * kHd, ld);
    load_tile(base + kOffV, qkv_b + int64_t(j) * kBlock * ld + int64_t(p.Hq + p.Hkv + g) * kHd, ld);
  };
  auto prefetch = [&](int it, int stage) {  // iteration it's Q, dO, lse and D into `stage`
    const Work w = work(it);
    load_tile(base + kOffQ + stage * kRows128, qkv_b + int64_t(w.i) * kBlock * ld + int64_t(w.h) * kHd, ld);
    load_tile(base + kOffDO + stage * kRows128, dout_b + int64_t(w.i) * kBlock * ld_o + int64_t(w.h) * kHd, ld_o);
    const int64_t row = (int64_t(b) * p.Hq + w.h) * p.T + int64_t(w.i) * kBlock;
    if (tid < 32) cp_async16(base + kOffLse + stage * 512 + tid * 16, p.lse + row + tid * 4);
    else if (tid < 64) cp_async16(base + kOffD + stage * 512 + (tid - 32) * 16, p.D + row + (tid - 32) * 4);
  };
  // dQ parts: consumer warpgroup w stages iteration it's part in buffer it % 2 and arrives on full[w][it % 2]; the
  // hand-over thread adds it and arrives on empty[w][it % 2] once the bulk unit has read it.
  auto full_bar = [&](int w, int buf) { return base + kOffBar + (w * 2 + buf) * 8; };
  auto empty_bar = [&](int w, int buf) { return base + kOffBar + 32 + (w * 2 + buf) * 8; };
  if (tid == 0) {
    for (int k = 0; k < 4; k++) mbar_init(base + kOffBar + k * 8, 128), mbar_init(base + kOffBar + 32 + k * 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (wg == 2) {
    // The hand-over warpgroup: one thread adds the parts in turn, off the consumers' path. Its registers go to them.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (t != 0) return;
    int pending = -1;  // the iteration whose parts are added and not yet released
    // One counter a q block: the thread hands both halves of a part over together, so one acquire and one
    // release an iteration order both.
    auto counter_of = [&](const Work& w) { return p.counters + (int64_t(b) * p.Hq + w.h) * n + w.i; };
    auto release_part = [&](int k) {
      const Work w = work(k);
      release(counter_of(w), sch::turn(w.i, w.j, n) + 1);
    };
    for (int it = 0; it < iters; it++) {
      const int buf = it & 1, use = it >> 1;
      const Work w = work(it);
      const int turn = sch::turn(w.i, w.j, n);
      int* const c = counter_of(w);
      if (turn > 0 && load_acquire(c) != turn) {
        // About to wait: release the pending parts first, so that a CTA that waits holds back no other's turn (the
        // one waited for may itself be waiting for those counters).
        if (pending >= 0) {
          bulk_wait<0>();
          release_part(pending);
          pending = -1;
        }
        for (int64_t spins = 0; load_acquire(c) != turn; spins++) {
          if (spins > (int64_t(1) << 26)) __trap();  // seconds: a kv block before it never came; fail, do not hang
          __nanosleep(64);
        }
      }
      for (int half = 0; half < 2; half++) {
        mbar_wait(full_bar(half, buf), use & 1);
        const uint32_t src = base + kOffDQ + (buf * 2 + half) * kDqPart;
        float* const dst = p.dq_acc + (((int64_t(b) * p.Hq + w.h) * n + w.i) * 2 + half) * (kDqPart / 4);
        if (turn == 0) bulk_store(dst, src, kDqPart);  // the first part stores, the later ones add
        else bulk_add_f32(dst, src, kDqPart);
      }
      bulk_commit();
      bulk_wait_read0();
      mbar_arrive(empty_bar(0, buf));
      mbar_arrive(empty_bar(1, buf));
      if (pending >= 0) {
        bulk_wait<1>();  // the parts before these have been added
        release_part(pending);
      }
      pending = it;
    }
    if (pending >= 0) {
      bulk_wait<0>();
      release_part(pending);
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");

  load_kv(j_up);
  prefetch(0, 0);
  cp_async_commit();

  float dk[32], dv[32];
#pragma unroll
  for (int e = 0; e < 32; e++) dk[e] = 0.f, dv[e] = 0.f;
  // dK and dV of kv block j, summed over the group's heads in order: bf16 into dqkv (dK scaled here: dS is not).
  auto write_dkv = [&](int j) {
    const int r = warp * 16 + (lane >> 2);
    bf16* const dk_out = p.dqkv + (int64_t(b) * p.T + int64_t(j) * kBlock + wg * 64) * ld + int64_t(p.Hq + g) * kHd;
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
  const uint32_t sK = base + kOffK + wg * (kRows128 / 2), sV = base + kOffV + wg * (kRows128 / 2);
  const int r = warp * 16 + (lane >> 2);  // this thread's rows (of the warpgroup's 64): r and r + 8

  for (int it = 0; it < iters; it++) {
    const int stage = it & 1;
    const Work w = work(it);
    cp_async_wait_all();
    fence_async_shared();
    consumer_bar();  // this stage loaded; every thread done with the last iteration (its stage, dS^T)
    const bool switch_kv = it == steps_up * group;  // the pair's second kv block starts
    if (switch_kv) {
      write_dkv(j_up);
#pragma unroll
      for (int e = 0; e < 32; e++) dk[e] = 0.f, dv[e] = 0.f;
      load_kv(j_down);
      cp_async_commit();
    }
    if (it + 1 < iters) prefetch(it + 1, stage ^ 1);
    cp_async_commit();
    if (switch_kv) {  // the new K and V in (all but the newest group: the prefetch just issued)
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
      fence_async_shared();
      consumer_bar();
    }
    const uint32_t sQ = base + kOffQ + stage * kRows128, sDO = base + kOffDO + stage * kRows128;

    // S^T and dP^T: this warpgroup's 64 keys against the 128 queries.
    float s[64], dp[64];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ks++) mma_ss_n128(s, desc(sK + 32 * ks), desc(sQ + 32 * ks), ks);
#pragma unroll
    for (int ks = 0; ks < 4; ks++) mma_ss_n128(dp, desc(sV + 32 * ks), desc(sDO + 32 * ks), ks);
    wgmma_commit();
    wgmma_wait_all();

    // P^T and dS^T (unscaled: the scale is applied to dK and dQ at the end), as the bf16 A fragments of the next
    // products: pa[ks] covers queries 16 ks .. 16 ks + 15. The causal mask only on the diagonal block.
    uint32_t pa[8][4];
    const float* lse = s_lse + stage * 128;
    const float* Dq = s_D + stage * 128;
    const int key = wg * 64 + r;  // within the block
    const bool masked = w.i == w.j;
#pragma unroll
    for (int jj = 0; jj < 16; jj++) {
      const int q = jj * 8 + 2 * (lane & 3);  // local query of elements 4 jj + 0 (and + 1)
      const float2 l = *reinterpret_cast<const float2*>(lse + q);
      const float2 D = *reinterpret_cast<const float2*>(Dq + q);
      const float l0 = l.x * 1.4426950408889634f, l1 = l.y * 1.4426950408889634f;
      float pr[4], ds[4];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float x;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(x) : "f"(s[4 * jj + e] * scale_log2 - ((e & 1) ? l1 : l0)));
        if (masked && key + (e >= 2 ? 8 : 0) > q + (e & 1)) x = 0.f;
        pr[e] = x;
        ds[e] = x * (dp[4 * jj + e] - ((e & 1) ? D.y : D.x));
      }
      pa[jj >> 1][(jj & 1) * 2 + 0] = pack_bf16(pr[0], pr[1]);
      pa[jj >> 1][(jj & 1) * 2 + 1] = pack_bf16(pr[2], pr[3]);
      // dS^T into shared memory ([key][query], swizzled; queries 0-63 in the first half, 64-127 in the second), for
      // dK and dQ from there.
      const uint32_t half = base + kOffDS + (jj >> 3) * kRows128;
      const uint32_t off0 = swizzled(key, jj & 7) + (q & 7) * 2, off1 = swizzled(key + 8, jj & 7) + (q & 7) * 2;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(half + off0), "r"(pack_bf16(ds[0], ds[1])));
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(half + off1), "r"(pack_bf16(ds[2], ds[3])));
    }
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 8; ks++) mma_rs(dv, pa[ks], desc(sDO + 2048 * ks));
    wgmma_commit();
    fence_async_shared();
    consumer_bar();  // both warpgroups' dS^T written: dQ takes all 128 keys
    // dK += dS^T Q: A = this warpgroup's 64 rows of dS^T (K-major: a k-step is 16 queries, 32 bytes, the second
    // half tile from query 64), B = Q (MN-major). dQ rows 64 wg .. 64 wg + 63 = dS[those rows] K: A = that half of
    // dS^T, B = K, both MN-major.
    float dq[32];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 8; ks++)
      mma_ss<0, 1>(dk, desc(base + kOffDS + (ks >> 2) * kRows128 + wg * (kRows128 / 2) + 32 * (ks & 3)),
                   desc(sQ + 2048 * ks), 1);
#pragma unroll
    for (int ks = 0; ks < 8; ks++)
      mma_ss<1, 1>(dq, desc(base + kOffDS + wg * kRows128 + 2048 * ks), desc(base + kOffK + 2048 * ks), ks);
    wgmma_commit();
    wgmma_wait_all();

    // The part into shared memory in accumulator order, once the hand-over thread has had the buffer's last part
    // read; then it is that thread's (attention_backward_dq_kernel scales and rounds the sums afterwards).
    const int buf = it & 1;
    mbar_wait(empty_bar(wg, buf), ((it >> 1) & 1) ^ 1);
    float4* const part_v = reinterpret_cast<float4*>(smem + kOffDQ + (buf * 2 + wg) * kDqPart);
#pragma unroll
    for (int e4 = 0; e4 < 8; e4++)
      part_v[e4 * 128 + t] = make_float4(dq[4 * e4], dq[4 * e4 + 1], dq[4 * e4 + 2], dq[4 * e4 + 3]);
    fence_async_shared();
    mbar_arrive(full_bar(wg, buf));
  }
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

// dQ: the f32 sums (of dS unscaled) times the scale, rounded to bf16 into dqkv [B, T, Hq + 2 Hkv, 64]. The sums come
// as parts [B, Hq, T / 128, 2 halves] of 64 rows x 64 columns in the warpgroup accumulator's order: float4 e4 of
// thread t holds rows r and r + 8 (r = 16 (t / 32) + t % 32 / 4), columns 8 e4 + 2 (t % 4) and the next. A thread a
// float4.
__global__ void attention_backward_dq_kernel(bf16* dqkv, const float* dq_acc, int64_t n4, int T, int Hq, int64_t ld,
                                             float scale) {
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n4) return;
  const int t = int(k & 127), e4 = int((k >> 7) & 7), half = int((k >> 10) & 1);
  const int64_t blk = k >> 11, n = T / kBlock, i = blk % n, bh = blk / n, h = bh % Hq, b = bh / Hq;
  const float4 v = __ldcs(reinterpret_cast<const float4*>(dq_acc) + k);
  const int lane = t & 31, r = (t >> 5) * 16 + (lane >> 2), c = e4 * 8 + 2 * (lane & 3);
  const int64_t q = i * kBlock + half * 64 + r;
  bf16* const out = dqkv + (b * T + q) * ld + h * kHd + c;
  *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(v.x * scale, v.y * scale);
  *reinterpret_cast<__nv_bfloat162*>(out + 8 * ld) = __floats2bfloat162_rn(v.z * scale, v.w * scale);
}

struct Scratch {
  float* D;
  float* dq_acc;
  int* counters;
  int64_t n_counters;
  size_t total;
};

Scratch carve(void* p, int B, int T, int Hq) {
  const attn_schedule::ScratchLayout l = attn_schedule::scratch_layout(B, T, Hq);
  char* const at = static_cast<char*>(p);
  Scratch s{};
  s.D = p ? reinterpret_cast<float*>(at + l.D) : nullptr;
  s.dq_acc = p ? reinterpret_cast<float*>(at + l.dq) : nullptr;
  s.counters = p ? reinterpret_cast<int*>(at + l.counters) : nullptr;
  s.n_counters = int64_t(B) * Hq * (T / kBlock);
  s.total = l.total;
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

int attention_backward_fused_sms() {
  static const bool wanted = [] {
    const char* v = std::getenv("TOKAMAK_ATTENTION_BACKWARD");
    return !(v && std::string(v) == "cudnn");
  }();
  return wanted && hopper_code_runs() ? sm_count() : 0;
}

bool attention_backward_fused_supported(int T, int head_dim) {
  return attn_schedule::runs(T, head_dim, attention_backward_fused_sms());
}

size_t attention_backward_fused_scratch_bytes(int B, int T, int Hq) { return carve(nullptr, B, T, Hq).total; }

void attention_backward_fused(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                              int B, int T, int Hq, int Hkv, int head_dim, void* scratch, size_t scratch_bytes,
                              cudaStream_t s) {
  TK_CUDA_REQUIRE(head_dim == kHd && T % kBlock == 0 && Hkv > 0 && Hq % Hkv == 0,
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
  attention_backward_kernel<<<B * Hkv * attn_schedule::pairs(T / kBlock), kThreadsAll, kSmemBytes, s>>>(p);
  TK_CUDA_CHECK_LAUNCH();
  const int64_t n4 = int64_t(B) * Hq * T * kHd / 4;
  attention_backward_dq_kernel<<<ceil_div(n4, 256), 256, 0, s>>>(dqkv, sc.dq_acc, n4, T, Hq,
                                                                int64_t(Hq + 2 * Hkv) * kHd, p.scale);
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
