// DataLoader: batches are the documented windows of the split's token stream, with correct document
// starts; shuffling is deterministic and covers each window once per epoch; a restored position sees
// exactly the same batches; ranks are disjoint; bad or unfinished datasets are refused; the consumer's
// wait is measured; a slow mount is reported once.
#include "data/loader.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "data/prepare.h"
#include "data/shard.h"
#include "data_testing.h"

namespace tk {
namespace {

using testing::ByteTokenizer;
using testing::error_of;
using testing::read_text;
using testing::TempDir;
using testing::write_text;

constexpr int32_t kEot = ByteTokenizer::kEot;

std::vector<int32_t> row_of(const Batch& b, int row) {
  const int32_t* p = b.tokens + size_t(row) * (b.T + 1);
  return std::vector<int32_t>(p, p + b.T + 1);
}

// What doc_starts must be: 0, and every position that follows an end-of-text token.
std::vector<int32_t> starts_after_eot(const std::vector<int32_t>& row) {
  std::vector<int32_t> starts = {0};
  for (size_t t = 1; t < row.size(); t++)
    if (row[t - 1] == kEot) starts.push_back(int32_t(t));
  return starts;
}

class LoaderTest : public ::testing::Test {
 protected:
  // 400 documents of 1 to 300 random bytes (never the eot id), in shards of about 8000 tokens so
  // that windows cross shard boundaries; 10% validation.
  void SetUp() override {
    std::mt19937 rng(5);
    for (int d = 0; d < 400; d++) {
      std::string text(1 + rng() % 300, '\0');
      for (char& c : text) c = char(rng() % 256);
      write_text(dir_.path(fmt::format("in/{:03}.txt", d)), text);
    }
    PrepareOptions o;
    o.inputs = {dir_.path("in")};
    o.out_dir = data_dir();
    o.val_fraction = 0.1;
    o.shard_tokens = 8000;
    o.threads = 2;
    o.progress = false;
    prepare(ByteTokenizer(), o);
  }

  std::string data_dir() const { return dir_.path("data"); }

  LoaderOptions options(int B, int T, bool shuffle = true) const {
    LoaderOptions o;
    o.data_dir = data_dir();
    o.B = B;
    o.T = T;
    o.shuffle = shuffle;
    o.seed = 42;
    return o;
  }

  // The split's tokens, shard after shard, as meta.json lists them.
  std::vector<int32_t> stream(const std::string& split) const {
    std::vector<int32_t> all;
    const nlohmann::json meta = nlohmann::json::parse(read_text(data_dir() + "/meta.json"));
    for (const auto& e : meta["splits"][split]["shards"]) {
      ShardReader r(data_dir() + "/" + e["file"].get<std::string>());
      const size_t at = all.size();
      all.resize(at + r.tokens());
      r.read(0, r.tokens(), all.data() + at);
    }
    return all;
  }

  // Window index by content: windows of random bytes are all distinct.
  std::map<std::vector<int32_t>, uint64_t> windows(const std::string& split, int T) const {
    const std::vector<int32_t> s = stream(split);
    std::map<std::vector<int32_t>, uint64_t> index;
    for (uint64_t w = 0; (w + 1) * T + 1 <= s.size(); w++)
      index.emplace(std::vector<int32_t>(s.begin() + w * T, s.begin() + w * T + T + 1), w);
    return index;
  }

