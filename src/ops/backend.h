// Choosing the compute backend from --device: "cpu", "cuda", or "auto" (CUDA when this build has it
// and a GPU is present, else the CPU), and its settings. Shared by train, eval, generate and bench; the one place
// outside src/ops/cuda that knows CudaOps.
#pragma once
#include <memory>
#include <string>

#include "ops/ops.h"

namespace tk {

struct Backend {
  std::unique_ptr<Ops> ops;
  bool gpu = false;
};

// A tk::Error when "cuda" is asked of a build without CUDA or a machine without a GPU.
Backend make_backend(const std::string& device);
// Whether make_backend(device) picks the GPU, without making the backend.
bool backend_is_gpu(const std::string& device);
// The CUDA LM head's bf16 logits chunk (bytes; 512 MiB unless set): larger chunks mean fewer, larger GEMMs
// and fewer passes over the f32 LM-head gradient, for more memory. No effect on the CPU backend.
void set_logits_chunk_budget(Ops& ops, size_t bytes);
// GEMM algorithms chosen by timing once per shape and kept in the cache file `cache_path` (CUDA; see
// cuda::Matmul::enable_tuning), before the first GEMM; and a line on what it did ("" when off or on the CPU).
void enable_gemm_tuning(Ops& ops, const std::string& cache_path);
std::string gemm_tuning_summary(Ops& ops);
// The default file of the GEMM choices: gemm-algorithms.json in tokamak's cache folder (core/cache.h).
std::string gemm_tuning_cache_path();
// The linear layers' GEMMs in FP8 (CudaOps::set_fp8) with "current" or "delayed" scaling: a tk::Error on
// the CPU backend, a GPU without FP8 tensor cores, or another scaling name.
// margin: delayed scaling's headroom, the scale's amax 2^margin times the history's (CudaOps::set_fp8).
// lm_head: the LM head's GEMMs in FP8 as well (CudaOps::set_fp8_lm_head).
void enable_fp8(Ops& ops, const std::string& scaling = "current", int margin = 0, bool lm_head = false);
// The SM count when the backend runs its own attention backward on this device (CUDA, Hopper code built, a 9.0
// device, not turned off by TOKAMAK_ATTENTION_BACKWARD=cudnn; for head_dim 64 and T % 128 == 0), else 0: what the
// memory plan needs to know which attention workspace to count (PlanTarget::own_attention_sms).
int own_attention_backward_sms(const Backend& be);
// The casts delayed scaling's guards have done again over the steps so far (-1 when the backend keeps no count).
int64_t fp8_recasts(Ops& ops);

}  // namespace tk
