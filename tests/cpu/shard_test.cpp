// Token shards: what ShardWriter writes, ShardReader reads back; every way a shard can be damaged or
// mismatched is refused with a message that names the file and the problem; meta.json's integers are
// checked and its shard names confined to the dataset's directory.
#include "data/shard.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include <xxhash.h>

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

// Which checksums patch() recomputes after its edit, so that only the checks behind them are exercised.
enum class Fix { None, Header, All };

// Edits the shard's bytes in place; Fix::All recomputes the data checksum (version 2) and then the header's.
void patch(const std::string& path, size_t offset, const void* bytes, size_t n, Fix fix = Fix::None) {
  std::string s = read_text(path);
  std::memcpy(s.data() + offset, bytes, n);
  if (fix == Fix::All) {
    const uint64_t data = XXH3_64bits(s.data() + 64, s.size() - 64);
    std::memcpy(s.data() + 48, &data, 8);
  }
  if (fix != Fix::None) {
    const uint64_t sum = fnv1a64(s.data(), 56);
    std::memcpy(s.data() + 56, &sum, 8);
  }
  write_text(path, s);
}

// A version 1 shard of kDocs, byte by byte as the first format laid it out: no loss mask, no data checksum.
std::string write_v1_shard(const TempDir& dir) {
  std::string s(64, '\0');
  std::vector<uint64_t> offsets;
  uint64_t tokens = 0;
  for (const auto& d : kDocs) {
    offsets.push_back(tokens);
    for (int32_t t : d) s.append(reinterpret_cast<const char*>(&t), 2);
    const uint16_t eot = kEot;
    s.append(reinterpret_cast<const char*>(&eot), 2);
    tokens += d.size() + 1;
  }
  s.append(reinterpret_cast<const char*>(offsets.data()), offsets.size() * 8);
  const uint32_t version = 1, width = 2, vocab = kVocab, eot = kEot;
  const uint64_t docs = kDocs.size();
  std::memcpy(s.data(), "TKSHARD", 8);
  std::memcpy(s.data() + 8, &version, 4);
  std::memcpy(s.data() + 12, &width, 4);
  std::memcpy(s.data() + 16, &vocab, 4);
  std::memcpy(s.data() + 20, &eot, 4);
  std::memcpy(s.data() + 24, &tokens, 8);
  std::memcpy(s.data() + 32, &docs, 8);
  std::memcpy(s.data() + 40, &kFingerprint, 8);
  const uint64_t sum = fnv1a64(s.data(), 56);
  std::memcpy(s.data() + 56, &sum, 8);
  write_text(dir.path("v1.bin"), s);
  return dir.path("v1.bin");
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
  // 64-byte header, 24 bytes of tokens, 3 offsets of 8 bytes, 2 bytes of loss mask (12 bits).
  EXPECT_EQ(std::filesystem::file_size(r.path()), 64u + 24u + 24u + 2u);
  std::vector<uint8_t> trained(r.tokens());
  r.read_trained(0, r.tokens(), trained.data());
  EXPECT_EQ(trained, std::vector<uint8_t>(12, 1));  // documents added without a mask are trained on throughout
}

