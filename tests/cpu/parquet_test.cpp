// The Parquet reader on files made byte by byte (parquet_testing.h): CRCs, the legacy list forms, and each kind of
// refusal and corruption as a tk::Error naming the file, the column and the reason; every truncation and many
// byte flips of real files end in values or a tk::Error; the encodings' decoders on edge cases.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/document_pipeline.h"
#include "data/parquet_encodings.h"
#include "data/parquet_reader.h"
#include "data/parquet_text.h"
#include "data/prepare.h"
#include "data_testing.h"
#include "parquet_testing.h"

namespace tk {
namespace {

using parquet::ChatMessage;
using parquet::ParquetFile;
using parquet::SchemaElement;
using parquet::StringValues;
using testing::error_of;
using testing::TempDir;
using testing::write_text;
namespace pq = testing::pq;

const StringValues kValues = {"alpha", std::nullopt, "", "δέλτα 🙂", "alpha"};

// A file of one optional string column "text" whose one row group holds `pages`.
std::string text_file(const std::string& pages, int64_t values = 5, int64_t rows = 5, bool dictionary = false) {
  return pq::parquet_file(pq::text_schema(), {{rows, {{{"text"}, values, pages, 0, dictionary}}}});
}

StringValues read_text(const std::string& path) {
  const ParquetFile file(path);
  StringValues all;
  for (size_t g = 0; g < file.row_groups(); g++) {
    StringValues v = file.read_strings(g, file.string_column("text"));
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

std::string write(const TempDir& dir, const std::string& name, const std::string& bytes) {
  write_text(dir.path(name), bytes);
  return dir.path(name);
}

TEST(Parquet, PagesWithCrcsReadAndAWrongCrcIsAnError) {
  TempDir dir;
  const std::string body = pq::optional_strings_v1(kValues);
  EXPECT_EQ(read_text(write(dir, "v1.parquet", text_file(pq::data_page_v1(5, body, {.crc = true})))), kValues);
  std::string v2_defs = pq::rle({1, 0, 1, 1, 1}, 1);
  const std::string v2 =
      pq::data_page_v2(5, 5, "", v2_defs, pq::plain({"alpha", "", "δέλτα 🙂", "alpha"}), {.crc = true});
  EXPECT_EQ(read_text(write(dir, "v2.parquet", text_file(v2))), kValues);
  const std::string dict = pq::dictionary_page({"alpha", "", "δέλτα 🙂"}, {.crc = true});
  const std::string indices = std::string(1, '\2') + pq::rle({0, 1, 2, 0}, 2);
  const std::string levels = pq::rle({1, 0, 1, 1, 1}, 1);
  const std::string dict_page =
      pq::data_page_v1(5, pq::le32(uint32_t(levels.size())) + levels + indices, {.encoding = 8, .crc = true});
  EXPECT_EQ(read_text(write(dir, "dict.parquet", text_file(dict + dict_page, 5, 5, true))), kValues);

  const std::string bad = write(dir, "bad.parquet", text_file(pq::data_page_v1(5, body, {.crc_value = 12345})));
  const std::string err = error_of([&] { read_text(bad); });
  EXPECT_NE(err.find(bad + ": column \"text\", row group 0: a page's CRC is"), std::string::npos) << err;
  EXPECT_NE(err.find("not the 00003039 its header gives"), std::string::npos) << err;
}

TEST(Parquet, CorruptFilesAreClearErrors) {
  TempDir dir;
  const std::string body = pq::optional_strings_v1(kValues);
  const std::string good = text_file(pq::data_page_v1(5, body));
  ASSERT_EQ(read_text(write(dir, "good.parquet", good)), kValues);
  std::string wrong_size = text_file(pq::data_page_v1(5, body, {.uncompressed_size = int32_t(body.size()) + 1}));
  std::string footer_too_long = good;
  footer_too_long.replace(footer_too_long.size() - 8, 4, pq::le32(uint32_t(good.size())));
  std::string corrupt_footer = good;  // its first field header names a type that does not exist
  uint32_t footer_bytes;
  std::memcpy(&footer_bytes, good.data() + good.size() - 8, 4);
  corrupt_footer[good.size() - 8 - footer_bytes] = '\x0f';
  std::string not_parquet = good;
  not_parquet[1] = 'X';
  const std::vector<std::pair<std::string, std::string>> cases = {
      {good.substr(0, good.size() - 3), "it does not begin and end with \"PAR1\""},
      {good.substr(0, 10), "shorter than a Parquet file's frame"},
      {not_parquet, "it does not begin and end with \"PAR1\""},
      {footer_too_long, "its footer of"},
      {corrupt_footer, "the footer is corrupt: FileMetaData.version has Thrift type 15, not 5"},
      {wrong_size, "column \"text\", row group 0: an uncompressed page holds"},
      {pq::parquet_file(pq::text_schema(), {{5, {{{"text"}, 5, pq::data_page_v1(5, body), 0}}}}, nullptr, 7),
       "the row groups hold 5 rows, but the footer says 7"},
      {pq::parquet_file(pq::text_schema(), {{4, {{{"text"}, 5, pq::data_page_v1(5, body), 0}}}}),
       "the column chunk holds 5 values for the row group's 4 rows"},
      {text_file(pq::data_page_v1(4, body), 5, 5), "the column chunk's pages end after 4 of its 5 values"},
      {text_file(pq::data_page_v1(6, body), 5, 5), "the column chunk's pages hold more than its 5 values"},
      {text_file(pq::data_page_v1(5, body.substr(0, body.size() - 2))), "PLAIN data needs"},
      {text_file(pq::data_page_v1(5, pq::le32(100) + body)), "levels are 100 bytes long, past its end"},
      {text_file(pq::data_page_v1(5, body, {.encoding = 8})), "has no dictionary page"},
      {text_file(pq::data_page_v1(5, body, {.encoding = 9})), "the value encoding BYTE_STREAM_SPLIT is not one"},
      {text_file(pq::data_page_v1(5, body, {.encoding = 42})), "the value encoding unknown (42) is not one"},
      {pq::parquet_file(pq::text_schema(), {{5, {{{"text"}, 5, pq::data_page_v1(5, body), 3}}}}),
       "the compression codec LZO is not one tokamak reads"},
      {pq::parquet_file(pq::text_schema(), {{5, {{{"other"}, 5, pq::data_page_v1(5, body), 0}}}}),
       "the column chunk is \"other\", where the schema has \"text\""},
  };
  for (size_t i = 0; i < cases.size(); i++) {
    SCOPED_TRACE(cases[i].second);
    const std::string path = write(dir, "case" + std::to_string(i) + ".parquet", cases[i].first);
    const std::string err = error_of([&] { read_text(path); });
    EXPECT_EQ(err.find(path), 0u) << err;
    EXPECT_NE(err.find(cases[i].second), std::string::npos) << err;
  }
}

TEST(Parquet, EncryptedFilesAreRefused) {
  TempDir dir;
  std::string encrypted_footer = text_file(pq::data_page_v1(5, pq::optional_strings_v1(kValues)));
  encrypted_footer.replace(encrypted_footer.size() - 4, 4, "PARE");
  const std::string a = write(dir, "a.parquet", encrypted_footer);
  EXPECT_EQ(error_of([&] { ParquetFile f(a); }),
            a + " is an encrypted Parquet file (its footer is encrypted): tokamak does not read encrypted files");
  // FileMetaData.encryption_algorithm (8): an EncryptionAlgorithm union.
  const std::string b =
      write(dir, "b.parquet",
            pq::parquet_file(pq::text_schema(), {}, [](pq::Thrift& t) { t.begin(8).begin(1).end().end(); }));
  EXPECT_NE(error_of([&] { ParquetFile f(b); }).find("its columns are encrypted"), std::string::npos);
}

TEST(Parquet, ColumnsOfOtherShapesAreRefusedByName) {
  TempDir dir;
  SchemaElement number;
  number.name = "n";
  number.type = 2;
  number.repetition = 1;
  SchemaElement tags = pq::string_field("tags", 2);
  const std::string path =
      write(dir, "shapes.parquet",
            pq::parquet_file({pq::group("schema", 3, std::nullopt), pq::string_field("text"), number, tags}, {}));
  const ParquetFile file(path);
  EXPECT_EQ(error_of([&] { file.string_column("n"); }),
            path + ": column \"n\" is INT64, not a string column (BYTE_ARRAY, STRING)");
  EXPECT_EQ(
      error_of([&] { file.string_column("tags"); }),
      path + ": column \"tags\" is a repeated (list) field of BYTE_ARRAY, not a string column (BYTE_ARRAY, STRING)");
  EXPECT_EQ(error_of([&] { file.string_column("missing"); }), path + ": there is no column \"missing\"");
  EXPECT_NE(error_of([&] { file.messages_column("text"); }).find("column \"text\" is BYTE_ARRAY, not a list of {role"),
            std::string::npos);
  EXPECT_NE(error_of([&] { file.messages_column("tags"); }).find("is a repeated (list) field of BYTE_ARRAY"),
            std::string::npos);
}

// A messages column in the legacy 2-level form, `rows` rows: optional group messages (LIST) { repeated group
// <repeated_name> { required binary role; optional binary content } }, its levels and values given.
std::string two_level_messages(const std::string& repeated_name, int64_t rows, const std::vector<int>& reps,
                               const std::vector<int>& role_defs, const std::vector<std::string>& roles,
                               const std::vector<int>& content_defs, const std::vector<std::string>& contents) {
  const std::vector<SchemaElement> schema = {pq::group("schema", 1, std::nullopt),
                                             pq::group("messages", 1, 1, parquet::kConvertedList),
                                             pq::group(repeated_name, 2, 2), pq::string_field("role", 0),
                                             pq::string_field("content", 1)};
  auto page = [&](const std::vector<int>& defs, const std::vector<std::string>& values) {
    const std::string r = pq::rle(reps, 1), d = pq::rle(defs, 2);
    return pq::data_page_v1(int32_t(reps.size()),
                            pq::le32(uint32_t(r.size())) + r + pq::le32(uint32_t(d.size())) + d + pq::plain(values));
  };
  const int64_t n = int64_t(reps.size());
  return pq::parquet_file(schema, {{rows,
                                    {{{"messages", repeated_name, "role"}, n, page(role_defs, roles), 0},
                                     {{"messages", repeated_name, "content"}, n, page(content_defs, contents), 0}}}});
}

// Three rows of messages in the legacy 2-level form: a LIST group whose repeated child is the struct itself.
TEST(Parquet, TheTwoLevelListFormReadsAsMessages) {
  TempDir dir;
  for (const std::string repeated_name : {"array", "element"}) {
    SCOPED_TRACE(repeated_name);
    // Row 0: [{user, "hi"}, {assistant, null}]; row 1: null; row 2: [].
    const std::string path = write(dir, repeated_name + ".parquet",
                                   two_level_messages(repeated_name, 3, {0, 1, 0, 0}, {2, 2, 0, 1},
                                                      {"user", "assistant"}, {3, 2, 0, 1}, {"hi"}));
    const ParquetFile file(path);
    const parquet::MessageLists rows = file.read_messages(0, file.messages_column("messages"));
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0], (std::vector<ChatMessage>{{"user", "hi"}, {"assistant", std::nullopt}}));
    EXPECT_EQ(rows[1], std::nullopt);
    EXPECT_EQ(rows[2], std::vector<ChatMessage>{});
  }
}

TEST(Parquet, ListLevelsThatContradictThemselvesAreErrors) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {two_level_messages("array", 1, {0, 1}, {0, 2}, {"user"}, {0, 2}, {}), "a null or empty list continues"},
      {two_level_messages("array", 1, {0, 1}, {1, 2}, {"user"}, {1, 2}, {}), "a null or empty list continues"},
      {two_level_messages("array", 2, {1, 0}, {2, 2}, {"a", "b"}, {2, 2}, {}), "its first level continues a row"},
      {two_level_messages("array", 1, {0, 0}, {2, 2}, {"a", "b"}, {2, 2}, {}), "more rows than the row group's 1"},
      {two_level_messages("array", 3, {0, 0}, {2, 2}, {"a", "b"}, {2, 2}, {}), "hold 2 rows, not the row group's 3"},
      {two_level_messages("array", 2, {0, 0}, {2, 2}, {"a", "b"}, {2, 0}, {}), "disagree on the lists' shape"},
  };
  for (size_t i = 0; i < cases.size(); i++) {
    SCOPED_TRACE(cases[i].second);
    const std::string path = write(dir, "case" + std::to_string(i) + ".parquet", cases[i].first);
    const std::string err = error_of([&] {
      const ParquetFile file(path);
      file.read_messages(0, file.messages_column("messages"));
    });
    EXPECT_EQ(err.find(path + ": column \"messages\", row group 0: "), 0u) << err;
    EXPECT_NE(err.find(cases[i].second), std::string::npos) << err;
  }
}

