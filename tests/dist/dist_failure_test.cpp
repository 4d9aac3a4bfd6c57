// Failures of a run of many ranks, under mpirun (dist_rank_probe, and tokamak itself): a rank killed in the middle
// of a collective or of a training step, or hung in a collective, makes the others exit non-zero within 30 s, named;
// ranks given different runs refuse before any work, naming the first that differs; `--gpus` refuses what it cannot
// run, and bench many ranks; training ranks that fail at start, or cannot share the global batch, all stop.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/process_group.h"
#include "run_testing.h"

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = 0;
  std::string output;  // stdout and stderr
  double seconds = 0;
};

// Runs argv (killed after 90 s whatever happens, so that a hang fails the test instead of stalling it).
Outcome run(std::vector<std::string> argv, std::vector<std::string> env = {}) {
  argv.insert(argv.begin(), {"timeout", "-s", "KILL", "90"});
  const fs::path log = fs::temp_directory_path() / ("tk_dist_failure_" + std::to_string(::getpid()) + ".log");
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  tk::dist::ProcessGroupOptions o;
  o.out_fd = o.err_fd = fd;
  const auto t0 = std::chrono::steady_clock::now();
  const tk::dist::ProcessGroupResult r = tk::dist::run_process_group({{argv, env}}, o);
  Outcome out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  out.exit_code = r.exit_code;
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  out.output = ss.str();
  fs::remove(log);
  return out;
}

std::vector<std::string> mpirun(int np, std::vector<std::string> args) {
  std::vector<std::string> argv = {TK_MPIEXEC, "-np", std::to_string(np), "--oversubscribe"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

const std::string kProbe = TK_RANK_PROBE;
const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";

bool has(const Outcome& o, const std::string& text) { return o.output.find(text) != std::string::npos; }

TEST(MpiFailures, ARankKilledMidCollectiveStopsTheOthersWithin30s) {
  const Outcome o = run(mpirun(3, {kProbe, "die", "1"}));
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  EXPECT_TRUE(has(o, "rank 1: dying now")) << o.output;
  // Open MPI's own report: "mpirun noticed that process rank 1 with PID ... exited on signal 9 (Killed)."
  EXPECT_TRUE(has(o, "rank 1 with PID") && has(o, "signal 9")) << o.output;
}

TEST(MpiFailures, AHungRankIsNamedAfterTheCollectiveTimeout) {
  const Outcome o = run(mpirun(3, {kProbe, "hang", "2"}), {"TOKAMAK_COLLECTIVE_TIMEOUT=2"});
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  EXPECT_TRUE(has(o, "rank 2: hanging now")) << o.output;
  EXPECT_TRUE(has(o, "all_reduce: rank ") && has(o, "gave up after 2 s waiting for rank 2 ")) << o.output;
}

// A rank that finishes while the others still wait for it in a collective: its last barrier and their
// collective both time out, instead of mpirun waiting forever for ranks stuck behind a finalised one.
TEST(MpiFailures, ARankLeavingEarlyIsATimeoutNotAHang) {
  const Outcome o = run(mpirun(3, {kProbe, "leave", "1"}), {"TOKAMAK_COLLECTIVE_TIMEOUT=2"});
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  EXPECT_TRUE(has(o, "the run's last barrier: rank 1 gave up after 2 s")) << o.output;
  EXPECT_TRUE(has(o, "waiting for rank 1 ")) << o.output;
}

TEST(MpiFailures, RanksGivenDifferentRunsRefuseNamingTheFirst) {
  const Outcome o = run(mpirun(3, {kProbe, "agree", "2"}));
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "the ranks disagree on the data: rank 2 of 3 differs from rank 0")) << o.output;
  EXPECT_FALSE(has(o, "agreed")) << o.output;
}

TEST(MpiFailures, RanksThatAgreeFinishCleanly) {
  const Outcome o = run(mpirun(2, {kProbe, "agree"}));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "rank 0 of 2 agreed") && has(o, "rank 1 of 2 agreed")) << o.output;
}

