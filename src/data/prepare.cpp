// prepare: the input files are read through the document pipeline (tokenized on a pool of workers, taken
// back in input order), split into train and validation, and written, so the shards are the same for any
// thread count. Shards and meta.json are written atomically; meta.json goes last.
#include "data/prepare.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/format.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/progress.h"
#include "data/document_pipeline.h"
#include "data/shard.h"
#include "data/text_input.h"

namespace tk {
namespace stdfs = std::filesystem;

namespace {

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

// The default validation split (docs/data.md): about kValShare of the tokens, at least kValMinTokens tokens
// and kValMinDocuments documents, and never, for the sake of those minimums, more than kValMaxShare of them.
constexpr double kValShare = 0.005;
constexpr uint64_t kValMinTokens = 20'000;
constexpr uint64_t kValMinDocuments = 10;
constexpr double kValMaxShare = 0.1;

// Routes documents, in input order, to the train or validation split. With --val-fraction, each document by
// is_validation_document. By default, document 0 goes to train, and a document whose hash is below kValShare
// to validation at once; the others with the smallest hashes are held back while validation may still need
// them to reach its minimums, and finish() adds the fewest of them that reach them, in hash order; every
// other document goes to train, a held one when it is known not to be needed.
class SplitRouter {
 public:
  SplitRouter(SplitWriter& train, SplitWriter& val, const PrepareOptions& opts)
      : train_(train), val_(val), opts_(opts) {}

  void add(std::span<const int32_t> doc) {
    if (doc.empty()) {
      empty_++;
      return;
    }
    const uint64_t index = documents_++;
    tokens_ += doc.size();
    if (opts_.val_fraction) {
      (is_validation_document(index, opts_.seed, *opts_.val_fraction) ? val_ : train_).add(doc);
      return;
    }
    if (index == 0) {  // train is never empty; finish() sees that validation is not either, given two documents
      train_.add(doc);
      return;
    }
    const double u = document_hash(index, opts_.seed);
    if (u < kValShare) {
      val_.add(doc);
      val_tokens_ += doc.size(), val_documents_++;
      return;
    }
    held_.push_back({u, index, std::vector<int32_t>(doc.begin(), doc.end())});
    std::push_heap(held_.begin(), held_.end());
    held_tokens_ += doc.size();
    release_unneeded();
  }

  // The held documents in hash order: validation takes them while it is short of a minimum and the next one
  // keeps it within kValMaxShare of all tokens (and takes the first if it has none); the rest go to train.
  void finish() {
    std::sort(held_.begin(), held_.end());
    const double max_tokens = kValMaxShare * double(tokens_);
    size_t taken = 0;
    for (; taken < held_.size(); taken++) {
      const uint64_t next = held_[taken].tokens.size();
      const bool short_of_minimum = val_tokens_ < kValMinTokens || val_documents_ < kValMinDocuments;
      const bool fits = double(val_tokens_ + next) <= max_tokens;
      if (!(short_of_minimum && fits) && val_documents_ > 0) break;
      val_tokens_ += next, val_documents_++;
    }
    // Each split's share of them in input order.
    auto by_index = [](const Held& a, const Held& b) { return a.index < b.index; };
    std::sort(held_.begin(), held_.begin() + ptrdiff_t(taken), by_index);
    std::sort(held_.begin() + ptrdiff_t(taken), held_.end(), by_index);
    for (size_t i = 0; i < held_.size(); i++) (i < taken ? val_ : train_).add(held_[i].tokens);
    held_.clear();
  }

  uint64_t documents() const { return documents_; }
  uint64_t empty() const { return empty_; }

 private:
  // A document held back, ordered by (hash, index): the heap's top is the one validation would take last.
  struct Held {
    double u;
    uint64_t index;
    std::vector<int32_t> tokens;
    bool operator<(const Held& o) const { return u != o.u ? u < o.u : index < o.index; }
  };

  // The held document with the largest hash goes to train once the others and validation already reach the
  // minimums without it: documents still to come can only make it less needed.
  void release_unneeded() {
    while (!held_.empty()) {
      const Held& last = held_.front();
      const uint64_t tokens_without = val_tokens_ + held_tokens_ - last.tokens.size();
      const uint64_t documents_without = val_documents_ + held_.size() - 1;
      if (tokens_without < kValMinTokens || documents_without < kValMinDocuments) return;
      std::pop_heap(held_.begin(), held_.end());
      held_tokens_ -= held_.back().tokens.size();
      train_.add(held_.back().tokens);
      held_.pop_back();
    }
  }

