// The sampler conformance suite: every sampler of
// tests/support/sampler_factories.cpp must pass it. Thousands of draws per
// distribution kind, through Study::ask()/tell() with a declared space and
// through define-by-run suggest calls, over every edge case of the
// distributions (log, step, a step that does not divide the range, single
// values, huge ranges, categorical choices of mixed JSON types, ordinal,
// conditional params); reproducibility for a fixed seed. Plus, for the
// random sampler alone, a chi-square check that its draws are uniform.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "algorithms/random_sampler.h"
#include "search/study.h"
#include "tests/support/sampler_factories.h"
#include "tests/support/sanitizer_scale.h"

namespace hps {
namespace {

using testsupport::NamedSamplerFactory;
using testsupport::sampler_factories;

// Trials per test run for each sampler. With about 20 params of 4 kinds,
// every kind gets thousands of draws.
// The ASan/UBSan build runs the same checks on 150 (support/sanitizer_scale.h).
constexpr int kTrials = testsupport::asan_scaled(1000, 150);
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* kEdgeCaseSpace = R"({
  "f":          {"type": "float", "low": -3, "high": 7},
  "f_log":      {"type": "float", "low": 1e-5, "high": 1, "log": true},
  "f_step":     {"type": "float", "low": 0.1, "high": 1.0, "step": 0.3},
  "f_nondiv":   {"type": "float", "low": 64, "high": 1312, "step": 160},
  "f_single":   {"type": "float", "low": 0.5, "high": 0.5},
  "f_huge":     {"type": "float", "low": -1e308, "high": 1e308},
  "i":          {"type": "int", "low": -5, "high": 5},
  "i_log":      {"type": "int", "low": 1, "high": 1024, "log": true},
  "i_step":     {"type": "int", "low": 1, "high": 9, "step": 2},
  "i_nondiv":   {"type": "int", "low": 0, "high": 10, "step": 3},
  "i_single":   {"type": "int", "low": 7, "high": 7},
  "i_big":      {"type": "int", "low": -9007199254740992, "high": 9007199254740992},
  "cat":        {"type": "categorical", "choices": [null, true, 1, 1.0, "1", "relu"]},
  "cat_single": {"type": "categorical", "choices": ["only"]},
  "ord":        {"type": "ordinal", "values": [16, 32, 64, 128]},
  "ord_str":    {"type": "ordinal", "values": ["low", "mid", "high"]},
  "ord_single": {"type": "ordinal", "values": [3.5]},
  "opt":        {"type": "categorical", "choices": ["adam", "sgd", null]},
  "momentum":   {"type": "float", "low": 0, "high": 0.99, "when": {"opt": "sgd"}},
  "beta":       {"type": "float", "low": 0.5, "high": 0.999, "log": true, "when": {"opt": ["adam", null]}},
  "nesterov":   {"type": "categorical", "choices": [true, false], "when": {"opt": "sgd"}},
  "dampening":  {"type": "int", "low": 1, "high": 4, "when": {"nesterov": false}},
  "width2":     {"type": "int", "low": 8, "high": 64, "step": 8, "when": {"i_step": [3, 5, 7, 9]}}
})";

SearchSpace edge_case_space() { return SearchSpace::from_json(Json::parse(kEdgeCaseSpace)); }

// A value for tell() computed from the params, with every trial state and
// infinite values mixed in so samplers see all kinds of history.
enum class Outcome { kValue, kInfinite, kNotANumber, kFail, kPruned };
Outcome outcome_of(std::int64_t number) {
  if (number % 13 == 12) return Outcome::kFail;
  if (number % 11 == 10) return Outcome::kPruned;
  if (number % 17 == 16) return Outcome::kNotANumber;
  if (number % 19 == 18) return Outcome::kInfinite;
  return Outcome::kValue;
}

double objective_value(const Params& params) {
  double v = 0;
  for (const auto& [name, value] : params) {
    if (name == "f_huge" || name == "i_big") continue;
    if (value.is_number())
      v += std::tanh(value.get<double>() / 100.0);
    else if (value.is_string())
      v += static_cast<double>(value.get_ref<const std::string&>().size()) / 10.0;
    else if (value.is_boolean())
      v += value.get<bool>() ? 0.3 : 0.0;
  }
  return v;
}

