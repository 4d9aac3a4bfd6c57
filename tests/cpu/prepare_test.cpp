// prepare: every input format gives the same documents; the split is deterministic; the output does
// not depend on the thread count; bad input and a full disk are clear errors that leave nothing behind.
#include "data/prepare.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "data_testing.h"

namespace tk {
namespace {

using testing::ByteTokenizer;
using testing::error_of;
using testing::files_in;
using testing::read_text;
using testing::TempDir;
using testing::write_text;

PrepareOptions options(const TempDir& dir, std::vector<std::string> inputs, double val_fraction = 0) {
  PrepareOptions o;
  o.inputs = std::move(inputs);
  o.out_dir = dir.path("out");
  o.val_fraction = val_fraction;
  o.threads = 2;
  o.progress = false;
  return o;
}

nlohmann::json meta_of(const std::string& out_dir) { return nlohmann::json::parse(read_text(out_dir + "/meta.json")); }

// The documents of a split, decoded (the byte tokenizer's ids are the bytes), in shard order.
std::vector<std::string> documents(const std::string& out_dir, const std::string& split) {
  std::vector<std::string> docs;
  const nlohmann::json meta = meta_of(out_dir);
  for (const auto& entry : meta["splits"][split]["shards"]) {
    ShardReader r(out_dir + "/" + entry["file"].get<std::string>());
    std::vector<int32_t> tokens(r.tokens());
    r.read(0, r.tokens(), tokens.data());
    std::string doc;
    for (int32_t t : tokens) {
      if (t != ByteTokenizer::kEot) {
        doc += char(t);
      } else {
        docs.push_back(std::exchange(doc, ""));
      }
    }
  }
  return docs;
}

std::string gzip(const std::string& data, const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "wb");
  gzwrite(gz, data.data(), unsigned(data.size()));
  gzclose(gz);
  return read_text(path);
}

std::string zstd(const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3));
  return out;
}

const std::string kJsonl =
    "{\"text\": \"first doc\", \"id\": 1}\n"
    "\n"
    "{\"id\": 2, \"text\": \"second \\\"quoted\\\" doc\\nwith a newline\"}\r\n"
    "{\"text\": \"\"}\n"
    "{\"text\": \"caf\\u00e9 \xf0\x9f\x98\x80\"}";  // no final newline
const std::vector<std::string> kJsonlDocs = {"first doc", "second \"quoted\" doc\nwith a newline",
                                             "caf\xc3\xa9 \xf0\x9f\x98\x80"};

TEST(Prepare, TextFilesFromDirectoriesInSortedOrder) {
  TempDir dir;
  write_text(dir.path("in/c.txt"), "third");
  write_text(dir.path("in/a.txt"), "first\n");
  write_text(dir.path("in/sub/b.txt"), "in a subdirectory");
  write_text(dir.path("in/notes.md"), "not an input");
  write_text(dir.path("extra.txt"), "named directly");
  ByteTokenizer tok;
  const PrepareSummary s = prepare(tok, options(dir, {dir.path("in"), dir.path("extra.txt")}));
  EXPECT_EQ(documents(dir.path("out"), "train"),
            (std::vector<std::string>{"first\n", "third", "in a subdirectory", "named directly"}));
  EXPECT_EQ(s.train.documents, 4u);
  EXPECT_EQ(s.train.tokens, 6u + 5 + 17 + 14 + 4);  // bytes plus one eot per document
  EXPECT_EQ(s.val.documents, 0u);
  EXPECT_EQ(s.input_files, 4u);
  EXPECT_EQ(files_in(dir.path("out")), (std::vector<std::string>{"meta.json", "train_000000.bin"}));
}

