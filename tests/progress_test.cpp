// The progress line's estimate of the time left (cli/progress.h) and how
// durations are spelled (cli/table.h).
#include "cli/progress.h"

#include <gtest/gtest.h>

#include <limits>

#include "cli/table.h"

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

// A time budget takes any number > 0 (up to 1.8e308 s); from about 9.2e18 s
// its hours overflowed a 64-bit count, so a progress line showed "~-30m-8s
// left" and status "timeout -30m-8s a run". Durations of 100 years or more
// are spelled as such; a budget as set is shown exactly, in seconds.
TEST(ProgressTest, AHugeTimeBudgetIsNeverShownNegative) {
  EXPECT_EQ(format_duration(3723.0), "1h02m03s");
  EXPECT_EQ(format_duration(3.0e9), "833333h20m00s");  // 95 years: spelled out
  for (double s :
       {kMaxSpelledSeconds, 9.2e18, 9.3e18, 1e20, 1e308, std::numeric_limits<double>::max()})
    EXPECT_EQ(format_duration(s), "more than 100 years") << s;
  EXPECT_EQ(format_set_seconds(3600.0), "1h00m00s");
  EXPECT_EQ(format_set_seconds(9.3e18), "9.3e+18s");
  EXPECT_EQ(format_set_seconds(1e308), "1e+308s");
  ProgressState s;
  s.timeout_s = 1e308;
  ASSERT_TRUE(time_left_s(s, 5.0));
  EXPECT_EQ(format_duration(*time_left_s(s, 5.0)), "more than 100 years");
}

}  // namespace
}  // namespace hps::cli
