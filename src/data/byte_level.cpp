// GPT-2's bytes_to_unicode table and its inverse (see byte_level.h).
#include "data/byte_level.h"

#include <array>

namespace tk::byte_level {
namespace {

// Bytes that are printable Latin-1 spell themselves; the other 68 take the code points 256, 257, ...
// in byte order. Every spelling is below U+0144, so it is one or two UTF-8 bytes.
struct Tables {
  std::array<char32_t, 256> char_of{};
  std::array<int16_t, 0x144> byte_of{};  // -1: not a spelling

  Tables() {
    byte_of.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; b++) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char_of[b] = printable ? char32_t(b) : next++;
      byte_of[char_of[b]] = int16_t(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_of_byte(uint8_t b) { return tables().char_of[b]; }

std::optional<std::string> unspell(std::string_view s) {
  const Tables& t = tables();
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto c0 = uint8_t(s[i]);
    char32_t cp;
    if (c0 < 0x80) {
      cp = c0, i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < s.size() && (uint8_t(s[i + 1]) & 0xC0) == 0x80) {
      cp = (char32_t(c0 & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F), i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters spell no byte
    }
    if (cp >= t.byte_of.size() || t.byte_of[cp] < 0) return std::nullopt;
    out.push_back(char(t.byte_of[cp]));
  }
  return out;
}

std::string spell(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) {
    char32_t cp = char_of_byte(uint8_t(b));
    if (cp < 0x80) {
      out.push_back(char(cp));
    } else {
      out.push_back(char(0xC0 | (cp >> 6)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

}  // namespace tk::byte_level
