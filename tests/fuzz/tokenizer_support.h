// The tokenizer fuzz targets' common check: a tokenizer that loads encodes a text holding every kind
// of piece (words, digits, spaces, punctuation, invalid UTF-8, its own end-of-text spelling) into ids
// inside its vocabulary, and decodes them back.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "fuzz_support.h"

namespace tk::fuzz {

inline void load_and_use_tokenizer(const std::string& path) {
  expect_clear_errors([&] {
    std::unique_ptr<Tokenizer> tok = Tokenizer::load(path);
    const std::string text = "Hello, world! 12345  \n\t caf\xc3\xa9 \xff\xfe <|endoftext|>" + tok->eot_text() + "x";
    for (bool allow_special : {false, true}) {
      const std::vector<int32_t> ids = tok->encode(text, allow_special);
      for (int32_t id : ids) require(id >= 0 && id < tok->vocab_size());
      expect_clear_errors([&] { tok->decode(ids); });
    }
    require(tok->eot_id() >= 0 && tok->eot_id() < tok->vocab_size());
  });
}

}  // namespace tk::fuzz
