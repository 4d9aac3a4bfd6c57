// Byte-level BPE (see bpe.h): building the merge table from explicit merges or from tiktoken ranks,
// and the heap-driven merge loop.
#include "data/bpe.h"

#include <algorithm>
#include <bit>

#include "core/error.h"
#include "core/hash.h"

namespace tk {
namespace {

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

}  // namespace

void Bpe::PairTable::reserve(size_t n) {
  size_t capacity = std::bit_ceil(std::max<size_t>(16, n * 2));  // load factor <= 1/2
  keys_.assign(capacity, kEmpty);
  vals_.assign(capacity, Merge{});
  count_ = 0;
}

size_t Bpe::PairTable::slot(uint64_t key) const {
  size_t mask = keys_.size() - 1;
  size_t i = splitmix64(key) & mask;
  while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask;
  return i;
}

void Bpe::PairTable::insert(int32_t left, int32_t right, Merge m) {
  if ((count_ + 1) * 2 > keys_.size()) {
    PairTable bigger;
    bigger.reserve(count_ + 1);
    for_each([&](uint64_t key, Merge v) { bigger.insert(int32_t(key >> 32), int32_t(uint32_t(key)), v); });
    *this = std::move(bigger);
  }
  uint64_t key = pair_key(left, right);
  size_t i = slot(key);
  if (keys_[i] == kEmpty) count_++;
  keys_[i] = key;
  vals_[i] = m;
}

const Bpe::Merge* Bpe::PairTable::find(int32_t left, int32_t right) const {
  if (keys_.empty()) return nullptr;
  size_t i = slot(pair_key(left, right));
  return keys_[i] == kEmpty ? nullptr : &vals_[i];
}

Bpe::Bpe(std::vector<std::string> token_bytes, bool ignore_merges)
    : tokens_(std::move(token_bytes)), ignore_merges_(ignore_merges) {
  ids_.reserve(tokens_.size());
  for (int32_t id = 0; id < int32_t(tokens_.size()); id++)
    if (!tokens_[id].empty()) ids_.emplace(tokens_[id], id);  // a spelling listed twice keeps its lower id
  for (int b = 0; b < 256; b++) {
    auto it = ids_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byte_ids_[b] = it == ids_.end() ? -1 : it->second;
  }
}

Bpe Bpe::from_merges(std::vector<std::string> token_bytes, const std::vector<std::pair<int32_t, int32_t>>& merges,
                     bool ignore_merges) {
  Bpe bpe(std::move(token_bytes), ignore_merges);
  bpe.pairs_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); rank++) {
    auto [left, right] = merges[rank];
    TK_CHECK(left >= 0 && right >= 0 && left < bpe.size() && right < bpe.size() && !bpe.tokens_[left].empty() &&
                 !bpe.tokens_[right].empty(),
             "merge {} refers to a token id ({}, {}) that is not in the vocabulary", rank, left, right);
    joined = bpe.tokens_[left] + bpe.tokens_[right];
    auto it = bpe.ids_.find(joined);
    TK_CHECK(it != bpe.ids_.end(), "merge {} ({} + {}) makes a token that is not in the vocabulary", rank, left, right);
    // A pair listed twice takes its later rank, as GPT-2's dict and tokenizers' HashMap do.
    bpe.pairs_.insert(left, right, Merge{int32_t(rank), it->second});
  }
  return bpe;
}

Bpe Bpe::from_ranks(std::vector<std::string> token_bytes) {
  Bpe bpe(std::move(token_bytes), /*ignore_merges=*/true);
  bpe.pairs_.reserve(bpe.tokens_.size() * 2);
  for (int32_t id = 0; id < bpe.size(); id++) {
    std::string_view t = bpe.tokens_[id];
    for (size_t cut = 1; cut < t.size(); cut++) {
      auto left = bpe.ids_.find(t.substr(0, cut)), right = bpe.ids_.find(t.substr(cut));
      if (left != bpe.ids_.end() && right != bpe.ids_.end())
        bpe.pairs_.insert(left->second, right->second, Merge{id, id});
    }
  }
  return bpe;
}

void Bpe::fail_missing_byte(uint8_t b) const {
  fail("the tokenizer has no token for the byte 0x{:02x}, so it cannot encode this text", b);
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    int32_t id = byte_ids_[uint8_t(piece[0])];
    if (id < 0) fail_missing_byte(uint8_t(piece[0]));
    out.push_back(id);
    return;
  }
  if (ignore_merges_) {
    auto it = ids_.find(piece);
    if (it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  merge(piece, out);
}

// Symbols form a doubly linked list over the piece's bytes; a merged-away symbol gets id -1. The
// heap holds candidate merges (rank, left symbol); an entry whose pair has changed since it was
// pushed is stale and skipped. Lowest rank first, then leftmost: the order tokenizers and tiktoken use.
void Bpe::merge(std::string_view piece, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Candidate> heap;
  const auto n = int32_t(piece.size());
  sym.resize(n);
  heap.clear();
  auto push_candidate = [&](int32_t pos) {
    if (const Merge* m = pairs_.find(sym[pos].id, sym[sym[pos].next].id)) {
      heap.push_back({m->rank, pos});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (int32_t i = 0; i < n; i++) {
    int32_t id = byte_ids_[uint8_t(piece[i])];
    if (id < 0) fail_missing_byte(uint8_t(piece[i]));
    sym[i] = {id, i - 1, i + 1};
  }
  for (int32_t i = 0; i + 1 < n; i++) push_candidate(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = sym[c.pos];
    if (left.id < 0 || left.next >= n) continue;
    Symbol& right = sym[left.next];
    const Merge* m = pairs_.find(left.id, right.id);
    if (!m || m->rank != c.rank) continue;
    left.id = m->id;
    right.id = -1;
    left.next = right.next;
    if (left.next < n) sym[left.next].prev = c.pos;
    if (left.prev >= 0) push_candidate(left.prev);
    if (left.next < n) push_candidate(c.pos);
  }
  for (int32_t i = 0; i < n; i = sym[i].next) out.push_back(sym[i].id);
}

std::vector<std::pair<uint64_t, int32_t>> Bpe::merge_table() const {
  std::vector<std::pair<uint64_t, int32_t>> table;
  table.reserve(pairs_.size());
  pairs_.for_each([&](uint64_t key, Merge m) { table.emplace_back(key, m.rank); });
  std::sort(table.begin(), table.end(), [](auto& a, auto& b) { return std::tie(a.second, a.first) < std::tie(b.second, b.first); });
  return table;
}

}  // namespace tk
