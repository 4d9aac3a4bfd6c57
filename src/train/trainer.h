// The training loop: backend, model, data, AdamW and the LR schedule put together; gradient
// accumulation to a global batch given in tokens; a log line per step on the terminal and in
// RUN_DIR/log.jsonl; periodic validation; checkpoints, bitwise resume, and a clean stop on a signal.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/loader.h"
#include "dist/communicator.h"
#include "model/model.h"
#include "plan/metrics.h"
#include "plan/recipe.h"
#include "train/step_record.h"
#include "train/train_config.h"

namespace tk {

struct TrainResult {
  std::string run_dir;
  std::string checkpoint;   // the last one written
  int64_t step = 0;         // the last step completed
  double loss = 0;          // its training loss
  double val_loss = -1;     // the last validation loss (-1: none)
  int exit_code = 0;        // 0, or 128 + the signal that stopped the run (after its checkpoint was saved)
};

// What tools that run the trainer's own steps (`tokamak profile`) put between the trainer and its parts.
struct StepHooks {
  // Receives the backend's ops and returns the ops that the model and optimizer are built on.
  std::function<std::unique_ptr<Ops>(std::unique_ptr<Ops>)> wrap_ops;
  // Receives the training data's loader and returns the one the steps read from.
  std::function<std::unique_ptr<DataLoader>(std::unique_ptr<DataLoader>)> wrap_loader;
};

class TrainingRun;

// The training facade. Either run() trains into cfg.out (its directory, log, validation and checkpoints), or
// start_steps() sets up what a step needs (backend, data, model, AdamW, LR schedule: train's own set-up, with no run
// directory) and next_step() runs steps 1, 2, ... exactly as run() would, but never logged, validated or
// checkpointed (`tokamak profile`). Its internals are TrainingRun (training_run.h).
class Trainer {
 public:
  // comm: this rank's communicator in a data-parallel run (docs/distributed.md), nullptr for one process. Every rank
  // runs the same Trainer; rank 0 owns the run directory, its log and the model's weights in each checkpoint; with
  // start_steps() every rank calls next_step() as often as the others (each StepRecord with every rank's
  // communication and data wait).
  explicit Trainer(TrainConfig cfg, dist::Communicator* comm = nullptr, StepHooks hooks = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Called after each step is logged (tests and tools watch the run with it).
  std::function<void(const StepRecord&)> on_step;
  // Trains to cfg.steps, or until SIGINT, SIGTERM or SIGHUP (then saves and returns 130, 143 or 129 as exit_code).
  // A non-finite loss or gradient is a tk::Error that leaves the last checkpoint as it was; a failure after a step
  // (a log write on a full disk) is a tk::Error once that step is saved, or saying that it could not be.
  TrainResult run();

  // The steps alone: a tk::Error for a config that train would refuse, or one that asks to resume.
  void start_steps();
  StepRecord next_step();
  void print_plan() const;      // the model, batch, backend and memory lines train prints
  TrainConfig config() const;   // the run's record (absolute paths, batch_tokens filled in, --memory-budget's choice)
  const Recipe& recipe() const;  // what each step computes
  const Model& model() const;
  const ThroughputModel& throughput() const;
  bool gpu() const;
  int accumulation_steps() const;
  int64_t tokens_per_step() const;

 private:
  std::unique_ptr<TrainingRun> run_;
  int64_t step_ = 0;
};

// A step whose loss or gradient norm is not finite: the weights have diverged. The trainer records the step in
// log.jsonl (run_log.h) and stops, keeping the last checkpoint.
struct DivergedError : Error {
  DivergedError(const std::string& what, int64_t step, double loss, double grad_norm)
      : Error(what), step(step), loss(loss), grad_norm(grad_norm) {}
  int64_t step;
  double loss;       // NaN where the loss was not computed to its end
  double grad_norm;  // NaN where no gradient norm was computed
};

class DataParallel;

// What the update multiplies a step's gradients by so that they are those of the mean loss over the `trained` targets
// of the global batch, given that the backward scaled each token by 1 / `tokens` (accumulate_gradients): tokens /
// trained, or exactly 1 when every target is trained (unmasked data) or none is (the gradients are zero).
double trained_mean_multiplier(int64_t tokens, int64_t trained);

// One optimizer step's gradients on this rank: `micro_steps` batches from the loader, each backpropagated with
// grad_scale = 1 / (tokens in the global batch, `ranks` x micro_steps micro-batches), so the gradients accumulated
// (and, with `dp`, summed across the ranks in the last micro-batch's backward) are those of the mean loss over the
// global batch. A non-finite loss is a DivergedError naming the step and micro-batch. Returns this rank's loss, its
// count the trained targets (a loss mask's untrained ones left out: the step's update then rescales, train_step).
LossSum accumulate_gradients(Model& model, DataLoader& loader, int micro_steps, int64_t step,
                             DataParallel* dp = nullptr);

}  // namespace tk