TEST(Parquet, TheTextColumnsErrorsNameTheFileColumnAndFlag) {
  TempDir dir;
  const std::string path = write(dir, "in.parquet", text_file(pq::data_page_v1(5, pq::optional_strings_v1(kValues))));
  const std::string err = error_of([&] {
    run_document_pipeline<int>(
        find_inputs({path}), {"content", 1}, [](Documents&, int) { return 0; }, [](int&, uint64_t) {});
  });
  EXPECT_EQ(err, path + ": no column \"content\" (the file has: text); name the text column with --text-field");
  const std::string empty = write(dir, "empty.parquet", pq::parquet_file(pq::text_schema(), {}));
  EXPECT_EQ(error_of([&] {
              run_document_pipeline<int>(
                  find_inputs({empty}), {"text", 1}, [](Documents&, int) { return 0; }, [](int&, uint64_t) {});
            }),
            "input " + empty + " holds no rows");
}

TEST(Parquet, PrepareSkipsNullAndEmptyTextsAsEmptyDocuments) {
  TempDir dir;
  const std::string path = write(dir, "in.parquet", text_file(pq::data_page_v1(5, pq::optional_strings_v1(kValues))));
  PrepareOptions o;
  o.inputs = {path};
  o.out_dir = dir.path("out");
  o.progress = false;
  o.val_fraction = 0.0;
  const PrepareSummary s = prepare(testing::ByteTokenizer(), o);
  EXPECT_EQ(s.train.documents, 3u);
  EXPECT_EQ(s.empty_documents, 2u);
  EXPECT_EQ(s.train.tokens, 5u + 15u + 5u + 3u);  // the bytes of "alpha", "δέλτα 🙂", "alpha" and their ends
}

