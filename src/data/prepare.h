// `tokamak prepare` as a library: text, JSON Lines (text, chat, prompt/completion or alpaca records) and Parquet (a
// text column) in, token shards with their loss masks and meta.json out (the format: docs/shard-format.md).
// Tokenizes on every core with an output that does not depend on the thread count, splits documents into train and
// validation by a seeded hash, packs examples into sequences, and writes meta.json last, so an interrupted run leaves
// nothing the loader accepts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/example_tokens.h"
#include "data/packing.h"
#include "data/records.h"
#include "data/tokenizer.h"

namespace tk {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and directories (see find_inputs in data/text_input.h)
  std::string out_dir;
  std::string text_field = "text";  // the JSON Lines field or Parquet column holding a document (fields.text is set from it)
  RecordFormat format = RecordFormat::Auto;  // auto: told by the first record's fields (records.h)
  RecordFields fields;                       // the names of the other kinds' fields
  TrainOn train_on = TrainOn::Assistant;     // which tokens of an example are trained on
  // A chat template file (.jinja or tokenizer_config.json); "none": the plain formats; "": the tokenizer's own.
  std::string chat_template;
  nlohmann::ordered_json chat_variables = nlohmann::ordered_json::object();  // more template variables
  int64_t seq = 2048;  // chat/prompt-completion/alpaca examples packed into sequences this long; 0: not packed
  // The share of documents in the validation split, in [0, 1) (--val-fraction); unset: the default split,
  // about 0.5% of the tokens with a minimum (docs/data.md).
  std::optional<double> val_fraction;
  uint64_t shard_tokens = 100'000'000;  // a shard is closed at the first document end past this many tokens
  int threads = 0;                  // tokenizing threads; 0: one per core
  uint64_t seed = 1234;             // of the train/validation split
  std::string tokenizer_path;       // recorded in meta.json
  std::string command;              // recorded in meta.json: how the data was made
  bool progress = true;             // draw the progress bar on stderr
};

struct SplitSummary {
  uint64_t documents = 0, tokens = 0, shards = 0, bytes = 0;  // bytes: of the shard files
  uint64_t trained = 0;                                        // tokens trained on (loss mask set)
  PackingStats packing;                                        // when packed
};

struct PrepareSummary {
  std::string out_dir;
  SplitSummary train, val;
  uint64_t input_files = 0, input_bytes = 0;
  uint64_t empty_documents = 0;  // JSON records whose text was empty: skipped
  uint64_t untrained_examples = 0;  // examples with no token to train on (no assistant turn): skipped
  RecordFormat format = RecordFormat::Text;
  std::string format_from;     // "detected from FILE:LINE" or "given by --format"
  std::string chat_template;   // the template's file, "" when none was used
  bool generation_markers = false;
  TrainOn train_on = TrainOn::Assistant;
  int64_t packed_sequence = 0;  // > 0: examples packed into sequences of this many tokens
  double seconds = 0;
};

PrepareSummary prepare(const Tokenizer& tokenizer, const PrepareOptions& opts);

// Document `index`'s (0-based, in input order) place in [0, 1) for the split: a hash of (seed, index).
double document_hash(uint64_t index, uint64_t seed);

// With an explicit fraction: whether document `index` belongs to the validation split. Documents 0 and 1
// are pinned to train and validation when fraction > 0, so both splits are non-empty whenever there are
// two documents; every other document compares its document_hash with the fraction.
bool is_validation_document(uint64_t index, uint64_t seed, double fraction);

// The lines `tokamak prepare` prints at the end: documents, tokens, MB and time, per split.
std::string format_summary(const PrepareSummary& s);

}  // namespace tk
