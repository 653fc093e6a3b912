// Tests of search/study.h: ask/tell, optimize (n_trials, timeout, n_jobs,
// exceptions, pruning, interruption), enqueue_trial, best_trial,
// fail_stale_trials and load_if_exists. Every test runs on the in-memory
// storage and on a storage file opened with open_storage(path).
#include "search/study.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "algorithms/random_sampler.h"
#include "search/errors.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct StorageKind {
  std::string name;
  // Opens the storage kept in `dir` (a fresh one on the first call; the
  // same one again on later calls for kinds that persist).
  std::function<std::shared_ptr<Storage>(const std::string& dir)> open;
};
// Names the param in test listings (instead of a byte dump).
[[maybe_unused]] void PrintTo(const StorageKind& k, std::ostream* os) { *os << k.name; }

class StudyTest : public ::testing::TestWithParam<StorageKind> {
 protected:
  std::shared_ptr<Storage> storage() {
    if (!storage_) storage_ = GetParam().open(dir_.path().string());
    return storage_;
  }
  StudyOptions seeded(std::optional<SearchSpace> space = std::nullopt) {
    StudyOptions o;
    o.sampler = std::make_shared<RandomSampler>(42);
    o.space = std::move(space);
    return o;
  }
  Study minimize(StudyOptions o = {}) {
    if (!o.sampler) o.sampler = std::make_shared<RandomSampler>(42);
    return Study::create(storage(), "study", StudyDirection::kMinimize, std::move(o));
  }
  Study maximize(StudyOptions o = {}) {
    if (!o.sampler) o.sampler = std::make_shared<RandomSampler>(42);
    return Study::create(storage(), "study", StudyDirection::kMaximize, std::move(o));
  }

  hps::testsupport::TempDir dir_{"study"};
  std::shared_ptr<Storage> storage_;
};

SearchSpace conditional_space() {
  return SearchSpace::from_json(Json::parse(R"({
    "x":         {"type": "float", "low": -5, "high": 5},
    "n":         {"type": "int", "low": 1, "high": 9, "step": 2},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd", null]},
    "momentum":  {"type": "float", "low": 0, "high": 0.99, "when": {"optimizer": "sgd"}}
  })"));
}

// Numbers 0..n-1, each exactly once, in order.
void expect_contiguous(const std::vector<TrialPtr>& trials) {
  for (std::size_t i = 0; i < trials.size(); ++i)
    EXPECT_EQ(trials[i]->number, static_cast<std::int64_t>(i));
}

// ------------------------------------------------------------ ask / tell

TEST_P(StudyTest, AskTellDefineByRun) {
  Study study = minimize();
  Trial t = study.ask();
  EXPECT_EQ(t.number(), 0);
  EXPECT_EQ(study.trials()[0]->state, TrialState::kRunning);
  EXPECT_FALSE(study.trials()[0]->worker.empty());
  double x = t.suggest_float("x", -10, 10);
  EXPECT_GE(x, -10);
  EXPECT_LE(x, 10);
  EXPECT_EQ(t.suggest_float("x", -10, 10), x);  // asked again: the same value
  std::int64_t n = t.suggest_int("n", 1, 9, {.log = false, .step = 2});
  EXPECT_EQ(n % 2, 1);
  Json act = t.suggest_categorical("act", {"relu", Json(), 1});
  EXPECT_TRUE(act == "relu" || act.is_null() || act == 1);
  t.set_user_attr("note", "hello");
  TrialPtr done = study.tell(t, x * x);
  EXPECT_EQ(done->state, TrialState::kComplete);
  EXPECT_EQ(done->value, x * x);
  EXPECT_EQ(done->params.at("x").get<double>(), x);
  EXPECT_TRUE(done->params.at("n").is_number_integer());
  EXPECT_EQ(done->params.at("n").get<std::int64_t>(), n);
  EXPECT_TRUE(same_json_scalar(done->params.at("act"), act));
  EXPECT_EQ(done->distributions.size(), 3u);
  EXPECT_EQ(done->user_attrs["note"], "hello");
  EXPECT_TRUE(done->datetime_start);
  EXPECT_TRUE(done->datetime_complete);
  EXPECT_EQ(study.best_value(), x * x);
  EXPECT_EQ(study.n_finished(), 1);
  EXPECT_THROW(study.tell(t, 1.0), Error);  // already finished
}

