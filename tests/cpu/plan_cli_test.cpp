// `tokamak plan --gpu NAME` and `--gpus N --zero K` on the built binary: the small presets fit a 16 GB card with a
// setting, an 8B model on a 12 GB card fits with offload or is refused with the reason, a name no card has (or several
// have) is a usage error listing the names, the ZeRO stages print side by side, and a budget on N GPUs chooses the
// stage.
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
// The plans must not depend on this machine's memory (offload's page-locked limit).
const std::string kHost = " --host-memory 64GiB";

struct CliResult {
  int status;
  std::string out, err;
};

class PlanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
  }

  CliResult plan(const std::string& args) const {
    const std::string cmd =
        kTokamak + " plan " + args + " > " + dir_.path("stdout") + " 2> " + dir_.path("stderr");
    const int status = std::system(cmd.c_str());
    return {WEXITSTATUS(status), fs::read_file(dir_.path("stdout")), fs::read_file(dir_.path("stderr"))};
  }

  testing::TempDir dir_;
};

bool has(const std::string& text, const std::string& words) { return text.find(words) != std::string::npos; }

TEST_F(PlanCli, SmallPresetsFitASixteenGigabyteCard) {
  for (const char* model : {"qwen2.5-0.5b", "llama3.2-1b"}) {
    SCOPED_TRACE(model);
    const CliResult r = plan(std::string("--gpu \"RTX 4080\" --model ") + model + " --seq 2048 --json" + kHost);
    ASSERT_EQ(r.status, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["gpu"], "RTX 4080");
    EXPECT_DOUBLE_EQ(j["budget_bytes"].get<double>(), 15.0 * (1ull << 30));  // 1 GiB kept for the display
    const nlohmann::json& chosen = j["chosen"];
    EXPECT_TRUE(chosen["fits"].get<bool>());
    EXPECT_LE(chosen["total_bytes"].get<double>(), 15.0 * (1ull << 30));
    EXPECT_GT(chosen["predicted_tokens_per_s"].get<double>(), 0);
    EXPECT_EQ(chosen["precision"].get<std::string>().rfind("fp8", 0), 0u) << chosen["precision"];  // Ada has FP8
  }
  const CliResult text = plan("--gpu \"rtx 4080\" --model llama3.2-1b --seq 2048" + kHost);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(has(text.out, "RTX 4080: 16 GiB, 716.8 GB/s, 97.5 TFLOP/s bf16, 194.9 TFLOP/s FP8")) << text.out;
  EXPECT_TRUE(has(text.out, "predicted: ")) << text.out;
  EXPECT_TRUE(has(text.out, "the first bounds it")) << text.out;
  EXPECT_TRUE(has(text.out, "(budget 15.00 GiB: 16 GiB less 1.00 GiB for the display and driver, docs/plan.md)"))
      << text.out;
}

TEST_F(PlanCli, AnEightBillionModelOnATwelveGigabyteCardFitsWithOffloadOrIsRefused) {
  const CliResult r = plan("--gpu \"RTX 3060 12GB\" --model llama3.1-8b --seq 2048 --batch 1 --json" + kHost);
  if (r.status == 0) {
    const nlohmann::json chosen = nlohmann::json::parse(r.out)["chosen"];
    EXPECT_TRUE(chosen["fits"].get<bool>());
    EXPECT_NE(chosen["offload"], "none");
  } else {
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_TRUE(has(r.err, "llama3.1-8b does not fit in 11.00 GiB")) << r.err;
    EXPECT_TRUE(has(r.err, "is the largest part")) << r.err;
  }
}

TEST_F(PlanCli, UnknownAndAmbiguousCardsAreUsageErrors) {
  CliResult r = plan("--gpu \"RTX 9999\"");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(has(r.err, "error: --gpu \"RTX 9999\" is not a GPU tokamak knows; the GPUs are ")) << r.err;
  EXPECT_TRUE(has(r.err, "\"RTX 4080\"")) << r.err;
  r = plan("--gpu h100");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(has(r.err, "names several GPUs: \"H100 NVL\", \"H100 PCIe\", \"H100 SXM\"")) << r.err;
  r = plan("--precision auto --fp8");
  EXPECT_EQ(r.status, 2) << r.err;
}

