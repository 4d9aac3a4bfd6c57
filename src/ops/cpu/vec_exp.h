// exp for the CPU ops' hot loops (softmax in the LM head and attention, SiLU), in a form that `omp simd`
// loops vectorise: GCC vectorises neither a call to expf nor, under its default -ftrapping-math, a
// float comparison. Without it the LM head spends more time in exp than in its GEMMs.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace tk::cpu {

// exp(x) for float, within 1 ulp of expf for |x| <= 87.3; beyond, exp(+-87.3) (about 1e-38 and 8e37,
// which no softmax or sigmoid distinguishes from 0 and infinity); NaN stays NaN.
// Cephes' expf: exp(x) = 2^n exp(r), n = round(x / ln2), |r| <= ln2 / 2, exp(r) by a polynomial.
inline float vec_exp(float x) {
  // The clamp works on the bits: an integer min of the magnitude, the sign put back.
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t magnitude = std::min(bits & 0x7fffffffu, 0x42AE999Au);  // 87.3f
  const float xc = std::bit_cast<float>((bits & 0x80000000u) | magnitude);
  // Adding 1.5 * 2^23 rounds to an integer, which then sits in the low bits of the mantissa.
  const float shifted = xc * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const int32_t n_int = std::bit_cast<int32_t>(shifted) - 0x4B400000;
  // ln2 in two parts, the first exact in float, so that r keeps its precision.
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t result = std::bit_cast<uint32_t>(p * std::bit_cast<float>((n_int + 127) << 23));
  // NaN's magnitude bits exceed infinity's: the borrow of this subtraction says so, and the NaN's own
  // bits are OR-ed in (arithmetic, as a select would again stop the vectoriser).
  const uint32_t is_nan = (0x7f800000u - (bits & 0x7fffffffu)) >> 31;
  return std::bit_cast<float>(result | (bits & (0u - is_nan)));
}

// The float64 ops (gradient checks) use the C library's exp.
inline double vec_exp(double x) { return std::exp(x); }

}  // namespace tk::cpu
