// Stopping a training run cleanly: the first SIGINT, SIGTERM or SIGHUP (a closed terminal or ssh session)
// asks the loop to save a checkpoint after the step in progress and return, the process then exiting with
// 128 + the signal (130, 143, 129); a second one ends the process at once. A SIGHUP ignored when the run
// starts (nohup) stays ignored.
#pragma once
#include <csignal>

namespace tk {

// Installs the handlers for its lifetime (one at a time) and restores the previous ones after it.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal received since construction (SIGINT, SIGTERM or SIGHUP), 0 while none came.
  int received() const;
  // "SIGINT", "SIGTERM" or "SIGHUP".
  static const char* name(int sig);

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3] {};
};

}  // namespace tk
