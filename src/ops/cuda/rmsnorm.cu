// RMSNorm on bf16 rows: the forward (optionally fused with the residual add before it) and the backward
// (fused with the residual gradient, and the weight gradient through deterministic per-block partials).
// The fast paths (rows of d % 8 == 0 up to a few thousand columns: every training width) give each row to
// one warp, with no block-wide synchronisation per row; the general path gives a row to a block, each thread
// owning CPT chunks of V consecutive columns, and holds several rows in registers at once so that their loads
// are in flight together.
#include <cuda_pipeline.h>

#include <algorithm>
#include <type_traits>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

// Registers hold kRowsTimesChunks chunks of V values per thread: rows per step = kRowsTimesChunks / CPT.
constexpr int kRowsTimesChunks = 4;
// The backward writes at most this many partial dw rows; fewer blocks than rows keeps the partials small.
constexpr int kMaxBackwardBlocks = 512;
// Threads per block at most: the backward needs up to 128 registers a thread.
constexpr int kMaxThreads = 512;

// How a row's columns are spread over a block: thread t owns chunks t, t + threads, ... (cpt of them).
struct ColumnTiling {
  int vec;      // columns per chunk: 8 (16-byte accesses) or 1
  int cpt;      // chunks per thread: 1, 2 or 4
  int threads;  // a multiple of 32
  int rows_per_step() const { return kRowsTimesChunks / cpt; }
};

ColumnTiling column_tiling(int d, bool vectorised) {
  TK_CUDA_REQUIRE(d > 0, "rmsnorm: the row width must be positive, got %d", d);
  const int vec = vectorised ? kVec : 1;
  const int64_t chunks = ceil_div(d, vec);
  for (int cpt : {1, 2, 4}) {
    if (chunks <= kMaxThreads * cpt) return {vec, cpt, int(ceil_div(ceil_div(chunks, cpt), 32) * 32)};
  }
  fail_printf("rmsnorm: a row of %d values is wider than the kernels support (%d, or %d when not a multiple of 8)",
              d, 4 * kMaxThreads * kVec, 4 * kMaxThreads);
}

// Backward grid: blocks of rows_per_block consecutive rows, at most kMaxBackwardBlocks of them.
struct BackwardGrid {
  int rows_per_block, blocks;
};
BackwardGrid backward_grid(int64_t N, int rows_per_step) {
  int64_t rows = std::max<int64_t>(rows_per_step, ceil_div(N, kMaxBackwardBlocks));
  rows = ceil_div(rows, rows_per_step) * rows_per_step;
  return {int(rows), int(std::max<int64_t>(1, ceil_div(N, rows)))};
}

bool vectorisable(int d, std::initializer_list<const void*> ptrs) {
  if (d % kVec) return false;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

// ---- forward, fast path: one warp per row ----------------------------------------------------------
// For d % 8 == 0 and d <= 32 * 8 * kMaxWarpChunks: lane l owns the 16-byte chunks l, l + 32, ... (VPT of
// them, kept packed), the sum of squares is a warp reduction, and w (a few KB, L1-resident after the
// first row) is read after it.
constexpr int kWarpRowsPerBlock = 8;
constexpr int kMaxWarpChunks = 16;

template <int VPT, bool kResidual>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    rmsnorm_forward_warp_kernel(__nv_bfloat16* h_out, __nv_bfloat16* y, float* rstd, const __nv_bfloat16* h_in,
                                const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t N, int d, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;  // a whole warp: nothing below synchronises the block
  PackedBf16<kVec> h[VPT], residual[kResidual ? VPT : 1];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < VPT; j++) {  // every load of the row first: all in flight together
    const int col = (lane + 32 * j) * kVec;
    if (col >= d) continue;
    load_packed(h[j], x + row * d + col);
    if constexpr (kResidual) load_packed(residual[j], h_in + row * d + col);
  }
  if constexpr (kResidual) {
    // h = round_bf16(h_in + x): what h_out holds and what is normalised.
#pragma unroll
    for (int j = 0; j < VPT; j++) {
      const int col = (lane + 32 * j) * kVec;
      if (col >= d) continue;
      float a[kVec], b[kVec];
      unpack(a, h[j]);
      unpack(b, residual[j]);
#pragma unroll
      for (int k = 0; k < kVec; k++) a[k] += b[k];
      store_bf16(h_out + row * d + col, a);
      pack(h[j], a);  // the same rounding as the store
    }
  }
#pragma unroll
  for (int j = 0; j < VPT; j++) {
    if ((lane + 32 * j) * kVec >= d) continue;
    float a[kVec];
    unpack(a, h[j]);
#pragma unroll
    for (int k = 0; k < kVec; k++) ss += a[k] * a[k];
  }
  const float rs = 1.f / sqrtf(warp_sum(ss) / float(d) + eps);
#pragma unroll
  for (int j = 0; j < VPT; j++) {
    const int col = (lane + 32 * j) * kVec;
    if (col >= d || !y) continue;  // y null: rstd (and h_out) only, the output left to rmsnorm_cast_fp8
    float a[kVec], wv[kVec];
    unpack(a, h[j]);
    load_bf16(wv, w + col);
#pragma unroll
    for (int k = 0; k < kVec; k++) a[k] = a[k] * rs * wv[k];
    store_bf16(y + row * d + col, a);
  }
  if (lane == 0) rstd[row] = rs;
}

