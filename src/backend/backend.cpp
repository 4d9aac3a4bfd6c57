// Backend selection and settings: the CUDA backend when asked for (or when "auto" finds a GPU), else CpuOps<float>.
#include "backend/backend.h"

#include "core/cache.h"
#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/device_info.h"

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels.h"
#endif

namespace tk {
namespace {

Backend cuda_backend() {
#ifdef TK_HAVE_CUDA
  // The device this process was given: a data-parallel rank's communicator has set its local rank's
  // (docs/distributed.md); otherwise the first.
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // leave no sticky error behind
    device = 0;
  }
  return {make_cuda_ops(device), true};
#else
  fail("--device cuda: this build of tokamak has no CUDA backend (it was built without nvcc or cuDNN)");
#endif
}

#ifdef TK_HAVE_CUDA
CudaOps* as_cuda(Ops& ops) { return dynamic_cast<CudaOps*>(&ops); }
#endif

}  // namespace

Backend make_backend(const std::string& device) {
  TK_CHECK(device == "auto" || device == "cpu" || device == "cuda", "--device must be auto, cpu or cuda, not '{}'",
           device);
  if (device == "cpu") return {make_cpu_ops(DType::F32), false};
  const bool have_gpu = gpu_count() > 0;
  if (device == "cuda") {
    TK_CHECK(have_gpu, "--device cuda: no CUDA GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    return cuda_backend();
  }
  return have_gpu ? cuda_backend() : Backend{make_cpu_ops(DType::F32), false};
}

bool backend_is_gpu(const std::string& device) { return device == "cuda" || (device == "auto" && gpu_count() > 0); }

void configure_backend(Ops& ops, const BackendOptions& s) {
#ifdef TK_HAVE_CUDA
  if (CudaOps* cuda = as_cuda(ops)) {
    if (s.gemm_tuning) cuda->enable_gemm_tuning(gemm_tuning_cache_path());
    const MatmulPrecision& p = s.precision;
    if (p.fp8) {
      cuda->set_fp8(true, p.delayed ? CudaOps::Fp8Scaling::Delayed : CudaOps::Fp8Scaling::Current, p.margin);
      cuda->set_fp8_lm_head(p.lm_head);
    }
    if (s.logits_chunk_bytes > 0) cuda->set_logits_chunk_budget(s.logits_chunk_bytes);
    return;
  }
#endif
  TK_CHECK(!s.precision.fp8,
           "--fp8 needs the CUDA backend (a GPU with FP8 tensor cores); the CPU backend computes in f32");
}

std::string gemm_tuning_summary(Ops& ops) {
#ifdef TK_HAVE_CUDA
  if (CudaOps* cuda = as_cuda(ops)) return cuda->gemm_tuning_summary();
#endif
  return "";
}

std::string gemm_tuning_cache_path() { return cache::path_of("gemm-algorithms.json"); }

int own_attention_backward_sms(const Backend& be) {
#ifdef TK_HAVE_CUDA
  if (be.gpu) return cuda::attention_backward_fused_sms();
#endif
  return 0;
}

int64_t fp8_recasts(Ops& ops) {
#ifdef TK_HAVE_CUDA
  if (CudaOps* cuda = as_cuda(ops)) return cuda->fp8_recasts();
#endif
  return -1;
}

}  // namespace tk
