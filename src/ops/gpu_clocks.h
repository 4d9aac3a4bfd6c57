// What the GPU's clock and power did while steps ran: a GPU at its power or temperature limit lowers its clock, and
// every kernel then runs at that clock's rate, whatever the kernel. Sampled from NVML (the driver's management
// library, opened at run time: a machine without a driver or a GPU samples nothing) on a thread of its own, and
// summarized for the profile (profile_report.h). The summary's arithmetic is separate, so that it is tested on a
// machine without a GPU.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tk {

// Why the clock is below its maximum: NVML's clock event reasons (a bit set; the values are NVML's).
namespace clock_reason {
constexpr uint64_t kPowerCap = 0x4;           // the board's power limit (software)
constexpr uint64_t kHwSlowdown = 0x8;         // a hardware slowdown: temperature or power brake
constexpr uint64_t kThermal = 0x20 | 0x40;    // the temperature limit (software and hardware)
constexpr uint64_t kPowerBrake = 0x80;        // an external power brake
}  // namespace clock_reason

struct ClockSample {
  double sm_mhz = 0;           // the SM clock now
  double power_w = 0;          // the board's power draw (NVML's own average)
  uint64_t reasons = 0;        // clock_reason bits
  double temperature_c = 0;
};

// What held the clock back over a summary's samples.
enum class ClockLimit { None, Power, Temperature };

struct ClockSummary {
  int samples = 0;
  double max_sm_mhz = 0;       // the highest SM clock the GPU runs at (its boost clock)
  double power_limit_w = 0;    // the power limit in force
  double sm_mhz_mean = 0, sm_mhz_min = 0;
  double power_w_mean = 0, temperature_c_max = 0;
  // Shares of the samples whose clock was held back by the power limit, and by temperature or a hardware slowdown.
  double power_capped_share = 0, thermal_share = 0;

  bool empty() const { return samples == 0; }
  double clock_share() const { return max_sm_mhz > 0 ? sm_mhz_mean / max_sm_mhz : 0; }
  // Power or Temperature when the clock ran under 97% of its maximum and that limit held it back in at least half of
  // the samples; None otherwise.
  ClockLimit limit() const;
  // limit() in words: "the power limit", "the temperature limit", or "".
  std::string held_back_by() const;
};

// The summary of samples taken at a steady period (pure arithmetic).
ClockSummary summarize_clocks(const std::vector<ClockSample>& samples, double max_sm_mhz, double power_limit_w);
// The summary of both summaries' samples together (a run's steps, one at a time).
ClockSummary merge_clocks(const ClockSummary& a, const ClockSummary& b);
// "SM 1611 MHz on average (lowest 1470), 81% of its 1980 MHz maximum; power 693 W of its 700 W limit; held back by
// the power limit in 100% of the samples" ("" when empty).
std::string describe_clocks(const ClockSummary& c);

// Samples the current CUDA device every `period` between start() and stop() on a thread of its own. available() is
// false (and stop() returns an empty summary) where NVML or the device cannot be read.
class ClockSampler {
 public:
  explicit ClockSampler(std::chrono::milliseconds period = std::chrono::milliseconds(20));
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  bool available() const;
  void start();
  // The samples since start() or the last take(), summarized and dropped; the sampling goes on.
  ClockSummary take();
  // Ends the sampling; the summary of the samples not yet taken.
  ClockSummary stop();

 private:
  struct Device;  // the NVML library and the device's handle
  void loop();

  std::unique_ptr<Device> device_;
  std::chrono::milliseconds period_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool running_ = false;
  std::vector<ClockSample> samples_;
};

}  // namespace tk
