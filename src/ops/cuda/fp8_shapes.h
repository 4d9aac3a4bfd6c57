// The shapes the CUDA backend's FP8 paths take (fp8_linears.cpp), written once: CudaOps decides by them op by op,
// and the recipe (src/plan/recipe.cpp) and the memory planner decide by them without a GPU what the backend will
// do (which activations it keeps as one-byte x^T, whether the LM head runs in FP8). Host-only (no CUDA header).
#pragma once
#include <cstdint>

namespace tk::cuda::fp8_shapes {

// cuBLASLt's FP8 GEMMs and quantize_fp8's 16-byte rows: every dimension a multiple of 16 (and every operand 16-byte
// aligned, which the backend checks on the pointers). A linear of N tokens, in -> out.
inline bool gemm(int64_t N, int64_t in, int64_t out) { return N % 16 == 0 && in % 16 == 0 && out % 16 == 0; }

// The fused casts' widths: SwiGLU's (swiglu_forward_fp8, swiglu_backward_fp8) takes f a multiple of 8; the norm's
// (rmsnorm_cast_fp8, a warp a row) d a multiple of 8, at most 4096.
inline bool swiglu_cast(int64_t f) { return f % 8 == 0; }
inline bool norm_cast(int64_t d) { return d % 8 == 0 && d <= 4096; }

// Whether, with delayed scaling, the fused forwards of a Llama block (width d, FFN width f, q/k/v width qkv) keep
// the norms' and SwiGLU's outputs as their linears' one-byte x^T for every micro-batch of sequences of T tokens
// (N = B T is a multiple of 16 whenever T is): the qkv and gate/up projections after the norms, the down
// projection after SwiGLU.
inline bool keeps_linear_inputs(int64_t T, int64_t d, int64_t f, int64_t qkv) {
  return gemm(T, d, qkv) && gemm(T, d, 2 * f) && gemm(T, f, d) && norm_cast(d) && swiglu_cast(f);
}

// Whether the LM head (x [tokens, d], w [V, d]) takes the FP8 path with --fp8-lm-head.
inline bool lm_head(int64_t tokens, int64_t d, int64_t V) { return gemm(tokens, d, V); }

}  // namespace tk::cuda::fp8_shapes
