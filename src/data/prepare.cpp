// prepare: the input files are read in order on the calling thread, cut into chunks, tokenized on a
// pool of workers, and taken back in submission order to be split and written, so the shards are the
// same for any thread count. Shards and meta.json are written atomically; meta.json goes last.
#include "data/prepare.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/format.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/progress.h"
#include "data/shard.h"
#include "data/text_input.h"

namespace tk {
namespace stdfs = std::filesystem;

namespace {

// Text per unit of work: large enough that hand-offs cost nothing next to tokenizing, small enough
// to keep every core busy and memory bounded (a few chunks per thread are in flight).
constexpr uint64_t kChunkBytes = 1 << 20;
constexpr size_t kChunksInFlightPerThread = 4;

// A run of records from one input file: the unit the pool tokenizes.
struct Chunk {
  const InputFile* file = nullptr;
  std::vector<Record> records;
  uint64_t text_bytes = 0;
  uint64_t disk_bytes = 0;  // input bytes on disk this chunk accounts for, for the progress bar
  // Filled by a worker: record i's tokens are tokens[ends[i-1] .. ends[i]).
  std::vector<int32_t> tokens;
  std::vector<size_t> ends;
  std::exception_ptr error;
  bool done = false;
};

// Tokenizes chunks on worker threads and hands them back in submission order.
class TokenizePool {
 public:
  TokenizePool(const Tokenizer& tokenizer, std::string text_field, int threads)
      : tokenizer_(tokenizer), text_field_(std::move(text_field)) {
    for (int i = 0; i < threads; i++) workers_.emplace_back([this] { work(); });
  }

  ~TokenizePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void submit(std::unique_ptr<Chunk> chunk) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(chunk.get());
      order_.push_back(std::move(chunk));
    }
    work_cv_.notify_one();
  }

  size_t in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_.size();
  }

  // The oldest submitted chunk once tokenized; rethrows its error (so the first error in input order wins).
  std::unique_ptr<Chunk> take_oldest() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return order_.front()->done; });
    std::unique_ptr<Chunk> c = std::move(order_.front());
    order_.pop_front();
    if (c->error) std::rethrow_exception(c->error);
    return c;
  }

 private:
  void work() {
    for (;;) {
      Chunk* c = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        c = queue_.front();
        queue_.pop_front();
      }
      try {
        tokenize(*c);
      } catch (...) {
        c->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        c->done = true;
      }
      done_cv_.notify_all();
    }
  }

  void tokenize(Chunk& c) const {
    for (Record& r : c.records) {
      std::string text = c.file->format == InputFormat::Text
                             ? std::move(r.data)
                             : json_document_text(r.data, text_field_, c.file->path, r.line);
      std::vector<int32_t> ids = tokenizer_.encode(text);
      c.tokens.insert(c.tokens.end(), ids.begin(), ids.end());
      c.ends.push_back(c.tokens.size());
      r.data = std::string();  // the text is no longer needed: free it while the chunk waits its turn
    }
  }

  const Tokenizer& tokenizer_;
  const std::string text_field_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Chunk*> queue_;                   // submitted, not yet picked up by a worker
  std::deque<std::unique_ptr<Chunk>> order_;   // submitted, not yet taken back, in submission order
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

struct ShardEntry {
  std::string file;
  uint64_t documents, tokens;
};

// The shards of one split: a shard is closed at the first document end past shard_tokens, so every
// shard holds whole documents.
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string name, const Tokenizer& tokenizer, uint64_t shard_tokens)
      : dir_(std::move(dir)), name_(std::move(name)), tokenizer_(tokenizer), shard_tokens_(shard_tokens) {}

  void add(std::span<const int32_t> doc) {
    if (!open_) {
      std::string path = (stdfs::path(dir_) / fmt::format("{}_{:06}.bin", name_, shards_.size())).string();
      open_.emplace(path, uint32_t(tokenizer_.vocab_size()), uint32_t(tokenizer_.eot_id()), tokenizer_.fingerprint());
    }
    open_->add_document(doc);
    if (open_->tokens() >= shard_tokens_) close_shard();
  }

  void finish() {
    if (open_) close_shard();
  }

  // After a failure: the shard being written (its temporary file) and the shards this run completed
  // are removed, so that nothing of a failed run is left.
  void abandon() {
    open_.reset();
    std::error_code ignored;  // best effort: the error being reported matters more
    for (const ShardEntry& s : shards_) stdfs::remove(stdfs::path(dir_) / s.file, ignored);
  }

  const SplitSummary& summary() const { return summary_; }

  nlohmann::ordered_json meta() const {
    nlohmann::ordered_json shards = nlohmann::ordered_json::array();
    for (const ShardEntry& s : shards_)
      shards.push_back({{"file", s.file}, {"documents", s.documents}, {"tokens", s.tokens}});
    return {{"documents", summary_.documents}, {"tokens", summary_.tokens}, {"shards", shards}};
  }

 private:
  void close_shard() {
    open_->finish();
    shards_.push_back({stdfs::path(open_->path()).filename().string(), open_->documents(), open_->tokens()});
    summary_.documents += open_->documents();
    summary_.tokens += open_->tokens();
    summary_.bytes += open_->file_bytes();
    summary_.shards++;
    open_.reset();
  }

  std::string dir_, name_;
  const Tokenizer& tokenizer_;
  uint64_t shard_tokens_;
  std::optional<ShardWriter> open_;
  std::vector<ShardEntry> shards_;
  SplitSummary summary_;
};