TEST_P(StudyTest, AskWithADeclaredSpaceSamplesEveryActiveParam) {
  Study study = minimize(seeded(conditional_space()));
  const SearchSpace& space = *study.space();
  for (int i = 0; i < 60; ++i) {
    Trial t = study.ask();
    EXPECT_EQ(space.check(t.params()), "") << Json(t.params()).dump();
    EXPECT_TRUE(t.param("n").is_number_integer());
    // Define-by-run calls that agree with the space return the sampled value.
    EXPECT_EQ(t.suggest_float("x", -5, 5), t.param("x").get<double>());
    EXPECT_EQ(t.suggest_int("n", 1, 9, {.log = false, .step = 2}),
              t.param("n").get<std::int64_t>());
    if (t.param("optimizer") == "sgd") {
      EXPECT_EQ(t.suggest_float("momentum", 0, 0.99), t.param("momentum").get<double>());
    } else {
      EXPECT_FALSE(t.has_param("momentum"));
      EXPECT_THROW(t.param("momentum"), Error);
      // An inactive conditional param cannot be suggested.
      EXPECT_THROW(t.suggest_float("momentum", 0, 0.99), Error);
    }
    // A param outside the declared space is define-by-run.
    double extra = t.suggest_float("extra", 0, 1);
    EXPECT_GE(extra, 0);
    TrialPtr done = study.tell(t, t.param("x").get<double>());
    EXPECT_EQ(done->params.count("extra"), 1u);
  }
}

