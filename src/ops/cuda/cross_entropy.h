// The LM head fused with the cross-entropy loss and its gradient (ops.h lm_head_cross_entropy), in chunks
// of tokens so that only a bf16 [rows, V] logits chunk ever exists: never the f32 [N, V] logits.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/matmul_cublaslt.h"

namespace tk::cuda {

// What the logits chunk may take by default. Larger chunks mean fewer passes of the f32 dW read-modify-write
// that each chunk's weight-gradient GEMM makes (bench/NOTES.md has the numbers).
constexpr size_t kLogitsChunkBudgetBytes = size_t(512) << 20;

// Tokens per chunk: a multiple of 128 rows (so that chunk offsets keep 256-byte alignment for any d),
// as many as fit in budget_bytes of bf16 logits, at least 128, at most N.
int64_t lm_head_chunk_rows(int64_t N, int64_t V, size_t budget_bytes = kLogitsChunkBudgetBytes);

// losses f32[N] (=); when dx or dw is non-null the gradient of grad_scale * sum(losses): dx bf16[N,d] (=),
// dw f32[V,d] (+=). logits: scratch of chunk_rows * V bf16. A target equal to ignore_index gives loss 0
// and no gradient; a target outside [0, V) otherwise gives a NaN loss (the data does not match the vocabulary).
void lm_head_cross_entropy(Matmul& matmul, bf16* logits, int64_t chunk_rows, float* losses, bf16* dx, float* dw,
                           const bf16* x, const bf16* w, const int32_t* targets, int64_t N, int64_t d, int64_t V,
                           float grad_scale, int ignore_index, cudaStream_t stream);

}  // namespace tk::cuda
