// DataLoader over prepared shards: the split's shards are read as one token stream cut into windows of
// T+1 tokens every T tokens; each epoch takes the windows in an order fixed by (seed, epoch), and a
// background thread fills a ring of batch buffers ahead of the consumer. Specification: docs/data.md.
#include "data/loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/format.h"
#include "core/fs.h"
#include "core/log.h"
#include "data/permutation.h"
#include "data/shard.h"

namespace tk {
namespace stdfs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The shards of one split, read as one stream of tokens.
class TokenStream {
 public:
  explicit TokenStream(std::vector<ShardReader> shards) : shards_(std::move(shards)) {
    starts_.push_back(0);
    for (const ShardReader& s : shards_) starts_.push_back(starts_.back() + s.tokens());
  }

  uint64_t size() const { return starts_.back(); }

  void read(uint64_t begin, uint64_t n, int32_t* out) const {
    while (n > 0) {
      const size_t i = shard_of(begin);
      const uint64_t take = std::min(n, starts_[i + 1] - begin);
      shards_[i].read(begin - starts_[i], take, out);
      out += take;
      begin += take;
      n -= take;
    }
  }

  // Into `out`, one byte a token of [begin, begin + n): 1 where the shards' loss mask trains on it.
  void read_trained(uint64_t begin, uint64_t n, uint8_t* out) const {
    while (n > 0) {
      const size_t i = shard_of(begin);
      const uint64_t take = std::min(n, starts_[i + 1] - begin);
      shards_[i].read_trained(begin - starts_[i], take, out);
      out += take;
      begin += take;
      n -= take;
    }
  }

  // Into `out`: 0, then every offset t in (0, n) at which a document begins at stream position begin + t.
  void doc_starts(uint64_t begin, uint64_t n, std::vector<int32_t>& out) const {
    out.assign(1, 0);
    const uint64_t end = begin + n;
    for (size_t i = shard_of(begin); i < shards_.size() && starts_[i] < end; i++) {
      const std::span<const uint64_t> offsets = shards_[i].doc_offsets();
      const uint64_t lo = begin + 1 > starts_[i] ? begin + 1 - starts_[i] : 0;  // local, inclusive
      const uint64_t hi = end - starts_[i];                                     // local, exclusive
      for (auto it = std::lower_bound(offsets.begin(), offsets.end(), lo); it != offsets.end() && *it < hi; ++it)
        out.push_back(int32_t(starts_[i] + *it - begin));
    }
  }

 private:
  size_t shard_of(uint64_t pos) const {
    return size_t(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin()) - 1;
  }

  std::vector<ShardReader> shards_;
  std::vector<uint64_t> starts_;  // starts_[i]: stream position of shard i's first token; back(): the total
};

// Which window each row of each batch reads. Window w is the tokens [w*T, w*T + T]: consecutive windows
// share one token, so every token after the first is a target exactly once per epoch. The ranks read the batches
// one process would read, dealt out in turn: rank r's batch number k is the one-process batch k * world + r, so
// the epochs and their shuffles are those of one process whatever the world size.
class BatchOrder {
 public:
  BatchOrder(uint64_t windows, const LoaderOptions& o) : windows_(windows), per_epoch_(windows / o.B), opts_(o) {}

  // One process's batches per epoch, and each rank's share of them (rounded down).
  uint64_t global_batches_per_epoch() const { return per_epoch_; }
  uint64_t batches_per_epoch() const { return per_epoch_ / opts_.world; }

  // The window that row `row` of this rank's batch number `batch` (counted across epochs) reads.
  uint64_t window(uint64_t batch, int row) const {
    const uint64_t global = batch * opts_.world + opts_.rank;
    const uint64_t epoch = global / per_epoch_, step = global % per_epoch_;
    const uint64_t pos = step * opts_.B + row;
    if (!opts_.shuffle) return pos;
    return RandomPermutation(windows_, splitmix64(opts_.seed ^ splitmix64(epoch)))(pos);
  }