// Launches the warp kernel with the fewest chunks per lane that cover d; false if d is too wide for it.
bool launch_forward_warp(__nv_bfloat16* h_out, __nv_bfloat16* y, float* rstd, const __nv_bfloat16* h_in,
                         const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t N, int d, float eps,
                         cudaStream_t s) {
  const int64_t chunks_per_lane = ceil_div(ceil_div(d, kVec), 32);
  if (chunks_per_lane > kMaxWarpChunks) return false;
  const int64_t blocks = ceil_div(N, kWarpRowsPerBlock);
  auto launch = [&](auto vpt) {
    constexpr int VPT = decltype(vpt)::value;
    if (h_in)
      rmsnorm_forward_warp_kernel<VPT, true>
          <<<blocks, 32 * kWarpRowsPerBlock, 0, s>>>(h_out, y, rstd, h_in, x, w, N, d, eps);
    else
      rmsnorm_forward_warp_kernel<VPT, false>
          <<<blocks, 32 * kWarpRowsPerBlock, 0, s>>>(h_out, y, rstd, h_in, x, w, N, d, eps);
    TK_CUDA_CHECK_LAUNCH();
  };
  if (chunks_per_lane <= 1) launch(std::integral_constant<int, 1>{});
  else if (chunks_per_lane <= 2) launch(std::integral_constant<int, 2>{});
  else if (chunks_per_lane <= 4) launch(std::integral_constant<int, 4>{});
  else if (chunks_per_lane <= 8) launch(std::integral_constant<int, 8>{});
  else launch(std::integral_constant<int, 16>{});
  return true;
}

// ---- backward, narrow rows: a warp per row, the next row in registers ----------------------------------
// For d % 8 == 0 and d <= 32 * 8 * kRegsMaxChunks (Qwen2.5-0.5B's 896, and any width up to 1,024). One block
// of kRegsWarps warps an SM (at most kStagedBlocks blocks); block b takes the rows [b N / G, (b + 1) N / G),
// each warp a contiguous share of them. A warp holds the next row's dy, h, dresidual and rstd, as loaded, in
// registers while it computes one, keeps w widened to fp32 for the whole run and its dw columns in registers;
// no shared memory until the end. There the block adds its warps' dw rows in warp order into dw_partial[b, :]
// (laid out element-major so that the lanes' stores and the sums hit distinct banks). The partial sums depend
// on N, d and the grid (the device's SM count), never on timing. Measured at N = 16,384, d = 896 on an H200:
// 42.2 us against 47.6 us for the staged kernel below (bench/history/2026-11-30-day4.md); at 1,536 and 2,048
// its registers spill and the staged kernel is faster.
constexpr int kRegsWarps = 8;
constexpr int kRegsMaxChunks = 4;

