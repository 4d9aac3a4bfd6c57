// BPE training (see bpe_trainer.h): counting pieces on the document pipeline's workers, then the merge loop
// of Hugging Face tokenizers' BpeTrainer, step for step: pair counts kept up to date as words change, a max-heap of
// (count, pair) whose stale entries are re-pushed with their current count when they surface, and for
// each entry the set of words it was pushed for, so that a merge visits only the words that can hold it.
#include "data/bpe_trainer.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/byte_level.h"
#include "data/document_pipeline.h"
#include "data/pretokenize.h"
#include "data/tokenizer_spec.h"

namespace tk {
namespace {

const Pretokenizer& gpt2_pretokenizer() {
  static const Pretokenizer p({kGpt2Pattern});
  return p;
}

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }
int32_t left_of(uint64_t key) { return int32_t(key >> 32); }
int32_t right_of(uint64_t key) { return int32_t(uint32_t(key)); }

// The 256 single-byte tokens in the order of their spellings' code points, as GPT-2's encoder.json
// and Hugging Face's trainer (which sorts its alphabet by code point) number them.
std::vector<std::string> byte_tokens() {
  std::vector<int> bytes(256);
  for (int b = 0; b < 256; b++) bytes[b] = b;
  std::sort(bytes.begin(), bytes.end(),
            [](int a, int b) { return byte_level::char_of_byte(uint8_t(a)) < byte_level::char_of_byte(uint8_t(b)); });
  std::vector<std::string> tokens;
  for (int b : bytes) tokens.emplace_back(1, char(b));
  return tokens;
}

// The unique pieces as words of token ids, in byte order of the pieces (so that nothing depends on a
// hash map's order), with their counts; the symbols of all words back to back.
struct Words {
  std::vector<int32_t> symbols;
  std::vector<uint32_t> begin, size;
  std::vector<uint64_t> count;
};

Words make_words(const PieceCounts& pieces, const std::vector<std::string>& tokens) {
  std::vector<const std::pair<const std::string, uint64_t>*> sorted;
  sorted.reserve(pieces.counts().size());
  for (const auto& entry : pieces.counts()) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  int32_t id_of_byte[256];
  for (int32_t id = 0; id < 256; id++) id_of_byte[uint8_t(tokens[id][0])] = id;
  Words w;
  for (auto* entry : sorted) {
    w.begin.push_back(uint32_t(w.symbols.size()));
    w.size.push_back(uint32_t(entry->first.size()));
    w.count.push_back(entry->second);
    for (char c : entry->first) w.symbols.push_back(id_of_byte[uint8_t(c)]);
  }
  return w;
}

class Merger {
 public:
  Merger(Words words, std::vector<std::string> tokens) : w_(std::move(words)), tokens_(std::move(tokens)) {
    for (int32_t id = 0; id < int32_t(tokens_.size()); id++) ids_.emplace(tokens_[id], id);
  }

  // Merges until the vocabulary holds `target` tokens or no pair is left that occurs `min_frequency`
  // times; returns why it stopped.
  std::string run(size_t target, uint64_t min_frequency, ProgressBar* progress) {
    count_pairs();
    while (tokens_.size() < target) {
      if (heap_.empty()) return "every piece of the text is a single token";
      Entry top = pop();
      const int64_t now = pair_count_[top.pair];
      if (top.count != now) {  // stale: the pair's count changed since this entry was pushed
        top.count = now;
        push(top);
        continue;
      }
      // Every pair that occurs has an entry whose count is at least its own: this one is the largest.
      if (top.count < 1) return "every piece of the text is a single token";
      if (uint64_t(top.count) < min_frequency)
        return fmt::format("the most frequent pair left occurs {} time{}, fewer than the minimum frequency {}",
                           top.count, top.count == 1 ? "" : "s", min_frequency);
      merge(top);
      if (progress) progress->add(1, 1);
    }
    return "the vocabulary is full";
  }

  std::vector<std::string>& tokens() { return tokens_; }
  std::vector<std::pair<int32_t, int32_t>>& merges() { return merges_; }

  uint64_t text_tokens() const {
    uint64_t n = 0;
    for (size_t i = 0; i < w_.count.size(); i++) n += w_.count[i] * w_.size[i];
    return n;
  }

