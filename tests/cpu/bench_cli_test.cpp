// `tokamak bench` on the CPU backend, on the built binary: a step of several micro-batches (--batch-tokens) computes
// what one micro-batch of all their rows computes, a recompute policy or the optimizer's offload what the plain step
// computes; the JSON row names the setting; --memory-budget needs the CUDA backend and --batch-tokens a multiple of
// the micro-batch, each said by name.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/fs.h"
#include "data_testing.h"

namespace tk {
namespace {

const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";

struct BenchRun {
  int status;
  std::string err;
  nlohmann::json row;
};

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
  }

  // The tiny model at 32 tokens a row, two timed steps after one warm-up: the last step's loss in the row.
  BenchRun bench(const std::string& args) const {
    const std::string cmd = kTokamak + " bench --device cpu --model tiny --seq 32 --steps 2 --warmup 1 --json " + args +
                            " > " + dir_.path("stdout") + " 2> " + dir_.path("stderr");
    const int status = std::system(cmd.c_str());
    BenchRun r{WEXITSTATUS(status), fs::read_file(dir_.path("stderr")), nullptr};
    if (r.status == 0) r.row = nlohmann::json::parse(fs::read_file(dir_.path("stdout")));
    return r;
  }

  static double loss(const BenchRun& r) { return r.row.at("loss").get<double>(); }

  testing::TempDir dir_;
};

TEST_F(BenchCli, AccumulatedMicroBatchesComputeTheWholeBatch) {
  const BenchRun whole = bench("--batch 4"), halves = bench("--batch 2 --batch-tokens 128"),
                 quarters = bench("--batch 1 --batch-tokens 128");
  for (const BenchRun* r : {&whole, &halves, &quarters}) ASSERT_EQ(r->status, 0) << r->err;
  EXPECT_EQ(whole.row.at("accumulation"), 1);
  EXPECT_EQ(halves.row.at("accumulation"), 2);
  EXPECT_EQ(halves.row.at("micro_batch"), 2);
  EXPECT_EQ(quarters.row.at("accumulation"), 4);
  for (const BenchRun* r : {&whole, &halves, &quarters}) EXPECT_EQ(r->row.at("tokens_per_step"), 128);
  EXPECT_EQ(halves.row.at("engine"), "tokamak, 2 x 2 rows");
  EXPECT_NEAR(loss(halves), loss(whole), 1e-5 * loss(whole));
  EXPECT_NEAR(loss(quarters), loss(whole), 1e-5 * loss(whole));
  // Other tokens give another loss at this precision, so the comparisons above can fail.
  const BenchRun other = bench("--batch 4 --seed 2");
  ASSERT_EQ(other.status, 0) << other.err;
  EXPECT_GT(std::abs(loss(other) - loss(whole)), 1e-4 * loss(whole));
}

TEST_F(BenchCli, RecomputeAndOffloadComputeThePlainStep) {
  const BenchRun plain = bench("--batch 2");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.row.at("recompute"), "none");
  EXPECT_EQ(plain.row.at("offload"), "none");
  for (const char* args : {"--batch 2 --recompute block", "--batch 2 --recompute norm,swiglu,attention",
                           "--batch 2 --offload optimizer", "--batch 2 --offload optimizer,gradients"}) {
    SCOPED_TRACE(args);
    const BenchRun r = bench(args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NEAR(loss(r), loss(plain), 1e-6 * loss(plain));
    EXPECT_NE(r.row.at("engine").get<std::string>().find(std::string(args).find("recompute") != std::string::npos
                                                             ? ", recompute "
                                                             : ", offload "),
              std::string::npos)
        << r.row.dump();
  }
}

TEST_F(BenchCli, RefusesWhatItCannotRun) {
  const BenchRun budget = bench("--memory-budget 1GiB");
  EXPECT_EQ(budget.status, 1);
  EXPECT_NE(budget.err.find("--memory-budget plans device memory: it needs the CUDA backend"), std::string::npos)
      << budget.err;
  const BenchRun ragged = bench("--batch 3 --batch-tokens 100");
  EXPECT_EQ(ragged.status, 2) << "a usage error, as train's";
  EXPECT_NE(ragged.err.find("--batch-tokens 100 is not a multiple of the micro-batch's 96 tokens"), std::string::npos)
      << ragged.err;
  // 2^37 tokens a step at 64 a micro-batch: 2^31 micro-batches, a count no int holds (it wrapped to -2^31).
  const BenchRun huge = bench("--batch 2 --batch-tokens 137438953472");
  EXPECT_EQ(huge.status, 2) << "a usage error, as train's";
  EXPECT_NE(huge.err.find("--batch-tokens 137438953472 is 2147483648 micro-batches of 64 tokens"),
            std::string::npos)
      << huge.err;
  // A setting larger than the machine is refused before anything is allocated, as train refuses it (it ran for
  // seconds and then failed to allocate).
  const std::string cmd = kTokamak + " bench --device cpu --model llama3.1-8b --batch 64 --seq 8192 > " +
                          dir_.path("big.out") + " 2> " + dir_.path("big.err");
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 1);
  EXPECT_NE(fs::read_file(dir_.path("big.err")).find("does not fit this machine"), std::string::npos)
      << fs::read_file(dir_.path("big.err"));
  EXPECT_EQ(bench("--recompute everything").status, 2);
  EXPECT_EQ(bench("--offload gradients").status, 2);
}

}  // namespace
}  // namespace tk
