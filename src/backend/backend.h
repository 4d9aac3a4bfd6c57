// Choosing the compute backend from --device ("cpu", "cuda", or "auto": CUDA when this build has it and a GPU is
// present, else the CPU), and applying the settings a recipe asks of it (plan/recipe.h): the precision, GEMM
// tuning and the LM head's logits chunk. Above both backends: with dist/nccl (whose communicator runs on CudaOps'
// queues) the only code outside src/ops/cuda that knows CudaOps.
#pragma once
#include <cstddef>
#include <cstdint>
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

// The precision of the linear layers' and the LM head's GEMMs (bf16 unless fp8).
struct MatmulPrecision {
  bool fp8 = false;      // the linear layers' GEMMs in FP8 (CUDA, compute capability 8.9 or newer)
  bool delayed = true;   // delayed scaling, else current (cuda::Fp8Scaling)
  int margin = 1;        // delayed scaling's headroom: the scale from 2^margin times the history's amax
  bool lm_head = false;  // with fp8, the LM head's GEMMs in FP8 too (CudaOps::set_fp8_lm_head)

  bool delayed_fp8() const { return fp8 && delayed; }
  bool fp8_lm_head() const { return fp8 && lm_head; }
  const char* scaling_name() const { return delayed ? "delayed" : "current"; }
};

struct BackendOptions {
  MatmulPrecision precision;
  bool gemm_tuning = false;       // GEMM algorithms chosen by timing once per shape, kept in gemm_tuning_cache_path()
  size_t logits_chunk_bytes = 0;  // the CUDA LM head's bf16 logits chunk; 0: its default (512 MiB)
};
// Applies the settings before the first op: a tk::Error for FP8 on the CPU backend or on a GPU without FP8 tensor
// cores. GEMM tuning and the logits chunk change nothing on the CPU.
void configure_backend(Ops& ops, const BackendOptions& settings);

// A line on what GEMM tuning did ("" when off or on the CPU).
std::string gemm_tuning_summary(Ops& ops);
// The default file of the GEMM choices: gemm-algorithms.json in tokamak's cache folder (core/cache.h).
std::string gemm_tuning_cache_path();
// The SM count when the backend runs its own attention backward on this device (CUDA, Hopper code built, a 9.0
// device, not turned off by TOKAMAK_ATTENTION_BACKWARD=cudnn; for head_dim 64 and T % 128 == 0), else 0: what the
// memory plan needs to know which attention workspace to count (PlanTarget::own_attention_sms).
int own_attention_backward_sms(const Backend& be);
// The casts delayed scaling's guards have done again over the steps so far (-1 when the backend keeps no count).
int64_t fp8_recasts(Ops& ops);

}  // namespace tk
