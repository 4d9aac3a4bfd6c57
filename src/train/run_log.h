// RUN_DIR/log.jsonl: one JSON object a line, appended and flushed as each happens, so that `tokamak
// report` and other readers can follow a live run. A step's record:
//   step, loss, lr, grad_norm, clip_scale, tokens (seen after it), step_time_s, tokens_per_s, flops_per_s,
//   mfu, hfu (null when the peak is unknown), data_wait_s, memory_bytes, time (unix seconds), elapsed_s; in a
//   data-parallel run (a communicator, even of one rank) after data_wait_s (rank 0's, as the other fields):
//   data_wait_max_s, data_wait_max_rank, data_wait_by_rank_s (an array, in rank order), comm_s, comm_exposed_s,
//   comm_host_s, comm_collectives, comm_max_s, comm_max_rank, comm_exposed_max_s, comm_exposed_max_rank
//   (step_communication.h; docs/distributed.md says what each measures);
// a validation's: step, val_loss, val_tokens, val_time_s, time;
// and that of a step whose loss or gradient norm was not finite, the run's last: step, loss and grad_norm (null where
// not finite or not computed), lr, diverged (true), time, elapsed_s.
// Every record's numbers go to TensorBoard's event files too, when the run writes them (core/tensorboard_events.h):
// one scalar a field, named as in log.jsonl, at the record's step and time (its arrays, strings, flags and nulls
// stay in log.jsonl alone).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensorboard_events.h"
#include "model/model.h"
#include "train/trainer.h"

namespace tk {

class RunLog {
 public:
  // Appends to `path`, creating it when missing, and with `tensorboard_dir` to a new event file there. A record that
  // cannot be written (a full disk, a file size limit) is a tk::Error naming the file and the cause; the trainer then
  // saves what it can (trainer.cpp).
  explicit RunLog(const std::string& path, const std::string& tensorboard_dir = "");
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // elapsed_s: since the run (this process) started.
  void step(const StepRecord& r, double elapsed_s);
  void validation(int64_t step, const LossSum& loss, double seconds);
  void diverged(int64_t step, double loss, double lr, double grad_norm, double elapsed_s);

 private:
  void write(const nlohmann::ordered_json& record);

  std::string path_;
  int fd_ = -1;
  std::unique_ptr<EventFileWriter> events_;
};

// Where --tensorboard puts the event files: "" the run directory (`tensorboard --logdir runs` shows each run under
// its directory's name), "none" nowhere (""), else the directory given.
std::string tensorboard_dir(const std::string& flag, const std::string& run_dir);

// Whether --log-every N prints step `step` of `steps` on the terminal: the first, every N-th and the last.
inline bool shows_step(int64_t step, int64_t steps, int64_t every) {
  return every <= 1 || step == 1 || step % every == 0 || step == steps;
}

// Drops the records of steps after `step`: what a run resumed from that step will log again.
void truncate_run_log(const std::string& path, int64_t step);

// A step's GPU clock in a log record (`log.jsonl`, `tokamak bench --json`): sm_clock_mhz, power_w and
// clock_held_back_by (null when nothing held it back); nothing when the clock was not read.
template <class Json>
void add_clock_fields(Json& j, const ClockSummary& c) {
  if (c.empty()) return;
  j["sm_clock_mhz"] = c.sm_mhz_mean;
  j["power_w"] = c.power_w_mean;
  j["clock_held_back_by"] = c.limit() == ClockLimit::None ? Json(nullptr) : Json(c.held_back_by());
}

}  // namespace tk
