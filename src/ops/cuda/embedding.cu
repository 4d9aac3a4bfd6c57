// Token embedding: the forward gathers table rows (a warp gathers a few rows at once); the backward adds dout rows
// into the f32 table gradient deterministically, without floating-point atomics: the token ids are stably sorted
// by a one-launch counting sort (so each id's rows appear in token order; wide blocks up to 65,536 tokens), tiles
// of sorted positions sum their runs of equal ids, and runs that cross tiles are joined in tile order, by the last
// of their pieces to arrive (one launch; a second join pass for the scalar fallback).
#include <algorithm>
#include <type_traits>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;          // sorted positions per tile of the backward
constexpr int kBatch = 8;          // positions whose rows are loaded together
constexpr uint32_t kNoKey = ~0u;   // beyond the ends of the sorted ids; no token id equals it
// The backward's one-launch form: a warp per (tile, slice of kSliceCols columns), kSliceV columns a lane.
constexpr int kSliceV = 4;
constexpr int kSliceCols = 32 * kSliceV;
constexpr int kSliceWarps = 4;      // warps a block (independent: no block-wide barrier)
constexpr int kSliceMinBlocks = 7;  // 28 warps an SM: 72 registers, one wave at d = 896, N = 16,384

// ---- forward ----------------------------------------------------------------------------------------
// A warp gathers K rows: the K ids are read by K lanes at once and shuffled to all, then every chunk of
// the K rows (U chunks of V columns a lane and row) is loaded before any is stored. U * K = 16 chunks a
// lane: 64 registers of loads in flight. Rows wider than 32 U chunks take several passes.
constexpr int kForwardWarps = 8;
constexpr int kForwardChunks = 16;

template <int V, int U>
__global__ void __launch_bounds__(32 * kForwardWarps)
    embedding_forward_kernel(__nv_bfloat16* out, const int32_t* tokens, const __nv_bfloat16* table, int64_t N,
                             int d) {
  constexpr int K = kForwardChunks / U;
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (int64_t(blockIdx.x) * kForwardWarps + threadIdx.x / 32) * K;
  if (n0 >= N) return;  // a whole warp
  const int32_t my_id = lane < K && n0 + lane < N ? tokens[n0 + lane] : 0;
  int64_t src[K];
#pragma unroll
  for (int k = 0; k < K; k++) src[k] = int64_t(__shfl_sync(0xffffffffu, my_id, k)) * d;
  for (int c0 = lane * V; c0 < d; c0 += 32 * V * U) {
    PackedBf16<V> v[K][U];
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
      for (int u = 0; u < U; u++)
        if (n0 + k < N && c0 + u * 32 * V < d) load_packed(v[k][u], table + src[k] + c0 + u * 32 * V);
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
      for (int u = 0; u < U; u++)
        if (n0 + k < N && c0 + u * 32 * V < d) store_packed(out + (n0 + k) * d + c0 + u * 32 * V, v[k][u]);
  }
}

// ---- the stable counting sort of the ids (one launch) -------------------------------------------------
// Block b owns ids [kSortIds b, kSortIds (b + 1)); each of its warps owns one contiguous segment of the
// tokens. Pass 1 counts the block's ids per warp (shared-memory integer atomics: exact in any order) and
// the tokens with smaller ids (where the block's output begins). Then each (id, warp) gets its first output
// position, in (id, warp) order. Pass 2 walks each warp's segment in token order, 32 tokens at a time,
// ranking equal ids among them by __match_any_sync: every id's tokens land in token order. Every block
// reads all N ids twice (from L2 after the first); ids outside [0, V) are placed nowhere, and the last
// block fills the positions they leave at the end with kNoKey.
constexpr int kSortIds = 512;
constexpr int kSortWarps = kSortIds / 32;  // a thread per id in the scan
constexpr int kSortBatch = 8;              // ids a lane loads before using any

// Exclusive prefix sum of x over the block's kWarps warps in thread order; total = the block's sum.
template <int kWarps>
__device__ int32_t block_exclusive_scan(int32_t x, int32_t* warp_sums, int32_t& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int32_t inc = x;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t y = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += y;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int32_t w = lane < kWarps ? warp_sums[lane] : 0, wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t y = __shfl_up_sync(0xffffffffu, wi, o);
      if (lane >= o) wi += y;
    }
    if (lane < kWarps) warp_sums[lane] = wi - w;  // exclusive
    if (lane == kWarps - 1) warp_sums[kWarps] = wi;
  }
  __syncthreads();
  total = warp_sums[kWarps];
  const int32_t out = warp_sums[warp] + inc - x;
  __syncthreads();  // warp_sums may be reused
  return out;
}

// zero[n_zero]: set to 0 on the way (the backward's arrival counters, for the launch after this one).
__device__ __forceinline__ void zero_words(unsigned long long* zero, int64_t n_zero) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_zero; i += int64_t(gridDim.x) * blockDim.x)
    zero[i] = 0ull;
}

