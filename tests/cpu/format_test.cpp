// The formatting rules every terminal line and page share: units, precision and where each unit starts.
#include "core/format.h"

#include <gtest/gtest.h>

#include <limits>

namespace tk {
namespace {

TEST(Format, BytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(1.5 * (1 << 30)), "1.50 GiB");
  EXPECT_EQ(format_bytes(2.0 * (1ull << 40)), "2.00 TiB");
}

TEST(Format, BytesInDecimalUnits) {
  EXPECT_EQ(format_bytes_decimal(999), "999 B");
  EXPECT_EQ(format_bytes_decimal(834e3), "834.0 KB");
  EXPECT_EQ(format_bytes_decimal(6.5e6), "6.5 MB");
  EXPECT_EQ(format_bytes_decimal(2.25e9), "2.25 GB");
}

TEST(Format, Counts) {
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_count(12'345), "12.3K");
  EXPECT_EQ(format_count(1.234e6), "1.23M");
  EXPECT_EQ(format_count(1.2e9), "1.20B");
}

TEST(Format, FlopRatesInTheDevicesUnit) {
  EXPECT_EQ(format_flop_rate(123.44e12, true), "123.4 TFLOP/s");
  EXPECT_EQ(format_flop_rate(12.3456e9, false), "12.35 GFLOP/s");
}

// Whatever the device: TFLOP/s, unless that reads 0.0 (a CPU's rate, a CPU's peak given for MFU).
TEST(Format, FlopRatesThatNeverReadZero) {
  EXPECT_EQ(format_flop_rate(123.44e12), "123.4 TFLOP/s");
  EXPECT_EQ(format_flop_rate(1e12), "1.0 TFLOP/s");
  EXPECT_EQ(format_flop_rate(0.091e12), "91.00 GFLOP/s");  // a CPU's matmul ceiling, not "0.1 TFLOP/s"
  EXPECT_EQ(format_flop_rate(0.04e12), "40.00 GFLOP/s");
  EXPECT_EQ(format_flop_rate(12.345e9), "12.35 GFLOP/s");
}

TEST(Format, ClockAndDuration) {
  EXPECT_EQ(format_clock(42), "42s");
  EXPECT_EQ(format_clock(187), "3:07");
  EXPECT_EQ(format_clock(3725), "1:02:05");
  EXPECT_EQ(format_duration(12.34), "12.3 s");
  EXPECT_EQ(format_duration(187), "3m 07s");
  EXPECT_EQ(format_duration(7380), "2h 03m");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::quiet_NaN()), "–");
  EXPECT_EQ(format_short_duration(0), "0 µs");
  EXPECT_EQ(format_short_duration(850e-6), "850 µs");
  EXPECT_EQ(format_short_duration(0.01234), "12.3 ms");
  EXPECT_EQ(format_short_duration(4.561), "4.56 s");
  EXPECT_EQ(format_short_duration(187), "3m 07s");
}

}  // namespace
}  // namespace tk
