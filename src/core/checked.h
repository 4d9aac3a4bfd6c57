// Size arithmetic that cannot wrap. Parameter counts, layout offsets and byte sizes are computed from
// numbers read out of files (config.json, safetensors headers, shard headers) and flags (the batch's sizes); a
// product or sum that overflows is a tk::Error naming the quantity, never a silently small count or buffer.
#pragma once
#include <climits>
#include <cstdint>
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

// The micro-batches of one optimizer step: a global batch of `batch_tokens` tokens (--batch-tokens; 0: one
// micro-batch) in micro-batches of `batch` x `seq` tokens. A tk::Error naming the flags when a size is not positive,
// a micro-batch holds more tokens than an int counts (the ops index them with int), batch_tokens is not a multiple
// of the micro-batch, or the count is more than an int holds: never a wrapped count (2^63 tokens gave -1
// micro-batches, 2^37 + 32 tokens one micro-batch of 32).
inline int micro_batches_per_step(int64_t batch_tokens, int batch, int seq) {
  TK_CHECK(batch >= 1 && seq >= 1, "--batch and --seq must be positive, got {} and {}", batch, seq);
  const int64_t micro_tokens = int64_t(batch) * seq;
  TK_CHECK(micro_tokens <= INT_MAX,
           "--batch {} x --seq {} is {} tokens a micro-batch, more than the {} one can hold: lower --batch or --seq",
           batch, seq, micro_tokens, INT_MAX);
  if (batch_tokens == 0) return 1;
  TK_CHECK(batch_tokens > 0 && batch_tokens % micro_tokens == 0,
           "--batch-tokens {} is not a multiple of the micro-batch's {} tokens (--batch {} x --seq {})", batch_tokens,
           micro_tokens, batch, seq);
  TK_CHECK(batch_tokens / micro_tokens <= INT_MAX,
           "--batch-tokens {} is {} micro-batches of {} tokens (--batch {} x --seq {}), more than the {} a step can "
           "take: lower --batch-tokens, or raise --batch or --seq",
           batch_tokens, batch_tokens / micro_tokens, micro_tokens, batch, seq, INT_MAX);
  return int(batch_tokens / micro_tokens);
}

}  // namespace tk