__global__ void __launch_bounds__(32 * kSortWarps)
    sort_ids_kernel(uint32_t* keys, int32_t* rows, const int32_t* tokens, int64_t N, uint32_t V,
                    unsigned long long* zero, int64_t n_zero) {
  zero_words(zero, n_zero);
  __shared__ int32_t pos[kSortWarps][kSortIds];  // counts, then each (warp, id)'s next output position
  __shared__ int32_t warp_sums[kSortWarps + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t lo = blockIdx.x * uint32_t(kSortIds), hi = min(lo + uint32_t(kSortIds), V);
  for (int i = threadIdx.x; i < kSortWarps * kSortIds; i += blockDim.x) (&pos[0][0])[i] = 0;
  __syncthreads();
  const int64_t seg = ((N + kSortWarps - 1) / kSortWarps + 31) / 32 * 32;
  const int64_t begin = warp * seg, end = begin + seg < N ? begin + seg : N;

  int32_t below = 0;  // tokens of this lane with an id under lo
  for (int64_t p0 = begin; p0 < end; p0 += 32 * kSortBatch) {
    uint32_t x[kSortBatch];
#pragma unroll
    for (int k = 0; k < kSortBatch; k++) {
      const int64_t p = p0 + k * 32 + lane;
      x[k] = p < end ? uint32_t(tokens[p]) : kNoKey;
    }
#pragma unroll
    for (int k = 0; k < kSortBatch; k++) {
      if (x[k] < lo) below++;
      else if (x[k] < hi) atomicAdd(&pos[warp][x[k] - lo], 1);
    }
  }
  int32_t base;
  block_exclusive_scan<kSortWarps>(below, warp_sums, base);  // base: all tokens with an id under lo

  // Thread r: id lo + r. Its count per warp becomes a running start; then the scan over ids.
  const int r = threadIdx.x;
  int32_t run = 0;
#pragma unroll
  for (int w = 0; w < kSortWarps; w++) {
    const int32_t c = pos[w][r];
    pos[w][r] = run;
    run += c;
  }
  int32_t block_total;
  const int32_t first = base + block_exclusive_scan<kSortWarps>(run, warp_sums, block_total);
#pragma unroll
  for (int w = 0; w < kSortWarps; w++) pos[w][r] += first;
  __syncthreads();

  for (int64_t p0 = begin; p0 < end; p0 += 32 * kSortBatch) {
    uint32_t x[kSortBatch];
#pragma unroll
    for (int k = 0; k < kSortBatch; k++) {
      const int64_t p = p0 + k * 32 + lane;
      x[k] = p < end ? uint32_t(tokens[p]) : kNoKey;
    }
#pragma unroll
    for (int k = 0; k < kSortBatch; k++) {
      const bool mine = x[k] >= lo && x[k] < hi;
      // Most groups of 32 tokens hold none of the block's ids (1 in V / kSortIds of them, for uniform ids):
      // skip those whole. In the others, lanes with other ids share one key (ids are < 2^31) that no id of
      // the block's equals: __match_any_sync's cost grows with the distinct keys, so they stay few.
      if (__ballot_sync(0xffffffffu, mine) == 0u) continue;
      const uint32_t peers = __match_any_sync(0xffffffffu, mine ? x[k] : 0x80000000u);
      int32_t slot = 0;
      if (mine) {
        slot = pos[warp][x[k] - lo] + __popc(peers & ((1u << lane) - 1u));
        keys[slot] = x[k];
        rows[slot] = int32_t(p0 + k * 32 + lane);
      }
      __syncwarp();
      if (mine && lane == 31 - __clz(peers)) pos[warp][x[k] - lo] = slot + 1;  // the last of the equal ids
      __syncwarp();
    }
  }

  if (hi == V) {  // the last block: the ends of the sorted ids, past every valid one
    for (int64_t p = base + block_total + threadIdx.x; p < N; p += blockDim.x) keys[p] = kNoKey, rows[p] = 0;
  }
}

// ---- the same sort in wide blocks (N <= 65,536: every training micro-batch) ----------------------------
// The counting sort above with four times the ids a block (kWideIds: V / 2048 = 75 blocks at V = 151,936, one
// an SM, 1,024 threads) so that the ids are read from L2 once an SM instead of 2-3 times, and with each warp's
// whole segment loaded in one batch (kWideBatch ids a lane: every N <= 16,384) and kept in registers for the
// placing pass. The per-(warp, id) counts are 16-bit, two to a word (128 KB of dynamic shared memory): a
// warp's count of one id and every running offset read in the placing pass are below N <= 65,536 (an offset
// that reaches 65,536 wraps only after its last read). Bit for bit the output of sort_ids_kernel; 10.6 against
// 15.7 us at N = 16,384, V = 151,936 on an H200 (bench/history/2026-11-30-day4.md).
constexpr int kWideIds = 2048;
constexpr int kWideWarps = kWideIds / 64;  // a thread per two ids in the scan: one 32-bit word of counts a warp
constexpr int kWideBatch = (16384 + 32 * kWideWarps - 1) / (32 * kWideWarps);
constexpr int64_t kWideMaxN = 65536;
constexpr size_t kWideCountBytes = size_t(kWideWarps) * kWideIds * sizeof(uint16_t);
constexpr size_t kWideSmemBytes = kWideCountBytes + size_t(kWideIds) * sizeof(int32_t);  // + each id's start

__device__ __forceinline__ void load_ids(uint32_t (&x)[kWideBatch], const int32_t* tokens, int p0, int end,
                                         int lane) {
#pragma unroll
  for (int k = 0; k < kWideBatch; k++) {
    const int p = p0 + k * 32 + lane;
    x[k] = p < end ? uint32_t(tokens[p]) : kNoKey;
  }
}

__global__ void __launch_bounds__(32 * kWideWarps, 1)
    sort_ids_wide_kernel(uint32_t* keys, int32_t* rows, const int32_t* tokens, int N, uint32_t V,
                         unsigned long long* zero, int64_t n_zero) {
  zero_words(zero, n_zero);
  extern __shared__ __align__(16) unsigned char wide_smem[];
  uint32_t* count_words = reinterpret_cast<uint32_t*>(wide_smem);  // [warps][kWideIds / 2]: two counts a word
  uint16_t* counts = reinterpret_cast<uint16_t*>(wide_smem);       // the same, [warps][kWideIds]
  int32_t* first = reinterpret_cast<int32_t*>(wide_smem + kWideCountBytes);  // [kWideIds]
  __shared__ int32_t warp_sums[kWideWarps + 1];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const uint32_t lo = blockIdx.x * uint32_t(kWideIds), hi = min(lo + uint32_t(kWideIds), V);
  const int seg = ((N + kWideWarps - 1) / kWideWarps + 31) / 32 * 32;
  const int begin = min(warp * seg, N), end = min(begin + seg, N);
  const bool resident = seg <= 32 * kWideBatch;  // one batch a warp: pass 2 reads no id again

  // Pass 1: the first batch's loads go out, and the counts are zeroed while they are in flight.
  uint32_t x[kWideBatch];
#pragma unroll
  for (int k = 0; k < kWideBatch; k++) x[k] = kNoKey;
  if (begin < end) load_ids(x, tokens, begin, end, lane);
  for (int i = t; i < int(kWideCountBytes / 16); i += blockDim.x)
    reinterpret_cast<uint4*>(wide_smem)[i] = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();
  int32_t below = 0;  // this lane's ids under lo
  for (int p0 = begin; p0 < end; p0 += 32 * kWideBatch) {
    if (p0 != begin) load_ids(x, tokens, p0, end, lane);
#pragma unroll
    for (int k = 0; k < kWideBatch; k++) {
      below += x[k] < lo;
      if (x[k] >= lo && x[k] < hi) {  // the 16-bit half of its word: an add that never carries (kWideMaxN)
        const uint32_t local = x[k] - lo;
        atomicAdd(&count_words[warp * (kWideIds / 2) + (local >> 1)], 1u << (16 * (local & 1u)));
      }
    }
  }
  int32_t base;  // all tokens with an id under lo: where the block's output begins
  block_exclusive_scan<kWideWarps>(below, warp_sums, base);  // (its barriers also complete the counts)

  // Thread t: ids 2t and 2t + 1. Their counts per warp become running offsets in warp order, then the scan
  // over ids gives each id its first position.
  uint32_t run0 = 0, run1 = 0;
#pragma unroll 8
  for (int w = 0; w < kWideWarps; w++) {
    const uint32_t c = count_words[w * (kWideIds / 2) + t];
    count_words[w * (kWideIds / 2) + t] = (run0 & 0xffffu) | (run1 << 16);
    run0 += c & 0xffffu;
    run1 += c >> 16;
  }
  int32_t block_total;
  const int32_t f = base + block_exclusive_scan<kWideWarps>(int32_t(run0 + run1), warp_sums, block_total);
  first[2 * t] = f;
  first[2 * t + 1] = f + int32_t(run0);
  __syncthreads();

  // Pass 2: as sort_ids_kernel's, each warp through its segment in token order, 32 ids at a time.
  for (int p0 = begin; p0 < end; p0 += 32 * kWideBatch) {
    if (!resident) load_ids(x, tokens, p0, end, lane);
#pragma unroll
    for (int k = 0; k < kWideBatch; k++) {
      const bool mine = x[k] >= lo && x[k] < hi;
      if (__ballot_sync(0xffffffffu, mine) == 0u) continue;
      const uint32_t peers = __match_any_sync(0xffffffffu, mine ? x[k] : 0x80000000u);
      const uint32_t local = mine ? x[k] - lo : 0u;
      uint32_t r = 0;  // this token's rank among the id's tokens
      if (mine) {
        r = uint32_t(counts[warp * kWideIds + local]) + __popc(peers & ((1u << lane) - 1u));
        const int32_t slot = first[local] + int32_t(r);
        keys[slot] = x[k];
        rows[slot] = p0 + k * 32 + lane;
      }
      __syncwarp();
      if (mine && lane == 31 - __clz(peers)) counts[warp * kWideIds + local] = uint16_t(r + 1);  // the last
      __syncwarp();
    }
  }
  if (hi == V)  // the last block: the ends of the sorted ids, past every valid one
    for (int p = base + block_total + t; p < N; p += blockDim.x) keys[p] = kNoKey, rows[p] = 0;
}

// The backward's scratch, carved from one buffer: the sorted ids with their token indices, two partial
// sums per tile (slot 0: the piece of a run that began in an earlier tile; slot 1: the piece of a run that
// begins here and continues in the next tile), and an arrival counter per (tile, slice of columns) for the
// one-launch join (zeroed by the sort, one launch earlier).
struct BackwardScratch {
  uint32_t* keys;    // sorted ids [N], kNoKey past the valid ones
  int32_t* rows;     // token index of each sorted id [N]
  float* partial;    // [tiles, 2, d]
  unsigned long long* arrivals;  // [tiles, slices]
  int64_t n_arrivals;
  size_t total_bytes;
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

BackwardScratch carve_scratch(void* base, int64_t N, int d) {
  BackwardScratch s{};
  char* p = static_cast<char*>(base);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    void* at = p ? p + off : nullptr;
    off += align256(bytes);
    return at;
  };
  s.keys = static_cast<uint32_t*>(take(size_t(N) * sizeof(uint32_t)));
  s.rows = static_cast<int32_t*>(take(size_t(N) * sizeof(int32_t)));
  s.partial = static_cast<float*>(take(size_t(ceil_div(N, kTile)) * 2 * size_t(d) * sizeof(float)));
  s.n_arrivals = ceil_div(N, kTile) * ceil_div(d, kSliceCols);
  s.arrivals = static_cast<unsigned long long*>(take(size_t(s.n_arrivals) * sizeof(unsigned long long)));
  s.total_bytes = off;
  return s;
}

// The sorted ids around one tile, in shared memory: key[0] is the id before the tile, key[1 + k] the
// tile's k-th, key[1 + len] the id after it (kNoKey past either end).
struct TileKeys {
  uint32_t key[kTile + 2];
  int32_t row[kTile];
  int len;
  __device__ uint32_t at(int k) const { return key[1 + k]; }
  __device__ bool continues_before() const { return key[0] == key[1]; }
  __device__ bool continues_after() const { return key[len + 1] == key[len]; }
  // Position k closes a run piece when the next id differs or the tile ends.
  __device__ bool closes(int k) const { return k == len - 1 || at(k + 1) != at(k); }
  // The piece closed at k is part of a run that started before the tile (then it sits in slot 0).
  __device__ bool from_before(int k) const { return continues_before() && at(k) == at(0); }
  __device__ bool into_next(int k) const { return k == len - 1 && continues_after(); }
};

__device__ void load_tile_keys(TileKeys& t, const uint32_t* keys, const int32_t* rows, int64_t N) {
  const int64_t start = int64_t(blockIdx.x) * kTile;
  const int len = int(std::min<int64_t>(kTile, N - start));
  if (threadIdx.x == 0) t.len = len;
  for (int k = threadIdx.x; k < kTile + 2; k += blockDim.x) {
    const int64_t i = start - 1 + k;
    t.key[k] = (i >= 0 && i < N && k <= len + 1) ? keys[i] : kNoKey;
    if (k < len) t.row[k] = rows[start + k];
  }
  __syncthreads();
  // Positions past the valid ids (kNoKey, all at the end) are not part of the tile.
  if (threadIdx.x == 0) {
    int valid = len;
    while (valid > 0 && t.key[valid] == kNoKey) valid--;
    t.len = valid;
  }
  __syncthreads();
}

// One block per tile of kTile sorted positions; each thread owns V columns at a time. A run piece that is
// a whole run goes straight into dtable (no other block touches that id); a piece of a longer run goes to
// its tile's partial slot for the join pass.
template <int V>
__global__ void __launch_bounds__(kThreads)
    embedding_backward_tile_kernel(float* dtable, float* partial, const uint32_t* keys, const int32_t* rows,
                                   const __nv_bfloat16* dout, int64_t N, int d) {
  __shared__ TileKeys t;
  load_tile_keys(t, keys, rows, N);
  for (int col = threadIdx.x * V; col < d; col += blockDim.x * V) {
    float acc[V] = {};
    for (int b = 0; b < t.len; b += kBatch) {
      // All loads of the batch first: the rows, and the table rows the complete runs closing here add to
      // (distinct ids, so no store of this batch changes them).
      PackedBf16<V> x[kBatch];
      float old[kBatch][V];
#pragma unroll
      for (int k = 0; k < kBatch; k++) {
        const int i = b + k;
        if (i >= t.len) break;
        load_packed(x[k], dout + int64_t(t.row[i]) * d + col);
        if (t.closes(i) && !t.from_before(i) && !t.into_next(i))
          load_f32(old[k], dtable + int64_t(t.at(i)) * d + col);
      }
#pragma unroll
      for (int k = 0; k < kBatch; k++) {
        const int i = b + k;
        if (i >= t.len) break;
        float xf[V];
        unpack(xf, x[k]);
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] += xf[e];
        if (!t.closes(i)) continue;
        if (t.from_before(i) || t.into_next(i)) {
          const int slot = t.from_before(i) ? 0 : 1;
          store_f32(partial + (int64_t(blockIdx.x) * 2 + slot) * d + col, acc);
        } else {
#pragma unroll
          for (int e = 0; e < V; e++) old[k][e] += acc[e];
          store_f32(dtable + int64_t(t.at(i)) * d + col, old[k]);
        }
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = 0.f;
      }
    }
  }
}

