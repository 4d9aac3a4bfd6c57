// Sizes, counts, rates and durations as tokamak prints them: one rule for each, used by every terminal
// line, log message and report page, so the same quantity always reads the same way.
#pragma once
#include <string>

namespace tk {

// "1.50 GiB", "512 B": binary units, for memory (device buffers, plans, budgets).
std::string format_bytes(double bytes);
// "1.2 MB", "834 KB", "3.40 GB": decimal units, for files read and MB/s rates, as they are usually quoted.
std::string format_bytes_decimal(double bytes);
// "950", "12.3K", "4.56M", "1.20B".
std::string format_count(double n);
// "123.4 TFLOP/s" on a GPU, "12.34 GFLOP/s" on the CPU.
std::string format_flop_rate(double flops_per_s, bool gpu);
// A rate whatever the device: in TFLOP/s from 1 TFLOP/s, below it in GFLOP/s ("91.03 GFLOP/s", a CPU's).
std::string format_flop_rate(double flops_per_s);
// "42s", "3:07", "2:03:07": a progress line's ETA and time taken.
std::string format_clock(double seconds);
// "12.3 s", "3m 07s", "2h 03m"; "–" when not finite: a run's wall time in its report.
std::string format_duration(double seconds);
// "850 µs", "12.3 ms", "4.56 s", then as format_duration from a minute: a time that may be far under a second
// (communication, waiting for data).
std::string format_short_duration(double seconds);

}  // namespace tk
