// Tests of the samplers' one duplicate rule (algorithms/tried_points.h):
// params compared whatever the JSON number type a storage reads back (int
// params in a SQLite study), failed and pruned configurations not suggested
// again while untried points remain (TPE and random), transient failures
// left to their retries, and TPE's warning for a budget within its startup.
#include "algorithms/tried_points.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/random_sampler.h"
#include "algorithms/tpe_sampler.h"
#include "search/errors.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/trial_lifecycle.h"
#include "tests/support/log_capture.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

std::shared_ptr<Sampler> make(const std::string& kind, std::uint64_t seed) {
  if (kind == "random") return std::make_shared<RandomSampler>(seed);
  TpeOptions o;
  o.seed = seed;
  if (kind == "tpe-univariate") o.multivariate = false;
  return std::make_shared<TpeSampler>(o);
}

const std::vector<std::string> kSamplers = {"tpe", "tpe-univariate", "random"};

// A study in a SQLite file of `dir` (through open_storage, as the CLI opens
// it), or in memory when `dir` is empty.
Study sqlite_study(const testsupport::TempDir& dir, std::shared_ptr<Sampler> sampler,
                   const SearchSpace& space) {
  StudyOptions o;
  o.sampler = std::move(sampler);
  o.space = space;
  return Study::create(open_storage(dir.file("study.db")), "tried", StudyDirection::kMinimize,
                       std::move(o));
}

std::string key(const Params& p) { return Json(p).dump(); }

// The trials that got params (an ask() that finds the space exhausted
// leaves a FAIL trial "sampler failed" without any).
std::vector<TrialPtr> sampled(const Study& study) {
  std::vector<TrialPtr> out;
  for (const auto& t : study.trials())
    if (!t->params.empty()) out.push_back(t);
  return out;
}

// ---------------------------------------------------------------- hashing

TEST(TriedPointsTest, IntegersHashAndCompareByValueWhateverTheirJsonType) {
  const Json signed3 = std::int64_t{3}, unsigned3 = std::uint64_t{3};
  ASSERT_NE(signed3.type(), unsigned3.type());
  EXPECT_TRUE(same_json_scalar(signed3, unsigned3));
  EXPECT_EQ(hash_json_scalar(signed3), hash_json_scalar(unsigned3));
  EXPECT_EQ(hash_json_scalar(Json(0.0)), hash_json_scalar(Json(-0.0)));
  const Params a = {{"p", signed3}, {"c", "relu"}}, b = {{"p", unsigned3}, {"c", "relu"}};
  EXPECT_TRUE(same_params(a, b));
  EXPECT_EQ(hash_params(a), hash_params(b));
  EXPECT_FALSE(same_params(a, Params{{"p", 3.0}, {"c", "relu"}}));  // 1 != 1.0 (documented)
  EXPECT_FALSE(same_params(a, Params{{"p", 4}, {"c", "relu"}}));
  tried::TriedPoints tried;
  tried.add(a);
  EXPECT_TRUE(tried.contains(b));
  EXPECT_FALSE(tried.contains(Params{{"p", 4}, {"c", "relu"}}));
}

// The first queries scan the points, later ones search them sorted by hash
// (and a point added after a search is found by the next one): the answers
// are the same either way, equal hashes of different points included.
TEST(TriedPointsTest, AnswersTheSameBeforeAndAfterItsPointsAreSorted) {
  std::vector<Params> points;
  for (int i = 0; i < 200; ++i) points.push_back(Params{{"x", i}, {"c", i % 3 == 0 ? "a" : "b"}});
  tried::TriedPoints tried;
  tried.reserve(10);  // grows past it
  for (int i = 0; i < 200; i += 2) tried.add(points[static_cast<std::size_t>(i)]);
  // A point of another hash added under the hash of points[1]: found only
  // by its own params.
  const Params other = {{"x", -1}};
  tried.add(other, hash_params(points[1]));
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < points.size(); ++i)
      EXPECT_EQ(tried.contains(points[i]), i % 2 == 0) << "round " << round << " point " << i;
    EXPECT_FALSE(tried.contains(Params{{"x", 1000}}));
  }
  tried.add(points[1]);
  EXPECT_TRUE(tried.contains(points[1]));
  EXPECT_FALSE(tried.contains(points[3]));
  EXPECT_EQ(tried.size(), 102u);
}