// A chunk cut into runs of one page each, decoded on several threads at once: the runs share the chunk's
// dictionary, decoded once, and give the rows in order.
TEST(Parquet, RunsOfOneChunkDecodeOnManyThreads) {
  const std::string path = std::string(TK_SOURCE_DIR) + "/tests/fixtures/parquet/parquet-rs/text_dictionary_fallback";
  std::vector<parquet::TextRun> runs;
  uint64_t disk = 0;
  parquet::read_text_runs(path + ".parquet", "text", 1, [&](parquet::TextRun&& run, uint64_t bytes) {
    runs.push_back(std::move(run));
    disk += bytes;
  });
  ASSERT_GE(runs.size(), 10u);
  EXPECT_LE(disk, std::filesystem::file_size(path + ".parquet"));
  std::vector<std::vector<std::string>> docs(runs.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++)
    threads.emplace_back([&, t] {
      for (size_t i = size_t(t); i < runs.size(); i += 4) docs[i] = parquet::text_documents(runs[i]);
    });
  for (std::thread& t : threads) t.join();
  std::vector<std::string> got, want;
  for (const auto& d : docs) got.insert(got.end(), d.begin(), d.end());
  const nlohmann::json expected = nlohmann::json::parse(testing::read_text(path + ".expected.json"));
  for (const auto& row : expected["rows"]) want.push_back(row["text"].is_null() ? "" : row["text"].get<std::string>());
  EXPECT_EQ(got, want);
}

