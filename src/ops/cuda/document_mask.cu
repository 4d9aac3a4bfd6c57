// The document-mask bias (document_mask.h) in two launches: one block per batch row compares the row's
// segment ids with those of the last build (and records the new ones), then blocks of query rows rewrite
// the bias rows of the batch rows that changed, eight bf16 columns (16 bytes) per thread and store.
#include "ops/cuda/document_mask.h"

#include "ops/cuda/cuda_check.h"

namespace tk::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 16;  // query rows per block of the bias kernel

// changed[b] = rebuild or any(segment_ids[b, :] != seen[b, :]); then seen[b, :] = segment_ids[b, :]. Each
// thread reads and writes only its own elements of `seen`, so the update needs no barrier before it.
__global__ void __launch_bounds__(kThreads)
    segments_changed_kernel(int32_t* seen, int32_t* changed, const int32_t* segment_ids, int T, int rebuild) {
  const int64_t row = int64_t(blockIdx.x) * T;
  int differs = rebuild;
  for (int t = threadIdx.x; t < T; t += kThreads) {
    const int32_t id = segment_ids[row + t];
    differs |= id != seen[row + t];
    seen[row + t] = id;
  }
  differs = __syncthreads_or(differs);
  if (threadIdx.x == 0) changed[blockIdx.x] = differs;
}

// Block (x, b) writes query rows [x * kRowsPerBlock, ...) of batch row b, if that row changed.
__global__ void __launch_bounds__(kThreads)
    bias_kernel(bf16* bias, const int32_t* changed, const int32_t* segment_ids, int T, int64_t stride) {
  const int b = blockIdx.y;
  if (!changed[b]) return;
  const int32_t* ids = segment_ids + int64_t(b) * T;
  const bf16 keep = __float2bfloat16(0.0f), masked = __float2bfloat16(kDocumentMasked);
  const int groups = int(stride / 8);  // 16-byte groups per bias row
  const int i0 = blockIdx.x * kRowsPerBlock, rows = min(kRowsPerBlock, T - i0);
  for (int k = threadIdx.x; k < rows * groups; k += kThreads) {
    const int i = i0 + k / groups, j0 = (k % groups) * 8;
    const int32_t query = ids[i];
    union {
      uint4 v;
      bf16 h[8];
    } out;
#pragma unroll
    for (int e = 0; e < 8; e++) out.h[e] = j0 + e < T && ids[j0 + e] == query ? keep : masked;
    *reinterpret_cast<uint4*>(bias + (int64_t(b) * T + i) * stride + j0) = out.v;
  }
}

}  // namespace

void document_mask_bias(bf16* bias, int32_t* seen, int32_t* changed, const int32_t* segment_ids, int B, int T,
                        bool rebuild, cudaStream_t stream) {
  TK_CUDA_REQUIRE(B > 0 && T > 0 && B <= 65535, "document_mask_bias: B=%d T=%d is not a valid shape", B, T);
  segments_changed_kernel<<<B, kThreads, 0, stream>>>(seen, changed, segment_ids, T, rebuild ? 1 : 0);
  TK_CUDA_CHECK_LAUNCH();
  dim3 grid((T + kRowsPerBlock - 1) / kRowsPerBlock, B);
  bias_kernel<<<grid, kThreads, 0, stream>>>(bias, changed, segment_ids, T, document_mask_stride(T));
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
