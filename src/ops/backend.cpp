// Backend selection: the CUDA backend when asked for (or when "auto" finds a GPU), else CpuOps<float>.
#include "ops/backend.h"

#include "core/cache.h"
#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/device_info.h"

#ifdef TK_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels.h"
#endif

namespace tk {
namespace {

Backend cuda_backend() {
#ifdef TK_HAVE_CUDA
  return {make_cuda_ops(), true};
#else
  fail("--device cuda: this build of tokamak has no CUDA backend (it was built without nvcc or cuDNN)");
#endif
}

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

bool backend_is_gpu(const std::string& device) {
  return device == "cuda" || (device == "auto" && gpu_count() > 0);
}

void enable_gemm_tuning(Ops& ops, const std::string& cache_path) {
#ifdef TK_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) cuda->enable_gemm_tuning(cache_path);
#else
  (void)ops, (void)cache_path;
#endif
}

std::string gemm_tuning_summary(Ops& ops) {
#ifdef TK_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) return cuda->gemm_tuning_summary();
#else
  (void)ops;
#endif
  return "";
}

std::string gemm_tuning_cache_path() { return cache::path_of("gemm-algorithms.json"); }

int own_attention_backward_sms(const Backend& be) {
#ifdef TK_HAVE_CUDA
  if (be.gpu) return cuda::attention_backward_fused_sms();
#endif
  (void)be;
  return 0;
}

int64_t fp8_recasts(Ops& ops) {
#ifdef TK_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) return cuda->fp8_recasts();
#endif
  (void)ops;
  return -1;
}

void enable_fp8(Ops& ops, const std::string& scaling, int margin, bool lm_head) {
  TK_CHECK(scaling == "current" || scaling == "delayed", "--fp8-scaling is '{}': it must be current or delayed",
           scaling);
  TK_CHECK(margin >= 0 && margin <= 8, "--fp8-margin is {}: it must be 0 to 8", margin);
#ifdef TK_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) {
    cuda->set_fp8(true, scaling == "delayed" ? CudaOps::Fp8Scaling::Delayed : CudaOps::Fp8Scaling::Current, margin);
    cuda->set_fp8_lm_head(lm_head);
    return;
  }
#endif
  (void)ops;
  throw Error("--fp8 needs the CUDA backend (a GPU with FP8 tensor cores); the CPU backend computes in f32");
}

void set_logits_chunk_budget(Ops& ops, size_t bytes) {
#ifdef TK_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) cuda->set_logits_chunk_budget(bytes);
#else
  (void)ops, (void)bytes;
#endif
}

}  // namespace tk
