// DataLoader: batches are the documented windows of the split's token stream as inputs and targets, with
// positions and segments that restart at each document; shuffling is deterministic and covers each window once
// per epoch; a restored position sees exactly the same batches; ranks are disjoint; bad or unfinished datasets are
// refused; the consumer's wait is measured; a slow mount is reported once; batches live in the caller's memory.
#include "data/loader.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

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

std::vector<int32_t> array_row(const int32_t* array, const Batch& b, int row) {
  const int32_t* p = array + size_t(row) * b.T;
  return std::vector<int32_t>(p, p + b.T);
}

// The row's window of T+1 tokens: its inputs, then its last target (the targets are the inputs shifted by one).
std::vector<int32_t> row_of(const Batch& b, int row) {
  std::vector<int32_t> window = array_row(b.inputs, b, row), targets = array_row(b.targets, b, row);
  EXPECT_TRUE(std::equal(targets.begin(), targets.end() - 1, window.begin() + 1)) << "row " << row;
  window.push_back(targets.back());
  return window;
}

// What positions and segments must be for a window: with document masking both restart after every end-of-text
// token (a new document begins at every position that follows one); without, positions 0..T-1 and segments 0.
struct Positions {
  std::vector<int32_t> positions, segments;
  bool operator==(const Positions&) const = default;
};
Positions positions_of(const std::vector<int32_t>& window, bool doc_mask) {
  Positions p;
  int32_t position = 0, segment = 0;
  for (size_t t = 0; t + 1 < window.size(); t++, position++) {
    if (doc_mask && t > 0 && window[t - 1] == kEot) {
      position = 0;
      segment++;
    }
    p.positions.push_back(position);
    p.segments.push_back(segment);
  }
  return p;
}
Positions positions_in(const Batch& b, int row) { return {array_row(b.positions, b, row), array_row(b.segments, b, row)}; }

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

  LoaderOptions options(int B, int T, bool shuffle = true, bool doc_mask = false) const {
    LoaderOptions o;
    o.data_dir = data_dir();
    o.B = B;
    o.T = T;
    o.shuffle = shuffle;
    o.doc_mask = doc_mask;
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
      ASSERT_EQ(positions_in(batch, b), positions_of(row, false)) << "batch " << k << " row " << b;
    }
  }
}

