// One training run, the trainer's internals (trainer.h's Trainer is its interface): the set-up before the first step
// (training_run_setup.cpp: configuration, backend, recipe, data, model, optimizer, resume, the printed plan) and
// the steps and what follows each (trainer.cpp).
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "data/loader.h"
#include "model/model.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "plan/memory_plan.h"
#include "plan/metrics.h"
#include "plan/recipe.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/dataset.h"
#include "train/model_source.h"
#include "train/run_dir.h"
#include "train/run_log.h"
#include "train/step_progress.h"
#include "train/trainer.h"

namespace tk {

namespace stdfs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

class TrainingRun {
 public:
  TrainingRun(TrainConfig cfg, const std::function<void(const StepRecord&)>& on_step, StepHooks hooks = {},
              dist::Communicator* comm = nullptr)
      : cfg_(std::move(cfg)), on_step_(on_step), hooks_(std::move(hooks)), comm_(comm) {}

  TrainResult run();

  // For Trainer::start_steps: the parts a step needs, and nothing in the run directory.
  void set_up_steps();
  void print_plan() const;
  StepRecord train_step(int64_t step);
  TrainConfig config() const { return record(); }
  const Recipe& recipe() const { return recipe_; }
  const Model& model() const { return *model_; }
  const ThroughputModel& throughput() const { return *throughput_; }
  bool gpu() const { return backend_.gpu; }
  int accumulation_steps() const { return recipe_.accumulation; }
  int64_t tokens_per_step() const { return recipe_.micro_tokens() * recipe_.accumulation * world(); }

 private:
  void set_up();
  TrainResult train_loop();
  void resolve_config();
  std::string resume_source() const;
  void require_resume_source() const;
  std::string find_resume_checkpoint() const;
  void build_parts();
  void refuse_a_model_larger_than_the_machine() const;
  void open_data();
  void check_tokenizer();
  void choose_vocab();
  void resize_vocab();
  void apply_memory_budget();
  void require_the_same_choice() const;
  void refuse_what_data_parallelism_lacks() const;
  void build_model();
  void resume_from(const std::string& checkpoint);
  void warn_recipe_changes(const json& saved) const;
  TrainConfig record() const;
  void write_run_config() const;
  void record_step(const StepRecord& r, bool first);
  void log_step(const StepRecord& r);
  void print_run_summaries() const;
  void report_memory() const;
  void validate(int64_t step);
  void write_checkpoint();
  void save();
  [[noreturn]] void stop_after_failure(const std::string& what);
  std::string last_checkpoint() const;
  // every > 0: each `every` steps and the last; 0: the last step only; < 0: never.
  bool due(int64_t every, int64_t step) const {
    return every >= 0 && (step == cfg_.steps || (every > 0 && step % every == 0));
  }

  // Rank 0 of a data-parallel run (or the one process): the one that owns the run directory and its files.
  bool leader() const { return comm_ == nullptr || comm_->rank() == 0; }
  int world() const { return comm_ ? comm_->world_size() : 1; }
  int agreed_stop_signal(int mine) const;

  TrainConfig cfg_;  // the flags as given: what the recipe and the schedule are built from, and the record's base
  const std::function<void(const StepRecord&)>& on_step_;
  StepHooks hooks_;
  dist::Communicator* comm_;  // nullptr: one process
  std::optional<RunDir> dir_;  // from set_up(): the steps alone have none
  std::optional<RunDirLock> lock_;

  Backend backend_;  // before what holds its memory (the loaders' batches, the model), so destroyed after it
  DatasetMeta meta_;
  std::unique_ptr<DataLoader> train_data_, val_data_;
  json val_start_;              // the validation loader's initial state: every validation reads the same windows
  int64_t val_batches_ = 0;
  std::string tokenizer_path_;

  ModelSource source_;
  Recipe recipe_;  // what each step computes: the model, batch, precision, recompute, offload, AdamW (recipe.h)
  std::unique_ptr<Model> model_;
  std::unique_ptr<DataParallel> dp_;  // with a communicator
  std::unique_ptr<AdamW> optimizer_;
  LrSchedule schedule_;
  std::optional<ThroughputModel> throughput_;
  std::unique_ptr<RunLog> log_;

  TrainerState state_;
  TrainResult result_;
  int64_t saved_step_ = -1;  // the step of the last checkpoint written
  double unigram_nats_ = 0;  // the training split's unigram entropy: the bar the loss must go below
  Clock::time_point started_;
  std::optional<StepProgress> progress_;  // from the loop's start: the step lines' elapsed time and ETA
  CommunicationSummary communication_;    // data parallel: the run's communication and data wait, for its last line
  std::optional<ClockSampler> clocks_;    // on a GPU, in the training loop: each step's clock and power, for its record
  ClockSummary run_clocks_;               // ... over the steps so far, for the run's last lines
  bool hot_noted_ = false;                // the temperature limit's warning was given
};

}  // namespace tk
