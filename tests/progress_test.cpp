// The progress line's estimate of the time left (cli/progress.h).
#include "cli/progress.h"

#include <gtest/gtest.h>

namespace hps::cli {
namespace {

TEST(ProgressTest, TimeLeftCountsTheRateFromTheFirstDispatch) {
  ProgressState s;
  s.n_trials = 10;
  // No estimate before a trial of this run finished.
  EXPECT_FALSE(time_left_s(s, 5.0));
  // Two trials done 12 s in, the first dispatched 10 s in (the wait for the
  // first worker): 1 s a trial, 8 left. Counted from the start it said 48 s.
  s.finished = 2;
  s.work_started_s = 10.0;
  ASSERT_TRUE(time_left_s(s, 12.0));
  EXPECT_DOUBLE_EQ(*time_left_s(s, 12.0), 8.0);
  s.work_started_s.reset();
  EXPECT_DOUBLE_EQ(*time_left_s(s, 12.0), 48.0);
  // A resumed study: its earlier trials took none of this run's time.
  s.finished_before = 1;
  s.work_started_s = 2.0;
  EXPECT_DOUBLE_EQ(*time_left_s(s, 6.0), 32.0);
  // A time budget caps the estimate; alone it is the estimate.
  s.timeout_s = 20.0;
  EXPECT_DOUBLE_EQ(*time_left_s(s, 6.0), 14.0);
  s.n_trials.reset();
  EXPECT_DOUBLE_EQ(*time_left_s(s, 25.0), 0.0);
  // The budget reached: nothing left to estimate from the rate.
  ProgressState done;
  done.n_trials = 4;
  done.finished = 4;
  EXPECT_FALSE(time_left_s(done, 3.0));
}

}  // namespace
}  // namespace hps::cli
