// LR schedule: warmup, then the decay chosen, to min_lr_ratio * peak_lr.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tk {

const char* lr_decay_name(LrDecay d) {
  switch (d) {
    case LrDecay::Cosine: return "cosine";
    case LrDecay::Linear: return "linear";
    case LrDecay::WarmupStableDecay: return "wsd";
  }
  return "?";
}

void LrSchedule::validate() const {
  TK_CHECK(peak_lr > 0 && std::isfinite(peak_lr), "--lr must be a positive number, got {}", peak_lr);
  TK_CHECK(total_steps >= 1, "--steps must be at least 1, got {}", total_steps);
  TK_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps,
           "--warmup must be between 0 and --steps ({}), got {}", total_steps, warmup_steps);
  TK_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "--min-lr-ratio must be in [0, 1], got {}", min_lr_ratio);
  TK_CHECK(decay_fraction >= 0 && decay_fraction <= 1, "--decay-fraction must be in [0, 1], got {}", decay_fraction);
}

double LrSchedule::at(int64_t step) const {
  const double floor_lr = peak_lr * min_lr_ratio;
  step = std::min(step, total_steps);  // past the end the schedule holds its last value
  // Warmup reaches the peak on its last step (step == warmup_steps), never starting from zero.
  if (step <= warmup_steps) return peak_lr * double(step) / double(warmup_steps);

  // The decay phase is [decay_start, total_steps]: it leaves the peak just after decay_start and
  // reaches the floor on the final step. Cosine and linear decay from the end of warmup; WSD holds
  // the peak until its last decay_fraction of the run.
  int64_t decay_start = warmup_steps;
  if (decay == LrDecay::WarmupStableDecay) {
    const int64_t decay_steps = std::llround(decay_fraction * double(total_steps));
    decay_start = std::max(warmup_steps, total_steps - decay_steps);
    if (step <= decay_start) return peak_lr;
  }
  const double progress = double(step - decay_start) / double(total_steps - decay_start);
  if (decay == LrDecay::Cosine) return floor_lr + (peak_lr - floor_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return peak_lr - (peak_lr - floor_lr) * progress;
}

}  // namespace tk
