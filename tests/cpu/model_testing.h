// Helpers shared by the tests that train a small model on generated text: seeded random documents and a
// Llama of 2 layers of width 32 (seconds of CPU).
#pragma once
#include <iterator>
#include <random>
#include <string>

#include "model/config.h"

namespace tk::testing {

// Documents of random words from a small vocabulary, a full stop every 9 words: enough structure for a
// loss to fall, and random (seeded) so no test depends on a particular text.
inline std::string random_document(std::mt19937_64& rng, int words) {
  static const char* const kWords[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to",
                                       "big", "red", "house", "by", "sea", "when", "it", "was", "cold", "night"};
  std::string s;
  for (int i = 0; i < words; i++) {
    s += kWords[rng() % std::size(kWords)];
    s += (i % 9 == 8) ? ". " : " ";
  }
  return s;
}

// A Llama of 2 layers, d 32, 4 heads (2 kv) of 8, ffn 64, tied embeddings; vocab 257 fits byte tokens.
inline ModelConfig tiny_llama_config(int vocab = 257) {
  ModelConfig c;
  c.name = "test-tiny";
  c.arch = Arch::Llama;
  c.vocab_size = vocab;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_dim = 64;
  c.max_seq = 64;
  c.tied_embeddings = true;
  return c;
}

}  // namespace tk::testing
