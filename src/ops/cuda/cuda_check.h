// TK_CUDA_CHECK: every CUDA runtime call and kernel launch goes through it, so that a failure names the
// call, the file and line it was made at and what CUDA said, as a tk::Error the CLI prints.
// The failure paths live in cuda_check.cpp: nvcc 13 cannot compile fmt's compile-time format strings,
// so .cu files must not include core/error.h and use TK_CUDA_REQUIRE (printf-style) instead of TK_CHECK.
#pragma once
#include <cuda_runtime.h>

namespace tk::cuda {

// Throws tk::Error: "CUDA call <call> failed at <file>:<line>: <what CUDA says> (<error name>)".
[[noreturn]] void fail_cuda_call(cudaError_t err, const char* call, const char* file, int line);
// Throws tk::Error with a printf-formatted message.
[[noreturn]] void fail_printf(const char* format, ...) __attribute__((format(printf, 1, 2)));
// The TK_CUDA_CHECK failure of cuBLAS(Lt) and cuDNN calls; the status is passed as its integer value so
// that this header does not pull cublasLt.h or cudnn.h into every kernel file.
[[noreturn]] void fail_cublas_call(int status, const char* call, const char* file, int line);
[[noreturn]] void fail_cudnn_call(int status, const char* call, const char* file, int line);

// The current device's streaming multiprocessors (asked once per device).
int sm_count();

}  // namespace tk::cuda

#define TK_CUDA_CHECK(call)                                                                              \
  do {                                                                                                   \
    cudaError_t tk_cuda_err_ = (call);                                                                   \
    if (tk_cuda_err_ != cudaSuccess) ::tk::cuda::fail_cuda_call(tk_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports a bad launch configuration at once (faults inside the kernel surface
// at the next synchronising call, which is checked too).
#define TK_CUDA_CHECK_LAUNCH() TK_CUDA_CHECK(cudaGetLastError())

// TK_CUDA_REQUIRE(cond, "printf format", args...): the TK_CHECK of .cu files.
#define TK_CUDA_REQUIRE(cond, ...)                    \
  do {                                                \
    if (!(cond)) ::tk::cuda::fail_printf(__VA_ARGS__); \
  } while (0)

// cuBLAS / cuBLASLt calls: any status other than CUBLAS_STATUS_SUCCESS (0) fails.
#define TK_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                               \
    int tk_cublas_status_ = static_cast<int>(call);                                                  \
    if (tk_cublas_status_ != 0) ::tk::cuda::fail_cublas_call(tk_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

// cuDNN calls: any status other than CUDNN_STATUS_SUCCESS (0) fails.
#define TK_CUDNN_CHECK(call)                                                                         \
  do {                                                                                               \
    int tk_cudnn_status_ = static_cast<int>(call);                                                   \
    if (tk_cudnn_status_ != 0) ::tk::cuda::fail_cudnn_call(tk_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (0)
