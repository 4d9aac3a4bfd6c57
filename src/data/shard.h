// Token shards: the binary files `tokamak prepare` writes and the loader memory-maps. A 64-byte
// header, the tokens (2 or 4 bytes each; every document followed by the end-of-text token), each
// document's start offset, and (version 2) the loss mask, one bit a token, with a checksum of all of it.
// The layout and every check a reader makes: docs/shard-format.md. Version 1 shards still load.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/fs.h"

namespace tk {

inline constexpr uint32_t kShardVersion = 2;   // what ShardWriter writes
inline constexpr uint32_t kOldestShardVersion = 1;  // the oldest ShardReader reads: no mask, no data checksum
inline constexpr size_t kShardHeaderBytes = 64;

// 2 when every id of the vocabulary fits in a uint16, else 4.
constexpr uint32_t token_bytes_for_vocab(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 0;
  uint32_t vocab_size = 0;
  uint32_t eot_id = 0;
  uint64_t tokens = 0;     // eot tokens included
  uint64_t documents = 0;
  uint64_t fingerprint = 0;  // Tokenizer::fingerprint() of the tokenizer that wrote the shard
  uint64_t data_checksum = 0;  // version 2: XXH3-64 of every byte after the header
};

// What a reader requires of a shard beyond being well formed.
struct ShardExpectation {
  int64_t vocab_size = -1;   // checked when >= 0
  uint64_t fingerprint = 0;  // checked when != 0
};

// Writes one shard: documents are appended one at a time, and the file appears at `path` only when
// finish() has written its header and offsets (until then it is a temporary file; see fs::AtomicFile).
class ShardWriter {
 public:
  ShardWriter(std::string path, uint32_t vocab_size, uint32_t eot_id, uint64_t fingerprint);

  // Appends the document's tokens, then the end-of-text token. Its ids are in [0, vocab) and never the end-of-text
  // id; a document of no tokens is the end-of-text token alone (packing's filler). `trained` holds one value per
  // token and one for the end-of-text token (tokens.size() + 1): nonzero where that token is a target trained on;
  // empty: every one is.
  void add_document(std::span<const int32_t> tokens, std::span<const uint8_t> trained = {});
  void finish();

  uint64_t tokens() const { return header_.tokens; }
  uint64_t documents() const { return header_.documents; }
  uint64_t file_bytes() const { return file_.size(); }
  const std::string& path() const { return file_.path(); }

 private:
  void write(const void* data, size_t n);  // to the file and into the data checksum

  fs::AtomicFile file_;
  ShardHeader header_;
  std::vector<uint64_t> doc_offsets_;
  std::vector<uint8_t> mask_;     // the loss mask's bytes so far, bit i % 8 of byte i / 8 for token i
  std::vector<uint8_t> encoded_;  // one document at the shard's token width
  std::shared_ptr<void> checksum_;  // XXH3's streaming state
};

// A shard memory-mapped read-only, every header field, size, document offset and token checked against
// the format on open: any inconsistency is a tk::Error that names the file and says what is wrong.
class ShardReader {
 public:
  explicit ShardReader(std::string path, const ShardExpectation& expect = {});
  ~ShardReader();
  ShardReader(ShardReader&& other) noexcept;
  ShardReader& operator=(ShardReader&& other) noexcept;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  uint64_t tokens() const { return header_.tokens; }
  uint64_t documents() const { return header_.documents; }
  // Start offset of each document, strictly increasing from 0; each document ends with the one
  // end-of-text token it holds.
  std::span<const uint64_t> doc_offsets() const { return doc_offsets_; }

  // Whether tokens [begin, begin + n) are trained on as targets, one byte each (1 or 0): the loss mask of a version 2
  // shard; every token of a version 1 shard is.
  void read_trained(uint64_t begin, uint64_t n, uint8_t* out) const;
  bool has_loss_mask() const { return header_.version >= 2; }

  // Copies tokens [begin, begin + n) widened to int32. An id outside the vocabulary is a tk::Error naming
  // the shard and position: the open checked every id, but the mapping is shared with the file, which
  // may have been changed in place since.
  void read(uint64_t begin, uint64_t n, int32_t* out) const;

 private:
  void map_file();
  void parse_header();
  void check_sizes() const;
  void check_data_checksum() const;
  void check_doc_offsets() const;
  void check_loss_mask() const;
  void check_tokens() const;
  [[noreturn]] void fail_at_inner_eot() const;
  void check_expectation(const ShardExpectation& expect) const;
  uint32_t token_at(uint64_t i) const;
  void unmap();

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  ShardHeader header_;
  std::span<const uint64_t> doc_offsets_;
  const uint8_t* mask_ = nullptr;  // version 2
};

// One shard as meta.json lists it.
struct ShardEntry {
  std::string path;  // the directory joined with the listed file name, which cannot lead out of it
  uint64_t tokens = 0, documents = 0;
};

// A prepared directory's meta.json, as far as readers use it (docs/shard-format.md): the tokenizer
// block and each split's shards, in order. Every integer is range-checked and every shard path confined
// to the directory; anything else is a tk::Error naming meta.json and the field.
struct DatasetListing {
  std::string meta_path;
  std::string tokenizer_kind, tokenizer_path;
  int64_t vocab_size = 0;
  int64_t eot_id = -1;  // -1 when not recorded
  uint64_t fingerprint = 0;
  int64_t packed_sequence = 0;  // > 0: examples were packed into sequences of this many tokens (prepare --seq)
  std::map<std::string, std::vector<ShardEntry>> splits;  // "train", "val"
};

DatasetListing read_dataset_listing(const std::string& dir);

}  // namespace tk