// One block per tile: if a run starts in this tile and continues into the next, add its pieces in tile
// order (slot 1 here, then slot 0 of each following tile the run reaches) and the sum into dtable.
template <int V>
__global__ void __launch_bounds__(kThreads)
    embedding_backward_join_kernel(float* dtable, const float* partial, const uint32_t* keys, int64_t N, int d) {
  const int64_t tile = blockIdx.x, start = tile * kTile, end = std::min<int64_t>(N, start + kTile);
  const uint32_t id = keys[end - 1];
  if (id == kNoKey) return;  // past the valid ids
  const bool into_next = end < N && keys[end] == id;
  const bool whole_tile_from_before = start > 0 && keys[start - 1] == id && keys[start] == id;
  if (!into_next || whole_tile_from_before) return;
  int64_t last_tile = tile + 1;  // the run's last tile
  while (true) {
    const int64_t e = std::min<int64_t>(N, (last_tile + 1) * kTile);
    if (!(e < N && keys[e] == id)) break;
    last_tile++;
  }
  for (int col = threadIdx.x * V; col < d; col += blockDim.x * V) {
    float sum[V], piece[V], old[V];
    load_f32(sum, partial + (tile * 2 + 1) * d + col);
    for (int64_t u = tile + 1; u <= last_tile; u++) {
      load_f32(piece, partial + (u * 2) * d + col);
#pragma unroll
      for (int e = 0; e < V; e++) sum[e] += piece[e];
    }
    load_f32(old, dtable + int64_t(id) * d + col);
#pragma unroll
    for (int e = 0; e < V; e++) old[e] += sum[e];
    store_f32(dtable + int64_t(id) * d + col, old);
  }
}

