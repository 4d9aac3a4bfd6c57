// The GPU's clock and power over time (gpu_clocks.h), read from NVML through dlopen, so that the binary needs no
// NVML at build or run time: libnvidia-ml comes with the driver, and where it is missing nothing is sampled.
#include "ops/gpu_clocks.h"

#include <dlfcn.h>

#include <algorithm>

#include <fmt/format.h>

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tk {

ClockLimit ClockSummary::limit() const {
  if (empty() || clock_share() >= 0.97) return ClockLimit::None;
  if (power_capped_share >= 0.5) return ClockLimit::Power;
  if (thermal_share >= 0.5) return ClockLimit::Temperature;
  return ClockLimit::None;
}

std::string ClockSummary::held_back_by() const {
  switch (limit()) {
    case ClockLimit::Power: return "the power limit";
    case ClockLimit::Temperature: return "the temperature limit";
    case ClockLimit::None: break;
  }
  return "";
}

ClockSummary summarize_clocks(const std::vector<ClockSample>& samples, double max_sm_mhz, double power_limit_w) {
  ClockSummary s;
  s.max_sm_mhz = max_sm_mhz;
  s.power_limit_w = power_limit_w;
  s.samples = int(samples.size());
  if (samples.empty()) return s;
  s.sm_mhz_min = samples.front().sm_mhz;
  int capped = 0, thermal = 0;
  for (const ClockSample& c : samples) {
    s.sm_mhz_mean += c.sm_mhz;
    s.power_w_mean += c.power_w;
    s.sm_mhz_min = std::min(s.sm_mhz_min, c.sm_mhz);
    s.temperature_c_max = std::max(s.temperature_c_max, c.temperature_c);
    capped += (c.reasons & (clock_reason::kPowerCap | clock_reason::kPowerBrake)) != 0;
    thermal += (c.reasons & (clock_reason::kThermal | clock_reason::kHwSlowdown)) != 0;
  }
  const double n = double(samples.size());
  s.sm_mhz_mean /= n;
  s.power_w_mean /= n;
  s.power_capped_share = capped / n;
  s.thermal_share = thermal / n;
  return s;
}

ClockSummary merge_clocks(const ClockSummary& a, const ClockSummary& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  const double na = a.samples, nb = b.samples, n = na + nb;
  auto mean = [&](double x, double y) { return (x * na + y * nb) / n; };
  ClockSummary s;
  s.samples = a.samples + b.samples;
  s.max_sm_mhz = std::max(a.max_sm_mhz, b.max_sm_mhz);
  s.power_limit_w = std::max(a.power_limit_w, b.power_limit_w);
  s.sm_mhz_mean = mean(a.sm_mhz_mean, b.sm_mhz_mean);
  s.sm_mhz_min = std::min(a.sm_mhz_min, b.sm_mhz_min);
  s.power_w_mean = mean(a.power_w_mean, b.power_w_mean);
  s.temperature_c_max = std::max(a.temperature_c_max, b.temperature_c_max);
  s.power_capped_share = mean(a.power_capped_share, b.power_capped_share);
  s.thermal_share = mean(a.thermal_share, b.thermal_share);
  return s;
}

std::string describe_clocks(const ClockSummary& c) {
  if (c.empty()) return "";
  std::string out = fmt::format("SM {:.0f} MHz on average (lowest {:.0f}), {:.0f}% of its {:.0f} MHz maximum",
                                c.sm_mhz_mean, c.sm_mhz_min, 100 * c.clock_share(), c.max_sm_mhz);
  if (c.power_limit_w > 0) out += fmt::format("; power {:.0f} W of its {:.0f} W limit", c.power_w_mean, c.power_limit_w);
  if (c.limit() != ClockLimit::None)
    out += fmt::format("; held back by {} in {:.0f}% of the samples", c.held_back_by(),
                       100 * (c.limit() == ClockLimit::Power ? c.power_capped_share : c.thermal_share));
  return out;
}

// ---- NVML, opened at run time ------------------------------------------------------------------------------------

namespace {
// NVML's C interface as far as it is used here (nvml.h: every call returns 0 on success; a device is a handle).
using NvmlDevice = struct NvmlDeviceOpaque*;
using InitFn = int (*)();
using HandleByBusFn = int (*)(const char*, NvmlDevice*);
using ClockFn = int (*)(NvmlDevice, int, unsigned*);  // nvmlDeviceGet[Max]ClockInfo(device, NVML_CLOCK_SM, MHz)
using PowerFn = int (*)(NvmlDevice, unsigned*);       // milliwatts
using ReasonsFn = int (*)(NvmlDevice, unsigned long long*);
using TemperatureFn = int (*)(NvmlDevice, int, unsigned*);  // sensor 0: the GPU die, degrees C
constexpr int kClockSm = 1;
}  // namespace

struct ClockSampler::Device {
  void* lib = nullptr;
  bool initialized = false;
  InitFn shutdown = nullptr;
  NvmlDevice handle = nullptr;
  ClockFn clock = nullptr;
  PowerFn power = nullptr;
  ReasonsFn reasons = nullptr;
  TemperatureFn temperature = nullptr;
  double max_sm_mhz = 0, power_limit_w = 0;

  template <typename F>
  F symbol(const char* name) const {
    return reinterpret_cast<F>(dlsym(lib, name));
  }

  // Opens NVML and finds the current CUDA device in it by its PCI bus id; false where any of it fails.
  bool open() {
#ifdef TK_HAVE_CUDA
    int dev = 0;
    char bus[32] = {};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    const auto init = symbol<InitFn>("nvmlInit_v2");
    shutdown = symbol<InitFn>("nvmlShutdown");
    const auto by_bus = symbol<HandleByBusFn>("nvmlDeviceGetHandleByPciBusId_v2");
    const auto max_clock = symbol<ClockFn>("nvmlDeviceGetMaxClockInfo");
    const auto limit = symbol<PowerFn>("nvmlDeviceGetEnforcedPowerLimit");
    clock = symbol<ClockFn>("nvmlDeviceGetClockInfo");
    power = symbol<PowerFn>("nvmlDeviceGetPowerUsage");
    reasons = symbol<ReasonsFn>("nvmlDeviceGetCurrentClocksEventReasons");
    if (!reasons) reasons = symbol<ReasonsFn>("nvmlDeviceGetCurrentClocksThrottleReasons");  // drivers before 535
    temperature = symbol<TemperatureFn>("nvmlDeviceGetTemperature");
    if (!init || !shutdown || !by_bus || !max_clock || !clock || init() != 0) return false;
    initialized = true;
    unsigned mhz = 0, mw = 0;
    if (by_bus(bus, &handle) != 0 || max_clock(handle, kClockSm, &mhz) != 0 || mhz == 0) return false;
    max_sm_mhz = mhz;
    if (limit && limit(handle, &mw) == 0) power_limit_w = mw / 1e3;
    return true;
#else
    return false;
#endif
  }

  ClockSample read() const {
    ClockSample c;
    unsigned v = 0;
    unsigned long long bits = 0;
    if (clock(handle, kClockSm, &v) == 0) c.sm_mhz = v;
    if (power && power(handle, &v) == 0) c.power_w = v / 1e3;
    if (reasons && reasons(handle, &bits) == 0) c.reasons = bits;
    if (temperature && temperature(handle, 0, &v) == 0) c.temperature_c = v;
    return c;
  }

  ~Device() {
    if (initialized) shutdown();
    if (lib) dlclose(lib);
  }
};

ClockSampler::ClockSampler(std::chrono::milliseconds period) : device_(std::make_unique<Device>()), period_(period) {
  if (!device_->open()) device_.reset();
}

ClockSampler::~ClockSampler() { stop(); }

bool ClockSampler::available() const { return device_ != nullptr; }

void ClockSampler::start() {
  if (!device_ || thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    samples_.clear();
    running_ = true;
  }
  thread_ = std::thread([this] { loop(); });
}

void ClockSampler::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (running_) {
    lock.unlock();
    const ClockSample c = device_->read();
    lock.lock();
    samples_.push_back(c);
    wake_.wait_for(lock, period_, [this] { return !running_; });
  }
}

ClockSummary ClockSampler::take() {
  if (!device_) return ClockSummary{};
  std::vector<ClockSample> taken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    taken.swap(samples_);
  }
  return summarize_clocks(taken, device_->max_sm_mhz, device_->power_limit_w);
}

ClockSummary ClockSampler::stop() {
  if (!device_) return ClockSummary{};
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
    }
    wake_.notify_all();
    thread_.join();
  }
  return take();
}

}  // namespace tk