// Ends `trial` with the outcome chosen for its number.
void finish(Study& study, Trial& trial) {
  switch (outcome_of(trial.number())) {
    case Outcome::kValue:
      study.tell(trial, objective_value(trial.params()));
      break;
    case Outcome::kInfinite:
      study.tell(trial, trial.number() % 2 ? kInf : -kInf);
      break;
    case Outcome::kNotANumber:
      study.tell(trial, kNaN);
      break;
    case Outcome::kFail:
      study.tell(trial, TrialState::kFail, std::nullopt, "conformance");
      break;
    case Outcome::kPruned:
      trial.report(0, objective_value(trial.params()));
      study.tell(trial, TrialState::kPruned);
      break;
  }
}

// Checks one value against its distribution: contained, the JSON type of
// its kind, never outside [low, high].
void expect_valid_value(const std::string& name, const Json& value, const Distribution& d) {
  ASSERT_TRUE(d.contains(value)) << name << " = " << value.dump() << " not in "
                                 << d.to_json().dump();
  switch (d.kind()) {
    case DistributionKind::kInt:
      ASSERT_TRUE(value.is_number_integer())
          << name << " = " << value.dump() << " is not a JSON integer";
      break;
    case DistributionKind::kFloat:
      ASSERT_TRUE(value.is_number_float())
          << name << " = " << value.dump() << " is not a JSON float";
      break;
    default:
      ASSERT_GE(d.index_of(value), 0) << name << " = " << value.dump();
      break;
  }
  if (d.is_numeric()) {
    ASSERT_GE(value.get<double>(), d.low()) << name;
    ASSERT_LE(value.get<double>(), d.grid_high()) << name;
  }
}

// Distinct values seen per param, by their exact JSON text.
using Seen = std::map<std::string, std::set<std::string>>;

void expect_variety(const Seen& seen, const SearchSpace& space) {
  for (const auto& spec : space.params()) {
    auto it = seen.find(spec.name);
    ASSERT_NE(it, seen.end()) << spec.name << " was never sampled";
    if (spec.distribution.single_value()) {
      EXPECT_EQ(it->second.size(), 1u) << spec.name;
    } else {
      EXPECT_GE(it->second.size(), 2u) << spec.name << " always took the same value";
    }
  }
}

class SamplerConformanceTest : public ::testing::TestWithParam<NamedSamplerFactory> {
 protected:
  Study make_study(std::uint64_t seed, std::optional<SearchSpace> space,
                   StudyDirection dir = StudyDirection::kMinimize) {
    StudyOptions o;
    o.sampler = GetParam().make(seed);
    o.space = std::move(space);
    return Study::create(std::make_shared<InMemoryStorage>(), "conformance", dir, std::move(o));
  }
};

TEST_P(SamplerConformanceTest, DeclaredSpaceAskTell) {
  const SearchSpace space = edge_case_space();
  for (auto dir : {StudyDirection::kMinimize, StudyDirection::kMaximize}) {
    Study study = make_study(1, space, dir);
    Seen seen;
    int asked = 0;
    while (asked < kTrials) {
      // Several trials RUNNING at once, as with parallel workers.
      std::vector<Trial> batch;
      for (int k = 0; k < 3 && asked < kTrials; ++k, ++asked) batch.push_back(study.ask());
      for (Trial& t : batch) {
        ASSERT_EQ(space.check(t.params()), "") << Json(t.params()).dump();
        for (const auto& [name, value] : t.params()) {
          const ParamSpec* spec = space.find(name);
          ASSERT_NE(spec, nullptr) << name;
          expect_valid_value(name, value, spec->distribution);
          seen[name].insert(value.dump());
        }
        finish(study, t);
      }
    }
    expect_variety(seen, space);
    // What was stored is what the objective saw.
    auto all = study.trials();
    ASSERT_EQ(all.size(), static_cast<std::size_t>(kTrials));
    for (const auto& t : all) {
      ASSERT_TRUE(is_finished(t->state));
      ASSERT_EQ(space.check(t->params), "") << t->number;
      for (const auto& [name, value] : t->params) {
        expect_valid_value(name, value, space.find(name)->distribution);
        ASSERT_TRUE(t->distributions.at(name) == space.find(name)->distribution) << name;
      }
    }
  }
}