 private:
  uint64_t windows_, per_epoch_;
  LoaderOptions opts_;
};

// Host memory for one batch, from the caller's allocator (LoaderOptions::allocate) or 64-byte aligned otherwise.
class HostBuffer {
 public:
  HostBuffer(size_t bytes, const LoaderOptions& o) : release_(o.release) {
    bytes = (bytes + 63) / 64 * 64;
    data_ = o.allocate ? o.allocate(bytes) : std::aligned_alloc(64, bytes);
    if (!data_) fail("cannot allocate {} of host memory for batches", format_bytes_decimal(double(bytes)));
  }
  ~HostBuffer() { release_ ? release_(data_) : std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }

 private:
  std::function<void(void*)> release_;
  void* data_ = nullptr;
};

struct Slot {
  explicit Slot(const LoaderOptions& o)
      : memory(batch_bytes(o.B, o.T), o), batch(batch_in(memory.data(), o.B, o.T, o.doc_mask)) {}
  HostBuffer memory;
  Batch batch;
  std::vector<int32_t> doc_starts;  // one row's, while the slot is filled
  std::vector<uint8_t> trained;     // one row's targets' loss mask, while the slot is filled
};

// Reads up to 32 MB of a shard with its cached pages dropped first, so the rate is the mount's.
double read_rate_mb_per_s(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  std::vector<char> buf(4 << 20);
  uint64_t total = 0;
  const auto start = Clock::now();
  for (ssize_t n; total < (32u << 20) && (n = ::read(fd, buf.data(), buf.size())) > 0;) total += uint64_t(n);
  const double seconds = seconds_since(start);
  ::close(fd);
  return double(total) / 1e6 / std::max(seconds, 1e-9);
}

// Once per data directory per process: a slow mount turns a GPU-bound run into a disk-bound one, and
// the fix (copy the data to a local disk) is easy once the user knows.
void warn_if_slow_mount(const std::string& dir, const std::string& sample_shard) {
  const std::string type = fs::mount_type(dir);
  if (!fs::is_slow_mount(type)) return;
  static std::mutex mu;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::error_code ec;
    if (!warned.insert(stdfs::weakly_canonical(dir, ec).string()).second) return;
  }
  log::warn("data in {} is on a {} mount (read {:.1f} MB/s): move it to a local disk, e.g. ~/data, for faster loading",
            dir, type, read_rate_mb_per_s(sample_shard));
}

struct Split {
  TokenStream stream;
  int64_t vocab_size;
  uint64_t fingerprint;
};

// Examples packed into sequences of P tokens (prepare --seq P) are read as they were packed only at T = P: rows of
// another length would cut examples apart from their prompts.
void check_packing(const DatasetListing& listing, const LoaderOptions& o) {
  if (listing.packed_sequence == 0) return;
  if (o.T != listing.packed_sequence)
    fail("{} holds examples packed into sequences of {} tokens (prepare --seq {}), but this run reads rows of {}: "
         "train with --seq {}, or prepare the data again with --seq {}",
         o.data_dir, listing.packed_sequence, listing.packed_sequence, o.T, listing.packed_sequence, o.T);
  if (!o.doc_mask)
    log::warn("{} holds packed examples: without --doc-mask each example also attends to the ones packed before it",
              o.data_dir);
}

// Opens every shard meta.json lists for the split, checking each against meta.json and the caller's
// expectations: a dataset that was modified or half-replaced after prepare is refused here.
Split open_split(const LoaderOptions& o) {
  const DatasetListing listing = read_dataset_listing(o.data_dir);
  const auto split = listing.splits.find(o.split);
  if (split == listing.splits.end())
    fail("{} has no split \"{}\" (a prepared dataset has \"train\" and \"val\")", o.data_dir, o.split);
  if (split->second.empty())
    fail("the {} split of {} is empty{}", o.split, o.data_dir,
         o.split == "val" ? ": prepare it with --val-fraction above 0" : "");
  check_packing(listing, o);
  std::vector<ShardReader> shards;
  for (const ShardEntry& e : split->second) {
    ShardReader r(e.path, {o.expect_vocab, o.expect_fingerprint});
    const ShardHeader& h = r.header();
    if (int64_t(h.vocab_size) != listing.vocab_size || h.fingerprint != listing.fingerprint || h.tokens != e.tokens ||
        h.documents != e.documents)
      fail("shard {} does not match {} (vocab {}, fingerprint {:016x}, {} tokens, {} documents in the shard): the "
           "dataset was changed after it was prepared; prepare it again",
           r.path(), listing.meta_path, h.vocab_size, h.fingerprint, h.tokens, h.documents);
    shards.push_back(std::move(r));
  }
  warn_if_slow_mount(o.data_dir, shards.front().path());
  return {TokenStream(std::move(shards)), listing.vocab_size, listing.fingerprint};
}

