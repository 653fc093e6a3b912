// Tests of algorithms/tpe_sampler.h: options and space.json parsing, the
// behaviour the TPE issue asks for (startup, grids, constant liar, types,
// conditional params, pruned/failed trials, duplicates and exhaustion,
// reproducibility), and that it optimizes better than random search.
#include "algorithms/tpe_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "algorithms/factory.h"
#include "algorithms/tpe_model.h"
#include "objectives/synthetic.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/util/random.h"
#include "tests/support/sanitizer_scale.h"

namespace hps {
namespace {

// "x<i>" (built by appending: GCC 12 at -O3 warns falsely, -Wrestrict, on
// "literal" + std::to_string(i)).
std::string x_name(std::size_t i) {
  std::string s = "x";
  s += std::to_string(i);
  return s;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------- helpers

// A hand-built history of trials, for calling the sampler directly.
class History {
 public:
  explicit History(const SearchSpace& space) {
    for (const auto& p : space.params()) dists_.emplace(p.name, p.distribution);
  }
  void add(TrialState state, Params params, std::optional<double> value = std::nullopt,
           std::map<std::int64_t, double> intermediate = {}) {
    auto t = std::make_shared<FrozenTrial>();
    t->number = next_number_++;
    t->trial_id = t->number;
    t->state = state;
    t->params = std::move(params);
    for (const auto& [k, v] : t->params) t->distributions.emplace(k, dists_.at(k));
    t->value = value;
    t->intermediate_values = std::move(intermediate);
    trials_.push_back(t);
  }
  // Skips trial numbers (as if those trials belonged to someone else).
  void skip_to(std::int64_t number) { next_number_ = number; }
  // Samples the whole space for a new RUNNING trial numbered `number`.
  Params suggest(Sampler& s, const SearchSpace& space, std::int64_t number,
                 StudyDirection dir = StudyDirection::kMinimize, Params fixed = {},
                 int n_workers = 1) const {
    FrozenTrial current;
    current.number = number;
    current.trial_id = number;
    current.state = TrialState::kRunning;
    current.params = fixed;
    std::vector<TrialPtr> all = trials_;
    all.push_back(std::make_shared<FrozenTrial>(current));
    SamplingContext ctx{dir, all, current, n_workers};
    Params p = fixed;
    s.sample(ctx, space, p);
    return p;
  }
  const std::vector<TrialPtr>& trials() const { return trials_; }

 private:
  std::map<std::string, Distribution> dists_;
  std::vector<TrialPtr> trials_;
  std::int64_t next_number_ = 0;
};

SearchSpace unit_space(std::size_t n) {
  SearchSpace s;
  for (std::size_t i = 0; i < n; ++i) s.add(x_name(i), Distribution::make_float(0, 1));
  return s;
}

std::shared_ptr<TpeSampler> tpe(std::uint64_t seed, bool multivariate = false,
                                std::size_t n_startup = 10) {
  TpeOptions o;
  o.seed = seed;
  o.multivariate = multivariate;
  o.n_startup_trials = n_startup;
  return std::make_shared<TpeSampler>(o);
}

Study make_study(std::shared_ptr<Sampler> sampler, std::optional<SearchSpace> space,
                 StudyDirection dir = StudyDirection::kMinimize) {
  StudyOptions o;
  o.sampler = std::move(sampler);
  o.space = std::move(space);
  return Study::create(std::make_shared<InMemoryStorage>(), "tpe-test", dir, std::move(o));
}

// ---------------------------------------------------------------- options

TEST(TpeOptionsTest, DocumentedDefaults) {
  TpeOptions o;
  EXPECT_FALSE(o.n_startup_trials.has_value());  // "auto"
  EXPECT_EQ(o.startup_trials(std::nullopt), 10u);
  EXPECT_EQ(o.n_ei_candidates, 24u);
  EXPECT_EQ(o.gamma.rule, TpeGamma::Rule::kLinear);
  EXPECT_DOUBLE_EQ(o.gamma.factor, 0.1);
  EXPECT_EQ(o.gamma.cap, 25u);
  EXPECT_FALSE(o.branch_gamma.has_value());  // opt-in (README, "TPE: mixed spaces")
  EXPECT_DOUBLE_EQ(o.prior_weight, 1.0);
  EXPECT_TRUE(o.consider_prior);
  EXPECT_FALSE(o.constant_liar);
  EXPECT_TRUE(o.multivariate);
  EXPECT_FALSE(o.group);
  EXPECT_NO_THROW(o.validate());
}

// Issue #17: on mixed spaces (bench/hpo_suite.py) the default TPE stayed in
// a wrong branch of a categorical: with the Aitchison-Aitken kernel a choice
// absent from the below group got about 1/(K n) of each kernel's mass, so
// l(x) hardly ever drew it again. The default kernel is Optuna 3.1's
// (parzen_estimator.py, _calculate_categorical_params): every choice gets
// prior_weight / (n + 1), the observed one 1 more. Expected masses computed
// with Optuna 3.1's _ParzenEstimator for the same observations.
TEST(TpeOptionsTest, DefaultCategoricalKernelIsOptunas) {
  const auto dim =
      tpe::DimensionSpec::from(Distribution::make_categorical({Json("a"), Json("b"), Json("c")}));
  const auto opt = tpe::estimator_options(TpeOptions().resolved());
  const std::vector<double> pts = {0, 1, 2};
  std::vector<double> lp(3);
  {
    const std::vector<double> obs = {0}, w = {1};
    tpe::ParzenEstimator(std::vector{dim}, obs, w, opt).log_pdf(pts, lp);
    EXPECT_NEAR(std::exp(lp[0]), 0.46666667, 1e-7);
    EXPECT_NEAR(std::exp(lp[1]), 0.26666667, 1e-7);
    EXPECT_NEAR(std::exp(lp[2]), 0.26666667, 1e-7);
  }
  {
    const std::vector<double> obs = {0, 0, 1}, w = {1, 1, 1};
    tpe::ParzenEstimator(std::vector{dim}, obs, w, opt).log_pdf(pts, lp);
    EXPECT_NEAR(std::exp(lp[0]), 0.47619048, 1e-7);
    EXPECT_NEAR(std::exp(lp[1]), 0.33333333, 1e-7);
    EXPECT_NEAR(std::exp(lp[2]), 0.19047619, 1e-7);  // never observed
  }
  // The Aitchison-Aitken kernel is still there on request: 1/(K n) per kernel.
  auto aa = opt;
  aa.categorical_kernel = tpe::CategoricalKernel::kAitchisonAitken;
  const std::vector<double> obs = {0, 0, 1}, w = {1, 1, 1};
  tpe::ParzenEstimator(std::vector{dim}, obs, w, aa).log_pdf(pts, lp);
  EXPECT_NEAR(std::exp(lp[2]), (3 * (0.25 / 3) + 1.0 / 3) / 4, 1e-12);
}

TEST(TpeOptionsTest, ModeDependentDefaultsResolve) {
  TpeOptions uni;
  uni.multivariate = false;
  TpeOptions r = uni.resolved();
  EXPECT_TRUE(*r.consider_magic_clip);
  EXPECT_DOUBLE_EQ(*r.min_bandwidth_factor, 0.0);
  EXPECT_TRUE(*r.equal_kernel_heights);
  EXPECT_DOUBLE_EQ(*r.bandwidth_factor, 1.0);
  TpeOptions multi;
  multi.multivariate = true;
  r = multi.resolved();
  EXPECT_FALSE(*r.consider_magic_clip);
  EXPECT_DOUBLE_EQ(*r.min_bandwidth_factor, 0.04);
  EXPECT_FALSE(*r.equal_kernel_heights);
  EXPECT_DOUBLE_EQ(*r.bandwidth_factor, 0.7);
  EXPECT_DOUBLE_EQ(*r.min_bandwidth_cells, 0.5);
  EXPECT_DOUBLE_EQ(*uni.resolved().min_bandwidth_cells, 0.0);
  // Values set explicitly are kept.
  multi.consider_magic_clip = true;
  EXPECT_TRUE(*multi.resolved().consider_magic_clip);
  EXPECT_EQ(TpeSampler(multi).options().min_bandwidth_factor, 0.04);
}

TEST(TpeOptionsTest, GammaRules) {
  TpeGamma g;  // min(ceil(0.1 n), 25)
  EXPECT_EQ(g(0), 0u);
  EXPECT_EQ(g(1), 1u);
  EXPECT_EQ(g(10), 1u);
  EXPECT_EQ(g(11), 2u);
  EXPECT_EQ(g(100), 10u);
  EXPECT_EQ(g(1000), 25u);
  g.rule = TpeGamma::Rule::kSqrt;
  g.factor = 0.5;
  g.cap = 100;
  EXPECT_EQ(g(100), 5u);  // ceil(0.5 * 10)
  EXPECT_EQ(g(101), 6u);  // ceil(0.5 * 10.05)
  g.factor = 2;
  EXPECT_EQ(g(2), 2u);  // never more than n
}

TEST(TpeOptionsTest, FromJsonReadsEveryOptionAndRoundTrips) {
  Json j = {{"type", "tpe"},
            {"seed", 7},
            {"n_startup_trials", 5},
            {"n_ei_candidates", 48},
            {"gamma", {{"rule", "sqrt"}, {"factor", 0.25}, {"cap", 30}}},
            {"branch_gamma", {{"rule", "linear"}, {"factor", 0.2}, {"cap", 10}}},
            {"prior_weight", 2.0},
            {"consider_prior", false},
            {"consider_endpoints", true},
            {"consider_magic_clip", false},
            {"min_bandwidth_factor", 0.01},
            {"min_bandwidth_cells", 0.25},
            {"marginal_mixture", 0.25},
            {"equal_kernel_heights", true},
            {"bandwidth", "scott"},
            {"bandwidth_factor", 0.5},
            {"categorical_kernel", "aitchison_aitken"},
            {"weights", "uniform"},
            {"weights_window", 10},
            {"warm_start_weighting", "none"},
            {"multivariate", true},
            {"group", true},
            {"constant_liar", true},
            {"duplicate_retries", 4},
            {"startup", "halton"}};
  TpeOptions o = TpeOptions::from_json(j);
  EXPECT_EQ(o.startup, QmcSequence::kHalton);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.n_startup_trials, 5u);
  EXPECT_EQ(o.n_ei_candidates, 48u);
  EXPECT_EQ(o.gamma.rule, TpeGamma::Rule::kSqrt);
  EXPECT_DOUBLE_EQ(o.gamma.factor, 0.25);
  EXPECT_EQ(o.gamma.cap, 30u);
  ASSERT_TRUE(o.branch_gamma.has_value());
  EXPECT_EQ(o.branch_gamma->rule, TpeGamma::Rule::kLinear);
  EXPECT_DOUBLE_EQ(o.branch_gamma->factor, 0.2);
  EXPECT_EQ(o.branch_gamma->cap, 10u);
  EXPECT_DOUBLE_EQ(o.prior_weight, 2.0);
  EXPECT_FALSE(o.consider_prior);
  EXPECT_TRUE(o.consider_endpoints);
  EXPECT_FALSE(*o.consider_magic_clip);
  EXPECT_DOUBLE_EQ(*o.min_bandwidth_factor, 0.01);
  EXPECT_DOUBLE_EQ(*o.min_bandwidth_cells, 0.25);
  EXPECT_DOUBLE_EQ(*o.marginal_mixture, 0.25);
  EXPECT_TRUE(*o.equal_kernel_heights);
  EXPECT_EQ(o.bandwidth, tpe::BandwidthRule::kScott);
  EXPECT_DOUBLE_EQ(*o.bandwidth_factor, 0.5);
  EXPECT_EQ(o.categorical_kernel, tpe::CategoricalKernel::kAitchisonAitken);
  EXPECT_EQ(o.weights, TpeWeights::kUniform);
  EXPECT_EQ(o.weights_window, 10u);
  EXPECT_EQ(o.warm_start_weighting, TpeWarmStartWeighting::kNone);
  EXPECT_TRUE(o.multivariate);
  EXPECT_TRUE(o.group);
  EXPECT_TRUE(o.constant_liar);
  EXPECT_EQ(o.duplicate_retries, 4u);
  EXPECT_EQ(o.to_json(), j);
  EXPECT_EQ(TpeOptions::from_json(TpeOptions().to_json()).to_json(), TpeOptions().to_json());
  // The bandwidth rule's default is "auto" (resolved per group, not per study).
  EXPECT_EQ(TpeOptions().to_json().at("bandwidth"), "auto");
  EXPECT_FALSE(TpeOptions().resolved().bandwidth.has_value());
  EXPECT_FALSE(TpeOptions::from_json({{"type", "tpe"}, {"bandwidth", "auto"}}).bandwidth);
  // The startup size's default is "auto" too (resolved against the budget).
  EXPECT_EQ(TpeOptions().to_json().at("n_startup_trials"), "auto");
  EXPECT_FALSE(TpeOptions::from_json({{"type", "tpe"}, {"n_startup_trials", "auto"}})
                   .n_startup_trials.has_value());
  // null: the branch choice is split with gamma.
  j["branch_gamma"] = nullptr;
  EXPECT_FALSE(TpeOptions::from_json(j).branch_gamma.has_value());
  EXPECT_EQ(TpeOptions::from_json(j).to_json(), j);
}

void expect_config_error(const Json& j, const std::string& path, const std::string& words) {
  try {
    make_sampler(j);
    ADD_FAILURE() << "no error for " << j.dump();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), path) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(TpeOptionsTest, BadOptionsNameTheField) {
  expect_config_error({{"type", "tpe"}, {"n_ei_candidate", 3}}, "sampler.n_ei_candidate",
                      "did you mean 'n_ei_candidates'");
  expect_config_error({{"type", "tpe"}, {"gamma", {{"factor", 0}}}}, "sampler.gamma.factor", "> 0");
  expect_config_error({{"type", "tpe"}, {"gamma", {{"factor", 1.5}}}}, "sampler.gamma.factor",
                      "<= 1");
  expect_config_error({{"type", "tpe"}, {"gamma", {{"rule", "cube"}}}}, "sampler.gamma.rule",
                      "sqrt");
  expect_config_error({{"type", "tpe"}, {"gamma", {{"cap", 0}}}}, "sampler.gamma.cap", ">= 1");
  expect_config_error({{"type", "tpe"}, {"gamma", {{"fraction", 0.1}}}}, "sampler.gamma.fraction",
                      "unknown key");
  expect_config_error({{"type", "tpe"}, {"gamma", 0.1}}, "sampler.gamma", "must be an object");
  expect_config_error({{"type", "tpe"}, {"min_bandwidth_cells", -0.5}},
                      "sampler.min_bandwidth_cells", "must be in [0, 10]");
  expect_config_error({{"type", "tpe"}, {"min_bandwidth_cells", "wide"}},
                      "sampler.min_bandwidth_cells", "number");
  expect_config_error({{"type", "tpe"}, {"branch_gamma", {{"factor", 1.5}}}},
                      "sampler.branch_gamma.factor", "<= 1 for the linear rule");
  expect_config_error({{"type", "tpe"}, {"branch_gamma", {{"rule", "sqrt"}, {"factor", -1}}}},
                      "sampler.branch_gamma.factor", "> 0");
  expect_config_error({{"type", "tpe"}, {"branch_gamma", "sqrt"}}, "sampler.branch_gamma",
                      "must be an object");
  expect_config_error({{"type", "tpe"}, {"prior_weight", -1}}, "sampler.prior_weight", "> 0");
  expect_config_error({{"type", "tpe"}, {"n_startup_trials", "some"}}, "sampler.n_startup_trials",
                      "must be an integer from 0 to 9223372036854775807 or \"auto\", got 'some'");
  expect_config_error({{"type", "tpe"}, {"n_startup_trials", -1}}, "sampler.n_startup_trials",
                      "from 0 to 9223372036854775807 or \"auto\", got -1");
  expect_config_error({{"type", "tpe"}, {"n_ei_candidates", 0}}, "sampler.n_ei_candidates",
                      "must be between 1 and 100000, got 0");
  // A huge count would allocate gigabytes at the first suggestion.
  expect_config_error({{"type", "tpe"}, {"n_ei_candidates", 1000000000}}, "sampler.n_ei_candidates",
                      "must be between 1 and 100000, got 1000000000");
  expect_config_error({{"type", "tpe"}, {"bandwidth", "silverman"}}, "sampler.bandwidth", "scott");
  expect_config_error({{"type", "tpe"}, {"weights", "new"}}, "sampler.weights", "old_decay");
  expect_config_error({{"type", "tpe"}, {"categorical_kernel", "dirichlet"}},
                      "sampler.categorical_kernel", "prior_weighted");
  expect_config_error({{"type", "tpe"}, {"multivariate", "yes"}}, "sampler.multivariate", "");
  expect_config_error({{"type", "tpe"}, {"group", true}, {"multivariate", false}}, "sampler.group",
                      "multivariate");
  expect_config_error({{"type", "tpe"}, {"min_bandwidth_factor", 2}},
                      "sampler.min_bandwidth_factor", "[0, 1]");
  expect_config_error({{"type", "tpe"}, {"marginal_mixture", 1.5}}, "sampler.marginal_mixture",
                      "[0, 1]");
  expect_config_error({{"type", "tpe"}, {"marginal_mixture", "joint"}}, "sampler.marginal_mixture",
                      "\"auto\" or \"select\"");
  expect_config_error({{"type", "tpe"}, {"seed", -3}}, "sampler.seed", ">= 0");
  expect_config_error({{"type", "tpee"}}, "sampler.type", "did you mean 'tpe'");
  // A name cut short is the key it begins, not a nearer other key
  // ("startup" is 2 edits from "n_startup", n_startup_trials 7).
  expect_config_error({{"type", "tpe"}, {"n_startup", 5}}, "sampler.n_startup",
                      "did you mean 'n_startup_trials'?");
}

// n_startup_trials is "auto" or an integer from 0 to 2^63 - 1: every other
// value (true, false, null, a number beyond a 64-bit integer's range, a
// string other than "auto") is refused with both, naming the field and the
// range. The other counts name their range too.
TEST(TpeOptionsTest, BadStartupSizesNameTheRangeAndAuto) {
  const std::string rule = "must be an integer from 0 to 9223372036854775807 or \"auto\", got ";
  for (const auto& [value, shown] : std::vector<std::pair<Json, std::string>>{
           {Json(true), "true"},
           {Json(false), "false"},
           {Json(nullptr), "null"},
           {Json(1e30), "1e+30"},
           {Json::parse("18446744073709551616"), "1.8446744073709552e+19"},
           {Json::parse("9223372036854775808"), "9223372036854775808"},
           {Json(2.5), "2.5"},
           {Json::array({5}), "array"},
           {Json("Auto"), "'Auto'"}}) {
    SCOPED_TRACE(value.dump());
    expect_config_error({{"type", "tpe"}, {"n_startup_trials", value}}, "sampler.n_startup_trials",
                        rule + shown);
  }
  // The largest count is accepted, as is "auto".
  EXPECT_EQ(TpeOptions::from_json(
                Json{{"type", "tpe"}, {"n_startup_trials", Json::parse("9223372036854775807")}})
                .n_startup_trials,
            std::size_t{9223372036854775807u});
  EXPECT_FALSE(
      TpeOptions::from_json(Json{{"type", "tpe"}, {"n_startup_trials", "auto"}}).n_startup_trials);
  expect_config_error({{"type", "tpe"}, {"weights_window", 1e30}}, "sampler.weights_window",
                      "must be an integer from 0 to 9223372036854775807, got 1e+30");
  expect_config_error({{"type", "tpe"}, {"gamma", {{"cap", true}}}}, "sampler.gamma.cap",
                      "must be an integer from 0 to 9223372036854775807, got true");
}

TEST(TpeOptionsTest, FactoryBuildsTpeWithSeedOverride) {
  auto s = make_sampler({{"type", "tpe"}, {"seed", 3}, {"multivariate", true}}, 11);
  auto* t = dynamic_cast<TpeSampler*>(s.get());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name(), "tpe");
  EXPECT_EQ(t->options().seed, 11u);
  EXPECT_TRUE(t->options().multivariate);
}

TEST(TpeOptionsTest, ConstantLiarTurnsOnWithMoreThanOneWorker) {
  TpeSampler s;
  EXPECT_FALSE(s.constant_liar_active());
  s.set_n_workers(4);
  EXPECT_TRUE(s.constant_liar_active());
  s.set_n_workers(1);
  EXPECT_FALSE(s.constant_liar_active());
  TpeOptions o;
  o.constant_liar = true;
  TpeSampler on(o);
  on.set_n_workers(1);
  EXPECT_TRUE(on.constant_liar_active());
}

// ---------------------------------------------------------------- behaviour

TEST(TpeSamplerTest, StartupIsRandomUntilEnoughTrialsAreComplete) {
  const SearchSpace space = unit_space(2);
  // Two histories with the same params and different values: while fewer
  // than n_startup_trials are COMPLETE the values cannot matter.
  auto build = [&](int n_complete, bool flip) {
    History h(space);
    for (int i = 0; i < n_complete; ++i) {
      double x = (i + 0.5) / n_complete;
      h.add(TrialState::kComplete, {{"x0", x}, {"x1", 1 - x}}, flip ? -x : x);
    }
    // RUNNING trials do not count towards the startup.
    for (int i = 0; i < 20; ++i) h.add(TrialState::kRunning, {{"x0", 0.01 * i}, {"x1", 0.5}});
    return h;
  };
  for (bool multi : {false, true}) {
    auto s = tpe(1, multi);
    History a = build(9, false), b = build(9, true);
    for (std::int64_t n = 100; n < 105; ++n)
      EXPECT_EQ(a.suggest(*s, space, n), b.suggest(*s, space, n)) << multi;
    History c = build(10, false), d = build(10, true);
    int differ = 0;
    for (std::int64_t n = 100; n < 105; ++n)
      differ += c.suggest(*s, space, n) != d.suggest(*s, space, n);
    EXPECT_GT(differ, 0) << "the model ignored the values after the startup, multivariate "
                         << multi;
  }
}

// Issue #17: the "auto" startup size follows the budget the sampler is told
// (Sampler::plan_budget): ceil(budget / 10) within [5, 10]; 10 without one;
// an explicit n_startup_trials always wins.
TEST(TpeOptionsTest, AutoStartupSizeFollowsTheBudget) {
  TpeOptions o;
  EXPECT_EQ(o.startup_trials(std::nullopt), 10u);
  EXPECT_EQ(o.startup_trials(0), 5u);
  EXPECT_EQ(o.startup_trials(8), 5u);
  EXPECT_EQ(o.startup_trials(50), 5u);
  EXPECT_EQ(o.startup_trials(51), 6u);
  EXPECT_EQ(o.startup_trials(61), 7u);
  EXPECT_EQ(o.startup_trials(100), 10u);
  EXPECT_EQ(o.startup_trials(1000000), 10u);
  o.n_startup_trials = 3;
  EXPECT_EQ(o.startup_trials(std::nullopt), 3u);
  EXPECT_EQ(o.startup_trials(1000), 3u);
}

TEST(TpeSamplerTest, AutoStartupModelsFromTheBudgetsStartupSize) {
  const SearchSpace space = unit_space(2);
  History h(space);
  for (int i = 0; i < 6; ++i) {
    const double x = (i + 0.5) / 6;
    h.add(TrialState::kComplete, {{"x0", x}, {"x1", 1 - x}}, x);
  }
  auto with_startup = [](std::optional<std::size_t> n) {
    TpeOptions o;
    o.seed = 3;
    o.n_startup_trials = n;
    return std::make_shared<TpeSampler>(o);
  };
  // Told a budget of 20 trials, the default sampler models from the 6th
  // trial on, exactly as n_startup_trials 5 does (the same draws).
  auto told = with_startup(std::nullopt);
  EXPECT_EQ(told->plan_budget(20), "");
  EXPECT_EQ(told->startup_trials(), 5u);
  auto five = with_startup(5);
  auto ten = with_startup(10);
  int differ_from_random = 0;
  for (std::int64_t n = 100; n < 110; ++n) {
    const Params p = h.suggest(*told, space, n);
    EXPECT_EQ(p, h.suggest(*five, space, n)) << n;
    differ_from_random += p != h.suggest(*ten, space, n);
  }
  EXPECT_GT(differ_from_random, 0);
  // Not told a budget (ask and tell without optimize): 10, a random draw.
  auto untold = with_startup(std::nullopt);
  EXPECT_EQ(untold->startup_trials(), 10u);
  for (std::int64_t n = 100; n < 105; ++n)
    EXPECT_EQ(h.suggest(*untold, space, n), h.suggest(*ten, space, n)) << n;
  // A budget within the startup: a random search, and the warning says so.
  EXPECT_EQ(with_startup(std::nullopt)->plan_budget(5),
            "TPE sampler: the budget allows at most 5 COMPLETE trials, at or below "
            "n_startup_trials = 5 (\"auto\"), so every trial is drawn at random (a random "
            "search); raise the budget or lower sampler.n_startup_trials");
  EXPECT_NE(with_startup(10)->plan_budget(8).find("n_startup_trials = 10, so"), std::string::npos);
  // With a startup design the startup trials are its points, not random ones.
  TpeOptions sobol;
  sobol.startup = QmcSequence::kSobol;
  EXPECT_NE(TpeSampler(sobol).plan_budget(5).find(
                "so every trial is a point of the startup design (sobol), never modelled; raise"),
            std::string::npos)
      << TpeSampler(sobol).plan_budget(5);
}

// The budget warning counts its trials in words: "1 COMPLETE trial", not
// "1 COMPLETE trials".
TEST(TpeSamplerTest, BudgetWarningSaysTrialForOneTrial) {
  TpeOptions o;
  o.n_startup_trials = 3;
  TpeSampler sampler(o);
  const std::string one = sampler.plan_budget(1);
  EXPECT_NE(one.find("the budget allows at most 1 COMPLETE trial, at or below n_startup_trials "
                     "= 3, so"),
            std::string::npos)
      << one;
  const std::string two = sampler.plan_budget(2);
  EXPECT_NE(two.find("at most 2 COMPLETE trials, at or"), std::string::npos) << two;
}

// Mean over seeds of best-value regret after n trials.
// dims: for a function of any dimension (Styblinski-Tang); 0 for the others.
double mean_regret(const std::string& func, const Json& sampler, int seeds, int n_trials,
                   std::size_t dims = 0) {
  const SyntheticFunction* f = find_synthetic_function(func);
  const std::size_t dim = dims > 0 ? dims : f->dimension;
  SearchSpace space;
  for (std::size_t i = 0; i < dim; ++i)
    space.add(x_name(i), Distribution::make_float(f->low_at(i), f->high_at(i)));
  double total = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    Study study = make_study(make_sampler(sampler, static_cast<std::uint64_t>(seed)), space);
    std::vector<double> x(dim);
    for (int t = 0; t < n_trials; ++t) {
      Trial trial = study.ask();
      for (std::size_t i = 0; i < dim; ++i) x[i] = trial.param(x_name(i)).get<double>();
      study.tell(trial, f->function(x));
    }
    total += study.best_value() - f->known_minimum(dim);
  }
  return total / seeds;
}

