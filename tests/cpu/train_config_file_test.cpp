// Config files: a TrainConfig written as TOML reads back the same (floats to the bit, strings escaped), and, on
// the built binary, `tokamak train --config FILE`: flags override the file, mistakes name the file's line and
// exit 2, the run directory's config.toml repeats the run bitwise, and is refused as its own run's replacement.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "data/prepare.h"
#include "data_testing.h"
#include "model_testing.h"
#include "train/config_file.h"
#include "train/trainer.h"

namespace tk {
namespace {

using json = nlohmann::json;
using testing::error_of;
using testing::TempDir;

// The file's entries as TrainConfig JSON keys and values, as the train command reads them.
json as_config_json(const ConfigFile& f) {
  json j = json::object();
  for (const ConfigEntry& e : f.entries) j[config_key_of_flag(e.key)] = e.value;
  return j;
}

TEST(ConfigFile, RoundTripKeepsEveryValue) {
  TempDir dir;
  TrainConfig c;
  c.model = "/models/a \"quoted\" path\\with\tcontrols";
  c.data = "data/brown";
  c.lr = 3e-4;
  c.adam_eps = 1e-8;
  c.min_lr_ratio = 0.1 + 0.2;  // no short decimal form
  c.grad_clip = 1.0;           // a float that would print as an integer
  c.seed = (uint64_t(1) << 62) + 1;
  c.doc_mask = true;
  c.gemm_tuning = false;
  c.logits_chunk_mib = 256;
  c.batch_tokens = int64_t(1) << 40;
  const std::string text = config_file_text(c.to_json(), "first line\nsecond line");
  EXPECT_EQ(text.rfind("# first line\n# second line\n\n", 0), 0u) << text;
  EXPECT_NE(text.find("\nlogits-chunk = 256\n"), std::string::npos) << text;  // the flag's name, not the field's
  EXPECT_NE(text.find("\ngrad-clip = 1.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nlr = 0.0003\n"), std::string::npos) << text;
  testing::write_text(dir.path("c.toml"), text);
  const ConfigFile f = read_config_file(dir.path("c.toml"));
  EXPECT_EQ(f.entries.front().line, 4);
  const TrainConfig back = TrainConfig::from_json(as_config_json(f));
  EXPECT_EQ(back.to_json(), c.to_json());
}

TEST(ConfigFile, ErrorsNameTheFileAndLine) {
  TempDir dir;
  testing::write_text(dir.path("syntax.toml"), "batch = 8\nseq = \n");
  std::string msg = error_of([&] { read_config_file(dir.path("syntax.toml")); });
  EXPECT_NE(msg.find("syntax.toml:2:"), std::string::npos) << msg;
  testing::write_text(dir.path("nested.toml"), "batch = 8\n\n[model]\nname = 1\n");
  msg = error_of([&] { read_config_file(dir.path("nested.toml")); });
  EXPECT_NE(msg.find("nested.toml:3: `model` is a table"), std::string::npos) << msg;
  msg = error_of([&] { read_config_file(dir.path("absent.toml")); });
  EXPECT_NE(msg.find("absent.toml: there is no such file"), std::string::npos) << msg;
}

// toml++ nests a table per part of a dotted key by recursion: 50,000 parts overflowed the stack (SIGSEGV). Keys are
// bounded before the parse; dots in strings, multi-line strings and comments count for nothing.
TEST(ConfigFile, DeeplyDottedKeysAreRefusedBeforeTheParse) {
  TempDir dir;
  std::string deep = "a";
  for (int i = 1; i < 50'000; i++) deep += ".a";
  testing::write_text(dir.path("deep.toml"), "batch = 8\n" + deep + " = 1\n");
  std::string msg = error_of([&] { read_config_file(dir.path("deep.toml")); });
  EXPECT_NE(msg.find("deep.toml:2: a key nested more than 64 levels deep"), std::string::npos) << msg;
  testing::write_text(dir.path("table.toml"), "[" + deep + "]\n");
  msg = error_of([&] { read_config_file(dir.path("table.toml")); });
  EXPECT_NE(msg.find("table.toml:1: a key nested more than 64 levels deep"), std::string::npos) << msg;

  const std::string dots(200, '.');
  testing::write_text(dir.path("strings.toml"), "data = \"" + dots + "\" # " + dots + "\n" +
                                                    "model = \"\"\"\n" + dots + "\n\\\"" + dots + "\"\"\"\n" +
                                                    "out = '" + dots + "'\n" +
                                                    "tokenizer = '''" + dots + "\n" + dots + "'''\n" +
                                                    "lr = 3.0e-3\n");
  const ConfigFile f = read_config_file(dir.path("strings.toml"));
  ASSERT_EQ(f.entries.size(), 5u);
  EXPECT_EQ(f.entries[0].value, dots);
  EXPECT_EQ(f.entries[1].value, dots + "\n\"" + dots);
  EXPECT_EQ(f.entries[3].value, dots + "\n" + dots);
  EXPECT_EQ(f.entries[4].line, 8);
}

const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";

struct CliResult {
  int status;
  std::string out, err;
};

class TrainConfigCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
    std::mt19937_64 rng(3);
    for (int d = 0; d < 12; d++)
      testing::write_text(dir_.path("text/doc" + std::to_string(d) + ".txt"), testing::random_document(rng, 150));
    PrepareOptions o;
    o.inputs = {dir_.path("text")};
    o.out_dir = dir_.path("data");
    o.val_fraction = 0.2;
    o.threads = 1;
    o.progress = false;
    prepare(testing::ByteTokenizer(), o);
    fs::write_file_atomic(dir_.path("model.json"), testing::tiny_llama_config().to_hf_json().dump(2));
    testing::write_text(dir_.path("run.toml"), "# a small run\n"
                                               "model = \"" + dir_.path("model.json") + "\"\n"
                                               "data = \"" + dir_.path("data") + "\"\n"
                                               "device = \"cpu\"\n"
                                               "batch = 2\n"
                                               "seq = 16\n"
                                               "steps = 4\n"
                                               "lr = 3e-3\n"
                                               "warmup = 1\n"
                                               "eval-tokens = 32\n"
                                               "gemm-tuning = false\n");
  }