TEST_F(LoaderTest, ShuffledEpochsTakeEveryWindowOnceWithDocumentPositions) {
  const int B = 3, T = 50;
  const auto index = windows("train", T);
  auto loader = DataLoader::open(options(B, T, true, true));
  const int64_t per_epoch = loader->batches_per_epoch();
  std::vector<std::vector<uint64_t>> orders(2);
  size_t doc_boundaries = 0;
  for (auto& order : orders) {
    for (int64_t k = 0; k < per_epoch; k++) {
      const Batch& batch = loader->next();
      ASSERT_TRUE(batch.doc_mask);
      for (int b = 0; b < B; b++) {
        const std::vector<int32_t> row = row_of(batch, b);
        auto it = index.find(row);
        ASSERT_NE(it, index.end()) << "a row that is not a window of the stream";
        order.push_back(it->second);
        ASSERT_EQ(positions_in(batch, b), positions_of(row, true));
        doc_boundaries += size_t(batch.segments[(b + 1) * T - 1]);
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

// Every array of n batches, one after the other.
std::vector<int32_t> take(DataLoader& loader, int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; i++) {
    const Batch& b = loader.next();
    for (const int32_t* a : {b.inputs, b.targets, b.positions, b.segments}) t.insert(t.end(), a, a + b.tokens());
  }
  return t;
}

TEST_F(LoaderTest, RestoredPositionSeesExactlyTheSameBatches) {
  for (int prefetch : {0, 1, 3}) {
    SCOPED_TRACE(fmt::format("prefetch {}", prefetch));
    LoaderOptions o = options(4, 40, true, true);
    o.prefetch = prefetch;
    auto a = DataLoader::open(o);
    // Stop a few batches before the epoch's end, so that the batches after the restore cross into
    // the next epoch and its new shuffle.
    const int n = int(a->batches_per_epoch()) - 3, m = 8;
    take(*a, n);
    const nlohmann::json saved = nlohmann::json::parse(a->state().dump());  // as a checkpoint stores it
    const std::vector<int32_t> expected = take(*a, m);
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

// Rank r of N reads one process's batches r, r + N, ... across epochs (their shuffles included), and a position
// saved by N ranks restores on M ranks at the same one-process batch.
TEST_F(LoaderTest, RanksReadOneProcessBatchesInTurnAndResumeAtAnotherWorldSize) {
  const int B = 2, T = 32;
  auto one = DataLoader::open(options(B, T));
  const int64_t total = one->batches_per_epoch() + 7;  // into the second epoch
  std::vector<std::vector<int32_t>> serial;
  for (int64_t k = 0; k < total; k++) serial.push_back(take(*one, 1));
  for (int world : {2, 3}) {
    for (int rank = 0; rank < world; rank++) {
      LoaderOptions o = options(B, T);
      o.rank = rank;
      o.world = world;
      auto loader = DataLoader::open(o);
      for (int64_t k = 0; k * world + rank < total; k++)
        ASSERT_EQ(take(*loader, 1), serial[size_t(k * world + rank)]) << "world " << world << " rank " << rank;
    }
  }
  LoaderOptions o2 = options(B, T), o3 = options(B, T);
  o2.world = 2;
  o2.rank = 1;
  o3.world = 3;
  o3.rank = 2;
  auto two = DataLoader::open(o2);
  take(*two, 3);  // one process's batches 0 .. 5 read by the two ranks
  auto three = DataLoader::open(o3);
  three->restore(nlohmann::json::parse(two->state().dump()));
  EXPECT_EQ(take(*three, 1), serial[2 * 3 + 2]);
  take(*two, 1);  // 8 batches: not a multiple of 3
  const std::string msg = error_of([&] { three->restore(two->state()); });
  EXPECT_NE(msg.find("cannot resume the data position on 3 ranks: it was saved by 2 ranks after 8 batches"),
            std::string::npos)
      << msg;
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
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // time for the producer to fill the ring
  ahead->take_wait_seconds();
  const auto t0 = Clock::now();
  ahead->next();
  const double call = std::chrono::duration<double>(Clock::now() - t0).count();
  const double wait = ahead->take_wait_seconds();
  EXPECT_LE(wait, call);
  EXPECT_LT(wait, 0.025) << "a prefetched batch should be ready";
}

// TOKAMAK_LOADER_DELAY_MS is waited in next() and counted as data wait, even when the prefetch has the batch ready.
TEST_F(LoaderTest, TheDelayOnDemandIsWaitedEvenWhenTheBatchIsReady) {
  LoaderOptions o = options(16, 256);
  o.prefetch = 2;
  setenv("TOKAMAK_LOADER_DELAY_MS", "60", 1);
  auto loader = DataLoader::open(o);
  unsetenv("TOKAMAK_LOADER_DELAY_MS");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the ring is full
  for (int i = 0; i < 2; i++) loader->next();
  EXPECT_GE(loader->take_wait_seconds(), 2 * 0.060);
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

// meta.json may only name shards inside the dataset's directory: a listing that points at a valid
// shard outside it (or at /etc/passwd) is refused before anything is opened.
TEST_F(LoaderTest, ShardNamesLeadingOutOfTheDirectoryAreRefused) {
  const std::string dir = data_dir();
  const std::string meta = read_text(dir + "/meta.json");
  std::filesystem::copy_file(dir + "/train_000000.bin", dir_.path("elsewhere.bin"));
  for (const std::string& name : {std::string("../elsewhere.bin"), dir_.path("elsewhere.bin")}) {
    nlohmann::json m = nlohmann::json::parse(meta);
    m["splits"]["train"]["shards"][0]["file"] = name;
    write_text(dir + "/meta.json", m.dump());
    const std::string msg = error_of([&] { DataLoader::open(options(2, 16)); });
    EXPECT_NE(msg.find(dir + "/meta.json names the file \"" + name + "\""), std::string::npos) << msg;
  }
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
  // Opening a shard checks its tokens (shard_test); reading checks them again, since the mapping is
  // shared with the file. Token 300 of the first train shard becomes 300, outside the vocabulary of 257,
  // after the open, when the producer thread has read at most windows 0 to 2 (it fills three slots).
  const std::string shard = data_dir() + "/train_000000.bin";
  auto loader = DataLoader::open(options(1, 64, false));
  ASSERT_GT(std::filesystem::file_size(shard), kShardHeaderBytes + 2 * 320);
  std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(std::streamoff(kShardHeaderBytes + 2 * 300));
  const uint16_t bad = 300;
  file.write(reinterpret_cast<const char*>(&bad), 2);
  file.close();
  for (int i = 0; i < 4; i++) loader->next();  // windows 0 to 3: tokens 0 to 256 are intact
  const std::string msg = error_of([&] { loader->next(); });
  EXPECT_NE(msg.find(shard + " is corrupt: token 300 is 300"), std::string::npos) << msg;
}

// The trainer hands the loader its backend's host memory (page-locked on CUDA): every array of every batch lies in
// what the caller's allocator gave, 64-byte aligned, and all of it is given back when the loader closes.
TEST_F(LoaderTest, BatchesLiveInTheCallersMemory) {
  std::map<const char*, size_t> held;
  LoaderOptions o = options(2, 16);
  o.prefetch = 2;
  o.allocate = [&](size_t bytes) {
    void* p = std::aligned_alloc(256, bytes);
    held[static_cast<const char*>(p)] = bytes;
    return p;
  };
  o.release = [&](void* p) {
    EXPECT_EQ(held.erase(static_cast<const char*>(p)), 1u);
    std::free(p);
  };
  auto inside = [&](const int32_t* a, int64_t n) {
    const char* p = reinterpret_cast<const char*>(a);
    auto it = held.upper_bound(p);
    return it != held.begin() && p + n * sizeof(int32_t) <= std::prev(it)->first + std::prev(it)->second;
  };
  {
    auto loader = DataLoader::open(o);
    EXPECT_EQ(held.size(), 3u) << "one buffer for each of the prefetch + 1 batches";
    for (int k = 0; k < 5; k++) {
      const Batch& b = loader->next();
      for (const int32_t* a : {b.inputs, b.targets, b.positions, b.segments}) {
        EXPECT_TRUE(inside(a, b.tokens()));
        EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
      }
    }
  }
  EXPECT_TRUE(held.empty()) << "every buffer is released";
  auto plain = DataLoader::open(options(2, 16));  // ordinary memory when no allocator is given
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plain->next().inputs) % 64, 0u);
}

}  // namespace
}  // namespace tk
