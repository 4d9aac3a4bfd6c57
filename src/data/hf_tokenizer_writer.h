// Writing a trained BPE (or GPT-2's files, which hold one) as a Hugging Face tokenizer directory: tokenizer.json
// (model BPE, ByteLevel pre-tokenizer, decoder and post-processor, the special tokens as added tokens) and a minimal
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

// GPT-2's own files (encoder.json, vocab.bpe) as the BPE they hold, so that a tokenizer of them is written as a
// tokenizer.json that transformers' AutoTokenizer loads: its byte-level tokens by id, its merges in rank order and
// <|endoftext|> after them. A tk::Error naming the file when the ids are not laid out so (every id below the
// special token's a byte-level token), as in GPT-2's files they are.
TrainedBpe read_gpt2_bpe(const std::string& encoder_json, const std::string& vocab_bpe);

// Creates `dir` where needed and writes both files into it, each atomically. A tk::Error when `dir`
// is a file or cannot be created or written.
void write_hf_tokenizer(const TrainedBpe& bpe, const std::string& dir, int64_t model_max_length);

}  // namespace tk
