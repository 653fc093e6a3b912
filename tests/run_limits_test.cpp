// RunLimits' failure rules (coordinator/run_limits.h): max_failed_trials
// and fail fast, counted over the trials of one run, with FAILs queued
// again as retries and warm-start copies left out.
#include "coordinator/run_limits.h"

#include <gtest/gtest.h>

#include <string>

#include "search/errors.h"

namespace hps {
namespace {

using Clock = RunLimits::Clock;

FrozenTrial ended(TrialState state, const std::string& reason = "") {
  FrozenTrial t;
  t.state = state;
  if (state == TrialState::kComplete) t.value = 1.0;
  t.fail_reason = reason;
  return t;
}

FrozenTrial retried_fail(const std::string& reason) {
  FrozenTrial t = ended(TrialState::kFail, reason);
  t.system_attrs[kAttrRetriedAs] = 7;
  return t;
}

// What the coordinator passes when nothing runs and the budget is not met.
RunProgress idle(std::int64_t finished) {
  RunProgress p;
  p.finished = finished;
  return p;
}

CoordinatorOptions with_budget(std::int64_t n_trials) {
  CoordinatorOptions o;
  o.n_trials = n_trials;
  return o;
}

TEST(RunLimitsFailures, FailFastStopsWhenTheFirstFiveTrialsAllFail) {
  const CoordinatorOptions o = with_budget(50);
  const auto now = Clock::now();
  RunLimits limits(o, now);
  for (int i = 0; i < 4; ++i) {
    limits.trial_ended(ended(TrialState::kFail, "exit code 2"));
    EXPECT_TRUE(limits.can_dispatch(now, 1, idle(i + 1))) << i;
    EXPECT_EQ(limits.done_reason(now, idle(i + 1)), "");
  }
  limits.trial_ended(ended(TrialState::kFail, "exit code 1\nImportError: no torch"));
  EXPECT_FALSE(limits.can_dispatch(now, 1, idle(5)));
  EXPECT_EQ(limits.failure_reason(),
            "the first 5 trials all failed; last reason: exit code 1 ImportError: no torch: the "
            "objective looks broken");
  // Running trials finish first; then the run ends with the reason.
  RunProgress running = idle(5);
  running.running = 1;
  EXPECT_EQ(limits.done_reason(now, running), "");
  EXPECT_EQ(limits.done_reason(now, idle(5)), limits.failure_reason());
  // A trial that was running succeeds: the run still ends.
  limits.trial_ended(ended(TrialState::kComplete));
  EXPECT_FALSE(limits.can_dispatch(now, 1, idle(6)));
  EXPECT_EQ(limits.outcomes().failed, 5);
  EXPECT_EQ(limits.outcomes().succeeded, 1);
}

TEST(RunLimitsFailures, FailFastLooksAtNTrialsWhenTheBudgetIsSmaller) {
  const CoordinatorOptions o = with_budget(2);
  EXPECT_EQ(fail_fast_trials(o), 2);
  EXPECT_EQ(fail_fast_trials(CoordinatorOptions{}), 5);  // no budget
  RunOutcomes out;
  out.add(ended(TrialState::kFail, "x"));
  EXPECT_EQ(failure_stop_reason(o, out), "");
  out.add(ended(TrialState::kFail, "x"));
  EXPECT_EQ(failure_stop_reason(o, out).rfind("the first 2 trials all failed", 0), 0u);
}

TEST(RunLimitsFailures, ASuccessTurnsFailFastOffForTheRun) {
  for (TrialState first : {TrialState::kComplete, TrialState::kPruned}) {
    const CoordinatorOptions o = with_budget(50);
    RunLimits limits(o, Clock::now());
    limits.trial_ended(ended(first));
    for (int i = 0; i < 20; ++i) limits.trial_ended(ended(TrialState::kFail, "boom"));
    EXPECT_EQ(limits.failure_reason(), "") << to_string(first);
    EXPECT_EQ(limits.outcomes().failed, 20);
    EXPECT_EQ(limits.outcomes().failed_before_success, 0);
  }
  // Four FAILs, then a success: never five before the first success.
  const CoordinatorOptions o = with_budget(50);
  RunOutcomes out;
  for (int i = 0; i < 4; ++i) out.add(ended(TrialState::kFail, "boom"));
  out.add(ended(TrialState::kComplete));
  for (int i = 0; i < 10; ++i) out.add(ended(TrialState::kFail, "boom"));
  EXPECT_EQ(failure_stop_reason(o, out), "");
}

TEST(RunLimitsFailures, NoFailFastRunsOn) {
  CoordinatorOptions o = with_budget(50);
  o.fail_fast = false;
  RunLimits limits(o, Clock::now());
  for (int i = 0; i < 30; ++i) limits.trial_ended(ended(TrialState::kFail, "boom"));
  EXPECT_EQ(limits.failure_reason(), "");
  EXPECT_TRUE(limits.can_dispatch(Clock::now(), 1, idle(30)));
}

TEST(RunLimitsFailures, RetriedFailsAndWarmStartCopiesDoNotCount) {
  const CoordinatorOptions o = with_budget(50);
  RunLimits limits(o, Clock::now());
  for (const char* why : {"worker lost", "worker stopped: SIGTERM", "interrupted",
                          "coordinator restarted", "worker lost", "worker lost"})
    limits.trial_ended(retried_fail(why));
  FrozenTrial copy = ended(TrialState::kComplete);
  copy.system_attrs[kAttrWarmStart] = "earlier.db";
  limits.trial_ended(copy);
  EXPECT_EQ(limits.outcomes().failed, 0);
  EXPECT_EQ(limits.outcomes().succeeded, 0);
  EXPECT_EQ(limits.failure_reason(), "");
  // A lost trial with no retry left is a FAIL of the run like any other.
  for (int i = 0; i < 5; ++i) limits.trial_ended(ended(TrialState::kFail, "worker lost"));
  EXPECT_NE(limits.failure_reason(), "");
}

TEST(RunLimitsFailures, MaxFailedTrialsCountsEveryFailOfTheRun) {
  CoordinatorOptions o = with_budget(50);
  o.max_failed_trials = 3;
  RunLimits limits(o, Clock::now());
  limits.trial_ended(ended(TrialState::kComplete));
  limits.trial_ended(ended(TrialState::kFail, "x > 0.5"));
  limits.trial_ended(ended(TrialState::kPruned));
  limits.trial_ended(ended(TrialState::kFail, "x > 0.5"));
  EXPECT_TRUE(limits.can_dispatch(Clock::now(), 1, idle(4)));
  limits.trial_ended(ended(TrialState::kFail, "x > 0.5"));
  EXPECT_FALSE(limits.can_dispatch(Clock::now(), 1, idle(5)));
  EXPECT_EQ(limits.done_reason(Clock::now(), idle(5)),
            "3 trials failed (budget.max_failed_trials)");
  o.max_failed_trials = 1;
  RunOutcomes one;
  one.add(ended(TrialState::kFail, "x"));
  EXPECT_EQ(failure_stop_reason(o, one), "1 trial failed (budget.max_failed_trials)");
}

TEST(RunLimitsFailures, TheReasonIsOneShortPrintableLine) {
  const CoordinatorOptions o = with_budget(1);
  auto reason_for = [&](const std::string& fail_reason) {
    RunOutcomes out;
    out.add(ended(TrialState::kFail, fail_reason));
    return failure_stop_reason(o, out);
  };
  // A program's failure: the first line and the error on the last.
  EXPECT_EQ(reason_for("the program failed (exit code 1); last lines of stderr:\nTraceback "
                       "(most recent call last):\n  File \"train.py\", line 1\nImportError: "
                       "no torch\n"),
            "the first trial failed; reason: the program failed (exit code 1); last "
            "lines of stderr: ... ImportError: no torch: the objective looks broken");
  EXPECT_EQ(reason_for("exit code 2\r\nbad flag --lrr"),
            "the first trial failed; reason: exit code 2 bad flag --lrr: the "
            "objective looks broken");
  EXPECT_EQ(reason_for(""),
            "the first trial failed; reason: (none given): the objective looks broken");
  // Long lines are cut, control bytes escaped.
  const std::string why = reason_for("\x1b[31m" + std::string(500, 'a'));
  EXPECT_EQ(why.find('\x1b'), std::string::npos) << why;
  // (its first 90 bytes, then " ... ", then its last 55)
  EXPECT_NE(why.find("\\x1b[31m" + std::string(85, 'a') + " ... " + std::string(55, 'a') +
                     ": the objective looks broken"),
            std::string::npos)
      << why;
  EXPECT_LT(why.size(), 250u);
}

TEST(RunLimitsFailures, AnInterruptIsReportedAsSuch) {
  const CoordinatorOptions o = with_budget(5);
  RunLimits limits(o, Clock::now());
  for (int i = 0; i < 5; ++i) limits.trial_ended(ended(TrialState::kFail, "boom"));
  RunProgress p = idle(5);
  p.stopping = true;
  EXPECT_EQ(limits.done_reason(Clock::now(), p), "interrupted");
  // The failure rule wins over the budget reached at the same time.
  EXPECT_EQ(limits.done_reason(Clock::now(), idle(5)).rfind("the first 5 trials", 0), 0u);
}

TEST(RunLimitsFailures, MaxFailedTrialsBelowOneIsRefused) {
  CoordinatorOptions o;
  o.max_failed_trials = 0;
  try {
    o.validate();
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "coordinator.max_failed_trials");
    EXPECT_NE(std::string(e.what()).find(">= 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hps
