// The flags of a training recipe, shared by `tokamak train` and `tokamak profile` (which runs the same
// steps): every TrainConfig field except the run directory and resuming.
#pragma once
#include <CLI/CLI.hpp>

#include "train/trainer.h"

namespace tk::cli {

void add_recipe_options(CLI::App& app, TrainConfig& c);

}  // namespace tk::cli
