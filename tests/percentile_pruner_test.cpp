// PercentilePruner and MedianPruner on scripted learning curves. Every case
// runs for minimize and, with all values negated, for maximize: the
// decisions must be the same (mirror images).
#include "algorithms/percentile_pruner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/pruning_harness.h"

namespace hps {
namespace {

using testing::PruningHarness;

class PercentilePrunerTest : public ::testing::TestWithParam<StudyDirection> {
 protected:
  PruningHarness h{GetParam()};
};

MedianPrunerOptions no_startup() {
  MedianPrunerOptions o;
  o.n_startup_trials = 0;
  return o;
}

TEST_P(PercentilePrunerTest, PrunesWorseThanMedianOfCompletedTrials) {
  MedianPruner pruner(no_startup());
  h.add_finished({{0, 1.0}, {1, 0.8}, {2, 0.6}});
  h.add_finished({{0, 2.0}, {1, 1.8}, {2, 1.6}});
  h.add_finished({{0, 3.0}, {1, 2.8}, {2, 2.6}});
  // Medians by step: 2.0, 1.8, 1.6.
  auto bad = h.start();
  EXPECT_TRUE(h.report(pruner, bad, 0, 2.5));
  auto good = h.start();
  EXPECT_FALSE(h.report(pruner, good, 0, 1.9));
  // The best value so far (1.85) is compared, and it is worse than 1.8.
  EXPECT_TRUE(h.report(pruner, good, 1, 1.85));
  auto steady = h.start();
  EXPECT_FALSE(h.report(pruner, steady, 0, 1.5));
  // 1.9 at step 1 is worse than the median 1.8, but the best so far (1.5) is not.
  EXPECT_FALSE(h.report(pruner, steady, 1, 1.9));
  // Exactly the median is not worse: continue.
  auto tie = h.start();
  EXPECT_FALSE(h.report(pruner, tie, 0, 2.0));
}

TEST_P(PercentilePrunerTest, DirectionMatters) {
  // The same raw numbers judged under the other direction flip the answer:
  // a value above the median is bad when minimizing, good when maximizing.
  PruningHarness other(GetParam() == StudyDirection::kMinimize ? StudyDirection::kMaximize
                                                               : StudyDirection::kMinimize);
  for (auto* x : {&h, &other}) {
    MedianPruner pruner(no_startup());
    for (double v : {1.0, 2.0, 3.0}) x->add_finished({{0, h.sign() * x->sign() * v}});
    auto t = x->start();
    bool pruned = x->report(pruner, t, 0, h.sign() * x->sign() * 2.5);
    EXPECT_EQ(pruned, x == &h);
  }
}

TEST_P(PercentilePrunerTest, StartupTrialsCountOnlyCompleteTrials) {
  MedianPrunerOptions o;
  o.n_startup_trials = 2;
  MedianPruner pruner(o);
  h.add_finished({{0, 1.0}});
  h.add_finished({{0, 0.5}}, TrialState::kPruned);
  h.add_finished({{0, 0.5}}, TrialState::kFail);
  auto running = h.start();
  h.report(pruner, running, 0, 0.1);
  // One COMPLETE trial: still starting up, however bad the value.
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, 0, 100.0));
  h.add_finished({{0, 1.2}});
  auto u = h.start();
  EXPECT_TRUE(h.report(pruner, u, 0, 100.0));
}

TEST_P(PercentilePrunerTest, OnlyCompleteTrialsAreReferences) {
  MedianPruner pruner(no_startup());
  h.add_finished({{0, 10.0}});
  // Very good values of PRUNED, FAIL and RUNNING trials do not lower the bar.
  h.add_finished({{0, 0.1}}, TrialState::kPruned);
  h.add_finished({{0, 0.1}}, TrialState::kFail);
  auto running = h.start();
  h.storage().set_trial_intermediate_value(running->trial_id, 0, h.sign() * 0.1);
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, 0, 9.0));
}

TEST_P(PercentilePrunerTest, TrialsOfDifferentLengthsOnlyOneReachedTheStep) {
  // Only the first trial ran to step 9; the others stopped at step 2.
  h.add_finished({{0, 3.0}, {1, 2.0}, {2, 1.5}, {5, 1.0}, {8, 0.5}, {9, 0.45}});
  h.add_finished({{0, 9.0}, {1, 9.0}, {2, 9.0}});
  h.add_finished({{0, 8.0}, {1, 8.0}, {2, 8.0}});
  {
    MedianPruner pruner(no_startup());
    // At step 8 the one trial that got there is the whole reference: 0.5.
    auto worse = h.start();
    h.storage().set_trial_intermediate_value(worse->trial_id, 0, h.sign() * 0.9);
    EXPECT_TRUE(h.report(pruner, worse, 8, 0.6));
    auto better = h.start();
    EXPECT_FALSE(h.report(pruner, better, 8, 0.4));
    // Step 3 was reached by nobody: no reference, no pruning.
    auto lonely = h.start();
    EXPECT_FALSE(h.report(pruner, lonely, 3, 1000.0));
  }
  {
    MedianPrunerOptions o = no_startup();
    o.n_min_trials = 2;
    MedianPruner pruner(o);
    auto t = h.start();
    EXPECT_FALSE(h.report(pruner, t, 8, 0.6));  // one trial at step 8 < n_min_trials
    auto u = h.start();
    EXPECT_TRUE(h.report(pruner, u, 2, 9.5));  // three trials at step 2
  }
}