  CliResult tokamak(const std::string& args) const {
    const std::string cmd = kTokamak + " " + args + " > " + dir_.path("stdout") + " 2> " + dir_.path("stderr");
    const int status = std::system(cmd.c_str());
    return {WEXITSTATUS(status), fs::read_file(dir_.path("stdout")), fs::read_file(dir_.path("stderr"))};
  }

  // Each step's loss in the run's log.jsonl, exactly as written.
  std::vector<double> losses(const std::string& run) const {
    std::vector<double> out;
    const std::string log = fs::read_file(dir_.path(run + "/log.jsonl"));
    for (size_t at = 0, end; at < log.size(); at = end + 1) {
      end = log.find('\n', at);
      const json j = json::parse(log.substr(at, end - at));
      if (j.contains("loss")) out.push_back(j["loss"].get<double>());
    }
    return out;
  }

  void expect_usage_error(const std::string& file_text, const std::string& words) const {
    SCOPED_TRACE(file_text);
    testing::write_text(dir_.path("bad.toml"), file_text);
    const CliResult r = tokamak("train --config " + dir_.path("bad.toml") + " --out " + dir_.path("bad_run"));
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("error: " + dir_.path("bad.toml") + words), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_.path("bad_run")));
  }

  TempDir dir_;
};

TEST_F(TrainConfigCli, FileSetsTheRunAndFlagsOverrideIt) {
  CliResult r = tokamak("train --config " + dir_.path("run.toml") + " --out " + dir_.path("a"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(losses("a").size(), 4u);
  const ConfigFile recorded = read_config_file(dir_.path("a/config.toml"));
  const TrainConfig c = TrainConfig::from_json(as_config_json(recorded));
  EXPECT_EQ(c.steps, 4);
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.lr, 3e-3);
  EXPECT_FALSE(c.gemm_tuning);
  EXPECT_EQ(c.out, std::filesystem::absolute(dir_.path("a")).lexically_normal().string());
  EXPECT_EQ(c.vocab_size, 320);  // resolved: the data's 257 tokens padded

  r = tokamak("train --config " + dir_.path("run.toml") + " --steps 2 --gemm-tuning --out " + dir_.path("b"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(losses("b").size(), 2u);
  const TrainConfig b = TrainConfig::from_json(as_config_json(read_config_file(dir_.path("b/config.toml"))));
  EXPECT_EQ(b.steps, 2);
  EXPECT_TRUE(b.gemm_tuning);
  EXPECT_EQ(b.lr, 3e-3);
}

TEST_F(TrainConfigCli, MistakesNameTheLineAndExit2) {
  expect_usage_error("batch = 2\nbatch_tokens = 64\n", ":2: unknown key `batch_tokens`: `tokamak train` has no "
                                                      "--batch_tokens (the keys are the flags' names: `batch-tokens`)");
  expect_usage_error("\nlearning-rate = 0.1\n", ":2: unknown key `learning-rate`");
  expect_usage_error("batch = \"8\"\n", ":1: `batch` must be an integer, like its flag --batch");
  expect_usage_error("lr = \"fast\"\n", ":1: `lr` must be a number");
  expect_usage_error("doc-mask = 1\n", ":1: `doc-mask` must be true or false");
  expect_usage_error("seq = 16\nschedule = \"sideways\"\n", ":2: schedule = \"sideways\": sideways not in");
  expect_usage_error("batch = 0\n", ":1: batch = 0: must be at least 1, not 0");
  expect_usage_error("overwrite = true\n", ":1: `overwrite` cannot be set in a config file");
  expect_usage_error("steps = [1, 2]\n", ":1: `steps` is an array");
  expect_usage_error("steps = \n", ":1:");
  // What the flags refuse, the file refuses: an int cannot hold these, and a cut value is another run.
  expect_usage_error("seq = 16\nbatch = 4294967298\n", ":2: batch = 4294967298 does not fit its flag --batch");
  expect_usage_error("keep-checkpoints = 4294967297\n", ":1: keep_checkpoints = 4294967297 does not fit");
  testing::write_text(dir_.path("nan.toml"), "grad-clip = nan\n");
  const CliResult r = tokamak("train --config " + dir_.path("nan.toml") + " --data " + dir_.path("data") + " --out " +
                              dir_.path("nan_run"));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--grad-clip must be a finite number"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.path("nan_run")));
}

// Sizes derived from the flags are checked: --batch-tokens 2^63 - 32 made -1 micro-batches a step (loss 0, grad 0,
// checkpoints saved), 2^37 + 32 one micro-batch of 32 tokens logged as 137 G a step. Both, and a micro-batch of more
// tokens than an int counts, are usage errors (exit 2) before anything is written; so is the same value in a file.
TEST_F(TrainConfigCli, SizesThatOverflowAreUsageErrors) {
  const std::string run = "train --config " + dir_.path("run.toml") + " --out " + dir_.path("sized");
  struct Case {
    std::string flags, words;
  };
  for (const Case& k : {Case{"--batch-tokens 9223372036854775776",
                             "--batch-tokens 9223372036854775776 is 288230376151711743 micro-batches of 32 tokens"},
                        Case{"--batch-tokens 137438953504", "--batch-tokens 137438953504 is 4294967297 micro-batches"},
                        Case{"--batch 2147483647 --seq 2147483647",
                             "--batch 2147483647 x --seq 2147483647 is 4611686014132420609 tokens a micro-batch"}}) {
    SCOPED_TRACE(k.flags);
    const CliResult r = tokamak(run + " " + k.flags);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("error: " + k.words), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_.path("sized")));
  }
  testing::write_text(dir_.path("big.toml"), fs::read_file(dir_.path("run.toml")) + "batch-tokens = 137438953504\n");
  CliResult r = tokamak("train --config " + dir_.path("big.toml") + " --out " + dir_.path("sized"));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--batch-tokens 137438953504 is 4294967297 micro-batches"), std::string::npos) << r.err;
  // The run's tokens, steps x tokens a step, fit the int64 that counts them.
  r = tokamak(run + " --steps 4611686018427387904");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("the run's tokens (--steps x --batch-tokens) overflows: 4611686018427387904 x 32"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.path("sized")));
}

TEST_F(TrainConfigCli, RunDirectoryConfigRepeatsTheRunBitwise) {
  ASSERT_EQ(tokamak("train --config " + dir_.path("run.toml") + " --out " + dir_.path("a")).status, 0);
  const std::vector<double> first = losses("a");
  ASSERT_EQ(first.size(), 4u);

  CliResult r = tokamak("train --config " + dir_.path("a/config.toml"));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("is the configuration of the run in"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pass --out NEW_DIR"), std::string::npos) << r.err;
  EXPECT_EQ(losses("a"), first);  // untouched

  r = tokamak("train --config " + dir_.path("a/config.toml") + " --out " + dir_.path("again"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(losses("again"), first);

  r = tokamak("train --config " + dir_.path("a/config.toml") + " --overwrite");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(losses("a"), first);
}

}  // namespace
}  // namespace tk