// ---- the backward in one launch: a warp per (tile, slice) and the join by the last piece to arrive ---------
// Each warp owns one tile of kTile sorted positions and one slice of kSliceCols columns (kSliceV a lane), with
// no block-wide barrier: lane k holds position k's id and token index, the run boundaries are ballot masks, and
// each row's index goes to all lanes by a shuffle; rows are loaded kBatch at a time. A run within the tile goes
// straight into dtable. A run that crosses tiles leaves one piece per tile it touches in partial[tile][slot], as
// the two-pass form does; after its stores (and a fence) each piece's warp adds to the run's arrival counter (per
// (first tile of the run, slice)) 1, and the run's last piece also (number of pieces) << 32. The warp whose add
// completes the count (high half == low half) is the last to arrive: it sums the pieces in tile order (from L2)
// and adds the sum into dtable, exactly as the join pass does: bit for bit the same sums in the same order, so
// nothing depends on which warp joins or when. No warp waits on another. A piece that continues a run from before
// finds the run's first tile with one warp-wide probe of the tiles' last ids (tile v holds part of the run iff
// its last id is the run's: one L2 round trip for runs within 32 tiles, two up to ~1,000).

struct CrossingPieces {
  bool slot0, slot0_last, slot1;
};
// A tile's pieces of runs that cross tiles. first / last: its first and last ids; before / after: whether the
// id before the tile equals first, the one after it equals last. Slot 0 holds the first run's piece when that
// began in an earlier tile (its last piece unless the whole tile is that run and it goes on); slot 1 the last
// run's piece when it goes on into the next tile and began in this one.
__device__ __forceinline__ CrossingPieces crossing_pieces(uint32_t first, uint32_t last, bool before, bool after) {
  const bool one_run = first == last;
  return {before, before && !(one_run && after), after && !(before && one_run)};
}