// The issue's case: int 1..8 in a SQLite study repeated values and never
// stopped, because the values read back unsigned hashed apart from the
// signed ones sampled.
TEST(TriedPointsTest, SqliteIntParamStopsExhaustedAfterEachValueOnce) {
  const SearchSpace space =
      SearchSpace::from_json(Json::parse(R"({"p": {"type": "int", "low": 1, "high": 8}})"));
  for (const auto& kind : kSamplers) {
    testsupport::TempDir dir("tried");
    Study study = sqlite_study(dir, make(kind, 5), space);
    OptimizeOptions oo;
    oo.n_trials = 30;
    study.optimize([](Trial& t) { return t.param("p").get<double>(); }, oo);
    std::set<std::int64_t> seen;
    const auto trials = sampled(study);
    for (const auto& t : trials)
      EXPECT_TRUE(seen.insert(t->params.at("p").get<std::int64_t>()).second)
          << kind << ": p = " << t->params.at("p") << " repeated at trial " << t->number;
    EXPECT_EQ(trials.size(), 8u) << kind << ": not stopped as exhausted after the 8 values";
    EXPECT_THROW(study.ask(), SearchSpaceExhausted) << kind;
  }
}

TEST(TriedPointsTest, FourThreadsOnASqliteStudyNeverShareParams) {
  const SearchSpace space =
      SearchSpace::from_json(Json::parse(R"({"p": {"type": "int", "low": 1, "high": 8}})"));
  for (const auto& kind : kSamplers) {
    testsupport::TempDir dir("tried");
    Study study = sqlite_study(dir, make(kind, 9), space);
    OptimizeOptions oo;
    oo.n_trials = 30;
    oo.n_jobs = 4;
    study.optimize(
        [](Trial& t) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));  // overlap the trials
          return t.param("p").get<double>();
        },
        oo);
    std::set<std::int64_t> seen;
    const auto trials = sampled(study);
    for (const auto& t : trials)
      EXPECT_TRUE(seen.insert(t->params.at("p").get<std::int64_t>()).second)
          << kind << ": p = " << t->params.at("p") << " given to two trials";
    EXPECT_EQ(trials.size(), 8u) << kind;
  }
}

// ---------------------------------------------------------------- the rule

// The issue's case: x, y categorical 0..9, the program fails for x >= 5.
TEST(TriedPointsTest, FailedConfigurationsAreNotSuggestedAgain) {
  const SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "x": {"type": "categorical", "choices": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]},
    "y": {"type": "categorical", "choices": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}
  })"));
  for (const auto& kind : kSamplers) {
    for (bool sqlite : {false, true}) {
      testsupport::TempDir dir("tried");
      StudyOptions so;
      so.sampler = make(kind, 11);
      so.space = space;
      Study study =
          Study::create(sqlite ? open_storage(dir.file("study.db"))
                               : std::shared_ptr<Storage>(std::make_shared<InMemoryStorage>()),
                        "fails", StudyDirection::kMinimize, so);
      OptimizeOptions oo;
      oo.n_trials = 100;
      study.optimize(
          [](Trial& t) {
            const double x = t.param("x").get<double>(), y = t.param("y").get<double>();
            if (x >= 5) return std::numeric_limits<double>::quiet_NaN();  // FAIL
            return (x - 4) * (x - 4) + (y - 7) * (y - 7);
          },
          oo);
      std::set<std::string> seen;
      int failed = 0;
      for (const auto& t : sampled(study)) {
        EXPECT_TRUE(seen.insert(key(t->params)).second)
            << kind << (sqlite ? " sqlite" : " memory") << ": trial " << t->number << " repeats "
            << key(t->params);
        failed += t->state == TrialState::kFail ? 1 : 0;
      }
      EXPECT_EQ(seen.size(), 100u) << kind;
      EXPECT_EQ(failed, 50) << kind;
      EXPECT_DOUBLE_EQ(study.best_value(), 0.0) << kind << ": the optimum (4, 7) was not tried";
    }
  }
}

TEST(TriedPointsTest, PrunedConfigurationsAreNotSuggestedAgain) {
  const SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "a": {"type": "int", "low": 0, "high": 5},
    "b": {"type": "categorical", "choices": ["s", "m", "l", "xl", "xxl"]}
  })"));
  for (const auto& kind : kSamplers) {
    Study study = Study::create(std::make_shared<InMemoryStorage>(), "pruned",
                                StudyDirection::kMinimize, StudyOptions{make(kind, 4), {}, space});
    OptimizeOptions oo;
    oo.n_trials = 30;
    study.optimize(
        [](Trial& t) {
          const double a = t.param("a").get<double>();
          t.report(1, a);
          if (a >= 2) throw TrialPruned();
          return a;
        },
        oo);
    std::set<std::string> seen;
    for (const auto& t : sampled(study))
      EXPECT_TRUE(seen.insert(key(t->params)).second)
          << kind << ": trial " << t->number << " re-runs " << key(t->params);
    EXPECT_EQ(seen.size(), 30u) << kind;
    EXPECT_THROW(study.ask(), SearchSpaceExhausted) << kind;
  }
}

