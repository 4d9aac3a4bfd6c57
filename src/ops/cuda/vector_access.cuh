// Wide loads and stores for the fused kernels: V bf16 (V = 8: one 16-byte access; V = 4: one 8-byte access; V = 1:
// the scalar fallback for sizes or pointers that are not 16-byte aligned) widened to / rounded from fp32 registers.
// Every memory-bound kernel moves its data through these, so a row is read with 16-byte coalesced accesses.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace tk::cuda {

// bf16 elements per 16-byte access.
constexpr int kVec = 8;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// V bf16 values kept as loaded, widened only where used: half the registers of their fp32 values, for
// kernels that hold many rows at once.
template <int V>
struct PackedBf16 {
  static_assert(V == 8 || V == 4 || V == 1, "bf16 accesses are 8 or 4 wide or scalar");
  std::conditional_t<V == 8, uint4, std::conditional_t<V == 4, uint2, __nv_bfloat16>> raw;
};

// For V == 8, p must be 16-byte aligned; for V == 4, 8-byte aligned.
template <int V>
__device__ __forceinline__ void load_packed(PackedBf16<V>& v, const __nv_bfloat16* p) {
  if constexpr (V == 8) v.raw = *reinterpret_cast<const uint4*>(p);
  else if constexpr (V == 4) v.raw = *reinterpret_cast<const uint2*>(p);
  else v.raw = *p;
}

template <int V>
__device__ __forceinline__ void store_packed(__nv_bfloat16* p, const PackedBf16<V>& v) {
  if constexpr (V == 8) *reinterpret_cast<uint4*>(p) = v.raw;
  else if constexpr (V == 4) *reinterpret_cast<uint2*>(p) = v.raw;
  else *p = v.raw;
}

template <int V>
__device__ __forceinline__ void unpack(float (&v)[V], const PackedBf16<V>& packed) {
  if constexpr (V == 8 || V == 4) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&packed.raw);
#pragma unroll
    for (int k = 0; k < V / 2; k++) {
      float2 f = __bfloat1622float2(h[k]);
      v[2 * k] = f.x;
      v[2 * k + 1] = f.y;
    }
  } else {
    v[0] = __bfloat162float(packed.raw);
  }
}

template <int V>
__device__ __forceinline__ void pack(PackedBf16<V>& packed, const float (&v)[V]) {
  if constexpr (V == 8 || V == 4) {
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&packed.raw);
#pragma unroll
    for (int k = 0; k < V / 2; k++) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
  } else {
    packed.raw = __float2bfloat16_rn(v[0]);
  }
}

// v[0..V) = p[0..V) widened to fp32. For V == 8, p must be 16-byte aligned.
template <int V>
__device__ __forceinline__ void load_bf16(float (&v)[V], const __nv_bfloat16* p) {
  PackedBf16<V> packed;
  load_packed(packed, p);
  unpack(v, packed);
}

// p[0..V) = v rounded to nearest even bf16.
template <int V>
__device__ __forceinline__ void store_bf16(__nv_bfloat16* p, const float (&v)[V]) {
  if constexpr (V == 8) {
    uint4 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
    static_assert(V == 1, "bf16 accesses are 8 wide or scalar");
    *p = __float2bfloat16_rn(v[0]);
  }
}

// v = the bf16 rounding of v, in place (what a store followed by a load would give).
template <int V>
__device__ __forceinline__ void round_to_bf16(float (&v)[V]) {
#pragma unroll
  for (int k = 0; k < V; k++) v[k] = __bfloat162float(__float2bfloat16_rn(v[k]));
}

// fp32 rows: V floats as V/4 16-byte accesses (V == 8 or 4) or one scalar.
template <int V>
__device__ __forceinline__ void load_f32(float (&v)[V], const float* p) {
  if constexpr (V == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  } else if constexpr (V == 8) {
    float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    static_assert(V == 1, "f32 accesses are 8 or 4 wide or scalar");
    v[0] = *p;
  }
}

template <int V>
__device__ __forceinline__ void store_f32(float* p, const float (&v)[V]) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (V == 8) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    static_assert(V == 1, "f32 accesses are 8 or 4 wide or scalar");
    *p = v[0];
  }
}

}  // namespace tk::cuda
