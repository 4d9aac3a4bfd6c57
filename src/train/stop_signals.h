// Stopping a training run cleanly: the first SIGINT or SIGTERM asks the loop to save a checkpoint after
// the step in progress and return; a second one ends the process at once.
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

  // The signal received since construction (SIGINT or SIGTERM), 0 while none came.
  int received() const;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace tk
