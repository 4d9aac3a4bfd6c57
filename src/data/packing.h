// Packing examples into sequences without cutting them: each sequence of S tokens (the training rows' length) holds
// whole examples, each followed by its end-of-text token, placed first-fit into the oldest of a few open sequences;
// what is left of a sequence when it is closed is one filler document (untrained), so that sequence k of a split
// is exactly its tokens [k*S, (k+1)*S) and the loader's rows fall on sequence boundaries. An example longer than a
// sequence is truncated to its first S - 1 tokens (its end-of-text then untrained). The rule: docs/data.md.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "data/example_tokens.h"

namespace tk {

struct PackingStats {
  uint64_t examples = 0, truncated = 0, dropped = 0;  // dropped: nothing left to train on after truncation
  uint64_t sequences = 0, slots = 0, trained = 0, filler = 0;
  double efficiency() const { return slots ? double(trained) / double(slots) : 0; }  // trained tokens / slots
};

class SequencePacker {
 public:
  // `emit` receives each closed sequence's documents (tokens without their end-of-text, and the mask with it).
  using Emit = std::function<void(const std::vector<ExampleTokens>& documents)>;
  SequencePacker(int64_t sequence, int32_t filler_id, Emit emit);

  void add(ExampleTokens example);
  // Closes every open sequence, then emits a lone end-of-text token: the last sequence's last target.
  void finish();
  const PackingStats& stats() const { return stats_; }

 private:
  struct Open {
    std::vector<ExampleTokens> documents;
    int64_t used = 0;
  };
  void close(size_t i);

  int64_t sequence_;
  int32_t filler_id_;
  Emit emit_;
  std::vector<Open> open_;  // in the order they were opened
  PackingStats stats_;
};

}  // namespace tk