template <int VPT>
__global__ void __launch_bounds__(32 * kRegsWarps, 1)
    rmsnorm_backward_regs_kernel(__nv_bfloat16* dh, float* dw_partial, const __nv_bfloat16* dy,
                                 const __nv_bfloat16* dresidual, const __nv_bfloat16* h, const float* rstd,
                                 const __nv_bfloat16* w, int64_t N, int d) {
  extern __shared__ float dw_rows[];  // [kRegsWarps][d], element e of chunk i at e * chunks + i
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, chunks = d / kVec;
  const int64_t b0 = int64_t(blockIdx.x) * N / gridDim.x, b1 = int64_t(blockIdx.x + 1) * N / gridDim.x;
  const int64_t r0 = b0 + (b1 - b0) * warp / kRegsWarps, r1 = b0 + (b1 - b0) * (warp + 1) / kRegsWarps;
  float wv[VPT][kVec], dw_acc[VPT][kVec];
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int i = lane + 32 * k;
    PackedBf16<kVec> wp;
    wp.raw = i < chunks ? reinterpret_cast<const uint4*>(w)[i] : make_uint4(0, 0, 0, 0);
    unpack(wv[k], wp);
#pragma unroll
    for (int e = 0; e < kVec; e++) dw_acc[k][e] = 0.f;
  }
  uint4 g_next[VPT], h_next[VPT], res_next[VPT];
  float rs_next = 0.f;
  auto load = [&](int64_t row) {  // row r1: nothing
    if (row >= r1) return;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
      const int i = lane + 32 * k;
      if (i >= chunks) continue;
      g_next[k] = reinterpret_cast<const uint4*>(dy + row * d)[i];
      h_next[k] = reinterpret_cast<const uint4*>(h + row * d)[i];
      if (dresidual) res_next[k] = reinterpret_cast<const uint4*>(dresidual + row * d)[i];
    }
    rs_next = rstd[row];
  };
  load(r0);
  for (int64_t row = r0; row < r1; row++) {
    uint4 res[VPT];
    float g[VPT][kVec], hf[VPT][kVec];
#pragma unroll
    for (int k = 0; k < VPT; k++) {
      PackedBf16<kVec> gp, hp;
      gp.raw = g_next[k], hp.raw = h_next[k];
      unpack(g[k], gp), unpack(hf[k], hp);
      res[k] = res_next[k];
    }
    const float rs = rs_next;
    load(row + 1);  // in flight while this row is computed
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
      if (lane + 32 * k >= chunks) continue;
#pragma unroll
      for (int e = 0; e < kVec; e++) dot += wv[k][e] * g[k][e] * hf[k][e];
    }
    const float c = rs * rs * rs * warp_sum(dot) / float(d);
#pragma unroll
    for (int k = 0; k < VPT; k++) {
      const int i = lane + 32 * k;
      if (i >= chunks) continue;
      float out[kVec];
      if (dresidual) {
        PackedBf16<kVec> rp;
        rp.raw = res[k];
        unpack(out, rp);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; e++) out[e] = 0.f;
      }
#pragma unroll
      for (int e = 0; e < kVec; e++) {
        out[e] += rs * wv[k][e] * g[k][e] - hf[k][e] * c;
        dw_acc[k][e] += g[k][e] * hf[k][e] * rs;
      }
      store_bf16(dh + row * d + kVec * i, out);
    }
  }
  if (!dw_partial) return;  // the same for the whole block
  float* mine = dw_rows + size_t(warp) * d;
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int i = lane + 32 * k;
    if (i < chunks)
#pragma unroll
      for (int e = 0; e < kVec; e++) mine[e * chunks + i] = dw_acc[k][e];
  }
  __syncthreads();
  for (int col = threadIdx.x; col < d; col += blockDim.x) {
    const int at = (col % kVec) * chunks + col / kVec;
    float total = 0.f;
#pragma unroll
    for (int r = 0; r < kRegsWarps; r++) total += dw_rows[size_t(r) * d + at];
    dw_partial[int64_t(blockIdx.x) * d + col] = total;
  }
}

// ---- backward, fast path: a warp per row, rows staged through shared memory ------------------------
// For d % 8 == 0 and d <= 32 * 8 * kMaxStagedChunks (every training width). A block of kStagedWarps warps
// takes the rows [b N / G, (b + 1) N / G) of the G = min(N, kStagedBlocks) blocks, each warp a contiguous
// quarter of them. Each warp runs a pipeline of `stages` rows in shared memory: the rows j + 1 ..
// j + stages - 1 are in flight (cp.async: dy, h, dresidual and the row's rstd) while row j is computed, so the
// loads never wait on the arithmetic, and registers hold no loads in flight. Lane l copies and later reads
// the 16-byte chunks l, l + 32, ... of each row itself (no warp barrier per row); lane 0 copies the rstd
// and hands it to the others by a shuffle. Per row:
//   dot = sum(w * dy * h) (a warp reduction), dh = rstd * w * dy - h * rstd^3 * dot / d (+ dresidual),
// dh stored straight from registers, and dy * h * rstd added into the lane's own dw columns in registers.
// At the end each warp leaves its dw row in its shared memory and the block adds its warps' rows in warp
// order into dw_partial[b, :]: the partial sums depend on N and d only, never on timing.
constexpr int kStagedWarps = 4;
constexpr int kMaxStagedChunks = 8;
// Partial dw rows at most: 256 blocks are two per SM of an H100/H200, one wave.
constexpr int kStagedBlocks = 256;
// Dynamic shared memory of a block at most: two blocks per SM (228 KB, 1 KB reserved per block).
constexpr size_t kStagedSmemBudget = 113 * 1024;
constexpr int kMaxStages = 4;