__device__ __forceinline__ unsigned long long arrival(bool last_piece, int64_t pieces) {
  return 1ull + (last_piece ? (unsigned long long)pieces << 32 : 0ull);
}
__device__ __forceinline__ bool run_complete(unsigned long long c) {
  return (c >> 32) != 0ull && (c >> 32) == (c & 0xffffffffull);
}

// The first tile of the run of `id` that tile u continues from before (keys[kTile u - 1] == id). Tile v < u holds
// part of the run iff keys[kTile v + kTile - 1] == id, so each ballot is a prefix of ones. Warp-collective.
__device__ int64_t first_tile_of_run(const uint32_t* keys, uint32_t id, int64_t u) {
  const int lane = threadIdx.x & 31;
  int64_t top = u - 1;  // holds part of the run
  while (true) {
    const int64_t fine = top - lane, coarse = top - 32 * (lane + 1);
    const bool in_fine = fine >= 0 && keys[fine * kTile + kTile - 1] == id;
    const bool in_coarse = coarse >= 0 && keys[coarse * kTile + kTile - 1] == id;
    const int nf = __popc(__ballot_sync(0xffffffffu, in_fine));  // tiles top .. top - nf + 1 hold part of it
    if (nf < 32) return top - nf + 1;
    const int nc = __popc(__ballot_sync(0xffffffffu, in_coarse));  // top - 32, ..., top - 32 nc hold part of it
    if (nc == 0) return top - 31;
    top -= 32 * int64_t(nc);
  }
}

