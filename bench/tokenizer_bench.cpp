// Tokenizer throughput: MB of text encoded per second on a corpus of documents (default: the Brown
// Corpus with GPT-2's tokenizer), with one thread and with every core, documents shared out across
// std::threads. The first pass starts with empty word caches (cold); later passes show the steady
// state that `tokamak prepare` reaches on a large corpus (warm).
// Usage: tokenizer_bench [--tokenizer PATH] [--corpus DIR] [--threads N] [--passes N]
#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "data/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string tokenizer = ".cache/gpt2";
  std::string corpus = ".cache/brown";
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  int passes = 3;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    TK_CHECK(i + 1 < argc, "{} needs a value; usage: tokenizer_bench [--tokenizer PATH] [--corpus DIR] "
                           "[--threads N] [--passes N]", a);
    std::string v = argv[++i];
    if (a == "--tokenizer") o.tokenizer = v;
    else if (a == "--corpus") o.corpus = v;
    else if (a == "--threads") o.threads = std::stoi(v);
    else if (a == "--passes") o.passes = std::stoi(v);
    else tk::fail("unknown option {}", a);
  }
  return o;
}

std::vector<std::string> read_corpus(const std::string& dir) {
  std::vector<std::string> paths;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  TK_CHECK(!paths.empty(), "{} holds no documents", dir);
  std::vector<std::string> docs;
  for (auto& p : paths) docs.push_back(tk::fs::read_file(p));
  return docs;
}

struct Pass {
  double seconds = 0;
  int64_t tokens = 0;
};

// Thread t encodes documents t, t+n, t+2n, ... in every pass, so its word cache warms up on its
// own share. A barrier separates the passes; each pass is timed from its start to its last thread.
std::vector<Pass> run(const tk::Tokenizer& tok, const std::vector<std::string>& docs, int n, int passes) {
  std::vector<Pass> result(passes);
  std::vector<std::vector<int64_t>> tokens(passes, std::vector<int64_t>(n));
  Clock::time_point start;
  std::barrier sync(n, [&]() noexcept { start = Clock::now(); });
  std::barrier done(n);
  auto worker = [&](int t) {
    for (int p = 0; p < passes; p++) {
      sync.arrive_and_wait();
      for (size_t d = t; d < docs.size(); d += n) tokens[p][t] += int64_t(tok.encode(docs[d], false).size());
      done.arrive_and_wait();
      if (t == 0) result[p].seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < n; t++) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  for (int p = 0; p < passes; p++)
    for (int64_t k : tokens[p]) result[p].tokens += k;
  return result;
}

void print_row(const char* label, int threads, double mb, const Pass& p) {
  double rate = mb / p.seconds;
  fmt::print("{:<6} {:>7} {:>9.2f} {:>11.2f} {:>12.2f} {:>10.3f}\n", label, threads, rate, rate / threads,
             p.tokens / p.seconds / 1e6, p.seconds);
}

}  // namespace

int main(int argc, char** argv) try {
  Options o = parse(argc, argv);
  auto t0 = Clock::now();
  auto tok = tk::Tokenizer::load(o.tokenizer);
  double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<std::string> docs = read_corpus(o.corpus);
  double mb = 0;
  for (auto& d : docs) mb += double(d.size()) / 1e6;
  fmt::print("tokenizer {} ({}, vocab {}, loaded in {:.2f} s); corpus {}: {} documents, {:.2f} MB; {} cores\n",
             o.tokenizer, tok->kind(), tok->vocab_size(), load_s, o.corpus, docs.size(), mb,
             std::thread::hardware_concurrency());
  fmt::print("{:<6} {:>7} {:>9} {:>11} {:>12} {:>10}\n", "pass", "threads", "MB/s", "MB/s/core", "Mtokens/s", "seconds");
  std::vector<int> counts = {1};
  if (o.threads > 1) counts.push_back(o.threads);
  for (int n : counts) {
    std::vector<Pass> passes = run(*tok, docs, n, o.passes);
    print_row("cold", n, mb, passes[0]);
    if (passes.size() > 1)
      print_row("warm", n, mb, *std::min_element(passes.begin() + 1, passes.end(),
                                                   [](auto& a, auto& b) { return a.seconds < b.seconds; }));
  }
  return 0;
} catch (const tk::Error& e) {
  fmt::print(stderr, "error: {}\n", e.what());
  return 1;
}
