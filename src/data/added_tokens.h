// Added tokens: strings such as "<|endoftext|>" that stand for one id wherever they appear in text.
// They are found before pre-tokenisation, so BPE never sees (or makes) them. Special ones match only
// when the caller allows it; non-special added tokens always match, as in Hugging Face tokenizers.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/regex.h"

namespace tk {

struct AddedToken {
  std::string text;
  int32_t id = -1;
  bool special = true;
  bool lstrip = false;  // the match takes in the whitespace before it (tokenizer.json flags)
  bool rstrip = false;  // ... and after it
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  struct Match {
    size_t begin = 0, end = 0;  // the span the token replaces, stripped whitespace included
    int32_t id = -1;
  };
  // The leftmost added token in text at or after `from` (the longest, where several start there).
  std::optional<Match> find(std::string_view text, size_t from, bool allow_special) const;

 private:
  static std::unique_ptr<Regex> alternation(const std::vector<AddedToken>& tokens, bool with_special);

  std::unique_ptr<Regex> all_, ordinary_;  // null when there is nothing to match
  std::unordered_map<std::string, int32_t> ids_;
};

}  // namespace tk