// TOKAMAK_LOADER_DELAY_MS (loader.h): milliseconds added to every call of next(); 0 when unset.
int read_delay_ms() {
  const char* v = std::getenv("TOKAMAK_LOADER_DELAY_MS");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long ms = std::strtol(v, &end, 10);
  TK_CHECK(*end == '\0' && ms >= 0, "TOKAMAK_LOADER_DELAY_MS must be a number of milliseconds, not '{}'", v);
  return int(ms);
}

void check_options(const LoaderOptions& o) {
  TK_CHECK(o.B >= 1 && o.T >= 1, "batch shape B={} T={} must be positive", o.B, o.T);
  TK_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world, "rank {} is outside world size {}", o.rank, o.world);
  TK_CHECK(o.prefetch >= 0, "prefetch must be 0 or more, not {}", o.prefetch);
}

class ShardLoader final : public DataLoader {
 public:
  ShardLoader(const LoaderOptions& o, Split split)
      : opts_(o), split_(std::move(split)), order_((split_.stream.size() - 1) / uint64_t(o.T), o) {
    if (order_.batches_per_epoch() == 0)
      fail("the {} split of {} has {} tokens: too few for one step of {} rows of {} tokens ({} ranks x B={}, T+1={})",
           o.split, o.data_dir, split_.stream.size(), uint64_t(o.world) * o.B, o.T + 1, o.world, o.B, o.T + 1);
    for (int i = 0; i < std::max(1, o.prefetch + 1); i++) slots_.push_back(std::make_unique<Slot>(o));
    if (o.prefetch > 0) start_producer(0);
  }

  ~ShardLoader() override { stop_producer(); }

