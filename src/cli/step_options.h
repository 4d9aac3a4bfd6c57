// The flags of a training step (StepOptions, plan/step_options.h), added once for `train`, `profile`, `bench` and
// `plan`, and the flags of a training run (TrainConfig's own: its length, schedule, optimizer settings, validation
// and checkpoints), which `train` alone has. A command that does not use a step flag refuses it by name.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "train/train_config.h"

namespace tk::cli {

// The model, data, batch, device, precision and memory flags.
void add_step_options(CLI::App& app, StepOptions& o);
// The run's length, schedule, optimizer, validation and checkpoint flags.
void add_run_options(CLI::App& app, TrainConfig& c);

// Of the step flags, those `command` does not use: hidden from its --help, and a usage error naming the flag and
// `why` when given.
void refuse_step_options(CLI::App& app, const std::vector<std::string>& flags, const std::string& command,
                         const std::string& why);

// check_step_options (or check_train_config) as a usage error (exit 2): what a command line or config file asks
// that no run can do is refused before anything runs or is written.
void require_valid(const StepOptions& o);
void require_valid(const TrainConfig& c);

}  // namespace tk::cli