TEST_P(StudyTest, SuggestDisagreeingWithTheDeclaredSpaceIsAnError) {
  Study study = minimize(seeded(conditional_space()));
  Trial t = study.ask();
  EXPECT_THROW(t.suggest_float("x", -5, 6), Error);
  EXPECT_THROW(t.suggest_float("x", -5, 5, {.log = false, .step = 0.5}), Error);
  EXPECT_THROW(t.suggest_int("x", -5, 5), Error);
  EXPECT_THROW(t.suggest_int("n", 1, 9), Error);  // step 1, declared step 2
  EXPECT_THROW(t.suggest_categorical("optimizer", {"adam", "sgd"}), Error);
  EXPECT_THROW(t.suggest_categorical("optimizer", {"adam", "sgd", "null"}), Error);
  try {
    t.suggest_float("x", 0, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("declared space"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(t.suggest_categorical("optimizer", {"adam", "sgd", Json()}));
}

TEST_P(StudyTest, DefineByRunSuggestWithAnotherDistributionIsAnError) {
  Study study = minimize();
  Trial t = study.ask();
  t.suggest_float("x", 0, 1);
  EXPECT_THROW(t.suggest_float("x", 0, 2), Error);
  EXPECT_THROW(t.suggest_int("x", 0, 1), Error);
}

TEST_P(StudyTest, InvalidSuggestArgumentsAreConfigErrors) {
  Study study = minimize();
  Trial t = study.ask();
  EXPECT_THROW(t.suggest_float("a", 1, 0), ConfigError);
  EXPECT_THROW(t.suggest_float("b", 0, 1, {.log = true}), ConfigError);
  EXPECT_THROW(t.suggest_float("c", 0, 1, {.log = false, .step = -1}), ConfigError);
  EXPECT_THROW(t.suggest_int("d", 0, 10, {.log = false, .step = 1.5}), ConfigError);
  EXPECT_THROW(t.suggest_categorical("e", {}), ConfigError);
  EXPECT_THROW(t.suggest_categorical("f", {"a", "a"}), ConfigError);
  EXPECT_TRUE(t.params().empty());
}

TEST_P(StudyTest, TellStates) {
  Study study = minimize();
  Trial a = study.ask();
  EXPECT_THROW(study.tell(a, TrialState::kRunning), Error);
  EXPECT_THROW(study.tell(a, TrialState::kComplete), Error);  // needs a value
  a.report(0, 3.0);
  a.report(1, 2.0);
  TrialPtr pruned = study.tell(a, TrialState::kPruned);
  EXPECT_EQ(pruned->state, TrialState::kPruned);
  EXPECT_EQ(pruned->value, 2.0);  // the last intermediate value
  Trial b = study.ask();
  TrialPtr failed = study.tell(b, TrialState::kFail, std::nullopt, "out of memory");
  EXPECT_EQ(failed->state, TrialState::kFail);
  EXPECT_EQ(failed->fail_reason, "out of memory");
  EXPECT_FALSE(failed->value);
  Trial c = study.ask();
  TrialPtr pruned_early = study.tell(c, TrialState::kPruned);
  EXPECT_FALSE(pruned_early->value);
  EXPECT_EQ(study.n_finished(), 3);
  EXPECT_THROW(study.best_trial(), Error);
}

TEST_P(StudyTest, NaNFailsAndIsNeverBest) {
  Study study = minimize();
  Trial a = study.ask();
  TrialPtr t = study.tell(a, kNaN);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_FALSE(t->value);
  EXPECT_NE(t->fail_reason.find("NaN"), std::string::npos) << t->fail_reason;
  EXPECT_THROW(study.best_trial(), Error);
  Trial b = study.ask();
  EXPECT_EQ(study.tell(b, TrialState::kComplete, kNaN)->state, TrialState::kFail);
  study.optimize([](Trial&) { return kNaN; }, {.n_trials = 3});
  EXPECT_THROW(study.best_trial(), Error);
  Trial c = study.ask();
  study.tell(c, 5.0);
  study.optimize([](Trial&) { return kNaN; }, {.n_trials = 3});
  EXPECT_EQ(study.best_trial()->number, c.number());
  EXPECT_EQ(study.trials({TrialState::kFail}).size(), 8u);
}

TEST_P(StudyTest, InfinitiesAreStoredValues) {
  Study study = maximize();
  std::vector<double> values = {-kInf, 3.0, -kInf, 2.0};
  for (double v : values) {
    Trial t = study.ask();
    study.tell(t, v);
  }
  EXPECT_EQ(study.best_value(), 3.0);  // -inf never beats a finite value
  EXPECT_EQ(study.best_trial()->number, 1);
  auto all = study.trials();
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0]->state, TrialState::kComplete);
  EXPECT_EQ(all[0]->value, -kInf);
  Trial top = study.ask();
  study.tell(top, kInf);
  EXPECT_EQ(study.best_value(), kInf);
  EXPECT_EQ(study.trials().back()->value, kInf);
}

TEST_P(StudyTest, OnlyInfinitiesStillHaveABest) {
  Study study = minimize();
  Trial a = study.ask();
  study.tell(a, kInf);
  Trial b = study.ask();
  study.tell(b, kInf);
  EXPECT_EQ(study.best_trial()->number, 0);
  Trial c = study.ask();
  study.tell(c, 1e308);
  EXPECT_EQ(study.best_trial()->number, 2);
  Trial d = study.ask();
  study.tell(d, -kInf);
  EXPECT_EQ(study.best_trial()->number, 3);
}

TEST_P(StudyTest, BestTrialTieGoesToTheLowerNumber) {
  for (auto dir : {StudyDirection::kMinimize, StudyDirection::kMaximize}) {
    std::string name = std::string("tie-") + to_string(dir);
    Study study = Study::create(storage(), name, dir, seeded());
    for (double v : {5.0, 1.0, 1.0, 5.0, 1.0, 5.0}) {
      Trial t = study.ask();
      study.tell(t, v);
    }
    EXPECT_EQ(study.best_trial()->number, dir == StudyDirection::kMinimize ? 1 : 0) << name;
  }
}

TEST_P(StudyTest, DuplicateReportKeepsTheFirstValue) {
  Study study = minimize();
  Trial t = study.ask();
  EXPECT_TRUE(t.report(1, 0.5));
  EXPECT_FALSE(t.report(1, 0.9));
  EXPECT_EQ(t.last_step(), 1);
  EXPECT_EQ(t.last_value(), 0.5);
  EXPECT_TRUE(t.report(0, 0.7));  // an earlier step, first time
  EXPECT_THROW(t.report(-1, 0.1), Error);
  EXPECT_TRUE(t.report(2, kNaN));
  EXPECT_TRUE(t.report(3, kInf));
  TrialPtr done = study.tell(t, 0.25);
  ASSERT_EQ(done->intermediate_values.size(), 4u);
  EXPECT_EQ(done->intermediate_values.at(1), 0.5);
  EXPECT_EQ(done->intermediate_values.at(0), 0.7);
  EXPECT_TRUE(std::isnan(done->intermediate_values.at(2)));
  EXPECT_EQ(done->intermediate_values.at(3), kInf);
}

TEST_P(StudyTest, ShouldPruneWithTheDefaultPrunerIsFalse) {
  Study study = minimize();
  Trial t = study.ask();
  EXPECT_FALSE(t.should_prune());
  t.report(0, 1.0);
  EXPECT_FALSE(t.should_prune());
}

// ------------------------------------------------------------ optimize

TEST_P(StudyTest, OptimizeRunsNTrialsPerCall) {
  Study study = minimize();
  int calls = 0;
  std::vector<std::int64_t> seen;
  auto objective = [&](Trial& t) {
    ++calls;
    double x = t.suggest_float("x", -10, 10);
    return (x - 2) * (x - 2);
  };
  study.optimize(objective, {.n_trials = 20,
                             .callback = [&](const FrozenTrial& t) { seen.push_back(t.number); }});
  EXPECT_EQ(calls, 20);
  EXPECT_EQ(seen.size(), 20u);
  study.optimize(objective, {.n_trials = 5});
  EXPECT_EQ(calls, 25);
  auto all = study.trials();
  ASSERT_EQ(all.size(), 25u);
  expect_contiguous(all);
  for (const auto& t : all) EXPECT_EQ(t->state, TrialState::kComplete);
  double best = study.best_value();
  for (const auto& t : all) EXPECT_LE(best, *t->value);
  study.optimize(objective, {.n_trials = 0});
  EXPECT_EQ(calls, 25);
  EXPECT_THROW(study.optimize(objective, {.n_trials = -1}), ConfigError);
  EXPECT_THROW(study.optimize(objective, {.n_trials = 1, .n_jobs = 0}), ConfigError);
}

TEST_P(StudyTest, OptimizeStopsAtTheTimeout) {
  Study study = minimize();
  study.optimize(
      [](Trial& t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return t.suggest_float("x", 0, 1);
      },
      {.timeout_s = 0.2});
  auto all = study.trials();
  EXPECT_GE(all.size(), 1u);
  for (const auto& t : all) EXPECT_EQ(t->state, TrialState::kComplete);
  // With both limits, whichever comes first ends the run.
  Study other = Study::create(storage(), "other", StudyDirection::kMinimize, seeded());
  other.optimize([](Trial&) { return 1.0; }, {.n_trials = 7, .timeout_s = 3600});
  EXPECT_EQ(other.trials().size(), 7u);
}

TEST_P(StudyTest, FourThreadsShareOneStudy) {
  Study study = minimize(seeded(conditional_space()));
  // The first four trials wait for each other: this only ends if four
  // trials run at once.
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  bool all_arrived = false;
  std::atomic<int> calls{0};
  std::set<std::int64_t> callback_numbers;
  auto objective = [&](Trial& t) {
    int k = calls++;
    if (k < 4) {
      std::unique_lock lock(mu);
      ++arrived;
      cv.notify_all();
      all_arrived = cv.wait_for(lock, std::chrono::seconds(60), [&] { return arrived >= 4; });
    }
    t.report(0, t.param("x").get<double>());
    double extra = t.suggest_float("y", 0, 1);
    return t.param("x").get<double>() + extra;
  };
  study.optimize(objective, {.n_trials = 200, .n_jobs = 4, .callback = [&](const FrozenTrial& t) {
                               callback_numbers.insert(t.number);
                             }});
  EXPECT_TRUE(all_arrived);
  EXPECT_EQ(calls.load(), 200);
  auto all = study.trials();
  ASSERT_EQ(all.size(), 200u);
  expect_contiguous(all);
  std::set<std::int64_t> ids;
  for (const auto& t : all) {
    EXPECT_EQ(t->state, TrialState::kComplete) << t->number;
    EXPECT_EQ(study.space()->check([&] {
      Params p = t->params;
      p.erase("y");
      return p;
    }()),
              "");
    EXPECT_EQ(t->intermediate_values.size(), 1u);
    ids.insert(t->trial_id);
  }
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_EQ(callback_numbers.size(), 200u);
  EXPECT_EQ(study.n_finished(), 200);
}

TEST_P(StudyTest, CatchExceptionsTrueKeepsGoing) {
  Study study = minimize();
  study.optimize(
      [](Trial& t) -> double {
        if (t.number() % 2 == 1)
          throw std::runtime_error("odd trial " + std::to_string(t.number()));
        return 1.0;
      },
      {.n_trials = 10, .catch_exceptions = true});
  auto all = study.trials();
  ASSERT_EQ(all.size(), 10u);
  for (const auto& t : all) {
    if (t->number % 2 == 1) {
      EXPECT_EQ(t->state, TrialState::kFail);
      EXPECT_EQ(t->fail_reason, "odd trial " + std::to_string(t->number));
      EXPECT_TRUE(t->counts_as_finished());
    } else {
      EXPECT_EQ(t->state, TrialState::kComplete);
    }
  }
}

TEST_P(StudyTest, CatchExceptionsFalseRethrowsAfterFailingTheTrial) {
  Study study = minimize();
  try {
    study.optimize(
        [](Trial& t) -> double {
          if (t.number() == 3) throw std::invalid_argument("bad lr");
          return 1.0;
        },
        {.n_trials = 10});
    FAIL() << "optimize did not rethrow";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "bad lr");
  }
  auto all = study.trials();
  ASSERT_EQ(all.size(), 4u);  // no trial starts after the failure
  EXPECT_EQ(all[3]->state, TrialState::kFail);
  EXPECT_EQ(all[3]->fail_reason, "bad lr");
  for (const auto& t : all) EXPECT_NE(t->state, TrialState::kRunning);
}

