// NFC through ICU's Normalizer2 (see normalize.h). Text is cut into runs of valid UTF-8 first, so
// invalid bytes pass through untouched, as the rest of the tokenizer treats them.
#include "data/normalize.h"

#include "core/error.h"

#ifdef TK_HAVE_ICU
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#endif

namespace tk {
namespace {

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (uint8_t(c) >= 0x80) return false;
  return true;
}

#ifdef TK_HAVE_ICU
// Length of the valid UTF-8 character at s[i], or 0 (overlong forms, surrogates and code points
// above U+10FFFF are invalid, as in RFC 3629).
size_t valid_char_length(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return i + k < s.size() ? uint8_t(s[i + k]) : 0; };
  auto cont = [&](size_t k) { return (at(k) & 0xC0) == 0x80; };
  uint8_t b = at(0);
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return cont(1) ? 2 : 0;
  if (b >= 0xE0 && b <= 0xEF) {
    uint8_t lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    return at(1) >= lo && at(1) <= hi && cont(2) ? 3 : 0;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    uint8_t lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    return at(1) >= lo && at(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// Calls f(run, valid) for the maximal runs of valid and of invalid UTF-8, in order.
template <class F>
void for_each_run(std::string_view s, F&& f) {
  size_t start = 0;
  bool valid = true;
  for (size_t i = 0; i < s.size();) {
    size_t n = valid_char_length(s, i);
    if ((n > 0) != valid && i > start) f(s.substr(start, i - start), valid), start = i;
    valid = n > 0;
    i += n > 0 ? n : 1;
  }
  if (start < s.size()) f(s.substr(start), valid);
}

const icu::Normalizer2& nfc() {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  TK_CHECK(U_SUCCESS(err) && n, "ICU has no NFC normaliser: {}", u_errorName(err));
  return *n;
}
#endif

}  // namespace

#ifdef TK_HAVE_ICU
bool nfc_available() { return true; }

bool is_nfc(std::string_view text) {
  if (is_ascii(text)) return true;
  bool normal = true;
  for_each_run(text, [&](std::string_view run, bool valid) {
    UErrorCode err = U_ZERO_ERROR;
    if (valid && normal) normal = nfc().isNormalizedUTF8(icu::StringPiece(run.data(), int32_t(run.size())), err);
  });
  return normal;
}

std::string to_nfc(std::string_view text) {
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  for_each_run(text, [&](std::string_view run, bool valid) {
    if (!valid) {
      sink.Append(run.data(), int32_t(run.size()));
      return;
    }
    UErrorCode err = U_ZERO_ERROR;
    nfc().normalizeUTF8(0, icu::StringPiece(run.data(), int32_t(run.size())), sink, nullptr, err);
    TK_CHECK(U_SUCCESS(err), "NFC normalisation failed: {}", u_errorName(err));
  });
  return out;
}
#else
bool nfc_available() { return false; }
bool is_nfc(std::string_view text) { return is_ascii(text); }
std::string to_nfc(std::string_view) { fail("this build of tokamak has no Unicode normaliser (ICU)"); }
#endif

}  // namespace tk
