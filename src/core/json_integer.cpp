// The one place where an integer leaves a parsed JSON document: nlohmann::json's get<int>() truncates
// 64.5 to 64 and wraps 4294967808 to 512 without a word, so every reader goes through here instead.
#include "core/json_integer.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tk {
namespace {

// The value as the file spells it, shortened: a corrupt field may hold a whole document.
std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

[[noreturn]] void not_an_integer(const nlohmann::json& v, std::string_view source, std::string_view field) {
  fail("{}: {} is {}, not an integer", source, field, shown(v));
}

template <class T>
[[noreturn]] void out_of_range(const nlohmann::json& v, std::string_view source, std::string_view field, T lo, T hi) {
  fail("{}: {} is {}; it must be an integer from {} to {}", source, field, shown(v), lo, hi);
}

}  // namespace

// nlohmann::json holds a non-negative integer as number_unsigned (uint64) and a negative one as
// number_integer (int64); a number beyond both, or with a fraction or exponent, as number_float.
int64_t json_int64(const nlohmann::json& v, std::string_view source, std::string_view field, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > uint64_t(hi) || int64_t(u) < lo) out_of_range(v, source, field, lo, hi);
    return int64_t(u);
  }
  if (!v.is_number_integer()) not_an_integer(v, source, field);
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) out_of_range(v, source, field, lo, hi);
  return i;
}

uint64_t json_uint64(const nlohmann::json& v, std::string_view source, std::string_view field, uint64_t lo,
                     uint64_t hi) {
  if (!v.is_number_integer()) not_an_integer(v, source, field);
  if (!v.is_number_unsigned()) out_of_range(v, source, field, lo, hi);  // negative
  const uint64_t u = v.get<uint64_t>();
  if (u < lo || u > hi) out_of_range(v, source, field, lo, hi);
  return u;
}

}  // namespace tk
