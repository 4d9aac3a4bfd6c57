// Fuzzes tiktoken rank files: the input up to its first NUL is the ranks file. Without a NUL it is read
// as r50k_base.tiktoken (regex and special tokens from OpenAI's table); with one, what follows is the
// sidecar JSON of a custom.tiktoken.
#include "tokenizer_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk::fuzz;
  const std::string_view input = as_text(data, size);
  const auto [ranks, sidecar] = split_at_nul(input);
  if (ranks.size() == input.size()) {
    load_and_use_tokenizer(write_file("tiktoken/r50k_base.tiktoken", ranks));
  } else {
    write_file("tiktoken/custom.tiktoken.json", sidecar);
    load_and_use_tokenizer(write_file("tiktoken/custom.tiktoken", ranks));
  }
  return 0;
}
