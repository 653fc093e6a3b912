// Tests of search/trial_lifecycle.h, one rule at a time: tell rules,
// objective outcomes, enqueued params, retries (structured retry_cause and
// the fallback for stores written before it), the best trial and
// define-by-run suggest.
#include "search/trial_lifecycle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "search/errors.h"
#include "search/storage.h"

namespace hps::lifecycle {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::function<std::optional<double>()> last_is(std::optional<double> v) {
  return [v] { return v; };
}

// ------------------------------------------------------------ tell rules

TEST(LifecycleTellRules, CompleteKeepsItsValue) {
  TrialEnd e = resolve_end(TrialState::kComplete, 1.5, "", {});
  EXPECT_EQ(e.state, TrialState::kComplete);
  EXPECT_EQ(e.value, 1.5);
  EXPECT_EQ(e.fail_reason, "");
  EXPECT_EQ(resolve_end(TrialState::kComplete, -kInf, "", {}).value, -kInf);
}

TEST(LifecycleTellRules, CompleteNeedsAValueAndNaNFails) {
  EXPECT_THROW(resolve_end(TrialState::kComplete, std::nullopt, "", {}), Error);
  TrialEnd e = resolve_end(TrialState::kComplete, kNaN, "", {});
  EXPECT_EQ(e.state, TrialState::kFail);
  EXPECT_FALSE(e.value);
  EXPECT_EQ(e.fail_reason, "objective returned NaN");
  EXPECT_EQ(resolve_end(TrialState::kComplete, kNaN, "why", {}).fail_reason, "why");
}

TEST(LifecycleTellRules, OnlyFinishedStatesMayBeTold) {
  EXPECT_THROW(resolve_end(TrialState::kRunning, 1.0, "", {}), Error);
  EXPECT_THROW(resolve_end(TrialState::kWaiting, 1.0, "", {}), Error);
}

TEST(LifecycleTellRules, PrunedTakesTheLastIntermediateValueOnlyWhenItHasNone) {
  int calls = 0;
  auto counting = [&]() -> std::optional<double> {
    ++calls;
    return 0.25;
  };
  TrialEnd e = resolve_end(TrialState::kPruned, std::nullopt, "", counting);
  EXPECT_EQ(e.state, TrialState::kPruned);
  EXPECT_EQ(e.value, 0.25);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(resolve_end(TrialState::kPruned, 3.0, "", counting).value, 3.0);
  EXPECT_EQ(calls, 1);  // not asked when a value is given
  EXPECT_FALSE(resolve_end(TrialState::kPruned, std::nullopt, "", last_is(std::nullopt)).value);
  EXPECT_FALSE(resolve_end(TrialState::kPruned, std::nullopt, "", last_is(kNaN)).value);
  EXPECT_FALSE(resolve_end(TrialState::kPruned, kNaN, "", last_is(1.0)).value);
  EXPECT_EQ(resolve_end(TrialState::kPruned, std::nullopt, "", last_is(1.0)).fail_reason, "");
}

TEST(LifecycleTellRules, FailHasNoValueAndAlwaysAReason) {
  TrialEnd e = resolve_end(TrialState::kFail, 2.0, "boom", {});
  EXPECT_EQ(e.state, TrialState::kFail);
  EXPECT_FALSE(e.value);
  EXPECT_EQ(e.fail_reason, "boom");
  EXPECT_EQ(resolve_end(TrialState::kFail, std::nullopt, "", {}).fail_reason,
            "objective returned NaN");
}

// ------------------------------------------------------------ outcomes

class NullBackend : public TrialBackend {
 public:
  Json suggest(Trial&, const std::string&, const Distribution&) override { return 0.5; }
  bool report(Trial&, std::int64_t, double) override { return true; }
  bool should_prune(Trial&) override { return false; }
  void set_user_attr(Trial&, const std::string&, const Json&) override {}
};

Outcome run(const Objective& objective) {
  NullBackend backend;
  Trial trial(&backend, 1, 0, {}, {}, {}, nullptr);
  return run_objective(objective, trial);
}

TEST(LifecycleOutcome, EachWayAnObjectiveEndsMapsToOneEnd) {
  Outcome v = run([](Trial&) { return 2.0; });
  EXPECT_EQ(v.kind, OutcomeKind::kValue);
  EXPECT_EQ(v.value, 2.0);
  EXPECT_EQ(requested_end(v).state, TrialState::kComplete);
  EXPECT_EQ(requested_end(v).value, 2.0);

  Outcome nan = run([](Trial&) { return kNaN; });
  EXPECT_EQ(nan.kind, OutcomeKind::kValue);
  TrialEnd asked = requested_end(nan);
  TrialEnd told = resolve_end(asked.state, asked.value, asked.fail_reason, {});
  EXPECT_EQ(told.state, TrialState::kFail);
  EXPECT_EQ(told.fail_reason, "objective returned NaN");

  Outcome pruned = run([](Trial&) -> double { throw TrialPruned(); });
  EXPECT_EQ(pruned.kind, OutcomeKind::kPruned);
  EXPECT_EQ(requested_end(pruned).state, TrialState::kPruned);
  EXPECT_FALSE(requested_end(pruned).value);

  Outcome stopped = run([](Trial&) -> double { throw Interrupted(); });
  EXPECT_EQ(stopped.kind, OutcomeKind::kInterrupted);
  EXPECT_EQ(requested_end(stopped).state, TrialState::kFail);
  EXPECT_EQ(requested_end(stopped).fail_reason, "interrupted");
}

TEST(LifecycleOutcome, ExceptionsOfAnyTypeGiveAMessageAndCanBeRethrown) {
  Outcome e = run([](Trial&) -> double { throw std::runtime_error("out of cheese"); });
  EXPECT_EQ(e.kind, OutcomeKind::kException);
  EXPECT_EQ(e.message, "out of cheese");
  EXPECT_EQ(requested_end(e).state, TrialState::kFail);
  EXPECT_EQ(requested_end(e).fail_reason, "out of cheese");
  ASSERT_TRUE(e.error);
  EXPECT_THROW(std::rethrow_exception(e.error), std::runtime_error);

  EXPECT_EQ(run([](Trial&) -> double { throw std::runtime_error(""); }).message, "exception");
  Outcome i = run([](Trial&) -> double { throw 42; });
  EXPECT_EQ(i.kind, OutcomeKind::kException);
  EXPECT_EQ(i.message, "exception of a type not derived from std::exception");
  EXPECT_THROW(std::rethrow_exception(i.error), int);
}

// ------------------------------------------------------------ enqueued params

SearchSpace space() {
  return SearchSpace::from_json(Json::parse(R"({
    "x":         {"type": "float", "low": 0, "high": 1},
    "n":         {"type": "int", "low": 1, "high": 9},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    "momentum":  {"type": "float", "low": 0, "high": 0.99, "when": {"optimizer": "sgd"}}
  })"));
}

TEST(LifecycleEnqueued, FixedParamsRoundTripThroughTheSystemAttr) {
  FrozenTrial t;
  EXPECT_TRUE(fixed_params_of(t).empty());
  Params p{{"x", 0.5}, {"optimizer", "sgd"}};
  t.system_attrs[kAttrFixedParams] = fixed_params_attr(p);
  EXPECT_EQ(Json(fixed_params_of(t)).dump(), Json(p).dump());
  t.system_attrs[kAttrFixedParams] = "not an object";
  EXPECT_TRUE(fixed_params_of(t).empty());
}

TEST(LifecycleEnqueued, ValuesThatFitTheSpaceAreAppliedInOrder) {
  Params fixed{
      {"x", 0.25}, {"n", 3.0}, {"optimizer", "adam"}, {"momentum", 0.5}, {"not_in_space", 1.0}};
  Params chosen;
  apply_fixed_params(space(), fixed, chosen);
  EXPECT_EQ(chosen.at("x"), 0.25);
  EXPECT_TRUE(chosen.at("n").is_number_integer());  // as a sampler gives it
  EXPECT_EQ(chosen.at("n"), 3);
  EXPECT_EQ(chosen.at("optimizer"), "adam");
  EXPECT_FALSE(chosen.count("momentum"));  // inactive given optimizer = adam
  EXPECT_FALSE(chosen.count("not_in_space"));

  Params outside{{"x", 7.0}};
  Params kept{{"x", 0.75}};
  apply_fixed_params(space(), outside, kept);
  EXPECT_EQ(kept.at("x"), 0.75);  // a value already chosen is kept
  Params none;
  apply_fixed_params(space(), outside, none);
  EXPECT_FALSE(none.count("x"));  // out of range: left to the sampler
}

TEST(LifecycleEnqueued, CheckNamesTheBadParam) {
  EXPECT_NO_THROW(check_enqueued_params(space(), {{"x", 0.5}, {"optimizer", "sgd"}}));
  try {
    check_enqueued_params(space(), {{"y", 1.0}});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("params.y"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_enqueued_params(space(), {{"x", 2.0}}), ConfigError);
  try {
    check_enqueued_params(space(), {{"optimizer", "adam"}, {"momentum", 0.5}});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("params.momentum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("inactive"), std::string::npos) << e.what();
  }
}

TEST(LifecycleEnqueued, PendingAndStoredParams) {
  Params fixed{{"x", 0.5}, {"lr", 0.1}};
  Params pending = pending_fixed_params(fixed, {{"x", 0.5}});
  EXPECT_EQ(Json(pending).dump(), R"({"lr":0.1})");

  InMemoryStorage storage;
  auto study = storage.create_study("s", StudyDirection::kMinimize, Json());
  auto t = storage.create_trial(study, {});
  SearchSpace sp = space();
  auto stored = store_new_params(storage, t->trial_id, sp, {{"x", 0.1}},
                                 {{"x", 0.9}, {"n", 2}, {"other", 1}});
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0]->name, "n");
  auto now = storage.get_trial(t->trial_id);
  EXPECT_EQ(now->params.size(), 1u);
  EXPECT_EQ(now->params.at("n"), 2);
}

// ------------------------------------------------------------ retries

TEST(LifecycleRetry, CauseNamesRoundTrip) {
  for (auto c : {RetryCause::kWorkerLost, RetryCause::kWorkerStopped, RetryCause::kInterrupted,
                 RetryCause::kStale})
    EXPECT_EQ(parse_retry_cause(to_string(c)), c);
  EXPECT_FALSE(parse_retry_cause("worker lost"));
  EXPECT_TRUE(counts_against_retry_limit(RetryCause::kWorkerLost));
  // A worker stopped from outside (scancel, Ctrl-C) would have finished.
  EXPECT_FALSE(counts_against_retry_limit(RetryCause::kWorkerStopped));
  EXPECT_FALSE(counts_against_retry_limit(RetryCause::kInterrupted));
  EXPECT_FALSE(counts_against_retry_limit(RetryCause::kStale));
}

TEST(LifecycleRetry, QueueRetryLinksBothTrialsAndKeepsEveryParam) {
  InMemoryStorage storage;
  auto study = storage.create_study("s", StudyDirection::kMinimize, Json());
  NewTrial init;
  init.params = {{"x", 0.5}};
  init.system_attrs[kAttrFixedParams] = Json{{"x", 0.25}, {"lr", 0.1}};
  auto t = storage.create_trial(study, init);
  storage.set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, "worker lost");
  TrialPtr failed = storage.get_trial(t->trial_id);

