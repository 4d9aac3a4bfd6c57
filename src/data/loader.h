// DataLoader: memory-maps prepared token shards and yields packed micro-batches (core/batch.h): per row a window of
// T+1 tokens as its T inputs and T targets, with the positions and document segments the model uploads, in a
// deterministic order from a seed, a serialisable position for bit-exact resume, and data-parallel ranks
// dealt one process's batches in turn. Which window each row reads, per epoch and per rank, is specified in docs/data.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/batch.h"

namespace tk {

struct LoaderOptions {
  std::string data_dir;       // holds meta.json and the shards written by `tokamak prepare`
  std::string split = "train";  // "train" or "val"
  int B = 1, T = 1024;
  uint64_t seed = 1234;
  bool shuffle = true;        // false: consecutive windows from the split's start (validation)
  int rank = 0, world = 1;    // data-parallel slice
  int prefetch = 2;           // batches prepared ahead on a background thread (0: on the caller's thread)
  bool doc_mask = false;      // positions and segments restart at each document (Batch::doc_mask)
  // The batch buffers' host memory, allocated and released on the caller's thread: the trainer passes its backend's
  // Ops::allocate_host / release_host (page-locked on CUDA, so that the model's upload reads the buffer directly as
  // an asynchronous copy). Unset: ordinary 64-byte aligned memory. Whatever `release` needs must outlive the loader.
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void*)> release;
  int64_t expect_vocab = -1;  // when >= 0: refuse shards whose vocab size differs
  uint64_t expect_fingerprint = 0;  // when != 0: refuse shards of another tokenizer
};

class DataLoader {
 public:
  virtual ~DataLoader() = default;
  // The environment variable TOKAMAK_LOADER_DELAY_MS, when set, makes every call of next() wait that many
  // milliseconds longer, counted as data wait: a reader slower than any step, whatever the prefetch and however busy
  // the machine (on demand, for tests and for seeing what `tokamak profile` says).
  static std::unique_ptr<DataLoader> open(const LoaderOptions& opts);

  // The next batch; valid until the next call. Never blocks forever: wraps to a new epoch (with a
  // new shuffle) at the end of the split. Validation iterators (shuffle=false) also wrap.
  virtual const Batch& next() = 0;
  // Seconds the consumer spent blocked inside next() since the last call of this function.
  virtual double take_wait_seconds() = 0;

  // Position for checkpoints: restoring it makes next() return exactly what it would have returned.
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;

  // This rank's batches in one pass over the split: its share of one process's, rounded down (docs/data.md). An
  // eval pass is this many calls of next().
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t tokens_in_split() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual uint64_t tokenizer_fingerprint() const = 0;
};

}  // namespace tk