TEST(TpeSamplerTest, BeatsRandomOnBraninAndHartmann6) {
  // Seeds are fixed, so this is deterministic; the margin (TPE's mean regret
  // under half of random's) is far inside what the benchmark measures over
  // 20 seeds (see README.md, "Benchmarks").
  for (const char* func : {"branin", "hartmann6"}) {
    double random = mean_regret(func, {{"type", "random"}}, 10, 100);
    double uni = mean_regret(func, {{"type", "tpe"}, {"multivariate", false}}, 10, 100);
    double multi = mean_regret(func, {{"type", "tpe"}, {"multivariate", true}}, 10, 100);
    EXPECT_LT(uni, 0.5 * random) << func << ": random " << random << ", tpe " << uni;
    EXPECT_LT(multi, 0.5 * random)
        << func << ": random " << random << ", tpe multivariate " << multi;
  }
}

// TpeOptions::marginal_mixture: the mixture of the joint model and the
// product of the marginals still models (far better than random), is
// deterministic under a seed, and a = 0 is the joint model alone.
// A space of a float, a log int and a categorical, and 40 COMPLETE trials
// of it (values x^2 + log n) drawn with `seed`.
SearchSpace mixed_space() {
  return SearchSpace::from_json(Json::parse(R"({
    "x": {"type": "float", "low": -5, "high": 5},
    "n": {"type": "int", "low": 1, "high": 100, "log": true},
    "c": {"type": "categorical", "choices": ["p", "q", "r"]}
  })"));
}
void add_mixed_trials(History& h, unsigned seed) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 40; ++i) {
    double x = -5 + 10 * util::uniform01(rng);
    std::int64_t n = 1 + static_cast<std::int64_t>(99 * util::uniform01(rng));
    std::string c = i % 3 == 0 ? "p" : (i % 3 == 1 ? "q" : "r");
    h.add(TrialState::kComplete, {{"x", x}, {"n", n}, {"c", c}}, x * x + std::log(n));
  }
}

