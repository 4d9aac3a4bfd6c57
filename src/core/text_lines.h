// The lines of a text file held in memory, for the readers of line-oriented formats (GPT-2's vocab.bpe, tiktoken
// ranks): numbered from 1, without their "\n" or "\r\n", empty lines passed over.
#pragma once
#include <cstddef>
#include <string_view>

namespace tk {

// Calls fn(line_no, line) for each non-empty line of text.
template <class Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    line_no++;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) fn(line_no, line);
  }
}

}  // namespace tk