TEST(Cli, InfoSaysWhatLaunchedIt) {
  const Outcome alone = run({kTokamak, "info"});
  EXPECT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_TRUE(has(alone, "MPI: ") && has(alone, "NCCL: ") && has(alone, "launch: a single process")) << alone.output;
  const Outcome ranks = run(mpirun(2, {kTokamak, "info"}));
  EXPECT_EQ(ranks.exit_code, 0) << ranks.output;
  EXPECT_TRUE(has(ranks, "launch: rank 0 of 2 (local rank 0), started by Open MPI")) << ranks.output;
  EXPECT_TRUE(has(ranks, "launch: rank 1 of 2 (local rank 1), started by Open MPI")) << ranks.output;
}

TEST(Cli, GpusSaysHowManyThereAre) {
  const Outcome o = run({kTokamak, "train", "--gpus", "64", "--model", "tiny", "--data", "nowhere"});
  EXPECT_EQ(o.exit_code, 1) << o.output;
#ifdef TK_HAVE_NCCL
  EXPECT_TRUE(has(o, "--gpus 64: this machine has ")) << o.output;
#else
  EXPECT_TRUE(has(o, "this build of tokamak has no NCCL")) << o.output;
#endif
  const Outcome cpu = run({kTokamak, "profile", "--gpus", "2", "--device", "cpu"});
  EXPECT_EQ(cpu.exit_code, 1) << cpu.output;
  EXPECT_TRUE(has(cpu, "for ranks on the CPU use mpirun -np 2")) << cpu.output;
  const Outcome nested = run(mpirun(2, {kTokamak, "train", "--gpus", "2", "--model", "tiny"}));
  EXPECT_NE(nested.exit_code, 0) << nested.output;
  EXPECT_TRUE(has(nested, "leave --gpus out under a launcher")) << nested.output;
}

// `tokamak bench` times one process: more ranks are refused, by --gpus before any starts and under mpirun on each,
// saying what measures many GPUs.
TEST(Cli, BenchRefusesManyRanksNamingWhatMeasuresThem) {
  const Outcome gpus = run({kTokamak, "bench", "--gpus", "2", "--device", "cpu"});
  EXPECT_EQ(gpus.exit_code, 1) << gpus.output;
  const Outcome ranks = run(mpirun(2, {kTokamak, "bench", "--device", "cpu"}));
  EXPECT_NE(ranks.exit_code, 0) << ranks.output;
  for (const Outcome* o : {&gpus, &ranks})
    for (const char* words : {"`tokamak bench` runs on one GPU", "`tokamak train --gpus 2`", "bench/scaling.sh",
                              "`tokamak profile --gpus 2`"})
      EXPECT_TRUE(has(*o, words)) << words << "\n" << o->output;
  EXPECT_FALSE(has(ranks, "tokens/s")) << "no rank ran the benchmark\n" << ranks.output;
}

TEST(Cli, TrainingRanksThatFailAtStartAllStop) {
  const Outcome o = run(mpirun(2, {kTokamak, "train", "--device", "cpu", "--model", "tiny", "--data", "nowhere",
                                   "--batch", "2", "--seq", "16", "--batch-tokens", "64"}));
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  EXPECT_TRUE(has(o, "nowhere")) << o.output;
  const Outcome uneven = run(mpirun(3, {kTokamak, "train", "--device", "cpu", "--model", "tiny", "--data", "nowhere",
                                        "--batch", "2", "--seq", "16", "--batch-tokens", "64"}));
  EXPECT_NE(uneven.exit_code, 0) << uneven.output;
  EXPECT_TRUE(has(uneven, "is 2 micro-batches of 32 tokens, which 3 ranks cannot share equally")) << uneven.output;
}

// The pid of the process whose environment holds every one of `entries` (a rank mpirun started for this test).
pid_t process_with_environment(const std::vector<std::string>& entries) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "environ", std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string env = std::string(1, '\0') + ss.str();
    bool all = true;
    for (const std::string& entry : entries) all = all && env.find('\0' + entry + '\0') != std::string::npos;
    if (all) return pid_t(std::stol(name));
  }
  return -1;
}

