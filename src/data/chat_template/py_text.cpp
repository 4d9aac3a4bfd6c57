// Python string semantics on UTF-8 (py_text.h). Case mapping and the printable test of repr() come from ICU, whose
// root-locale full case mappings are Python's.
#include "data/chat_template/py_text.h"

#include <fmt/format.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/locid.h>

namespace tk::jinja {

CodePoint code_point_at(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return i + k < s.size() ? uint8_t(s[i + k]) : 0; };
  auto cont = [&](size_t k) { return (byte(k) & 0xC0) == 0x80; };
  const uint8_t b = byte(0);
  if (b < 0x80) return {b, 1};
  if (b >= 0xC2 && b <= 0xDF && cont(1)) return {uint32_t(b & 0x1F) << 6 | (byte(1) & 0x3F), 2};
  if (b >= 0xE0 && b <= 0xEF && cont(1) && cont(2)) {
    const uint32_t cp = uint32_t(b & 0x0F) << 12 | uint32_t(byte(1) & 0x3F) << 6 | (byte(2) & 0x3F);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
  }
  if (b >= 0xF0 && b <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const uint32_t cp = uint32_t(b & 0x07) << 18 | uint32_t(byte(1) & 0x3F) << 12 | uint32_t(byte(2) & 0x3F) << 6 |
                        (byte(3) & 0x3F);
    if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
  }
  return {b, 1};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += code_point_at(s, i).bytes) n++;
  return n;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> at;
  for (size_t i = 0; i < s.size(); i += code_point_at(s, i).bytes) at.push_back(i);
  at.push_back(s.size());
  return at;
}

bool py_isspace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

namespace {

bool in_chars(uint32_t cp, std::string_view chars, bool whitespace) {
  if (whitespace) return py_isspace(cp);
  for (size_t i = 0; i < chars.size();) {
    const CodePoint c = code_point_at(chars, i);
    if (c.value == cp) return true;
    i += c.bytes;
  }
  return false;
}

// Splits on runs of whitespace, as str.split() without a separator.
std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  const std::vector<size_t> at = code_point_offsets(s);
  const size_t n = at.size() - 1;
  auto space = [&](size_t k) { return py_isspace(code_point_at(s, at[k]).value); };
  std::vector<std::string> out;
  if (!from_right) {
    size_t k = 0;
    while (k < n) {
      while (k < n && space(k)) k++;
      if (k == n) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t end = n;
        while (end > k && space(end - 1)) end--;
        out.emplace_back(s.substr(at[k], at[end] - at[k]));
        break;
      }
      size_t j = k;
      while (j < n && !space(j)) j++;
      out.emplace_back(s.substr(at[k], at[j] - at[k]));
      k = j;
    }
    return out;
  }
  size_t k = n;
  while (k > 0) {
    while (k > 0 && space(k - 1)) k--;
    if (k == 0) break;
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
      size_t begin = 0;
      while (begin < k && space(begin)) begin++;
      out.emplace_back(s.substr(at[begin], at[k] - at[begin]));
      break;
    }
    size_t j = k;
    while (j > 0 && !space(j - 1)) j--;
    out.emplace_back(s.substr(at[j], at[k] - at[j]));
    k = j;
  }
  return {out.rbegin(), out.rend()};
}

std::string via_icu(std::string_view s, bool upper) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), int32_t(s.size())));
  if (upper) {
    u.toUpper(icu::Locale::getRoot());
  } else {
    u.toLower(icu::Locale::getRoot());
  }
  std::string out;
  u.toUTF8String(out);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (uint8_t(c) >= 0x80) return false;
  return true;
}

std::string title_case(uint32_t cp) {
  std::string out;
  append_utf8(out, uint32_t(u_totitle(UChar32(cp))));
  return out;
}

}  // namespace

std::string_view py_strip(std::string_view s, std::string_view chars, bool whitespace, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left)
    while (begin < end) {
      const CodePoint c = code_point_at(s, begin);
      if (!in_chars(c.value, chars, whitespace)) break;
      begin += c.bytes;
    }
  if (right)
    while (end > begin) {
      size_t start = end - 1;  // back to the start of the last code point
      while (start > begin && (uint8_t(s[start]) & 0xC0) == 0x80 && end - start < 4) start--;
      CodePoint c = code_point_at(s, start);
      if (start + c.bytes != end) {  // not one whole code point: the last byte alone
        start = end - 1;
        c = {uint8_t(s[start]), 1};
      }
      if (!in_chars(c.value, chars, whitespace)) break;
      end = start;
    }
  return s.substr(begin, end - begin);
}