TEST(TpeSamplerTest, MarginalMixtureModelsAndIsDeterministic) {
  // The quality check (4,000 suggestions) runs in Release; the ASan build
  // runs the mixture's code through the suggestions below
  // (support/sanitizer_scale.h).
  for (const char* func : {"branin", "hartmann6"}) {
    if (testsupport::kAsanBuild) break;
    double random = mean_regret(func, {{"type", "random"}}, 10, 100);
    for (const Json& a : {Json(0.5), Json("auto")}) {
      double mix = mean_regret(func, {{"type", "tpe"}, {"marginal_mixture", a}}, 10, 100);
      EXPECT_LT(mix, 0.5 * random)
          << func << " " << a.dump() << ": random " << random << ", tpe " << mix;
    }
  }
  SearchSpace space = mixed_space();
  History h(space);
  add_mixed_trials(h, 5);
  auto make = [](const Json& a) {
    return make_sampler({{"type", "tpe"}, {"seed", 3}, {"marginal_mixture", a}});
  };
  for (const Json& a : {Json(0.3), Json(1.0), Json("auto")}) {
    auto s1 = make(a), s2 = make(a);
    EXPECT_EQ(h.suggest(*s1, space, 60), h.suggest(*s2, space, 60)) << a.dump();
  }
  auto plain = make_sampler({{"type", "tpe"}, {"seed", 3}});
  auto zero = make(0.0);
  for (std::int64_t n = 60; n < 65; ++n)
    EXPECT_EQ(h.suggest(*plain, space, n), h.suggest(*zero, space, n));
}

