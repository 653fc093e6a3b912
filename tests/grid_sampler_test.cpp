// Tests of algorithms/grid_sampler.h: every point once, then "exhausted";
// conditional grids counted exactly; failed points not tried again; a
// resumed study (SQLite, a fresh sampler) continues the order; errors
// naming the field. Validity and reproducibility on the edge-case space are
// in sampler_conformance_test.cpp.
#include "algorithms/grid_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "algorithms/factory.h"
#include "search/storage.h"
#include "search/study.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

SearchSpace space_of(const char* json) { return SearchSpace::from_json(Json::parse(json)); }

const char* kSmall = R"({
  "x": {"type": "int", "low": 1, "high": 3},
  "c": {"type": "categorical", "choices": ["a", "b"]}
})";

Study grid_study(std::shared_ptr<Storage> storage, const SearchSpace& space, Json sampler) {
  StudyOptions o;
  o.sampler = make_sampler(sampler, 7);
  o.space = space;
  return Study::load_if_exists(std::move(storage), "grid", StudyDirection::kMinimize, o);
}

// Asks until the sampler says the space is exhausted; returns the params
// seen, as JSON text, telling each trial `state`.
std::vector<std::string> run_to_exhaustion(Study& study, TrialState state, int limit = 1000) {
  std::vector<std::string> seen;
  for (int i = 0; i < limit; ++i) {
    std::optional<Trial> t;
    try {
      t.emplace(study.ask());
    } catch (const SearchSpaceExhausted&) {
      return seen;
    }
    seen.push_back(Json(t->params()).dump());
    if (state == TrialState::kComplete)
      study.tell(*t, static_cast<double>(i));
    else
      study.tell(*t, state, std::nullopt, "test");
  }
  ADD_FAILURE() << "never exhausted after " << limit << " trials";
  return seen;
}

TEST(GridSamplerTest, EveryPointOnceThenExhausted) {
  for (TrialState state : {TrialState::kComplete, TrialState::kFail, TrialState::kPruned}) {
    SCOPED_TRACE(to_string(state));
    Study study =
        grid_study(std::make_shared<InMemoryStorage>(), space_of(kSmall), Json{{"type", "grid"}});
    auto seen = run_to_exhaustion(study, state);
    // 3 x 2 points, each once: a FAIL or PRUNED point is not tried again.
    EXPECT_EQ(seen.size(), 6u);
    EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 6u);
  }
}

TEST(GridSamplerTest, RunningTrialsHoldTheirPoints) {
  Study study =
      grid_study(std::make_shared<InMemoryStorage>(), space_of(kSmall), Json{{"type", "grid"}});
  std::vector<Trial> running;
  std::set<std::string> seen;
  for (int i = 0; i < 6; ++i) {
    running.push_back(study.ask());
    seen.insert(Json(running.back().params()).dump());
  }
  EXPECT_EQ(seen.size(), 6u);  // six parallel trials, six points
  EXPECT_THROW(study.ask(), SearchSpaceExhausted);
}

TEST(GridSamplerTest, ConditionalParamsAddOnlyTheirActivePoints) {
  GridSampler sampler(GridOptions{.seed = 1, .values = {{"momentum", {0.0, 0.5, 0.9}}}});
  // sgd: 3 momentum values x 2 nesterov; adam: 1; plus 4 widths each.
  const SearchSpace space = space_of(R"({
    "opt": {"type": "categorical", "choices": ["sgd", "adam"]},
    "momentum": {"type": "float", "low": 0, "high": 0.99, "when": {"opt": "sgd"}},
    "nesterov": {"type": "categorical", "choices": [true, false], "when": {"opt": "sgd"}},
    "width": {"type": "ordinal", "values": [16, 32, 64, 128]}
  })");
  EXPECT_EQ(sampler.grid_size(space), (3u * 2u + 1u) * 4u);
  Study study =
      grid_study(std::make_shared<InMemoryStorage>(), space, Json::parse(R"({"type": "grid",
                             "values": {"momentum": [0.0, 0.5, 0.9]}})"));
  auto seen = run_to_exhaustion(study, TrialState::kComplete);
  EXPECT_EQ(seen.size(), 28u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 28u);
  for (const auto& p : seen) {
    Json params = Json::parse(p);
    EXPECT_EQ(params.contains("momentum"), params["opt"] == "sgd") << p;
  }
}

