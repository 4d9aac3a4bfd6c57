// GPT-2's byte-level alphabet: vocab files (encoder.json, tokenizer.json) spell each of the 256 byte
// values as one printable character (' ' is 'Ġ', '\n' is 'Ċ') so that no token contains raw control
// bytes. tokamak's BPE works on raw bytes; loaders use this to turn those spellings back into bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tk::byte_level {

// The code point that spells byte b.
char32_t char_of_byte(uint8_t b);

// The raw bytes a vocab entry spells, or nullopt when it holds a character outside the 256
// (e.g. an added token such as "<｜begin▁of▁sentence｜>", which is stored as its own UTF-8 text).
std::optional<std::string> unspell(std::string_view spelled);

// The byte-level spelling of raw bytes: the inverse of unspell.
std::string spell(std::string_view bytes);

}  // namespace tk::byte_level