  TrialPtr retry = queue_retry(storage, study, *failed, RetryCause::kWorkerLost);
  EXPECT_EQ(retry->state, TrialState::kWaiting);
  EXPECT_EQ(retry->number, 1);
  EXPECT_EQ(retry->system_attrs.at(kAttrRetryOf), 0);
  EXPECT_EQ(retry->system_attrs.at(kAttrRetryCause), "worker_lost");
  // The params it ran with, plus the enqueued ones it never asked for.
  EXPECT_EQ(retry->system_attrs.at(kAttrFixedParams).dump(), R"({"lr":0.1,"x":0.5})");
  TrialPtr again = storage.get_trial(t->trial_id);
  EXPECT_EQ(again->system_attrs.at(kAttrRetriedAs), 1);
  EXPECT_TRUE(again->was_retried());
}

// A chain of trials 0 -> 1 -> ... built by hand: trial i (i > 0) retries
// trial i - 1; `reasons[i]` is trial i's fail reason, `causes[i]` the
// retry_cause of trial i ("" = none: a row of an older version).
std::vector<TrialPtr> chain(const std::vector<std::string>& reasons,
                            const std::vector<std::string>& causes) {
  std::vector<TrialPtr> out;
  for (std::size_t i = 0; i < reasons.size(); ++i) {
    auto t = std::make_shared<FrozenTrial>();
    t->number = static_cast<std::int64_t>(i);
    t->trial_id = t->number + 100;
    t->state = TrialState::kFail;
    t->fail_reason = reasons[i];
    if (i > 0) {
      t->system_attrs[kAttrRetryOf] = i - 1;
      if (!causes[i].empty()) t->system_attrs[kAttrRetryCause] = causes[i];
    }
    if (i + 1 < reasons.size()) t->system_attrs[kAttrRetriedAs] = i + 1;
    out.push_back(t);
  }
  return out;
}