TEST_P(StudyTest, ExceptionsOfAnyTypeFailTheTrial) {
  Study study = minimize();
  study.optimize([](Trial&) -> double { throw 42; }, {.n_trials = 2, .catch_exceptions = true});
  auto all = study.trials();
  ASSERT_EQ(all.size(), 2u);
  for (const auto& t : all) {
    EXPECT_EQ(t->state, TrialState::kFail);
    EXPECT_FALSE(t->fail_reason.empty());
  }
  EXPECT_THROW(study.optimize([](Trial&) -> double { throw 42; }, {.n_trials = 5}), int);
  EXPECT_EQ(study.trials().size(), 3u);
  EXPECT_EQ(study.trials().back()->state, TrialState::kFail);
  // With threads too: nothing escapes a worker thread.
  EXPECT_THROW(study.optimize([](Trial&) -> double { throw "text"; }, {.n_trials = 8, .n_jobs = 4}),
               const char*);
  for (const auto& t : study.trials()) EXPECT_EQ(t->state, TrialState::kFail);
}

TEST_P(StudyTest, TrialPrunedEndsPrunedWithTheLastIntermediateValue) {
  Study study = minimize();
  study.optimize(
      [](Trial& t) -> double {
        for (int step = 0; step < 5; ++step) {
          t.report(step, 10.0 - step);
          if (step == 2 && t.number() % 2 == 0) throw TrialPruned();
        }
        return 1.0;
      },
      {.n_trials = 4});
  auto all = study.trials();
  ASSERT_EQ(all.size(), 4u);
  for (const auto& t : all) {
    if (t->number % 2 == 0) {
      EXPECT_EQ(t->state, TrialState::kPruned);
      EXPECT_EQ(t->value, 8.0);
      EXPECT_EQ(t->last_intermediate()->first, 2);
      EXPECT_TRUE(t->counts_as_finished());
    } else {
      EXPECT_EQ(t->state, TrialState::kComplete);
    }
  }
  EXPECT_EQ(study.best_trial()->number, 1);  // PRUNED values are never best
}

