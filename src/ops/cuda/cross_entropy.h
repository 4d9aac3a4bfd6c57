// The LM head fused with the cross-entropy loss and its gradient (ops.h lm_head_cross_entropy), in chunks
// of tokens so that only a bf16 [rows, V] logits chunk ever exists: never the f32 [N, V] logits.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/matmul_cublaslt.h"
#include "ops/cuda/workspace_sizes.h"  // the chunk's rule: kLogitsChunkBudgetBytes, lm_head_chunk_rows

namespace tk::cuda {

// One chunk of token rows: losses f32[rows] (=) from the bf16 logits [rows, V], and with write_grad the logits
// replaced by dlogits = grad_scale * (softmax - onehot(target)) (0 for an ignored target).
void cross_entropy_chunk(bf16* logits, float* losses, const int32_t* targets, int64_t rows, int64_t V,
                         float grad_scale, int ignore_index, bool write_grad, cudaStream_t stream);

// The FP8 LM head's chunk: losses as cross_entropy_chunk's, and the dlogits (softmax - onehot(target)) cast to
// e5m2 with the scale 57344 / grad_scale (every |dlogit| is at most grad_scale) into dl8 [rows, V], the logits left
// as they are; *dequant = grad_scale / 57344 (the GEMMs' scale). V a multiple of 16, logits 16-byte aligned.
void cross_entropy_chunk_fp8(const bf16* logits, uint8_t* dl8, float* dequant, float* losses, const int32_t* targets,
                             int64_t rows, int64_t V, float grad_scale, int ignore_index, cudaStream_t stream);
// out [cols, rows] = in [rows, cols]^T, one byte an element (the FP8 dlogits' transpose for the weight gradient);
// rows and cols multiples of 16, both buffers 16-byte aligned.
void transpose_bytes(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols, cudaStream_t stream);

// losses f32[N] (=); when dx or dw is non-null the gradient of grad_scale * sum(losses): dx bf16[N,d] (=),
// dw f32[V,d] (+=). logits: scratch of chunk_rows * V bf16. A target equal to ignore_index gives loss 0
// and no gradient; a target outside [0, V) otherwise gives a NaN loss (the data does not match the vocabulary).
void lm_head_cross_entropy(Matmul& matmul, bf16* logits, int64_t chunk_rows, float* losses, bf16* dx, float* dw,
                           const bf16* x, const bf16* w, const int32_t* targets, int64_t N, int64_t d, int64_t V,
                           float grad_scale, int ignore_index, cudaStream_t stream);

}  // namespace tk::cuda