// tpe::product_classifies_better ("marginal_mixture": "select"): the
// product of the marginals is taken for a below group whose good values
// combine param by param, the joint model for one whose params go together.
TEST(TpeSamplerTest, SelectTakesTheProductOnlyWhereTheGoodValuesCombineParamByParam) {
  constexpr std::size_t kDims = 4;
  std::vector<tpe::DimensionSpec> dims(
      kDims, tpe::DimensionSpec::from(Distribution::make_float(0.0, 1.0)));
  const tpe::EstimatorOptions eopt = tpe::estimator_options(TpeOptions{}.resolved());
  std::mt19937_64 rng(11);
  auto u = [&] { return util::uniform01(rng); };
  // Above: 80 rows uniform over the cube. Separable below: 20 rows, each
  // coordinate on its own near 0.1 or 0.9 (16 corners, few rows each).
  // Joint below: 20 rows on the diagonal x0 = x1 = x2 = x3 (every marginal
  // uniform, so no param alone tells good from bad).
  std::vector<double> above, separable, diagonal;
  for (int i = 0; i < 80; ++i)
    for (std::size_t d = 0; d < kDims; ++d) above.push_back(u());
  for (int i = 0; i < 20; ++i) {
    const double t = u();
    for (std::size_t d = 0; d < kDims; ++d) {
      separable.push_back((u() < 0.5 ? 0.1 : 0.9) + 0.03 * (u() - 0.5));
      diagonal.push_back(t);
    }
  }
  const std::vector<double> wb(20, 1.0), wa(80, 1.0);
  EXPECT_TRUE(tpe::product_classifies_better(dims, separable, wb, above, wa, eopt));
  EXPECT_FALSE(tpe::product_classifies_better(dims, diagonal, wb, above, wa, eopt));
  // Too few rows, one param, or a categorical param: always the joint model.
  const std::vector<double> few_b(separable.begin(), separable.begin() + 4 * kDims),
      few_a(above.begin(), above.begin() + 20 * kDims);
  EXPECT_FALSE(tpe::product_classifies_better(dims, few_b, std::vector<double>(4, 1.0), few_a,
                                              std::vector<double>(20, 1.0), eopt));
  std::vector<tpe::DimensionSpec> one(1, dims[0]);
  std::vector<double> col_b, col_a;
  for (std::size_t i = 0; i < separable.size(); i += kDims) col_b.push_back(separable[i]);
  for (std::size_t i = 0; i < above.size(); i += kDims) col_a.push_back(above[i]);
  EXPECT_FALSE(tpe::product_classifies_better(one, col_b, wb, col_a, wa, eopt));
  std::vector<tpe::DimensionSpec> with_cat = dims;
  with_cat[3] = tpe::DimensionSpec::from(Distribution::make_categorical({"a", "b"}));
  std::vector<double> sep_cat = separable, above_cat = above;
  for (std::size_t i = 3; i < sep_cat.size(); i += kDims) sep_cat[i] = 0;
  for (std::size_t i = 3; i < above_cat.size(); i += kDims) above_cat[i] = 1;
  EXPECT_FALSE(tpe::product_classifies_better(with_cat, sep_cat, wb, above_cat, wa, eopt));
}

