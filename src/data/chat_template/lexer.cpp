// Jinja's lexer as transformers' environment runs it (lexer.h): the same rules for where data ends and what
// whitespace a tag removes, so that the text between tags is byte for byte what jinja2 prints.
#include "data/chat_template/lexer.h"

#include "core/error.h"
#include "data/chat_template/py_text.h"

namespace tk::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Newlines as \n, and the one trailing newline jinja2 drops (keep_trailing_newline is off).
std::string normalize_source(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') i++;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's text.rstrip(): trailing Unicode whitespace.
std::string_view rstrip_whitespace(std::string_view s) { return py_strip(s, "", true, false, true); }

// Length of the run of Python whitespace at s[i] (the \s* after a `-` tag end).
size_t whitespace_run(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    const CodePoint c = code_point_at(s, j);
    if (!py_isspace(c.value)) break;
    j += c.bytes;
  }
  return j - i;
}

bool only_whitespace(std::string_view s) {
  if (s.empty()) return false;
  return whitespace_run(s, 0) == s.size();
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& name) : s_(std::move(source)), name_(name) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      const size_t tag = next_tag(pos_);
      if (tag == s_.npos) {
        data(s_.substr(pos_));
        pos_ = s_.size();
        break;
      }
      const char kind = s_[tag + 1];
      const char sign = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      std::string_view text = std::string_view(s_).substr(pos_, tag - pos_);
      if (sign == '-') {
        text = rstrip_whitespace(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: not for {{ }}
        const size_t l_pos = text.rfind('\n') == text.npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting_) && only_whitespace(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      data(text);
      line_ += count_newlines(s_, pos_, tag);
      pos_ = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (kind == '#') {
        comment();
      } else if (kind == '%' && raw_block()) {
      } else {
        tag_tokens(kind == '{');
      }
    }
    tokens_.push_back({Token::Type::End, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(const std::string& what, int line) const {
    fail("chat template {}, line {}: {}", name_, line, what);
  }

  static int count_newlines(const std::string& s, size_t from, size_t to) {
    int n = 0;
    for (size_t i = from; i < to; i++) n += s[i] == '\n';
    return n;
  }

  size_t next_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != s_.npos && i + 1 < s_.size(); i = s_.find('{', i + 1))
      if (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#') return i;
    return s_.npos;
  }

  void data(std::string_view text) {
    if (!text.empty()) tokens_.push_back({Token::Type::Data, std::string(text), line_});
  }

  // After a block or comment end: `-` takes the whitespace that follows, `+` nothing, else (trim_blocks) one newline.
  void after_block_end(char sign) {
    size_t skip = 0;
    if (sign == '-') {
      skip = whitespace_run(s_, pos_);
    } else if (sign != '+' && pos_ < s_.size() && s_[pos_] == '\n') {
      skip = 1;
    }
    line_ += count_newlines(s_, pos_, pos_ + skip);
    pos_ += skip;
    line_starting_ = pos_ > 0 && s_[pos_ - 1] == '\n';
  }

  void comment() {
    const size_t close = s_.find("#}", pos_);
    if (close == s_.npos) error("a comment {# is never closed with #}", line_);
    char sign = '\0';
    if (close > pos_ && (s_[close - 1] == '-' || s_[close - 1] == '+')) sign = s_[close - 1];
    line_ += count_newlines(s_, pos_, close);
    pos_ = close + 2;
    after_block_end(sign);
  }

  // {% raw %}...{% endraw %}: the text between printed as it is (with the tags' whitespace control).
  bool raw_block() {
    size_t i = pos_ + whitespace_run(s_, pos_);
    if (s_.compare(i, 3, "raw") != 0 || (i + 3 < s_.size() && is_name_char(s_[i + 3]))) return false;
    i += 3;
    i += whitespace_run(s_, i);
    char sign = '\0';
    if (i < s_.size() && s_[i] == '-') sign = '-', i++;
    if (s_.compare(i, 2, "%}") != 0) return false;
    const int start_line = line_;
    line_ += count_newlines(s_, pos_, i + 2);
    pos_ = i + 2;
    if (sign == '-') pos_ += whitespace_run(s_, pos_);
    for (size_t at = s_.find("{%", pos_); at != s_.npos; at = s_.find("{%", at + 2)) {
      size_t j = at + 2;
      const char open_sign = j < s_.size() && (s_[j] == '-' || s_[j] == '+') ? s_[j++] : '\0';
      j += whitespace_run(s_, j);
      if (s_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      j += whitespace_run(s_, j);
      char close_sign = '\0';
      if (j < s_.size() && (s_[j] == '-' || s_[j] == '+')) close_sign = s_[j++];
      if (s_.compare(j, 2, "%}") != 0) continue;
      std::string_view text = std::string_view(s_).substr(pos_, at - pos_);
      if (open_sign == '-') {
        text = rstrip_whitespace(text);
      } else if (open_sign != '+') {
        const size_t l_pos = text.rfind('\n') == text.npos ? 0 : text.rfind('\n') + 1;
        if (l_pos > 0 && only_whitespace(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      data(text);
      line_ += count_newlines(s_, pos_, j + 2);
      pos_ = j + 2;
      after_block_end(close_sign);
      return true;
    }
    error("{% raw %} is never closed with {% endraw %}", start_line);
  }

  // The tokens of a {{ }} or {% %} tag, up to its end (which counts only outside brackets, as in jinja2).
  void tag_tokens(bool variable) {
    const int start_line = line_;
    tokens_.push_back({variable ? Token::Type::VarBegin : Token::Type::BlockBegin, "", line_});
    std::vector<char> brackets;
    for (;;) {
      const size_t ws = whitespace_run(s_, pos_);
      line_ += count_newlines(s_, pos_, pos_ + ws);
      pos_ += ws;
      if (pos_ >= s_.size())
        error(fmt::format("the tag opened with {} is never closed", variable ? "{{" : "{%"), start_line);
      if (brackets.empty() && end_of_tag(variable)) return;
      const char c = s_[pos_];
      if (c == '\'' || c == '"') {
        string_literal();
      } else if (is_digit(c)) {
        number();
      } else if (is_name_start(c)) {
        size_t j = pos_;
        while (j < s_.size() && is_name_char(s_[j])) j++;
        tokens_.push_back({Token::Type::Name, s_.substr(pos_, j - pos_), line_});
        pos_ = j;
      } else {
        operator_token(brackets);
      }
    }
  }

  bool end_of_tag(bool variable) {
    const std::string_view rest = std::string_view(s_).substr(pos_);
    if (variable) {
      const bool strip = rest.substr(0, 3) == "-}}";
      if (!strip && rest.substr(0, 2) != "}}") return false;
      pos_ += strip ? 3 : 2;
      if (strip) {
        const size_t ws = whitespace_run(s_, pos_);
        line_ += count_newlines(s_, pos_, pos_ + ws);
        pos_ += ws;
      }
      tokens_.push_back({Token::Type::VarEnd, "", line_});
      line_starting_ = s_[pos_ - 1] == '\n';
      return true;
    }
    char sign = '\0';
    if (rest.substr(0, 3) == "-%}" || rest.substr(0, 3) == "+%}") {
      sign = rest[0];
      pos_ += 3;
    } else if (rest.substr(0, 2) == "%}") {
      pos_ += 2;
    } else {
      return false;
    }
    tokens_.push_back({Token::Type::BlockEnd, "", line_});
    after_block_end(sign);
    return true;
  }

  void string_literal() {
    const char quote = s_[pos_];
    const int start_line = line_;
    std::string raw;
    size_t i = pos_ + 1;
    for (;; i++) {
      if (i >= s_.size()) error("a string literal is never closed", start_line);
      if (s_[i] == '\\' && i + 1 < s_.size()) {
        raw += s_[i];
        raw += s_[++i];
        continue;
      }
      if (s_[i] == quote) break;
      raw += s_[i];
    }
    line_ += count_newlines(s_, pos_, i);
    pos_ = i + 1;
    tokens_.push_back({Token::Type::String, unescape(raw, start_line), start_line});
  }

  // Python's unicode-escape decoding, which jinja2 applies to string literals.
  std::string unescape(const std::string& raw, int line) const {
    std::string out;
    auto hex = [&](size_t at, size_t n) {
      if (at + n > raw.size()) error("a string literal has a truncated \\x, \\u or \\U escape", line);
      uint32_t v = 0;
      for (size_t k = 0; k < n; k++) {
        const char c = raw[at + k];
        const int d = is_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) error("a string literal has a malformed \\x, \\u or \\U escape", line);
        v = v * 16 + uint32_t(d);
      }
      return v;
    };
    for (size_t i = 0; i < raw.size(); i++) {
      if (raw[i] != '\\' || i + 1 >= raw.size()) {
        out += raw[i];
        continue;
      }
      const char e = raw[++i];
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': append_utf8(out, hex(i + 1, 2)), i += 2; break;
        case 'u': append_utf8(out, hex(i + 1, 4)), i += 4; break;
        case 'U': {
          const uint32_t cp = hex(i + 1, 8);
          if (cp > 0x10FFFF) error("a string literal's \\U escape is past U+10FFFF", line);
          append_utf8(out, cp);
          i += 8;
          break;
        }
        case 'N': error("\\N{...} escapes in string literals are not supported", line);
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = uint32_t(e - '0');
            for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7'; k++)
              v = v * 8 + uint32_t(raw[++i] - '0');
            append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    return out;
  }

  // Digits with single underscores between them, as jinja2's integer and float rules read them.
  size_t digit_run(size_t i) const {
    const size_t begin = i;
    while (i < s_.size() && is_digit(s_[i])) {
      i++;
      if (i + 1 < s_.size() && s_[i] == '_' && is_digit(s_[i + 1])) i++;
    }
    return i - begin;
  }

  void number() {
    size_t i = pos_ + digit_run(pos_);
    bool is_float = false;
    // No float right after a '.': `x.0.1` is two item lookups, as jinja2 reads it.
    const bool after_dot = pos_ > 0 && s_[pos_ - 1] == '.';
    if (!after_dot) {
      size_t j = i;
      if (j + 1 < s_.size() && s_[j] == '.' && is_digit(s_[j + 1])) {
        j += 1 + digit_run(j + 1);
        is_float = true;
      }
      if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
        size_t k = j + 1;
        if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) k++;
        if (k < s_.size() && is_digit(s_[k])) {
          j = k + digit_run(k);
          is_float = true;
        }
      }
      if (is_float) i = j;
    }
    std::string text;
    for (size_t k = pos_; k < i; k++)
      if (s_[k] != '_') text += s_[k];
    tokens_.push_back({is_float ? Token::Type::Float : Token::Type::Integer, text, line_});
    pos_ = i;
  }

  void operator_token(std::vector<char>& brackets) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo)
      if (s_.compare(pos_, 2, op) == 0) {
        tokens_.push_back({Token::Type::Operator, op, line_});
        pos_ += 2;
        return;
      }
    const char c = s_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
      error(fmt::format("unexpected character '{}' in a tag", std::string(1, c)), line_);
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) error(fmt::format("unexpected '{}'", std::string(1, c)), line_);
      if (brackets.back() != c)
        error(fmt::format("unexpected '{}', expected '{}'", std::string(1, c), std::string(1, brackets.back())), line_);
      brackets.pop_back();
    }
    tokens_.push_back({Token::Type::Operator, std::string(1, c), line_});
    pos_++;
  }

  const std::string s_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source, const std::string& name) {
  return Lexer(normalize_source(source), name).run();
}

}  // namespace tk::jinja