  TempDir dir_;
};

TEST_F(LoaderTest, UnshuffledBatchesAreConsecutiveWindowsFromTheStart) {
  const std::vector<int32_t> s = stream("train");
  const int B = 4, T = 64;
  auto loader = DataLoader::open(options(B, T, false));
  const uint64_t windows = (s.size() - 1) / T;
  EXPECT_EQ(loader->tokens_in_split(), int64_t(s.size()));
  EXPECT_EQ(loader->batches_per_epoch(), int64_t(windows / B));
  EXPECT_EQ(loader->vocab_size(), 257);
  EXPECT_EQ(loader->tokenizer_fingerprint(), ByteTokenizer().fingerprint());
  // Two epochs: validation iterators wrap to the start.
  for (int64_t k = 0; k < 2 * loader->batches_per_epoch(); k++) {
    const Batch& batch = loader->next();
    ASSERT_EQ(batch.B, B);
    ASSERT_EQ(batch.T, T);
    for (int b = 0; b < B; b++) {
      const uint64_t w = uint64_t(k % loader->batches_per_epoch()) * B + b;
      const std::vector<int32_t> row = row_of(batch, b);
      ASSERT_EQ(row, std::vector<int32_t>(s.begin() + w * T, s.begin() + w * T + T + 1)) << "batch " << k << " row " << b;
      ASSERT_EQ(batch.doc_starts[b], starts_after_eot(row)) << "batch " << k << " row " << b;
    }
  }
}

TEST_F(LoaderTest, ShuffledEpochsTakeEveryWindowOnceWithCorrectDocStarts) {
  const int B = 3, T = 50;
  const auto index = windows("train", T);
  auto loader = DataLoader::open(options(B, T));
  const int64_t per_epoch = loader->batches_per_epoch();
  std::vector<std::vector<uint64_t>> orders(2);
  size_t doc_boundaries = 0;
  for (auto& order : orders) {
    for (int64_t k = 0; k < per_epoch; k++) {
      const Batch& batch = loader->next();
      for (int b = 0; b < B; b++) {
        const std::vector<int32_t> row = row_of(batch, b);
        auto it = index.find(row);
        ASSERT_NE(it, index.end()) << "a row that is not a window of the stream";
        order.push_back(it->second);
        ASSERT_EQ(batch.doc_starts[b], starts_after_eot(row));
        doc_boundaries += batch.doc_starts[b].size() - 1;
      }
    }
  }
  for (const auto& order : orders) {
    EXPECT_EQ(std::set<uint64_t>(order.begin(), order.end()).size(), order.size()) << "a window repeats in an epoch";
    EXPECT_EQ(order.size(), size_t(per_epoch * B));
  }
  EXPECT_NE(orders[0], orders[1]) << "every epoch has its own shuffle";
  std::vector<uint64_t> sorted = orders[0];
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(orders[0], sorted) << "not shuffled";
  EXPECT_GT(doc_boundaries, 100u);
}

TEST_F(LoaderTest, TheSeedDecidesTheOrder) {
  auto first_rows = [&](uint64_t seed) {
    LoaderOptions o = options(4, 32);
    o.seed = seed;
    auto loader = DataLoader::open(o);
    std::vector<std::vector<int32_t>> rows;
    for (int k = 0; k < 5; k++) {
      const Batch& b = loader->next();
      for (int r = 0; r < b.B; r++) rows.push_back(row_of(b, r));
    }
    return rows;
  };
  EXPECT_EQ(first_rows(7), first_rows(7));
  EXPECT_NE(first_rows(7), first_rows(8));
}

struct Taken {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<std::vector<int32_t>>> doc_starts;
  bool operator==(const Taken&) const = default;
};

Taken take(DataLoader& loader, int n) {
  Taken t;
  for (int i = 0; i < n; i++) {
    const Batch& b = loader.next();
    t.tokens.emplace_back(b.tokens, b.tokens + size_t(b.B) * (b.T + 1));
    t.doc_starts.push_back(b.doc_starts);
  }
  return t;
}

TEST_F(LoaderTest, RestoredPositionSeesExactlyTheSameBatches) {
  for (int prefetch : {0, 1, 3}) {
    SCOPED_TRACE(fmt::format("prefetch {}", prefetch));
    LoaderOptions o = options(4, 40);
    o.prefetch = prefetch;
    auto a = DataLoader::open(o);
    // Stop a few batches before the epoch's end, so that the batches after the restore cross into
    // the next epoch and its new shuffle.
    const int n = int(a->batches_per_epoch()) - 3, m = 8;
    take(*a, n);
    const nlohmann::json saved = nlohmann::json::parse(a->state().dump());  // as a checkpoint stores it
    const Taken expected = take(*a, m);
    auto b = DataLoader::open(o);
    b->restore(saved);
    EXPECT_EQ(take(*b, m), expected);
    a->restore(saved);  // a loader can also rewind itself
    EXPECT_EQ(take(*a, m), expected);
    EXPECT_EQ(saved["epoch"], 0);
    EXPECT_EQ(a->state()["epoch"], 1);
  }
}

TEST_F(LoaderTest, RestoreRefusesAPositionOfAnotherShape) {
  auto a = DataLoader::open(options(4, 40));
  a->next();
  const nlohmann::json saved = a->state();
  auto b = DataLoader::open(options(8, 40));
  const std::string msg = error_of([&] { b->restore(saved); });
  EXPECT_NE(msg.find("cannot resume the data position: it was saved with B=4 but this run has B=8"), std::string::npos)
      << msg;
}

TEST_F(LoaderTest, RanksTakeDisjointSlicesOfEachStep) {
  const int B = 2, T = 48, world = 3;
  const auto index = windows("train", T);
  std::vector<std::set<uint64_t>> seen(world);
  int64_t per_epoch = 0;
  for (int rank = 0; rank < world; rank++) {
    LoaderOptions o = options(B, T);
    o.rank = rank;
    o.world = world;
    auto loader = DataLoader::open(o);
    per_epoch = loader->batches_per_epoch();
    EXPECT_EQ(per_epoch, int64_t(index.size() / (B * world)));
    for (int64_t k = 0; k < per_epoch; k++) {
      const Batch& batch = loader->next();
      for (int b = 0; b < B; b++) seen[rank].insert(index.at(row_of(batch, b)));
    }
    EXPECT_EQ(seen[rank].size(), size_t(per_epoch * B));
  }
  std::set<uint64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), size_t(per_epoch * B * world)) << "ranks share windows";
}

