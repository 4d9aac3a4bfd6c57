// The failure paths of TK_CUDA_CHECK, TK_CUBLAS_CHECK, TK_CUDNN_CHECK and TK_CUDA_REQUIRE: a status or a
// printf-formatted message turned into the tk::Error sentence the user sees.
#include "ops/cuda/cuda_check.h"

#include <cstdarg>
#include <cstdio>

#include <cublasLt.h>
#include <cudnn.h>

#include "core/error.h"

namespace tk::cuda {

void fail_cuda_call(cudaError_t err, const char* call, const char* file, int line) {
  // Kernel faults surface at a later call; CUDA_LAUNCH_BLOCKING=1 makes them surface at their launch.
  const bool kernel_fault = err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure ||
                            err == cudaErrorMisalignedAddress || err == cudaErrorIllegalInstruction ||
                            err == cudaErrorAssert;
  fail("CUDA call {} failed at {}:{}: {} ({}).{}", call, file, line, cudaGetErrorString(err), cudaGetErrorName(err),
       kernel_fault ? " The fault may come from an earlier kernel: rerun with CUDA_LAUNCH_BLOCKING=1 to find it." : "");
}

void fail_printf(const char* format, ...) {
  char message[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  throw Error(message);
}

void fail_cublas_call(int status, const char* call, const char* file, int line) {
  fail("cuBLAS call {} failed at {}:{}: {} (status {}). A matrix shape, alignment or data type the library "
       "does not support, or an earlier CUDA error, is the usual cause.",
       call, file, line, cublasLtGetStatusString(static_cast<cublasStatus_t>(status)), status);
}

void fail_cudnn_call(int status, const char* call, const char* file, int line) {
  fail("cuDNN call {} failed at {}:{}: {} (status {}). Run with CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr "
       "for cuDNN's own explanation.",
       call, file, line, cudnnGetErrorString(static_cast<cudnnStatus_t>(status)), status);
}

int sm_count() {
  constexpr int kMaxDevices = 64;
  static int counts[kMaxDevices] = {};
  int dev = 0;
  TK_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  if (counts[dev] == 0) TK_CUDA_CHECK(cudaDeviceGetAttribute(&counts[dev], cudaDevAttrMultiProcessorCount, dev));
  return counts[dev];
}

}  // namespace tk::cuda
