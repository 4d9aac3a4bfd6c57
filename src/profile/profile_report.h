// What `tokamak profile` reports: the per-op table, the step's totals, each rank's communication and data wait (data
// parallel), the advice and the measured timelines; the arithmetic that turns measured steps into the table and
// totals, and the three forms the report is written in (profile.json, a Chrome trace, the terminal table).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/gpu_clocks.h"
#include "profile/ceilings.h"
#include "profile/profiling_ops.h"
#include "train/step_communication.h"

namespace tk {

// One row of the op table: every call of one op in the measured steps, per step.
struct OpRow {
  std::string name;
  OpCategory category = OpCategory::Other;
  double calls = 0;           // per step
  double ms = 0;              // per step
  double share = 0;           // of the step's wall time
  double flops = 0, bytes = 0;  // per step
  double tflops = 0, gbps = 0;  // achieved: flops / ms, bytes / ms
  // Of the matmul ceiling when compute-bound, of the copy ceiling when memory-bound; at most 1. An op faster than its
  // ceiling (measured at another moment of a busy machine, or its bytes staying in cache where the copy's went to
  // memory) is above_ceiling and counted at 1, its own rate (tflops, gbps) left as measured: a share above 100% says
  // nothing about the op, and measuring the ceiling again on a shared machine draws another sample of the same noise.
  double ceiling_share = 0;
  bool above_ceiling = false;
  bool compute_bound = false; // FLOPs per byte at or above the ceilings' ratio
};

// Where a step's wall time goes, per step: step_ms = kernels + data_wait + communication + gaps + unexplained.
struct StepTotals {
  double step_ms = 0;         // the trainer's own clock
  double kernels_ms = 0;      // inside ops, on the backend's clock
  double data_wait_ms = 0;    // blocked waiting for the loader
  double communication_ms = 0;  // data parallel: the collectives the compute waited for and the host gathers
  double gaps_ms = 0;         // host and launch gaps: the step's timeline not covered by an op, the data wait or
                              // the communication
  double recompute_ms = 0;    // part of kernels_ms: the FLOPs the recompute policy repeats, at the matmuls' rate
  double unexplained_ms = 0;  // the host clock's step minus the timeline's (negative: ops overlapping the wait)
};

// One change to make, with the share of the step it should save and the measurements behind it.
struct Advice {
  std::string title;
  double payoff_pct = 0;  // estimated % of the step's time saved
  std::string detail;
  // False for a change tokamak cannot make yet (say, FP8 matmuls): it ranks after every change the user
  // can make now, whatever its payoff, since the first advice must be one to act on.
  bool actionable = true;
};

// One op call or data wait of a measured step, on the timeline (ms from the step's start).
struct TraceSpan {
  std::string name;
  std::string detail;  // shapes
  double start_ms = 0, dur_ms = 0;
  double flops = 0, bytes = 0;
  OpCategory category = OpCategory::Other;
  bool recompute = false;
};

struct MeasuredStep {
  double wall_ms = 0, timeline_ms = 0, data_wait_ms = 0;
  // Data parallel: this rank's exposed communication (the collectives its compute waited for and its host gathers),
  // which runs between ops; and every rank's communication and data wait (empty for one process).
  double communication_ms = 0;
  StepCommunication communication;
  double host_start_us = 0;          // from the first measured step's start, on the host clock
  std::vector<TraceSpan> ops, waits;
};

// What communication and input cost each rank over the measured steps of a run with a communicator (many ranks, or
// --gpus 1).
struct ProfileCommunication {
  std::string communicator;    // "mpi", "nccl"
  int zero_stage = 0;
  StepCommunication per_step;  // each rank's mean per measured step, in rank order

  int world_size() const { return int(per_step.ranks.size()); }
  RankPeak most_exposed() const { return per_step.peak(&RankStepTimes::comm_exposed_s); }
  RankPeak slowest_loader() const { return per_step.peak(&RankStepTimes::data_wait_s); }
};

struct ProfileReport {
  std::string device, backend, model, data_dir, mount_type;
  int steps = 0, micro_batch = 0, seq = 0, accumulation_steps = 0;
  int64_t tokens_per_step = 0;
  double tokens_per_s = 0, mfu = -1, hfu = -1, peak_tflops = 0;
  Ceilings ceilings;
  ClockSummary clocks;     // the GPU's clock and power over the measured steps (empty: not read)
  std::vector<OpRow> ops;  // by time, largest first
  StepTotals totals;
  // With a communicator; the op table and the totals are this rank's (rank 0's), the communication every rank's.
  std::optional<ProfileCommunication> communication;
  std::vector<Advice> advice;
  std::optional<Advice> largest_share;  // profile_advice.h's largest_share
  std::vector<MeasuredStep> measured;
};

// The per-op table and the totals of measured steps (pure arithmetic: tested on its own).
std::vector<OpRow> summarize_ops(const std::vector<MeasuredStep>& steps, double step_ms, const Ceilings& c);
StepTotals summarize_step(const std::vector<MeasuredStep>& steps, double recompute_flops_per_step,
                          const std::vector<OpRow>& ops);
// Each rank's communication and data wait, per step, over steps that carry them (a run with a communicator).
StepCommunication summarize_communication(const std::vector<MeasuredStep>& steps);

// One line on the GPU's clock and power over the measured steps, and what held the clock back ("" when not read).
std::string format_clocks(const ClockSummary& c);
nlohmann::ordered_json profile_json(const ProfileReport& r);     // profile.json, as docs/profile.md gives it
nlohmann::ordered_json trace_json(const ProfileReport& r);       // Chrome trace / Perfetto, "X" events
std::string format_profile(const ProfileReport& r);              // the terminal table, totals and advice
// Writes profile.json and trace.json into `dir` (created when missing).
void write_profile(const ProfileReport& r, const std::string& dir);

}  // namespace tk