TEST_P(SamplerConformanceTest, ConditionalParamsFollowTheirParents) {
  Study study = make_study(2, edge_case_space());
  std::map<std::string, int> active;
  for (int i = 0; i < kTrials / 2; ++i) {
    Trial t = study.ask();
    const Json& opt = t.param("opt");
    EXPECT_EQ(t.has_param("momentum"), opt == "sgd");
    EXPECT_EQ(t.has_param("nesterov"), opt == "sgd");
    EXPECT_EQ(t.has_param("beta"), opt != "sgd");
    EXPECT_EQ(t.has_param("dampening"), t.has_param("nesterov") && t.param("nesterov") == false);
    EXPECT_EQ(t.has_param("width2"), t.param("i_step") != 1);
    for (const auto& [name, value] : t.params()) active[name]++;
    finish(study, t);
  }
  // Every conditional param is active sometimes (the space makes each
  // branch reachable).
  for (const char* name : {"momentum", "beta", "nesterov", "dampening", "width2"})
    EXPECT_GT(active[name], 0) << name;
}

// The same edge cases asked through suggest calls, with the conditions
// written as code.
double define_by_run_objective(Trial& t, Seen& seen) {
  auto check = [&](const std::string& name, const Json& value, const Distribution& d) {
    expect_valid_value(name, value, d);
    seen[name].insert(value.dump());
  };
  check("f", t.suggest_float("f", -3, 7), Distribution::make_float(-3, 7));
  check("f_log", t.suggest_float("f_log", 1e-5, 1, {.log = true, .step = std::nullopt}),
        Distribution::make_float(1e-5, 1, true));
  check("f_step", t.suggest_float("f_step", 0.1, 1.0, {.log = false, .step = 0.3}),
        Distribution::make_float(0.1, 1.0, false, 0.3));
  check("f_nondiv", t.suggest_float("f_nondiv", 64, 1312, {.log = false, .step = 160}),
        Distribution::make_float(64, 1312, false, 160.0));
  check("f_single", t.suggest_float("f_single", 0.5, 0.5), Distribution::make_float(0.5, 0.5));
  check("f_huge", t.suggest_float("f_huge", -1e308, 1e308),
        Distribution::make_float(-1e308, 1e308));
  check("i", t.suggest_int("i", -5, 5), Distribution::make_int(-5, 5));
  check("i_log", t.suggest_int("i_log", 1, 1024, {.log = true, .step = std::nullopt}),
        Distribution::make_int(1, 1024, true));
  std::int64_t i_step = t.suggest_int("i_step", 1, 9, {.log = false, .step = 2});
  check("i_step", i_step, Distribution::make_int(1, 9, false, 2));
  check("i_nondiv", t.suggest_int("i_nondiv", 0, 10, {.log = false, .step = 3}),
        Distribution::make_int(0, 10, false, 3));
  check("i_single", t.suggest_int("i_single", 7, 7), Distribution::make_int(7, 7));
  const std::int64_t p53 = std::int64_t{1} << 53;
  check("i_big", t.suggest_int("i_big", -p53, p53), Distribution::make_int(-p53, p53));
  std::vector<Json> cat = {Json(), true, 1, 1.0, "1", "relu"};
  check("cat", t.suggest_categorical("cat", cat), Distribution::make_categorical(cat));
  check("cat_single", t.suggest_categorical("cat_single", {"only"}),
        Distribution::make_categorical({"only"}));
  auto ord = Distribution::make_ordinal({16, 32, 64, 128});
  check("ord", t.suggest("ord", ord), ord);
  auto ord_str = Distribution::make_ordinal({"low", "mid", "high"});
  check("ord_str", t.suggest("ord_str", ord_str), ord_str);
  auto ord_single = Distribution::make_ordinal({3.5});
  check("ord_single", t.suggest("ord_single", ord_single), ord_single);
  std::vector<Json> opts = {"adam", "sgd", Json()};
  Json opt = t.suggest_categorical("opt", opts);
  check("opt", opt, Distribution::make_categorical(opts));
  if (opt == "sgd") {
    check("momentum", t.suggest_float("momentum", 0, 0.99), Distribution::make_float(0, 0.99));
    Json nesterov = t.suggest_categorical("nesterov", {true, false});
    check("nesterov", nesterov, Distribution::make_categorical({true, false}));
    if (nesterov == false)
      check("dampening", t.suggest_int("dampening", 1, 4), Distribution::make_int(1, 4));
  } else {
    check("beta", t.suggest_float("beta", 0.5, 0.999, {.log = true, .step = std::nullopt}),
          Distribution::make_float(0.5, 0.999, true));
  }
  if (i_step != 1)
    check("width2", t.suggest_int("width2", 8, 64, {.log = false, .step = 8}),
          Distribution::make_int(8, 64, false, 8));
  switch (outcome_of(t.number())) {
    case Outcome::kValue:
      return objective_value(t.params());
    case Outcome::kInfinite:
      return t.number() % 2 ? kInf : -kInf;
    case Outcome::kNotANumber:
      return kNaN;
    case Outcome::kFail:
      throw std::runtime_error("conformance");
    case Outcome::kPruned:
      t.report(0, objective_value(t.params()));
      throw TrialPruned();
  }
  return 0;
}

