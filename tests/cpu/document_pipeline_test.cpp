// The document pipeline that prepare and train-tokenizer share: documents come back in input order for any
// thread count, each worker is named by its own index, the disk bytes add up to the inputs' sizes, the first
// error in input order is the one reported, and both commands read the same documents from the same files.
#include "data/document_pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/bpe_trainer.h"
#include "data/prepare.h"
#include "data_testing.h"

namespace tk {
namespace {

using testing::ByteTokenizer;
using testing::error_of;
using testing::TempDir;
using testing::write_text;

// Three files of mixed formats, large enough for several batches each (about 1 MiB of text a batch).
std::vector<InputFile> corpus(const TempDir& dir, std::vector<std::string>& documents) {
  for (int f = 0; f < 3; f++) {
    std::string jsonl;
    for (int i = 0; i < 3000; i++) {
      std::string doc = fmt::format("file {} document {} ", f, i) + std::string(size_t(i % 900), 'a' + char(i % 26));
      jsonl += nlohmann::json({{"text", doc}}).dump() + "\n";
      documents.push_back(doc);
    }
    write_text(dir.path(fmt::format("in/{}.jsonl", f)), jsonl);
  }
  write_text(dir.path("in/z.txt"), "a text file is one document\n");
  documents.push_back("a text file is one document\n");
  return find_inputs({dir.path("in")});
}

struct Seen {
  std::vector<std::string> documents;
  uint64_t disk_bytes = 0;
  int batches = 0;
  bool workers_in_range = true;
};

Seen run(const std::vector<InputFile>& inputs, int threads) {
  Seen seen;
  std::atomic<bool> in_range = true;
  run_document_pipeline<Documents>(
      inputs, {"text", threads},
      [&](Documents& documents, int worker) {
        if (worker < 0 || worker >= threads) in_range = false;
        return documents;
      },
      [&](Documents& documents, uint64_t disk_bytes) {
        seen.documents.insert(seen.documents.end(), documents.begin(), documents.end());
        seen.disk_bytes += disk_bytes;
        seen.batches++;
      });
  seen.workers_in_range = in_range;
  return seen;
}

TEST(DocumentPipeline, DocumentsComeBackInInputOrderForAnyThreadCount) {
  TempDir dir;
  std::vector<std::string> documents;
  const std::vector<InputFile> inputs = corpus(dir, documents);
  uint64_t input_bytes = 0;
  for (const InputFile& f : inputs) input_bytes += f.bytes;
  for (int threads : {1, 2, 7}) {
    SCOPED_TRACE(threads);
    const Seen seen = run(inputs, threads);
    EXPECT_EQ(seen.documents, documents);
    EXPECT_EQ(seen.disk_bytes, input_bytes);
    EXPECT_GT(seen.batches, 4);
    EXPECT_TRUE(seen.workers_in_range);
  }
}

TEST(DocumentPipeline, TheFirstErrorInInputOrderIsReported) {
  TempDir dir;
  std::string big;
  for (int i = 0; i < 5000; i++) big += nlohmann::json({{"text", std::string(400, 'x')}}).dump() + "\n";
  write_text(dir.path("a.jsonl"), big + "{\"body\": \"no text field\"}\n");
  write_text(dir.path("b.jsonl"), "not json\n");
  const std::vector<InputFile> inputs = find_inputs({dir.path("a.jsonl"), dir.path("b.jsonl")});
  for (int threads : {1, 4}) {
    const std::string msg = error_of([&] { run(inputs, threads); });
    EXPECT_NE(msg.find("a.jsonl:5001: no \"text\" field"), std::string::npos) << msg;
  }
  write_text(dir.path("c.jsonl"), "{\"text\": \"fine\"}\n");
  const std::string thrown = error_of([&] {
    run_document_pipeline<int>(
        find_inputs({dir.path("c.jsonl")}), {"text", 2}, [](Documents&, int) -> int { fail("the work failed"); },
        [](int&, uint64_t) {});
  });
  EXPECT_EQ(thrown, "the work failed");
}

// train-tokenizer counts the text of exactly the documents prepare writes.
TEST(DocumentPipeline, PrepareAndTrainTokenizerReadTheSameDocuments) {
  TempDir dir;
  std::vector<std::string> documents;
  const std::vector<InputFile> inputs = corpus(dir, documents);
  write_text(dir.path("in/empty.jsonl"), "{\"text\": \"\"}\n");
  PrepareOptions o;
  o.inputs = {dir.path("in")};
  o.out_dir = dir.path("out");
  o.val_fraction = 0;
  o.progress = false;
  const PrepareSummary s = prepare(ByteTokenizer(), o);
  const PieceCounts pieces = count_input_pieces(find_inputs({dir.path("in")}), "text", 3, nullptr);
  EXPECT_EQ(pieces.text_bytes(), s.train.tokens - s.train.documents);  // bytes = tokens less one eot a document
  EXPECT_EQ(s.train.documents, documents.size());
}

}  // namespace
}  // namespace tk
