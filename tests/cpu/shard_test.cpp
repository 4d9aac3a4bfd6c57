// Token shards: what ShardWriter writes, ShardReader reads back; and every way a shard can be damaged
// or mismatched is refused with a message that names the file and the problem.
#include "data/shard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/hash.h"
#include "data_testing.h"

namespace tk {
namespace {

using testing::error_of;
using testing::read_text;
using testing::TempDir;
using testing::write_text;

constexpr uint32_t kVocab = 257, kEot = 256;
constexpr uint64_t kFingerprint = 0x0123456789abcdefull;

const std::vector<std::vector<int32_t>> kDocs = {{72, 105, 33}, {1}, {255, 0, 7, 9, 200}};

// A valid shard of kDocs: 3 documents, 12 tokens.
std::string write_shard(const TempDir& dir, uint32_t vocab = kVocab) {
  const std::string path = dir.path("s.bin");
  ShardWriter w(path, vocab, kEot, kFingerprint);
  for (const auto& d : kDocs) w.add_document(d);
  w.finish();
  return path;
}

std::vector<int32_t> read_all(const ShardReader& r) {
  std::vector<int32_t> out(r.tokens());
  r.read(0, r.tokens(), out.data());
  return out;
}

// Edits the shard's bytes in place, optionally recomputing the header checksum so that only the
// checks behind it are exercised.
void patch(const std::string& path, size_t offset, const void* bytes, size_t n, bool fix_checksum = false) {
  std::string s = read_text(path);
  std::memcpy(s.data() + offset, bytes, n);
  if (fix_checksum) {
    const uint64_t sum = fnv1a64(s.data(), 56);
    std::memcpy(s.data() + 56, &sum, 8);
  }
  write_text(path, s);
}

void truncate_to(const std::string& path, size_t bytes) { std::filesystem::resize_file(path, bytes); }

TEST(Shard, RoundTripsTokensOffsetsAndHeader) {
  TempDir dir;
  ShardReader r(write_shard(dir));
  EXPECT_EQ(r.header().version, kShardVersion);
  EXPECT_EQ(r.header().token_bytes, 2u);
  EXPECT_EQ(r.header().vocab_size, kVocab);
  EXPECT_EQ(r.header().eot_id, kEot);
  EXPECT_EQ(r.header().fingerprint, kFingerprint);
  EXPECT_EQ(r.documents(), 3u);
  EXPECT_EQ(r.tokens(), 12u);
  EXPECT_EQ(read_all(r), (std::vector<int32_t>{72, 105, 33, 256, 1, 256, 255, 0, 7, 9, 200, 256}));
  EXPECT_EQ(std::vector<uint64_t>(r.doc_offsets().begin(), r.doc_offsets().end()), (std::vector<uint64_t>{0, 4, 6}));
  // 64-byte header, 24 bytes of tokens, 3 offsets of 8 bytes.
  EXPECT_EQ(std::filesystem::file_size(r.path()), 64u + 24u + 24u);
}

TEST(Shard, WideVocabulariesUseFourByteTokens) {
  EXPECT_EQ(token_bytes_for_vocab(65536), 2u);
  EXPECT_EQ(token_bytes_for_vocab(65537), 4u);
  TempDir dir;
  const std::string path = dir.path("wide.bin");
  ShardWriter w(path, 128256, 128001, kFingerprint);
  w.add_document(std::vector<int32_t>{128255, 70000, 3});
  w.finish();
  ShardReader r(path);
  EXPECT_EQ(r.header().token_bytes, 4u);
  EXPECT_EQ(read_all(r), (std::vector<int32_t>{128255, 70000, 3, 128001}));
  // 4 tokens x 4 bytes = 16: no padding before the offsets.
  EXPECT_EQ(std::filesystem::file_size(path), 64u + 16u + 8u);
}

TEST(Shard, ReadsRangesAcrossDocuments) {
  TempDir dir;
  ShardReader r(write_shard(dir));
  std::vector<int32_t> part(5);
  r.read(2, 5, part.data());
  EXPECT_EQ(part, (std::vector<int32_t>{33, 256, 1, 256, 255}));
}

TEST(Shard, AppearsOnlyWhenFinished) {
  TempDir dir;
  const std::string path = dir.path("s.bin");
  {
    ShardWriter w(path, kVocab, kEot, kFingerprint);
    w.add_document(kDocs[0]);
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  EXPECT_TRUE(testing::files_in(dir.path()).empty()) << "an abandoned shard leaves its temporary file";
}

TEST(Shard, WriterRefusesIdsOutsideTheVocabularyAndEotInsideADocument) {
  TempDir dir;
  ShardWriter w(dir.path("s.bin"), kVocab, kEot, kFingerprint);
  EXPECT_NE(error_of([&] { w.add_document(std::vector<int32_t>{5, 257}); }).find("outside the vocabulary of 257"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_document(std::vector<int32_t>{5, -1}); }).find("outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_document(std::vector<int32_t>{kEot}); }).find("end-of-text id 256"),
            std::string::npos);
}

// Every corruption: the error names the file and says what is wrong.
struct Corruption {
  const char* name;
  void (*damage)(const std::string& path);
  const char* message;
};

const Corruption kCorruptions[] = {
    {"missing", [](const std::string& p) { std::filesystem::remove(p); }, "cannot open shard"},
    {"bad magic", [](const std::string& p) { patch(p, 0, "XKSHARD", 7); }, "is not a tokamak token shard: bad magic"},
    {"version",
     [](const std::string& p) {
       const uint32_t v = 2;
       patch(p, 8, &v, 4);
     },
     "has format version 2; this tokamak reads version 1"},
    {"checksum",
     [](const std::string& p) {
       const uint64_t tokens = 10;
       patch(p, 24, &tokens, 8);
     },
     "corrupt header: its checksum"},
    {"truncated header", [](const std::string& p) { truncate_to(p, 30); }, "is truncated: 30 bytes, less than its 64-byte header"},
    {"truncated tokens", [](const std::string& p) { truncate_to(p, 64 + 10); },
     "is truncated: its header describes 12 tokens and 3 documents (112 bytes) but the file has 74 bytes"},
    {"truncated offsets", [](const std::string& p) { truncate_to(p, 64 + 24 + 8); }, "is truncated"},
    {"trailing bytes", [](const std::string& p) { write_text(p, read_text(p) + "junk"); },
     "has 4 bytes after the end its header describes"},
    {"token count beyond the file",
     [](const std::string& p) {
       const uint64_t tokens = uint64_t(1) << 62;  // would overflow a naive size computation
       patch(p, 24, &tokens, 8, true);
     },
     "is truncated: its header describes 4611686018427387904 tokens"},
    {"token width",
     [](const std::string& p) {
       const uint32_t width = 4;
       patch(p, 12, &width, 4, true);
     },
     "4-byte tokens for a vocabulary of 257"},
    {"eot outside vocab",
     [](const std::string& p) {
       const uint32_t eot = 300;
       patch(p, 20, &eot, 4, true);
     },
     "end-of-text id 300 is outside its vocabulary"},
    {"more documents than tokens",
     [](const std::string& p) {
       const uint64_t docs = 7;
       patch(p, 32, &docs, 8, true);
     },
     "12 tokens cannot hold 7 documents"},
    {"offset out of range",
     [](const std::string& p) {
       const uint64_t offset = 40;
       patch(p, 64 + 24 + 16, &offset, 8);
     },
     "corrupt document index: document 2 starts at 40 (previous start 4, 12 tokens in the shard)"},
    {"offsets not increasing",
     [](const std::string& p) {
       const uint64_t offset = 4;
       patch(p, 64 + 24 + 16, &offset, 8);
     },
     "corrupt document index: document 2 starts at 4"},
    {"first offset not zero",
     [](const std::string& p) {
       const uint64_t offset = 1;
       patch(p, 64 + 24, &offset, 8);
     },
     "corrupt document index: document 0 starts at 1"},
    {"last token not eot",
     [](const std::string& p) {
       const uint16_t t = 5;
       patch(p, 64 + 22, &t, 2);
     },
     "its last token is 5, not the end-of-text token 256"},
};

TEST(Shard, EveryCorruptionIsAClearError) {
  for (const Corruption& c : kCorruptions) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    const std::string path = write_shard(dir);
    c.damage(path);
    const std::string msg = error_of([&] { ShardReader r(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
  }
}

TEST(Shard, CorruptTokenDataIsCaughtWhenRead) {
  TempDir dir;
  const std::string path = write_shard(dir);
  const uint16_t bad = 300;
  patch(path, 64 + 2 * 7, &bad, 2);
  ShardReader r(path);  // the open-time checks do not scan every token
  std::vector<int32_t> out(r.tokens());
  const std::string msg = error_of([&] { r.read(0, r.tokens(), out.data()); });
  EXPECT_NE(msg.find(path + " is corrupt: token 7 is 300, outside its vocabulary of 257"), std::string::npos) << msg;
}

TEST(Shard, VocabMismatchIsRefused) {
  TempDir dir;
  const std::string path = write_shard(dir);
  const std::string msg = error_of([&] { ShardReader r(path, {.vocab_size = 50257}); });
  EXPECT_NE(msg.find(path + " was prepared for a vocabulary of 257 tokens, but 50257 are expected"), std::string::npos)
      << msg;
  EXPECT_NO_THROW(ShardReader(path, {.vocab_size = 257}));
}

TEST(Shard, FingerprintMismatchIsRefused) {
  TempDir dir;
  const std::string path = write_shard(dir);
  const std::string msg = error_of([&] { ShardReader r(path, {.fingerprint = 42}); });
  EXPECT_NE(msg.find(path + " was prepared with another tokenizer (fingerprint 0123456789abcdef, expected "
                            "000000000000002a)"),
            std::string::npos)
      << msg;
  EXPECT_NO_THROW(ShardReader(path, {.fingerprint = kFingerprint}));
}

}  // namespace
}  // namespace tk
