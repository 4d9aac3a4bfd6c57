// Tokenizer: byte-level BPE as GPT-2, Llama 3 and Qwen2.5 use it, loaded from GPT-2 files
// (encoder.json + vocab.bpe), a tiktoken rank file, or a Hugging Face tokenizer.json.
// encode() is thread-safe (each call may be made from any thread); ids equal the reference libraries'.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tk {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads from a path: a directory holding tokenizer.json, or encoder.json + vocab.bpe; a
  // tokenizer.json file; or a tiktoken rank file (*.tiktoken). Throws tk::Error with a clear
  // message for anything it cannot load (e.g. a Unigram or WordPiece tokenizer.json).
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  // The files load(path) reads, the one it names first (tokenizer.json, encoder.json, the .tiktoken file), with
  // those beside it that belong to it when present (vocab.bpe; tokenizer_config.json and special_tokens_map.json,
  // which Hugging Face keeps with a tokenizer.json; a tiktoken file's PATH.json): what a copy of the tokenizer
  // holds, under the same names. The same tk::Error as load for a path that holds no tokenizer.
  static std::vector<std::string> files(const std::string& path);

  // Text to ids. Special tokens spelled in the text (e.g. "<|endoftext|>") become their ids only
  // when allow_special; otherwise they are ordinary text. (A tokenizer.json's non-special added
  // tokens always match, as in Hugging Face tokenizers.) Any bytes are accepted: invalid UTF-8
  // becomes byte tokens.
  virtual std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const = 0;
  // Ids back to bytes (invalid UTF-8 may result where ids split a character; that is faithful).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;

  virtual int32_t vocab_size() const = 0;   // one past the largest id, special tokens included
  virtual int32_t eot_id() const = 0;       // the token placed between documents
  virtual std::string eot_text() const = 0;  // e.g. "<|endoftext|>"
  // A stable hash of everything that changes the mapping text -> ids (vocab, merges, regex, specials).
  virtual uint64_t fingerprint() const = 0;
  virtual std::string kind() const = 0;     // "gpt2", "tiktoken", "hf-bpe"
};

}  // namespace tk