TEST_P(StudyTest, StopFlagInterruptsTheRunningTrialAndQueuesARetry) {
  Study study = minimize(seeded(conditional_space()));
  std::atomic<bool> stop{false};
  int calls = 0;
  Params first_params;
  study.optimize(
      [&](Trial& t) -> double {
        ++calls;
        first_params = t.params();
        t.report(0, 1.0);
        stop = true;       // as a signal handler would
        t.report(1, 0.5);  // throws Interrupted
        ADD_FAILURE() << "report() did not throw after the stop flag was set";
        return 0.0;
      },
      {.n_trials = 10, .stop = &stop});
  EXPECT_EQ(calls, 1);  // no trial starts after the stop
  auto all = study.trials();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->state, TrialState::kFail);
  EXPECT_EQ(all[0]->fail_reason, "interrupted");
  EXPECT_TRUE(all[0]->was_retried());
  EXPECT_FALSE(all[0]->counts_as_finished());
  EXPECT_EQ(all[0]->system_attrs.at(kAttrRetriedAs), 1);
  EXPECT_EQ(all[0]->intermediate_values.size(), 1u);
  EXPECT_EQ(all[1]->state, TrialState::kWaiting);
  EXPECT_EQ(all[1]->system_attrs.at(kAttrRetryOf), 0);
  EXPECT_EQ(study.n_finished(), 0);

  // should_prune() sees the flag as well.
  Study other = Study::create(storage(), "other", StudyDirection::kMinimize, seeded());
  std::atomic<bool> stop2{false};
  other.optimize(
      [&](Trial& t) -> double {
        t.report(0, 1.0);
        stop2 = true;
        t.should_prune();  // throws Interrupted
        return 0.0;
      },
      {.n_trials = 3, .stop = &stop2});
  ASSERT_EQ(other.trials().size(), 2u);
  EXPECT_EQ(other.trials()[0]->fail_reason, "interrupted");
  EXPECT_EQ(other.trials()[1]->state, TrialState::kWaiting);

  // The retry runs first on the next run, with the same params.
  stop = false;
  std::vector<Params> seen;
  study.optimize(
      [&](Trial& t) {
        seen.push_back(t.params());
        return t.param("x").get<double>();
      },
      {.n_trials = 3, .stop = &stop});
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(Json(seen[0]).dump(), Json(first_params).dump());
  all = study.trials();
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[1]->state, TrialState::kComplete);
  EXPECT_EQ(Json(all[1]->params).dump(), Json(first_params).dump());
  EXPECT_EQ(study.n_finished(), 3);
}

