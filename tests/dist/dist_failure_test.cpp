// Failures of a run of many ranks, under mpirun (dist_rank_probe, and tokamak itself): a rank killed in the middle
// of a collective, or hung in it, makes the others exit non-zero within 30 s, named; ranks given different runs
// refuse before any work, naming the first that differs; `--gpus` refuses what it cannot run; ranks that agree
// start and stop at the "not yet" of training on many ranks.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dist/process_group.h"

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
  EXPECT_TRUE(has(o, "the ranks disagree: rank 2 of 3 was given another data than rank 0")) << o.output;
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
  const Outcome cpu = run({kTokamak, "bench", "--gpus", "2", "--device", "cpu"});
  EXPECT_EQ(cpu.exit_code, 1) << cpu.output;
  EXPECT_TRUE(has(cpu, "for ranks on the CPU use mpirun -np 2")) << cpu.output;
  const Outcome nested = run(mpirun(2, {kTokamak, "train", "--gpus", "2", "--model", "tiny"}));
  EXPECT_NE(nested.exit_code, 0) << nested.output;
  EXPECT_TRUE(has(nested, "leave --gpus out under a launcher")) << nested.output;
}

TEST(Cli, TrainingRanksStartAgreeThenStopUntilZero) {
  const Outcome o = run(mpirun(2, {kTokamak, "train", "--device", "cpu", "--model", "tiny", "--data", "nowhere"}));
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "the 2 ranks started and agree, but `tokamak train` on more than one rank comes with the ZeRO"))
      << o.output;
}

TEST(Cli, TrainingRanksGivenDifferentCommandsRefuse) {
  std::vector<std::string> argv = {TK_MPIEXEC, "--oversubscribe", "-np", "1", kTokamak, "train", "--device", "cpu",
                                   "--seed", "1", ":", "-np", "1", kTokamak, "train", "--device", "cpu", "--seed", "2"};
  const Outcome o = run(argv);
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "rank 1 of 2 was given another command line than rank 0")) << o.output;
}

}  // namespace