TEST(LifecycleRetry, DepthCountsStructuredCausesNotMessages) {
  // Trial 0 failed with a message that starts like the old rule's prefix,
  // but it was retried because the run was interrupted: it does not count.
  auto trials = chain({"workers told to stop", "worker lost", "worker lost"},
                      {"", "interrupted", "worker_lost"});
  EXPECT_EQ(retry_depth(trials, 0), 0);
  EXPECT_EQ(retry_depth(trials, 1), 0);
  EXPECT_EQ(retry_depth(trials, 2), 1);
  // A message that does not start with "worker", a cause that counts.
  trials = chain({"heartbeat timeout", "x"}, {"", "worker_lost"});
  EXPECT_EQ(retry_depth(trials, 1), 1);
  // A worker stopped by a signal, then lost: only the loss counts.
  trials = chain({"worker stopped: stopped by a signal", "worker lost", "x"},
                 {"", "worker_stopped", "worker_lost"});
  EXPECT_EQ(retry_depth(trials, 1), 0);
  EXPECT_EQ(retry_depth(trials, 2), 1);
  // A cause written by a newer version counts (retries stay bounded).
  trials = chain({"x", "y"}, {"", "future_cause"});
  EXPECT_EQ(retry_depth(trials, 1), 1);
}

TEST(LifecycleRetry, DepthOfAnOlderStoreFollowsTheOldRule) {
  // Rows without retry_cause: a retry counts when the trial it retries
  // failed with a reason starting "worker".
  auto trials =
      chain({"worker lost", "coordinator restarted", "worker stopped: x", "w"}, {"", "", "", ""});
  EXPECT_EQ(retry_depth(trials, 1), 1);
  EXPECT_EQ(retry_depth(trials, 2), 1);
  EXPECT_EQ(retry_depth(trials, 3), 2);
  // Mixed: old rows below new ones.
  trials = chain({"worker lost", "worker lost", "x"}, {"", "", "stale"});
  EXPECT_EQ(retry_depth(trials, 2), 1);
}

