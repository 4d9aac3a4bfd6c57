// prepare: the input files are read through the document pipeline (each record made an example and tokenized with
// its loss mask on a pool of workers, taken back in input order), split into train and validation, packed into
// sequences when they are examples, and written, so the shards are the same for any thread count. Shards and
// meta.json are written atomically; meta.json goes last.
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
#include "data/chat_template/chat_template.h"
#include "data/document_pipeline.h"
#include "data/record_examples.h"
#include "data/shard.h"
#include "data/text_input.h"

namespace tk {
namespace stdfs = std::filesystem;

namespace {

struct ShardEntry {
  std::string file;
  uint64_t documents, tokens;
};

// The shards of one split: a shard is closed at the first document end (of packed examples: the first sequence
// end) past shard_tokens, so every shard holds whole documents and whole sequences.
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string name, const Tokenizer& tokenizer, uint64_t shard_tokens,
              int64_t packed_sequence)
      : dir_(std::move(dir)), name_(std::move(name)), tokenizer_(tokenizer), shard_tokens_(shard_tokens) {
    if (packed_sequence > 0)
      packer_.emplace(packed_sequence, tokenizer.eot_id() == 0 ? 1 : 0, [this](const std::vector<ExampleTokens>& docs) {
        for (const ExampleTokens& d : docs) write(d);
        close_if_full();
      });
  }

  void add(const ExampleTokens& doc) {
    if (packer_) return packer_->add(doc);
    write(doc);
    close_if_full();
  }

  void finish() {
    if (packer_) {
      packer_->finish();
      summary_.packing = packer_->stats();
    }
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
    nlohmann::ordered_json m = {{"documents", summary_.documents}, {"tokens", summary_.tokens},
                                {"trained_tokens", summary_.trained}, {"shards", shards}};
    if (packer_) {
      const PackingStats& p = summary_.packing;
      m["packing"] = {{"examples", p.examples}, {"truncated", p.truncated}, {"dropped", p.dropped},
                      {"sequences", p.sequences}, {"filler_tokens", p.filler}, {"efficiency", p.efficiency()}};
    }
    return m;
  }

 private:
  void write(const ExampleTokens& doc) {
    if (!open_) {
      std::string path = (stdfs::path(dir_) / fmt::format("{}_{:06}.bin", name_, shards_.size())).string();
      open_.emplace(path, uint32_t(tokenizer_.vocab_size()), uint32_t(tokenizer_.eot_id()), tokenizer_.fingerprint());
    }
    open_->add_document(doc.tokens, doc.trained);
    summary_.trained += doc.trained_count();
  }

  void close_if_full() {
    if (open_ && open_->tokens() >= shard_tokens_) close_shard();
  }

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
  std::optional<SequencePacker> packer_;
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