// "select" decides at checkpoints of the finished count, so a sampler that
// has seen other calls (its cache filled at earlier checkpoints) and a
// fresh one (a resumed study) suggest the same for the same history.
TEST(TpeSamplerTest, SelectDecidesAtCheckpointsTheSameForAFreshSampler) {
  EXPECT_EQ(tpe::select_checkpoint(29), 0u);
  EXPECT_EQ(tpe::select_checkpoint(30), 30u);
  EXPECT_EQ(tpe::select_checkpoint(34), 30u);
  EXPECT_EQ(tpe::select_checkpoint(35), 35u);
  EXPECT_EQ(tpe::select_checkpoint(64), 60u);
  EXPECT_EQ(tpe::select_checkpoint(66), 66u);
  EXPECT_LE(tpe::select_checkpoint(1000000), 1000000u);
  EXPECT_GT(tpe::select_checkpoint(1000000), 900000u);
  // A separable function of 4 floats (each param's best value on its own).
  SearchSpace space;
  for (std::size_t i = 0; i < 4; ++i) space.add(x_name(i), Distribution::make_float(-5, 5));
  History h(space);
  std::mt19937_64 rng(21);
  auto add = [&](int n) {
    for (int t = 0; t < n; ++t) {
      Params p;
      double v = 0;
      for (std::size_t i = 0; i < 4; ++i) {
        const double x = -5 + 10 * util::uniform01(rng);
        p[x_name(i)] = x;
        v += std::abs(x - 2.9);
      }
      h.add(TrialState::kComplete, p, v);
    }
  };
  // The warm sampler decides at checkpoint 45; then 52 trials have
  // finished (checkpoint 50) and both must decide on those.
  add(47);
  auto warm = make_sampler({{"type", "tpe"}, {"seed", 5}});
  h.suggest(*warm, space, 47);
  add(5);
  auto fresh = make_sampler({{"type", "tpe"}, {"seed", 5}});
  for (std::int64_t n = 52; n < 55; ++n)
    EXPECT_EQ(h.suggest(*warm, space, n), h.suggest(*fresh, space, n)) << n;
}

// The default multivariate TPE ("select") on Styblinski-Tang 10-D, a sum of
// one function per param: it takes the product and ends far nearer the
// minimum than the joint model alone (README.md: -308.6 against -276.5 over
// 200 seeds); on Rosenbrock, whose params interact, it keeps the joint model
// on most suggestions and stays far better than univariate TPE.
TEST(TpeSamplerTest, SelectIsTheDefaultAndWinsOnASeparableFunction) {
  EXPECT_TRUE(TpeOptions{}.resolved().marginal_mixture_select);
  const TpeOptions joint_opts = TpeOptions::from_json({{"type", "tpe"}, {"marginal_mixture", 0}});
  EXPECT_FALSE(joint_opts.resolved().marginal_mixture_select);
  EXPECT_EQ(joint_opts.to_json().at("marginal_mixture"), 0);
  const TpeOptions sel = TpeOptions::from_json({{"type", "tpe"}, {"marginal_mixture", "select"}});
  EXPECT_TRUE(sel.marginal_mixture_select);
  EXPECT_EQ(TpeOptions::from_json(sel.to_json()).to_json(), sel.to_json());
  TpeOptions uni;
  uni.multivariate = false;
  EXPECT_FALSE(uni.resolved().marginal_mixture_select);
  EXPECT_EQ(TpeOptions{}.to_json().at("marginal_mixture"), "select");
  if (testsupport::kAsanBuild) return;  // 4,000 suggestions: Release only
  const double def = mean_regret("styblinski_tang", {{"type", "tpe"}}, 10, 100, 10);
  const double joint =
      mean_regret("styblinski_tang", {{"type", "tpe"}, {"marginal_mixture", 0}}, 10, 100, 10);
  EXPECT_LT(def, joint - 10) << "select " << def << ", joint model " << joint;
  const double rosen = mean_regret("rosenbrock", {{"type", "tpe"}}, 10, 100, 4);
  const double rosen_uni =
      mean_regret("rosenbrock", {{"type", "tpe"}, {"multivariate", false}}, 10, 100, 4);
  EXPECT_LT(rosen, 0.5 * rosen_uni) << "select " << rosen << ", univariate " << rosen_uni;
}

// bench/hpo_suite.py's config_surrogate, the same function: an ordinal
// (width, best 256), five categoricals with pairwise interactions and a
// float whose best value depends on the width. The optimum is 0.03.
double config_surrogate(const Trial& t) {
  const double w = std::log2(t.param("width").get<double>());
  const std::string act = t.param("act").get<std::string>();
  const std::string norm = t.param("norm").get<std::string>();
  const std::string init = t.param("init").get<std::string>();
  const std::map<std::string, double> act_v = {
      {"relu", 0.05}, {"tanh", 0.10}, {"gelu", 0.03}, {"sigmoid", 0.25}};
  const std::map<std::string, double> norm_v = {{"none", 0.08}, {"batch", 0.02}, {"layer", 0.04}};
  const std::map<std::string, double> sched_v = {
      {"constant", 0.04}, {"cosine", 0.0}, {"step", 0.02}};
  const std::map<std::string, double> aug_v = {
      {"none", 0.05}, {"flip", 0.03}, {"crop", 0.02}, {"both", 0.0}};
  double v = 0.01 + 0.006 * (w - 8) * (w - 8) + act_v.at(act) + norm_v.at(norm);
  if (act == "gelu" && norm == "layer") v -= 0.04;
  if (act == "relu" && norm == "batch") v -= 0.02;
  if (act == "sigmoid" && norm == "none") v += 0.10;
  if (init == "he" && act == "relu")
    v -= 0.02;
  else if (init == "he" && act == "gelu")
    v -= 0.01;
  else if (init == "xavier" && act == "tanh")
    v -= 0.03;
  else
    v += 0.03;
  v += sched_v.at(t.param("schedule").get<std::string>());
  v += aug_v.at(t.param("augment").get<std::string>());
  const double d = t.param("dropout").get<double>() - 0.05 * (w - 4);
  return v + 0.2 * d * d;
}

// How many of `seeds` studies of 100 trials on config_surrogate end with
// their best trial at a width other than 256.
int seeds_off_the_best_width(const Json& sampler, int seeds) {
  const SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "width": {"type": "ordinal", "values": [16, 32, 64, 128, 256, 512, 1024]},
    "act": {"type": "categorical", "choices": ["relu", "tanh", "gelu", "sigmoid"]},
    "norm": {"type": "categorical", "choices": ["none", "batch", "layer"]},
    "init": {"type": "categorical", "choices": ["xavier", "he", "orthogonal"]},
    "schedule": {"type": "categorical", "choices": ["constant", "cosine", "step"]},
    "augment": {"type": "categorical", "choices": ["none", "flip", "crop", "both"]},
    "dropout": {"type": "float", "low": 0.0, "high": 0.6}})"));
  int off = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    Study study = make_study(make_sampler(sampler, static_cast<std::uint64_t>(seed)), space);
    for (int t = 0; t < 100; ++t) {
      Trial trial = study.ask();
      study.tell(trial, config_surrogate(trial));
    }
    off += study.best_trial()->params.at("width").get<double>() != 256.0 ? 1 : 0;
  }
  return off;
}

// With kernels of 0.04 of the domain (0.28 cell of the 7 widths) a study
// whose good trials shared the width beside the optimum rarely drew the
// optimum: on bench/hpo_suite.py 54 of 200 seeds of config_surrogate ended
// one width off (best 0.036), 6 of 200 with half a cell at least; here
// (seeds 0..59) 3 against 21 ended at another width than 256.
TEST(TpeSamplerTest, MinBandwidthCellsFindsTheOrdinalValueBesideTheGoodOnes) {
  EXPECT_DOUBLE_EQ(*TpeOptions{}.resolved().min_bandwidth_cells, 0.5);
  if (testsupport::kAsanBuild) return;  // 12,000 suggestions: Release only
  const int with_cells = seeds_off_the_best_width({{"type", "tpe"}}, 60);
  const int without = seeds_off_the_best_width({{"type", "tpe"}, {"min_bandwidth_cells", 0}}, 60);
  EXPECT_LE(2 * with_cells, without) << "off the best width: " << with_cells << " of 60 seeds, "
                                     << without << " without min_bandwidth_cells";
}