struct StagedShape {
  int d;
  bool residual;
  __host__ __device__ size_t row_bytes() const { return size_t(d) * sizeof(__nv_bfloat16); }  // a multiple of 16
  // dy, h, [dresidual], then 16 bytes for the row's rstd.
  __host__ __device__ size_t stage_bytes() const { return (residual ? 3 : 2) * row_bytes() + 16; }
  // w (bf16 [d]) first, then [warps][stages] stages.
  size_t smem_bytes(int stages) const { return row_bytes() + size_t(kStagedWarps) * stages * stage_bytes(); }
  // The most stages (2 to kMaxStages) that fit the budget; 0 if not even two do.
  int stages() const {
    for (int s = kMaxStages; s >= 2; s--)
      if (smem_bytes(s) <= kStagedSmemBudget) return s;
    return 0;
  }
};

int staged_blocks(int64_t N) { return int(std::min<int64_t>(N, kStagedBlocks)); }

// An asynchronous copy of 16 (or 4) bytes global -> shared.
__device__ __forceinline__ void copy_async(void* dst, const void* src, int bytes) {
  __pipeline_memcpy_async(dst, src, bytes);
}
// Waits until at most `pending` of this thread's committed copy groups are still in flight (0 < pending < 4).
__device__ __forceinline__ void wait_stages(int pending) {
  if (pending >= 3) __pipeline_wait_prior(3);
  else if (pending == 2) __pipeline_wait_prior(2);
  else __pipeline_wait_prior(1);
}

template <int VPT>
__global__ void __launch_bounds__(32 * kStagedWarps, 2)
    rmsnorm_backward_staged_kernel(__nv_bfloat16* dh, float* dw_partial, const __nv_bfloat16* dy,
                                   const __nv_bfloat16* dresidual, const __nv_bfloat16* h, const float* rstd,
                                   const __nv_bfloat16* w, int64_t N, int d, int stages) {
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, chunks = d / kVec;
  const StagedShape shape{d, dresidual != nullptr};
  const size_t row_bytes = shape.row_bytes(), stage_bytes = shape.stage_bytes();
  char* const base = reinterpret_cast<char*>(smem);
  const __nv_bfloat16* w_s = reinterpret_cast<const __nv_bfloat16*>(base);
  char* const mine = base + row_bytes + size_t(warp) * stages * stage_bytes;
  for (int i = threadIdx.x; i < chunks; i += blockDim.x)
    reinterpret_cast<uint4*>(base)[i] = reinterpret_cast<const uint4*>(w)[i];
  __syncthreads();

  const int64_t b0 = int64_t(blockIdx.x) * N / gridDim.x, b1 = int64_t(blockIdx.x + 1) * N / gridDim.x;
  const int64_t r0 = b0 + (b1 - b0) * warp / kStagedWarps, r1 = b0 + (b1 - b0) * (warp + 1) / kStagedWarps;
  const int count = int(r1 - r0);
  auto stage = [&](int j) { return mine + size_t(j % stages) * stage_bytes; };
  auto issue = [&](int j) {  // row r0 + j into its stage; always commits (an empty group past the end)
    if (j < count) {
      const int64_t offset = (r0 + j) * d;
      char* st = stage(j);
#pragma unroll
      for (int k = 0; k < VPT; k++) {
        const int i = lane + 32 * k;
        if (i >= chunks) continue;
        copy_async(st + 16 * i, dy + offset + kVec * i, 16);
        copy_async(st + row_bytes + 16 * i, h + offset + kVec * i, 16);
        if (dresidual) copy_async(st + 2 * row_bytes + 16 * i, dresidual + offset + kVec * i, 16);
      }
      if (lane == 0) copy_async(st + stage_bytes - 16, rstd + r0 + j, 4);
    }
    __pipeline_commit();
  };

  float dw_acc[VPT][kVec];
#pragma unroll
  for (int k = 0; k < VPT; k++)
#pragma unroll
    for (int e = 0; e < kVec; e++) dw_acc[k][e] = 0.f;

  for (int j = 0; j < stages - 1; j++) issue(j);
  for (int j = 0; j < count; j++) {
    issue(j + stages - 1);     // into the stage row j - 1 used: this lane has read its chunks of it
    wait_stages(stages - 1);   // this lane's copies of row j have landed
    const char* st = stage(j);
    const uint4* g_s = reinterpret_cast<const uint4*>(st);
    const uint4* h_s = reinterpret_cast<const uint4*>(st + row_bytes);
    const uint4* res_s = reinterpret_cast<const uint4*>(st + 2 * row_bytes);
    const float rs = __shfl_sync(0xffffffffu, lane == 0 ? *reinterpret_cast<const float*>(st + stage_bytes - 16) : 0.f, 0);
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
      const int i = lane + 32 * k;
      if (i >= chunks) continue;
      PackedBf16<kVec> gp, hp, wp;
      gp.raw = g_s[i], hp.raw = h_s[i], wp.raw = reinterpret_cast<const uint4*>(w_s)[i];
      float gv[kVec], hf[kVec], wv[kVec];
      unpack(gv, gp), unpack(hf, hp), unpack(wv, wp);
#pragma unroll
      for (int e = 0; e < kVec; e++) dot += wv[e] * gv[e] * hf[e];
    }
    const float c = rs * rs * rs * warp_sum(dot) / float(d);
    const int64_t offset = (r0 + j) * d;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
      const int i = lane + 32 * k;
      if (i >= chunks) continue;
      PackedBf16<kVec> gp, hp, wp;
      gp.raw = g_s[i], hp.raw = h_s[i], wp.raw = reinterpret_cast<const uint4*>(w_s)[i];
      float gv[kVec], hf[kVec], wv[kVec], out[kVec];
      unpack(gv, gp), unpack(hf, hp), unpack(wv, wp);
      if (dresidual) {
        PackedBf16<kVec> rp;
        rp.raw = res_s[i];
        unpack(out, rp);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; e++) out[e] = 0.f;
      }
