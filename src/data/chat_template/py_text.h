// Python's string semantics on UTF-8 text, as chat templates see them through Jinja: lengths and indices in code
// points, str.isspace's whitespace, strip/split, case mapping, and repr() of a string. Invalid UTF-8 counts byte by
// byte (each invalid byte one "code point"), so nothing is lost or refused.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tk::jinja {

// The code point at s[i] and its length in bytes (an invalid byte: its value, length 1).
struct CodePoint {
  uint32_t value = 0;
  size_t bytes = 1;
};
CodePoint code_point_at(std::string_view s, size_t i);
void append_utf8(std::string& out, uint32_t cp);

size_t code_points(std::string_view s);
// Byte offsets of each code point's start, and s.size() at the end (code_points(s) + 1 entries).
std::vector<size_t> code_point_offsets(std::string_view s);

bool py_isspace(uint32_t cp);  // str.isspace(): Unicode White_Space as Python counts it

// str.strip/lstrip/rstrip: with chars empty and `whitespace` true, Python whitespace; else the code points of chars.
std::string_view py_strip(std::string_view s, std::string_view chars, bool whitespace, bool left, bool right);
// str.split(sep, maxsplit) and rsplit; sep empty with `whitespace`: runs of whitespace, empty pieces dropped.
std::vector<std::string> py_split(std::string_view s, std::string_view sep, bool whitespace, int64_t maxsplit,
                                  bool from_right);
std::string py_replace(std::string_view s, std::string_view old, std::string_view with, int64_t count);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // first code point title-cased, the rest lower-cased
std::string py_title(std::string_view s);       // str.title(): each run of cased letters title-cased

// repr() of a str: quoted with ' unless the text holds ' and no ", escapes as Python writes them.
std::string py_repr_string(std::string_view s);

}  // namespace tk::jinja