TEST_P(SamplerConformanceTest, DefineByRunSuggest) {
  const SearchSpace space = edge_case_space();  // the same params, declared
  Study study = make_study(3, std::nullopt);
  Seen seen;
  study.optimize([&](Trial& t) { return define_by_run_objective(t, seen); },
                 {.n_trials = kTrials, .catch_exceptions = true});
  expect_variety(seen, space);
  auto all = study.trials();
  ASSERT_EQ(all.size(), static_cast<std::size_t>(kTrials));
  for (const auto& t : all) {
    ASSERT_TRUE(is_finished(t->state));
    // The stored params are a valid assignment of the declared twin space:
    // conditional params present exactly when their parents allow.
    ASSERT_EQ(space.check(t->params), "") << t->number << ": " << Json(t->params).dump();
    for (const auto& [name, value] : t->params) {
      expect_valid_value(name, value, space.find(name)->distribution);
      ASSERT_TRUE(t->distributions.at(name) == space.find(name)->distribution) << name;
    }
  }
}

TEST_P(SamplerConformanceTest, DefineByRunWithThreads) {
  Study study = make_study(4, std::nullopt);
  std::mutex mu;
  Seen seen;
  study.optimize(
      [&](Trial& t) {
        Seen local;
        double v = define_by_run_objective(t, local);
        std::lock_guard lock(mu);
        for (auto& [k, s] : local) seen[k].insert(s.begin(), s.end());
        return v;
      },
      {.n_trials = kTrials / 4, .n_jobs = 4, .catch_exceptions = true});
  auto all = study.trials();
  ASSERT_EQ(all.size(), static_cast<std::size_t>(kTrials / 4));
  const SearchSpace space = edge_case_space();
  for (const auto& t : all) ASSERT_EQ(space.check(t->params), "") << t->number;
}

// The params of every trial, as exact JSON text, for a seeded run.
std::vector<std::string> declared_run(Study study, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    Trial t = study.ask();
    out.push_back(Json(t.params()).dump());
    finish(study, t);
  }
  return out;
}

std::vector<std::string> define_by_run_run(Study study, int n) {
  Seen seen;
  study.optimize([&](Trial& t) { return define_by_run_objective(t, seen); },
                 {.n_trials = n, .catch_exceptions = true});
  std::vector<std::string> out;
  for (const auto& t : study.trials()) out.push_back(Json(t->params).dump());
  return out;
}

TEST_P(SamplerConformanceTest, SameSeedSameSequence) {
  const int n = 150;
  auto a = declared_run(make_study(7, edge_case_space()), n);
  auto b = declared_run(make_study(7, edge_case_space()), n);
  EXPECT_EQ(a, b);
  auto c = declared_run(make_study(8, edge_case_space()), n);
  EXPECT_NE(a, c);
  auto d = define_by_run_run(make_study(7, std::nullopt), n);
  auto e = define_by_run_run(make_study(7, std::nullopt), n);
  EXPECT_EQ(d, e);
  auto f = define_by_run_run(make_study(9, std::nullopt), n);
  EXPECT_NE(d, f);
}