 private:
  // A heap entry: a pair, its count when pushed, and the words it was pushed for (an index into where_).
  struct Entry {
    int64_t count;
    uint64_t pair;
    int32_t where;
  };
  // Higher count first; among equal counts the smaller (left, right), which is the smaller key.
  static bool below(const Entry& a, const Entry& b) {
    return a.count != b.count ? a.count < b.count : a.pair > b.pair;
  }

  void push(Entry e) {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), below);
  }
  Entry pop() {
    std::pop_heap(heap_.begin(), heap_.end(), below);
    Entry e = heap_.back();
    heap_.pop_back();
    return e;
  }

  // Collects, for one round, the words in which each pair appeared; then pushes one entry per pair.
  struct NewPairs {
    std::unordered_map<uint64_t, size_t> index;
    std::vector<std::pair<uint64_t, std::vector<int32_t>>> lists;  // in order of first appearance

    void add(uint64_t pair, int32_t word) {
      auto [it, fresh] = index.emplace(pair, lists.size());
      if (fresh) lists.emplace_back(pair, std::vector<int32_t>());
      std::vector<int32_t>& words = lists[it->second].second;
      if (words.empty() || words.back() != word) words.push_back(word);  // words arrive in order
    }
  };

  void push_all(NewPairs& found) {
    for (auto& [pair, words] : found.lists) {
      const int64_t count = pair_count_[pair];
      if (count <= 0) continue;
      where_.push_back(std::move(words));
      push({count, pair, int32_t(where_.size() - 1)});
    }
  }

  void count_pairs() {
    NewPairs found;
    for (int32_t i = 0; i < int32_t(w_.count.size()); i++) {
      const int32_t* s = &w_.symbols[w_.begin[i]];
      for (uint32_t k = 0; k + 1 < w_.size[i]; k++) {
        const uint64_t pair = pair_key(s[k], s[k + 1]);
        pair_count_[pair] += int64_t(w_.count[i]);
        found.add(pair, i);
      }
    }
    push_all(found);
  }

  // Replaces every (a, b) in every word the entry names by the token a+b, left to right, and updates
  // the counts of the pairs around each replacement (the pair merged itself is left as it is, as in
  // Hugging Face tokenizers, where nothing reads it again).
  void merge(const Entry& top) {
    const int32_t a = left_of(top.pair), b = right_of(top.pair);
    const int32_t c = token_for(tokens_[a] + tokens_[b]);
    merges_.emplace_back(a, b);
    NewPairs found;
    for (int32_t word : where_[top.where]) {
      auto change = [&](int32_t left, int32_t right, int delta) {
        pair_count_[pair_key(left, right)] += delta * int64_t(w_.count[word]);
        if (delta > 0) found.add(pair_key(left, right), word);
      };
      int32_t* s = &w_.symbols[w_.begin[word]];
      const uint32_t n = w_.size[word];
      uint32_t out = 0;
      for (uint32_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
          if (out > 0) {
            change(s[out - 1], a, -1);
            change(s[out - 1], c, +1);
          }
          if (i + 2 < n) {
            change(b, s[i + 2], -1);
            change(c, s[i + 2], +1);
          }
          s[out++] = c;
          i += 2;
        } else {
          s[out++] = s[i++];
        }
      }
      w_.size[word] = out;
    }
    std::vector<int32_t>().swap(where_[top.where]);  // this entry is used up
    push_all(found);
  }

  // The id of the token spelled `bytes`: an existing one (a merge can re-make a token another merge
  // made before; it then adds none), else a new one.
  int32_t token_for(std::string bytes) {
    auto [it, fresh] = ids_.emplace(bytes, int32_t(tokens_.size()));
    if (fresh) tokens_.push_back(std::move(bytes));
    return it->second;
  }

  Words w_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, int64_t> pair_count_;
  std::vector<Entry> heap_;
  std::vector<std::vector<int32_t>> where_;
};

}  // namespace

