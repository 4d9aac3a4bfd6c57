// Matmul: the GEMMs of the linear layers and the LM head through cuBLASLt, written with row-major
// semantics (x[N,in], w[out,in] as ops.h has them): bf16 operands, fp32 accumulation, bf16 outputs for
// activations and fp32 += outputs for weight gradients. Never a hand-written GEMM.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ops/cuda/device_alloc.h"
#include "ops/cuda/workspace_sizes.h"

namespace tk::cuda {

using bf16 = __nv_bfloat16;

class Matmul {
 public:
  // The one workspace every GEMM shares (workspace_sizes.h).
  static constexpr size_t kWorkspaceBytes = kCublasWorkspaceBytes;

  // Creates the cuBLASLt handle and allocates the workspace through `alloc`.
  Matmul(cudaStream_t stream, const DeviceAlloc& alloc);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // y[N,out] = x[N,in] @ w[out,in]^T (+ bias[out], fused as cuBLASLt's BIAS epilogue; bias may be null).
  void linear_forward(bf16* y, const bf16* x, const bf16* w, const bf16* bias, int64_t N, int64_t in, int64_t out);
  // dx[N,in] = dy[N,out] @ w[out,in]   (=).
  void linear_backward_input(bf16* dx, const bf16* dy, const bf16* w, int64_t N, int64_t in, int64_t out);
  // dw[out,in] += dy[N,out]^T @ x[N,in]   (f32, accumulated by the GEMM itself with beta = 1).
  void linear_backward_weight(float* dw, const bf16* dy, const bf16* x, int64_t N, int64_t in, int64_t out);
  // db[out] += sum_n dy[n,:]   (f32): the GEMM dy^T @ ones[N], so the sum has cuBLASLt's fixed order.
  void bias_backward(float* db, const bf16* dy, int64_t N, int64_t out);

  // The same three GEMMs with FP8 operands (sm_89 and newer), as quantize_fp8 (kernels.h) writes them, each
  // with its dequant scale (one device float, 16-byte aligned): x, w in e4m3, dy in e5m2. cuBLASLt's FP8 GEMMs take both
  // operands with the contraction dimension contiguous, so the backward takes transposed copies: wt8[in,out],
  // dyt8[out,N], xt8[in,N]. The forward accumulates in "fast" mode, the backward with cuBLASLt's periodic
  // promotion to f32 (the gradients' smaller terms). Every dimension must be a multiple of 16.
  void linear_forward_fp8(bf16* y, const uint8_t* x8, const float* x_scale, const uint8_t* w8, const float* w_scale,
                          const bf16* bias, int64_t N, int64_t in, int64_t out);
  void linear_backward_input_fp8(bf16* dx, const uint8_t* dy8, const float* dy_scale, const uint8_t* wt8,
                                 const float* w_scale, int64_t N, int64_t in, int64_t out);
  void linear_backward_weight_fp8(float* dw, const uint8_t* dyt8, const float* dy_scale, const uint8_t* xt8,
                                  const float* x_scale, int64_t N, int64_t in, int64_t out);

  // Distinct GEMM configurations planned so far (each costs one heuristic query, once).
  size_t cached_plans() const;

  // From now on, each new GEMM configuration takes the fastest of the first kTuneCandidates algorithms
  // cuBLASLt's heuristic proposes, not its first: they are timed once, on scratch operands of the same shape
  // (allocated and freed around the timing, and only when the device has the room: otherwise the first is
  // taken and nothing is recorded), and the choice is kept in the JSON file `cache_path` under this GPU and
  // cuBLASLt version. Later runs read the choice from there without timing, so runs sharing the file run the
  // same algorithms and stay bitwise equal to each other.
  static constexpr int kTuneCandidates = 16;
  void enable_tuning(const std::string& cache_path);
  struct TuningStats {
    int measured = 0;  // configurations timed now
    int cached = 0;    // read from the file
    int skipped = 0;   // no room for the scratch operands: the heuristic's first
    double first_us = 0, chosen_us = 0;  // of the configurations timed now, once each
  };
  TuningStats tuning_stats() const;

 private:
  struct Impl;  // the handle, the workspace and the cache of planned GEMMs (matmul_cublaslt.cpp)
  std::unique_ptr<Impl> impl_;
};

}  // namespace tk::cuda