std::vector<std::string> py_split(std::string_view s, std::string_view sep, bool whitespace, int64_t maxsplit,
                                  bool from_right) {
  if (whitespace) return split_whitespace(s, maxsplit, from_right);
  std::vector<std::string> out;
  if (!from_right) {
    size_t begin = 0;
    for (size_t at; (maxsplit < 0 || int64_t(out.size()) < maxsplit) && (at = s.find(sep, begin)) != s.npos;
         begin = at + sep.size())
      out.emplace_back(s.substr(begin, at - begin));
    out.emplace_back(s.substr(begin));
    return out;
  }
  size_t end = s.size();
  while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    const size_t at = s.rfind(sep, end - sep.size());
    if (at == s.npos) break;
    out.emplace_back(s.substr(at + sep.size(), end - at - sep.size()));
    end = at;
  }
  out.emplace_back(s.substr(0, end));
  return {out.rbegin(), out.rend()};
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view with, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` before every code point and at the end
    int64_t done = 0;
    size_t i = 0;
    for (; i < s.size() && (count < 0 || done < count); done++) {
      out += with;
      const size_t n = code_point_at(s, i).bytes;
      out += s.substr(i, n);
      i += n;
    }
    if (i == s.size() && (count < 0 || done < count)) out += with;
    out += s.substr(i);
    return out;
  }
  size_t begin = 0;
  int64_t done = 0;
  for (size_t at; (count < 0 || done < count) && (at = s.find(old, begin)) != s.npos; begin = at + old.size(), done++)
    out.append(s.substr(begin, at - begin)).append(with);
  out += s.substr(begin);
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  size_t begin = 0, i = 0;
  while (i < s.size()) {
    const CodePoint c = code_point_at(s, i);
    const uint32_t v = c.value;
    const bool brk = v == '\n' || v == '\r' || v == 0x0B || v == 0x0C || v == 0x1C || v == 0x1D || v == 0x1E ||
                     v == 0x85 || v == 0x2028 || v == 0x2029;
    if (!brk) {
      i += c.bytes;
      continue;
    }
    size_t end = i + c.bytes;
    if (v == '\r' && end < s.size() && s[end] == '\n') end++;
    out.emplace_back(s.substr(begin, (keepends ? end : i) - begin));
    begin = i = end;
  }
  if (begin < s.size()) out.emplace_back(s.substr(begin));
  return out;
}

std::string py_upper(std::string_view s) {
  if (!is_ascii(s)) return via_icu(s, true);
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = char(c - 32);
  return out;
}

std::string py_lower(std::string_view s) {
  if (!is_ascii(s)) return via_icu(s, false);
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c + 32);
  return out;
}

std::string py_capitalize(std::string_view s) {
  if (s.empty()) return "";
  const CodePoint first = code_point_at(s, 0);
  return title_case(first.value) + py_lower(s.substr(first.bytes));
}

std::string py_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    const CodePoint c = code_point_at(s, i);
    const std::string_view one = s.substr(i, c.bytes);
    const bool cased = u_hasBinaryProperty(UChar32(c.value), UCHAR_CASED);
    out += previous_cased ? py_lower(one) : cased ? title_case(c.value) : std::string(one);
    previous_cased = cased || (previous_cased && u_hasBinaryProperty(UChar32(c.value), UCHAR_CASE_IGNORABLE));
    i += c.bytes;
  }
  return out;
}

std::string py_repr_string(std::string_view s) {
  const bool single = s.find('\'') != s.npos && s.find('"') == s.npos;
  const char quote = single ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const CodePoint c = code_point_at(s, i);
    const uint32_t v = c.value;
    if (v == uint32_t(quote) || v == '\\') {
      out += '\\';
      out += char(v);
    } else if (v == '\t') {
      out += "\\t";
    } else if (v == '\n') {
      out += "\\n";
    } else if (v == '\r') {
      out += "\\r";
    } else if (v < 0x20 || v == 0x7F || (c.bytes == 1 && v >= 0x80)) {
      out += fmt::format("\\x{:02x}", v);
    } else if (v < 0x7F) {
      out += char(v);
    } else {
      const int8_t type = u_charType(UChar32(v));
      const bool printable = type != U_CONTROL_CHAR && type != U_FORMAT_CHAR && type != U_SURROGATE &&
                             type != U_PRIVATE_USE_CHAR && type != U_UNASSIGNED && type != U_LINE_SEPARATOR &&
                             type != U_PARAGRAPH_SEPARATOR && type != U_SPACE_SEPARATOR;
      if (printable) {
        out += s.substr(i, c.bytes);
      } else if (v <= 0xFF) {
        out += fmt::format("\\x{:02x}", v);
      } else if (v <= 0xFFFF) {
        out += fmt::format("\\u{:04x}", v);
      } else {
        out += fmt::format("\\U{:08x}", v);
      }
    }
    i += c.bytes;
  }
  out += quote;
  return out;
}

}  // namespace tk::jinja