#pragma unroll
      for (int e = 0; e < kVec; e++) {
        out[e] += rs * wv[e] * gv[e] - hf[e] * c;
        dw_acc[k][e] += gv[e] * hf[e] * rs;
      }
      store_bf16(dh + offset + kVec * i, out);
    }
  }
  if (!dw_partial) return;  // the same for the whole block
  __pipeline_wait_prior(0);  // (only empty groups remain)
  __syncwarp();              // every lane of the warp is done with its stages: reuse them for the dw row
  float* dw_row = reinterpret_cast<float*>(mine);
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int i = lane + 32 * k;
    if (i < chunks) store_f32(dw_row + kVec * i, dw_acc[k]);
  }
  __syncthreads();
  for (int col = threadIdx.x; col < d; col += blockDim.x) {
    float total = 0.f;
#pragma unroll
    for (int r = 0; r < kStagedWarps; r++)
      total += reinterpret_cast<const float*>(base + row_bytes + size_t(r) * stages * stage_bytes)[col];
    dw_partial[int64_t(blockIdx.x) * d + col] = total;
  }
}

// The largest dynamic shared memory a block may opt into on the current device.
size_t max_block_smem() {
  int dev = 0, bytes = 0;
  TK_CUDA_CHECK(cudaGetDevice(&dev));
  TK_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return size_t(bytes);
}

bool backward_staged_fits(int d, bool residual) {
  if (ceil_div(ceil_div(d, kVec), 32) > kMaxStagedChunks) return false;
  const StagedShape shape{d, residual};
  const int stages = shape.stages();
  return stages >= 2 && shape.smem_bytes(stages) <= max_block_smem();
}

