// Every Parquet fixture under tests/fixtures/parquet/ (any folder: each writer's set has its own; more folders with
// TOKAMAK_PARQUET_FIXTURES) read as its NAME.expected.json says it must be: every row of every column listed, or the
// error named. Files with a "text"
// column are also read through the document pipeline, as prepare and train-tokenizer read them; and prepare makes
// the same shards of a Parquet copy of Brown Corpus files as of the files themselves and of their .jsonl copy, and
// train-tokenizer counts the same pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/bpe_trainer.h"
#include "data/document_pipeline.h"
#include "data/parquet_reader.h"
#include "data/prepare.h"
#include "data_testing.h"

namespace tk {
namespace {

using parquet::ChatMessage;
using parquet::ParquetFile;
using parquet::ParquetRow;
using parquet::ParquetRowReader;
using testing::read_text;
using testing::TempDir;
using testing::write_text;

struct Fixture {
  std::string parquet;
  nlohmann::json expected;
};

std::vector<Fixture> fixtures_in(const std::string& root) {
  std::vector<Fixture> found;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    const std::string p = e.path().string();
    const std::string suffix = ".expected.json";
    if (p.size() < suffix.size() || p.compare(p.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    found.push_back({p.substr(0, p.size() - suffix.size()) + ".parquet", nlohmann::json::parse(read_text(p))});
  }
  std::sort(found.begin(), found.end(), [](const Fixture& a, const Fixture& b) { return a.parquet < b.parquet; });
  return found;
}

const std::string kCommitted = std::string(TK_SOURCE_DIR) + "/tests/fixtures/parquet";

// The committed fixtures, and those of the folders TOKAMAK_PARQUET_FIXTURES names (separated by ':'): the random
// tables of tests/hf/parquet_fixtures.py's differential check.
std::vector<Fixture> fixtures() {
  std::vector<Fixture> all = fixtures_in(kCommitted);
  const char* more = std::getenv("TOKAMAK_PARQUET_FIXTURES");
  for (std::string_view rest = more ? more : ""; !rest.empty();) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    if (dir.empty()) continue;
    std::vector<Fixture> found = fixtures_in(dir);
    EXPECT_FALSE(found.empty()) << "TOKAMAK_PARQUET_FIXTURES names " << dir << ", which holds no fixture";
    all.insert(all.end(), found.begin(), found.end());
  }
  return all;
}

std::optional<std::string> string_of(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<std::string>();
}

std::optional<std::vector<ChatMessage>> messages_of(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({string_of(m.at("role")), string_of(m.at("content"))});
  return out;
}

// Every column of the fixture, read whole: throws the reader's error for a file it refuses.
void read_everything(const Fixture& f) {
  const ParquetFile file(f.parquet);
  for (const auto& [name, kind] : f.expected.at("columns").items()) {
    if (kind == "messages") {
      const parquet::MessagesColumn c = file.messages_column(name);
      for (size_t g = 0; g < file.row_groups(); g++) file.read_messages(g, c);
    } else {
      const parquet::StringColumn c = file.string_column(name);
      for (size_t g = 0; g < file.row_groups(); g++) file.read_strings(g, c);
    }
  }
}

TEST(ParquetFixtures, EveryFixtureReadsAsExpected) {
  ASSERT_GE(fixtures_in(kCommitted).size(), 20u) << "the fixtures of tests/fixtures/parquet are missing";
  const std::vector<Fixture> all = fixtures();
  size_t rows_checked = 0;
  for (const Fixture& f : all) {
    SCOPED_TRACE(f.parquet);
    ASSERT_TRUE(std::filesystem::exists(f.parquet));
    if (f.expected.contains("error")) {
      const std::string err = testing::error_of([&] { read_everything(f); });
      EXPECT_NE(err.find(f.expected["error"].get<std::string>()), std::string::npos) << err;
      EXPECT_NE(err.find(f.parquet), std::string::npos) << err;
      continue;
    }
    std::vector<std::string> strings;
    std::string messages;
    for (const auto& [name, kind] : f.expected.at("columns").items())
      (kind == "messages" ? messages : strings.emplace_back()) = name;
    ParquetRowReader reader(f.parquet, strings, messages);
    const nlohmann::json& rows = f.expected.at("rows");
    size_t i = 0;
    for (ParquetRow row; reader.next(row); i++) {
      ASSERT_LT(i, rows.size());
      SCOPED_TRACE(i);
      EXPECT_EQ(reader.row_index(), i);
      for (size_t c = 0; c < strings.size(); c++) EXPECT_EQ(row.strings[c], string_of(rows[i].at(strings[c])));
      if (!messages.empty()) EXPECT_EQ(row.messages, messages_of(rows[i].at(messages)));
    }
    EXPECT_EQ(i, rows.size());
    rows_checked += i;
  }
  EXPECT_GT(rows_checked, 1000u);
}

TEST(ParquetFixtures, TextColumnsReadThroughTheDocumentPipelineAsRows) {
  size_t files = 0;
  for (const Fixture& f : fixtures()) {
    if (f.expected.contains("error") || !f.expected.at("columns").contains("text")) continue;
    SCOPED_TRACE(f.parquet);
    std::vector<std::string> want;
    for (const auto& row : f.expected.at("rows")) want.push_back(string_of(row.at("text")).value_or(""));
    for (int threads : {1, 3}) {
      std::vector<std::string> got;
      uint64_t disk_bytes = 0;
      run_document_pipeline<Documents>(
          find_inputs({f.parquet}), {"text", threads}, [](Documents& d, int) { return d; },
          [&](Documents& d, uint64_t bytes) {
            got.insert(got.end(), d.begin(), d.end());
            disk_bytes += bytes;
          });
      EXPECT_EQ(got, want);
      EXPECT_EQ(disk_bytes, std::filesystem::file_size(f.parquet));
    }
    files++;
  }
  EXPECT_GE(files, 10u);
}

// The shard files of a prepared directory, by name.
std::map<std::string, std::string> shards(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".bin") out[e.path().filename().string()] = read_text(e.path().string());
  return out;
}

// tests/fixtures/parquet/brown/brown_slice.parquet holds the first 12 Brown files in sorted order, one row each
// (brown_copy.cjs: zstd, row groups of 4 rows).
TEST(ParquetFixtures, PrepareMakesTheSameShardsOfBrownAsParquetAsOfItsText) {
  const std::string brown = std::string(TK_SOURCE_DIR) + "/.cache/brown";
  if (!std::filesystem::exists(brown)) GTEST_SKIP() << "no Brown Corpus in .cache (scripts/setup.sh fetches it)";
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(brown)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  names.resize(12);
  TempDir dir;
  std::string jsonl;
  for (const std::string& n : names) {
    const std::string text = read_text(brown + "/" + n);
    write_text(dir.path("txt/" + n), text);
    jsonl += nlohmann::json({{"text", text}}).dump() + "\n";
  }
  write_text(dir.path("brown.jsonl"), jsonl);
  auto prepare_into = [&](const std::string& input, const std::string& out) {
    PrepareOptions o;
    o.inputs = {input};
    o.out_dir = dir.path(out);
    o.shard_tokens = 40'000;  // several shards
    o.progress = false;
    o.threads = 3;
    const PrepareSummary s = prepare(testing::ByteTokenizer(), o);
    EXPECT_EQ(s.train.documents + s.val.documents, 12u);
    return shards(o.out_dir);
  };
  const auto from_parquet =
      prepare_into(std::string(TK_SOURCE_DIR) + "/tests/fixtures/parquet/brown/brown_slice.parquet", "parquet");
  EXPECT_GE(from_parquet.size(), 3u);
  EXPECT_EQ(from_parquet, prepare_into(dir.path("txt"), "txt"));
  EXPECT_EQ(from_parquet, prepare_into(dir.path("brown.jsonl"), "jsonl"));

  // train-tokenizer reads them alike: the same pieces, so the same merges.
  auto pieces_of = [](const std::string& input) {
    return count_input_pieces(find_inputs({input}), "text", 2, nullptr);
  };
  const PieceCounts from_text = pieces_of(dir.path("txt"));
  const PieceCounts from_table =
      pieces_of(std::string(TK_SOURCE_DIR) + "/tests/fixtures/parquet/brown/brown_slice.parquet");
  EXPECT_EQ(from_table.counts(), from_text.counts());
  EXPECT_EQ(from_table.text_bytes(), from_text.text_bytes());
  EXPECT_GT(from_text.pieces(), 10'000u);
}

}  // namespace
}  // namespace tk
