// Training a byte-level BPE the way GPT-2 and Hugging Face tokenizers' BpeTrainer do: text is split by
// GPT-2's pre-tokenizer regex, the pieces counted, and the most frequent adjacent pair of tokens merged
// again and again, within pieces, until the vocabulary is full. What `tokamak train-tokenizer` runs.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/progress.h"
#include "data/text_input.h"

namespace tk {

struct BpeTrainerOptions {
  int32_t vocab_size = 4096;  // in all: the 256 byte tokens, the merges' tokens and the special tokens
  uint64_t min_frequency = 2;  // the merging stops at the first pair seen fewer times than this
  std::vector<std::string> special_tokens{"<|endoftext|>"};  // the first ends documents
};

// Checks the options before any work: a tk::Error saying what to change.
void check_bpe_trainer_options(const BpeTrainerOptions& opts);

// The pre-tokenised pieces of a text (raw bytes) and how often each occurs: all BPE training needs.
class PieceCounts {
 public:
  // Splits one document with GPT-2's regex and counts its pieces. Text spelling a special token is
  // ordinary text here, as it is to `prepare`, which encodes documents with allow_special = false.
  void add_text(std::string_view text);
  void add(PieceCounts&& other);  // the counts of both

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Map = std::unordered_map<std::string, uint64_t, Hash, std::equal_to<>>;
  const Map& counts() const { return counts_; }
  uint64_t text_bytes() const { return text_bytes_; }
  uint64_t pieces() const { return pieces_; }  // with repetition

 private:
  Map counts_;
  uint64_t text_bytes_ = 0, pieces_ = 0;
  std::vector<std::string_view> split_;  // reused between calls
};

// Reads the input files as `prepare` does (through the document pipeline: a JSON line's document is its
// `text_field`) and counts their pieces on `threads` threads (0: one per core). The counts do not
// depend on the thread count. `progress`, when given, advances by the bytes of input read.
PieceCounts count_input_pieces(const std::vector<InputFile>& inputs, const std::string& text_field, int threads,
                               ProgressBar* progress);

struct TrainedBpe {
  // Raw bytes of each BPE token by id: the 256 single bytes in the order of their GPT-2 spellings'
  // code points ('!' is 0, as in GPT-2's encoder.json), then each merge's new token.
  std::vector<std::string> tokens;
  // (left id, right id) in rank order. A merge whose result was already a token adds no new one.
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<std::string> special_tokens;  // special_tokens[i] has the id tokens.size() + i

  uint64_t text_bytes = 0, pieces = 0, unique_pieces = 0;
  // Tokens the training text is left as after the merges (the pieces' counts times their lengths):
  // the number Tokenizer::encode gives for it.
  uint64_t text_tokens = 0;
  std::string stopped_because;  // why merging ended, for the user

  int32_t vocab_size() const { return int32_t(tokens.size() + special_tokens.size()); }
  double bytes_per_token() const { return text_tokens ? double(text_bytes) / double(text_tokens) : 0; }
};

// Learns the merges from the counted pieces. Ties between pairs of equal count go to the smaller pair
// of ids, (left, right) compared in order, as in Hugging Face tokenizers; the result depends only on
// the counts and the options. `progress`, when given, counts merges (ProgressUnit::Items).
TrainedBpe train_bpe(const PieceCounts& pieces, const BpeTrainerOptions& opts, ProgressBar* progress = nullptr);

}  // namespace tk
