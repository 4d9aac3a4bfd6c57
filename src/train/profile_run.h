// `tokamak profile`'s run: the trainer's own steps on the profiling decorator of the backend
// (profiling_ops.h), warm-up steps dropped and measured ones resolved into a ProfileReport
// (profile_report.h: where a step's time goes) with its advice (profile_advice.h).
#pragma once
#include <optional>

#include "train/ceilings.h"
#include "train/profile_report.h"
#include "train/trainer.h"

namespace tk {

struct ProfileOptions {
  TrainConfig train;              // the recipe, as `tokamak train` takes it
  int warmup_steps = 3;           // run first, not measured
  int measure_steps = 5;
  bool print_progress = true;     // the plan and one line per step on stdout
  std::optional<Ceilings> ceilings;  // given: used instead of measuring (tests)
};

// Measures the steps and the ceilings and ranks the advice; writes nothing (write_profile does).
ProfileReport run_profile(const ProfileOptions& o);

}  // namespace tk