// The join of the crossing run of `id` over tiles [b, e] at the kSliceV columns from col: slot 1 of b, then slot 0
// of each later tile, in order (loaded four at a time, read through L2: other warps wrote them), then into dtable.
__device__ __forceinline__ void join_slice(float* dtable, const float* partial, uint32_t id, int64_t b, int64_t e,
                                           int d, int col) {
  constexpr int K = 4;
  float sum[kSliceV], old[kSliceV];
  auto load_cg = [](float (&v)[kSliceV], const float* p) {
    const float4 a = __ldcg(reinterpret_cast<const float4*>(p));
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  };
  load_cg(sum, partial + (b * 2 + 1) * d + col);
  load_f32(old, dtable + int64_t(id) * d + col);
  for (int64_t v0 = b + 1; v0 <= e; v0 += K) {
    float piece[K][kSliceV];
#pragma unroll
    for (int k = 0; k < K; k++)
      if (v0 + k <= e) load_cg(piece[k], partial + ((v0 + k) * 2) * d + col);
#pragma unroll
    for (int k = 0; k < K; k++)
      if (v0 + k <= e)
#pragma unroll
        for (int c = 0; c < kSliceV; c++) sum[c] += piece[k][c];
  }
#pragma unroll
  for (int c = 0; c < kSliceV; c++) old[c] += sum[c];
  store_f32(dtable + int64_t(id) * d + col, old);
}