TEST(Prepare, MetaJsonDescribesTheDataset) {
  TempDir dir;
  write_text(dir.path("a.txt"), "hello");
  write_text(dir.path("b.txt"), "world!");
  ByteTokenizer tok(0xfeedbeef);
  PrepareOptions o = options(dir, {dir.path("a.txt"), dir.path("b.txt")}, 0.5);
  o.command = "tokamak prepare --input a.txt b.txt";
  o.tokenizer_path = dir.path("tok");
  prepare(tok, o);
  const nlohmann::json m = meta_of(dir.path("out"));
  EXPECT_EQ(m["format"], "tokamak-shards");
  EXPECT_EQ(m["version"], 2);
  EXPECT_EQ(m["tokenizer"]["kind"], "bytes");
  EXPECT_EQ(m["tokenizer"]["path"], dir.path("tok"));
  EXPECT_EQ(m["tokenizer"]["fingerprint"], "00000000feedbeef");
  EXPECT_EQ(m["tokenizer"]["vocab_size"], 257);
  EXPECT_EQ(m["tokenizer"]["eot_id"], 256);
  EXPECT_EQ(m["token_bytes"], 2);
  // Documents 0 and 1 are pinned to train and validation.
  EXPECT_EQ(m["splits"]["train"]["documents"], 1);
  EXPECT_EQ(m["splits"]["train"]["tokens"], 6);
  EXPECT_EQ(m["splits"]["train"]["shards"][0]["file"], "train_000000.bin");
  EXPECT_EQ(m["splits"]["val"]["documents"], 1);
  EXPECT_EQ(m["splits"]["val"]["tokens"], 7);
  EXPECT_EQ(m["splits"]["val"]["shards"][0]["file"], "val_000000.bin");
  EXPECT_EQ(m["inputs"], nlohmann::json({dir.path("a.txt"), dir.path("b.txt")}));
  EXPECT_EQ(m["command"], "tokamak prepare --input a.txt b.txt");
}

TEST(Prepare, JsonlPlainGzipAndZstdGiveTheSameDocuments) {
  TempDir dir;
  write_text(dir.path("plain/d.jsonl"), kJsonl);
  write_text(dir.path("gz/d.jsonl.gz"), gzip(kJsonl, dir.path("tmp.gz")));
  write_text(dir.path("zst/d.jsonl.zst"), zstd(kJsonl));
  // Multi-member gzip and multi-frame zstd, as produced by concatenating compressed files.
  const std::string a = kJsonl.substr(0, 40), b = kJsonl.substr(40);
  write_text(dir.path("gz2/d.jsonl.gz"), gzip(a, dir.path("a.gz")) + gzip(b, dir.path("b.gz")));
  write_text(dir.path("zst2/d.jsonl.zst"), zstd(a) + zstd(b));
  ByteTokenizer tok;
  for (const char* sub : {"plain", "gz", "zst", "gz2", "zst2"}) {
    SCOPED_TRACE(sub);
    TempDir out;
    PrepareOptions o = options(out, {dir.path(sub)});
    const PrepareSummary s = prepare(tok, o);
    EXPECT_EQ(documents(o.out_dir, "train"), kJsonlDocs);
    EXPECT_EQ(s.empty_documents, 1u);
  }
}

TEST(Prepare, LargeCompressedInputsStream) {
  // About 3 MB, so that the readers refill their 1 MB buffers and lines cross buffer boundaries.
  TempDir dir;
  std::string jsonl;
  std::vector<std::string> expected;
  for (int i = 0; i < 8000; i++) {
    expected.push_back(fmt::format("document {} {}", i, std::string(i % 700, 'a' + i % 26)));
    jsonl += nlohmann::json({{"text", expected.back()}}).dump() + "\n";
  }
  write_text(dir.path("big.jsonl.zst"), zstd(jsonl));
  write_text(dir.path("big.jsonl.gz"), gzip(jsonl, dir.path("tmp.gz")));
  ByteTokenizer tok;
  for (const char* name : {"big.jsonl.zst", "big.jsonl.gz"}) {
    SCOPED_TRACE(name);
    TempDir out;
    PrepareOptions o = options(out, {dir.path(name)});
    prepare(tok, o);
    EXPECT_EQ(documents(o.out_dir, "train"), expected);
  }
}

TEST(Prepare, TextFieldOption) {
  TempDir dir;
  write_text(dir.path("d.jsonl"), "{\"content\": \"abc\", \"text\": 5}\n");
  ByteTokenizer tok;
  PrepareOptions o = options(dir, {dir.path("d.jsonl")});
  o.text_field = "content";
  prepare(tok, o);
  EXPECT_EQ(documents(o.out_dir, "train"), std::vector<std::string>{"abc"});
}

