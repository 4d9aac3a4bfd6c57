// The pace of a training run's steps and the time it has left (step_progress.h).
#include "train/step_progress.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/format.h"

namespace tk {

StepPace StepProgress::after_step(int64_t step, double step_s, double elapsed_s) {
  StepPace p;
  p.elapsed_s = elapsed_s;
  if (step <= first_step_ || first_step_end_s_ < 0) {
    first_step_end_s_ = elapsed_s;
    p.seconds_per_step = step_s;
  } else {
    p.seconds_per_step = (elapsed_s - first_step_end_s_) / double(step - first_step_);
  }
  p.eta_s = p.seconds_per_step * double(std::max<int64_t>(0, last_step_ - step));
  return p;
}

std::string format_step_pace(const StepPace& p) {
  const std::string pace = p.seconds_per_step >= 1 || p.seconds_per_step <= 0
                               ? fmt::format("{:.2f} s/step", p.seconds_per_step)
                               : fmt::format("{:.1f} steps/s", 1 / p.seconds_per_step);
  return fmt::format("{} elapsed, ETA {} ({})", format_clock(p.elapsed_s), format_clock(p.eta_s), pace);
}

}  // namespace tk