TEST(LifecycleRetry, DepthIgnoresBrokenLinks) {
  auto trials = chain({"worker lost", "worker lost"}, {"", "worker_lost"});
  EXPECT_EQ(retry_depth(trials, 5), 0);
  EXPECT_EQ(retry_depth(trials, -1), 0);
  auto self = std::make_shared<FrozenTrial>(*trials[1]);
  self->system_attrs[kAttrRetryOf] = 1;  // a loop: bounded
  trials[1] = self;
  EXPECT_GE(retry_depth(trials, 1), 1);
  auto dangling = std::make_shared<FrozenTrial>(*trials[1]);
  dangling->system_attrs[kAttrRetryOf] = 9;
  trials[1] = dangling;
  EXPECT_EQ(retry_depth(trials, 1), 0);
}

// ------------------------------------------------------------ best trial

TrialPtr done(std::int64_t number, TrialState state, std::optional<double> value) {
  auto t = std::make_shared<FrozenTrial>();
  t->number = number;
  t->state = state;
  t->value = value;
  return t;
}

TEST(LifecycleBest, OnlyCompleteTrialsWithAValueCount) {
  EXPECT_TRUE(is_best_candidate(*done(0, TrialState::kComplete, 1.0)));
  EXPECT_TRUE(is_best_candidate(*done(0, TrialState::kComplete, kInf)));
  EXPECT_FALSE(is_best_candidate(*done(0, TrialState::kComplete, kNaN)));
  EXPECT_FALSE(is_best_candidate(*done(0, TrialState::kComplete, std::nullopt)));
  EXPECT_FALSE(is_best_candidate(*done(0, TrialState::kPruned, -5.0)));
  EXPECT_FALSE(is_best_candidate(*done(0, TrialState::kRunning, -5.0)));
}

