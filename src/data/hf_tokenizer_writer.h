// Writing a trained BPE as a Hugging Face tokenizer directory: tokenizer.json (model BPE, ByteLevel
// pre-tokenizer, decoder and post-processor, the special tokens as added tokens) and a minimal
// tokenizer_config.json, so that transformers' AutoTokenizer and tokamak's own loader both read it.
#pragma once
#include <cstdint>
#include <string>

#include "data/bpe_trainer.h"

namespace tk {

// The text of tokenizer.json: a deterministic function of `bpe` (keys in a fixed order, the vocabulary
// by id, merges as "left right" strings, which every version of tokenizers reads).
std::string hf_tokenizer_json(const TrainedBpe& bpe);
// The text of tokenizer_config.json: the first special token is the bos and eos token.
std::string hf_tokenizer_config_json(const TrainedBpe& bpe, int64_t model_max_length);

// Creates `dir` where needed and writes both files into it, each atomically. A tk::Error when `dir`
// is a file or cannot be created or written.
void write_hf_tokenizer(const TrainedBpe& bpe, const std::string& dir, int64_t model_max_length);

}  // namespace tk