TEST(Prepare, BadJsonLinesNameTheFileAndLine) {
  struct Case {
    std::string jsonl, message;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"ok\"}\n\n{\"text\": \"unterminated}\n", "d.jsonl:3: not valid JSON: parse error at column "},
      {"{\"text\": \"ok\"}\n{\"id\": 2, \"body\": \"x\"}\n",
       "d.jsonl:2: no \"text\" field (the object has: body, id); name the text field with --text-field"},
      {"{\"text\": 42}\n", "d.jsonl:1: field \"text\" is a number, not a string"},
      {"[\"text\"]\n", "d.jsonl:1: expected a JSON object with a \"text\" field, found array"},
      {"\n\n  \n", "holds no JSON lines"},
  };
  ByteTokenizer tok;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    TempDir dir;
    write_text(dir.path("d.jsonl"), c.jsonl);
    const std::string msg = error_of([&] { prepare(tok, options(dir, {dir.path("d.jsonl")})); });
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(dir.path("out"))) << "the output directory prepare made stays behind";
  }
}

TEST(Prepare, DamagedCompressedInputsAreClearErrors) {
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 2000; i++) jsonl += fmt::format("{{\"text\": \"document number {}\"}}\n", i);
  const std::string gz = gzip(jsonl, dir.path("tmp.gz")), zst = zstd(jsonl);
  write_text(dir.path("cut.jsonl.gz"), gz.substr(0, gz.size() / 2));
  write_text(dir.path("cut.jsonl.zst"), zst.substr(0, zst.size() / 2));
  write_text(dir.path("junk.jsonl.zst"), "this is not zstd data at all");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cut.jsonl.gz", "cut.jsonl.gz is truncated: its gzip stream ends early"},
      {"cut.jsonl.zst", "cut.jsonl.zst is truncated: its zstd stream ends inside a frame"},
      {"junk.jsonl.zst", "junk.jsonl.zst is not a valid zstd stream"},
  };
  ByteTokenizer tok;
  for (const auto& [name, message] : cases) {
    SCOPED_TRACE(name);
    TempDir out;
    const std::string msg = error_of([&] { prepare(tok, options(out, {dir.path(name)})); });
    EXPECT_NE(msg.find(message), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(out.path("out")));
  }
}

TEST(Prepare, UnusableInputsAreClearErrors) {
  TempDir dir;
  write_text(dir.path("empty.txt"), "");
  write_text(dir.path("a.txt"), "text");
  write_text(dir.path("doc.pdf"), "%PDF");
  write_text(dir.path("nothing/readme.md"), "no inputs here");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{dir.path("missing.txt")}, "input " + dir.path("missing.txt") + " does not exist"},
      {{dir.path("empty.txt")}, "input " + dir.path("empty.txt") + " is empty"},
      {{dir.path("doc.pdf")}, "is not a .txt, .jsonl, .jsonl.gz, .jsonl.zst or .parquet file"},
      {{dir.path("nothing")}, "holds no .txt, .jsonl, .jsonl.gz, .jsonl.zst or .parquet files"},
      {{dir.path("a.txt"), dir.path("a.txt")}, "is named twice"},
      {{}, "no input given"},
  };
  ByteTokenizer tok;
  for (const auto& [inputs, message] : cases) {
    SCOPED_TRACE(message);
    const std::string msg = error_of([&] { prepare(tok, options(dir, inputs)); });
    EXPECT_NE(msg.find(message), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([&] { prepare(tok, options(dir, {dir.path("a.txt")}, 1.0)); }).find("--val-fraction must be in [0, 1)"),
            std::string::npos);
}

TEST(Prepare, OnlyEmptyDocumentsIsAnError) {
  TempDir dir;
  write_text(dir.path("d.jsonl"), "{\"text\": \"\"}\n{\"text\": \"\"}\n");
  ByteTokenizer tok;
  const std::string msg = error_of([&] { prepare(tok, options(dir, {dir.path("d.jsonl")})); });
  EXPECT_NE(msg.find("the input holds no documents: all 2 JSON records have an empty \"text\" field"), std::string::npos)
      << msg;
}

