// The formatting rules of format.h: thresholds and precision chosen so a figure keeps three or four
// significant digits and its unit.
#include "core/format.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

namespace tk {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    u++;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

std::string format_bytes_decimal(double bytes) {
  if (bytes < 1e3) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1e6) return fmt::format("{:.1f} KB", bytes / 1e3);
  if (bytes < 1e9) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.2f} GB", bytes / 1e9);
}

std::string format_count(double n) {
  if (n < 1e3) return fmt::format("{:.0f}", n);
  if (n < 1e6) return fmt::format("{:.1f}K", n / 1e3);
  if (n < 1e9) return fmt::format("{:.2f}M", n / 1e6);
  return fmt::format("{:.2f}B", n / 1e9);
}

std::string format_flop_rate(double flops_per_s, bool gpu) {
  return gpu ? fmt::format("{:.1f} TFLOP/s", flops_per_s / 1e12) : fmt::format("{:.2f} GFLOP/s", flops_per_s / 1e9);
}

std::string format_flop_rate(double flops_per_s) { return format_flop_rate(flops_per_s, flops_per_s >= 1e12); }

std::string format_clock(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}:{:02}", s / 60, s % 60);
  return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds)) return "–";
  if (seconds < 60) return fmt::format("{:.1f} s", seconds);
  const int64_t t = int64_t(seconds);
  if (t < 3600) return fmt::format("{}m {:02}s", t / 60, t % 60);
  return fmt::format("{}h {:02}m", t / 3600, (t % 3600) / 60);
}

std::string format_short_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds >= 60) return format_duration(seconds);
  if (seconds >= 1) return fmt::format("{:.2f} s", seconds);
  if (seconds >= 1e-3) return fmt::format("{:.1f} ms", seconds * 1e3);
  return fmt::format("{:.0f} µs", seconds * 1e6);
}

}  // namespace tk
