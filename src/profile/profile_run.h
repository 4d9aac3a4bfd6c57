// `tokamak profile`'s run: the trainer's own steps on the profiling decorator of the backend
// (profiling_ops.h), warm-up steps dropped and measured ones resolved into a ProfileReport
// (profile_report.h: where a step's time goes) with its advice (profile_advice.h); on many ranks, train's
// data-parallel steps, with every rank's communication and data wait.
#pragma once
#include <optional>

#include "profile/ceilings.h"
#include "profile/profile_report.h"
#include "train/trainer.h"

namespace tk {

struct ProfileOptions {
  TrainConfig train;              // the recipe, as `tokamak train` takes it
  int warmup_steps = 3;           // run first, not measured
  int measure_steps = 5;
  bool print_progress = true;     // the plan and one line per step on stdout
  std::optional<Ceilings> ceilings;  // given: used instead of measuring (tests)
};

// Measures the steps and the ceilings and ranks the advice; writes nothing (write_profile does). comm: this rank's
// communicator in a run of many ranks (or --gpus 1), nullptr for one process. Every rank runs the same steps on the
// same profiling decorator, so that no rank is slowed alone, and gathers every rank's communication and data wait
// after each, as `tokamak train` does; rank 0 alone measures the ceilings and resolves the report, from its own op
// timing. Returns the report on rank 0 (and in one process), nothing on the other ranks.
std::optional<ProfileReport> run_profile(const ProfileOptions& o, dist::Communicator* comm = nullptr);

}  // namespace tk