TEST_P(PercentilePrunerTest, NanReferenceValuesAreSkipped) {
  MedianPrunerOptions o = no_startup();
  o.n_min_trials = 2;
  MedianPruner pruner(o);
  h.add_finished({{0, 1.0}});
  h.add_finished({{0, std::numeric_limits<double>::quiet_NaN()}});
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, 0, 5.0));  // only one usable reference
  h.add_finished({{0, 2.0}});
  auto u = h.start();
  EXPECT_TRUE(h.report(pruner, u, 0, 5.0));
}

TEST_P(PercentilePrunerTest, WarmupSteps) {
  MedianPrunerOptions o = no_startup();
  o.n_warmup_steps = 2;
  MedianPruner pruner(o);
  h.add_finished(testing::flat(1.0, 0, 5));
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, 0, 5.0));
  EXPECT_FALSE(h.report(pruner, t, 1, 5.0));
  EXPECT_TRUE(h.report(pruner, t, 2, 5.0));
}

TEST_P(PercentilePrunerTest, IntervalStepsChecksFirstReportOfEachInterval) {
  MedianPrunerOptions o = no_startup();
  o.n_warmup_steps = 1;
  o.interval_steps = 3;  // intervals [1,4), [4,7), [7,10)
  MedianPruner pruner(o);
  MedianPruner every_step(no_startup());
  // The reference is strict (0.1) at steps 2, 3, 5, 6 and lenient (1.0) at
  // the interval starts 1, 4, 7.
  h.add_finished({{0, 1.0}, {1, 1.0}, {2, 0.1}, {3, 0.1}, {4, 1.0}, {5, 0.1}, {6, 0.1}, {7, 1.0}});
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, 0, 5.0));  // warm-up
  EXPECT_TRUE(h.report(pruner, t, 1, 5.0));   // first of [1,4): checked
  auto u = h.start();
  EXPECT_FALSE(h.report(pruner, u, 1, 0.5));  // checked, better than 1.0
  EXPECT_FALSE(h.report(pruner, u, 2, 0.5));  // second report of [1,4): skipped
  EXPECT_FALSE(h.report(pruner, u, 3, 0.5));
  EXPECT_FALSE(h.report(pruner, u, 4, 0.5));  // checked, better than 1.0
  EXPECT_FALSE(h.report(pruner, u, 5, 0.5));  // skipped
  // The same curve judged at every step is pruned at step 2.
  auto control = h.start();
  EXPECT_FALSE(h.report(every_step, control, 1, 0.5));
  EXPECT_TRUE(h.report(every_step, control, 2, 0.5));
  // Irregular steps: the first report in an interval is checked even when
  // it is not the interval's first step.
  auto w = h.start();
  EXPECT_TRUE(h.report(pruner, w, 2, 0.5));
  auto x = h.start();
  EXPECT_FALSE(h.report(pruner, x, 1, 0.5));
  EXPECT_TRUE(h.report(pruner, x, 5, 0.5));  // first report of [4,7)
}

TEST_P(PercentilePrunerTest, NanPrunesEvenDuringWarmupAndStartup) {
  MedianPrunerOptions o;
  o.n_startup_trials = 10;
  o.n_warmup_steps = 10;
  MedianPruner pruner(o);
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, 0, 1.0));
  EXPECT_TRUE(h.report(pruner, t, 1, std::numeric_limits<double>::quiet_NaN()));
}

TEST_P(PercentilePrunerTest, PercentileFromTheBestEnd) {
  PercentilePrunerOptions o;
  o.percentile = 25.0;
  o.n_startup_trials = 0;
  PercentilePruner pruner(o);
  for (double v : {1.0, 2.0, 3.0, 4.0}) h.add_finished({{0, v}});
  // The 25th percentile from the best end of {1, 2, 3, 4} is 1.75.
  auto t = h.start();
  EXPECT_TRUE(h.report(pruner, t, 0, 1.8));
  auto u = h.start();
  EXPECT_FALSE(h.report(pruner, u, 0, 1.7));
  // At 100 only the worst value is the bar; at 0 the best.
  o.percentile = 100.0;
  PercentilePruner lenient(o);
  auto w = h.start();
  EXPECT_FALSE(h.report(lenient, w, 0, 3.9));
  o.percentile = 0.0;
  PercentilePruner strict(o);
  auto x = h.start();
  EXPECT_TRUE(h.report(strict, x, 0, 1.1));
}

TEST_P(PercentilePrunerTest, StepNotReportedContinues) {
  MedianPruner pruner(no_startup());
  h.add_finished({{0, 1.0}});
  auto t = h.start();
  EXPECT_FALSE(h.ask(pruner, t, 0));
}

INSTANTIATE_TEST_SUITE_P(Directions, PercentilePrunerTest,
                         ::testing::Values(StudyDirection::kMinimize, StudyDirection::kMaximize),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(PercentilePrunerOptionsTest, ValidateNamesTheField) {
  PercentilePrunerOptions o;
  o.percentile = 101;
  try {
    o.validate("pruner");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "pruner.percentile");
  }
  o = {};
  o.interval_steps = 0;
  EXPECT_THROW(PercentilePruner{o}, ConfigError);
  o = {};
  o.n_min_trials = 0;
  EXPECT_THROW(PercentilePruner{o}, ConfigError);
  o = {};
  o.percentile = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(PercentilePruner{o}, ConfigError);
}

}  // namespace
}  // namespace hps
