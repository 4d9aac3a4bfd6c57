// Fuzzes tokenizer.json (Hugging Face): any text as the file, loaded and used to encode and decode.
#include "tokenizer_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tk::fuzz::load_and_use_tokenizer(tk::fuzz::write_file("hf/tokenizer.json", tk::fuzz::as_text(data, size)));
  return 0;
}