TEST(Prepare, SplitIsDeterministicAndFollowsTheFraction) {
  int val = 0;
  for (uint64_t i = 0; i < 20000; i++) {
    const bool v = is_validation_document(i, 7, 0.1);
    EXPECT_EQ(v, is_validation_document(i, 7, 0.1));
    val += v;
  }
  EXPECT_NEAR(val, 2000, 200);
  EXPECT_FALSE(is_validation_document(0, 7, 0.1));
  EXPECT_TRUE(is_validation_document(1, 7, 0.1));
  int differ = 0, none = 0;
  for (uint64_t i = 2; i < 2000; i++) {
    differ += is_validation_document(i, 7, 0.5) != is_validation_document(i, 8, 0.5);
    none += is_validation_document(i, 7, 0.0);
  }
  EXPECT_GT(differ, 800);
  EXPECT_EQ(none, 0);
}

TEST(Prepare, DocumentsGoToTheSplitTheHashChooses) {
  TempDir dir;
  std::string jsonl;
  std::vector<std::string> train, val;
  for (uint64_t i = 0; i < 300; i++) {
    const std::string doc = fmt::format("document {}", i);
    jsonl += nlohmann::json({{"text", doc}}).dump() + "\n";
    (is_validation_document(i, 99, 0.2) ? val : train).push_back(doc);
  }
  write_text(dir.path("d.jsonl"), jsonl);
  ByteTokenizer tok;
  PrepareOptions o = options(dir, {dir.path("d.jsonl")}, 0.2);
  o.seed = 99;
  const PrepareSummary s = prepare(tok, o);
  EXPECT_EQ(documents(o.out_dir, "train"), train);
  EXPECT_EQ(documents(o.out_dir, "val"), val);
  EXPECT_EQ(s.val.documents, val.size());
  EXPECT_GT(val.size(), 30u);
  EXPECT_LT(val.size(), 90u);
}

TEST(Prepare, OutputDoesNotDependOnTheThreadCount) {
  TempDir dir;
  for (int f = 0; f < 6; f++) {
    std::string jsonl;
    for (int i = 0; i < 400; i++)
      jsonl += nlohmann::json({{"text", fmt::format("file {} doc {} {}", f, i, std::string(i * 7 % 3000, 'x'))}}).dump() +
               "\n";
    write_text(dir.path(fmt::format("in/part{}.jsonl", f)), jsonl);
  }
  ByteTokenizer tok;
  auto run = [&](int threads, const std::string& out) {
    PrepareOptions o = options(dir, {dir.path("in")}, 0.05);
    o.out_dir = out;
    o.threads = threads;
    o.shard_tokens = 500'000;  // several shards per split
    prepare(tok, o);
  };
  run(1, dir.path("one"));
  run(5, dir.path("five"));
  const std::vector<std::string> names = files_in(dir.path("one"));
  EXPECT_EQ(names, files_in(dir.path("five")));
  EXPECT_GE(names.size(), 5u);
  for (const std::string& n : names) EXPECT_EQ(read_text(dir.path("one/" + n)), read_text(dir.path("five/" + n))) << n;
}

TEST(Prepare, ShardsHoldWholeDocumentsUpToTheShardSize) {
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 100; i++) jsonl += nlohmann::json({{"text", std::string(99, 'a' + i % 26)}}).dump() + "\n";
  write_text(dir.path("d.jsonl"), jsonl);
  ByteTokenizer tok;
  PrepareOptions o = options(dir, {dir.path("d.jsonl")});
  o.shard_tokens = 1050;  // 100-token documents: a shard closes after its 11th
  const PrepareSummary s = prepare(tok, o);
  EXPECT_EQ(s.train.shards, 10u);
  const nlohmann::json shards = meta_of(o.out_dir)["splits"]["train"]["shards"];
  ASSERT_EQ(shards.size(), 10u);
  EXPECT_EQ(shards[0]["documents"], 11);
  EXPECT_EQ(shards[0]["tokens"], 1100);
  EXPECT_EQ(shards[9]["file"], "train_000009.bin");
  EXPECT_EQ(shards[9]["documents"], 1);
  EXPECT_EQ(documents(o.out_dir, "train").size(), 100u);
}

