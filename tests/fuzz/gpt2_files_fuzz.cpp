// Fuzzes GPT-2's tokenizer files: the input up to its first NUL is encoder.json, the rest vocab.bpe.
#include "tokenizer_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk::fuzz;
  const auto [encoder, merges] = split_at_nul(as_text(data, size));
  write_file("gpt2/encoder.json", encoder);
  write_file("gpt2/vocab.bpe", merges);
  load_and_use_tokenizer(scratch_dir() + "/gpt2");
  return 0;
}
