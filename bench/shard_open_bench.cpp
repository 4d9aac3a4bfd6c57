// What opening a token shard costs, and the share of it that the version 2 data checksum (XXH3-64 over the tokens,
// offsets and loss mask) takes: a shard of N tokens written once, then opened `repeats` times from the page cache.
// Usage: shard_open_bench [tokens=100000000] [repeats=5] [dir=/tmp]
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "data/shard.h"

int main(int argc, char** argv) {
  const uint64_t tokens = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100'000'000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::string dir = argc > 3 ? argv[3] : "/tmp";
  const std::string path = dir + "/shard_open_bench.bin";
  {
    tk::ShardWriter w(path, 50257, 50256, 1);
    std::mt19937 rng(1);
    std::vector<int32_t> doc(1000);
    std::vector<uint8_t> trained(doc.size() + 1);
    for (uint64_t written = 0; written < tokens; written += doc.size() + 1) {
      for (size_t i = 0; i < doc.size(); i++) doc[i] = int32_t(rng() % 50256), trained[i] = (i / 100) % 2;
      w.add_document(doc, trained);
    }
    w.finish();
  }
  const uint64_t bytes = std::filesystem::file_size(path);
  double open_best = 1e9, hash_best = 1e9;
  for (int r = 0; r < repeats; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    tk::ShardReader reader(path);
    const auto t1 = std::chrono::steady_clock::now();
    open_best = std::min(open_best, std::chrono::duration<double>(t1 - t0).count());
    // The checksum alone, over the same mapped bytes the open just read.
    std::string data(bytes - 64, '\0');
    FILE* f = std::fopen(path.c_str(), "rb");
    std::fseek(f, 64, SEEK_SET);
    if (std::fread(data.data(), 1, data.size(), f) != data.size()) return 1;
    std::fclose(f);
    const auto h0 = std::chrono::steady_clock::now();
    volatile uint64_t h = XXH3_64bits(data.data(), data.size());
    (void)h;
    hash_best = std::min(hash_best, std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count());
  }
  fmt::print("shard of {} tokens, {:.1f} MB: open (every check) {:.3f} s, of which the XXH3 data checksum {:.3f} s "
             "({:.1f} GB/s) — best of {}\n",
             tokens, double(bytes) / 1e6, open_best, hash_best, double(bytes) / 1e9 / hash_best, repeats);
  std::filesystem::remove(path);
  return 0;
}
