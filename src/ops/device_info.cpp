// Device information (device_info.h) from the CUDA runtime; nothing in a build without CUDA.
#include "ops/device_info.h"

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tk {

int gpu_count() {
#ifdef TK_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess) return n;
  cudaGetLastError();  // leave no sticky error behind for later calls
#endif
  return 0;
}

std::optional<GpuInfo> current_gpu() {
#ifdef TK_HAVE_CUDA
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    return GpuInfo{p.name, p.multiProcessorCount, p.major, p.minor, p.totalGlobalMem};
  cudaGetLastError();
#endif
  return std::nullopt;
}

std::optional<GpuMemory> gpu_memory() {
#ifdef TK_HAVE_CUDA
  GpuMemory m;
  if (cudaMemGetInfo(&m.free_bytes, &m.total_bytes) == cudaSuccess) return m;
  cudaGetLastError();
#endif
  return std::nullopt;
}

}  // namespace tk
