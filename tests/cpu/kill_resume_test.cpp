// The kill test: `tokamak train` saving every step and keeping two checkpoints is killed with SIGKILL at
// random moments (in a step, a save, a prune, a resume's set-up), then resumed, a few times per trial. After
// every kill each step_* directory left is a complete checkpoint, and in the end the run's log holds the
// losses of an uninterrupted run and its last checkpoint the same weights, bit for bit. The lock: a second
// writer started while a run is frozen at its kill's moment is refused naming it, and after each kill the
// directory can be locked at once. The moments come from a seed (TOKAMAK_KILL_SEED, printed), so that a
// failing trial can be run again.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/fs.h"
#include "run_testing.h"
#include "train/checkpoint.h"
#include "train/run_dir.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kTrials = 10;
constexpr int kMaxKillsPerTrial = 3;
constexpr int kSteps = 30;

// The step records of log.jsonl by step (a step logged twice would be a resume that did not truncate the log).
std::map<int64_t, nlohmann::json> logged_steps(const std::string& run_dir) {
  std::map<int64_t, nlohmann::json> out;
  std::string text = fs::read_file(run_dir + "/log.jsonl");
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const nlohmann::json j = nlohmann::json::parse(text.substr(at, end - at));
    if (!j.contains("loss")) continue;
    EXPECT_EQ(out.count(j["step"].get<int64_t>()), 0u) << "step " << j["step"] << " logged twice";
    out[j["step"].get<int64_t>()] = j;
  }
  return out;
}

std::map<int64_t, double> logged_losses(const std::string& run_dir) {
  std::map<int64_t, double> out;
  for (const auto& [step, j] : logged_steps(run_dir)) out[step] = j["loss"].get<double>();
  return out;
}

// How long a run takes, from the reference's log: its start (the process and its set-up) and each step.
struct RunTimes {
  double start_ms = 0, step_ms = 0;
  // What a run from `done` steps has left: where a kill still finds it running.
  double left_ms(int64_t done) const { return start_ms + double(kSteps - done) * step_ms; }
};

// The pid the run directory's lock file names as its holder, or -1 (no record, or not one that parses).
int64_t recorded_holder(const std::string& run_dir) {
  std::error_code ec;
  if (!stdfs::is_regular_file(run_dir + "/.lock", ec)) return -1;
  const nlohmann::json j = nlohmann::json::parse(fs::read_file(run_dir + "/.lock"), nullptr, false);
  return j.is_object() && j.contains("pid") && j["pid"].is_number_integer() ? j["pid"].get<int64_t>() : -1;
}

// Every entry of the run directory with its size (0 for a directory), to see that nothing changed.
std::map<std::string, uintmax_t> listing(const std::string& run_dir) {
  std::map<std::string, uintmax_t> out;
  for (const auto& e : stdfs::recursive_directory_iterator(run_dir))
    out[e.path().string()] = e.is_regular_file() ? e.file_size() : 0;
  return out;
}

uint64_t kill_seed() {
  const char* s = std::getenv("TOKAMAK_KILL_SEED");
  return s && *s ? std::strtoull(s, nullptr, 10) : 20251201;
}

class KillAndResume : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!stdfs::exists(testing::kTokamak)) GTEST_SKIP() << testing::kTokamak << " is not built";
    data_ = testing::make_byte_dataset(dir_);
    model_ = testing::write_model_config(dir_, testing::tiny_llama_config());
  }

  std::vector<std::string> fresh_args(const std::string& out) const {
    return {"train",    "--model", model_, "--data", data_, "--out", out, "--overwrite", "--device", "cpu",
            "--batch",  "2",       "--seq", "16",    "--steps", std::to_string(kSteps), "--warmup", "5", "--lr",
            "3e-3",     "--eval-tokens", "0", "--save-every", "1", "--keep-checkpoints", "2"};
  }
  // Resumes the run when it has a complete checkpoint; a run killed before its first starts over.
  std::vector<std::string> next_args(const std::string& out) const {
    if (stdfs::exists(out) && !list_checkpoints(out).empty()) return {"train", "--resume", out};
    return fresh_args(out);
  }

  testing::TempDir dir_;
  std::string data_, model_;
};

