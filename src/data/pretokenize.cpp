// Pre-tokenisation (see pretokenize.h): the translation from the tokenizer files' regex dialect to
// PCRE2's, and the loop that turns matches and the gaps between them into pieces.
#include "data/pretokenize.h"

#include "core/error.h"

namespace tk {
namespace {

// Length of the character starting at i, or 1 where the byte there starts no character.
size_t char_length(std::string_view s, size_t i) {
  auto b = uint8_t(s[i]);
  size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
  return i + n <= s.size() ? n : 1;
}

}  // namespace

// Python's `regex`, Rust's `regex` (tiktoken) and Oniguruma (Hugging Face) take \s to be the
// Unicode White_Space property; PCRE2's \s also matches U+180E. Spelling the property out makes the
// pieces identical. \Q...\E spans and other escapes are copied as they are.
std::string Pretokenizer::to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size(); i++) {
    if (p[i] != '\\' || i + 1 == p.size()) {
      out += p[i];
      continue;
    }
    char c = p[++i];
    if (c == 's') {
      out += "\\p{White_Space}";
    } else if (c == 'S') {
      out += "\\P{White_Space}";
    } else if (c == 'Q') {
      size_t end = p.find("\\E", i + 1);
      end = end == std::string_view::npos ? p.size() : end + 2;
      out += p.substr(i - 1, end - (i - 1));
      i = end - 1;
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

Pretokenizer::Pretokenizer(const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    try {
      stages_.push_back(std::make_unique<Regex>(to_pcre2(pattern)));
    } catch (const Error& e) {
      fail("the pre-tokenizer's {}", e.what());
    }
  }
}

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  split_with(0, text, pieces);
}

void Pretokenizer::split_with(size_t stage, std::string_view text, std::vector<std::string_view>& pieces) const {
  if (stage == stages_.size()) {
    if (!text.empty()) pieces.push_back(text);
    return;
  }
  const Regex& re = *stages_[stage];
  size_t gap = 0;     // start of the text not yet handed out
  size_t search = 0;  // where the next match may start
  while (search < text.size()) {
    auto m = re.find(text, search);
    if (!m) break;
    if (m->begin == m->end) {  // an empty match is no piece; look again one character on
      search = m->begin + (m->begin < text.size() ? char_length(text, m->begin) : 1);
      continue;
    }
    if (m->begin > gap) split_with(stage + 1, text.substr(gap, m->begin - gap), pieces);
    split_with(stage + 1, text.substr(m->begin, m->end - m->begin), pieces);
    gap = search = m->end;
  }
  if (gap < text.size()) split_with(stage + 1, text.substr(gap), pieces);
}

}  // namespace tk