// Two training ranks under mpirun (ZeRO 1: each writes its own optimizer shard), steps slowed to be caught in; the
// signal is sent to rank 1 alone once rank 0 has logged `steps` steps, and the run then waited for.
struct SignalledRun {
  tk::testing::ChildExit exit;
  std::string err, run_dir;
  double seconds = 0;  // from the signal to the end
};

SignalledRun train_and_signal_rank_1(const tk::testing::TempDir& dir, int sig) {
  const std::string data = tk::testing::make_byte_dataset(dir);
  const std::string model = tk::testing::write_model_config(dir, tk::testing::tiny_llama_config());
  const std::string tag = "TK_SIGNALLED_RANK_TEST=" + std::to_string(::getpid());
  ::setenv("TK_SIGNALLED_RANK_TEST", std::to_string(::getpid()).c_str(), 1);
  ::setenv("TOKAMAK_LOADER_DELAY_MS", "50", 1);
  SignalledRun r;
  r.run_dir = dir.path("run");
  tk::testing::TokamakChild child({"train", "--device", "cpu", "--model", model, "--data", data, "--batch", "2", "--seq",
                                   "16", "--batch-tokens", "64", "--steps", "100000", "--eval-tokens", "0",
                                   "--save-every", "-1", "--zero", "1", "--out", r.run_dir},
                                  dir.path("signalled"), 0, {TK_MPIEXEC, "-np", "2", "--oversubscribe"});
  ::unsetenv("TOKAMAK_LOADER_DELAY_MS");
  ::unsetenv("TK_SIGNALLED_RANK_TEST");
  // Rank 0 logs a step once both ranks have trained it.
  const auto started = std::chrono::steady_clock::now();
  while (!fs::exists(r.run_dir + "/log.jsonl") || fs::file_size(r.run_dir + "/log.jsonl") == 0) {
    if (std::chrono::steady_clock::now() - started > std::chrono::seconds(60)) {
      ADD_FAILURE() << "no step logged in 60 s\n" << child.err();
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const pid_t rank1 = process_with_environment({tag, "OMPI_COMM_WORLD_RANK=1"});
  EXPECT_GT(rank1, 0);
  if (rank1 > 0) ::kill(rank1, sig);
  const auto signalled = std::chrono::steady_clock::now();
  r.exit = child.wait();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  r.err = child.err();
  return r;
}

TEST(TrainingRanks, ARankKilledMidStepStopsTheOthersWithin30s) {
  tk::testing::TempDir dir;
  const SignalledRun r = train_and_signal_rank_1(dir, SIGKILL);
  EXPECT_TRUE(r.exit.signaled || r.exit.code != 0) << r.err;
  EXPECT_LT(r.seconds, 30.0) << r.err;
  EXPECT_TRUE(r.err.find("rank 1") != std::string::npos) << r.err;
}

// SIGTERM seen by rank 1 alone: both ranks stop after the same step, each saving its part of the checkpoint.
TEST(TrainingRanks, ASignalOnOneRankStopsEveryRankAtTheSameStepSaved) {
  tk::testing::TempDir dir;
  const SignalledRun r = train_and_signal_rank_1(dir, SIGTERM);
  EXPECT_LT(r.seconds, 30.0) << r.err;
  std::vector<std::string> checkpoints;
  for (const auto& e : fs::directory_iterator(r.run_dir))
    if (e.path().filename().string().rfind("step_", 0) == 0) checkpoints.push_back(e.path().string());
  ASSERT_EQ(checkpoints.size(), 1u) << r.err;
  for (const char* file : {"complete.json", "model.safetensors", "optimizer-00001-of-00002.safetensors",
                           "optimizer-00002-of-00002.safetensors", "trainer_state.json"})
    EXPECT_TRUE(fs::exists(checkpoints[0] + "/" + file)) << file << "\n" << r.err;
  // The checkpoint is the last step logged: no rank went on past it.
  std::ifstream log(r.run_dir + "/log.jsonl");
  int steps = 0;
  for (std::string line; std::getline(log, line);) steps++;
  EXPECT_EQ(fs::path(checkpoints[0]).filename().string(), "step_" + std::string(6 - std::to_string(steps).size(), '0') +
                                                              std::to_string(steps))
      << r.err;
}

TEST(Cli, TrainingRanksGivenDifferentCommandsRefuse) {
  std::vector<std::string> argv = {TK_MPIEXEC, "--oversubscribe", "-np", "1", kTokamak, "train", "--device", "cpu",
                                   "--seed", "1", ":", "-np", "1", kTokamak, "train", "--device", "cpu", "--seed", "2"};
  const Outcome o = run(argv);
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "the ranks disagree on the command line: rank 1 of 2 differs from rank 0")) << o.output;
}

