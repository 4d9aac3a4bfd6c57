// What the GPU tests compare with: bf16 rounding as the device stores it (core/bf16.h's rule) and the relative error
// of a CUDA result against the CPU reference's.
#pragma once
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "core/bf16.h"

namespace tk {

// The float a bf16 tensor holds for f: round to nearest even.
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// ||out - ref|| / ||ref|| (||out - ref|| where ref is all zeros); infinite when out holds a non-finite value.
inline double rel_error(const float* out, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
inline double rel_error(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  return rel_error(out.data(), ref.data(), ref.size());
}

}  // namespace tk