void check_bpe_trainer_options(const BpeTrainerOptions& o) {
  TK_CHECK(!o.special_tokens.empty(),
           "name at least one special token: the first one separates documents (e.g. <|endoftext|>)");
  std::set<std::string> seen;
  for (const std::string& t : o.special_tokens) {
    TK_CHECK(!t.empty(), "a special token cannot be empty");
    TK_CHECK(seen.insert(t).second, "the special token {:?} is named twice", t);
    try {
      (void)nlohmann::json(t).dump();  // tokenizer.json holds it as a JSON string: UTF-8 only
    } catch (const nlohmann::json::exception&) {
      fail("the special token {:?} is not valid UTF-8", t);
    }
  }
  const int64_t least = 257 + int64_t(o.special_tokens.size());
  TK_CHECK(o.vocab_size >= least,
           "--vocab-size {} is too small: it must be at least {} (256 byte tokens, at least one merge, and {} "
           "special token{})",
           o.vocab_size, least, o.special_tokens.size(), o.special_tokens.size() == 1 ? "" : "s");
  TK_CHECK(o.vocab_size <= kMaxTokenId, "--vocab-size {} is too large: at most {}", o.vocab_size, kMaxTokenId);
}

void PieceCounts::add_text(std::string_view text) {
  split_.clear();
  gpt2_pretokenizer().split(text, split_);
  for (std::string_view piece : split_) {
    auto it = counts_.find(piece);
    if (it == counts_.end()) it = counts_.emplace(std::string(piece), 0).first;
    it->second++;
  }
  text_bytes_ += text.size();
  pieces_ += split_.size();
}

void PieceCounts::add(PieceCounts&& other) {
  for (auto& [piece, count] : other.counts_) counts_[piece] += count;
  text_bytes_ += other.text_bytes_;
  pieces_ += other.pieces_;
  other = PieceCounts();
}

PieceCounts count_input_pieces(const std::vector<InputFile>& inputs, const std::string& text_field, int threads,
                               ProgressBar* progress) {
  // Each worker counts into counts of its own; their sum does not depend on which worker counted what.
  const DocumentPipelineOptions opts{text_field, threads};
  std::vector<PieceCounts> counts(size_t(document_pipeline_threads(opts)));
  run_document_pipeline<uint64_t>(
      inputs, opts,
      [&](Documents& documents, int worker) {
        PieceCounts& mine = counts[size_t(worker)];
        const uint64_t before = mine.pieces();
        for (const std::string& text : documents) mine.add_text(text);
        return mine.pieces() - before;
      },
      [&](uint64_t& pieces, uint64_t disk_bytes) {
        if (progress) progress->add(disk_bytes, pieces);
      });
  std::sort(counts.begin(), counts.end(), [](auto& x, auto& y) { return x.counts().size() > y.counts().size(); });
  PieceCounts all = std::move(counts[0]);
  for (size_t i = 1; i < counts.size(); i++) all.add(std::move(counts[i]));
  return all;
}

TrainedBpe train_bpe(const PieceCounts& pieces, const BpeTrainerOptions& opts, ProgressBar* progress) {
  check_bpe_trainer_options(opts);
  TK_CHECK(pieces.text_bytes() > 0, "the input holds no text to learn a tokenizer from");
  Merger merger(make_words(pieces, byte_tokens()), byte_tokens());
  TrainedBpe out;
  out.stopped_because = merger.run(size_t(opts.vocab_size) - opts.special_tokens.size(), opts.min_frequency, progress);
  out.tokens = std::move(merger.tokens());
  out.merges = std::move(merger.merges());
  out.special_tokens = opts.special_tokens;
  out.text_bytes = pieces.text_bytes();
  out.pieces = pieces.pieces();
  out.unique_pieces = pieces.counts().size();
  out.text_tokens = merger.text_tokens();
  // tokenizer.json keys its vocabulary by spelling: a special token spelled like a BPE token would clash.
  std::set<std::string> spelled;
  for (const std::string& t : out.tokens) spelled.insert(byte_level::spell(t));
  for (const std::string& special : opts.special_tokens)
    TK_CHECK(!spelled.count(special),
             "the special token {:?} is spelled like a token learned from the text; choose special tokens that "
             "cannot occur as text pieces, e.g. <|name|>",
             special);
  return out;
}

}  // namespace tk
