// A training run's pace and ETA, as its step lines show them: measured from the end of the first step this
// process ran (which pays for warming up), validations between steps included, and counted to the run's last step.
#include "train/step_progress.h"

#include <gtest/gtest.h>

namespace tk {
namespace {

TEST(StepProgress, PaceIsMeasuredAfterTheFirstStep) {
  StepProgress p(1, 101);
  StepPace first = p.after_step(1, 5.0, 7.0);  // 2 s of set-up, then a slow first step
  EXPECT_DOUBLE_EQ(first.elapsed_s, 7.0);
  EXPECT_DOUBLE_EQ(first.seconds_per_step, 5.0);
  EXPECT_DOUBLE_EQ(first.eta_s, 500.0);
  p.after_step(2, 1.0, 8.0);
  const StepPace third = p.after_step(3, 1.0, 11.0);  // a 2 s validation after step 2
  EXPECT_DOUBLE_EQ(third.seconds_per_step, 2.0);
  EXPECT_DOUBLE_EQ(third.eta_s, 2.0 * 98);
  EXPECT_DOUBLE_EQ(p.after_step(101, 1.0, 209.0).eta_s, 0.0);
}

TEST(StepProgress, ResumedRunCountsFromItsFirstStep) {
  StepProgress p(51, 100);
  p.after_step(51, 0.5, 3.0);
  const StepPace s = p.after_step(61, 0.25, 5.5);
  EXPECT_DOUBLE_EQ(s.seconds_per_step, 0.25);
  EXPECT_DOUBLE_EQ(s.eta_s, 0.25 * 39);
}

TEST(StepProgress, LineShowsElapsedEtaAndPace) {
  EXPECT_EQ(format_step_pace({187, 1.21, 850}), "3:07 elapsed, ETA 14:10 (1.21 s/step)");
  EXPECT_EQ(format_step_pace({12, 0.25, 30}), "12s elapsed, ETA 30s (4.0 steps/s)");
}

}  // namespace
}  // namespace tk