TEST(Prepare, FullDiskIsAClearErrorAndLeavesNoFiles) {
  // Small documents fill (and complete) the first shards; a huge one then makes its shard outgrow
  // the file size limit. The completed shards must go too: a failed prepare leaves nothing.
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 300; i++) jsonl += nlohmann::json({{"text", std::string(300, 'a' + i % 26)}}).dump() + "\n";
  jsonl += nlohmann::json({{"text", std::string(200'000, 'z')}}).dump() + "\n";
  write_text(dir.path("d.jsonl"), jsonl);
  ByteTokenizer tok;
  PrepareOptions o = options(dir, {dir.path("d.jsonl")}, 0.1);
  o.shard_tokens = 5'000;
  std::string msg;
  {
    testing::FileSizeLimit limit(100'000);
    msg = error_of([&] { prepare(tok, o); });
  }
  EXPECT_NE(msg.find("cannot write " + o.out_dir + "/train_"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(o.out_dir)) << "files of the failed prepare remain";
  // The same input fits without the limit, and yields the completed shards the failure removed.
  EXPECT_GT(prepare(tok, o).train.shards, 5u);
}

// The parents of --out that prepare made go too when it fails: a full disk left runs/a/b/ behind (only the last
// directory went). A parent that was there before stays.
TEST(Prepare, AFailedPrepareRemovesTheParentDirectoriesItMade) {
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 300; i++) jsonl += nlohmann::json({{"text", std::string(300, 'a' + i % 26)}}).dump() + "\n";
  write_text(dir.path("d.jsonl"), jsonl);
  ByteTokenizer tok;
  PrepareOptions o = options(dir, {dir.path("d.jsonl")}, 0.1);
  o.out_dir = dir.path("made/deeper/data");
  o.shard_tokens = 5'000;
  std::string msg;
  {
    testing::FileSizeLimit limit(4'000);
    msg = error_of([&] { prepare(tok, o); });
  }
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.path("made"))) << "directories of the failed prepare remain";
  EXPECT_TRUE(std::filesystem::exists(dir.path("d.jsonl")));
}

TEST(Prepare, AFailedRerunRemovesTheOldMetaJson) {
  TempDir dir;
  write_text(dir.path("good.jsonl"), "{\"text\": \"fine\"}\n");
  write_text(dir.path("bad.jsonl"), "{\"text\": \"fine\"}\n{oops\n");
  ByteTokenizer tok;
  PrepareOptions o = options(dir, {dir.path("good.jsonl")});
  prepare(tok, o);
  ASSERT_TRUE(std::filesystem::exists(o.out_dir + "/meta.json"));
  o.inputs = {dir.path("bad.jsonl")};
  EXPECT_NE(error_of([&] { prepare(tok, o); }).find("bad.jsonl:2: not valid JSON"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/meta.json"));
}

TEST(Prepare, SummaryReportsDocumentsTokensAndSizes) {
  PrepareSummary s;
  s.out_dir = "data/brown";
  s.input_files = 500;
  s.input_bytes = 6'500'000;
  s.seconds = 2.5;
  s.train = {495, 1'150'000, 1, 2'300'200};
  s.val = {5, 12'000, 1, 24'100};
  s.empty_documents = 3;
  const std::string text = format_summary(s);
  EXPECT_NE(text.find("prepared data/brown in 2.5s: 500 input files, 6.5 MB of text, 2.6 MB/s, 464.8K tokens/s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("train        495 documents        1150000 tokens     1 shard      2.3 MB"), std::string::npos)
      << text;
  EXPECT_NE(text.find("val            5 documents          12000 tokens"), std::string::npos) << text;
  EXPECT_NE(text.find("skipped 3 JSON records with empty text"), std::string::npos) << text;
}


// ---- the default split ----------------------------------------------------------------------------

// docs/data.md's rule, written from its text: which documents (by length, in input order) go to validation.
std::vector<bool> documented_split(const std::vector<size_t>& lengths, uint64_t seed) {
  const size_t n = lengths.size();
  std::vector<bool> val(n, false);
  uint64_t total = 0, val_tokens = 0, val_documents = 0;
  for (size_t len : lengths) total += len;
  std::vector<size_t> rest;
  for (size_t i = 1; i < n; i++) {
    if (document_hash(i, seed) < 0.005) {
      val[i] = true, val_tokens += lengths[i], val_documents++;
    } else {
      rest.push_back(i);
    }
  }
  std::sort(rest.begin(), rest.end(), [&](size_t a, size_t b) { return document_hash(a, seed) < document_hash(b, seed); });
  for (size_t i : rest) {
    const bool short_of_minimum = val_tokens < 20'000 || val_documents < 10;
    if (val_documents > 0 && !(short_of_minimum && double(val_tokens + lengths[i]) <= 0.1 * double(total))) break;
    val[i] = true, val_tokens += lengths[i], val_documents++;
  }
  return val;
}

// A corpus of documents of the given lengths ("<i>:" then filler), prepared with the default split; checks that
// the splits hold the documents the rule names, train in input order but for held-back documents.
PrepareSummary expect_documented_split(const std::vector<size_t>& lengths, uint64_t seed) {
  TempDir dir;
  std::string jsonl;
  std::vector<std::string> docs;
  for (size_t i = 0; i < lengths.size(); i++) {
    std::string doc = fmt::format("{}:", i);
    doc += std::string(lengths[i] - doc.size(), 'a' + char(i % 26));
    jsonl += nlohmann::json({{"text", doc}}).dump() + "\n";
    docs.push_back(doc);
  }
  write_text(dir.path("d.jsonl"), jsonl);
  PrepareOptions o = options(dir, {dir.path("d.jsonl")});
  o.val_fraction.reset();
  o.seed = seed;
  ByteTokenizer tok;
  const PrepareSummary s = prepare(tok, o);
  const std::vector<bool> val = documented_split(lengths, seed);
  std::vector<std::string> want_val, want_train;
  for (size_t i = 0; i < docs.size(); i++) (val[i] ? want_val : want_train).push_back(docs[i]);
  std::vector<std::string> got_val = documents(o.out_dir, "val"), got_train = documents(o.out_dir, "train");
  std::vector<std::string> sorted_val = got_val, sorted_train = got_train;
  auto by_index = [](const std::string& a, const std::string& b) { return std::stoul(a) < std::stoul(b); };
  std::sort(sorted_val.begin(), sorted_val.end(), by_index);
  std::sort(sorted_train.begin(), sorted_train.end(), by_index);
  EXPECT_EQ(sorted_val, want_val);
  EXPECT_EQ(sorted_train, want_train);
  EXPECT_EQ(s.val.documents + s.train.documents, lengths.size());
  const nlohmann::json meta = meta_of(o.out_dir);
  EXPECT_TRUE(meta["val_fraction"].is_null());
  EXPECT_EQ(meta["val_default_rule"]["min_tokens"], 20000);
  return s;
}

TEST(Prepare, DefaultSplitTakesHalfAPercentOfTheTokensWithAMinimum) {
  // 1000 documents of 200-500 bytes (~350K tokens): the minimum of 20,000 tokens (about 57 documents) binds.
  std::vector<size_t> lengths;
  for (size_t i = 0; i < 1000; i++) lengths.push_back(200 + (i * 7919) % 301);
  for (uint64_t seed : {1234, 5}) {
    const PrepareSummary s = expect_documented_split(lengths, seed);
    EXPECT_GE(s.val.tokens - s.val.documents, 20'000u);  // the shards' tokens hold one eot a document
    EXPECT_LT(s.val.tokens - s.val.documents, 20'500u);
  }
}

TEST(Prepare, DefaultSplitOnASmallCorpusStopsAtATenthOfTheTokens) {
  std::vector<size_t> lengths(60, 150);  // 9,000 tokens: validation stops at 900, 6 documents
  EXPECT_EQ(expect_documented_split(lengths, 1234).val.documents, 6u);
  EXPECT_EQ(expect_documented_split({40, 50}, 1234).val.documents, 1u);  // two documents: one in each split
  EXPECT_GE(expect_documented_split({40, 5000, 60, 70}, 77).val.documents, 1u);  // whatever the lengths
}

TEST(Prepare, DefaultSplitOnALargeCorpusIsAboutHalfAPercent) {
  // 6,000 documents of 2,000 bytes (12M tokens): 0.5% is 60,000 tokens, past the minimum.
  TempDir dir;
  for (int f = 0; f < 6; f++) {
    std::string jsonl;
    for (int i = 0; i < 1000; i++) jsonl += nlohmann::json({{"text", std::string(2000, 'a' + i % 26)}}).dump() + "\n";
    write_text(dir.path(fmt::format("in/{}.jsonl", f)), jsonl);
  }
  PrepareOptions o = options(dir, {dir.path("in")});
  o.val_fraction.reset();
  ByteTokenizer tok;
  const PrepareSummary s = prepare(tok, o);
  const double share = double(s.val.tokens) / double(s.val.tokens + s.train.tokens);
  EXPECT_GT(share, 0.0025);
  EXPECT_LT(share, 0.0075);
  EXPECT_GE(s.val.documents, 10u);
}

TEST(Prepare, DefaultSplitOfTheBrownCorpus) {
  const std::string brown = std::string(TK_SOURCE_DIR) + "/.cache/brown";
  if (!std::filesystem::exists(brown)) GTEST_SKIP() << "no Brown Corpus in .cache (scripts/setup.sh fetches it)";
  TempDir dir;
  PrepareOptions o = options(dir, {brown});
  o.val_fraction.reset();
  ByteTokenizer tok;
  const PrepareSummary s = prepare(tok, o);
  EXPECT_GE(s.val.documents, 10u);  // 1% of the documents gave 2
  EXPECT_GE(s.val.tokens, 20'000u);
  EXPECT_LE(double(s.val.tokens), 0.1 * double(s.val.tokens + s.train.tokens));
}

TEST(Prepare, UnreadableFilesInADirectoryAreNamed) {
  TempDir dir;
  write_text(dir.path("in/a.jsonl"), "{\"text\": \"read\"}\n");
  write_text(dir.path("in/b.arrow"), "ARROW1");
  write_text(dir.path("in/c.json"), "[{\"text\": \"not read\"}]");
  write_text(dir.path("in/sub/d.txt.gz"), "gz");
  write_text(dir.path("in/README.md"), "about the data");
  ByteTokenizer tok;
  ::testing::internal::CaptureStderr();
  prepare(tok, options(dir, {dir.path("in")}));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("skipping 1 file that tokamak cannot read: " + dir.path("in/b.arrow") +
                     " (Arrow IPC files are not supported"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(dir.path("in/c.json") + " (a .json file is one JSON document, not JSON Lines"), std::string::npos)
      << err;
  EXPECT_NE(err.find(dir.path("in/sub/d.txt.gz") + " (compressed input is read as .jsonl.gz and .jsonl.zst only)"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("README.md"), std::string::npos) << err;
  EXPECT_EQ(documents(dir.path("out"), "train"), std::vector<std::string>{"read"});
}

// An entry that is not a regular file was skipped without a word: a FIFO (reading it would wait for a writer), a
// link to a directory (not followed), a link to nothing. Each is named with the reason.
TEST(Prepare, EntriesThatAreNotFilesInADirectoryAreNamed) {
  TempDir dir;
  write_text(dir.path("in/a.jsonl"), "{\"text\": \"read\"}\n");
  write_text(dir.path("elsewhere/b.txt"), "not under in/");
  ASSERT_EQ(::mkfifo(dir.path("in/pipe.jsonl").c_str(), 0644), 0);
  std::filesystem::create_directory_symlink(dir.path("elsewhere"), dir.path("in/linked"));
  std::filesystem::create_symlink(dir.path("gone.txt"), dir.path("in/dangling.txt"));
  ByteTokenizer tok;
  ::testing::internal::CaptureStderr();
  prepare(tok, options(dir, {dir.path("in")}));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(dir.path("in/pipe.jsonl") + " (not a regular file but a FIFO, a socket or a device"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(dir.path("in/linked") + " (a symbolic link to a directory is not followed"), std::string::npos)
      << err;
  EXPECT_NE(err.find(dir.path("in/dangling.txt") + " (a symbolic link to nothing)"), std::string::npos) << err;
  EXPECT_EQ(documents(dir.path("out"), "train"), std::vector<std::string>{"read"});
}

}  // namespace
}  // namespace tk
