// `tokamak prepare` as a library: text, JSON Lines and Parquet in, token shards and meta.json out (the format:
// docs/shard-format.md). Tokenizes on every core with an output that does not depend on the thread
// count, splits documents into train and validation by a seeded hash, and writes meta.json last, so an
// interrupted run leaves nothing the loader accepts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace tk {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and directories (see find_inputs in data/text_input.h)
  std::string out_dir;
  std::string text_field = "text";  // the JSON Lines field or Parquet column holding a document
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
};

struct PrepareSummary {
  std::string out_dir;
  SplitSummary train, val;
  uint64_t input_files = 0, input_bytes = 0;
  uint64_t empty_documents = 0;  // JSON records whose text was empty: skipped
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
