// What a run logs, on the built binary: --log-every N prints the first, every N-th and the last step while log.jsonl
// keeps every one, and the TensorBoard event files hold log.jsonl's numbers under its names, at its steps and times
// (in the run directory by default, in --tensorboard DIR, or nowhere with none); a resumed run's file starts a session
// at the step it continues from.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fs.h"
#include "run_testing.h"
#include "tensorboard_testing.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::ordered_json;  // the records' fields in their order
using testing::TempDir;

// The event files in `dir`, oldest first.
std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : stdfs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<json> log_records(const std::string& run) {
  std::vector<json> out;
  std::istringstream in(fs::read_file(run + "/log.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

class RunLogCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!stdfs::exists(testing::kTokamak)) GTEST_SKIP() << testing::kTokamak << " is not built";
    data_ = testing::make_byte_dataset(dir_);
    model_ = testing::write_model_config(dir_, testing::tiny_llama_config());
  }
  // `tokamak train` of 7 steps (validation at 3 and 6 and the end) into RUN with the extra flags; its stdout.
  std::string train(const std::string& run, const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {"train", "--model", model_, "--data", data_, "--out", run, "--device", "cpu",
                                     "--batch", "2", "--seq", "16", "--steps", "7", "--warmup", "1",
                                     "--eval-every", "3", "--eval-tokens", "64"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::string err;
    EXPECT_EQ(testing::run_tokamak(args, dir_.path("train"), &err).code, 0) << err;
    return fs::read_file(dir_.path("train.out"));
  }

  TempDir dir_;
  std::string data_, model_;
};

TEST_F(RunLogCli, LogEveryPrintsTheFirstEveryNthAndTheLastStep) {
  const std::string run = dir_.path("run");
  const std::string out = train(run, {"--log-every", "3"});
  std::vector<int> printed;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("step ", 0) == 0 && line.find(" | loss ") != std::string::npos)
      printed.push_back(std::stoi(line.substr(5, line.find('/') - 5)));
  EXPECT_EQ(printed, (std::vector<int>{1, 3, 6, 7})) << out;
  EXPECT_NE(out.find("step 3 | val loss "), std::string::npos) << out;  // validation lines stay
  int steps = 0;
  for (const json& r : log_records(run)) steps += r.contains("loss") ? 1 : 0;
  EXPECT_EQ(steps, 7);
}

// Each record's numbers, as float32 scalars under log.jsonl's names, at its step and time; nothing else.
TEST_F(RunLogCli, TheEventFilesHoldLogJsonlsNumbers) {
  const std::string run = dir_.path("run");
  train(run, {});
  const std::vector<std::string> files = event_files(run);
  ASSERT_EQ(files.size(), 1u);
  std::vector<testing::Event> events;
  for (const std::string& r : testing::records(fs::read_file(files[0]))) events.push_back(testing::event(r));
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].session_status, 1);
  EXPECT_EQ(events[1].step, 1);
  const std::vector<json> records = log_records(run);
  ASSERT_EQ(events.size(), records.size() + 2);
  std::set<std::string> tags;
  for (size_t i = 0; i < records.size(); i++) {
    const json& r = records[i];
    const testing::Event& e = events[i + 2];
    EXPECT_EQ(e.step, r["step"].get<int64_t>());
    EXPECT_EQ(e.wall_time, r["time"].get<double>());
    std::vector<std::pair<std::string, float>> expected;
    for (const auto& [name, value] : r.items())
      if (value.is_number() && name != "step" && name != "time")
        expected.emplace_back(name, float(value.get<double>()));
    EXPECT_EQ(e.values, expected) << r.dump();
    for (const auto& [tag, v] : e.values) tags.insert(tag);
  }
  for (const char* tag : {"loss", "lr", "grad_norm", "tokens_per_s", "memory_bytes", "elapsed_s", "val_loss"})
    EXPECT_TRUE(tags.count(tag)) << tag;
}

TEST_F(RunLogCli, TensorboardNamesTheDirectoryOrNone) {
  train(dir_.path("elsewhere"), {"--tensorboard", dir_.path("tb")});
  EXPECT_TRUE(event_files(dir_.path("elsewhere")).empty());
  EXPECT_EQ(event_files(dir_.path("tb")).size(), 1u);
  train(dir_.path("quiet"), {"--tensorboard", "none"});
  EXPECT_TRUE(event_files(dir_.path("quiet")).empty());
  // A run replaced (--overwrite) takes its event files with it.
  train(dir_.path("run"), {});
  train(dir_.path("run"), {"--overwrite"});
  EXPECT_EQ(event_files(dir_.path("run")).size(), 1u);
}

// Resumed from step 3 of a run that reached 7, the new file starts a session at 4: TensorBoard drops the earlier
// file's steps from 4 on, whose records log.jsonl dropped too.
TEST_F(RunLogCli, AResumedRunStartsASessionAtTheStepItContinuesFrom) {
  const std::string run = dir_.path("run");
  train(run, {"--save-every", "3", "--keep-checkpoints", "0"});
  train(run, {"--resume", run + "/step_000003", "--overwrite"});
  const std::vector<std::string> files = event_files(run);
  ASSERT_EQ(files.size(), 2u);
  const std::vector<std::string> records = testing::records(fs::read_file(files[1]));
  ASSERT_GE(records.size(), 3u);
  const testing::Event start = testing::event(records[1]), first = testing::event(records[2]);
  EXPECT_EQ(start.session_status, 1);
  EXPECT_EQ(start.step, 4);
  EXPECT_EQ(first.step, 4);
}

}  // namespace
}  // namespace tk