// "RTX 4070" is a card of its own (12 GB), not the RTX 4070 Ti SUPER (16 GB) its name begins; a name that only
// begins a card's is refused, naming it; --help lists every card.
TEST_F(PlanCli, ACardIsNamedWholeAndHelpListsThem) {
  CliResult r = plan("--gpu \"RTX 4070\" --model qwen2.5-0.5b --seq 2048 --json" + kHost);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gpu"], "RTX 4070");
  EXPECT_DOUBLE_EQ(j["budget_bytes"].get<double>(), 11.0 * (1ull << 30));
  r = plan("--gpu \"RTX 3060\"");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(has(r.err, "error: --gpu \"RTX 3060\" is no GPU's whole name: did you mean \"RTX 3060 12GB\"?")) << r.err;
  r = plan("--help");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* card : {"RTX 5070 Ti", "RTX 5070,", "RTX 4070,", "RTX 3080 Ti", "H100 SXM", "RTX 3060 12GB"})
    EXPECT_TRUE(has(r.out, card)) << card << " in\n" << r.out;
}

// A CPU plan is memory only: the speed model is of GPUs, and no GPU's rate is printed for it.
TEST_F(PlanCli, TheCpuPlanPredictsNoGpuSpeed) {
  CliResult r = plan("--device cpu --model llama3.2-1b --seq 2048" + kHost);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(has(r.out, "TFLOP/s")) << r.out;
  EXPECT_FALSE(has(r.out, "predicted: ")) << r.out;
  EXPECT_TRUE(has(r.out, "no speed prediction on the CPU")) << r.out;
  EXPECT_TRUE(has(r.out, "total in the CPU's memory")) << r.out;
  r = plan("--device cpu --model llama3.2-1b --seq 2048 --json" + kHost);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out)["chosen"]["predicted_tokens_per_s"].is_null()) << r.out;
}

// Offload's transfers run at the card's PCIe link: PCIe 4 for the RTX 4080, 4090 and 3090, 5 for the 5090.
TEST_F(PlanCli, HostBandwidthFollowsTheCardsPcieLink) {
  const std::string offloaded = " --memory-budget 8GiB --model qwen2.5-1.5b --seq 2048 --batch 1" + kHost;
  for (const auto& [card, gbs] : {std::pair{"RTX 4090", "22"}, {"RTX 3090", "22"}, {"RTX 5090", "45"}}) {
    const CliResult r = plan(std::string("--gpu \"") + card + "\"" + offloaded);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(r.out, std::string("offload transfers: bytes at ") + gbs + " GB/s each way")) << card << r.out;
  }
  const CliResult given = plan("--gpu \"RTX 4090\" --host-bandwidth 10" + offloaded);
  EXPECT_TRUE(has(given.out, "offload transfers: bytes at 10 GB/s each way")) << given.out;
}

// --memory-budget without --gpu prints the setting chosen; --all adds every setting tried.
TEST_F(PlanCli, ABudgetPrintsTheChoiceAndAllPrintsTheRest) {
  const std::string args = "--model qwen2.5-0.5b --seq 2048 --memory-budget 16GiB" + kHost;
  CliResult r = plan(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "predicted: ")) << r.out;
  EXPECT_FALSE(has(r.out, "settings tried")) << r.out;
  r = plan(args + " --all");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "settings tried, fastest first")) << r.out;
}

// One GPU's refusals are the search's own message; the host memory named is --host-memory's when it is given.
TEST_F(PlanCli, RefusalsNameWhatStoodInTheWay) {
  CliResult r = plan("--model llama3.1-8b --seq 2048 --memory-budget 1GiB" + kHost);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.err.rfind("error: llama3.1-8b does not fit in 1.00 GiB: the smallest footprint tried is ", 0), 0u)
      << r.err;
  r = plan("--model qwen2.5-1.5b --seq 2048 --batch 1 --memory-budget 8GiB --host-memory 8GiB");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.err, "only by offloading")) << r.err;
  EXPECT_TRUE(has(r.err, "--host-memory allows 8.00 GiB")) << r.err;
  EXPECT_FALSE(has(r.err, "80% of its memory")) << r.err;
}

// Without a budget a plan is the setting as given; one larger than the card it is timed on is said to be.
TEST_F(PlanCli, APlanLargerThanTheCardWarns) {
  CliResult r = plan("--gpus 8 --zero 0 --model llama3.1-8b --seq 2048" + kHost);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.err, "warning: this setting needs ")) << r.err;
  EXPECT_TRUE(has(r.err, " per GPU (ZeRO-0), more than the H100 SXM's 80 GiB")) << r.err;
  r = plan("--gpus 8 --zero 3 --model llama3.2-1b --seq 2048 --batch 1" + kHost);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(has(r.err, "warning")) << r.err;
}

