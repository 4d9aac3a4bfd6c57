// Batch layout and the positions and segment ids of document masking, computed once where a batch is made.
#include "core/batch.h"

#include <algorithm>

#include "core/error.h"

namespace tk {
namespace {

// Each array starts on a 64-byte boundary.
size_t array_bytes(int B, int T) { return (size_t(B) * size_t(T) * sizeof(int32_t) + 63) / 64 * 64; }

}  // namespace

size_t batch_bytes(int B, int T) { return 4 * array_bytes(B, T); }

Batch batch_in(void* memory, int B, int T, bool doc_mask) {
  const size_t stride = array_bytes(B, T);
  char* at = static_cast<char*>(memory);
  Batch b;
  b.B = B;
  b.T = T;
  b.doc_mask = doc_mask;
  b.inputs = reinterpret_cast<int32_t*>(at);
  b.targets = reinterpret_cast<int32_t*>(at + stride);
  b.positions = reinterpret_cast<int32_t*>(at + 2 * stride);
  b.segments = reinterpret_cast<int32_t*>(at + 3 * stride);
  return b;
}

void fill_batch_positions(const Batch& batch, int b, std::span<const int32_t> doc_starts) {
  const std::span<const int32_t> starts = batch.doc_mask ? doc_starts : std::span<const int32_t>();
  size_t next = 0;
  int32_t doc_start = 0, segment = 0;
  for (int t = 0; t < batch.T; t++) {
    for (; next < starts.size() && starts[next] <= t; next++) {
      TK_CHECK(next == 0 || starts[next] > starts[next - 1], "row {}: document starts must increase", b);
      if (starts[next] > 0) {
        doc_start = starts[next];
        segment++;
      }
    }
    const int64_t n = int64_t(b) * batch.T + t;
    batch.positions[n] = t - doc_start;
    batch.segments[n] = segment;
  }
}

OwnedBatch::OwnedBatch(int B, int T, bool doc_mask)
    : memory_(batch_bytes(B, T) / sizeof(int32_t)), batch_(batch_in(memory_.data(), B, T, doc_mask)) {
  batch_.trained = batch_.tokens();  // every target (token 0) trained on until rows are set
}

OwnedBatch::OwnedBatch(int B, int T, const std::vector<int32_t>& tokens,
                       const std::vector<std::vector<int32_t>>& doc_starts, bool doc_mask)
    : OwnedBatch(B, T, doc_mask) {
  TK_CHECK(tokens.size() == size_t(B) * size_t(T + 1), "a batch of {} rows of {} tokens needs {} token ids, got {}", B,
           T + 1, size_t(B) * size_t(T + 1), tokens.size());
  TK_CHECK(doc_starts.empty() || doc_starts.size() == size_t(B),
           "a batch of {} rows needs the document starts of each row, got {}", B, doc_starts.size());
  const int32_t first_only[] = {0};
  for (int b = 0; b < B; b++)
    set_row(b, tokens.data() + size_t(b) * size_t(T + 1),
            doc_starts.empty() ? std::span<const int32_t>(first_only) : std::span<const int32_t>(doc_starts[size_t(b)]));
}

void OwnedBatch::set_row(int b, const int32_t* window, std::span<const int32_t> doc_starts) {
  const int64_t at = int64_t(b) * batch_.T;
  std::copy(window, window + batch_.T, batch_.inputs + at);
  std::copy(window + 1, window + batch_.T + 1, batch_.targets + at);
  fill_batch_positions(batch_, b, doc_starts);
  batch_.trained = count_trained(batch_);
}

int64_t count_trained(const Batch& batch) {
  return int64_t(std::count_if(batch.targets, batch.targets + batch.tokens(),
                               [](int32_t t) { return t != kUntrainedTarget; }));
}

}  // namespace tk