// How many of 300 suggestions (multivariate TPE, `sampler` plus a seed)
// are the combination of choices that the good trials agree on param by
// param but none of them has: 4 categoricals c0..c3 (choices a..d) and a
// float x; the 4 good trials of 40 each have "a" in three categoricals and
// "b" in one (a different one each), at x = 0.4, 0.45, 0.5, 0.55
// (measured: 32 of 300 by default, 7 with the neighbour rule).
int consensus_suggestions(Json sampler) {
  const SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "c0": {"type": "categorical", "choices": ["a", "b", "c", "d"]},
    "c1": {"type": "categorical", "choices": ["a", "b", "c", "d"]},
    "c2": {"type": "categorical", "choices": ["a", "b", "c", "d"]},
    "c3": {"type": "categorical", "choices": ["a", "b", "c", "d"]},
    "x": {"type": "float", "low": 0, "high": 1}})"));
  const std::vector<std::string> names = {"c0", "c1", "c2", "c3"};
  History h(space);
  for (int i = 0; i < 4; ++i) {
    Params p;
    for (int j = 0; j < 4; ++j) p[names[static_cast<std::size_t>(j)]] = i == j ? "b" : "a";
    p["x"] = 0.4 + 0.05 * i;
    h.add(TrialState::kComplete, p, 0.01 * i);
  }
  std::mt19937_64 rng(7);
  auto u = [&] { return util::uniform01(rng); };
  const std::vector<std::string> choices = {"a", "b", "c", "d"};
  while (h.trials().size() < 40) {
    Params p;
    int as = 0;
    for (const auto& n : names) {
      p[n] = choices[static_cast<std::size_t>(4 * u())];
      as += p[n] == "a" ? 1 : 0;
    }
    if (as == 4) continue;
    p["x"] = u();
    h.add(TrialState::kComplete, p, 1.0 + u());
  }
  sampler["seed"] = 3;
  auto s = make_sampler(sampler);
  int consensus = 0;
  for (std::int64_t n = 1000; n < 1300; ++n) {
    const Params p = h.suggest(*s, space, n);
    int as = 0;
    for (const auto& name : names) as += p.at(name) == "a" ? 1 : 0;
    consensus += as == 4 ? 1 : 0;
  }
  return consensus;
}

// TpeOptions::bandwidth's default: in a joint group whose params are mostly
// categorical the range rule's wide numeric kernels let the good trials'
// shared choices add up, so the combination they agree on is suggested;
// with the neighbour rule each candidate is rated by the one good trial it
// was drawn from, and the sampler copies their combinations.
TEST(TpeSamplerTest, MostlyCategoricalGroupsSuggestTheChoicesTheGoodTrialsShare) {
  const int by_default = consensus_suggestions({{"type", "tpe"}});
  const int neighbor = consensus_suggestions({{"type", "tpe"}, {"bandwidth", "neighbor"}});
  const int range = consensus_suggestions({{"type", "tpe"}, {"bandwidth", "range"}});
  EXPECT_EQ(by_default, range);
  EXPECT_GE(by_default, 2 * neighbor) << "default " << by_default << ", neighbor " << neighbor;
}

TEST(TpeSamplerTest, StepGridsAndSingleValues) {
  SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "i":  {"type": "int", "low": 1, "high": 9, "step": 2},
    "f":  {"type": "float", "low": 64, "high": 1312, "step": 160},
    "y":  {"type": "float", "low": 0, "high": 1},
    "s":  {"type": "float", "low": 2.5, "high": 2.5},
    "si": {"type": "int", "low": 7, "high": 7}
  })"));
  for (bool multi : {false, true}) {
    Study study = make_study(tpe(3, multi), space);
    std::set<std::int64_t> ints;
    std::set<double> floats;
    for (int t = 0; t < 100; ++t) {
      Trial trial = study.ask();
      std::int64_t i = trial.param("i").get<std::int64_t>();
      double f = trial.param("f").get<double>();
      EXPECT_EQ(i % 2, 1) << i;
      EXPECT_GE(i, 1);
      EXPECT_LE(i, 9);
      double k = (f - 64) / 160;
      EXPECT_EQ(k, std::round(k)) << f;
      EXPECT_GE(f, 64);
      EXPECT_LE(f, 1312);
      EXPECT_EQ(trial.param("s").get<double>(), 2.5);
      EXPECT_EQ(trial.param("si").get<std::int64_t>(), 7);
      ints.insert(i);
      floats.insert(f);
      double y = trial.param("y").get<double>();
      study.tell(trial, static_cast<double>((i - 5) * (i - 5)) + std::abs(f - 704) / 160 + y);
    }
    EXPECT_GE(ints.size(), 3u);
    EXPECT_GE(floats.size(), 3u);
  }
}

TEST(TpeSamplerTest, ConstantLiarSpreadsRunningTrials) {
  for (bool multi : {false, true}) {
    for (const char* space_json : {R"({"x": {"type": "float", "low": 0, "high": 1},
                                       "y": {"type": "float", "low": 0, "high": 1}})",
                                   R"({"x": {"type": "int", "low": 0, "high": 4},
                                       "y": {"type": "int", "low": 0, "high": 4}})"}) {
      SearchSpace space = SearchSpace::from_json(Json::parse(space_json));
      TpeOptions o;
      o.seed = 5;
      o.multivariate = multi;
      o.constant_liar = true;
      Study study = make_study(std::make_shared<TpeSampler>(o), space);
      for (int t = 0; t < 12; ++t) {
        Trial trial = study.ask();
        study.tell(trial, trial.param("x").get<double>() + trial.param("y").get<double>());
      }
      // 8 RUNNING trials, no new COMPLETE one.
      std::vector<Trial> running;
      std::set<std::string> distinct;
      for (int k = 0; k < 8; ++k) {
        running.push_back(study.ask());
        distinct.insert(Json(running.back().params()).dump());
      }
      EXPECT_EQ(distinct.size(), 8u) << space_json << " multivariate " << multi;
    }
  }
}

TEST(TpeSamplerTest, ConstantLiarMovesSuggestionsAwayFromRunningTrials) {
  // All good observations are near x = 0.2; 30 RUNNING trials sit there too.
  // With the liar they count as bad, so suggestions move away from 0.2.
  SearchSpace space = unit_space(1);
  History h(space);
  for (int i = 0; i < 40; ++i) {
    double x = (i + 0.5) / 40;
    h.add(TrialState::kComplete, {{"x0", x}}, std::abs(x - 0.2));
  }
  for (int i = 0; i < 30; ++i) h.add(TrialState::kRunning, {{"x0", 0.19 + 0.02 * i / 30}});
  TpeOptions o;
  o.seed = 2;
  TpeSampler honest(o);
  o.constant_liar = true;
  TpeSampler liar(o);
  int near_honest = 0, near_liar = 0;
  for (std::int64_t n = 1000; n < 1040; ++n) {
    near_honest += std::abs(h.suggest(honest, space, n).at("x0").get<double>() - 0.2) < 0.02;
    near_liar += std::abs(h.suggest(liar, space, n).at("x0").get<double>() - 0.2) < 0.02;
  }
  EXPECT_LT(near_liar, near_honest);
}

TEST(TpeSamplerTest, WorkersInTheSamplingContextTurnTheConstantLiarOn) {
  // What the coordinator passes (SamplingContext::n_workers): more than one
  // worker samples as constant_liar = true does; one worker as without it.
  SearchSpace space = unit_space(1);
  History h(space);
  for (int i = 0; i < 40; ++i) {
    double x = (i + 0.5) / 40;
    h.add(TrialState::kComplete, {{"x0", x}}, std::abs(x - 0.2));
  }
  for (int i = 0; i < 30; ++i) h.add(TrialState::kRunning, {{"x0", 0.19 + 0.02 * i / 30}});
  TpeOptions o;
  o.seed = 2;
  TpeSampler plain(o);
  o.constant_liar = true;
  TpeSampler liar(o);
  bool differs = false;
  for (std::int64_t n = 1000; n < 1010; ++n) {
    Params with_workers = h.suggest(plain, space, n, StudyDirection::kMinimize, {}, 4);
    EXPECT_EQ(Json(with_workers).dump(), Json(h.suggest(liar, space, n)).dump());
    Params one_worker = h.suggest(plain, space, n, StudyDirection::kMinimize, {}, 1);
    differs = differs || Json(one_worker).dump() != Json(with_workers).dump();
  }
  EXPECT_TRUE(differs);
  EXPECT_FALSE(plain.constant_liar_active());  // nothing kept from the context
}