// Every truncation and a byte flip at every position of a small real file: values or a tk::Error, never a crash.
TEST(Parquet, TruncatedAndFlippedFilesEndInValuesOrClearErrors) {
  TempDir dir;
  const std::string source = std::string(TK_SOURCE_DIR) + "/tests/fuzz/corpus/parquet_fuzz";
  size_t files = 0, refused = 0;
  for (const auto& e : std::filesystem::directory_iterator(source)) {
    const std::string bytes = testing::read_text(e.path().string());
    files++;
    auto attempt = [&](const std::string& mutated) {
      const std::string path = write(dir, "m.parquet", mutated);
      try {
        const ParquetFile file(path);
        for (const std::string& name : file.column_names()) {
          for (size_t g = 0; g < file.row_groups(); g++) {
            try {
              file.read_strings(g, file.string_column(name));
            } catch (const Error&) {
            }
            try {
              file.read_messages(g, file.messages_column(name));
            } catch (const Error&) {
            }
          }
        }
      } catch (const Error& err) {
        refused++;
        EXPECT_EQ(std::string(err.what()).find(path), 0u) << err.what();
      }
    };
    for (size_t n = 0; n < bytes.size(); n += 7) attempt(bytes.substr(0, n));
    for (size_t i = 0; i < bytes.size(); i += 5) {
      std::string flipped = bytes;
      flipped[i] = char(flipped[i] ^ 0x5a);
      attempt(flipped);
    }
  }
  EXPECT_GE(files, 6u);
  EXPECT_GT(refused, 100u);
}