TEST(GridSamplerTest, AResumedStudyOnSqliteContinuesTheOrder) {
  testsupport::TempDir dir("grid");
  const std::string path = dir.file("study.db");
  const SearchSpace space = space_of(kSmall);
  // Straight: six points in the seed's order.
  Study straight = grid_study(std::make_shared<InMemoryStorage>(), space, Json{{"type", "grid"}});
  auto all = run_to_exhaustion(straight, TrialState::kComplete);
  ASSERT_EQ(all.size(), 6u);
  // Three trials, then a new process (a fresh sampler, the store read back:
  // ints come back as JSON numbers of another type) runs the rest.
  std::vector<std::string> resumed;
  {
    Study first = grid_study(open_storage(path), space, Json{{"type", "grid"}});
    for (int i = 0; i < 3; ++i) {
      Trial t = first.ask();
      resumed.push_back(Json(t.params()).dump());
      first.tell(t, 1.0);
    }
  }
  Study second = grid_study(open_storage(path), space, Json{{"type", "grid"}});
  auto rest = run_to_exhaustion(second, TrialState::kComplete);
  resumed.insert(resumed.end(), rest.begin(), rest.end());
  EXPECT_EQ(resumed, all);
}

// A trial enqueued with every param fixed runs as given, even when a
// finished trial holds that point: the coordinator's retry of a trial that
// an interrupted run left FAIL ("interrupted") is enqueued with the params
// it had. Before, the grid found no free point that agreed with the fixed
// params and failed the retry with "search space exhausted", which ended the
// resumed study with points never tried.
TEST(GridSamplerTest, ARetryOfAnInterruptedTrialRunsItsPointAndTheRestFollow) {
  testsupport::TempDir dir("grid_retry");
  const SearchSpace space = space_of(kSmall);
  std::string first_point;
  {
    Study first = grid_study(open_storage(dir.file("study.db")), space, Json{{"type", "grid"}});
    Trial done = first.ask();
    first.tell(done, 1.0);
    Trial cut = first.ask();
    first_point = Json(cut.params()).dump();
    first.tell(cut, TrialState::kFail, std::nullopt, "interrupted");
    first.enqueue_trial(cut.params());  // what the coordinator's retry does
  }
  // A new process: the retry first, then the four points not tried yet.
  Study second = grid_study(open_storage(dir.file("study.db")), space, Json{{"type", "grid"}});
  auto rest = run_to_exhaustion(second, TrialState::kComplete);
  ASSERT_EQ(rest.size(), 5u);
  EXPECT_EQ(rest[0], first_point);
  EXPECT_EQ(std::set<std::string>(rest.begin(), rest.end()).size(), 5u);
  auto trials = second.trials();
  std::set<std::string> complete;
  for (const auto& t : trials)
    if (t->state == TrialState::kComplete) complete.insert(Json(t->params).dump());
  EXPECT_EQ(complete.size(), 6u);  // every point of the grid COMPLETE once
}

// An int param's listed 1.0 is the value 1: listed beside 1 it is a
// duplicate, and alone it is given to trials as the int 1.
TEST(GridSamplerTest, AnIntParamsListedFloatsAreItsInts) {
  const SearchSpace space = space_of(R"({"a": {"type": "int", "low": 1, "high": 5}})");
  GridSampler twice(GridOptions{.seed = 1, .values = {{"a", {Json(1), Json(1.0), Json(2)}}}});
  try {
    (void)twice.grid_size(space);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "sampler.values.a: lists the value 1.0 twice");
  }
  Study study = grid_study(std::make_shared<InMemoryStorage>(), space,
                           Json::parse(R"({"type": "grid", "values": {"a": [2.0, 3]}})"));
  auto seen = run_to_exhaustion(study, TrialState::kComplete);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{R"({"a":2})", R"({"a":3})"}));
}

