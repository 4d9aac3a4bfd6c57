// The GPU this process computes on, as the reports and the choice of backend need it (its name for the peak-rate
// table and the ceilings' cache, its memory, its FP8 tensor cores): the one place outside the CUDA backend that
// asks the driver. Every function is safe on a machine without a GPU or a driver, and in a build without CUDA.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace tk {

struct GpuInfo {
  std::string name;          // "NVIDIA H200"
  int sm_count = 0;          // streaming multiprocessors
  int cc_major = 0, cc_minor = 0;  // compute capability
  size_t memory_bytes = 0;   // the device's memory
  // FP8 tensor cores arrived with compute capability 8.9 (Ada) and 9.0 (Hopper).
  bool fp8_tensor_cores() const { return cc_major * 10 + cc_minor >= 89; }
};

// CUDA devices visible to this process (0 without a driver or a CUDA build).
int gpu_count();
// The current CUDA device, or nothing when there is none.
std::optional<GpuInfo> current_gpu();

// The current device's memory as the driver reports it (every process's use counted), or nothing without one.
struct GpuMemory {
  size_t free_bytes = 0, total_bytes = 0;
};
std::optional<GpuMemory> gpu_memory();

}  // namespace tk
