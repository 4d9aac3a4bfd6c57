// The trainer's steps: accumulate gradients, clip and update, log, validate, checkpoint, and stop cleanly on
// SIGINT, SIGTERM or SIGHUP (training_run.h; the set-up before the first step is training_run_setup.cpp). The
// files it keeps are run_dir.h's, its log run_log.h's.
#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/format.h"
#include "core/log.h"
#include "core/progress.h"
#include "io/hf.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "plan/memory_plan.h"
#include "plan/recipe.h"
#include "train/checkpoint.h"
#include "train/config_file.h"
#include "train/data_parallel.h"
#include "train/dataset.h"
#include "train/evaluate.h"
#include "train/model_source.h"
#include "train/run_dir.h"
#include "train/run_log.h"
#include "train/step_progress.h"
#include "train/stop_signals.h"
#include "train/training_run.h"

namespace tk {

double trained_mean_multiplier(int64_t tokens, int64_t trained) {
  return trained == tokens || trained == 0 ? 1.0 : double(tokens) / double(trained);
}

LossSum accumulate_gradients(Model& model, DataLoader& loader, int micro_steps, int64_t step, DataParallel* dp) {
  const ModelOptions& o = model.options();
  const int ranks = dp ? dp->world() : 1;
  const float grad_scale = float(1.0 / (double(micro_steps) * ranks * o.B * o.T));
  LossSum total;
  for (int micro = 0; micro < micro_steps; micro++) {
    if (dp && micro == micro_steps - 1) dp->reduce_next_backward();
    LossSum l = model.forward_backward(loader.next(), grad_scale);
    if (!std::isfinite(l.sum))
      throw DivergedError(fmt::format("training stopped: the loss is {} at step {} (micro-batch {} of {}). The "
                                      "weights have diverged: lower --lr or lengthen --warmup",
                                      l.sum, step, micro + 1, micro_steps),
                          step, l.sum, std::nan(""));
    total.sum += l.sum;
    total.count += l.count;
  }
  return total;
}

namespace {

std::string format_throughput(const StepMetrics& m, bool gpu) {
  if (m.mfu >= 0) return fmt::format("MFU {:5.1f}% HFU {:5.1f}%", 100 * m.mfu, 100 * m.hfu);
  return format_flop_rate(m.achieved_flops, gpu);
}

}  // namespace

StepRecord TrainingRun::train_step(int64_t step) {
  // What the communicator measured between the steps (validation, checkpoints, the stop decision) is not the step's.
  if (comm_) comm_->take_times();
  if (clocks_) clocks_->take();  // the samples since the last step are not this step's
  const Clock::time_point t0 = Clock::now();
  StepRecord r;
  r.step = step;
  LossSum loss = accumulate_gradients(*model_, *train_data_, recipe_.accumulation, step, dp_.get());
  if (dp_) loss = dp_->sum(loss);
  r.lr = schedule_.at(step);
  // The backward scaled each token's gradient by 1 / (the step's tokens); a loss mask leaves some out, and the mean
  // is over those trained on in the whole global batch (every rank's): the update takes the gradients times
  // tokens / trained. Unmasked data trains every token, and its update is bitwise what it was without a mask.
  OptimizerStep os = optimizer_->step(r.lr, trained_mean_multiplier(tokens_per_step(), loss.count));
  if (dp_) dp_->parameters_updated();
  if (!std::isfinite(os.grad_norm))
    throw DivergedError(fmt::format("training stopped: the gradient norm is {} at step {} (the loss was {:.4f}). The "
                                    "weights have diverged: lower --lr, lengthen --warmup or clip (--grad-clip)",
                                    os.grad_norm, step, loss.mean()),
                        step, loss.mean(), os.grad_norm);
  model_->zero_grads();
  backend_.ops->synchronize();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.loss = loss.mean();
  r.trained_tokens = loss.count;
  r.grad_norm = os.grad_norm;
  r.clip_scale = os.clip_scale;
  state_.step = step;
  state_.tokens_seen += tokens_per_step();
  r.tokens_seen = state_.tokens_seen;
  const double data_wait = train_data_->take_wait_seconds();
  r.metrics = throughput_->measure(tokens_per_step(), r.seconds, data_wait);
  if (comm_) r.communication = gather_step_communication(*comm_, data_wait);
  if (clocks_) r.clocks = clocks_->take();
  return r;
}

// Everything a finished step is followed by before its checkpoint: the log line and record, the memory table
// after the first step, the caller's hook, and a validation when one is due.
void TrainingRun::record_step(const StepRecord& r, bool first) {
  if (!r.communication.empty()) communication_.add(r.communication, r.seconds);
  run_clocks_ = merge_clocks(run_clocks_, r.clocks);
  if (!hot_noted_ && r.clocks.limit() == ClockLimit::Temperature) {
    // Once a run: heat is the one clock limit its owner can act on (docs/profile.md).
    log::warn("the GPU's temperature limit is holding its clock back ({}): every kernel runs that much slower; more "
              "airflow or cooling keeps the clock up", describe_clocks(r.clocks));
    hot_noted_ = true;
  }
  log_step(r);
  if (first) report_memory();
  if (on_step_) on_step_(r);
  if (cfg_.eval_tokens > 0 && due(cfg_.eval_every, r.step)) validate(r.step);
}

void TrainingRun::log_step(const StepRecord& r) {
  const StepMetrics& m = r.metrics;
  const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
  const std::string comm =
      r.communication.empty() ? "" : " | " + format_step_communication(r.communication.ranks[size_t(comm_->rank())]);
  const std::string pace = format_step_pace(progress_->after_step(r.step, r.seconds, elapsed));
  if (shows_step(r.step, cfg_.steps, cfg_.log_every)) {
    const std::string trained = r.trained_tokens == tokens_per_step()
                                    ? ""
                                    : fmt::format(" | trained {}", format_count(double(r.trained_tokens)));
    fmt::print("step {:>{}}/{} | loss {:.4f}{} | lr {:.2e} | grad {:.3f} | {:>9} tok/s | {} | data {:.2f}s{} | mem {} "
               "| {}\n",
               r.step, int(std::to_string(cfg_.steps).size()), cfg_.steps, r.loss, trained, r.lr, r.grad_norm,
               format_count(m.tokens_per_s), format_throughput(m, backend_.gpu), m.data_wait_s, comm,
               format_bytes(double(m.memory_bytes)), pace);
    std::fflush(stdout);
  }
  if (log_) log_->step(r, elapsed);
}

void TrainingRun::validate(int64_t step) {
  if (!val_data_) return;
  const Clock::time_point t0 = Clock::now();
  val_data_->restore(val_start_);
  // On stderr while it runs (a long validation is minutes on a CPU); erased before the result's line.
  ProgressBar bar(fmt::format("step {} validation", step), uint64_t(val_batches_ * recipe_.micro_tokens()), "tokens",
                  stderr, ProgressUnit::Items);
  LossSum l = evaluate(*model_, *val_data_, val_batches_, [&bar](int64_t tokens) { bar.add(uint64_t(tokens), 0); });
  bar.clear();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result_.val_loss = l.mean();
  fmt::print("step {} | val loss {:.4f} | val ppl {:.2f} | {} tokens in {:.1f}s\n", step, l.mean(),
             std::exp(l.mean()), l.count, seconds);
  std::fflush(stdout);
  if (log_) log_->validation(step, l, seconds);
}

void TrainingRun::write_checkpoint() {
  state_.loader = train_data_->state();
  state_.train_config = record().to_json();
  result_.checkpoint =
      save_checkpoint(dir_->path(), *model_, *optimizer_, state_, cfg_.keep_checkpoints, dp_.get());
  saved_step_ = state_.step;
}

void TrainingRun::save() {
  try {
    write_checkpoint();
  } catch (const Error& e) {
    fail("{}\nThe checkpoint of step {} could not be saved; the last complete checkpoint is {}.", e.what(), state_.step,
         last_checkpoint());
  }
  fmt::print("saved checkpoint {}\n", result_.checkpoint);
  std::fflush(stdout);
}

std::string TrainingRun::last_checkpoint() const {
  return result_.checkpoint.empty() ? "none (no checkpoint was written)" : result_.checkpoint;
}

// A step finished but what follows it failed (a log write on a full disk, the memory table, a validation): the
// step's work is saved when the disk allows, and the error says whether it was.
void TrainingRun::stop_after_failure(const std::string& what) {
  std::string outcome;
  if (saved_step_ == state_.step) {
    outcome = fmt::format("step {} is saved in {}", state_.step, result_.checkpoint);
  } else {
    try {
      write_checkpoint();
      outcome = fmt::format("its checkpoint was saved in {}", result_.checkpoint);
    } catch (const std::exception& e) {
      outcome = fmt::format("its checkpoint could not be saved either ({}); the last complete checkpoint is {}",
                            e.what(), last_checkpoint());
    }
  }
  fail("{}\nTraining stopped after step {}: {}. Once the cause is fixed, continue with: tokamak train --resume {}",
       what, state_.step, outcome, dir_->path());
}

TrainResult TrainingRun::train_loop() {
  StopSignals signals;
  const int64_t first_step = state_.step + 1;
  progress_.emplace(first_step, cfg_.steps);
  if (backend_.gpu) clocks_.emplace(std::chrono::milliseconds(50)).start();  // a long run: a lighter touch than 20 ms
  for (int64_t step = first_step; step <= cfg_.steps; step++) {
    StepRecord r;
    try {
      r = train_step(step);
    } catch (const DivergedError& e) {
      std::string unrecorded;
      try {
        if (log_) log_->diverged(e.step, e.loss, schedule_.at(step), e.grad_norm,
                       std::chrono::duration<double>(Clock::now() - started_).count());
      } catch (const Error& write) {
        unrecorded = fmt::format("\nThe log could not record it: {}", write.what());
      }
      fail("{}\nThe last good checkpoint is {}; nothing was saved after it.{}", e.what(), last_checkpoint(), unrecorded);
    } catch (const Error& e) {
      fail("{}\nThe last good checkpoint is {}; nothing was saved after it.", e.what(), last_checkpoint());
    }
    result_.step = step;
    result_.loss = r.loss;
    try {
      record_step(r, step == first_step);
    } catch (const std::exception& e) {
      stop_after_failure(e.what());
    }
    if (due(cfg_.save_every, step)) save();
    if (int sig = agreed_stop_signal(signals.received())) {
      if (saved_step_ != step) save();
      print_run_summaries();
      fmt::print("stopped by {} after step {}; continue with: tokamak train --resume {}\n", StopSignals::name(sig),
                 step, dir_->path());
      result_.exit_code = 128 + sig;
      return result_;
    }
  }
  print_run_summaries();
  fmt::print("done: {} steps, loss {:.4f}{} (unigram entropy {:.4f}); wall time {}; run directory {}\n", result_.step,
             result_.loss, result_.val_loss >= 0 ? fmt::format(", val loss {:.4f}", result_.val_loss) : "",
             unigram_nats_, format_duration(std::chrono::duration<double>(Clock::now() - started_).count()),
             dir_->path());
  return result_;
}

// The lines a run ends with: its communication (data parallel) and its GPU's clock over the steps.
void TrainingRun::print_run_summaries() const {
  if (!communication_.empty()) fmt::print("{}\n", communication_.line());
  if (!run_clocks_.empty()) fmt::print("GPU clock over the steps: {}\n", describe_clocks(run_clocks_));
  std::fflush(stdout);
}

// The stop decision of a step, the same on every rank: a signal seen by any rank stops them all after the same step
// (the lowest rank's signal names it).
int TrainingRun::agreed_stop_signal(int mine) const {
  if (!comm_) return mine;
  std::vector<int> all(static_cast<size_t>(world()));
  comm_->host_all_gather(&mine, all.data(), sizeof(int));
  for (int sig : all)
    if (sig != 0) return sig;
  return 0;
}

TrainResult TrainingRun::run() {
  set_up();
  if (state_.step >= cfg_.steps) {
    fmt::print("{} is already at step {} of {}: nothing to do (raise --steps to train further)\n", dir_->path(),
               state_.step, cfg_.steps);
    result_.step = state_.step;
    return result_;
  }
  return train_loop();
}

Trainer::Trainer(TrainConfig cfg, dist::Communicator* comm, StepHooks hooks)
    : run_(std::make_unique<TrainingRun>(std::move(cfg), on_step, std::move(hooks), comm)) {}
Trainer::~Trainer() = default;

TrainResult Trainer::run() { return run_->run(); }
void Trainer::start_steps() { run_->set_up_steps(); }
StepRecord Trainer::next_step() { return run_->train_step(++step_); }
void Trainer::print_plan() const { run_->print_plan(); }
TrainConfig Trainer::config() const { return run_->config(); }
const Recipe& Trainer::recipe() const { return run_->recipe(); }
const Model& Trainer::model() const { return run_->model(); }
const ThroughputModel& Trainer::throughput() const { return run_->throughput(); }
bool Trainer::gpu() const { return run_->gpu(); }
int Trainer::accumulation_steps() const { return run_->accumulation_steps(); }
int64_t Trainer::tokens_per_step() const { return run_->tokens_per_step(); }

}  // namespace tk
