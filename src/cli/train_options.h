// The flags of `tokamak train`, in two parts: what a training step computes and how (shared with `tokamak
// profile`, which runs the same steps), and what only a training run has (its length, learning-rate schedule and
// optimizer settings, validation and checkpoints).
#pragma once
#include <CLI/CLI.hpp>

#include "train/trainer.h"

namespace tk::cli {

// The model, data, batch, device, precision and memory flags.
void add_step_options(CLI::App& app, TrainConfig& c);
// The run's length, schedule, optimizer, validation and checkpoint flags.
void add_run_options(CLI::App& app, TrainConfig& c);

}  // namespace tk::cli