TEST(TpeSamplerTest, MixedConditionalSpaceKeepsEveryValuesType) {
  SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "branch": {"type": "categorical", "choices": ["a", "b"]},
    "lr":     {"type": "float", "low": 1e-5, "high": 1e-1, "log": true, "when": {"branch": "a"}},
    "depth":  {"type": "int", "low": 1, "high": 8, "when": {"branch": "b"}},
    "width":  {"type": "int", "low": 16, "high": 512, "log": true, "when": {"branch": "b"}},
    "batch":  {"type": "ordinal", "values": [16, 32, 64, 128]},
    "act":    {"type": "categorical", "choices": [null, true, 1, "relu"]},
    "drop":   {"type": "float", "low": 0.0, "high": 0.5, "step": 0.05}
  })"));
  const std::vector<Json> act_choices = {Json(nullptr), Json(true), Json(1), Json("relu")};
  for (int mode = 0; mode < 3; ++mode) {
    TpeOptions o;
    o.seed = 9;
    o.multivariate = mode >= 1;
    o.group = mode == 2;
    Study study = make_study(std::make_shared<TpeSampler>(o), space);
    std::set<std::string> act_seen;
    for (int t = 0; t < 60; ++t) {
      Trial trial = study.ask();
      ASSERT_EQ(space.check(trial.params()), "") << Json(trial.params()).dump();
      const Json& act = trial.param("act");
      int idx = space.find("act")->distribution.index_of(act);
      ASSERT_GE(idx, 0);
      EXPECT_TRUE(same_json_scalar(act, act_choices[static_cast<std::size_t>(idx)]));
      act_seen.insert(act.dump() + ":" + act.type_name());
      EXPECT_TRUE(trial.param("batch").is_number_integer());
      EXPECT_TRUE(trial.param("drop").is_number_float());
      double v = trial.param("batch").get<double>() / 128 + trial.param("drop").get<double>();
      if (trial.param("branch") == "a")
        v += std::log10(trial.param("lr").get<double>()) + 5;
      else
        v += trial.param("depth").get<double>() + std::log2(trial.param("width").get<double>());
      if (act.is_null()) v -= 1;
      study.tell(trial, v);
    }
    // Stored values keep their JSON types too.
    for (const auto& t : study.trials()) EXPECT_EQ(space.check(t->params), "") << t->number;
    EXPECT_GE(act_seen.size(), 3u) << "mode " << mode;
  }
}

TEST(TpeSamplerTest, SameSeedAndHistoryGiveTheSameSuggestion) {
  SearchSpace space = mixed_space();
  History h(space);
  add_mixed_trials(h, 4);
  for (bool multi : {false, true}) {
    auto a = tpe(21, multi), b = tpe(21, multi), other = tpe(22, multi);
    // `a` has answered other questions before (warm caches, other trials).
    for (std::int64_t n = 50; n < 55; ++n) h.suggest(*a, space, n);
    Params pa = h.suggest(*a, space, 60), pb = h.suggest(*b, space, 60);
    EXPECT_EQ(pa, pb) << multi;
    EXPECT_NE(pa, h.suggest(*other, space, 60)) << multi;
    // Define-by-run too.
    FrozenTrial cur;
    cur.number = 70;
    cur.trial_id = 70;
    cur.state = TrialState::kRunning;
    std::vector<TrialPtr> all = h.trials();
    all.push_back(std::make_shared<FrozenTrial>(cur));
    SamplingContext ctx{StudyDirection::kMinimize, all, cur};
    const Distribution& dx = space.find("x")->distribution;
    EXPECT_EQ(a->sample_independent(ctx, "x", dx), b->sample_independent(ctx, "x", dx));
  }
}

// A sampler that met the history as it grew (its columns kept sorted one
// insert at a time) and a fresh one that fills its columns from 150 trials
// at once (one sort: a restarted coordinator) order every column the same
// way, ties of equal values (the int "n") included, so they suggest the same.
TEST(TpeSamplerTest, FreshSamplerOnALongHistorySuggestsAsAWarmOne) {
  SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "x": {"type": "float", "low": -5, "high": 5},
    "n": {"type": "int", "low": 1, "high": 6}
  })"));
  for (bool multi : {false, true}) {
    History h(space);
    std::mt19937_64 rng(9);
    auto warm = tpe(5, multi);
    for (int i = 0; i < 150; ++i) {
      double x = -5 + 10 * util::uniform01(rng);
      std::int64_t n = 1 + static_cast<std::int64_t>(6 * util::uniform01(rng)) % 6;
      h.add(TrialState::kComplete, {{"x", x}, {"n", n}}, x * x + static_cast<double>(n));
      if (i % 10 == 9) h.suggest(*warm, space, 1000 + i);  // fills 10 new slots at a time
    }
    auto fresh = tpe(5, multi);
    EXPECT_EQ(h.suggest(*warm, space, 2000), h.suggest(*fresh, space, 2000)) << multi;
  }
}

// Issue #17: in a conditional space (a branch choice with params of its own
// per choice), the branch choice is split with branch_gamma when it is set
// (here sqrt 0.25: Hyperopt's rule), not gamma (linear 0.1): a branch that gives
// the few best trials is followed although most of the next-best trials
// come from the other branch. History: 100 trials, 50 per branch; the 3 best
// are branch "b", the next 7 branch "a". Below group: 3 trials (all "b")
// with branch_gamma; 10 (3 "b", 7 "a") with gamma alone.
TEST(TpeSamplerTest, BranchChoiceOfAConditionalSpaceUsesBranchGamma) {
  const char* conditional = R"({
    "c": {"type": "categorical", "choices": ["a", "b"]},
    "x": {"type": "float", "low": 0, "high": 1, "when": {"c": "a"}},
    "y": {"type": "float", "low": 0, "high": 1, "when": {"c": "b"}}
  })";
  const char* flat = R"({
    "c": {"type": "categorical", "choices": ["a", "b"]},
    "x": {"type": "float", "low": 0, "high": 1}
  })";
  auto count_b = [](const char* space_json, const TpeOptions& o) {
    SearchSpace space = SearchSpace::from_json(Json::parse(space_json));
    const bool has_y = space.find("y") != nullptr;
    History h(space);
    for (int i = 0; i < 100; ++i) {
      // Values: b-trials 0, 1, 2 best; then a-trials 3..9; then the rest.
      const bool b = i < 3 || (i >= 10 && i % 2 == 0);
      const std::string c = b ? "b" : "a";
      const double u = (i % 10) / 10.0;
      Params p = {{"c", c}};
      p[c == "a" || !has_y ? "x" : "y"] = u;
      h.add(TrialState::kComplete, p, static_cast<double>(i));
    }
    TpeSampler s(o);
    int n_b = 0;
    for (std::int64_t n = 100; n < 140; ++n) n_b += h.suggest(s, space, n).at("c") == "b" ? 1 : 0;
    return n_b;
  };
  TpeOptions o;
  o.seed = 5;
  o.branch_gamma = TpeGamma{TpeGamma::Rule::kSqrt, 0.25, 25};
  EXPECT_GE(count_b(conditional, o), 36);  // the 3 best "b" trials lead
  TpeOptions old = o;
  old.branch_gamma.reset();  // the default: gamma for the branch choice too
  EXPECT_LE(count_b(conditional, old), 4);
  // A space without conditions is split with gamma: branch_gamma has no effect.
  EXPECT_EQ(count_b(flat, o), count_b(flat, old));
  EXPECT_LE(count_b(flat, o), 4);
}

TEST(TpeSamplerTest, PrunedTrialsEnterByTheirDeepestValue) {
  // COMPLETE trials spread over [0.3, 1] with middling values; PRUNED trials
  // near 0.1. If a pruned trial's deepest value is excellent, the model
  // prefers 0.1; if only its first step was excellent, it does not.
  SearchSpace space = unit_space(1);
  auto near_point_one = [&](bool deep_is_good) {
    History h(space);
    for (int i = 0; i < 30; ++i) {
      double x = 0.3 + 0.7 * (i + 0.5) / 30;
      h.add(TrialState::kComplete, {{"x0", x}}, 1.0 + x);
    }
    for (int i = 0; i < 6; ++i) {
      double x = 0.08 + 0.005 * i;
      std::map<std::int64_t, double> iv =
          deep_is_good ? std::map<std::int64_t, double>{{1, 50.0}, {5, 0.01}, {6, kNaN}}
                       : std::map<std::int64_t, double>{{1, 0.01}, {5, 50.0}};
      h.add(TrialState::kPruned, {{"x0", x}}, std::nullopt, iv);
    }
    auto s = tpe(8);
    int near = 0;
    for (std::int64_t n = 500; n < 530; ++n)
      near += std::abs(h.suggest(*s, space, n).at("x0").get<double>() - 0.1) < 0.1;
    return near;
  };
  int good = near_point_one(true), bad = near_point_one(false);
  EXPECT_GT(good, 15);
  EXPECT_LT(bad, good);
}