// auto's line predicts the tokens/s the plan's table gives for the same N GPUs.
TEST_F(PlanCli, ThePrecisionLineAgreesWithTheTable) {
  const CliResult r = plan("--gpus 8 --zero 0 --model llama3.2-1b --seq 2048" + kHost);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string predicts = "the plan predicts ", predicted = "\npredicted: ";
  const size_t a = r.out.find(predicts), b = r.out.find(predicted);
  ASSERT_NE(a, std::string::npos) << r.out;
  ASSERT_NE(b, std::string::npos) << r.out;
  const auto word_at = [&](size_t at) { return r.out.substr(at, r.out.find(' ', at) - at); };
  const std::string line = word_at(a + predicts.size()), table = word_at(b + predicted.size());
  EXPECT_EQ(line, table) << r.out;
  EXPECT_TRUE(has(r.out, line + " tokens/s on 8 GPUs (ZeRO 0) against ")) << r.out;
}

TEST_F(PlanCli, ZeroStagesSideBySide) {
  CliResult r = plan("--gpus 8 --model llama3.2-1b --seq 2048" + kHost);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "ZeRO stages side by side (nvlink, the H100 SXM's interconnect, 360 GB/s bus bandwidth)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "memory per GPU")) << r.out;
  // A consumer card's GPUs talk over PCIe unless told otherwise; --interconnect and --link-bandwidth override it.
  r = plan("--gpus 4 --gpu \"RTX 4080\" --model llama3.2-1b --seq 2048" + kHost);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "(pcie4, the RTX 4080's interconnect, 25 GB/s bus bandwidth)")) << r.out;
  r = plan("--gpus 4 --gpu \"RTX 4080\" --interconnect nvlink3 --model llama3.2-1b --seq 2048" + kHost);
  EXPECT_TRUE(has(r.out, "(nvlink3 interconnect, 240 GB/s bus bandwidth)")) << r.out;
  r = plan("--gpus 4 --gpu \"RTX 4080\" --link-bandwidth 12 --model llama3.2-1b --seq 2048" + kHost);
  EXPECT_TRUE(has(r.out, "(given interconnect, 12 GB/s bus bandwidth)")) << r.out;
  r = plan("--gpus 8 --zero 3 --interconnect pcie --model llama3.2-1b --seq 2048 --json" + kHost);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json chosen = nlohmann::json::parse(r.out)["chosen"];
  EXPECT_EQ(chosen["zero_stage"], 3);
  EXPECT_EQ(chosen["world_size"], 8);
  EXPECT_GT(chosen["communication_bytes_per_step"].get<double>(), 0);
}

// --memory-budget with --gpus: the stage train --memory-budget would run (memory_plan.h choose_zero_stage). A 1B model
// at micro-batches of 2 x 64 tokens, four a step, over PCIe: each higher stage moves more and is predicted slower, so
// a budget that holds ZeRO 1's plan as given (and not ZeRO 0's) chooses ZeRO 1; --zero keeps its stage; a budget
// nothing fits is refused naming the smallest footprint.
TEST_F(PlanCli, TheMemoryBudgetChoosesTheZeroStage) {
  const std::string shape = " --gpus 4 --model llama3.2-1b --seq 64 --batch 2 --batch-tokens 2048 --interconnect pcie"
                            " --precision bf16 --host-memory 1";
  CliResult r = plan(shape + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json as_given = nlohmann::json::parse(r.out)["stages"];
  ASSERT_EQ(as_given.size(), 4u);
  const double stage1 = as_given[1]["total_bytes"].get<double>();
  ASSERT_LT(stage1, as_given[0]["total_bytes"].get<double>());
  const std::string budget = " --memory-budget " + std::to_string(int64_t(stage1));
  r = plan(shape + budget + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["chosen"]["zero_stage"], 1) << j["chosen_because"];
  EXPECT_TRUE(j["chosen"]["fits"].get<bool>());
  EXPECT_TRUE(has(j["chosen_because"].get<std::string>(), "ZeRO 0 does not fit")) << j["chosen_because"];
  r = plan(shape + budget);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "chosen for the budget: ZeRO-1 (the fastest predicted: ZeRO 0 does not fit; ZeRO 1 "))
      << r.out;
  r = plan(shape + budget + " --zero 3");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "ZeRO-3 on each of 4 GPUs (--zero 3 as given)")) << r.out;
  r = plan(shape + " --memory-budget 1GiB");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.err, "llama3.2-1b does not fit in 1.00 GiB per GPU: the smallest footprint tried is ")) << r.err;
  EXPECT_TRUE(has(r.err, "ZeRO 3 on 4 GPUs")) << r.err;
}

}  // namespace
}  // namespace tk
