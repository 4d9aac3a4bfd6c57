// The optimizer step's kernels: the gradient norm (two deterministic passes: fixed per-block partials,
// then one block adds them in double) and AdamW as ONE launch over every parameter segment (fp32 master
// weights, bf16 weights written back): with f32 or bf16 moments each thread updates groups of 4 elements
// with wide accesses; with int8 moments (moment_codec.h) each warp decodes, updates and encodes one block
// of 256.
#include <algorithm>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxNormBlocks = 1024;       // partial sums of the first pass (a function of n only)
constexpr int kGroupsPerThread = 4;        // 4-element groups each AdamW thread updates
constexpr int64_t kGroupsPerBlock = int64_t(kThreads) * kGroupsPerThread;

// ---- gradient norm ---------------------------------------------------------------------------------

int norm_blocks(int64_t n) {
  return int(std::clamp<int64_t>(ceil_div(n, int64_t(kThreads) * 16), 1, kMaxNormBlocks));
}

// partial[b] = sum of g[i]^2 over the i block b visits (grid-stride in float4 groups, then the < 4 tail).
__global__ void __launch_bounds__(kThreads)
    sum_squares_kernel(float* partial, const float* g, int64_t n, bool vectorised) {
  __shared__ float smem[32];
  float acc[1] = {0.f};
  const int64_t tid = int64_t(blockIdx.x) * kThreads + threadIdx.x, stride = int64_t(gridDim.x) * kThreads;
  int64_t scalar_from = 0;
  if (vectorised) {
    const int64_t groups = n / 4;
    const float4* g4 = reinterpret_cast<const float4*>(g);
    int64_t i = tid;
    for (; i + 3 * stride < groups; i += 4 * stride) {  // four loads in flight
      float4 a = g4[i], b = g4[i + stride], c = g4[i + 2 * stride], d = g4[i + 3 * stride];
      acc[0] += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
      acc[0] += b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
      acc[0] += c.x * c.x + c.y * c.y + c.z * c.z + c.w * c.w;
      acc[0] += d.x * d.x + d.y * d.y + d.z * d.z + d.w * d.w;
    }
    for (; i < groups; i += stride) {
      float4 a = g4[i];
      acc[0] += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
    }
    scalar_from = groups * 4;
  }
  for (int64_t i = scalar_from + tid; i < n; i += stride) acc[0] += g[i] * g[i];
  block_sum(acc, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc[0];
}

// norm = sqrt(sum of the partials), added in double in a fixed order by one block.
__global__ void __launch_bounds__(kMaxNormBlocks) norm_from_partials_kernel(float* norm, const float* partial,
                                                                            int n_partials) {
  __shared__ double smem[32];
  double v = threadIdx.x < n_partials ? double(partial[threadIdx.x]) : 0.0;
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kMaxNormBlocks / 32; w++) total += smem[w];
    norm[0] = float(sqrt(total));
  }
}

// ---- AdamW -----------------------------------------------------------------------------------------

// Four bf16 as one 8-byte access (p 8-byte aligned), widened to / rounded from fp32.
__device__ __forceinline__ void load_bf16_4(float (&w)[4], const __nv_bfloat16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  w[0] = a.x, w[1] = a.y, w[2] = b.x, w[3] = b.y;
}
__device__ __forceinline__ void store_bf16_4(__nv_bfloat16* p, const float4& w) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(w.x, w.y), b = __floats2bfloat162_rn(w.z, w.w);
  uint2 raw;
  raw.x = *reinterpret_cast<const uint32_t*>(&a);
  raw.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = raw;
}

// The update of one element (ops.h adamw_update), in fp32.
__device__ __forceinline__ float adamw_element(float p, float g, float& m, float& v, const AdamWStep& c,
                                               bool decay) {
  g *= c.grad_scale;
  m = c.beta1 * m + (1.f - c.beta1) * g;
  v = c.beta2 * v + (1.f - c.beta2) * g * g;
  // The reciprocals are the same for every element: computed once a thread (two divisions an element fewer).
  const float mh = m * (1.f / c.bias_correction1), vh = v * (1.f / c.bias_correction2);
  return p - c.lr * (mh / (sqrtf(vh) + c.eps) + (decay ? c.weight_decay * p : 0.f));
}

