// The process group of `--gpus N`, with small shell ranks standing in for tokamak: the combined log, exit codes,
// a rank killed by SIGKILL or failing stops the others within seconds with a message naming it, a rank that ignores
// SIGTERM is killed after the grace period, signals sent to the launcher reach every rank once, and the ranks die
// with a launcher that is killed.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "dist/process_group.h"

namespace {

namespace fs = std::filesystem;
using tk::dist::ChildCommand;
using tk::dist::ProcessGroupOptions;
using tk::dist::ProcessGroupResult;
using clock_type = std::chrono::steady_clock;

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs shell scripts as ranks (rank r runs scripts[r], with R=r and DIR set), rank 0's output and the group's log
// going to files.
class ProcessGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tk_process_group_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ProcessGroupResult run(const std::vector<std::string>& scripts, std::chrono::milliseconds grace = std::chrono::seconds(5)) {
    std::vector<ChildCommand> ranks;
    for (size_t r = 0; r < scripts.size(); r++)
      ranks.push_back({{"sh", "-c", scripts[r]}, {"R=" + std::to_string(r), "DIR=" + dir_.string()}});
    const int out = ::open((dir_ / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = ::open((dir_ / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ProcessGroupOptions o;
    o.out_fd = out;
    o.err_fd = err;
    o.stop_grace = grace;
    const auto t0 = clock_type::now();
    ProcessGroupResult r = tk::dist::run_process_group(ranks, o);
    seconds_ = std::chrono::duration<double>(clock_type::now() - t0).count();
    ::close(out);
    ::close(err);
    return r;
  }
  std::string out() const { return read_file(dir_ / "out"); }
  std::string err() const { return read_file(dir_ / "err"); }

  fs::path dir_;
  double seconds_ = 0;
};

TEST_F(ProcessGroupTest, CombinedLogRankZerosOutputAsIsOthersStderrPrefixed) {
  const std::string script = "echo out$R; echo err$R >&2; printf 'partial line of %s' $R >&2";
  ProcessGroupResult r = run({script, script, script});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.failed_rank, -1);
  ASSERT_EQ(r.ranks.size(), 3u);
  for (const auto& e : r.ranks) EXPECT_FALSE(e.failed()) << e.describe();
  EXPECT_EQ(out(), "out0\n");  // the other ranks' stdout is dropped
  const std::string log = err();
  EXPECT_NE(log.find("err0\npartial line of 0"), std::string::npos) << log;
  EXPECT_NE(log.find("[rank 1] err1\n"), std::string::npos) << log;
  EXPECT_NE(log.find("[rank 2] err2\n"), std::string::npos) << log;
  EXPECT_NE(log.find("[rank 2] partial line of 2\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("tokamak:"), std::string::npos) << log;
}

TEST_F(ProcessGroupTest, AFailingRankStopsTheOthersAndGivesItsStatus) {
  ProcessGroupResult r = run({"sleep 60", "echo last words >&2; exit 3", "sleep 60"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_LT(seconds_, 10.0);
  EXPECT_TRUE(r.ranks[0].stopped_by_group);
  EXPECT_TRUE(r.ranks[0].signaled);
  EXPECT_EQ(r.ranks[0].code, SIGTERM);
  const std::string log = err();
  const size_t words = log.find("[rank 1] last words\n"), message = log.find("tokamak: rank 1 (pid ");
  EXPECT_NE(message, std::string::npos) << log;
  EXPECT_NE(log.find("exited with status 3; stopping the other ranks"), std::string::npos) << log;
  EXPECT_LT(words, message) << log;  // the rank's own last lines come before the message about its end
}

TEST_F(ProcessGroupTest, ARankKilledBySigkillIsNamedAndTheOthersStopWithinSeconds) {
  ProcessGroupResult r = run({"sleep 60", "sleep 60", "sleep 0.2; kill -KILL $$"});
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_EQ(r.failed_rank, 2);
  EXPECT_LT(seconds_, 10.0);
  EXPECT_NE(err().find("tokamak: rank 2 (pid "), std::string::npos) << err();
  EXPECT_NE(err().find("was killed by SIGKILL; stopping the other ranks"), std::string::npos) << err();
  for (int i : {0, 1}) EXPECT_TRUE(r.ranks[size_t(i)].stopped_by_group);
}

TEST_F(ProcessGroupTest, ARankThatIgnoresSigtermIsKilledAfterTheGrace) {
  // The shell ignores SIGTERM, and so does the sleep it starts (an ignored signal stays ignored across exec). Rank 1
  // fails only once rank 0 says it ignores the signal: else the group's SIGTERM may reach rank 0 before its trap.
  ProcessGroupResult r = run({"trap '' TERM; touch \"$DIR/ignoring\"; sleep 60",
                              "until [ -e \"$DIR/ignoring\" ]; do sleep 0.01; done; exit 1"},
                             std::chrono::milliseconds(500));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_LT(seconds_, 10.0);
  EXPECT_TRUE(r.ranks[0].signaled);
  EXPECT_EQ(r.ranks[0].code, SIGKILL);
  EXPECT_NE(err().find("rank 0 (pid "), std::string::npos) << err();
  EXPECT_NE(err().find("did not stop within 0.5 s of SIGTERM: sending SIGKILL"), std::string::npos) << err();
}

TEST_F(ProcessGroupTest, AProgramThatCannotStartFailsTheRun) {
  std::vector<ChildCommand> ranks = {{{"sh", "-c", "sleep 60"}, {}}, {{"/nonexistent/tokamak"}, {}}};
  const int err = ::open((dir_ / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ProcessGroupOptions o;
  o.err_fd = err;
  ProcessGroupResult r = tk::dist::run_process_group(ranks, o);
  ::close(err);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_NE(this->err().find("rank 1 could not start /nonexistent/tokamak: No such file or directory"),
            std::string::npos)
      << this->err();
}

// Each rank says when it is ready (a file in DIR), then rank 0 signals the launcher (this test process, which
// blocks the signal while the group runs): the launcher forwards it once to every rank, which exits as the trainer
// does after a signal, with 128 + its number.
class SignalForwarding : public ProcessGroupTest, public ::testing::WithParamInterface<int> {};

TEST_P(SignalForwarding, ReachesEveryRankOnce) {
  const int sig = GetParam();
  const std::string name = tk::dist::signal_name(sig).substr(3);
  const std::string handler = "n=0; trap 'n=$((n+1)); echo got $n " + name + " >&2; sleep 0.3; exit $((128+" +
                              std::to_string(sig) + "))' " + name + "; touch $DIR/ready$R; ";
  const std::string wait_loop = "while :; do sleep 0.05; done";
  const std::string signal_launcher =
      "while [ ! -e $DIR/ready1 ] || [ ! -e $DIR/ready2 ]; do sleep 0.05; done; kill -" + name + " $PPID; ";
  ProcessGroupResult r = run({handler + signal_launcher + wait_loop, handler + wait_loop, handler + wait_loop});
  EXPECT_EQ(r.exit_code, 128 + sig);
  EXPECT_EQ(r.failed_rank, -1);  // every rank did what it was asked: nobody is stopped for it
  EXPECT_LT(seconds_, 10.0);
  const std::string log = err();
  EXPECT_NE(log.find("got 1 " + name + "\n"), std::string::npos) << log;
  EXPECT_NE(log.find("[rank 1] got 1 " + name + "\n"), std::string::npos) << log;
  EXPECT_NE(log.find("[rank 2] got 1 " + name + "\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("got 2"), std::string::npos) << log;
  EXPECT_EQ(log.find("tokamak:"), std::string::npos) << log;
}

INSTANTIATE_TEST_SUITE_P(Signals, SignalForwarding, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const ::testing::TestParamInfo<int>& i) { return tk::dist::signal_name(i.param).substr(3); });

TEST_F(ProcessGroupTest, RanksDieWithAKilledLauncher) {
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    std::vector<ChildCommand> ranks;
    for (int r = 0; r < 2; r++)
      ranks.push_back({{"sh", "-c", "echo $$ > $DIR/pid$R.tmp && mv $DIR/pid$R.tmp $DIR/pid$R; exec sleep 60"},
                       {"R=" + std::to_string(r), "DIR=" + dir_.string()}});
    tk::dist::run_process_group(ranks);
    ::_exit(0);
  }
  std::vector<pid_t> pids;
  const auto deadline = clock_type::now() + std::chrono::seconds(20);
  while (pids.size() < 2 && clock_type::now() < deadline) {
    pids.clear();
    for (int r = 0; r < 2; r++) {
      std::ifstream f(dir_ / ("pid" + std::to_string(r)));
      pid_t p = 0;
      if (f >> p) pids.push_back(p);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(pids.size(), 2u);
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  // Dead: no such process, or a zombie that the reaper of orphans has not collected yet.
  auto dead = [](pid_t p) {
    std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
    std::string pid, comm, state;
    return !(stat >> pid >> comm >> state) || state == "Z";
  };
  for (pid_t p : pids) {
    bool gone = false;
    for (int i = 0; i < 200 && !gone; i++) {
      gone = dead(p);
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    EXPECT_TRUE(gone) << "rank pid " << p << " outlived its launcher";
  }
}

}  // namespace
