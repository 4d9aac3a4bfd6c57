// Pre-tokenisation: splits text into the pieces that BPE merges within, using the regexes GPT-2,
// tiktoken, Llama 3 and Qwen2 publish. PCRE2 runs them (JIT-compiled, Unicode properties), in the
// mode where invalid UTF-8 is a barrier no match crosses rather than an error or a crash.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/regex.h"

namespace tk {

class Pretokenizer {
 public:
  // Regexes in the Python/Rust dialect the tokenizer files use (\s and \S mean Unicode White_Space
  // there, as here), applied in turn: the first splits the text, each next one splits every piece
  // of the previous (a Hugging Face Sequence of Split pre-tokenizers). Throws tk::Error naming the
  // pattern and PCRE2's reason when one does not compile.
  explicit Pretokenizer(const std::vector<std::string>& patterns);

  // Appends the pieces of `text` to `pieces`, in order; they tile `text` exactly. Bytes that no
  // match covers (invalid UTF-8, or characters a pattern leaves out) form pieces of their own.
  // Thread-safe.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  // The pattern as handed to PCRE2, after the dialect translation (exposed for tests).
  static std::string to_pcre2(std::string_view pattern);

 private:
  void split_with(size_t stage, std::string_view text, std::vector<std::string_view>& pieces) const;

  std::vector<std::unique_ptr<Regex>> stages_;
};

}  // namespace tk
