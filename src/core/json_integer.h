// Integers read out of JSON files (config.json, meta.json, trainer_state.json, safetensors headers,
// tokenizer files) with their range checked: a fraction (64.5), a value that does not fit where it
// goes (4294967808 into an int) or one outside what the field means (a negative count) is a tk::Error
// naming the file and the field, never a silently truncated or wrapped number.
#pragma once
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace tk {

// `v` as an integer in [lo, hi], else a tk::Error "<source>: <field> is <v>; it must be ...". `field` is
// the name a user finds in the file ("hidden_size", "splits.train.shards[2].tokens").
int64_t json_int64(const nlohmann::json& v, std::string_view source, std::string_view field, int64_t lo, int64_t hi);
uint64_t json_uint64(const nlohmann::json& v, std::string_view source, std::string_view field, uint64_t lo,
                     uint64_t hi);

// The same for any integer type: by default the whole range of T.
template <class T>
T json_integer(const nlohmann::json& v, std::string_view source, std::string_view field,
               T lo = std::numeric_limits<T>::min(), T hi = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if constexpr (std::is_signed_v<T>)
    return T(json_int64(v, source, field, lo, hi));
  else
    return T(json_uint64(v, source, field, lo, hi));
}

}  // namespace tk