TEST_P(StudyTest, StopFlagSetBeforehandStartsNothing) {
  Study study = minimize();
  std::atomic<bool> stop{true};
  study.optimize([](Trial&) { return 1.0; }, {.n_trials = 5, .stop = &stop});
  EXPECT_TRUE(study.trials().empty());
}

TEST_P(StudyTest, InterruptedDefineByRunTrialIsRetriedWithItsParams) {
  Study study = minimize();
  std::atomic<bool> stop{false};
  double x0 = 0;
  study.optimize(
      [&](Trial& t) -> double {
        x0 = t.suggest_float("x", 0, 1);
        t.suggest_categorical("c", {Json(), 1, "1"});
        stop = true;
        t.report(0, 1.0);
        return 0.0;
      },
      {.n_trials = 1, .stop = &stop});
  stop = false;
  double x1 = -1;
  study.optimize([&](Trial& t) { return x1 = t.suggest_float("x", 0, 1); }, {.n_trials = 1});
  EXPECT_EQ(x1, x0);
  EXPECT_EQ(study.trials()[1]->params.size(), 1u);  // "c" was never asked again
}

// ------------------------------------------------------------ enqueue

TEST_P(StudyTest, EnqueuedTrialsAreServedFirst) {
  Study study = minimize();
  Trial running = study.ask();  // number 0
  TrialPtr q1 = study.enqueue_trial({{"x", 0.25}});
  TrialPtr q2 = study.enqueue_trial({{"x", 0.75}, {"c", Json()}});
  EXPECT_EQ(q1->state, TrialState::kWaiting);
  EXPECT_EQ(q1->number, 1);
  EXPECT_EQ(q2->number, 2);
  Trial a = study.ask();
  EXPECT_EQ(a.number(), 1);
  EXPECT_EQ(a.suggest_float("x", 0, 1), 0.25);
  Trial b = study.ask();
  EXPECT_EQ(b.number(), 2);
  EXPECT_EQ(b.suggest_float("x", 0, 1), 0.75);
  EXPECT_TRUE(b.suggest_categorical("c", {1, Json(), "a"}).is_null());
  Trial c = study.ask();
  EXPECT_EQ(c.number(), 3);
  study.tell(running, 1.0);
  study.tell(a, 1.0);
  study.tell(b, 1.0);
  study.tell(c, 1.0);
  EXPECT_EQ(study.trials()[1]->params.at("x"), 0.25);
  EXPECT_EQ(study.trials()[1]->state, TrialState::kComplete);
}

TEST_P(StudyTest, EnqueuedValueThatDoesNotFitIsSampled) {
  Study study = minimize();
  study.enqueue_trial({{"x", 5.0}, {"n", 3}});
  Trial t = study.ask();
  double x = t.suggest_float("x", 0, 1);  // 5 is outside [0, 1]
  EXPECT_GE(x, 0);
  EXPECT_LE(x, 1);
  EXPECT_EQ(t.suggest_int("n", 0, 10), 3);
  EXPECT_TRUE(study.tell(t, 0.0)->params.at("n").is_number_integer());
}

