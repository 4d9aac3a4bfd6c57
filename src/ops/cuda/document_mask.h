// Document masking for the cuDNN attention (ops.h attention_* with segment ids): the mask as an additive
// bias that the fused flash-attention kernels add to the scaled scores, 0 where query and key share a
// segment id and kDocumentMasked elsewhere. It is rebuilt only for the batch rows whose segment ids changed
// since the last build, so the layers of a step (forward and backward) share one build.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tk::cuda {

// The bias of a masked (query, key) pair. Large enough that exp() of any score plus it is exactly 0 in f32,
// small enough that no scaling inside a kernel (e.g. by log2 e) overflows it to -inf: a tile whose keys
// are all masked then keeps a finite running maximum, and the diagonal, always visible, decides each row.
constexpr float kDocumentMasked = -1.0e9f;

// The row stride of the bias: T rounded up to 8 elements, so that every row starts 16-byte aligned.
inline int64_t document_mask_stride(int T) { return (int64_t(T) + 7) / 8 * 8; }

// bias bf16[B, T, stride]: bias[b, i, j] = 0 if segment_ids[b, i] == segment_ids[b, j] else kDocumentMasked
// (j < T; the padding columns hold kDocumentMasked). seen i32[B, T] keeps the segment ids of the last build and
// changed i32[B] is scratch; rows whose ids equal `seen` are left as they are, unless `rebuild` (the first
// build, or after the buffers were reallocated). Deterministic: every element is written by one thread.
void document_mask_bias(__nv_bfloat16* bias, int32_t* seen, int32_t* changed, const int32_t* segment_ids, int B,
                        int T, bool rebuild, cudaStream_t stream);

}  // namespace tk::cuda
