// First-fit packing over a bounded set of open sequences (packing.h). Deterministic: the output depends only on the
// examples' order and lengths.
#include "data/packing.h"

#include "core/error.h"

namespace tk {
namespace {

// Open sequences an example may go into: more fill sequences better, and hold more examples back in memory.
constexpr size_t kOpenSequences = 16;

}  // namespace

SequencePacker::SequencePacker(int64_t sequence, int32_t filler_id, Emit emit)
    : sequence_(sequence), filler_id_(filler_id), emit_(std::move(emit)) {
  TK_CHECK(sequence >= 2, "--seq must be at least 2 tokens to pack examples, not {}", sequence);
}

void SequencePacker::add(ExampleTokens e) {
  stats_.examples++;
  if (int64_t(e.tokens.size()) + 1 > sequence_) {  // keep the beginning: the prompt and the start of the answer
    e.tokens.resize(size_t(sequence_ - 1));
    e.trained.resize(size_t(sequence_));
    e.trained.back() = 0;  // the end-of-text no longer ends the answer
    stats_.truncated++;
    if (e.trained_count() == 0) {
      stats_.dropped++;
      return;
    }
  }
  const int64_t length = int64_t(e.tokens.size()) + 1;
  stats_.trained += e.trained_count();
  for (Open& o : open_)
    if (sequence_ - o.used >= length) {
      o.used += length;
      o.documents.push_back(std::move(e));
      if (o.used == sequence_) close(size_t(&o - open_.data()));
      return;
    }
  if (open_.size() == kOpenSequences) close(0);
  open_.push_back({{}, length});
  open_.back().documents.push_back(std::move(e));
  if (length == sequence_) close(open_.size() - 1);
}

void SequencePacker::close(size_t i) {
  Open o = std::move(open_[i]);
  open_.erase(open_.begin() + ptrdiff_t(i));
  if (const int64_t free = sequence_ - o.used; free > 0) {
    ExampleTokens filler;  // free - 1 filler tokens and the end-of-text, none trained on
    filler.tokens.assign(size_t(free - 1), filler_id_);
    filler.trained.assign(size_t(free), 0);
    stats_.filler += uint64_t(free);
    o.documents.push_back(std::move(filler));
  }
  stats_.sequences++;
  stats_.slots += uint64_t(sequence_);
  emit_(o.documents);
}

void SequencePacker::finish() {
  while (!open_.empty()) close(0);
  if (stats_.sequences == 0) return;
  ExampleTokens last;  // the token after the last sequence: the target of its last input, untrained
  last.trained.assign(1, 0);
  emit_({last});
}

}  // namespace tk
