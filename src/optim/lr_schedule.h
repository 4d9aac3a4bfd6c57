// The learning-rate schedule: a linear warmup to the peak, then cosine, linear or warmup-stable-decay
// (constant, then a linear decay over the last fraction of the run) down to a floor. A pure function
// of the step, so a resumed run gets exactly the rates it would have had.
#pragma once
#include <cstdint>
#include <string>

namespace tk {

enum class LrDecay { Cosine, Linear, WarmupStableDecay };
const char* lr_decay_name(LrDecay d);

struct LrSchedule {
  double peak_lr = 3e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  LrDecay decay = LrDecay::Cosine;
  double min_lr_ratio = 0.1;    // the floor, as a fraction of peak_lr
  double decay_fraction = 0.2;  // WSD only: the share of total_steps spent decaying

  void validate() const;        // throws tk::Error naming the flag that is out of range
  // The rate for a 1-based step (the step about to be taken). Steps past total_steps keep the final rate.
  double at(int64_t step) const;
};

}  // namespace tk
