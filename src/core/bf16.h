// bf16 on the host: the top half of a float32, rounded to nearest even on the dropped half. The one rule for every
// host-side conversion (the CPU backend's copies, safetensors, the MPI reductions); the device's are CUDA's own
// intrinsics, and the moment codec keeps a host-and-device copy of the same rule (ops/moment_codec.h).
#pragma once
#include <bit>
#include <cstdint>

namespace tk {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// Add 0x7fff plus the lowest kept bit, then truncate. A NaN keeps its sign and stays NaN (the quiet bit is set, so
// truncation cannot make it an infinity).
inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

}  // namespace tk
