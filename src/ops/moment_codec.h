// The narrow forms of AdamW's moments (ops.h adamw_update, --moments bf16|int8): bf16 values, and int8
// codes in blocks of kMomentBlock elements with one f32 scale per block. Everything here is inline and
// compiles for the host and the device, so the CPU reference, the checkpoint conversions and the CUDA
// kernel encode alike, bit for bit.
//
// The update rounds stochastically, with noise from a hash of (step, element, moment): an EMA whose
// per-step change is below half a rounding step (v with beta2 = 0.999 changes by 0.1% a step, a bf16
// step is 0.4%) never moves under round-to-nearest, and stays stuck at an old, too large value; with
// unbiased rounding it follows its average. docs/memory.md gives the measurements behind the choice.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define TK_HOST_DEVICE __host__ __device__
#else
#define TK_HOST_DEVICE
#endif

namespace tk {

// Elements per int8 block (the offload chunk is a multiple of it, so no block straddles two chunks).
constexpr int64_t kMomentBlock = 256;
constexpr int kMCodes = 255;  // m: int8 codes -127..127
constexpr int kVCodes = 256;  // v: uint8 codes 0..255
// Codes per factor of 2 in the logarithmic code books: neighbouring values differ by 2^(1/6) (12%).
constexpr int kMCodesPerOctave = 6;
constexpr int kVCodesPerOctave = 6;

// The int8 code books: each code's value relative to its block's scale, ascending, and the midpoints
// between neighbours.
//  m (scale = the block's largest |m|): code q in [-127, 127] means sign(q) 2^((|q| - 127) / 6), 0 means 0:
//    6.3 decades below the block's largest |m|.
//  v (scale = the block's largest v): code q in [1, 255] means 2^((q - 255) / 6), 0 means 0: 12.7 decades,
//    so sqrt(v), which the update divides by, spans the same 6.3 decades as m. A positive v is never
//    coded 0 (it takes code 1 instead): a v of 0 under a nonzero m would make an update of m / eps.
// Logarithmic, not linear, because the update divides m by sqrt(v) element by element, so a small
// element's relative precision matters as much as a large one's; a linear code would round every value
// below 1/254 of its block's largest to 0. Codes 127 (m) and 255 (v) are exactly 1, so a block's
// largest element keeps its value exactly, and decoding then encoding again (nearest) gives back the
// same codes and scales: a checkpoint's f32 moments restore the int8 state bit for bit.
struct MomentCodeBook {
  float m[kMCodes];             // the value of m code q is m[q + 127]
  float m_mid[kMCodes - 1];     // m_mid[i] = (m[i] + m[i + 1]) / 2
  float v[kVCodes];             // the value of v code q is v[q]
  float v_mid[kVCodes - 1];
};

// ---- bf16 -------------------------------------------------------------------------------------------

TK_HOST_DEVICE inline uint32_t moment_float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
TK_HOST_DEVICE inline float moment_bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// x rounded to the nearest bf16 (ties to even), as bits. Moments are finite (the update refuses a
// non-finite gradient norm).
TK_HOST_DEVICE inline uint16_t moment_to_bf16(float x) {
  uint32_t u = moment_float_bits(x);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
TK_HOST_DEVICE inline float moment_from_bf16(uint16_t b) { return moment_bits_float(uint32_t(b) << 16); }

// ---- int8 ------------------------------------------------------------------------------------------

// The last entry of `values` (n ascending, n <= 256) that is <= u, for u >= values[0]: from `guess`, an
// estimate from u's exponent that is at most a step or two off, walking to the entry. Two or three table
// reads that do not depend on each other, where a bisection would make eight dependent ones (on the device,
// eight shared-memory round trips per moment: what bounded the int8 update) and mispredict on the host.
TK_HOST_DEVICE inline int floor_code(const float* values, int n, float u, int guess) {
  int i = guess < 0 ? 0 : guess > n - 1 ? n - 1 : guess;
  while (i + 1 < n && values[i + 1] <= u) i++;
  while (i > 0 && values[i] > u) i--;
  return i;
}

// floor(codes_per_octave * log2(|u|)) for a normal u, give or take one: from u's bits, the exponent plus
// log2(1 + f) ~ f + 0.346 f (1 - f) of the mantissa's fraction f (within 0.01). floor_code's guess.
TK_HOST_DEVICE inline int log_code_guess(float u, int codes_per_octave) {
#ifdef __CUDA_ARCH__
  const uint32_t bits = __float_as_uint(u);
#else
  uint32_t bits;
  std::memcpy(&bits, &u, 4);
#endif
  const float f = float(bits & 0x7fffff) * 0x1.0p-23f;
  const float log2_u = float(int((bits >> 23) & 0xff) - 127) + f + 0.346f * f * (1.f - f);
  return int(floorf(float(codes_per_octave) * log2_u));
}

// The index of the entry of `values` chosen for u (values[0] <= u <= values[n - 1]): without noise
// (noise < 0) the nearest one, a value on a midpoint taking the lower; with noise in [0, 1), one of the
// two that bracket u, the upper with probability (u - lower) / (upper - lower) (stochastic rounding:
// unbiased).
TK_HOST_DEVICE inline int pick_code(const float* values, const float* mid, int n, float u, float noise, int guess) {
  const int i = floor_code(values, n, u, guess);
  if (noise < 0.f) return i + 1 < n && u > mid[i] ? i + 1 : i;
  if (i + 1 >= n) return i;
  return noise < (u - values[i]) / (values[i + 1] - values[i]) ? i + 1 : i;  // u on an entry: stays (noise >= 0)
}

// Encodes x of a block whose scale (largest |m|, or largest v) is `scale`. A value whose decoded form
// would be below the smallest normal float is coded 0: decoded values are then 0 or normal floats, whose
// products with the scale are exact to half an ulp, so that encoding them again (nearest) gives the same
// codes and scale.
constexpr float kSmallestNormal = 1.17549435e-38f;
TK_HOST_DEVICE inline int8_t encode_m(const MomentCodeBook& b, float x, float scale, float noise) {
  if (!(scale > 0.f)) return 0;
  const float u = x / scale;
  int guess = 127;  // m[127 + j] = 2^((j - 127) / 6) = -m[127 - j]
  if (u != 0.f) {
    const int g = log_code_guess(u, kMCodesPerOctave);
    guess = u > 0.f ? (254 + g > 127 ? 254 + g : 127) : (-g - 1 < 127 ? -g - 1 : 127);
  }
  const int q = pick_code(b.m, b.m_mid, kMCodes, u, noise, guess) - 127;
  const float back = b.m[q + 127] * scale;
  return (back < kSmallestNormal && back > -kSmallestNormal) ? int8_t(0) : int8_t(q);
}
TK_HOST_DEVICE inline uint8_t encode_v(const MomentCodeBook& b, float x, float scale, float noise) {
  if (!(scale > 0.f)) return 0;
  const float u = x / scale;
  int guess = 0;  // v[q] = 2^((q - 255) / 6)
  if (u > 0.f) guess = 255 + log_code_guess(u, kVCodesPerOctave);
  int q = pick_code(b.v, b.v_mid, kVCodes, u, noise, guess);
  if (q == 0 && x > 0.f) q = 1;  // never 0 for a positive v: the update would divide m by eps alone
  return b.v[q] * scale < kSmallestNormal ? uint8_t(0) : uint8_t(q);
}
TK_HOST_DEVICE inline float decode_m(const MomentCodeBook& b, int8_t q, float scale) { return b.m[q + 127] * scale; }
TK_HOST_DEVICE inline float decode_v(const MomentCodeBook& b, uint8_t q, float scale) { return b.v[q] * scale; }

// ---- rounding noise ---------------------------------------------------------------------------------

// The noise's source: SplitMix64's finaliser (as core/hash.h) over (step, key, which moment), a counter-based hash,
// so the noise does not depend on the order in which elements are visited, on chunking, or on the backend.
TK_HOST_DEVICE inline uint64_t moment_noise_bits(int64_t step, int64_t key, uint32_t which) {
  uint64_t x = uint64_t(key) * 0x9e3779b97f4a7c15ull + (uint64_t(step) << 2) + which;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The int8 codes' noise: a uniform value in [0, 1) (24 bits) an element, from (step, flat element index, which).
TK_HOST_DEVICE inline float moment_noise(int64_t step, int64_t index, uint32_t which) {
  return float(uint32_t(moment_noise_bits(step, index, which) >> 40)) * 0x1.0p-24f;
}

// bf16 moments' noise: 16 bits an element, the bits rounding to bf16 drops. Elements 4k .. 4k + 3 take the four
// 16-bit quarters of one hash (key k), so that an update of four elements at a time hashes once a moment: the
// hash was most of the work of an update with bf16 moments, which then could not keep up with memory.
TK_HOST_DEVICE inline float bf16_moment_noise_quarter(uint64_t bits, int64_t index) {
  return float(uint32_t(bits >> (16 * (index & 3))) & 0xffffu) * 0x1.0p-16f;
}
TK_HOST_DEVICE inline float bf16_moment_noise(int64_t step, int64_t index, uint32_t which) {
  return bf16_moment_noise_quarter(moment_noise_bits(step, index >> 2, which), index);
}

// bf16 with stochastic rounding: x moves to the bf16 above or below it (in magnitude) with probability
// proportional to its distance from the other one; exact bf16 values stay as they are.
TK_HOST_DEVICE inline uint16_t moment_to_bf16_stochastic(float x, float noise) {
  const uint32_t u = moment_float_bits(x);
  return uint16_t((u + (uint32_t(noise * 65536.f) & 0xffffu)) >> 16);
}

// ---- the code books and whole buffers (host) ---------------------------------------------------------

inline MomentCodeBook build_moment_code_book() {
  MomentCodeBook b{};
  for (int q = -127; q <= 127; q++) {
    const double mag = q == 0 ? 0.0 : std::exp2(double(std::abs(q) - 127) / kMCodesPerOctave);
    b.m[q + 127] = float(q < 0 ? -mag : mag);
  }
  for (int q = 0; q < kVCodes; q++) b.v[q] = q == 0 ? 0.f : float(std::exp2(double(q - 255) / kVCodesPerOctave));
  for (int i = 0; i + 1 < kMCodes; i++) b.m_mid[i] = float((double(b.m[i]) + double(b.m[i + 1])) / 2);
  for (int i = 0; i + 1 < kVCodes; i++) b.v_mid[i] = float((double(b.v[i]) + double(b.v[i + 1])) / 2);
  return b;
}

inline const MomentCodeBook& moment_code_book() {
  static const MomentCodeBook book = build_moment_code_book();
  return book;
}

// Blocks of an int8 buffer of n elements.
constexpr int64_t moment_blocks(int64_t n) { return (n + kMomentBlock - 1) / kMomentBlock; }

// Whole buffers of n elements, blocks counted from element 0: f32 values -> int8 codes (nearest, no
// noise) and per-block scales, and back. A scale below the smallest normal float is set to 0 (its block
// then holds zeros only), as the update does.
inline void encode_int8_m(int8_t* codes, float* scales, const float* m, int64_t n) {
  const MomentCodeBook& b = moment_code_book();
  for (int64_t blk = 0; blk < moment_blocks(n); blk++) {
    const int64_t lo = blk * kMomentBlock, hi = std::min(n, lo + kMomentBlock);
    float top = 0.f;
    for (int64_t i = lo; i < hi; i++) top = std::max(top, std::abs(m[i]));
    scales[blk] = top = top < kSmallestNormal ? 0.f : top;
    for (int64_t i = lo; i < hi; i++) codes[i] = encode_m(b, m[i], top, -1.f);
  }
}
inline void encode_int8_v(uint8_t* codes, float* scales, const float* v, int64_t n) {
  const MomentCodeBook& b = moment_code_book();
  for (int64_t blk = 0; blk < moment_blocks(n); blk++) {
    const int64_t lo = blk * kMomentBlock, hi = std::min(n, lo + kMomentBlock);
    float top = 0.f;
    for (int64_t i = lo; i < hi; i++) top = std::max(top, v[i]);
    scales[blk] = top = top < kSmallestNormal ? 0.f : top;
    for (int64_t i = lo; i < hi; i++) codes[i] = encode_v(b, v[i], top, -1.f);
  }
}
inline void decode_int8_m(float* m, const int8_t* codes, const float* scales, int64_t n) {
  const MomentCodeBook& b = moment_code_book();
  for (int64_t i = 0; i < n; i++) m[i] = decode_m(b, codes[i], scales[i / kMomentBlock]);
}
inline void decode_int8_v(float* v, const uint8_t* codes, const float* scales, int64_t n) {
  const MomentCodeBook& b = moment_code_book();
  for (int64_t i = 0; i < n; i++) v[i] = decode_v(b, codes[i], scales[i / kMomentBlock]);
}

}  // namespace tk