TEST(TriedPointsTest, TransientFailuresAreLeftToTheirRetries) {
  FrozenTrial t;
  t.params = {{"p", 1}};
  for (TrialState s :
       {TrialState::kComplete, TrialState::kRunning, TrialState::kPruned, TrialState::kFail}) {
    t.state = s;
    EXPECT_TRUE(tried::counts_as_tried(t)) << to_string(s);
  }
  t.system_attrs[kAttrRetriedAs] = 7;  // a lost worker's trial, queued again
  EXPECT_FALSE(tried::counts_as_tried(t));
  // The queued retry holds the point: no sampler suggests it meanwhile.
  FrozenTrial retry;
  retry.state = TrialState::kWaiting;
  retry.system_attrs[kAttrFixedParams] = lifecycle::fixed_params_attr({{"p", 1}});
  tried::TriedPoints tried;
  tried.add_trial(t);
  EXPECT_FALSE(tried.contains({{"p", 1}}));
  tried.add_trial(retry);
  EXPECT_TRUE(tried.contains({{"p", 1}}));
}

// Every point but the last was tried (COMPLETE, PRUNED, FAIL): the sampler
// gives the last one, then the space is exhausted.
TEST(TriedPointsTest, TheLastUntriedPointIsFound) {
  const SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "a": {"type": "int", "low": 0, "high": 3},
    "b": {"type": "ordinal", "values": [1, 2, 4]}
  })"));
  for (const auto& kind : kSamplers) {
    Study study = Study::create(std::make_shared<InMemoryStorage>(), "last",
                                StudyDirection::kMinimize, StudyOptions{make(kind, 2), {}, space});
    const TrialState states[] = {TrialState::kComplete, TrialState::kPruned, TrialState::kFail};
    int n = 0;
    for (std::int64_t a = 0; a <= 3; ++a)
      for (int b : {1, 2, 4}) {
        if (a == 2 && b == 4) continue;
        study.enqueue_trial({{"a", a}, {"b", b}});
        Trial t = study.ask();
        const TrialState s = states[n++ % 3];
        study.tell(t, s, s == TrialState::kFail ? std::nullopt : std::optional<double>(1.0));
      }
    Trial last = study.ask();
    EXPECT_EQ(last.param("a"), 2) << kind;
    EXPECT_EQ(last.param("b"), 4) << kind;
    EXPECT_THROW(study.ask(), SearchSpaceExhausted) << kind;
  }
}

// ---------------------------------------------------------------- warning

using testsupport::CapturedLog;

TEST(TriedPointsTest, OptimizeWarnsWhenTheBudgetIsWithinTpeStartup) {
  const SearchSpace space =
      SearchSpace::from_json(Json::parse(R"({"x": {"type": "float", "low": 0, "high": 1}})"));
  auto objective = [](Trial& t) { return t.param("x").get<double>(); };
  // A TPE study of `space` (seed 1) with this startup size (nullopt: "auto").
  auto tpe_study = [&](const std::string& name, std::optional<std::size_t> n_startup) {
    TpeOptions o;
    o.seed = 1;
    o.n_startup_trials = n_startup;
    return Study::create(std::make_shared<InMemoryStorage>(), name, StudyDirection::kMinimize,
                         StudyOptions{std::make_shared<TpeSampler>(o), {}, space});
  };
  // What optimize(n_trials) logs.
  auto optimize_log = [&](Study& study, std::int64_t n_trials) {
    CapturedLog log;
    OptimizeOptions oo;
    oo.n_trials = n_trials;
    study.optimize(objective, oo);
    return log.text();
  };
  Study study = tpe_study("warn", 10);
  {
    const std::string text = optimize_log(study, 8);
    EXPECT_NE(text.find("warning: TPE sampler: the budget allows at most 8 COMPLETE trials, "
                        "at or below n_startup_trials = 10"),
              std::string::npos)
        << text;
  }
  {
    // 8 COMPLETE + 3 more > 10: the last trials are modelled, no warning.
    const std::string text = optimize_log(study, 3);
    EXPECT_EQ(text.find("n_startup_trials"), std::string::npos) << text;
  }
  {
    CapturedLog log;
    OptimizeOptions oo;  // no n_trials: nothing known, nothing said
    oo.timeout_s = 0.0;
    study.optimize(objective, oo);
    EXPECT_EQ(log.text().find("n_startup_trials"), std::string::npos) << log.text();
  }
  EXPECT_EQ(RandomSampler(1).plan_budget(1), "");
  // The default ("auto") startup size of a budget of 5 trials is 5.
  Study small = tpe_study("auto", std::nullopt);
  const std::string text = optimize_log(small, 5);
  EXPECT_NE(text.find("at most 5 COMPLETE trials, at or below n_startup_trials = 5 (\"auto\")"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace hps
