// SwiGLU's elementwise math, shared by the bf16 kernels (swiglu.cu) and the FP8 fused backward (fp8.cu): both
// must round to the same bf16 bits, so the products are written out with explicit roundings (no contraction
// into fused multiply-adds that one compilation context might do and the other not).
#pragma once
#include <cuda_runtime.h>

namespace tk::cuda {

__device__ __forceinline__ float swiglu_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// y = silu(g) u = g sigmoid(g) u.
__device__ __forceinline__ float swiglu_value(float g, float u) {
  return __fmul_rn(__fmul_rn(g, swiglu_sigmoid(g)), u);
}

// The gradients of y = silu(g) u given dy: du = dy g s, dg = dy u s (1 + g (1 - s)), s = sigmoid(g).
__device__ __forceinline__ void swiglu_grad(float g, float u, float dy, float& dg, float& du) {
  const float s = swiglu_sigmoid(g);
  du = __fmul_rn(__fmul_rn(dy, g), s);
  dg = __fmul_rn(__fmul_rn(__fmul_rn(dy, u), s), __fadd_rn(1.f, __fmul_rn(g, __fsub_rn(1.f, s))));
}

}  // namespace tk::cuda