TEST(TpeSamplerTest, PrunedRanksBelowCompleteOfTheSameValue) {
  // A below group of one (gamma cap 1): a COMPLETE trial at x = 0.9 and a
  // PRUNED one at x = 0.1 share the best value; the COMPLETE one ranks
  // first, so suggestions go near 0.9.
  SearchSpace space = unit_space(1);
  History h(space);
  for (int i = 0; i < 12; ++i) h.add(TrialState::kComplete, {{"x0", 0.3 + 0.04 * i}}, 5.0);
  h.add(TrialState::kPruned, {{"x0", 0.1}}, std::nullopt, {{3, 1.0}});
  h.add(TrialState::kComplete, {{"x0", 0.9}}, 1.0);
  TpeOptions o;
  o.seed = 1;
  o.gamma.cap = 1;
  TpeSampler s(o);
  int near_complete = 0;
  for (std::int64_t n = 100; n < 120; ++n)
    near_complete += std::abs(h.suggest(s, space, n).at("x0").get<double>() - 0.9) < 0.1;
  EXPECT_GT(near_complete, 10);
}

TEST(TpeSamplerTest, FailWaitingAndNaNNeverEnterTheModel) {
  SearchSpace space = unit_space(2);
  auto base = [&](History& h) {
    for (int i = 0; i < 20; ++i) {
      double x = (i + 0.5) / 20;
      h.add(TrialState::kComplete, {{"x0", x}, {"x1", x * x}}, std::abs(x - 0.3));
    }
  };
  for (bool multi : {false, true}) {
    auto s = tpe(4, multi);
    History plain(space);
    base(plain);
    History noisy(space);
    base(noisy);
    noisy.add(TrialState::kFail, {{"x0", 0.9}, {"x1", 0.9}});
    noisy.add(TrialState::kWaiting, {{"x0", 0.95}, {"x1", 0.95}});
    noisy.add(TrialState::kComplete, {{"x0", 0.99}, {"x1", 0.99}}, kNaN);
    for (std::int64_t n = 200; n < 205; ++n)
      EXPECT_EQ(plain.suggest(*s, space, n), noisy.suggest(*s, space, n)) << multi;
  }
  // A PRUNED trial whose deepest value is NaN enters by the deepest non-NaN.
  History a(space), b(space);
  base(a);
  base(b);
  a.add(TrialState::kPruned, {{"x0", 0.5}, {"x1", 0.5}}, std::nullopt, {{1, 0.2}, {2, kNaN}});
  b.add(TrialState::kPruned, {{"x0", 0.5}, {"x1", 0.5}}, std::nullopt, {{1, 0.2}});
  auto s = tpe(4);
  for (std::int64_t n = 200; n < 205; ++n)
    EXPECT_EQ(a.suggest(*s, space, n), b.suggest(*s, space, n));
}

TEST(TpeSamplerTest, NullChoiceIsNotConfusedWithAnAbsentParam) {
  // "act" is active only when use == true. Trials without it (use == false)
  // are excellent; among trials with it, "relu" is good and null is bad.
  // Confusing absent with null would make null look excellent. ("lr" keeps
  // the suggestions from being duplicates of the history.)
  SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "use": {"type": "categorical", "choices": [true, false]},
    "act": {"type": "categorical", "choices": [null, "relu"], "when": {"use": true}},
    "lr":  {"type": "float", "low": 0, "high": 1}
  })"));
  History h(space);
  for (int i = 0; i < 30; ++i)
    h.add(TrialState::kComplete, {{"use", false}, {"lr", i / 30.0}}, -10.0 - i);
  for (int i = 0; i < 15; ++i) {
    h.add(TrialState::kComplete, {{"use", true}, {"act", nullptr}, {"lr", i / 15.0}}, 5.0 + i);
    h.add(TrialState::kComplete, {{"use", true}, {"act", "relu"}, {"lr", 0.5 + i / 31.0}},
          1.0 + i * 0.01);
  }
  for (bool multi : {false, true}) {
    for (bool group : {false, true}) {
      if (group && !multi) continue;
      TpeOptions o;
      o.seed = 6;
      o.multivariate = multi;
      o.group = group;
      TpeSampler s(o);
      int relu = 0, null = 0;
      for (std::int64_t n = 300; n < 340; ++n) {
        Params p = h.suggest(s, space, n, StudyDirection::kMinimize, {{"use", true}});
        ASSERT_TRUE(p.count("act"));
        (p.at("act").is_null() ? null : relu)++;
      }
      EXPECT_GT(relu, null) << "multivariate " << multi << " group " << group;
    }
  }
}

TEST(TpeSamplerTest, TrialIdsSeenAgainForOtherTrialsAreNotConfused) {
  // One sampler shown two unrelated histories that reuse trial ids (two
  // in-memory studies): the second history's values must count.
  SearchSpace space = unit_space(1);
  auto build = [&](double best_x) {
    History h(space);
    for (int i = 0; i < 30; ++i) {
      double x = (i + 0.5) / 30;
      h.add(TrialState::kComplete, {{"x0", x}}, std::abs(x - best_x));
    }
    return h;
  };
  History near_low = build(0.1), near_high = build(0.9);
  TpeOptions o;
  o.seed = 3;
  TpeSampler shared(o), fresh(o);
  for (std::int64_t n = 100; n < 105; ++n) near_low.suggest(shared, space, n);
  for (std::int64_t n = 100; n < 110; ++n)
    EXPECT_EQ(near_high.suggest(shared, space, n), near_high.suggest(fresh, space, n)) << n;
}

TEST(TpeSamplerTest, NoDuplicatesAndExhaustion) {
  SearchSpace space = SearchSpace::from_json(Json::parse(R"({
    "c": {"type": "categorical", "choices": ["a", "b"]},
    "k": {"type": "int", "low": 0, "high": 2}
  })"));
  for (std::size_t startup : {2u, 100u}) {
    for (bool multi : {false, true}) {
      Study study = make_study(tpe(1, multi, startup), space);
      std::set<std::string> seen;
      for (int t = 0; t < 6; ++t) {
        Trial trial = study.ask();
        EXPECT_TRUE(seen.insert(Json(trial.params()).dump()).second) << Json(trial.params()).dump();
        study.tell(trial, trial.param("k").get<double>());
      }
      EXPECT_THROW(study.ask(), SearchSpaceExhausted) << startup << " " << multi;
    }
  }
  // RUNNING trials count as tried too.
  Study study = make_study(tpe(2, false, 2), space);
  std::vector<Trial> running;
  for (int t = 0; t < 6; ++t) running.push_back(study.ask());
  EXPECT_THROW(study.ask(), SearchSpaceExhausted);
}

TEST(TpeSamplerTest, DefineByRunUnivariateAndMultivariate) {
  for (bool multi : {false, true}) {
    Study study = make_study(tpe(12, multi, 5), std::nullopt);
    OptimizeOptions oo;
    oo.n_trials = 40;
    study.optimize(
        [](Trial& t) {
          double x = t.suggest_float("x", -3, 3);
          std::int64_t k = t.suggest_int("k", 1, 9, {.log = false, .step = 2});
          Json c = t.suggest_categorical("c", {Json(nullptr), Json(1), Json("z")});
          EXPECT_GE(x, -3);
          EXPECT_LE(x, 3);
          EXPECT_EQ(k % 2, 1);
          EXPECT_TRUE(c.is_null() || c == 1 || c == "z");
          return x * x + static_cast<double>(k) + (c.is_null() ? 0.0 : 1.0);
        },
        oo);
    EXPECT_EQ(study.trials({TrialState::kComplete}).size(), 40u);
    EXPECT_LT(study.best_value(), 2.0);
  }
}

TEST(TpeSamplerTest, MaximizeMovesTowardsTheMaximum) {
  SearchSpace space = unit_space(1);
  Study study = make_study(tpe(5), space, StudyDirection::kMaximize);
  double close = 0;
  for (int t = 0; t < 60; ++t) {
    Trial trial = study.ask();
    double x = trial.param("x0").get<double>();
    if (t >= 40) close += std::abs(x - 0.8) < 0.15;
    study.tell(trial, -(x - 0.8) * (x - 0.8));
  }
  // Random search would put about 30% of the last 20 within 0.15 of 0.8.
  EXPECT_GE(close, 12);
}

}  // namespace
}  // namespace hps