// The same command in two working directories (mpirun -wdir) names files whose contents differ: the ranks refuse
// before any work, naming what differs (train/run_agreement.h), be it the data, the model or the config file.
TEST(Cli, TrainingRanksThatSeeDifferentFilesRefuse) {
  tk::testing::TempDir a, b;
  tk::testing::write_text(b.path("text/extra.txt"), "a document only the second rank's data has\n");
  tk::testing::make_byte_dataset(a);
  tk::testing::make_byte_dataset(b);
  tk::ModelConfig deeper = tk::testing::tiny_llama_config();
  deeper.n_layers += 1;
  for (const tk::testing::TempDir* d : {&a, &b}) {
    tk::testing::write_model_config(*d, tk::testing::tiny_llama_config());
    tk::testing::write_model_config(*d, d == &a ? tk::testing::tiny_llama_config() : deeper, "deeper.json");
    tk::testing::write_text(d->path("run.toml"), d == &a ? "lr = 0.001\n" : "lr = 0.002\n");
    tk::testing::write_text(d->path("same.toml"), "lr = 0.001\n");
  }
  const std::string out = a.path("run");
  auto both = [&](const std::string& data, const std::string& model, const std::string& config) {
    std::vector<std::string> argv = {TK_MPIEXEC, "--oversubscribe"};
    for (const tk::testing::TempDir* d : {&a, &b}) {
      if (d == &b) argv.push_back(":");
      argv.insert(argv.end(), {"-np", "1", "-wdir", d->path(), kTokamak, "train", "--device", "cpu", "--data", data,
                               "--model", model, "--config", config, "--batch", "2", "--seq", "16", "--batch-tokens",
                               "64", "--steps", "1", "--eval-tokens", "0", "--save-every", "0", "--out", out,
                               "--overwrite"});
    }
    return run(argv);
  };
  // b's data was prepared with one more document.
  const Outcome data = both("data", "model.json", "same.toml");
  EXPECT_NE(data.exit_code, 0) << data.output;
  EXPECT_TRUE(has(data, "the ranks disagree on the data: rank 1 of 2 differs from rank 0")) << data.output;
  // The same data (a's, by its absolute path), another model config.
  const Outcome model = both(a.path("data"), "deeper.json", "same.toml");
  EXPECT_NE(model.exit_code, 0) << model.output;
  EXPECT_TRUE(has(model, "the ranks disagree on the model: rank 1 of 2 differs from rank 0")) << model.output;
  // The same data and model, a config file that sets another learning rate.
  const Outcome config = both(a.path("data"), "model.json", "run.toml");
  EXPECT_NE(config.exit_code, 0) << config.output;
  EXPECT_TRUE(has(config, "the ranks disagree on the configuration: rank 1 of 2 differs from rank 0")) << config.output;
  // And all of it alike: the run trains.
  const Outcome alike = both(a.path("data"), "model.json", "same.toml");
  EXPECT_EQ(alike.exit_code, 0) << alike.output;
}

}  // namespace
