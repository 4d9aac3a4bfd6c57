// SwiGLU, forward and backward, on gate_up[N, 2f] (gate columns [0,f), up columns [f,2f)): an elementwise
// pass where each thread owns V consecutive columns of one row (V = 8: 16-byte accesses; V = 1 when f or
// a pointer does not allow them), reading its gate and up values together.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/swiglu.cuh"
#include "ops/cuda/vector_access.cuh"

namespace tk::cuda {
namespace {

constexpr int kThreads = 256;

template <int V>
__global__ void __launch_bounds__(kThreads)
    swiglu_forward_kernel(__nv_bfloat16* out, const __nv_bfloat16* gate_up, int64_t N, int f) {
  const int64_t chunks_per_row = f / V;
  const int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= N * chunks_per_row) return;
  const int64_t n = idx / chunks_per_row;
  const int col = int(idx - n * chunks_per_row) * V;
  float g[V], u[V], y[V];
  load_bf16(g, gate_up + n * 2 * f + col);
  load_bf16(u, gate_up + n * 2 * f + f + col);
#pragma unroll
  for (int k = 0; k < V; k++) y[k] = swiglu_value(g[k], u[k]);
  store_bf16(out + n * f + col, y);
}

// d silu(g) / dg = s (1 + g (1 - s)) with s = sigmoid(g) (swiglu.cuh).
template <int V>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(__nv_bfloat16* dgate_up, const __nv_bfloat16* dout, const __nv_bfloat16* gate_up,
                           int64_t N, int f) {
  const int64_t chunks_per_row = f / V;
  const int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= N * chunks_per_row) return;
  const int64_t n = idx / chunks_per_row;
  const int col = int(idx - n * chunks_per_row) * V;
  float g[V], u[V], dy[V], dg[V], du[V];
  load_bf16(g, gate_up + n * 2 * f + col);
  load_bf16(u, gate_up + n * 2 * f + f + col);
  load_bf16(dy, dout + n * f + col);
#pragma unroll
  for (int k = 0; k < V; k++) swiglu_grad(g[k], u[k], dy[k], dg[k], du[k]);
  store_bf16(dgate_up + n * 2 * f + col, dg);
  store_bf16(dgate_up + n * 2 * f + f + col, du);
}

bool vectorisable(int f, std::initializer_list<const void*> ptrs) {
  if (f % kVec) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

}  // namespace

void swiglu_forward(bf16* out, const bf16* gate_up, int64_t N, int f, cudaStream_t s) {
  TK_CUDA_REQUIRE(f > 0, "swiglu: the hidden width must be positive, got %d", f);
  if (N == 0) return;
  if (vectorisable(f, {out, gate_up})) {
    swiglu_forward_kernel<kVec><<<ceil_div(N * (f / kVec), kThreads), kThreads, 0, s>>>(out, gate_up, N, f);
  } else {
    swiglu_forward_kernel<1><<<ceil_div(N * f, kThreads), kThreads, 0, s>>>(out, gate_up, N, f);
  }
  TK_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(bf16* dgate_up, const bf16* dout, const bf16* gate_up, int64_t N, int f, cudaStream_t s) {
  TK_CUDA_REQUIRE(f > 0, "swiglu: the hidden width must be positive, got %d", f);
  if (N == 0) return;
  if (vectorisable(f, {dgate_up, dout, gate_up})) {
    swiglu_backward_kernel<kVec>
        <<<ceil_div(N * (f / kVec), kThreads), kThreads, 0, s>>>(dgate_up, dout, gate_up, N, f);
  } else {
    swiglu_backward_kernel<1><<<ceil_div(N * f, kThreads), kThreads, 0, s>>>(dgate_up, dout, gate_up, N, f);
  }
  TK_CUDA_CHECK_LAUNCH();
}

}  // namespace tk::cuda