// Launches the staged backward with exactly the chunks per lane that d needs.
void launch_backward_staged(__nv_bfloat16* dh, float* dw_partial, const __nv_bfloat16* dy,
                            const __nv_bfloat16* dresidual, const __nv_bfloat16* h, const float* rstd,
                            const __nv_bfloat16* w, int64_t N, int d, cudaStream_t s) {
  const StagedShape shape{d, dresidual != nullptr};
  const int stages = shape.stages();
  const size_t smem = shape.smem_bytes(stages);
  auto launch = [&](auto vpt) {
    constexpr int VPT = decltype(vpt)::value;
    auto kernel = rmsnorm_backward_staged_kernel<VPT>;
    if (smem > 48 * 1024) {  // above the default limit a kernel must opt in; and room for two blocks an SM
      TK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      TK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
    }
    kernel<<<staged_blocks(N), 32 * kStagedWarps, smem, s>>>(dh, dw_partial, dy, dresidual, h, rstd, w, N, d,
                                                               stages);
    TK_CUDA_CHECK_LAUNCH();
  };
  switch (ceil_div(ceil_div(d, kVec), 32)) {
    case 1: return launch(std::integral_constant<int, 1>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    case 3: return launch(std::integral_constant<int, 3>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 5:
    case 6: return launch(std::integral_constant<int, 6>{});
    default: return launch(std::integral_constant<int, 8>{});
  }
}

bool backward_regs_fits(int d) { return ceil_div(ceil_div(d, kVec), 32) <= kRegsMaxChunks; }

// One block an SM (at most kStagedBlocks, so that the partials fit rmsnorm_backward_scratch_bytes), with
// exactly the chunks per lane that d needs.
int regs_blocks(int64_t N) {
  return int(std::min<int64_t>({int64_t(sm_count()), int64_t(kStagedBlocks), ceil_div(N, kRegsWarps)}));
}

void launch_backward_regs(__nv_bfloat16* dh, float* dw_partial, const __nv_bfloat16* dy,
                          const __nv_bfloat16* dresidual, const __nv_bfloat16* h, const float* rstd,
                          const __nv_bfloat16* w, int64_t N, int d, int blocks, cudaStream_t s) {
  const size_t smem = size_t(kRegsWarps) * size_t(d) * sizeof(float);  // <= 32 KB: no opt-in
  auto launch = [&](auto vpt) {
    constexpr int VPT = decltype(vpt)::value;
    rmsnorm_backward_regs_kernel<VPT><<<blocks, 32 * kRegsWarps, smem, s>>>(dh, dw_partial, dy, dresidual, h, rstd, w,
                                                                           N, d);
    TK_CUDA_CHECK_LAUNCH();
  };
  switch (ceil_div(ceil_div(d, kVec), 32)) {
    case 1: return launch(std::integral_constant<int, 1>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    case 3: return launch(std::integral_constant<int, 3>{});
    default: return launch(std::integral_constant<int, 4>{});
  }
}

// ---- forward, general path (any d, unaligned pointers), and the backward: one block per row -------------

// One block normalises rows [blockIdx.x * R, +R), R = kRowsTimesChunks / CPT.
// With kResidual, the row is h = round_bf16(h_in + x), written to h_out, and normalised as rounded.
template <int V, int CPT, bool kResidual>
__global__ void __launch_bounds__(kMaxThreads)
    rmsnorm_forward_kernel(__nv_bfloat16* h_out, __nv_bfloat16* y, float* rstd, const __nv_bfloat16* h_in,
                           const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t N, int d, float eps) {
  constexpr int R = kRowsTimesChunks / CPT;
  __shared__ float smem[R * 32];
  const int64_t row0 = int64_t(blockIdx.x) * R;
  float v[R][CPT][V], ss[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    ss[r] = 0.f;
    const int64_t row = row0 + r;
#pragma unroll
    for (int j = 0; j < CPT; j++) {
      const int col = (threadIdx.x + j * blockDim.x) * V;
      if (row >= N || col >= d) continue;
      load_bf16(v[r][j], x + row * d + col);
      if constexpr (kResidual) {
        float a[V];
        load_bf16(a, h_in + row * d + col);
#pragma unroll
        for (int k = 0; k < V; k++) v[r][j][k] += a[k];
        round_to_bf16(v[r][j]);
        store_bf16(h_out + row * d + col, v[r][j]);
      }
#pragma unroll
      for (int k = 0; k < V; k++) ss[r] += v[r][j][k] * v[r][j][k];
    }
  }
  block_sum(ss, smem);
#pragma unroll
  for (int j = 0; j < CPT; j++) {
    const int col = (threadIdx.x + j * blockDim.x) * V;
    if (col >= d) continue;
    float wv[V];
    load_bf16(wv, w + col);
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int64_t row = row0 + r;
      if (row >= N) continue;
      const float rs = 1.f / sqrtf(ss[r] / float(d) + eps);
      float out[V];
#pragma unroll
      for (int k = 0; k < V; k++) out[k] = v[r][j][k] * rs * wv[k];
      store_bf16(y + row * d + col, out);
    }
  }
  if (threadIdx.x == 0) {
#pragma unroll
    for (int r = 0; r < R; r++)
      if (row0 + r < N) rstd[row0 + r] = 1.f / sqrtf(ss[r] / float(d) + eps);
  }
}

// One block runs the backward of rows [blockIdx.x * rows_per_block, +rows_per_block), R at a time:
//   dh = rstd * w * dy - h * rstd^3 * mean(w * dy * h) (+ dresidual)
// and leaves its rows' sum of dy * h * rstd per column in dw_partial[blockIdx.x, :] (when non-null).
template <int V, int CPT>
__global__ void __launch_bounds__(kMaxThreads)
    rmsnorm_backward_kernel(__nv_bfloat16* dh, float* dw_partial, const __nv_bfloat16* dy,
                            const __nv_bfloat16* dresidual, const __nv_bfloat16* h, const float* rstd,
                            const __nv_bfloat16* w, int64_t N, int d, int rows_per_block) {
  constexpr int R = kRowsTimesChunks / CPT;
  __shared__ float smem[2][R * 32];  // alternate per step: block_sum's buffer must not be reused too early
  float wv[CPT][V], dw_acc[CPT][V];
#pragma unroll
  for (int j = 0; j < CPT; j++) {
    const int col = (threadIdx.x + j * blockDim.x) * V;
#pragma unroll
    for (int k = 0; k < V; k++) wv[j][k] = dw_acc[j][k] = 0.f;
    if (col < d) load_bf16(wv[j], w + col);
  }
  const int64_t first = int64_t(blockIdx.x) * rows_per_block;
  const int64_t last = std::min<int64_t>(N, first + rows_per_block);
  for (int64_t row0 = first, step = 0; row0 < last; row0 += R, step++) {
    // Rows stay packed in registers between the two passes (R rows x 3 tensors in flight at once).
    PackedBf16<V> g[R][CPT], hv[R][CPT], res[R][CPT];
    float dot[R], rs[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int64_t row = row0 + r;
      dot[r] = 0.f;
      rs[r] = row < last ? rstd[row] : 0.f;
#pragma unroll
      for (int j = 0; j < CPT; j++) {
        const int col = (threadIdx.x + j * blockDim.x) * V;
        if (row >= last || col >= d) continue;
        load_packed(g[r][j], dy + row * d + col);
        load_packed(hv[r][j], h + row * d + col);
        if (dresidual) load_packed(res[r][j], dresidual + row * d + col);
      }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
      for (int j = 0; j < CPT; j++) {
        const int col = (threadIdx.x + j * blockDim.x) * V;
        if (row0 + r >= last || col >= d) continue;
        float gv[V], hf[V];
        unpack(gv, g[r][j]);
        unpack(hf, hv[r][j]);
#pragma unroll
        for (int k = 0; k < V; k++) dot[r] += wv[j][k] * gv[k] * hf[k];
      }
    }
    block_sum(dot, smem[step & 1]);
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int64_t row = row0 + r;
      const float c = rs[r] * rs[r] * rs[r] * dot[r] / float(d);
#pragma unroll
      for (int j = 0; j < CPT; j++) {
        const int col = (threadIdx.x + j * blockDim.x) * V;
        if (row >= last || col >= d) continue;
        float gv[V], hf[V], out[V];
        unpack(gv, g[r][j]);
        unpack(hf, hv[r][j]);
        if (dresidual) {
          unpack(out, res[r][j]);
        } else {
#pragma unroll
          for (int k = 0; k < V; k++) out[k] = 0.f;
        }
#pragma unroll
        for (int k = 0; k < V; k++) {
          out[k] += rs[r] * wv[j][k] * gv[k] - hf[k] * c;
          dw_acc[j][k] += gv[k] * hf[k] * rs[r];
        }
        store_bf16(dh + row * d + col, out);
      }
    }
  }
  if (!dw_partial) return;
#pragma unroll
  for (int j = 0; j < CPT; j++) {
    const int col = (threadIdx.x + j * blockDim.x) * V;
    if (col < d) store_f32(dw_partial + int64_t(blockIdx.x) * d + col, dw_acc[j]);
  }
}

// Instantiates a kernel template for the (V, CPT) a tiling chose and launches it.
template <template <int, int> class Launch, class... Args>
void dispatch_tiling(const ColumnTiling& t, Args&&... args) {
  if (t.vec == kVec) {
    if (t.cpt == 1) return Launch<kVec, 1>::run(t, args...);
    if (t.cpt == 2) return Launch<kVec, 2>::run(t, args...);
    return Launch<kVec, 4>::run(t, args...);
  }
  if (t.cpt == 1) return Launch<1, 1>::run(t, args...);
  if (t.cpt == 2) return Launch<1, 2>::run(t, args...);
  return Launch<1, 4>::run(t, args...);
}

template <int V, int CPT>
struct LaunchForward {
  static void run(const ColumnTiling& t, __nv_bfloat16* h_out, __nv_bfloat16* y, float* rstd,
                  const __nv_bfloat16* h_in, const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t N, int d,
                  float eps, cudaStream_t s) {
    const int64_t blocks = ceil_div(N, t.rows_per_step());
    if (h_in)
      rmsnorm_forward_kernel<V, CPT, true><<<blocks, t.threads, 0, s>>>(h_out, y, rstd, h_in, x, w, N, d, eps);
    else
      rmsnorm_forward_kernel<V, CPT, false><<<blocks, t.threads, 0, s>>>(h_out, y, rstd, h_in, x, w, N, d, eps);
    TK_CUDA_CHECK_LAUNCH();
  }
};

template <int V, int CPT>
struct LaunchBackward {
  static void run(const ColumnTiling& t, const BackwardGrid& grid, __nv_bfloat16* dh, float* dw_partial,
                  const __nv_bfloat16* dy, const __nv_bfloat16* dresidual, const __nv_bfloat16* h,
                  const float* rstd, const __nv_bfloat16* w, int64_t N, int d, cudaStream_t s) {
    rmsnorm_backward_kernel<V, CPT><<<grid.blocks, t.threads, 0, s>>>(dh, dw_partial, dy, dresidual, h, rstd, w, N,
                                                                       d, grid.rows_per_block);
    TK_CUDA_CHECK_LAUNCH();
  }
};

}  // namespace