  const Batch& next() override {
    const auto start = Clock::now();
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    if (opts_.prefetch == 0) {
      fill(*slots_[0], next_batch_++);
      wait_seconds_ += seconds_since(start);
      return slots_[0]->batch;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (held_ >= 0) {
      free_.push_back(held_);
      held_ = -1;
      producer_cv_.notify_one();
    }
    consumer_cv_.wait(lock, [&] { return !ready_.empty() || error_; });
    wait_seconds_ += seconds_since(start);
    // Batches finished before a failure are still delivered; the failure surfaces at its own batch.
    if (ready_.empty()) std::rethrow_exception(error_);
    held_ = ready_.front();
    ready_.pop_front();
    next_batch_++;
    return slots_[held_]->batch;
  }

  double take_wait_seconds() override { return std::exchange(wait_seconds_, 0.0); }

  // The position as one process's batch count, so that a run resumes at another world size (at a step's end every
  // rank has read the same number of batches, and the step's count is a multiple of either world size).
  nlohmann::json state() const override {
    nlohmann::json s = identity();
    s["next_batch"] = next_batch_;
    s["world"] = opts_.world;
    s["epoch"] = next_batch_ * opts_.world / order_.global_batches_per_epoch();  // for people reading a checkpoint
    return s;
  }

  void restore(const nlohmann::json& state) override {
    const nlohmann::json want = identity();
    for (const auto& [key, value] : want.items())
      if (!state.contains(key) || state[key] != value)
        fail("cannot resume the data position: it was saved with {}={} but this run has {}={}; resume with the same "
             "data, batch shape and seed",
             key, state.contains(key) ? state[key].dump() : "(missing)", key, value.dump());
    TK_CHECK(state.contains("next_batch") && state["next_batch"].is_number_unsigned(),
             "cannot resume the data position: its next_batch is missing or not a count");
    const uint64_t saved_world = state.value("world", uint64_t(1));
    const uint64_t global = state["next_batch"].get<uint64_t>() * saved_world;
    TK_CHECK(saved_world >= 1 && global % uint64_t(opts_.world) == 0,
             "cannot resume the data position on {} ranks: it was saved by {} ranks after {} batches, not a multiple "
             "of {}",
             opts_.world, saved_world, global, opts_.world);
    stop_producer();
    next_batch_ = global / uint64_t(opts_.world);
    if (opts_.prefetch > 0) start_producer(next_batch_);
  }

  int64_t batches_per_epoch() const override { return int64_t(order_.batches_per_epoch()); }
  int64_t tokens_in_split() const override { return int64_t(split_.stream.size()); }
  int64_t vocab_size() const override { return split_.vocab_size; }
  uint64_t tokenizer_fingerprint() const override { return split_.fingerprint; }

 private:
  // What a saved position is only valid with. Neither the rank nor the world size is part of it: every rank is at
  // the same batch number, so one rank's state restores any rank, at any world size that divides its batches.
  nlohmann::json identity() const {
    return {{"split", opts_.split}, {"tokens", split_.stream.size()}, {"B", opts_.B},
            {"T", opts_.T},         {"shuffle", opts_.shuffle},       {"seed", opts_.seed}};
  }

  // Row b: the window's first T tokens as inputs, its last T as targets (kUntrainedTarget where the loss mask leaves
  // the token out), then positions and segments.
  void fill(Slot& slot, uint64_t batch) const {
    const uint64_t T = uint64_t(opts_.T);
    Batch& out = slot.batch;
    out.trained = 0;
    slot.trained.resize(T);
    for (int b = 0; b < opts_.B; b++) {
      const uint64_t begin = order_.window(batch, b) * T;
      int32_t *inputs = out.inputs + b * T, *targets = out.targets + b * T;
      split_.stream.read(begin, T, inputs);
      std::copy(inputs + 1, inputs + T, targets);
      split_.stream.read(begin + T, 1, targets + T - 1);
      split_.stream.read_trained(begin + 1, T, slot.trained.data());
      for (uint64_t t = 0; t < T; t++) {
        if (!slot.trained[t]) targets[t] = kUntrainedTarget;
        out.trained += slot.trained[t];
      }
      split_.stream.doc_starts(begin, T + 1, slot.doc_starts);
      fill_batch_positions(out, b, slot.doc_starts);
    }
  }

  void start_producer(uint64_t first_batch) {
    ready_.clear();
    free_.clear();
    for (int i = 0; i < int(slots_.size()); i++) free_.push_back(i);
    held_ = -1;
    error_ = nullptr;
    stop_ = false;
    produce_next_ = first_batch;
    producer_ = std::thread([this] { produce(); });
  }

  void stop_producer() {
    if (!producer_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    producer_cv_.notify_one();
    producer_.join();
  }

  void produce() {
    for (;;) {
      int slot;
      uint64_t batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        producer_cv_.wait(lock, [&] { return stop_ || !free_.empty(); });
        if (stop_) return;
        slot = free_.front();
        free_.pop_front();
        batch = produce_next_++;
      }
      try {
        fill(*slots_[slot], batch);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        consumer_cv_.notify_one();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(slot);
      }
      consumer_cv_.notify_one();
    }
  }

  const LoaderOptions opts_;
  const Split split_;
  const BatchOrder order_;
  const int delay_ms_ = read_delay_ms();
  std::vector<std::unique_ptr<Slot>> slots_;  // prefetch + 1: the consumer holds one while the rest fill
  uint64_t next_batch_ = 0;                   // the batch next() returns next (consumer's side)
  double wait_seconds_ = 0;

  // Shared with the producer thread, under mu_.
  std::mutex mu_;
  std::condition_variable producer_cv_, consumer_cv_;
  std::deque<int> free_, ready_;  // slot indices: free to fill; filled, in batch order
  int held_ = -1;                 // the slot whose batch the consumer was last given
  uint64_t produce_next_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread producer_;
};

}  // namespace

std::unique_ptr<DataLoader> DataLoader::open(const LoaderOptions& opts) {
  check_options(opts);
  return std::make_unique<ShardLoader>(opts, open_split(opts));
}

}  // namespace tk
