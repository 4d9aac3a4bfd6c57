// What a data-parallel step's communication and data wait read as: the largest and smallest over the ranks and
// which rank, the step line's short form, the run's summary line from hand-made steps, and what a communicator of one
// rank (MPI, no launcher) measures and hands the gather.
#include "train/step_communication.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "dist/mpi_communicator.h"

namespace tk {
namespace {

// One rank's times of a step with 3 collectives (comm, exposed, host gathers, data wait in seconds).
RankStepTimes times(double comm, double exposed, double host, double wait) { return {comm, exposed, host, wait, 3}; }

TEST(StepCommunication, PeakAndLeastNameTheRankAndTheLowestAmongEquals) {
  const StepCommunication s{{times(0.1, 0.02, 0, 0.5), times(0.3, 0.02, 0, 0.1), times(0.2, 0.01, 0, 0.1)}};
  EXPECT_DOUBLE_EQ(s.peak(&RankStepTimes::comm_s).seconds, 0.3);
  EXPECT_EQ(s.peak(&RankStepTimes::comm_s).rank, 1);
  EXPECT_EQ(s.peak(&RankStepTimes::comm_exposed_s).rank, 0);  // ranks 0 and 1 tie
  EXPECT_EQ(s.peak(&RankStepTimes::data_wait_s).rank, 0);
  EXPECT_DOUBLE_EQ(s.least(&RankStepTimes::data_wait_s).seconds, 0.1);
  EXPECT_EQ(s.least(&RankStepTimes::data_wait_s).rank, 1);
}

TEST(StepCommunication, StepLineGivesMillisecondsInOneUnit) {
  EXPECT_EQ(format_step_communication(times(0.01234, 0.0031, 0, 0)), "comm 12 ms (3 exposed)");
  EXPECT_EQ(format_step_communication(times(0.0042, 0.00042, 0, 0)), "comm 4.2 ms (0.4 exposed)");
  EXPECT_EQ(format_step_communication(times(0.00042, 0, 0, 0)), "comm 0.42 ms (0.00 exposed)");
}

TEST(StepCommunication, SummarySumsTheStepsPerRank) {
  CommunicationSummary sum;
  EXPECT_TRUE(sum.empty());
  EXPECT_EQ(sum.line(), "");
  sum.add({{times(0.050, 0.010, 0.001, 0.000020), times(0.040, 0.020, 0.002, 0.010)}}, 1.0);
  sum.add({{times(0.070, 0.010, 0.001, 0.000020), times(0.060, 0.040, 0.002, 0.010)}}, 1.0);
  EXPECT_FALSE(sum.empty());
  EXPECT_EQ(sum.line(),
            "communication over 2 steps: collectives 120.0 ms on rank 0, 20.0 ms of it exposed (1.0% of the step time; "
            "the most exposed rank 1, 60.0 ms, 3.0%); host gathers 2.0 ms; data wait per rank 40 µs (rank 0) to "
            "20.0 ms (rank 1, the slowest)");
  const StepCommunication mean = sum.per_step();  // the profile's per-step figures
  ASSERT_EQ(mean.ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(mean.ranks[0].comm_s, 0.060);
  EXPECT_DOUBLE_EQ(mean.ranks[1].comm_exposed_s, 0.030);
  EXPECT_DOUBLE_EQ(mean.ranks[1].comm_host_s, 0.002);
  EXPECT_DOUBLE_EQ(mean.ranks[0].data_wait_s, 0.000020);
  EXPECT_EQ(mean.ranks[1].collectives, 3);
  EXPECT_THROW(sum.add({{times(0, 0, 0, 0)}}, 1.0), Error) << "a step of another world size";
}

// One rank without MPI: every collective is timed on the calling thread, all of it exposed; host_all_gather goes to
// the host bucket only; take_times starts again from zero.
TEST(StepCommunication, OneRankCommunicatorTimesItsCollectivesAndGathers) {
  const std::unique_ptr<dist::Communicator> comm = dist::make_mpi_communicator(dist::World{}, false);
  std::vector<float> v(1 << 16, 1.0f);
  const Tensor t(v.data(), DType::F32, {int64_t(v.size())});
  comm->all_reduce(t, t, dist::ReduceOp::Sum);
  comm->barrier();
  const dist::CommunicationTimes first = comm->take_times();
  EXPECT_EQ(first.collectives, 2);
  EXPECT_GT(first.collective_s, 0);
  EXPECT_DOUBLE_EQ(first.exposed_s, first.collective_s);
  EXPECT_EQ(first.host_s, 0);

  const StepCommunication step = gather_step_communication(*comm, 0.25);
  ASSERT_EQ(step.ranks.size(), 1u);
  EXPECT_EQ(step.ranks[0].collectives, 0);
  EXPECT_EQ(step.ranks[0].comm_s, 0);
  EXPECT_DOUBLE_EQ(step.ranks[0].data_wait_s, 0.25);
  const dist::CommunicationTimes after = comm->take_times();  // the gather itself, in the host bucket
  EXPECT_EQ(after.collectives, 0);
  EXPECT_GT(after.host_s, 0);
  EXPECT_EQ(after.collective_s, 0);
}

}  // namespace
}  // namespace tk
