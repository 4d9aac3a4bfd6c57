// Size arithmetic that cannot wrap. Parameter counts, layout offsets and byte sizes are computed from
// numbers read out of files (config.json, safetensors headers, shard headers); a product or sum that
// overflows is a tk::Error naming the quantity, never a silently small count or buffer.
#pragma once
#include <limits>
#include <string_view>
#include <type_traits>

#include "core/error.h"

namespace tk {

// a * b, or a tk::Error "<what> overflows: a x b is more than ...".
template <class T>
T checked_mul(T a, T b, std::string_view what) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_mul_overflow(a, b, &r))
    fail("{} overflows: {} x {} is beyond {}, the largest this count can hold", what, a, b,
         std::numeric_limits<T>::max());
  return r;
}

// a + b, or a tk::Error "<what> overflows: a + b is more than ...".
template <class T>
T checked_add(T a, T b, std::string_view what) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_add_overflow(a, b, &r))
    fail("{} overflows: {} + {} is beyond {}, the largest this count can hold", what, a, b,
         std::numeric_limits<T>::max());
  return r;
}

// v converted to To, or a tk::Error when To cannot hold it exactly.
template <class To, class From>
To checked_cast(From v, std::string_view what) {
  static_assert(std::is_integral_v<To> && std::is_integral_v<From>);
  To r;
  if (__builtin_add_overflow(v, From(0), &r))
    fail("{} is {}, outside the range this count can hold ({} to {})", what, v, std::numeric_limits<To>::min(),
         std::numeric_limits<To>::max());
  return r;
}

}  // namespace tk