TEST_F(LoaderTest, UnshuffledRanksInterleaveByStep) {
  const int B = 2, T = 32, world = 2;
  const std::vector<int32_t> s = stream("val");
  LoaderOptions o = options(B, T, false);
  o.split = "val";
  o.rank = 1;
  o.world = world;
  auto loader = DataLoader::open(o);
  for (int k = 0; k < 3; k++) {
    const Batch& batch = loader->next();
    for (int b = 0; b < B; b++) {
      const uint64_t w = uint64_t(k * world + 1) * B + b;
      EXPECT_EQ(row_of(batch, b), std::vector<int32_t>(s.begin() + w * T, s.begin() + w * T + T + 1));
    }
  }
}

TEST_F(LoaderTest, WaitTimeIsMeasured) {
  using Clock = std::chrono::steady_clock;
  LoaderOptions o = options(16, 256);
  o.prefetch = 0;  // every batch is made inside next(): all of it is waiting
  auto sync = DataLoader::open(o);
  EXPECT_EQ(sync->take_wait_seconds(), 0.0);
  const auto start = Clock::now();
  for (int i = 0; i < 5; i++) sync->next();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double waited = sync->take_wait_seconds();
  EXPECT_GT(waited, 0.0);
  EXPECT_LE(waited, elapsed);
  EXPECT_EQ(sync->take_wait_seconds(), 0.0) << "taking the wait resets it";

  o.prefetch = 2;
  auto ahead = DataLoader::open(o);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // time for the producer to fill the ring
  ahead->take_wait_seconds();
  const auto t0 = Clock::now();
  ahead->next();
  const double call = std::chrono::duration<double>(Clock::now() - t0).count();
  const double wait = ahead->take_wait_seconds();
  EXPECT_LE(wait, call);
  EXPECT_LT(wait, 0.025) << "a prefetched batch should be ready";
}

TEST_F(LoaderTest, SlowMountIsReportedOnceWithTheReadRate) {
  setenv("TOKAMAK_FAKE_MOUNT_TYPE", "9p", 1);
  ::testing::internal::CaptureStderr();
  DataLoader::open(options(2, 16));
  LoaderOptions val = options(2, 16);
  val.split = "val";
  DataLoader::open(val);
  const std::string err = ::testing::internal::GetCapturedStderr();
  unsetenv("TOKAMAK_FAKE_MOUNT_TYPE");
  const std::string expected_start = "warning: data in " + data_dir() + " is on a 9p mount (read ";
  const size_t at = err.find(expected_start);
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_NE(err.find(" MB/s): move it to a local disk, e.g. ~/data, for faster loading", at), std::string::npos) << err;
  EXPECT_EQ(err.find(expected_start, at + 1), std::string::npos) << "warned twice: " << err;
}