// One process's session on a study kept in `storage`: a fresh sampler (as
// after a restart) runs `n` trials. Returns the params of the trials it ran.
// Runs `n` trials of the study "resume" in `storage` with a fresh sampler.
// Define-by-run: through Study::optimize with n_trials = the rest of a
// budget of `budget` trials (what a resumed run asks for), stopped after
// `n` (an interruption): the sampler is told the same budget in every
// session (Sampler::plan_budget; TPE's "auto" startup size follows it).
std::vector<std::string> session(const NamedSamplerFactory& factory,
                                 const std::shared_ptr<Storage>& storage, std::uint64_t seed, int n,
                                 bool declared, int budget) {
  StudyOptions o;
  o.sampler = factory.make(seed);
  if (declared) o.space = edge_case_space();
  Study study = Study::load_if_exists(storage, "resume", StudyDirection::kMinimize, o);
  std::size_t before = study.trials().size();
  if (declared) {
    for (int i = 0; i < n; ++i) {
      Trial t = study.ask();
      finish(study, t);
    }
  } else {
    Seen seen;
    std::atomic<bool> stop{false};
    int finished = 0;
    study.optimize([&](Trial& t) { return define_by_run_objective(t, seen); },
                   {.n_trials = budget - static_cast<std::int64_t>(before),
                    .catch_exceptions = true,
                    .callback = [&](const FrozenTrial&) { stop = ++finished >= n; },
                    .stop = &stop});
  }
  std::vector<std::string> out;
  auto all = study.trials();
  for (std::size_t i = before; i < all.size(); ++i) out.push_back(Json(all[i]->params).dump());
  return out;
}

TEST_P(SamplerConformanceTest, ARestartContinuesTheSequence) {
  for (bool declared : {true, false}) {
    SCOPED_TRACE(declared ? "declared space" : "define-by-run");
    auto straight = session(GetParam(), std::make_shared<InMemoryStorage>(), 21, 80, declared, 80);
    auto storage = std::make_shared<InMemoryStorage>();
    auto first = session(GetParam(), storage, 21, 40, declared, 80);
    auto second = session(GetParam(), storage, 21, 40, declared, 80);
    // A restarted sampler must not repeat the trials already run ...
    std::set<std::string> earlier(first.begin(), first.end());
    for (const auto& p : second)
      EXPECT_EQ(earlier.count(p), 0u) << "repeated after a restart: " << p;
    // ... it samples as the uninterrupted run did.
    std::vector<std::string> resumed = first;
    resumed.insert(resumed.end(), second.begin(), second.end());
    EXPECT_EQ(resumed, straight);
  }
}

TEST_P(SamplerConformanceTest, EnqueuedValuesAreKept) {
  Study study = make_study(5, edge_case_space());
  Params fixed = {
      {"opt", "sgd"}, {"nesterov", false}, {"cat", Json()}, {"i_step", 1}, {"f_step", 0.7}};
  for (int i = 0; i < 20; ++i) study.enqueue_trial(fixed);
  for (int i = 0; i < 20; ++i) {
    Trial t = study.ask();
    for (const auto& [k, v] : fixed) {
      const Distribution& d = study.space()->find(k)->distribution;
      EXPECT_EQ(t.param(k).dump(), d.to_external(d.to_internal(v)).dump()) << k;
    }
    EXPECT_TRUE(t.has_param("dampening"));
    EXPECT_FALSE(t.has_param("width2"));
    EXPECT_EQ(study.space()->check(t.params()), "");
    finish(study, t);
  }
}