// 32-bit row offsets: the caller checks N d and V d < 2^32. d % kSliceV == 0; dout 8-byte and dtable 16-byte aligned.
__global__ void __launch_bounds__(32 * kSliceWarps, kSliceMinBlocks)
    embedding_backward_slice_kernel(float* dtable, float* partial, unsigned long long* arrivals,
                                    const uint32_t* keys, const int32_t* rows, const __nv_bfloat16* dout, int64_t N,
                                    int d, int n_slices, int64_t items) {
  const int lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kSliceWarps + threadIdx.x / 32;
  if (item >= items) return;  // a whole warp
  const int64_t u = item / n_slices, start = u * kTile;  // the slices of a tile are consecutive warps
  const int s = int(item % n_slices);
  const int col = s * kSliceCols + lane * kSliceV;
  const bool cols_ok = col < d;

  // Lane k: position start + k (kNoKey past N); the ids just before and after the tile.
  const int64_t p = start + lane;
  const uint32_t key = p < N ? keys[p] : kNoKey;
  const int32_t row = p < N ? rows[p] : 0;
  uint32_t edge = kNoKey;
  if (lane == 0 && start > 0) edge = keys[start - 1];
  if (lane == 31 && start + kTile < N) edge = keys[start + kTile];
  const uint32_t before = __shfl_sync(0xffffffffu, edge, 0), after = __shfl_sync(0xffffffffu, edge, 31);
  const int len = __popc(__ballot_sync(0xffffffffu, key != kNoKey));  // kNoKey only at the end: a prefix
  if (len == 0) return;
  uint32_t next = __shfl_down_sync(0xffffffffu, key, 1);
  if (lane == 31) next = after;
  const uint32_t first = __shfl_sync(0xffffffffu, key, 0), last = __shfl_sync(0xffffffffu, key, len - 1);
  const bool cont_before = before == first, cont_after = len == kTile && after == last;
  // Bit i: position i closes a run piece / belongs to the run from before / hands its piece to the next tile.
  const uint32_t closes = __ballot_sync(0xffffffffu, lane < len && (lane == len - 1 || next != key));
  const uint32_t from_before = cont_before ? __ballot_sync(0xffffffffu, lane < len && key == first) : 0u;
  const uint32_t into_next = cont_after ? 1u << (len - 1) : 0u;
  const uint32_t whole = closes & ~from_before & ~into_next;  // closes a whole run: straight into dtable
  const CrossingPieces cp = crossing_pieces(first, last, cont_before, cont_after);
  if (cols_ok) {  // into L2 for the joiner, whichever warp it is
    if (cp.slot0) asm volatile("prefetch.global.L2 [%0];" ::"l"(dtable + int64_t(first) * d + col));
    if (cp.slot1) asm volatile("prefetch.global.L2 [%0];" ::"l"(dtable + int64_t(last) * d + col));
  }

  float acc[kSliceV] = {};
  for (int b = 0; b < len; b += kBatch) {
    PackedBf16<kSliceV> x[kBatch];
    float old[kBatch][kSliceV];
#pragma unroll
    for (int k = 0; k < kBatch; k++) {
      const int i = b + k;
      if (i >= len) break;  // warp-uniform, as every branch on the masks below
      const uint32_t r = __shfl_sync(0xffffffffu, uint32_t(row), i);
      if (cols_ok) load_packed(x[k], dout + r * uint32_t(d) + col);
      if ((whole >> i) & 1u) {
        const uint32_t id = __shfl_sync(0xffffffffu, key, i);
        if (cols_ok) load_f32(old[k], dtable + id * uint32_t(d) + col);
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; k++) {
      const int i = b + k;
      if (i >= len) break;
      if (cols_ok) {
        float xf[kSliceV];
        unpack(xf, x[k]);
#pragma unroll
        for (int e = 0; e < kSliceV; e++) acc[e] += xf[e];
      }
      if (!((closes >> i) & 1u)) continue;
      if ((whole >> i) & 1u) {
        const uint32_t id = __shfl_sync(0xffffffffu, key, i);  // again: cheaper than a register a row
        if (cols_ok) {
#pragma unroll
          for (int e = 0; e < kSliceV; e++) old[k][e] += acc[e];
          store_f32(dtable + id * uint32_t(d) + col, old[k]);
        }
      } else if (cols_ok) {
        const int slot = (from_before >> i) & 1u ? 0 : 1;
        store_f32(partial + (u * 2 + slot) * d + col, acc);
      }
#pragma unroll
      for (int e = 0; e < kSliceV; e++) acc[e] = 0.f;
    }
  }

  // Arrival, per (run, slice): each lane's fence, then lane 0 counts the warp's pieces in.
  if (!cp.slot0 && !cp.slot1) return;
  const int64_t b0 = cp.slot0 ? first_tile_of_run(keys, first, u) : 0;
  __threadfence();
  __syncwarp();
  long long join0 = 0, join1 = 0;  // the pieces of the run this warp joins, 0: none
  if (lane == 0) {
    if (cp.slot0) {
      const unsigned long long mine = arrival(cp.slot0_last, u - b0 + 1);
      const unsigned long long c = atomicAdd(&arrivals[b0 * n_slices + s], mine) + mine;
      if (run_complete(c)) join0 = (long long)(c >> 32);
    }
    if (cp.slot1) {
      const unsigned long long c = atomicAdd(&arrivals[u * n_slices + s], 1ull) + 1ull;
      if (run_complete(c)) join1 = (long long)(c >> 32);
    }
  }
  join0 = __shfl_sync(0xffffffffu, join0, 0);
  join1 = __shfl_sync(0xffffffffu, join1, 0);
  if ((join0 | join1) == 0 || !cols_ok) return;
  __threadfence();
  if (join0) join_slice(dtable, partial, first, b0, b0 + join0 - 1, d, col);
  if (join1) join_slice(dtable, partial, last, u, u + join1 - 1, d, col);
}

int block_threads(int d, int V) { return int(std::min<int64_t>(kThreads, ceil_div(ceil_div(d, V), 32) * 32)); }

}  // namespace

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* table, int64_t N, int d, cudaStream_t s) {
  TK_CUDA_REQUIRE(d > 0, "embedding: the row width must be positive, got %d", d);
  if (N == 0) return;
  const bool vectorised = d % kVec == 0 && aligned16(out) && aligned16(table);
  const int v = vectorised ? kVec : 1;
  const int64_t chunks_per_lane = ceil_div(ceil_div(d, v), 32);
  auto launch = [&](auto vec, auto u) {
    constexpr int V = decltype(vec)::value, U = decltype(u)::value, K = kForwardChunks / U;
    const int64_t blocks = ceil_div(N, int64_t(kForwardWarps) * K);
    embedding_forward_kernel<V, U><<<blocks, 32 * kForwardWarps, 0, s>>>(out, tokens, table, N, d);
    TK_CUDA_CHECK_LAUNCH();
  };
  auto with_vec = [&](auto vec) {
    if (chunks_per_lane <= 1) return launch(vec, std::integral_constant<int, 1>{});
    if (chunks_per_lane <= 2) return launch(vec, std::integral_constant<int, 2>{});
    if (chunks_per_lane <= 4) return launch(vec, std::integral_constant<int, 4>{});
    launch(vec, std::integral_constant<int, 8>{});  // wider rows: several passes
  };
  if (vectorised) with_vec(std::integral_constant<int, kVec>{});
  else with_vec(std::integral_constant<int, 1>{});
}