TEST(ParquetEncodings, RleHybridRunsAndBitPacking) {
  // A bit-packed run of 8 values of 3 bits (0..7), then an RLE run of five 5s.
  const std::string bytes = std::string("\x03\x88\xc6\xfa\x0a\x05", 6);
  std::vector<uint32_t> out(13);
  parquet::decode_rle_hybrid(bytes, 3, 13, 7, out.data());
  EXPECT_EQ(out, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 5, 5, 5, 5, 5}));
  // Only as many values as asked for are read: a bit-packed run may end early in its last group.
  std::vector<uint32_t> few(3);
  parquet::decode_rle_hybrid(bytes.substr(0, 3), 3, 3, 7, few.data());
  EXPECT_EQ(few, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_NE(error_of([&] { parquet::decode_rle_hybrid(bytes, 3, 14, 7, out.data()); }).find("ends after 13 of its 14"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parquet::decode_rle_hybrid(bytes, 3, 13, 4, out.data()); }).find("beyond its maximum 4"),
            std::string::npos);
  std::vector<uint8_t> zeros(1000);
  parquet::decode_rle_hybrid(std::string("\xd0\x0f", 2), 0, 1000, 0, zeros.data());  // width 0: a run of 1000 zeros
  EXPECT_EQ(zeros, std::vector<uint8_t>(1000, 0));
}

TEST(ParquetEncodings, DeltaBinaryPackedAsTheFormatDefinesIt) {
  // The format's example: 1 2 3 4 5 is block size 128, 4 miniblocks, 5 values, first value 1; then a block of
  // minimum delta 1 and four miniblocks of width 0.
  const std::string bytes = std::string("\x80\x01\x04\x05\x02\x02\x00\x00\x00\x00", 10);
  std::vector<int32_t> out;
  EXPECT_EQ(parquet::decode_delta_binary_packed(bytes, 5, out), bytes.size());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  // 7 5 3 1 2 3 4 5: minimum delta -2, deltas above it 0 0 0 3 3 3 3 in one miniblock of width 2 (32 values, 8
  // bytes: 0b11000000, 0b00111111, then padding).
  const std::string second =
      std::string("\x80\x01\x04\x08\x0e\x03\x02\x00\x00\x00", 10) + std::string("\xc0\x3f\x00\x00\x00\x00\x00\x00", 8);
  out.clear();
  EXPECT_EQ(parquet::decode_delta_binary_packed(second, 8, out), second.size());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 5, 3, 1, 2, 3, 4, 5}));
  EXPECT_NE(error_of([&] { parquet::decode_delta_binary_packed(bytes, 6, out); }).find("of 5 values where 6"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parquet::decode_delta_binary_packed(bytes.substr(0, 4), 5, out); }).find("ends early"),
            std::string::npos);
}

TEST(ParquetEncodings, DeltaStringsAndTheirLimits) {
  // DELTA_BYTE_ARRAY of "tokamak", "token", "tokens": prefixes 0 3 5, suffixes "tokamak" "en" "s".
  auto dbp = [](std::vector<int> v) {  // block 128, one miniblock of 8 bits holding each delta above the minimum
    std::string s = "\x80\x01\x01" + std::string(1, char(v.size())) + std::string(1, char(v[0] * 2));
    int min = 1000;
    for (size_t i = 1; i < v.size(); i++) min = std::min(min, v[i] - v[i - 1]);
    if (v.size() == 1) return s;
    s += char(min < 0 ? -2 * min - 1 : 2 * min);
    s += '\x08';
    std::string body(128, '\0');
    for (size_t i = 1; i < v.size(); i++) body[i - 1] = char(v[i] - v[i - 1] - min);
    return s + body;
  };
  const std::string bytes = dbp({0, 3, 5}) + dbp({7, 2, 1}) + "tokamak" + "en" + "s";
  parquet::ByteArrays out;
  parquet::decode_delta_byte_arrays(bytes, 3, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], "tokamak");
  EXPECT_EQ(out[1], "token");
  EXPECT_EQ(out[2], "tokens");
  parquet::ByteArrays limited;
  limited.limit = 10;
  EXPECT_NE(error_of([&] { parquet::decode_delta_byte_arrays(bytes, 3, limited); }).find("more than a page may"),
            std::string::npos);
  const std::string bad_prefix = dbp({0, 9, 5}) + dbp({7, 2, 1}) + "tokamak" + "en" + "s";
  parquet::ByteArrays again;
  EXPECT_NE(error_of([&] {
              parquet::decode_delta_byte_arrays(bad_prefix, 3, again);
            }).find("a DELTA_BYTE_ARRAY prefix of 9 bytes from a value of 7"),
            std::string::npos);
}

}  // namespace
}  // namespace tk
