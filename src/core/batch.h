// Batch: one micro-batch as the model uploads it, four int32 arrays of B*T tokens (row-major [B, T]) that the
// loader fills in host memory its caller gives it (page-locked on CUDA, so the upload reads it directly). It lives in
// core because data makes it and model reads it. docs/data.md says which tokens each row holds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tk {

// A target the loss leaves out (a prompt's token, packing's filler): the ops' ignore index.
inline constexpr int32_t kUntrainedTarget = -1;

struct Batch {
  int B = 0, T = 0;
  // Document masking: positions restart at 0 at each document start and segments number the documents of the
  // row (0 for the one it starts in). Without it positions are 0..T-1 and every segment is 0. A model refuses a
  // batch made otherwise than it trains.
  bool doc_mask = false;
  int32_t* inputs = nullptr;     // [B, T]: row b's window of T+1 tokens, its first T
  int32_t* targets = nullptr;    // [B, T]: the window's last T, the token after each input; kUntrainedTarget where
                                 // the data's loss mask leaves that token out
  int64_t trained = 0;           // targets that are not kUntrainedTarget: the loss's share of the global mean
  int32_t* positions = nullptr;  // [B, T]: RoPE's positions
  int32_t* segments = nullptr;   // [B, T]: attention's segment ids
  int64_t tokens() const { return int64_t(B) * T; }
};

// The host memory a B x T batch's arrays take, and the Batch laid out in `memory` (at least batch_bytes).
size_t batch_bytes(int B, int T);
Batch batch_in(void* memory, int B, int T, bool doc_mask);

// Positions and segments of row b from the offsets in [0, T] at which documents begin within its window of T+1
// tokens (0 first, increasing; a start at T, the last target's, changes nothing).
void fill_batch_positions(const Batch& batch, int b, std::span<const int32_t> doc_starts);

// The targets of the batch that are trained on (not kUntrainedTarget).
int64_t count_trained(const Batch& batch);

// A Batch in memory of its own, for batches made by hand (tests, `tokamak bench`, `tokamak grads`): rows of T+1
// tokens, each one document unless its starts are given.
class OwnedBatch {
 public:
  OwnedBatch(int B, int T, bool doc_mask = false);
  // tokens [B, T+1]; doc_starts empty (one document a row) or one list a row.
  OwnedBatch(int B, int T, const std::vector<int32_t>& tokens, const std::vector<std::vector<int32_t>>& doc_starts = {},
             bool doc_mask = false);
  OwnedBatch(const OwnedBatch&) = delete;  // batch() points into memory_, which a move keeps and a copy would not
  OwnedBatch& operator=(const OwnedBatch&) = delete;
  OwnedBatch(OwnedBatch&&) = default;
  // Row b from its window of T+1 tokens and its document starts (fill_batch_positions); `trained` recounted.
  void set_row(int b, const int32_t* window, std::span<const int32_t> doc_starts);
  const Batch& batch() const { return batch_; }

 private:
  std::vector<int32_t> memory_;
  Batch batch_;
};

}  // namespace tk