// Moments stored as f32, or as bf16 rounded stochastically (moment_codec.h) with the noise of element i.
__device__ __forceinline__ void load_moments4(float4& out, const float* p) {
  out = *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void load_moments4(float4& out, const bf16* p) {
  float w[4];
  load_bf16_4(w, p);
  out = make_float4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ float load_moment(const float* p) { return *p; }
__device__ __forceinline__ float load_moment(const bf16* p) {
  return moment_from_bf16(*reinterpret_cast<const uint16_t*>(p));
}
__device__ __forceinline__ void store_moment(float* p, float x, const AdamWStep&, int64_t, uint32_t) { *p = x; }
__device__ __forceinline__ void store_moment(bf16* p, float x, const AdamWStep& c, int64_t i, uint32_t which) {
  *reinterpret_cast<uint16_t*>(p) = moment_to_bf16_stochastic(x, bf16_moment_noise(c.step, c.first_index + i, which));
}
__device__ __forceinline__ void store_moments4(float* p, const float4& x, const AdamWStep&, int64_t, uint32_t) {
  *reinterpret_cast<float4*>(p) = x;
}
__device__ __forceinline__ void store_moments4(bf16* p, const float4& x, const AdamWStep& c, int64_t i0,
                                               uint32_t which) {
  const int64_t i = c.first_index + i0;
  float n[4];
  if ((i & 3) == 0) {  // the four elements share one hash (moment_codec.h)
    const uint64_t bits = moment_noise_bits(c.step, i >> 2, which);
#pragma unroll
    for (int k = 0; k < 4; k++) n[k] = bf16_moment_noise_quarter(bits, i + k);
  } else {  // a range whose first index is not a multiple of 4 (a ZeRO slice's): each element its own quarter
#pragma unroll
    for (int k = 0; k < 4; k++) n[k] = bf16_moment_noise(c.step, i + k, which);
  }
  uint2 raw;
  raw.x = uint32_t(moment_to_bf16_stochastic(x.x, n[0])) | uint32_t(moment_to_bf16_stochastic(x.y, n[1])) << 16;
  raw.y = uint32_t(moment_to_bf16_stochastic(x.z, n[2])) | uint32_t(moment_to_bf16_stochastic(x.w, n[3])) << 16;
  *reinterpret_cast<uint2*>(p) = raw;
}

// The segment whose blocks include block b: the last with first_block <= b (the table is sorted by it).
__device__ int find_segment(const AdamWSegment* segments, int n_segments, int b) {
  int lo = 0, hi = n_segments - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (segments[mid].first_block <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// f32 or bf16 moments (M). A segment's blocks cover the 4-aligned element groups that overlap
// [offset, offset + count), a block kGroupsPerBlock consecutive groups, a thread every kThreads-th of
// them. A group wholly inside the segment is updated with 16-byte (f32) or 8-byte (bf16) accesses; the (at
// most two) groups that straddle its ends element by element, each block touching only its own segment's
// elements.
template <class M>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(__nv_bfloat16* params, float* master, const float* grads, M* m, M* v,
                 const AdamWSegment* segments, int n_segments, AdamWStep c, bool vectorised) {
  const AdamWSegment seg = segments[find_segment(segments, n_segments, blockIdx.x)];
  const int64_t begin = seg.offset, end = seg.offset + seg.count;
  const int64_t last_group = (end - 1) / 4;
  const int64_t block_first_group = begin / 4 + (int64_t(blockIdx.x) - seg.first_block) * kGroupsPerBlock;
  const bool decay = seg.decay != 0;
#pragma unroll
  for (int k = 0; k < kGroupsPerThread; k++) {
    const int64_t group = block_first_group + k * kThreads + threadIdx.x, i0 = group * 4;
    if (group > last_group) break;
    if (vectorised && i0 >= begin && i0 + 4 <= end) {
      const float4 g = *reinterpret_cast<const float4*>(grads + i0);
      float4 mv, vv;
      load_moments4(mv, m + i0);
      load_moments4(vv, v + i0);
      float4 p;
      if (master) {
        p = *reinterpret_cast<const float4*>(master + i0);
      } else {
        float w[4];
        load_bf16_4(w, params + i0);
        p = make_float4(w[0], w[1], w[2], w[3]);
      }
      p.x = adamw_element(p.x, g.x, mv.x, vv.x, c, decay);
      p.y = adamw_element(p.y, g.y, mv.y, vv.y, c, decay);
      p.z = adamw_element(p.z, g.z, mv.z, vv.z, c, decay);
      p.w = adamw_element(p.w, g.w, mv.w, vv.w, c, decay);
      store_moments4(m + i0, mv, c, i0, 0);
      store_moments4(v + i0, vv, c, i0, 1);
      if (master) *reinterpret_cast<float4*>(master + i0) = p;
      store_bf16_4(params + i0, p);
    } else {
      for (int64_t i = std::max(i0, begin); i < std::min(i0 + 4, end); i++) {
        float mi = load_moment(m + i), vi = load_moment(v + i);
        const float p = adamw_element(master ? master[i] : __bfloat162float(params[i]), grads[i], mi, vi, c, decay);
        store_moment(m + i, mi, c, i, 0);
        store_moment(v + i, vi, c, i, 1);
        if (master) master[i] = p;
        params[i] = __float2bfloat16_rn(p);
      }
    }
  }
}

// ---- AdamW with int8 moments ------------------------------------------------------------------------

constexpr int kQuantWarps = 8;                     // warps per CUDA block, each updating whole int8 blocks
constexpr int kBlocksPerWarp = 4;                  // int8 blocks each warp updates
constexpr int kPerLane = int(kMomentBlock) / 32;   // elements per lane

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// One int8 block q (elements [q*256, q*256 + 256) of the P) by one warp, lane l holding elements
// q*256 + l + 32j, j < 8 (so each access of the warp is 32 consecutive elements). The warp decodes the
// block with the code book, updates the elements that lie in a segment (a lane finds its first element's
// segment by bisection, then walks on), takes the block's new largest |m| and v by a warp maximum (exact,
// in any order), and encodes every element again. A block with no element in a segment is left as it is.
__device__ __forceinline__ void adamw_int8_block(int64_t q, __nv_bfloat16* params, float* master,
                                                 const float* grads, int8_t* m, uint8_t* v, float* m_scale,
                                                 float* v_scale, const MomentCodeBook& book, int64_t P,
                                                 const AdamWSegment* segments, int n_segments, const AdamWStep& c) {
  const int lane = threadIdx.x & 31;
  const int64_t i0 = q * kMomentBlock + lane;
  int s = 0;
  for (int lo = 0, hi = n_segments - 1; lo <= hi;) {  // the last segment with offset <= i0, else 0
    const int mid = (lo + hi) / 2;
    if (segments[mid].offset <= i0) s = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  bool in[kPerLane], decay[kPerLane], any = false;
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    const int64_t i = i0 + 32 * j;
    while (s + 1 < n_segments && segments[s + 1].offset <= i) s++;
    in[j] = i < P && segments[s].offset <= i && i < segments[s].offset + segments[s].count;
    decay[j] = segments[s].decay != 0;
    any |= in[j];
  }
  if (!__any_sync(0xffffffffu, any)) return;

  const float ms = m_scale[q], vs = v_scale[q];
  float mf[kPerLane], vf[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    const int64_t i = i0 + 32 * j;
    mf[j] = i < P ? decode_m(book, m[i], ms) : 0.f;
    vf[j] = i < P ? decode_v(book, v[i], vs) : 0.f;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    if (!in[j]) continue;
    const int64_t i = i0 + 32 * j;
    const float p = adamw_element(master ? master[i] : __bfloat162float(params[i]), grads[i], mf[j], vf[j], c,
                                  decay[j]);
    if (master) master[i] = p;
    params[i] = __float2bfloat16_rn(p);
  }
  float m_max = 0.f, v_max = 0.f;
#pragma unroll
  for (int j = 0; j < kPerLane; j++) m_max = fmaxf(m_max, fabsf(mf[j])), v_max = fmaxf(v_max, vf[j]);
  m_max = warp_max(m_max);
  v_max = warp_max(v_max);
  if (m_max < kSmallestNormal) m_max = 0.f;
  if (v_max < kSmallestNormal) v_max = 0.f;
  if (lane == 0) m_scale[q] = m_max, v_scale[q] = v_max;
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    const int64_t i = i0 + 32 * j;
    if (i >= P) break;
    m[i] = encode_m(book, mf[j], m_max, moment_noise(c.step, c.first_index + i, 0));
    v[i] = encode_v(book, vf[j], v_max, moment_noise(c.step, c.first_index + i, 1));
  }
}

// Each CUDA block copies the code book (4 KB) to shared memory once, then its warp w updates int8 blocks
// (b * kBlocksPerWarp + r) * kQuantWarps + w for r < kBlocksPerWarp: 8192 elements per CUDA block.
__global__ void __launch_bounds__(kQuantWarps * 32)
    adamw_int8_kernel(__nv_bfloat16* params, float* master, const float* grads, int8_t* m, uint8_t* v,
                      float* m_scale, float* v_scale, const MomentCodeBook* book_in, int64_t P,
                      const AdamWSegment* segments, int n_segments, AdamWStep c) {
  __shared__ MomentCodeBook book;
  {
    const float* src = reinterpret_cast<const float*>(book_in);
    float* dst = reinterpret_cast<float*>(&book);
    for (int k = threadIdx.x; k < int(sizeof(MomentCodeBook) / sizeof(float)); k += blockDim.x) dst[k] = src[k];
  }
  __syncthreads();
  for (int r = 0; r < kBlocksPerWarp; r++) {
    const int64_t q = (int64_t(blockIdx.x) * kBlocksPerWarp + r) * kQuantWarps + (threadIdx.x >> 5);
    if (q * kMomentBlock >= P) break;  // the whole warp: q is the same for its lanes
    adamw_int8_block(q, params, master, grads, m, v, m_scale, v_scale, book, P, segments, n_segments, c);
  }
}

int64_t segment_blocks(const AdamWSegment& s) {
  if (s.count <= 0) return 0;
  const int64_t groups = (s.offset + s.count - 1) / 4 - s.offset / 4 + 1;
  return ceil_div(groups, kGroupsPerBlock);
}

}  // namespace

size_t grad_norm_scratch_bytes(int64_t n) { return (size_t(norm_blocks(n)) + 1) * sizeof(float); }

void grad_norm(float* norm, const float* g, int64_t n, void* scratch, size_t scratch_bytes, cudaStream_t s) {
  TK_CUDA_REQUIRE(scratch_bytes >= grad_norm_scratch_bytes(n),
                  "grad_norm: the scratch buffer holds %zu bytes, %zu are needed", scratch_bytes,
                  grad_norm_scratch_bytes(n));
  const int blocks = norm_blocks(n);
  float* partial = static_cast<float*>(scratch);
  sum_squares_kernel<<<blocks, kThreads, 0, s>>>(partial, g, n, aligned16(g));
  TK_CUDA_CHECK_LAUNCH();
  norm_from_partials_kernel<<<1, kMaxNormBlocks, 0, s>>>(norm, partial, blocks);
  TK_CUDA_CHECK_LAUNCH();
}

double grad_norm_host(const float* g, int64_t n, void* scratch, size_t scratch_bytes, cudaStream_t s) {
  float* result = static_cast<float*>(scratch) + norm_blocks(n);
  grad_norm(result, g, n, scratch, scratch_bytes, s);
  float norm = 0.f;
  TK_CUDA_CHECK(cudaMemcpyAsync(&norm, result, sizeof norm, cudaMemcpyDeviceToHost, s));
  TK_CUDA_CHECK(cudaStreamSynchronize(s));
  return norm;
}

int adamw_plan(AdamWSegment* segments, int n_segments) {
  int64_t blocks = 0;
  for (int i = 0; i < n_segments; i++) {
    TK_CUDA_REQUIRE(segments[i].offset >= 0 && segments[i].count >= 0, "adamw: segment %d is [%lld, +%lld)", i,
                    (long long)segments[i].offset, (long long)segments[i].count);
    TK_CUDA_REQUIRE(i == 0 || segments[i].offset >= segments[i - 1].offset + segments[i - 1].count,
                    "adamw: segments must be in order and not overlap (segment %d)", i);
    segments[i].first_block = int32_t(blocks);
    blocks += segment_blocks(segments[i]);
    TK_CUDA_REQUIRE(blocks < (int64_t(1) << 31), "adamw: %lld parameters are more than one launch covers",
                    (long long)(segments[i].offset + segments[i].count));
  }
  return int(blocks);
}

void adamw_update(bf16* params, float* master, const float* grads, const AdamWMoments& mo, int64_t P,
                  const AdamWSegment* segments, int n_segments, int n_blocks, const AdamWStep& step,
                  cudaStream_t s) {
  if (n_segments == 0 || P == 0) return;
  if (mo.form == MomentForm::Int8) {
    const int64_t blocks = ceil_div(moment_blocks(P), int64_t(kQuantWarps) * kBlocksPerWarp);
    TK_CUDA_REQUIRE(blocks < (int64_t(1) << 31), "adamw: %lld parameters are more than one launch covers",
                    (long long)P);
    adamw_int8_kernel<<<unsigned(blocks), kQuantWarps * 32, 0, s>>>(
        params, master, grads, static_cast<int8_t*>(mo.m), static_cast<uint8_t*>(mo.v), mo.m_scale, mo.v_scale,
        mo.book, P, segments, n_segments, step);
    TK_CUDA_CHECK_LAUNCH();
    return;
  }
  if (n_blocks == 0) return;
  const bool common = aligned16(grads) && (reinterpret_cast<uintptr_t>(params) & 7) == 0 &&
                      (!master || aligned16(master));
  if (mo.form == MomentForm::BF16) {
    auto* m = static_cast<bf16*>(mo.m);
    auto* v = static_cast<bf16*>(mo.v);
    const bool vectorised = common && (reinterpret_cast<uintptr_t>(m) & 7) == 0 &&
                            (reinterpret_cast<uintptr_t>(v) & 7) == 0;
    adamw_kernel<<<n_blocks, kThreads, 0, s>>>(params, master, grads, m, v, segments, n_segments, step, vectorised);
  } else {
    auto* m = static_cast<float*>(mo.m);
    auto* v = static_cast<float*>(mo.v);
    const bool vectorised = common && aligned16(m) && aligned16(v);
    adamw_kernel<<<n_blocks, kThreads, 0, s>>>(params, master, grads, m, v, segments, n_segments, step, vectorised);
  }
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