TEST(LifecycleBest, DirectionAndTiesToTheLowerNumber) {
  std::vector<TrialPtr> trials{
      done(0, TrialState::kComplete, 2.0),  done(1, TrialState::kPruned, -9.0),
      done(2, TrialState::kComplete, 1.0),  done(3, TrialState::kComplete, 1.0),
      done(4, TrialState::kComplete, kNaN), done(5, TrialState::kComplete, 3.0)};
  EXPECT_EQ(best_trial(StudyDirection::kMinimize, trials)->number, 2);
  EXPECT_EQ(best_trial(StudyDirection::kMaximize, trials)->number, 5);
  std::vector<TrialPtr> reversed(trials.rbegin(), trials.rend());
  EXPECT_EQ(best_trial(StudyDirection::kMinimize, reversed)->number, 2);  // any order
  EXPECT_TRUE(ranks_before(StudyDirection::kMinimize, *trials[2], *trials[3]));
  EXPECT_FALSE(ranks_before(StudyDirection::kMinimize, *trials[3], *trials[2]));
  EXPECT_FALSE(best_trial(StudyDirection::kMinimize, {trials[1], trials[4]}));
  EXPECT_FALSE(best_trial(StudyDirection::kMinimize, {}));
}

// ------------------------------------------------------------ define-by-run

TEST(LifecycleSuggest, SetValueThenEnqueuedValueThenTheSampler) {
  Distribution d = Distribution::make_float(0, 1, false, std::nullopt, "x");
  int samples = 0;
  auto sample = [&] {
    ++samples;
    return Json(0.125);
  };
  // Already set with the same distribution: kept, not new.
  Suggested s = suggest_param({{"x", 0.5}}, {{"x", d}}, {}, "x", d, sample);
  EXPECT_EQ(s.value, 0.5);
  EXPECT_FALSE(s.is_new);
  // Enqueued and inside the distribution.
  s = suggest_param({}, {}, {{"x", 0.75}}, "x", d, sample);
  EXPECT_EQ(s.value, 0.75);
  EXPECT_TRUE(s.is_new);
  EXPECT_EQ(samples, 0);
  // Enqueued outside it, or not enqueued: sampled.
  s = suggest_param({}, {}, {{"x", 4.0}}, "x", d, sample);
  EXPECT_EQ(s.value, 0.125);
  EXPECT_TRUE(s.is_new);
  s = suggest_param({}, {}, {}, "x", d, sample);
  EXPECT_EQ(samples, 2);
  // An enqueued int for an int distribution comes back as a sampler gives it.
  Distribution n = Distribution::make_int(1, 9, false, 1, "n");
  s = suggest_param({}, {}, {{"n", 3.0}}, "n", n, sample);
  EXPECT_TRUE(s.value.is_number_integer());
  EXPECT_EQ(s.value, 3);
}

TEST(LifecycleSuggest, AnotherDistributionForASetParamIsAnError) {
  Distribution d = Distribution::make_float(0, 1, false, std::nullopt, "x");
  Distribution wider = Distribution::make_float(0, 2, false, std::nullopt, "x");
  try {
    suggest_param({{"x", 0.5}}, {{"x", d}}, {}, "x", wider, [] { return Json(0.0); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differs from the distribution"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hps::lifecycle
