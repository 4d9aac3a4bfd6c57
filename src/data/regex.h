// A compiled PCRE2 regex over UTF-8 text and its search, shared by pre-tokenisation and the
// added-token matcher: Unicode properties, JIT, and invalid UTF-8 treated as a barrier that no match
// crosses (PCRE2_MATCH_INVALID_UTF), so arbitrary bytes can never crash or mislead a match.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace tk {

class Regex {
 public:
  // PCRE2 syntax; `$` means the end of the text only. Throws tk::Error with PCRE2's reason.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  struct Span {
    size_t begin = 0, end = 0;
  };
  // The leftmost match starting at or after `from`; also the span of capture group 1 when
  // `group1` is given (the pattern must have one). Thread-safe.
  std::optional<Span> find(std::string_view text, size_t from, Span* group1 = nullptr) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8, kept out of this header
  bool jit_ = false;
};

// `literal` as a pattern that matches exactly it (ASCII punctuation escaped).
std::string regex_escape(std::string_view literal);

}  // namespace tk
