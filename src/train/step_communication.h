// What communication and input cost each rank of a data-parallel run (docs/distributed.md, "What communication
// costs"): per step, every rank's communicator times and loader wait, gathered on every rank in rank order; the step
// line's short form of them; and the run's totals for the summary line at its end, or a profile's means per step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace tk {

// One rank's measurements of one step, in seconds (gathered as bytes: plain numbers only).
struct RankStepTimes {
  double comm_s = 0;          // the collectives' time on the communicator's queue (CommunicationTimes::collective_s)
  double comm_exposed_s = 0;  // the part of it the compute waited for
  double comm_host_s = 0;     // the host's synchronous gathers (loss and norm sums), apart from the two above
  double data_wait_s = 0;     // the training loop blocked waiting for its next batch from the loader
  int64_t collectives = 0;    // the collectives comm_s is the time of
};

// The largest value of one measurement over the ranks, and the rank that had it (the lowest among equals).
struct RankPeak {
  double seconds = 0;
  int rank = 0;
};

// Every rank's measurements of one step, in rank order (empty in a run of one process).
struct StepCommunication {
  std::vector<RankStepTimes> ranks;

  bool empty() const { return ranks.empty(); }
  RankPeak peak(double RankStepTimes::*field) const;
  RankPeak least(double RankStepTimes::*field) const;
};

// The step's communicator times and this rank's `data_wait_s`, gathered from every rank (host_all_gather: every rank
// calls it once per step, at the same point). The times are those since the communicator's last take_times().
StepCommunication gather_step_communication(dist::Communicator& comm, double data_wait_s);

// The step line's part: "comm 12 ms (3 exposed)" for one rank's times.
std::string format_step_communication(const RankStepTimes& t);

// The run's totals, step after step, for the line that ends it (and `tokamak profile`'s means per step).
class CommunicationSummary {
 public:
  // step_s: the step's wall time (rank 0's, which every rank's matches to within the step's last collective).
  void add(const StepCommunication& step, double step_s);
  bool empty() const { return steps_ == 0; }
  // Each rank's mean per step (the collectives rounded to the nearest whole one).
  StepCommunication per_step() const;
  // "communication over 4 steps: collectives 120.0 ms on rank 0, 50.0 ms of it exposed (3.1% of the step time; the
  // most exposed rank 1, 60.0 ms, 3.6%); host gathers 10.0 ms; data wait per rank 40 µs (rank 1) to 20.0 ms (rank 0,
  // the slowest)".
  std::string line() const;

 private:
  std::vector<RankStepTimes> totals_;  // per rank, summed over the steps
  double step_s_ = 0;
  int64_t steps_ = 0;
};

}  // namespace tk
