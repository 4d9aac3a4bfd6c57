// CudaOps' state, shared by the two files that define its ops (cuda_ops.cpp; cuda_ops_linear.cpp, the ops that run
// GEMMs): the stream, memory, the building blocks and the scratch buffers. Not part of the backend's interface.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device_alloc.h"
#include "ops/cuda/device_memory.h"
#include "ops/cuda/fp8_linears.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/matmul_cublaslt.h"
#include "ops/cuda/workspace_sizes.h"

namespace tk {

// An AdamW segment table on the device, one per distinct segment list (the offloaded update's chunks
// each have their own), uploaded once.
struct AdamWTable {
  std::vector<cuda::AdamWSegment> host;
  void* device = nullptr;
  int blocks = 0;
};

struct CudaOps::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::DeviceMemory> memory;
  cuda::DeviceAlloc alloc;  // hands CudaOps::allocate / release to the building blocks

  std::unique_ptr<cuda::Matmul> matmul;
  std::string gemm_tuning_path;  // "" when GEMM tuning is off
  std::unique_ptr<cuda::CudnnAttention> attention;

  // Scratch, each with GrowingBuffer's rule. `transient` holds the LM head's logits chunk during
  // lm_head_cross_entropy and the FP8 operands during a linear op (workspace_sizes.h).
  cuda::GrowingBuffer staging, embedding_scratch, rmsnorm_scratch, rope_scratch, rope_table, transient,
      grad_norm_scratch, moment_book, attention_scratch;
  cuda::RopeTable rope_table_view;      // what rope_table holds: the angles for positions below max_pos
  std::vector<double> rope_table_freq;  // of these frequencies
  size_t logits_budget = cuda::kLogitsChunkBudgetBytes;
  std::vector<AdamWTable> adamw_tables;
  static constexpr const char* kTransientLabel = "LM head logits chunk / FP8 operands (shared)";

  std::unique_ptr<cuda::Fp8Linears> fp8;

  const cuda::RopeTable& rope_table_for(int max_pos, const std::vector<double>& inv_freq);
};


namespace cuda_ops {

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data);
}

// Rows of the last dimension: x[..., d] has numel / d rows.
inline int64_t rows_of(const Tensor& x, int64_t d, const char* op) {
  TK_CHECK(d > 0 && x.numel() % d == 0, "{}: {} is not rows of width {}", op, x.describe(), d);
  return x.numel() / d;
}

}  // namespace cuda_ops
}  // namespace tk
