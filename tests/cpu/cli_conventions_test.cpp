// The command line's conventions, on the built binary: usage errors (parse errors, missing required options,
// invalid values, unknown commands, a mistyped option named with the one meant) exit 2 with an "error:" line, a
// command that ran and failed exits 1; --help shows a flag's real default, every default, and only the options that
// apply; train, profile, bench and plan share their defaults, or say why not.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/fs.h"
#include "data_testing.h"

namespace tk {
namespace {

const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";

struct CliResult {
  int status;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
  }

  CliResult tokamak(const std::string& args) const {
    const std::string cmd = kTokamak + " " + args + " > " + dir_.path("stdout") + " 2> " + dir_.path("stderr");
    const int status = std::system(cmd.c_str());
    return {WEXITSTATUS(status), fs::read_file(dir_.path("stdout")), fs::read_file(dir_.path("stderr"))};
  }

  // A usage error: exit 2, and stderr opens with "error: " and the words expected.
  void expect_usage_error(const std::string& args, const std::string& words) const {
    SCOPED_TRACE(args);
    const CliResult r = tokamak(args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
  }

  std::string help(const std::string& command) const {
    const CliResult r = tokamak(command + " --help");
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
  }

  testing::TempDir dir_;
};

bool has(const std::string& text, const std::string& words) { return text.find(words) != std::string::npos; }

TEST_F(Cli, UsageErrorsExit2WithAnErrorLine) {
  expect_usage_error("", "a command is required");
  expect_usage_error("trian --model tiny", "unknown command 'trian'; the commands are ");
  expect_usage_error("train --bogus", "the following argument was not expected: --bogus");
  // A mistyped option is named with the one it most likely means.
  expect_usage_error("train --batch_size 4", "--batch_size is not an option of 'tokamak train': did you mean --batch? "
                                             "(the following arguments were not expected: 4 --batch_size)");
  expect_usage_error("train --bacth 4", "did you mean --batch?");
  expect_usage_error("train --Steps 3", "did you mean --steps?");
  expect_usage_error("plan --memory_budget 16GiB", "did you mean --memory-budget?");
  expect_usage_error("train --lr-warmup 10", "did you mean --lr or --warmup?");
  expect_usage_error("train --bogus", "Run 'tokamak train --help' for its options.");
  expect_usage_error("train --batch eight", "--batch: eight is not a number");
  expect_usage_error("train --batch 0", "--batch: must be at least 1, not 0");
  expect_usage_error("train --schedule sideways", "--schedule: sideways not in {cosine,linear,wsd}");
  expect_usage_error("train --recompute everything", "unknown recompute policy 'everything'");
  expect_usage_error("train --offload disk", "--offload must be none, optimizer or optimizer,gradients");
  expect_usage_error("bench --moments fp4", "--moments: fp4 not in {f32,bf16,int8}");
  expect_usage_error("plan --device tpu", "--device: tpu not in {auto,cpu,cuda}");
  expect_usage_error("tokenize", "--tokenizer is required");
  expect_usage_error("train --model tiny", "no dataset given: pass --data DIR");
}

TEST_F(Cli, RuntimeFailuresExit1) {
  const CliResult r = tokamak("train --data " + dir_.path("nothing-here") + " --device cpu --out " + dir_.path("run"));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
}

TEST_F(Cli, HelpShowsWhatIsOnByDefault) {
  for (const char* command : {"train", "bench", "profile"}) {
    SCOPED_TRACE(command);
    const std::string h = help(command);
    EXPECT_TRUE(has(h, "--gemm-tuning,--no-gemm-tuning (default: on)")) << h;
    EXPECT_FALSE(has(h, "{false}")) << h;
  }
  EXPECT_TRUE(has(help("train"), "--doc-mask  ")) << "a flag off by default shows no default";
}

TEST_F(Cli, EveryDefaultIsShown) {
  EXPECT_TRUE(has(help("bench"), "--model TEXT=tiny"));
  EXPECT_TRUE(has(help("train"), "--gpus INT:POSITIVE=1"));
  EXPECT_TRUE(has(help("train"), "--logits-chunk INT:INT in [0 - 65536]=0"));
  EXPECT_TRUE(has(help("train"), "--vocab-size INT"));
  EXPECT_TRUE(has(help("train"), "(default: the data's tokenizer's, padded to a multiple of 64"));
}

TEST_F(Cli, ProfileListsOnlyTheOptionsThatApply) {
  const std::string h = help("profile");
  for (const char* shared : {"--model", "--data", "--batch", "--seq", "--fp8", "--recompute", "--moments", "--seed"})
    EXPECT_TRUE(has(h, std::string("\n  ") + shared + " ")) << shared << "\n" << h;
  for (const char* run_only : {"--save-every", "--keep-checkpoints", "--eval-every", "--eval-tokens", "--steps ",
                               "--lr ", "--warmup ", "--schedule", "--resume", "--overwrite", "--config"})
    EXPECT_FALSE(has(h, run_only)) << run_only << "\n" << h;
  EXPECT_TRUE(has(h, "--warmup-steps"));
  const CliResult r = tokamak("profile --save-every 5");
  EXPECT_EQ(r.status, 2) << r.err;
}

// The model, batch and sequence length are the same in the four commands that take them; plan's device is cuda,
// not auto, and says why.
TEST_F(Cli, DefaultsAgreeAcrossCommandsOrSayWhy) {
  for (const char* command : {"train", "profile", "bench", "plan"}) {
    SCOPED_TRACE(command);
    const std::string h = help(command);
    EXPECT_TRUE(has(h, "--model TEXT=tiny")) << h;
    EXPECT_TRUE(has(h, "--batch INT=8")) << h;
    EXPECT_TRUE(has(h, "--seq INT=256")) << h;
    if (std::string(command) != "plan") EXPECT_TRUE(has(h, "--device TEXT:{auto,cpu,cuda}=auto")) << h;
  }
  const std::string plan = help("plan");
  EXPECT_TRUE(has(plan, "--device TEXT:{auto,cpu,cuda}=cuda")) << plan;
  EXPECT_TRUE(has(plan, "not train's auto: plans are for GPU runs")) << plan;
}

// The step's flags are one set with one set of checks in train, profile, bench and plan; a flag a command does not
// use is refused by name there; a value no run can have is refused before a run directory is made.
TEST_F(Cli, StepFlagsAreCheckedAlikeEverywhere) {
  for (const char* command : {"train", "profile", "bench", "plan"}) {
    SCOPED_TRACE(command);
    expect_usage_error(std::string(command) + " --batch 0", "--batch: must be at least 1, not 0");
    expect_usage_error(std::string(command) + " --logits-chunk 65537", "--logits-chunk");
    expect_usage_error(std::string(command) + " --fp8-margin 9", "--fp8-margin");
    expect_usage_error(std::string(command) + " --offload disk", "--offload must be none, optimizer or optimizer,gradients");
    expect_usage_error(std::string(command) + " --peak-tflops nan --data d",
                       std::string(command) == "bench" || std::string(command) == "plan" ? "does not apply"
                                                                                          : "--peak-tflops must be a finite number");
  }
  expect_usage_error("bench --data somewhere", "--data does not apply to `tokamak bench`");
  expect_usage_error("bench --zero 1", "--zero does not apply to `tokamak bench`");
  expect_usage_error("plan --seed 3", "--seed does not apply to `tokamak plan`");
  expect_usage_error("plan --no-gemm-tuning", "--gemm-tuning does not apply to `tokamak plan`");
  EXPECT_FALSE(has(help("bench"), "--data")) << "a refused flag is not offered";
  const CliResult r = tokamak("bench --device cpu --model tiny --seq 16 --batch 2 --steps 1 --warmup 0 --logits-chunk 0");
  EXPECT_EQ(r.status, 0) << "0 is the default logits chunk, as train's: " << r.err;
}

TEST_F(Cli, NonFiniteRunOptionsAreUsageErrorsBeforeTheRunDirectoryExists) {
  for (const std::string flag : {"--grad-clip", "--adam-eps", "--weight-decay", "--lr", "--beta1"}) {
    SCOPED_TRACE(flag);
    const std::string out = dir_.path("run" + flag);
    expect_usage_error("train --data " + dir_.path("data") + " --out " + out + " " + flag + " nan", flag);
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

}  // namespace
}  // namespace tk