// Routes documents, in input order, to the train or validation split.
struct SplitRouter {
  SplitWriter& train;
  SplitWriter& val;
  const PrepareOptions& opts;
  uint64_t next_index = 0, empty = 0;

  void add(const Chunk& c) {
    size_t begin = 0;
    for (size_t end : c.ends) {
      std::span<const int32_t> doc(c.tokens.data() + begin, end - begin);
      begin = end;
      if (doc.empty()) {
        empty++;
        continue;
      }
      (is_validation_document(next_index++, opts.seed, opts.val_fraction) ? val : train).add(doc);
    }
  }
};

void check_options(const PrepareOptions& o) {
  TK_CHECK(!o.out_dir.empty(), "no output directory given (--out)");
  TK_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "--val-fraction must be in [0, 1), not {}", o.val_fraction);
  TK_CHECK(o.shard_tokens > 0, "--shard-tokens must be positive");
  TK_CHECK(o.threads >= 0, "--threads must be positive (or 0 for one per core), not {}", o.threads);
  TK_CHECK(!o.text_field.empty(), "--text-field must name a JSON field");
}

// Reads every input in order, cutting it into chunks for the pool, and passes the tokenized chunks,
// in the same order, to `router` while keeping a bounded number in flight.
void tokenize_inputs(const Tokenizer& tokenizer, const PrepareOptions& opts, const std::vector<InputFile>& inputs,
                     SplitRouter& router, ProgressBar* progress) {
  const int threads = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  TokenizePool pool(tokenizer, opts.text_field, threads);
  auto write_oldest = [&] {
    std::unique_ptr<Chunk> c = pool.take_oldest();
    router.add(*c);
    if (progress) progress->add(c->disk_bytes, c->tokens.size());
  };
  auto submit = [&](std::unique_ptr<Chunk> c) {
    pool.submit(std::move(c));
    while (pool.in_flight() >= kChunksInFlightPerThread * size_t(threads)) write_oldest();
  };
  for (const InputFile& file : inputs) {
    RecordReader reader(file);
    uint64_t accounted = 0;  // disk bytes already given to earlier chunks of this file
    auto chunk = std::make_unique<Chunk>();
    chunk->file = &file;
    for (Record r; reader.next(r);) {
      chunk->text_bytes += r.data.size();
      chunk->records.push_back(std::move(r));
      if (chunk->text_bytes < kChunkBytes) continue;
      chunk->disk_bytes = reader.bytes_consumed() - accounted;
      accounted += chunk->disk_bytes;
      submit(std::exchange(chunk, std::make_unique<Chunk>()));
      chunk->file = &file;
    }
    chunk->disk_bytes = file.bytes - std::min(accounted, file.bytes);
    if (!chunk->records.empty() || chunk->disk_bytes > 0) submit(std::move(chunk));
  }
  while (pool.in_flight() > 0) write_oldest();
}

std::string hex16(uint64_t v) { return fmt::format("{:016x}", v); }

