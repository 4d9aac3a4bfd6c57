// Gathering each rank's communication and data-wait times once per step, and how they print (step_communication.h).
#include "train/step_communication.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/format.h"

namespace tk {

static_assert(std::is_trivially_copyable_v<RankStepTimes>, "RankStepTimes is gathered as bytes");

namespace {

// The rank whose `field` is the largest (`larger`) or the smallest; the lowest rank among equals.
RankPeak extreme(const std::vector<RankStepTimes>& ranks, double RankStepTimes::*field, bool larger) {
  RankPeak p;
  for (size_t r = 0; r < ranks.size(); r++) {
    const double v = ranks[r].*field;
    if (r == 0 || (larger ? v > p.seconds : v < p.seconds)) p = {v, int(r)};
  }
  return p;
}

double percent(double part, double whole) { return whole > 0 ? 100 * part / whole : 0; }

}  // namespace

RankPeak StepCommunication::peak(double RankStepTimes::*field) const { return extreme(ranks, field, true); }
RankPeak StepCommunication::least(double RankStepTimes::*field) const { return extreme(ranks, field, false); }

StepCommunication gather_step_communication(dist::Communicator& comm, double data_wait_s) {
  const dist::CommunicationTimes t = comm.take_times();
  RankStepTimes mine;
  mine.comm_s = t.collective_s;
  mine.comm_exposed_s = t.exposed_s;
  mine.comm_host_s = t.host_s;
  mine.data_wait_s = data_wait_s;
  mine.collectives = t.collectives;
  StepCommunication step;
  step.ranks.resize(size_t(comm.world_size()));
  comm.host_all_gather(&mine, step.ranks.data(), sizeof(RankStepTimes));
  return step;
}

std::string format_step_communication(const RankStepTimes& t) {
  const double comm_ms = 1000 * t.comm_s, exposed_ms = 1000 * t.comm_exposed_s;
  const int decimals = comm_ms >= 10 ? 0 : comm_ms >= 1 ? 1 : 2;
  return fmt::format("comm {:.{}f} ms ({:.{}f} exposed)", comm_ms, decimals, exposed_ms, decimals);
}

void CommunicationSummary::add(const StepCommunication& step, double step_s) {
  if (totals_.empty()) totals_.resize(step.ranks.size());
  TK_CHECK(step.ranks.size() == totals_.size(), "internal error: a step of {} ranks in a run of {}", step.ranks.size(),
           totals_.size());
  for (size_t r = 0; r < totals_.size(); r++) {
    RankStepTimes& total = totals_[r];
    const RankStepTimes& s = step.ranks[r];
    total.comm_s += s.comm_s;
    total.comm_exposed_s += s.comm_exposed_s;
    total.comm_host_s += s.comm_host_s;
    total.data_wait_s += s.data_wait_s;
    total.collectives += s.collectives;
  }
  step_s_ += step_s;
  steps_++;
}

StepCommunication CommunicationSummary::per_step() const {
  StepCommunication mean{totals_};
  const double n = double(std::max<int64_t>(steps_, 1));
  for (RankStepTimes& r : mean.ranks) {
    r.comm_s /= n;
    r.comm_exposed_s /= n;
    r.comm_host_s /= n;
    r.data_wait_s /= n;
    r.collectives = std::llround(double(r.collectives) / n);
  }
  return mean;
}

std::string CommunicationSummary::line() const {
  if (steps_ == 0) return "";
  const StepCommunication run{totals_};
  const RankStepTimes& first = totals_.front();
  const RankPeak exposed = run.peak(&RankStepTimes::comm_exposed_s);
  const RankPeak slowest = run.peak(&RankStepTimes::data_wait_s), fastest = run.least(&RankStepTimes::data_wait_s);
  return fmt::format(
      "communication over {} step{}: collectives {} on rank 0, {} of it exposed ({:.1f}% of the step time; the most "
      "exposed rank {}, {}, {:.1f}%); host gathers {}; data wait per rank {} (rank {}) to {} (rank {}, the slowest)",
      steps_, steps_ == 1 ? "" : "s", format_short_duration(first.comm_s), format_short_duration(first.comm_exposed_s),
      percent(first.comm_exposed_s, step_s_), exposed.rank, format_short_duration(exposed.seconds),
      percent(exposed.seconds, step_s_), format_short_duration(first.comm_host_s),
      format_short_duration(fastest.seconds), fastest.rank, format_short_duration(slowest.seconds), slowest.rank);
}

}  // namespace tk