size_t embedding_backward_scratch_bytes(int64_t N, int64_t /*V*/, int d) {
  return carve_scratch(nullptr, N, d).total_bytes;
}

namespace {
// The sort, zeroing zero[n_zero] on the way.
void sort_ids(uint32_t* keys, int32_t* rows, const int32_t* tokens, int64_t N, int64_t V, unsigned long long* zero,
              int64_t n_zero, cudaStream_t s) {
  TK_CUDA_REQUIRE(V > 0 && V < (int64_t(1) << 31), "sort_token_ids: vocabulary of %lld ids", (long long)V);
  TK_CUDA_REQUIRE(N < (int64_t(1) << 31), "sort_token_ids: %lld tokens are more than one call sorts", (long long)N);
  if (N == 0) return;
  if (N <= kWideMaxN) {
    // 136 KB of dynamic shared memory: above the default 48 KB a kernel must opt in (on the current device).
    TK_CUDA_CHECK(cudaFuncSetAttribute(sort_ids_wide_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(kWideSmemBytes)));
    sort_ids_wide_kernel<<<ceil_div(V, int64_t(kWideIds)), 32 * kWideWarps, kWideSmemBytes, s>>>(
        keys, rows, tokens, int(N), uint32_t(V), zero, n_zero);
  } else {
    sort_ids_kernel<<<ceil_div(V, int64_t(kSortIds)), 32 * kSortWarps, 0, s>>>(keys, rows, tokens, N, uint32_t(V),
                                                                                zero, n_zero);
  }
  TK_CUDA_CHECK_LAUNCH();
}
}  // namespace

void sort_token_ids(uint32_t* keys, int32_t* rows, const int32_t* tokens, int64_t N, int64_t V, cudaStream_t s) {
  sort_ids(keys, rows, tokens, N, V, nullptr, 0, s);
}

void embedding_backward(float* dtable, const int32_t* tokens, const bf16* dout, int64_t N, int64_t V, int d,
                        void* scratch, size_t scratch_bytes, cudaStream_t s) {
  TK_CUDA_REQUIRE(d > 0 && V > 0, "embedding: table [%lld, %d] is empty", (long long)V, d);
  TK_CUDA_REQUIRE(N < (int64_t(1) << 31), "embedding_backward: %lld tokens are more than one call sorts",
                  (long long)N);
  if (N == 0) return;
  BackwardScratch sc = carve_scratch(scratch, N, d);
  TK_CUDA_REQUIRE(scratch_bytes >= sc.total_bytes,
                  "embedding_backward: the scratch buffer holds %zu bytes, %zu are needed", scratch_bytes,
                  sc.total_bytes);
  const int64_t tiles = ceil_div(N, kTile);
  const bool aligned8 = (reinterpret_cast<uintptr_t>(dout) & 7) == 0;
  const bool fits32 = N * int64_t(d) < (int64_t(1) << 32) && V * int64_t(d) < (int64_t(1) << 32);
  if (d % kSliceV == 0 && aligned16(dtable) && aligned8 && fits32) {
    // One launch after the sort (which zeroes the arrival counters).
    sort_ids(sc.keys, sc.rows, tokens, N, V, sc.arrivals, sc.n_arrivals, s);
    const int n_slices = int(ceil_div(d, kSliceCols));
    const int64_t items = tiles * n_slices;
    embedding_backward_slice_kernel<<<ceil_div(items, kSliceWarps), 32 * kSliceWarps, 0, s>>>(
        dtable, sc.partial, sc.arrivals, sc.keys, sc.rows, dout, N, d, n_slices, items);
    TK_CUDA_CHECK_LAUNCH();
    return;
  }
  // The scalar fallback: rows of any width, pointers of any alignment; the tile pass, then the join pass.
  sort_ids(sc.keys, sc.rows, tokens, N, V, nullptr, 0, s);
  const int threads = block_threads(d, 1);
  embedding_backward_tile_kernel<1><<<tiles, threads, 0, s>>>(dtable, sc.partial, sc.keys, sc.rows, dout, N, d);
  TK_CUDA_CHECK_LAUNCH();
  embedding_backward_join_kernel<1><<<tiles, threads, 0, s>>>(dtable, sc.partial, sc.keys, N, d);
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
