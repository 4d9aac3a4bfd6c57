// KV-cache attention for generation. One block per (new token, query head); its 4 warps take the cached
// rows round-robin, each keeping an online-softmax state (max, sum, weighted sum of values) for its rows,
// and warp 0 merges the four states in warp order. Lane l holds head elements [l*E, l*E + E), E = hd/32.
#include "ops/cuda/attention_decode.h"

#include <cmath>

#include "ops/cuda/cuda_check.h"

namespace tk::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

// The sum over the warp, bitwise equal in every lane (a butterfly adds the same pairs in every lane).
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__global__ void __launch_bounds__(kWarps * 32)
    decode_kernel(bf16* out, const bf16* k_cache, const bf16* v_cache, const bf16* qkv, int pos, int n_heads,
                  int n_kv_heads, int head_dim, float scale) {
  const int i = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_lane = head_dim / 32;
  const int64_t row = int64_t(n_heads + 2 * n_kv_heads) * head_dim, kv_row = int64_t(n_kv_heads) * head_dim;
  const int64_t kv_offset = int64_t(h / (n_heads / n_kv_heads)) * head_dim + lane * per_lane;
  const bf16* q = qkv + i * row + int64_t(h) * head_dim + lane * per_lane;

  float qs[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; j++) {
    qs[j] = j < per_lane ? __bfloat162float(q[j]) * scale : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, s = 0.0f;
  for (int r = warp; r <= pos + i; r += kWarps) {
    const bf16* k = k_cache + r * kv_row + kv_offset;
    const bf16* v = v_cache + r * kv_row + kv_offset;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; j++)
      if (j < per_lane) dot += qs[j] * __bfloat162float(k[j]);
    dot = warp_sum(dot);
    float m_new = fmaxf(m, dot);
    float correction = expf(m - m_new), p = expf(dot - m_new);
    s = s * correction + p;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; j++)
      if (j < per_lane) acc[j] = acc[j] * correction + p * __bfloat162float(v[j]);
    m = m_new;
  }

  __shared__ float warp_m[kWarps], warp_s[kWarps];
  __shared__ float warp_acc[kWarps][kMaxPerLane * 32];
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
#pragma unroll
  for (int j = 0; j < kMaxPerLane; j++)
    if (j < per_lane) warp_acc[warp][lane * per_lane + j] = acc[j];
  __syncthreads();
  if (warp != 0) return;

  float m_all = -INFINITY;
  for (int w = 0; w < kWarps; w++) m_all = fmaxf(m_all, warp_m[w]);
  float s_all = 0.0f, out_acc[kMaxPerLane] = {};
  for (int w = 0; w < kWarps; w++) {
    if (warp_m[w] == -INFINITY) continue;  // a warp that had no rows (the first tokens of a short cache)
    float c = expf(warp_m[w] - m_all);
    s_all += warp_s[w] * c;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; j++)
      if (j < per_lane) out_acc[j] += warp_acc[w][lane * per_lane + j] * c;
  }
  bf16* o = out + (int64_t(i) * n_heads + h) * head_dim + lane * per_lane;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; j++)
    if (j < per_lane) o[j] = __float2bfloat16(out_acc[j] / s_all);
}

}  // namespace

void attention_decode(bf16* out, bf16* k_cache, bf16* v_cache, const bf16* qkv, int pos, int n_new, int n_heads,
                      int n_kv_heads, int head_dim, cudaStream_t stream) {
  TK_CUDA_REQUIRE(head_dim % 32 == 0 && head_dim <= 32 * kMaxPerLane,
                  "attention_decode on CUDA supports head_dim a multiple of 32 up to 256, not %d", head_dim);
  if (n_new == 0) return;
  // The new rows' keys and values, strided in qkv, packed into the caches.
  const size_t kv_bytes = size_t(n_kv_heads) * head_dim * sizeof(bf16);
  const size_t row_bytes = size_t(n_heads + 2 * n_kv_heads) * head_dim * sizeof(bf16);
  const int64_t kv_row = int64_t(n_kv_heads) * head_dim;
  TK_CUDA_CHECK(cudaMemcpy2DAsync(k_cache + pos * kv_row, kv_bytes, qkv + int64_t(n_heads) * head_dim, row_bytes,
                                  kv_bytes, size_t(n_new), cudaMemcpyDeviceToDevice, stream));
  TK_CUDA_CHECK(cudaMemcpy2DAsync(v_cache + pos * kv_row, kv_bytes, qkv + int64_t(n_heads + n_kv_heads) * head_dim,
                                  row_bytes, kv_bytes, size_t(n_new), cudaMemcpyDeviceToDevice, stream));
  dim3 grid{unsigned(n_new), unsigned(n_heads)};
  decode_kernel<<<grid, kWarps * 32, 0, stream>>>(out, k_cache, v_cache, qkv, pos, n_heads, n_kv_heads, head_dim,
                                                  1.0f / std::sqrt(float(head_dim)));
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
