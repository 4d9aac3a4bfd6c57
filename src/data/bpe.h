// Byte-level BPE merging: the vocabulary as raw bytes, the merge table, and the loop that turns one
// pre-tokenised piece into ids. Merges run on a linked list of symbols with a min-heap of candidate
// pairs ordered by (rank, position), as Hugging Face tokenizers and tiktoken do: O(n log n) a piece.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tk {

class Bpe {
 public:
  // token_bytes[id] is the token's raw bytes, "" for an id no BPE token has. Every single byte that
  // text can contain needs a token; encode() throws tk::Error naming a byte that has none.
  //
  // Explicit merges (GPT-2 vocab.bpe, tokenizer.json): merges[r] = (left id, right id) has rank r,
  // and makes the token spelled left+right. ignore_merges: a piece that is itself a token is that
  // token, without merging (Llama 3 sets it). Throws tk::Error for a merge whose result is no token.
  static Bpe from_merges(std::vector<std::string> token_bytes, const std::vector<std::pair<int32_t, int32_t>>& merges,
                         bool ignore_merges);
  // tiktoken's rule: two adjacent parts may merge when their concatenation is a token, the token
  // with the lowest rank (its id) first; a piece that is itself a token maps to it directly.
  static Bpe from_ranks(std::vector<std::string> token_bytes);

  // Appends the ids of one piece (non-empty) to `out`.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  int32_t size() const { return int32_t(tokens_.size()); }
  const std::string& token(int32_t id) const { return tokens_[id]; }
  bool ignore_merges() const { return ignore_merges_; }

  // The merge table in a canonical order, (left, right, rank), for fingerprints.
  std::vector<std::pair<uint64_t, int32_t>> merge_table() const;

 private:
  struct Merge {
    int32_t rank = -1;
    int32_t id = -1;  // the token the pair becomes
  };
  // Open-addressing map from a pair of ids to its merge: the innermost lookup of encode().
  class PairTable {
   public:
    void reserve(size_t n);
    void insert(int32_t left, int32_t right, Merge m);  // replaces an existing entry
    const Merge* find(int32_t left, int32_t right) const;
    template <class F> void for_each(F&& f) const {
      for (size_t i = 0; i < keys_.size(); i++)
        if (keys_[i] != kEmpty) f(keys_[i], vals_[i]);
    }
    size_t size() const { return count_; }

   private:
    static constexpr uint64_t kEmpty = ~0ull;
    size_t slot(uint64_t key) const;
    std::vector<uint64_t> keys_;
    std::vector<Merge> vals_;
    size_t count_ = 0;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  explicit Bpe(std::vector<std::string> token_bytes, bool ignore_merges);
  [[noreturn]] void fail_missing_byte(uint8_t b) const;
  void merge(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  int32_t byte_ids_[256];
  PairTable pairs_;
  bool ignore_merges_ = false;
};

}  // namespace tk
