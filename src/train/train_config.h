// TrainConfig: the record of a training run's settings as `tokamak train` resolved them (defaults, config file,
// flags): the step's options (StepOptions, shared with profile, bench and plan), the run's own (its length, learning
// rate schedule, AdamW's hyperparameters, validation and checkpoints) and where it goes. What a run computes is
// built from it once (make_recipe, and the run's schedule); after that it is only what config.toml, config.json and
// each checkpoint record. The JSON keys are the flag names with '_' for '-'.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/step_options.h"

namespace tk {

struct TrainConfig : StepOptions {
  std::string out;  // the run directory
  int64_t steps = 1000;
  double lr = 3e-4;
  double min_lr_ratio = 0.1;
  int64_t warmup = 100;
  std::string schedule = "cosine";  // cosine, linear or wsd
  double decay_fraction = 0.2;      // wsd: the share of the steps spent decaying
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8, weight_decay = 0.1;
  double grad_clip = 1.0;       // global gradient norm limit; <= 0 disables clipping
  int64_t eval_every = 0;       // validate every N steps (0: only at the end)
  int64_t eval_tokens = 65536;  // tokens per validation (0: never validate)
  int64_t save_every = 0;       // checkpoint every N steps (0: only at the end; -1: never, but on a signal)
  int keep_checkpoints = 3;     // keep the newest K checkpoints (0: all)
  int64_t log_every = 1;        // a terminal line every N steps (log.jsonl keeps every step: run_log.h)
  std::string tensorboard;      // TensorBoard's event files: "" the run directory, "none" none, else this directory

  // What to do with the run directory; not part of the recipe, so not saved with it.
  bool resume = false;
  std::string resume_from;  // checkpoint or run directory; "" = the latest checkpoint in `out`
  bool overwrite = false;   // replace the run in `out`; with resume: delete checkpoints after the one resumed from

  nlohmann::json to_json() const;
  // Keys absent from j keep their defaults; a tk::Error for a value its field cannot hold exactly (an integer out of
  // its range, a fraction for an integer, a string for a number).
  static TrainConfig from_json(const nlohmann::json& j);
};

// The recipe of a training run: the step's (make_recipe, for the GPU this process sees when gpu) with the run's AdamW
// hyperparameters (betas, epsilon, weight decay, gradient clipping).
Recipe train_recipe(const TrainConfig& c, const ModelConfig& model, bool gpu, int world = 1);

// A tk::Error naming the flag for a run option no run can have: a non-finite or negative rate, betas outside [0, 1),
// negative step counts; and the step options' check_step_options.
void check_train_config(const TrainConfig& c);

}  // namespace tk