void rmsnorm_forward(bf16* y, float* rstd, const bf16* x, const bf16* w, int64_t N, int d, float eps,
                     cudaStream_t s) {
  if (N == 0) return;
  const bool vectorised = vectorisable(d, {y, x, w});
  if (vectorised && launch_forward_warp(nullptr, y, rstd, nullptr, x, w, N, d, eps, s)) return;
  TK_CUDA_REQUIRE(y, "rmsnorm_forward: without y only rows of d %% 8 == 0, d <= %d, aligned, are supported (d = %d)",
                  32 * kVec * kMaxWarpChunks, d);
  const ColumnTiling t = column_tiling(d, vectorised);
  dispatch_tiling<LaunchForward>(t, nullptr, y, rstd, nullptr, x, w, N, d, eps, s);
}

void residual_rmsnorm_forward(bf16* h_out, bf16* y, float* rstd, const bf16* h_in, const bf16* x, const bf16* w,
                              int64_t N, int d, float eps, cudaStream_t s) {
  if (N == 0) return;
  const bool vectorised = vectorisable(d, {h_out, y, h_in, x, w});
  if (vectorised && launch_forward_warp(h_out, y, rstd, h_in, x, w, N, d, eps, s)) return;
  TK_CUDA_REQUIRE(y, "residual_rmsnorm_forward: without y only rows of d %% 8 == 0, d <= %d, aligned, are supported "
                  "(d = %d)", 32 * kVec * kMaxWarpChunks, d);
  const ColumnTiling t = column_tiling(d, vectorised);
  dispatch_tiling<LaunchForward>(t, h_out, y, rstd, h_in, x, w, N, d, eps, s);
}

