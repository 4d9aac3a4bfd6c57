// What each tokenizer loader (GPT-2 files, tiktoken ranks, tokenizer.json) reads out of its files:
// one description of a byte-level BPE tokenizer, from which tokenizer.cpp builds the Tokenizer.
// Internal to src/data; code elsewhere uses tokenizer.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/added_tokens.h"
#include "data/tokenizer.h"

namespace tk {

// GPT-2's pre-tokenizer regex, also Hugging Face's ByteLevel(use_regex=true).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Ids at or beyond this are refused as corrupt (the largest vocabularies in use are near 2^18).
inline constexpr int64_t kMaxTokenId = 1 << 24;

enum class Normalization { None, Nfc };

struct TokenizerSpec {
  std::string kind;                      // "gpt2", "tiktoken", "hf-bpe"
  std::vector<std::string> token_bytes;  // the BPE vocabulary as raw bytes, by id ("" where none)
  // Explicit merges, (left id, right id) in rank order; or, for tiktoken, merges_from_ranks.
  std::vector<std::pair<int32_t, int32_t>> merges;
  bool merges_from_ranks = false;
  bool ignore_merges = false;
  std::vector<std::string> patterns;  // pre-tokenizer regexes, applied in turn
  Normalization normalization = Normalization::None;
  std::vector<AddedToken> added;
  // Ids that decode to text but that BPE never produces: tokenizer.json vocab entries spelled
  // outside the byte alphabet.
  std::vector<std::pair<int32_t, std::string>> decode_only;
  std::string eot_text;  // must be one of `added`
};

TokenizerSpec read_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);
TokenizerSpec read_tiktoken_file(const std::string& path);
TokenizerSpec read_hf_tokenizer_json(const std::string& path);

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerSpec spec);

}  // namespace tk
