// The text of tokens as a model generates them, in the pieces that can be printed at once: whole UTF-8
// characters only (a token may carry part of one), never text that may be the start of a stop string, and
// nothing from the first stop string on: the stop string ends the text and is not part of it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace tk {

class GeneratedText {
 public:
  // Reads `tok`, which must outlive this. Empty stop strings are ignored.
  GeneratedText(const Tokenizer& tok, std::vector<std::string> stops);

  // Adds the next generated token and returns the text it makes printable (often empty).
  std::string add(int32_t token);
  // A stop string has appeared: generation should end (add() printed the text before it).
  bool stopped() const { return stopped_; }
  // Once generation has ended: what was held back (none after a stop string).
  std::string rest() const;
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  const Tokenizer& tok_;
  std::vector<std::string> stops_;
  std::vector<int32_t> tokens_;
  size_t printed_ = 0;  // bytes of the decoded text given out so far
  bool stopped_ = false;
};

// "\n", "\t" and "\\" in a string typed on a command line as the characters they name (a stop string of a
// newline is typed --stop '\n'); any other backslash stays as it is.
std::string unescape_typed(const std::string& typed);

}  // namespace tk
