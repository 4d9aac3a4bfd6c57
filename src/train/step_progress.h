// How far a training run has come, for its step lines, as tqdm shows a loop: the time since the run started,
// the time its steps take and the time left at that pace: "3:07 elapsed, ETA 14:10 (1.21 s/step)".
#pragma once
#include <cstdint>
#include <string>

namespace tk {

struct StepPace {
  double elapsed_s = 0;         // since the run (this process) started
  double seconds_per_step = 0;  // wall time per step, validations and checkpoints between them included
  double eta_s = 0;             // until the last step, at that pace
};

class StepProgress {
 public:
  // first_step: the first step this process runs (a resumed run starts past 1); last_step: the run's last.
  StepProgress(int64_t first_step, int64_t last_step) : first_step_(first_step), last_step_(last_step) {}

  // After `step` ended, `elapsed_s` after the start; step_s is that step's own time. The pace is measured from the
  // end of the first step, which pays for warming up (allocations, kernel choices), so until a second step has
  // ended it is the first step's own time.
  StepPace after_step(int64_t step, double step_s, double elapsed_s);

 private:
  int64_t first_step_, last_step_;
  double first_step_end_s_ = -1;
};

// "3:07 elapsed, ETA 14:10 (1.21 s/step)"; a pace under a second a step reads "(4.2 steps/s)".
std::string format_step_pace(const StepPace& p);

}  // namespace tk