TEST_F(LoaderTest, LocalDiskIsNotReported) {
  unsetenv("TOKAMAK_FAKE_MOUNT_TYPE");
  ::testing::internal::CaptureStderr();
  DataLoader::open(options(2, 16));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST_F(LoaderTest, UnfinishedOrDamagedDatasetsAreRefused) {
  const std::string dir = data_dir();
  auto refuse = [&](const LoaderOptions& o) { return error_of([&] { DataLoader::open(o); }); };
  const std::string meta = read_text(dir + "/meta.json");

  std::filesystem::remove(dir + "/meta.json");  // as an interrupted prepare leaves it
  EXPECT_NE(refuse(options(2, 16)).find(dir + " has no meta.json: it is not a prepared dataset, or `tokamak prepare` did not finish"),
            std::string::npos);

  write_text(dir + "/meta.json", meta);
  std::filesystem::rename(dir + "/train_000001.bin", dir + "/moved.bin");
  EXPECT_NE(refuse(options(2, 16)).find("cannot open shard " + dir + "/train_000001.bin"), std::string::npos);

  std::filesystem::copy_file(dir + "/train_000000.bin", dir + "/train_000001.bin");
  EXPECT_NE(refuse(options(2, 16)).find("shard " + dir + "/train_000001.bin does not match " + dir + "/meta.json"),
            std::string::npos);

  std::filesystem::remove(dir + "/train_000001.bin");
  std::filesystem::rename(dir + "/moved.bin", dir + "/train_000001.bin");
  std::filesystem::resize_file(dir + "/train_000001.bin", 1000);
  EXPECT_NE(refuse(options(2, 16)).find(dir + "/train_000001.bin is truncated"), std::string::npos);

  write_text(dir + "/meta.json", "{\"format\": \"tokamak-shards\", ");
  EXPECT_NE(refuse(options(2, 16)).find(dir + "/meta.json is not valid JSON"), std::string::npos);
}

TEST_F(LoaderTest, MismatchedTokenizerOrShapeIsRefused) {
  auto refuse = [&](const LoaderOptions& o) { return error_of([&] { DataLoader::open(o); }); };
  LoaderOptions o = options(2, 16);
  o.expect_vocab = 50257;
  EXPECT_NE(refuse(o).find("train_000000.bin was prepared for a vocabulary of 257 tokens, but 50257 are expected"),
            std::string::npos);
  o = options(2, 16);
  o.expect_fingerprint = 1;
  EXPECT_NE(refuse(o).find("train_000000.bin was prepared with another tokenizer"), std::string::npos);
  o = options(2, 1 << 20);
  EXPECT_NE(refuse(o).find("too few for one step"), std::string::npos);
  o = options(2, 16);
  o.rank = 2;
  o.world = 2;
  EXPECT_NE(refuse(o).find("rank 2 is outside world size 2"), std::string::npos);
  o = options(2, 16);
  o.split = "test";
  EXPECT_NE(refuse(o).find("has no split \"test\""), std::string::npos);
}

TEST_F(LoaderTest, EmptyValidationSplitIsAClearError) {
  TempDir dir;
  write_text(dir.path("a.txt"), "some text");
  PrepareOptions p;
  p.inputs = {dir.path("a.txt")};
  p.out_dir = dir.path("data");
  p.val_fraction = 0;
  p.progress = false;
  prepare(ByteTokenizer(), p);
  LoaderOptions o = options(1, 2);
  o.data_dir = dir.path("data");
  o.split = "val";
  const std::string msg = error_of([&] { DataLoader::open(o); });
  EXPECT_NE(msg.find("the val split of " + dir.path("data") + " is empty: prepare it with --val-fraction above 0"),
            std::string::npos)
      << msg;
}

TEST_F(LoaderTest, CorruptTokensSurfaceFromTheProducerThread) {
  // Token 100 of the first train shard becomes 300, outside the vocabulary of 257.
  const std::string shard = data_dir() + "/train_000000.bin";
  std::string bytes = read_text(shard);
  const uint16_t bad = 300;
  std::memcpy(bytes.data() + kShardHeaderBytes + 2 * 100, &bad, 2);
  write_text(shard, bytes);
  auto loader = DataLoader::open(options(1, 64, false));
  loader->next();  // tokens 0..64 are intact
  const std::string msg = error_of([&] { loader->next(); });
  EXPECT_NE(msg.find(shard + " is corrupt: token 100 is 300"), std::string::npos) << msg;
}

TEST_F(LoaderTest, PinnedBuffersWorkInEveryBuild) {
  LoaderOptions o = options(2, 16);
  o.pinned = true;  // cudaHostAlloc in a CUDA build; ordinary memory in the CPU build
  auto loader = DataLoader::open(o);
  const Batch& b = loader->next();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.tokens) % 64, 0u);
}

}  // namespace
}  // namespace tk