  void add(ExampleTokens doc) {
    if (doc.tokens.empty()) {
      empty_++;
      return;
    }
    const uint64_t index = documents_++;
    const uint64_t size = doc.tokens.size();
    tokens_ += size;
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
      val_tokens_ += size, val_documents_++;
      return;
    }
    held_.push_back({u, index, std::move(doc)});
    std::push_heap(held_.begin(), held_.end());
    held_tokens_ += size;
    release_unneeded();
  }

  // The held documents in hash order: validation takes them while it is short of a minimum and the next one
  // keeps it within kValMaxShare of all tokens (and takes the first if it has none); the rest go to train.
  void finish() {
    std::sort(held_.begin(), held_.end());
    const double max_tokens = kValMaxShare * double(tokens_);
    size_t taken = 0;
    for (; taken < held_.size(); taken++) {
      const uint64_t next = held_[taken].doc.tokens.size();
      const bool short_of_minimum = val_tokens_ < kValMinTokens || val_documents_ < kValMinDocuments;
      const bool fits = double(val_tokens_ + next) <= max_tokens;
      if (!(short_of_minimum && fits) && val_documents_ > 0) break;
      val_tokens_ += next, val_documents_++;
    }
    // Each split's share of them in input order.
    auto by_index = [](const Held& a, const Held& b) { return a.index < b.index; };
    std::sort(held_.begin(), held_.begin() + ptrdiff_t(taken), by_index);
    std::sort(held_.begin() + ptrdiff_t(taken), held_.end(), by_index);
    for (size_t i = 0; i < held_.size(); i++) (i < taken ? val_ : train_).add(held_[i].doc);
    held_.clear();
  }

  uint64_t documents() const { return documents_; }
  uint64_t empty() const { return empty_; }

 private:
  // A document held back, ordered by (hash, index): the heap's top is the one validation would take last.
  struct Held {
    double u;
    uint64_t index;
    ExampleTokens doc;
    bool operator<(const Held& o) const { return u != o.u ? u < o.u : index < o.index; }
  };

  // The held document with the largest hash goes to train once the others and validation already reach the
  // minimums without it: documents still to come can only make it less needed.
  void release_unneeded() {
    while (!held_.empty()) {
      const Held& last = held_.front();
      const uint64_t tokens_without = val_tokens_ + held_tokens_ - last.doc.tokens.size();
      const uint64_t documents_without = val_documents_ + held_.size() - 1;
      if (tokens_without < kValMinTokens || documents_without < kValMinDocuments) return;
      std::pop_heap(held_.begin(), held_.end());
      held_tokens_ -= held_.back().doc.tokens.size();
      train_.add(held_.back().doc);
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
  TK_CHECK(o.seq >= 0, "--seq must be 0 (no packing) or a number of tokens, not {}", o.seq);
  TK_CHECK(o.chat_variables.is_object(), "the chat template's variables must be a JSON object");
}

// One batch of records, tokenized with their loss masks, in input order.
struct TokenizedBatch {
  std::vector<ExampleTokens> examples;
  uint64_t tokens = 0, untrained = 0;  // untrained: examples with nothing to train on, left out
};

// Tokenizes every input on the pipeline's workers and passes the examples, in input order, to `router`.
void tokenize_inputs(const Tokenizer& tokenizer, const PrepareOptions& opts, const std::vector<InputFile>& inputs,
                     const RunFormat& run, const ExampleOptions& examples, SplitRouter& router, uint64_t& untrained,
                     ProgressBar* progress) {
  RecordFields fields = opts.fields;
  fields.text = opts.text_field;
  run_record_pipeline<TokenizedBatch>(
      inputs, {opts.text_field, opts.threads},
      [&](RecordBatch& batch, int) {
        TokenizedBatch b;
        for (Record& r : batch.records) {
          ExampleTokens e = record_tokens(batch.file, r, run, fields, tokenizer, examples);
          std::string().swap(r.data);  // freed while the batch waits its turn
          b.tokens += e.tokens.size();
          if (!e.tokens.empty() && e.trained_count() == 0) {
            b.untrained++;
            continue;
          }
          b.examples.push_back(std::move(e));
        }
        return b;
      },
      [&](TokenizedBatch& b, uint64_t disk_bytes) {
        for (ExampleTokens& e : b.examples) router.add(std::move(e));
        untrained += b.untrained;
        if (progress) progress->add(disk_bytes, b.tokens);
      });
}

// The template examples are rendered with: --chat-template's file, none, or the tokenizer's own.
std::optional<ChatTemplate> chat_template_for(const PrepareOptions& o, const RunFormat& run) {
  if (run.format == RecordFormat::Text || o.chat_template == "none") {
    TK_CHECK(run.format != RecordFormat::Chat, "chat records need a chat template: --chat-template none leaves none");
    return std::nullopt;
  }
  if (!o.chat_template.empty()) return ChatTemplate::load_file(o.chat_template);
  std::optional<ChatTemplate> t = ChatTemplate::find_for_tokenizer(o.tokenizer_path);
  if (!t && run.format == RecordFormat::Chat)
    fail("chat records ({}) need a chat template, and the tokenizer {} has none (no chat_template in its "
         "tokenizer_config.json, no chat_template.jinja beside it): give one with --chat-template FILE",
         run.told_by, o.tokenizer_path);
  return t;
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
      {"records",
       {{"format", record_format_name(s.format)},
        {"fields",
         {{"messages", opts.fields.messages}, {"tools", opts.fields.tools}, {"prompt", opts.fields.prompt},
          {"completion", opts.fields.completion}, {"instruction", opts.fields.instruction},
          {"input", opts.fields.input}, {"output", opts.fields.output}}},
        {"train_on", train_on_name(s.train_on)},
        {"chat_template", s.chat_template.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s.chat_template)},
        {"generation_markers", s.generation_markers},
        {"chat_variables", opts.chat_variables},
        {"untrained_examples_skipped", s.untrained_examples}}},
      {"packing", s.packed_sequence > 0 ? nlohmann::ordered_json{{"sequence", s.packed_sequence}}
                                        : nlohmann::ordered_json()},
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

  RecordFields fields = opts.fields;
  fields.text = opts.text_field;
  const RunFormat run = resolve_record_format(inputs, opts.format, fields);
  const std::optional<ChatTemplate> chat_template = chat_template_for(opts, run);

  std::error_code ec;
  // What this run makes (the output directory and any missing parent) goes again when it fails.
  const std::vector<std::string> made = fs::make_directories(opts.out_dir);
  // A meta.json from an earlier run would vouch for shards this run is about to replace.
  const std::string meta_path = (stdfs::path(opts.out_dir) / "meta.json").string();
  stdfs::remove(meta_path, ec);
  if (ec) fail("cannot remove the previous {}: {}", meta_path, ec.message());

  ExampleOptions examples;
  examples.train_on = opts.train_on;
  examples.chat_template = chat_template ? &*chat_template : nullptr;
  examples.template_variables = opts.chat_variables;
  examples.now = std::time(nullptr);
  s.format = run.format;
  s.format_from = run.told_by;
  s.train_on = opts.train_on;
  s.chat_template = chat_template ? chat_template->name() : "";
  s.generation_markers = chat_template && chat_template->has_generation_markers();
  s.packed_sequence = run.format != RecordFormat::Text ? opts.seq : 0;

  SplitWriter train(opts.out_dir, "train", tokenizer, opts.shard_tokens, s.packed_sequence);
  SplitWriter val(opts.out_dir, "val", tokenizer, opts.shard_tokens, s.packed_sequence);
  try {
    SplitRouter router(train, val, opts);
    {
      std::optional<ProgressBar> progress;
      if (opts.progress) progress.emplace("prepare", s.input_bytes, "tokens");
      tokenize_inputs(tokenizer, opts, inputs, run, examples, router, s.untrained_examples,
                      progress ? &*progress : nullptr);
      if (progress) progress->finish();
    }
    router.finish();
    train.finish();
    val.finish();
    s.empty_documents = router.empty();
    TK_CHECK(s.untrained_examples == 0 || router.documents() > 0,
             "the input holds no example with a token to train on: all {} examples were left out (--train-on {}: does "
             "any record have an assistant turn?)",
             s.untrained_examples, train_on_name(opts.train_on));
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
  if (s.format == RecordFormat::Text) return out;
  out += fmt::format("  records: {} ({}); {}; training on {} tokens\n", record_format_name(s.format), s.format_from,
                     s.chat_template.empty() ? std::string("no chat template: the plain format")
                     : s.generation_markers ? "chat template " + s.chat_template + " (its {% generation %} blocks)"
                                            : "chat template " + s.chat_template,
                     train_on_name(s.train_on));
  if (s.untrained_examples > 0)
    out += fmt::format("  skipped {} examples with no token to train on\n", s.untrained_examples);
  for (const auto& [name, sp] : {std::pair<const char*, const SplitSummary&>{"train", s.train}, {"val", s.val}}) {
    if (sp.tokens == 0) continue;
    if (s.packed_sequence == 0) {
      out += fmt::format("  {:<5} {} trained tokens of {} ({:.1f}%)\n", name, sp.trained, sp.tokens,
                         100.0 * double(sp.trained) / double(sp.tokens));
      continue;
    }
    const PackingStats& p = sp.packing;
    out += fmt::format("  {:<5} {} examples packed into {} sequences of {}: {} trained tokens, packing efficiency "
                       "{:.1f}% (trained tokens / slots), {} filler tokens; {} truncated{}\n",
                       name, p.examples, p.sequences, s.packed_sequence, p.trained, 100.0 * p.efficiency(), p.filler,
                       p.truncated, p.dropped ? fmt::format(", {} left out (nothing to train on after it)", p.dropped) : "");
  }
  return out;
}

}  // namespace tk