TEST_F(KillAndResume, EveryKillLeavesCompleteCheckpointsAndTheRunContinuesBitwise) {
  const uint64_t seed = kill_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(fmt::format("TOKAMAK_KILL_SEED={}", seed));

  const std::string reference = dir_.path("reference");
  const Clock::time_point t0 = Clock::now();
  std::string err;
  ASSERT_EQ(testing::run_tokamak(fresh_args(reference), dir_.path("reference"), &err).code, 0) << err;
  const double run_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const std::map<int64_t, double> expected = logged_losses(reference);
  ASSERT_EQ(expected.size(), size_t(kSteps));
  const std::map<int64_t, nlohmann::json> records = logged_steps(reference);
  RunTimes times;
  times.step_ms = 1000 * (records.at(kSteps)["elapsed_s"].get<double>() - records.at(1)["elapsed_s"].get<double>()) /
                  (kSteps - 1);
  times.start_ms = std::max(0.0, run_ms - double(kSteps) * times.step_ms);
  const std::string last = "/" + checkpoint_dir_name(kSteps) + "/model.safetensors";
  const std::string expected_weights = fs::read_file(reference + last);

  int kills = 0, refusals = 0;
  for (int trial = 0; trial < kTrials; trial++) {
    const std::string out = dir_.path(fmt::format("trial{}", trial));
    bool second_writer_tried = false;
    const int planned = 1 + int(rng() % kMaxKillsPerTrial);
    std::string moments;
    for (int k = 0; k < planned; k++) {
      // Anywhere in what the run has left, its start included (a resume's set-up is killed too).
      const std::vector<std::string> done = stdfs::exists(out) ? list_checkpoints(out) : std::vector<std::string>{};
      const int64_t from = done.empty() ? 0 : read_trainer_state(done.back()).step;
      const int delay_ms = int(std::uniform_real_distribution<double>(0, times.left_ms(from))(rng));
      moments += fmt::format(" {}ms", delay_ms);
      testing::TokamakChild child(next_args(out), out + "-run");
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      // Frozen at the kill's moment: when it has recorded itself as the lock's holder, a second writer (once a
      // trial) is refused naming it and changes nothing.
      child.signal(SIGSTOP);
      SCOPED_TRACE(fmt::format("trial {}, kills at{}", trial, moments));
      if (!second_writer_tried && recorded_holder(out) == child.pid()) {
        second_writer_tried = true;
        const std::map<std::string, uintmax_t> before = listing(out);
        std::string second;
        const testing::ChildExit refused = testing::run_tokamak(next_args(out), out + "-second", &second);
        EXPECT_EQ(refused.code, 1) << second;
        EXPECT_NE(second.find("is in use by another process: pid " + std::to_string(child.pid())), std::string::npos)
            << second;
        EXPECT_EQ(listing(out), before) << "a second writer changed the directory of a live run";
        refusals++;
      }
      child.signal(SIGKILL);
      const testing::ChildExit e = child.wait();
      ASSERT_TRUE(e.signaled || e.code == 0) << child.err();
      if (!e.signaled) break;  // it finished before the kill
      kills++;
      if (!stdfs::exists(out)) continue;
      // The killed holder's lock is gone with it: the directory can be taken at once, and the lock file (when the
      // run got that far) is a regular file.
      EXPECT_NO_THROW({ const RunDirLock lock(out); });
      EXPECT_FALSE(stdfs::is_symlink(out + "/.lock"));
      std::vector<std::string> complete = list_checkpoints(out), dirs;
      for (const auto& entry : stdfs::directory_iterator(out))
        if (entry.path().filename().string().rfind("step_", 0) == 0) dirs.push_back(entry.path().string());
      EXPECT_EQ(complete.size(), dirs.size()) << "a kill left an incomplete step_* directory in " << out;
    }
    SCOPED_TRACE(fmt::format("trial {}, kills at{}", trial, moments));
    const testing::ChildExit e = testing::run_tokamak(next_args(out), out + "-final", &err);
    ASSERT_FALSE(e.signaled);
    ASSERT_EQ(e.code, 0) << err;
    EXPECT_EQ(logged_losses(out), expected);
    EXPECT_EQ(fs::read_file(out + last), expected_weights);
  }
  std::printf("%d kills over %d trials, %d second writers refused (seed %llu; an uninterrupted run: %.0f ms, %.0f of "
              "them to start)\n",
              kills, kTrials, refusals, (unsigned long long)seed, run_ms, times.start_ms);
  EXPECT_GE(kills, kTrials / 2);
  EXPECT_GE(refusals, kTrials / 3);
}

}  // namespace
}  // namespace tk