size_t rmsnorm_backward_scratch_bytes(int64_t N, int d) {
  // Enough for either path. The general path's grid depends on the tiling only through rows_per_step;
  // size for the smallest (most blocks).
  const int blocks = std::max(backward_grid(N, 1).blocks, staged_blocks(N));
  return size_t(blocks) * size_t(d) * sizeof(float);
}

void rmsnorm_backward(bf16* dh, float* dw, const bf16* dy, const bf16* dresidual, const bf16* h, const float* rstd,
                      const bf16* w, int64_t N, int d, void* scratch, size_t scratch_bytes, cudaStream_t s) {
  if (N == 0) return;
  const bool vectorised = vectorisable(d, {dh, dy, dresidual, h, w, scratch});
  const bool regs = vectorised && backward_regs_fits(d);
  const bool staged = vectorised && !regs && backward_staged_fits(d, dresidual != nullptr);
  const ColumnTiling t = column_tiling(d, vectorised);
  const BackwardGrid grid = regs     ? BackwardGrid{0, regs_blocks(N)}
                            : staged ? BackwardGrid{0, staged_blocks(N)}
                                     : backward_grid(N, t.rows_per_step());
  float* partial = dw ? static_cast<float*>(scratch) : nullptr;
  TK_CUDA_REQUIRE(!dw || scratch_bytes >= size_t(grid.blocks) * size_t(d) * sizeof(float),
                  "rmsnorm_backward: the scratch buffer holds %zu bytes, %zu are needed", scratch_bytes,
                  size_t(grid.blocks) * size_t(d) * sizeof(float));
  if (regs) launch_backward_regs(dh, partial, dy, dresidual, h, rstd, w, N, d, grid.blocks, s);
  else if (staged) launch_backward_staged(dh, partial, dy, dresidual, h, rstd, w, N, d, s);
  else dispatch_tiling<LaunchBackward>(t, grid, dh, partial, dy, dresidual, h, rstd, w, N, d, s);
  if (!dw) return;
  // The second pass: 32 x 32 threads per 32 columns, so that a few hundred partial rows take two rounds of loads.
  constexpr int kRows = 32;
  column_reduce_kernel<kRows><<<ceil_div(d, 32), dim3(32, kRows), 0, s>>>(dw, partial, grid.blocks, d, d);
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