nlohmann::ordered_json dataset_meta(const Tokenizer& tok, const PrepareOptions& opts, const SplitWriter& train,
                                    const SplitWriter& val, const PrepareSummary& s) {
  nlohmann::ordered_json inputs = nlohmann::ordered_json::array();
  for (const std::string& p : opts.inputs) inputs.push_back(stdfs::absolute(p).lexically_normal().string());
  return {
      {"format", "tokamak-shards"},
      {"version", kShardVersion},
      {"tokenizer",
       {{"kind", tok.kind()},
        {"path", opts.tokenizer_path.empty() ? "" : stdfs::absolute(opts.tokenizer_path).lexically_normal().string()},
        {"fingerprint", hex16(tok.fingerprint())},
        {"vocab_size", tok.vocab_size()},
        {"eot_id", tok.eot_id()},
        {"eot_text", tok.eot_text()}}},
      {"token_bytes", token_bytes_for_vocab(tok.vocab_size())},
      {"splits", {{"train", train.meta()}, {"val", val.meta()}}},
      {"val_fraction", opts.val_fraction},
      {"seed", opts.seed},
      {"shard_tokens", opts.shard_tokens},
      {"text_field", opts.text_field},
      {"inputs", inputs},
      {"input_files", s.input_files},
      {"input_bytes", s.input_bytes},
      {"empty_documents_skipped", s.empty_documents},
      {"command", opts.command},
  };
}

}  // namespace

bool is_validation_document(uint64_t index, uint64_t seed, double fraction) {
  if (fraction <= 0) return false;
  if (index < 2) return index == 1;
  return unit_interval(splitmix64(splitmix64(seed) ^ index)) < fraction;
}

PrepareSummary prepare(const Tokenizer& tokenizer, const PrepareOptions& opts) {
  check_options(opts);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<InputFile> inputs = find_inputs(opts.inputs);
  PrepareSummary s;
  s.out_dir = opts.out_dir;
  s.input_files = inputs.size();
  for (const InputFile& f : inputs) s.input_bytes += f.bytes;

  std::error_code ec;
  const bool created_out_dir = stdfs::create_directories(opts.out_dir, ec);
  if (ec) fail("cannot create the output directory {}: {}", opts.out_dir, ec.message());
  // A meta.json from an earlier run would vouch for shards this run is about to replace.
  const std::string meta_path = (stdfs::path(opts.out_dir) / "meta.json").string();
  stdfs::remove(meta_path, ec);
  if (ec) fail("cannot remove the previous {}: {}", meta_path, ec.message());

  SplitWriter train(opts.out_dir, "train", tokenizer, opts.shard_tokens);
  SplitWriter val(opts.out_dir, "val", tokenizer, opts.shard_tokens);
  try {
    SplitRouter router{train, val, opts};
    {
      std::optional<ProgressBar> progress;
      if (opts.progress) progress.emplace("prepare", s.input_bytes, "tokens");
      tokenize_inputs(tokenizer, opts, inputs, router, progress ? &*progress : nullptr);
      if (progress) progress->finish();
    }
    train.finish();
    val.finish();
    s.empty_documents = router.empty;
    TK_CHECK(router.next_index > 0, "the input holds no documents: all {} JSON records have an empty \"{}\" field",
             router.empty, opts.text_field);
    if (opts.val_fraction > 0 && router.next_index == 1)
      log::warn("the input holds a single document: it goes to train, and the validation split is empty");
    s.train = train.summary();
    s.val = val.summary();
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fs::write_file_atomic(meta_path, dataset_meta(tokenizer, opts, train, val, s).dump(2) + "\n");
  } catch (...) {
    train.abandon();
    val.abandon();
    if (created_out_dir) stdfs::remove(opts.out_dir, ec);  // only if empty: nothing of the user's goes
    throw;
  }
  return s;
}

std::string format_summary(const PrepareSummary& s) {
  const uint64_t tokens = s.train.tokens + s.val.tokens;
  std::string out = fmt::format("prepared {} in {:.1f}s: {} input files, {} of text, {}/s, {} tokens/s\n", s.out_dir,
                                s.seconds, s.input_files, format_bytes_decimal(double(s.input_bytes)),
                                format_bytes_decimal(s.input_bytes / std::max(s.seconds, 1e-9)),
                                format_count(tokens / std::max(s.seconds, 1e-9)));
  auto line = [&](const char* name, const SplitSummary& sp) {
    out += fmt::format("  {:<5} {:>10} documents {:>14} tokens {:>5} shard{} {:>10}\n", name, sp.documents, sp.tokens,
                       sp.shards, sp.shards == 1 ? " " : "s", format_bytes_decimal(double(sp.bytes)));
  };
  line("train", s.train);
  line("val", s.val);
  if (s.empty_documents > 0) out += fmt::format("  skipped {} JSON records with empty text\n", s.empty_documents);
  return out;
}

}  // namespace tk