TEST(Shard, CarriesTheLossMaskAndEmptyDocuments) {
  TempDir dir;
  const std::string path = dir.path("m.bin");
  ShardWriter w(path, kVocab, kEot, kFingerprint);
  w.add_document(std::vector<int32_t>{10, 11, 12}, std::vector<uint8_t>{0, 1, 1, 0});
  w.add_document(std::vector<int32_t>{}, std::vector<uint8_t>{0});  // a lone end-of-text: packing's filler
  w.add_document(std::vector<int32_t>{5, 6, 7, 8, 9}, std::vector<uint8_t>{0, 0, 0, 1, 1, 1});
  w.finish();
  ShardReader r(path);
  EXPECT_TRUE(r.has_loss_mask());
  EXPECT_EQ(read_all(r), (std::vector<int32_t>{10, 11, 12, 256, 256, 5, 6, 7, 8, 9, 256}));
  EXPECT_EQ(std::vector<uint64_t>(r.doc_offsets().begin(), r.doc_offsets().end()), (std::vector<uint64_t>{0, 4, 5}));
  std::vector<uint8_t> trained(r.tokens());
  r.read_trained(0, r.tokens(), trained.data());
  EXPECT_EQ(trained, (std::vector<uint8_t>{0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1}));
  r.read_trained(7, 3, trained.data());
  EXPECT_EQ(std::vector<uint8_t>(trained.begin(), trained.begin() + 3), (std::vector<uint8_t>{0, 1, 1}));
  ShardWriter other(dir.path("other.bin"), kVocab, kEot, kFingerprint);
  EXPECT_NE(error_of([&] { other.add_document(std::vector<int32_t>{1}, std::vector<uint8_t>{1}); })
                .find("1 mask values for a document of 1 tokens"),
            std::string::npos);
}