  SplitWriter& train_;
  SplitWriter& val_;
  const PrepareOptions& opts_;
  uint64_t documents_ = 0, empty_ = 0, tokens_ = 0;
  uint64_t val_tokens_ = 0, val_documents_ = 0, held_tokens_ = 0;
  std::vector<Held> held_;  // a max-heap
};

void check_options(const PrepareOptions& o) {
  TK_CHECK(!o.out_dir.empty(), "no output directory given (--out)");
  if (o.val_fraction)
    TK_CHECK(*o.val_fraction >= 0 && *o.val_fraction < 1, "--val-fraction must be in [0, 1), not {}",
             *o.val_fraction);
  TK_CHECK(o.shard_tokens > 0, "--shard-tokens must be positive");
  TK_CHECK(o.threads >= 0, "--threads must be positive (or 0 for one per core), not {}", o.threads);
  TK_CHECK(!o.text_field.empty(), "--text-field must name a JSON field or Parquet column");
}

// One batch of documents, tokenized: document i's tokens are tokens[ends[i-1] .. ends[i]).
struct TokenizedBatch {
  std::vector<int32_t> tokens;
  std::vector<size_t> ends;
};

// Tokenizes every input on the pipeline's workers and passes the documents, in input order, to `router`.
void tokenize_inputs(const Tokenizer& tokenizer, const PrepareOptions& opts, const std::vector<InputFile>& inputs,
                     SplitRouter& router, ProgressBar* progress) {
  run_document_pipeline<TokenizedBatch>(
      inputs, {opts.text_field, opts.threads},
      [&](Documents& documents, int) {
        TokenizedBatch b;
        for (std::string& text : documents) {
          std::vector<int32_t> ids = tokenizer.encode(text);
          b.tokens.insert(b.tokens.end(), ids.begin(), ids.end());
          b.ends.push_back(b.tokens.size());
          std::string().swap(text);  // freed while the batch waits its turn
        }
        return b;
      },
      [&](TokenizedBatch& b, uint64_t disk_bytes) {
        size_t begin = 0;
        for (size_t end : b.ends) {
          router.add(std::span<const int32_t>(b.tokens.data() + begin, end - begin));
          begin = end;
        }
        if (progress) progress->add(disk_bytes, b.tokens.size());
      });
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
      {"val_fraction", opts.val_fraction ? nlohmann::ordered_json(*opts.val_fraction) : nlohmann::ordered_json()},
      {"val_default_rule", opts.val_fraction ? nlohmann::ordered_json()
                                             : nlohmann::ordered_json{{"share", kValShare},
                                                                      {"min_tokens", kValMinTokens},
                                                                      {"min_documents", kValMinDocuments},
                                                                      {"max_share", kValMaxShare}}},
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

double document_hash(uint64_t index, uint64_t seed) { return unit_interval(splitmix64(splitmix64(seed) ^ index)); }

bool is_validation_document(uint64_t index, uint64_t seed, double fraction) {
  if (fraction <= 0) return false;
  if (index < 2) return index == 1;
  return document_hash(index, seed) < fraction;
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
  // What this run makes (the output directory and any missing parent) goes again when it fails.
  const std::vector<std::string> made = fs::make_directories(opts.out_dir);
  // A meta.json from an earlier run would vouch for shards this run is about to replace.
  const std::string meta_path = (stdfs::path(opts.out_dir) / "meta.json").string();
  stdfs::remove(meta_path, ec);
  if (ec) fail("cannot remove the previous {}: {}", meta_path, ec.message());

  SplitWriter train(opts.out_dir, "train", tokenizer, opts.shard_tokens);
  SplitWriter val(opts.out_dir, "val", tokenizer, opts.shard_tokens);
  try {
    SplitRouter router(train, val, opts);
    {
      std::optional<ProgressBar> progress;
      if (opts.progress) progress.emplace("prepare", s.input_bytes, "tokens");
      tokenize_inputs(tokenizer, opts, inputs, router, progress ? &*progress : nullptr);
      if (progress) progress->finish();
    }
    router.finish();
    train.finish();
    val.finish();
    s.empty_documents = router.empty();
    TK_CHECK(router.documents() > 0, "the input holds no documents: all {} JSON records have an empty \"{}\" field",
             router.empty(), opts.text_field);
    if (opts.val_fraction.value_or(1) > 0 && router.documents() == 1)
      log::warn("the input holds a single document: it goes to train, and the validation split is empty");
    s.train = train.summary();
    s.val = val.summary();
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fs::write_file_atomic(meta_path, dataset_meta(tokenizer, opts, train, val, s).dump(2) + "\n");
  } catch (...) {
    train.abandon();
    val.abandon();
    fs::remove_made_directories(made);  // only empty ones: nothing of the user's goes
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
