// Metrics: the GPU peak table, device and memory queries, and the per-step throughput arithmetic.
#include "train/metrics.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>

#include <fmt/format.h>

#include "ops/device_info.h"

namespace tk {
namespace {

struct GpuPeak {
  const char* key;  // matched as a whole word sequence in the device name
  double flops;     // dense bf16 with fp32 accumulation, from the vendor's datasheet
};

// More specific names come first: "H100 PCIe" before "H100", "L40S" before "L40".
constexpr GpuPeak kGpuPeaks[] = {
    {"B200", 2250e12},        {"H100 NVL", 835e12},  {"H100 PCIe", 756e12},     {"H200 NVL", 835e12},
    {"H100", 989e12},         {"H200", 989e12},      {"GH200", 989e12},         {"A100", 312e12},
    {"A800", 312e12},         {"L40S", 362e12},      {"L40", 181e12},           {"L4", 121e12},
    {"A10", 125e12},          {"RTX 6000 Ada", 364.2e12}, {"RTX A6000", 154.8e12}, {"RTX 4090", 165.2e12},
    {"RTX 4080", 97.5e12},    {"RTX 4060 Ti", 44e12}, {"RTX 3090 Ti", 80e12},   {"RTX 3090", 71e12},
};

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// True when `key` occurs in `name` with no letter or digit right before or after it, so that "A10"
// does not match "A100" and "H200" does not match "GH200".
bool contains_word(const std::string& name, const std::string& key) {
  for (size_t at = name.find(key); at != std::string::npos; at = name.find(key, at + 1)) {
    bool starts = at == 0 || !is_word_char(name[at - 1]);
    size_t end = at + key.size();
    bool ends = end == name.size() || !is_word_char(name[end]);
    if (starts && ends) return true;
  }
  return false;
}

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
  struct Sms {
    const char* key;
    int sms;
  };
  // More specific names first, as in kGpuPeaks.
  constexpr Sms kHopper[] = {{"H100 PCIe", 114}, {"H100 NVL", 132}, {"H100", 132},
                             {"H200 NVL", 132},  {"H200", 132},     {"GH200", 132}};
  for (const Sms& h : kHopper)
    if (contains_word(device_name, h.key)) return h.sms;
  return 0;
}

double gpu_peak_flops(const std::string& device_name) {
  for (const GpuPeak& p : kGpuPeaks)
    if (contains_word(device_name, p.key)) return p.flops;
  return 0;
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
                                 double recompute_flops_per_token)
    : device_(device),
      model_flops_per_token_(cfg.flops_per_token(seq_len)),
      recompute_flops_per_token_(recompute_flops_per_token) {}

std::string ThroughputModel::peak_description() const {
  if (!device_.gpu && device_.peak_flops <= 0) return "on the CPU: achieved GFLOP/s is reported instead of MFU";
  if (device_.peak_flops <= 0)
    return fmt::format("no peak rate is known for '{}': no MFU (give it with --peak-tflops)", device_.name);
  return fmt::format("MFU against {:.1f} TFLOP/s, the dense bf16 peak of {}", device_.peak_flops / 1e12, device_.name);
}

StepMetrics ThroughputModel::measure(int64_t tokens, double seconds, double data_wait_s) const {
  StepMetrics m;
  m.tokens_per_s = seconds > 0 ? double(tokens) / seconds : 0;
  m.achieved_flops = model_flops_per_token_ * m.tokens_per_s;
  if (device_.peak_flops > 0) {
    m.mfu = m.achieved_flops / device_.peak_flops;
    m.hfu = hardware_flops_per_token() * m.tokens_per_s / device_.peak_flops;
  }
  m.data_wait_s = data_wait_s;
  m.memory_bytes = memory_in_use_bytes(device_.gpu);
  return m;
}

}  // namespace tk
