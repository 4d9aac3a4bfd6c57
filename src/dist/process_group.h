// ProcessGroup: the ranks of a job on this host, run as child processes and watched together, for
// `tokamak <command> --gpus N`: one combined log, SIGINT/SIGTERM/SIGHUP forwarded, and when a rank fails, the
// others stopped within seconds and the failure named. It knows nothing of GPUs or training, so that it is tested
// with ordinary commands.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace tk::dist {

struct ChildCommand {
  std::vector<std::string> argv;  // argv[0]: a path, or a program name looked up in PATH
  std::vector<std::string> env;   // "NAME=value", set on top of this process's environment
};

struct ProcessGroupOptions {
  // Rank 0's stdout and stderr go to out_fd and err_fd as they are. Every other rank's stderr goes to err_fd line by
  // line, each line prefixed "[rank r] "; their stdout is dropped (rank 0 speaks for the run). The group's own
  // messages ("tokamak: rank 1 ... was killed by SIGKILL") go to err_fd too.
  int out_fd = 1;
  int err_fd = 2;
  // After a rank fails: SIGTERM to the others, then SIGKILL to those still running this long after.
  std::chrono::milliseconds stop_grace{5000};
};

struct RankExit {
  int rank = 0;
  int pid = 0;
  bool signaled = false;  // ended by a signal (code is its number) rather than by exiting (code is the status)
  int code = 0;
  bool stopped_by_group = false;  // sent SIGTERM/SIGKILL by the group after another rank failed
  bool failed() const { return signaled || code != 0; }
  std::string describe() const;  // "exited with status 3", "was killed by SIGKILL"
};

struct ProcessGroupResult {
  // 0 when every rank succeeded; otherwise the status of the first rank that failed of its own accord (128 + the
  // signal that killed it), or, when the ranks stopped on a forwarded signal, the first non-zero status.
  int exit_code = 0;
  int failed_rank = -1;  // that first rank failing of its own accord; -1 when none did
  std::vector<RankExit> ranks;
};

// Starts one process per command (rank r runs ranks[r]) in a process group of its own, with stdin from /dev/null, and
// returns when all have ended. While it waits, SIGINT, SIGTERM and SIGHUP sent to this process are forwarded to every
// rank's process group (a terminal's Ctrl-C reaches the ranks once, through here). When a rank fails on its own,
// the message naming it goes to err_fd at once and the others are stopped (SIGTERM, SIGKILL after stop_grace). The
// ranks die with this process (PR_SET_PDEATHSIG) if it is killed. A rank whose program cannot be started fails with
// status 127, the message saying why.
ProcessGroupResult run_process_group(const std::vector<ChildCommand>& ranks, const ProcessGroupOptions& options = {});

// "SIGKILL" for 9; "signal 77" for a number with no name.
std::string signal_name(int sig);

}  // namespace tk::dist