TEST(Shard, VersionOneShardsStillLoad) {
  TempDir dir;
  const std::string path = write_v1_shard(dir);
  ShardReader r(path);
  EXPECT_EQ(r.header().version, 1u);
  EXPECT_FALSE(r.has_loss_mask());
  EXPECT_EQ(read_all(r), (std::vector<int32_t>{72, 105, 33, 256, 1, 256, 255, 0, 7, 9, 200, 256}));
  std::vector<uint8_t> trained(r.tokens());
  r.read_trained(0, r.tokens(), trained.data());
  EXPECT_EQ(trained, std::vector<uint8_t>(12, 1));
  // Version 1's own rules still hold: a zero reserved field, a token before each end-of-text.
  const uint64_t reserved = 1;
  patch(path, 48, &reserved, 8, Fix::Header);
  EXPECT_NE(error_of([&] { ShardReader bad(path); }).find("its reserved field (bytes 48 to 55) is 0x1, not zero"),
            std::string::npos);
  const std::string again = write_v1_shard(dir);
  const uint64_t offset = 5;
  patch(again, 64 + 24 + 16, &offset, 8);
  EXPECT_NE(error_of([&] { ShardReader bad(again); }).find("a document holds at least one token and its end-of-text"),
            std::string::npos);
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
  // 4 tokens x 4 bytes = 16: no padding before the offsets; then one byte of loss mask.
  EXPECT_EQ(std::filesystem::file_size(path), 64u + 16u + 8u + 1u);
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
       const uint32_t v = 3;
       patch(p, 8, &v, 4);
     },
     "has format version 3; this tokamak reads versions 1 to 2"},
    {"checksum",
     [](const std::string& p) {
       const uint64_t tokens = 10;
       patch(p, 24, &tokens, 8);
     },
     "corrupt header: its checksum"},
    {"truncated header", [](const std::string& p) { truncate_to(p, 30); }, "is truncated: 30 bytes, less than its 64-byte header"},
    {"truncated tokens", [](const std::string& p) { truncate_to(p, 64 + 10); },
     "is truncated: its header describes 12 tokens and 3 documents (114 bytes) but the file has 74 bytes"},
    {"truncated offsets", [](const std::string& p) { truncate_to(p, 64 + 24 + 8); }, "is truncated"},
    {"trailing bytes", [](const std::string& p) { write_text(p, read_text(p) + "junk"); },
     "has 4 bytes after the end its header describes"},
    {"token count beyond the file",
     [](const std::string& p) {
       const uint64_t tokens = uint64_t(1) << 62;  // would overflow a naive size computation
       patch(p, 24, &tokens, 8, Fix::Header);
     },
     "is truncated: its header describes 4611686018427387904 tokens"},
    {"token width",
     [](const std::string& p) {
       const uint32_t width = 4;
       patch(p, 12, &width, 4, Fix::Header);
     },
     "4-byte tokens for a vocabulary of 257"},
    {"eot outside vocab",
     [](const std::string& p) {
       const uint32_t eot = 300;
       patch(p, 20, &eot, 4, Fix::Header);
     },
     "end-of-text id 300 is outside its vocabulary"},
    {"more documents than tokens",
     [](const std::string& p) {
       const uint64_t docs = 13;
       patch(p, 32, &docs, 8, Fix::Header);
     },
     "12 tokens cannot hold 13 documents"},
    {"data changed",
     [](const std::string& p) {
       const uint16_t t = 5;
       patch(p, 64 + 2, &t, 2);
     },
     "the checksum of its tokens, document index and loss mask does not match its header"},
    {"data checksum",
     [](const std::string& p) {
       const uint64_t sum = 1;
       patch(p, 48, &sum, 8, Fix::Header);
     },
     "the checksum of its tokens, document index and loss mask does not match its header"},
    {"mask bits past the end",
     [](const std::string& p) {
       const uint8_t bits = 0xff;
       patch(p, 64 + 24 + 24 + 1, &bits, 1, Fix::All);
     },
     "its loss mask has bits set past its 12 tokens"},
    {"offset out of range",
     [](const std::string& p) {
       const uint64_t offset = 40;
       patch(p, 64 + 24 + 16, &offset, 8, Fix::All);
     },
     "corrupt document index: document 2 starts at 40 (previous start 4, 12 tokens in the shard;"},
    {"offsets not increasing",
     [](const std::string& p) {
       const uint64_t offset = 4;
       patch(p, 64 + 24 + 16, &offset, 8, Fix::All);
     },
     "corrupt document index: document 2 starts at 4"},
    {"first offset not zero",
     [](const std::string& p) {
       const uint64_t offset = 1;
       patch(p, 64 + 24, &offset, 8, Fix::All);
     },
     "corrupt document index: document 0 starts at 1"},
    {"last token not eot",
     [](const std::string& p) {
       const uint16_t t = 5;
       patch(p, 64 + 22, &t, 2, Fix::All);
     },
     "document 2 ends at token 11 with id 5, not the end-of-text token 256"},
    {"eot inside a document",
     [](const std::string& p) {
       const uint16_t t = kEot;
       patch(p, 64 + 2 * 1, &t, 2, Fix::All);
     },
     "is corrupt: document 0 (tokens 0 to 3) holds the end-of-text token 256 at 1, inside it"},
    {"document offset moved",
     [](const std::string& p) {
       const uint64_t offset = 3;  // still increasing: 0, 3, 6
       patch(p, 64 + 24 + 8, &offset, 8, Fix::All);
     },
     "is corrupt: document 0 ends at token 2 with id 33, not the end-of-text token 256"},
    {"document end moved",
     [](const std::string& p) {
       const uint64_t offset = 5;  // document 1 would be [4, 5), which ends with token 4, not an end-of-text
       patch(p, 64 + 24 + 16, &offset, 8, Fix::All);
     },
     "document 1 ends at token 4 with id 1, not the end-of-text token 256"},
    {"token outside the vocabulary",
     [](const std::string& p) {
       const uint16_t bad = 300;
       patch(p, 64 + 2 * 7, &bad, 2, Fix::All);
     },
     "is corrupt: token 7 is 300, outside its vocabulary of 257"},
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