TEST_P(SamplerConformanceTest, AnEmptySpaceGivesEmptyTrials) {
  Study study = make_study(6, SearchSpace());
  for (int i = 0; i < 5; ++i) {
    Trial t = study.ask();
    EXPECT_TRUE(t.params().empty());
    study.tell(t, 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Samplers, SamplerConformanceTest, ::testing::ValuesIn(sampler_factories()),
                         [](const ::testing::TestParamInfo<NamedSamplerFactory>& param_info) {
                           return param_info.param.name;
                         });

// ------------------------------------------------------------ uniformity

// Pearson's chi-square statistic of `counts` against `expected` counts.
double chi_square(const std::vector<double>& counts, const std::vector<double>& expected) {
  double x = 0;
  for (std::size_t i = 0; i < counts.size(); ++i)
    x += (counts[i] - expected[i]) * (counts[i] - expected[i]) / expected[i];
  return x;
}

// A loose bound: the mean of the chi-square law plus ten standard
// deviations. A fair sampler is far below it; a biased one (a grid point
// with twice its share, a missing bin) is far above. The seed is fixed, so
// the result never changes from run to run.
double loose_bound(std::size_t bins) {
  double k = static_cast<double>(bins - 1);
  return k + 10 * std::sqrt(2 * k);
}

TEST(RandomSamplerTest, DrawsAreUniform) {
  const int n = 3000;
  auto space = SearchSpace::from_json(Json::parse(R"({
    "f":        {"type": "float", "low": -3, "high": 7},
    "f_log":    {"type": "float", "low": 1e-3, "high": 1e3, "log": true},
    "f_step":   {"type": "float", "low": 0.1, "high": 1.0, "step": 0.3},
    "f_nondiv": {"type": "float", "low": 64, "high": 1312, "step": 160},
    "f_huge":   {"type": "float", "low": -1e308, "high": 1e308},
    "i":        {"type": "int", "low": -5, "high": 5},
    "i_step":   {"type": "int", "low": 1, "high": 9, "step": 2},
    "i_nondiv": {"type": "int", "low": 0, "high": 10, "step": 3},
    "i_log":    {"type": "int", "low": 1, "high": 64, "log": true},
    "cat":      {"type": "categorical", "choices": [null, true, 1, 1.0, "1", "relu"]},
    "ord":      {"type": "ordinal", "values": [16, 32, 64, 128]}
  })"));
  StudyOptions o;
  o.sampler = std::make_shared<RandomSampler>(12345);
  o.space = space;
  Study study =
      Study::create(std::make_shared<InMemoryStorage>(), "uniform", StudyDirection::kMinimize, o);
  std::map<std::string, std::vector<double>> values;
  for (int i = 0; i < n; ++i) {
    Trial t = study.ask();
    for (const auto& [k, v] : t.params()) {
      const auto& d = space.find(k)->distribution;
      values[k].push_back(d.is_indexed() ? static_cast<double>(d.index_of(v)) : v.get<double>());
    }
    study.tell(t, 0.0);
  }
  // Continuous params: equal-width bins (in log space for log params).
  auto binned = [&](const std::string& name, double lo, double hi, int bins, bool log) {
    std::vector<double> counts(static_cast<std::size_t>(bins), 0.0);
    for (double v : values[name]) {
      // Halved so that h - l stays finite for [-1e308, 1e308].
      double x = log ? std::log(v) : v / 2;
      double l = log ? std::log(lo) : lo / 2, h = log ? std::log(hi) : hi / 2;
      int b = static_cast<int>((x - l) / (h - l) * bins);
      counts[static_cast<std::size_t>(std::clamp(b, 0, bins - 1))] += 1;
    }
    std::vector<double> expected(counts.size(), static_cast<double>(n) / bins);
    double x2 = chi_square(counts, expected);
    EXPECT_LT(x2, loose_bound(counts.size())) << name;
  };
  binned("f", -3, 7, 10, false);
  binned("f_log", 1e-3, 1e3, 12, true);
  binned("f_huge", -1e308, 1e308, 10, false);
  // Finite params: every value equally likely, or for a log int each value
  // with the log-width of its cell [v - 1/2, v + 1/2].
  auto discrete = [&](const std::string& name, const std::vector<double>& points,
                      const std::vector<double>& weights) {
    std::vector<double> counts(points.size(), 0.0);
    for (double v : values[name]) {
      auto it = std::find(points.begin(), points.end(), v);
      ASSERT_NE(it, points.end()) << name << " gave " << v;
      counts[static_cast<std::size_t>(it - points.begin())] += 1;
    }
    double total = 0;
    for (double w : weights) total += w;
    std::vector<double> expected;
    for (double w : weights) expected.push_back(n * w / total);
    EXPECT_LT(chi_square(counts, expected), loose_bound(points.size())) << name;
  };
  auto flat = [](std::size_t k) { return std::vector<double>(k, 1.0); };
  const auto& f_step = space.find("f_step")->distribution;
  std::vector<double> f_step_points;
  for (double x : {0.1, 0.4, 0.7, 1.0})
    f_step_points.push_back(f_step.to_external(x).get<double>());
  discrete("f_step", f_step_points, flat(4));
  discrete("f_nondiv", {64, 224, 384, 544, 704, 864, 1024, 1184}, flat(8));
  discrete("i", {-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5}, flat(11));
  discrete("i_step", {1, 3, 5, 7, 9}, flat(5));
  discrete("i_nondiv", {0, 3, 6, 9}, flat(4));
  std::vector<double> log_points, log_weights;
  for (int v = 1; v <= 64; ++v) {
    log_points.push_back(v);
    log_weights.push_back(std::log(v + 0.5) - std::log(v - 0.5));
  }
  discrete("i_log", log_points, log_weights);
  discrete("cat", {0, 1, 2, 3, 4, 5}, flat(6));
  discrete("ord", {0, 1, 2, 3}, flat(4));
}

}  // namespace
}  // namespace hps
