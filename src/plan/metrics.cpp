// Metrics: the peak rate from the GPU table (gpu_specs.h), device and memory queries, and the per-step throughput
// arithmetic.
#include "plan/metrics.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "ops/device_info.h"
#include "plan/gpu_specs.h"

namespace tk {
namespace {

size_t process_rss_bytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  int got = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  return got == 2 ? size_t(pages_resident) * size_t(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

int hopper_multiprocessors(const std::string& device_name) {
  const GpuSpec* g = gpu_spec_by_device_name(device_name);
  return g && g->cc_major == 9 && g->cc_minor == 0 ? g->sms : 0;
}

double gpu_peak_flops(const std::string& device_name) {
  const GpuSpec* g = gpu_spec_by_device_name(device_name);
  return g ? g->bf16_tflops * 1e12 : 0;
}

DeviceInfo describe_device(bool gpu, double peak_override) {
  DeviceInfo d;
  d.gpu = gpu;
  d.name = "cpu";
  if (gpu) {
    if (const std::optional<GpuInfo> g = current_gpu()) {
      d.name = g->name;
      d.memory_bytes = g->memory_bytes;
    }
    d.peak_flops = gpu_peak_flops(d.name);
  }
  if (peak_override > 0) d.peak_flops = peak_override;
  return d;
}

size_t memory_in_use_bytes(bool gpu) {
  if (!gpu) return process_rss_bytes();
  const std::optional<GpuMemory> m = gpu_memory();
  return m ? m->total_bytes - m->free_bytes : 0;
}

ThroughputModel::ThroughputModel(const ModelConfig& cfg, int seq_len, const DeviceInfo& device,
                                 double recompute_flops_per_token, int devices)
    : device_(device),
      devices_(devices),
      model_flops_per_token_(cfg.flops_per_token(seq_len)),
      recompute_flops_per_token_(recompute_flops_per_token) {}

std::string ThroughputModel::peak_description() const {
  if (!device_.gpu && device_.peak_flops <= 0) return "on the CPU: achieved GFLOP/s is reported instead of MFU";
  if (device_.peak_flops <= 0)
    return fmt::format("no peak rate is known for '{}': no MFU (give it with --peak-tflops)", device_.name);
  if (devices_ > 1)
    return fmt::format("MFU against {} x {:.1f} TFLOP/s, the dense bf16 peak of each rank's {}", devices_,
                       device_.peak_flops / 1e12, device_.name);
  return fmt::format("MFU against {:.1f} TFLOP/s, the dense bf16 peak of {}", device_.peak_flops / 1e12, device_.name);
}

StepMetrics ThroughputModel::measure(int64_t tokens, double seconds, double data_wait_s) const {
  StepMetrics m;
  m.tokens_per_s = seconds > 0 ? double(tokens) / seconds : 0;
  m.achieved_flops = model_flops_per_token_ * m.tokens_per_s;
  if (device_.peak_flops > 0) {
    const double peak = device_.peak_flops * devices_;
    m.mfu = m.achieved_flops / peak;
    m.hfu = hardware_flops_per_token() * m.tokens_per_s / peak;
  }
  m.data_wait_s = data_wait_s;
  m.memory_bytes = memory_in_use_bytes(device_.gpu);
  return m;
}

}  // namespace tk