TEST_P(StudyTest, EnqueueWithADeclaredSpace) {
  Study study = minimize(seeded(conditional_space()));
  study.enqueue_trial({{"x", 1.5}, {"optimizer", "sgd"}, {"momentum", 0.9}, {"n", 7}});
  study.enqueue_trial({{"optimizer", Json()}});  // others sampled at ask()
  Trial a = study.ask();
  EXPECT_EQ(a.param("x"), 1.5);
  EXPECT_EQ(a.param("optimizer"), "sgd");
  EXPECT_EQ(a.param("momentum"), 0.9);
  EXPECT_EQ(a.param("n"), 7);
  EXPECT_TRUE(a.param("n").is_number_integer());
  Trial b = study.ask();
  EXPECT_TRUE(b.param("optimizer").is_null());
  EXPECT_EQ(study.space()->check(b.params()), "");
  EXPECT_TRUE(b.has_param("x"));
  study.tell(a, 0.0);
  study.tell(b, 0.0);
  EXPECT_EQ(study.trials()[0]->params.at("momentum"), 0.9);
}

TEST_P(StudyTest, InvalidEnqueueForADeclaredSpaceIsAConfigError) {
  Study study = minimize(seeded(conditional_space()));
  auto path_of = [&](const Params& p) {
    try {
      study.enqueue_trial(p);
    } catch (const ConfigError& e) {
      return e.path();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(path_of({{"x", 7.0}}), "params.x");  // out of range
  EXPECT_EQ(path_of({{"n", 4}}), "params.n");    // off the step grid
  EXPECT_EQ(path_of({{"n", "3"}}), "params.n");  // wrong type
  EXPECT_EQ(path_of({{"optimizer", "rmsprop"}}), "params.optimizer");
  EXPECT_EQ(path_of({{"optimizer", "null"}}), "params.optimizer");
  EXPECT_EQ(path_of({{"nope", 1}}), "params.nope");  // not in the space
  EXPECT_EQ(path_of({{"optimizer", "adam"}, {"momentum", 0.5}}), "params.momentum");  // inactive
  EXPECT_TRUE(study.trials().empty());
}

// ------------------------------------------------------------ stale trials

// A pid that belonged to a process that has exited.
pid_t dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

TEST_P(StudyTest, FailStaleTrialsOfADeadProcess) {
  Study study = minimize(seeded(conditional_space()));
  std::string me = default_worker_name();
  std::string host = me.substr(0, me.rfind(':'));
  auto running = [&](const std::string& worker, double x) {
    NewTrial init;
    init.state = TrialState::kRunning;
    init.worker = worker;
    init.params = {{"x", x}, {"optimizer", "adam"}, {"n", 3}};
    for (const auto& [k, v] : init.params)
      init.distributions.emplace(k, study.space()->find(k)->distribution);
    return study.storage().create_trial(study.study_id(), init);
  };
  TrialPtr dead = running(host + ":" + std::to_string(dead_pid()), 1.0);
  TrialPtr alive = running(host + ":" + std::to_string(getppid()), 2.0);
  TrialPtr other_host = running("some-other-host.example:1", 3.0);
  TrialPtr mine = running(me, 4.0);
  EXPECT_EQ(study.fail_stale_trials("process died"), 1);
  auto t = study.storage().get_trial(dead->trial_id);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_EQ(t->fail_reason, "process died");
  EXPECT_TRUE(t->was_retried());
  EXPECT_FALSE(t->counts_as_finished());
  std::int64_t retry_number = t->system_attrs.at(kAttrRetriedAs).get<std::int64_t>();
  auto retry = study.storage().get_trial_by_number(study.study_id(), retry_number);
  EXPECT_EQ(retry->state, TrialState::kWaiting);
  EXPECT_EQ(retry->system_attrs.at(kAttrRetryOf), dead->number);
  for (auto p : {alive, other_host, mine})
    EXPECT_EQ(study.storage().get_trial(p->trial_id)->state, TrialState::kRunning);
  EXPECT_EQ(study.fail_stale_trials("again"), 0);  // nothing new

  // The retry is served next, with the same params.
  Trial next = study.ask();
  EXPECT_EQ(next.number(), retry_number);
  EXPECT_EQ(Json(next.params()).dump(), Json(dead->params).dump());
  study.tell(next, 0.5);

  // all = true: every RUNNING trial (a coordinator starting up).
  EXPECT_EQ(study.fail_stale_trials("coordinator restarted", true), 3);
  EXPECT_EQ(study.trials({TrialState::kRunning}).size(), 0u);
  EXPECT_EQ(study.trials({TrialState::kWaiting}).size(), 3u);
  EXPECT_EQ(study.n_finished(), 1);
  expect_contiguous(study.trials());
}

// ------------------------------------------------------------ create / load

TEST_P(StudyTest, CreateLoadAndLoadIfExists) {
  Study a = Study::create(storage(), "s", StudyDirection::kMaximize, seeded());
  EXPECT_THROW(Study::create(storage(), "s", StudyDirection::kMaximize), StorageError);
  EXPECT_THROW(Study::load(storage(), "nope"), StorageError);
  Study b = Study::load(storage(), "s");
  EXPECT_EQ(b.study_id(), a.study_id());
  EXPECT_EQ(b.direction(), StudyDirection::kMaximize);
  Study c = Study::load_if_exists(storage(), "s", StudyDirection::kMaximize);
  EXPECT_EQ(c.study_id(), a.study_id());
  try {
    Study::load_if_exists(storage(), "s", StudyDirection::kMinimize);
    FAIL() << "no error for a direction mismatch";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("maximize"), std::string::npos) << e.what();
  }
  Study d = Study::load_if_exists(storage(), "new", StudyDirection::kMinimize);
  EXPECT_NE(d.study_id(), a.study_id());
  EXPECT_EQ(d.name(), "new");
  // Studies are separate: trials of one are not seen by the other.
  Trial t = a.ask();
  a.tell(t, 1.0);
  EXPECT_EQ(a.trials().size(), 1u);
  EXPECT_TRUE(d.trials().empty());
  EXPECT_THROW(Study::create(nullptr, "x", StudyDirection::kMinimize), Error);
  a.set_user_attr("k", Json::array({1, 2}));
  EXPECT_EQ(b.user_attrs()["k"], Json::array({1, 2}));
}

TEST_P(StudyTest, AnyUtf8StudyName) {
  Study s =
      Study::create(storage(), "étude · 研究 \"quoted\" 'x'", StudyDirection::kMinimize, seeded());
  EXPECT_EQ(Study::load(storage(), "étude · 研究 \"quoted\" 'x'").study_id(), s.study_id());
  EXPECT_THROW(Study::create(storage(), "", StudyDirection::kMinimize), StorageError);
}

// ------------------------------------------------------------ storage kinds

std::shared_ptr<Storage> open_memory(const std::string&) {
  return std::make_shared<InMemoryStorage>();
}
std::shared_ptr<Storage> open_file(const std::string& dir) {
  return open_storage(dir + "/study.db");
}

INSTANTIATE_TEST_SUITE_P(Storages, StudyTest,
                         ::testing::Values(StorageKind{"memory", open_memory},
                                           StorageKind{"file", open_file}),
                         [](const ::testing::TestParamInfo<StorageKind>& param_info) {
                           return param_info.param.name;
                         });

TEST(StudyFileTest, ATrialWrittenByOneStorageIsSeenByAnother) {
  hps::testsupport::TempDir dir("study_file");
  std::string path = dir.file("s.db");
  {
    Study s = Study::create(open_storage(path), "s", StudyDirection::kMinimize);
    s.optimize([](Trial& t) { return t.suggest_float("x", 0, 1); }, {.n_trials = 3});
    Trial open = s.ask();
    open.suggest_int("k", 1, 3);
  }
  Study again = Study::load(open_storage("sqlite:///" + path), "s");
  auto all = again.trials();
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[3]->state, TrialState::kRunning);
  EXPECT_TRUE(all[3]->params.at("k").is_number_integer());
  // The RUNNING trial belongs to this (live) process: not stale.
  EXPECT_EQ(again.fail_stale_trials("stale"), 0);
  EXPECT_EQ(again.fail_stale_trials("restart", true), 1);
  EXPECT_EQ(again.n_finished(), 3);
}

TEST(StudyFileTest, OpenStorageErrors) {
  EXPECT_THROW(open_storage(""), StorageError);
  EXPECT_THROW(open_storage("sqlite:///"), StorageError);
  EXPECT_NE(std::dynamic_pointer_cast<InMemoryStorage>(open_storage(":memory:")), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<InMemoryStorage>(open_storage("memory")), nullptr);
}

}  // namespace
}  // namespace hps