TEST(GridSamplerTest, SeedsGiveDifferentOrders) {
  const SearchSpace space = space_of(R"({"x": {"type": "int", "low": 0, "high": 99}})");
  auto order = [&](int seed) {
    StudyOptions o;
    o.sampler = make_sampler(Json{{"type", "grid"}}, static_cast<std::uint64_t>(seed));
    o.space = space;
    Study s = Study::create(std::make_shared<InMemoryStorage>(), "s", StudyDirection::kMinimize, o);
    return run_to_exhaustion(s, TrialState::kComplete);
  };
  auto a = order(1), b = order(2);
  ASSERT_EQ(a.size(), 100u);
  EXPECT_NE(a, b);
  EXPECT_NE(a[0] + a[1] + a[2], R"({"x":0}{"x":1}{"x":2})");  // shuffled, not in value order
}

TEST(GridSamplerTest, DefineByRunWalksTheProductOfTheValues) {
  StudyOptions o;
  o.sampler = make_sampler(Json::parse(R"({"type": "grid", "seed": 3,
      "values": {"lr": [0.001, 0.01, 0.1], "layers": [1, 2]}})"));
  Study study =
      Study::create(std::make_shared<InMemoryStorage>(), "dbr", StudyDirection::kMinimize, o);
  std::set<std::pair<double, std::int64_t>> seen;
  study.optimize(
      [&](Trial& t) {
        double lr = t.suggest_float("lr", 1e-4, 1.0, {.log = true, .step = std::nullopt});
        std::int64_t layers = t.suggest_int("layers", 1, 4);
        seen.insert({lr, layers});
        return lr * static_cast<double>(layers);
      },
      {.n_trials = 20});
  EXPECT_EQ(seen.size(), 6u);
  // The seventh trial's first suggest call found the grid exhausted: that
  // trial ends FAIL saying so, and the study stops (not 20 trials).
  auto trials = study.trials();
  ASSERT_EQ(trials.size(), 7u);
  EXPECT_EQ(trials.back()->state, TrialState::kFail);
  EXPECT_NE(trials.back()->fail_reason.find("exhausted"), std::string::npos);
}

TEST(GridSamplerTest, ErrorsNameTheField) {
  auto error_of = [](const char* sampler, const char* space) -> std::string {
    try {
      auto s = make_sampler(Json::parse(sampler));
      StudyOptions o;
      o.sampler = s;
      o.space = space_of(space);
      Study study =
          Study::create(std::make_shared<InMemoryStorage>(), "e", StudyDirection::kMinimize, o);
      (void)study.ask();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  const char* lr = R"({"lr": {"type": "float", "low": 0.001, "high": 0.1, "log": true}})";
  EXPECT_NE(error_of(R"({"type": "grid"})", lr).find("sampler.values.lr"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "grid"})", lr).find("continuous"), std::string::npos);
  EXPECT_EQ(error_of(R"({"type": "grid", "values": {"lr": [0.001, 0.01]}})", lr), "no error");
  EXPECT_NE(error_of(R"({"type": "grid", "values": {"lr": [0.5]}})", lr).find("not in the param"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "grid", "values": {"lr": [0.01, 0.01]}})", lr).find("twice"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "grid", "values": {"lr": 0.01}})", lr).find("sampler.values.lr"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "grid", "values": {"lr": [0.01], "lx": [1]}})", lr)
                .find("sampler.values.lx: no param"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "grid", "max_points": 0})", lr).find("sampler.max_points"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "grid", "seeds": 1})", lr).find("seeds"), std::string::npos);
  const char* big = R"({"a": {"type": "int", "low": 0, "high": 999},
                        "b": {"type": "int", "low": 0, "high": 999}})";
  EXPECT_NE(error_of(R"({"type": "grid", "max_points": 1000})", big).find("sampler.max_points"),
            std::string::npos);
  const char* huge = R"({"a": {"type": "int", "low": 0, "high": 9007199254740992}})";
  EXPECT_NE(error_of(R"({"type": "grid"})", huge).find("sampler.values.a"), std::string::npos);
}

}  // namespace
}  // namespace hps