// The mapping is shared with the file: tokens changed in place after the open are still checked as read.
TEST(Shard, TokensChangedAfterOpenAreCaughtWhenRead) {
  TempDir dir;
  const std::string path = write_shard(dir);
  ShardReader r(path);
  const uint16_t bad = 300;
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_TRUE(f);
  std::fseek(f, 64 + 2 * 7, SEEK_SET);
  std::fwrite(&bad, 2, 1, f);
  std::fclose(f);
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

// A dataset directory as prepare makes it: one train shard and its meta.json.
nlohmann::json write_dataset(const TempDir& dir) {
  std::filesystem::create_directories(dir.path("data"));
  ShardWriter w(dir.path("data/train_000000.bin"), kVocab, kEot, kFingerprint);
  for (const auto& d : kDocs) w.add_document(d);
  w.finish();
  nlohmann::json meta = {
      {"format", "tokamak-shards"},
      {"version", 1},
      {"tokenizer", {{"kind", "bytes"}, {"path", ""}, {"fingerprint", "0123456789abcdef"}, {"vocab_size", 257},
                     {"eot_id", 256}}},
      {"splits", {{"train", {{"shards", {{{"file", "train_000000.bin"}, {"tokens", 12}, {"documents", 3}}}}}},
                  {"val", {{"shards", nlohmann::json::array()}}}}}};
  write_text(dir.path("data/meta.json"), meta.dump());
  return meta;
}

TEST(DatasetListing, ReadsWhatPrepareWrites) {
  TempDir dir;
  write_dataset(dir);
  const DatasetListing d = read_dataset_listing(dir.path("data"));
  EXPECT_EQ(d.vocab_size, 257);
  EXPECT_EQ(d.eot_id, 256);
  EXPECT_EQ(d.fingerprint, kFingerprint);
  ASSERT_EQ(d.splits.at("train").size(), 1u);
  EXPECT_EQ(d.splits.at("train")[0].path, dir.path("data") + "/train_000000.bin");
  EXPECT_EQ(d.splits.at("train")[0].tokens, 12u);
  EXPECT_TRUE(d.splits.at("val").empty());
}

// A shard name that leads out of the dataset's directory is refused before any file is opened: a
// downloaded dataset must not make tokamak read /etc/passwd or a file beside the directory.
TEST(DatasetListing, ShardNamesAreConfinedToTheDirectory) {
  TempDir dir;
  const nlohmann::json meta = write_dataset(dir);
  write_text(dir.path("outside.bin"), read_text(dir.path("data/train_000000.bin")));
  std::filesystem::create_symlink(dir.path("outside.bin"), dir.path("data/link.bin"));
  for (const char* name : {"/etc/passwd", "../outside.bin", "sub/../../outside.bin", "link.bin"}) {
    nlohmann::json m = meta;
    m["splits"]["train"]["shards"][0]["file"] = name;
    write_text(dir.path("data/meta.json"), m.dump());
    const std::string msg = error_of([&] { read_dataset_listing(dir.path("data")); });
    EXPECT_NE(msg.find(dir.path("data/meta.json") + " names the file \"" + name + "\""), std::string::npos) << msg;
  }
}

TEST(DatasetListing, IntegersAreCheckedNamingTheField) {
  struct Case {
    const char* pointer;
    nlohmann::json value;
    const char* says;
  };
  const Case cases[] = {
      {"/version", 1.5, "version is 1.5, not an integer"},
      {"/tokenizer/vocab_size", 4294967553ull, "tokenizer.vocab_size is 4294967553; it must be an integer from 1 to 4294967295"},
      {"/tokenizer/vocab_size", -1, "tokenizer.vocab_size is -1"},
      {"/tokenizer/eot_id", 257, "tokenizer.eot_id is 257; it must be an integer from 0 to 256"},
      {"/splits/train/shards/0/tokens", 12.5, "splits.train.shards[0].tokens is 12.5, not an integer"},
      {"/splits/train/shards/0/documents", -3, "splits.train.shards[0].documents is -3"},
      {"/tokenizer/fingerprint", "0123456789abcdefg", "tokenizer fingerprint 0123456789abcdefg is not a string of 1 to 16"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    nlohmann::json m = write_dataset(dir);
    m[nlohmann::json::json_pointer(c.pointer)] = c.value;
    write_text(dir.path("data/meta.json"), m.dump());
    const std::string msg = error_of([&] { read_dataset_listing(dir.path("data")); });
    EXPECT_NE(msg.find(dir.path("data/meta.json")), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.pointer << ": " << msg;
  }
}

}  // namespace
}  // namespace tk
