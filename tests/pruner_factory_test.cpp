// make_pruner: the "pruner" section of space.json for every type, and
// errors that name the bad field.
#include <gtest/gtest.h>

#include "algorithms/factory.h"
#include "algorithms/hyperband_pruner.h"
#include "algorithms/patient_pruner.h"
#include "algorithms/percentile_pruner.h"
#include "algorithms/successive_halving_pruner.h"
#include "algorithms/threshold_pruner.h"

namespace hps {
namespace {

// The ConfigError path and message of make_pruner(config), or "ok".
std::pair<std::string, std::string> error_of(const std::string& json) {
  try {
    make_pruner(Json::parse(json));
  } catch (const ConfigError& e) {
    return {e.path(), e.what()};
  }
  return {"ok", ""};
}

TEST(PrunerFactoryTest, None) {
  auto p = make_pruner(Json::parse(R"({"type": "none"})"));
  EXPECT_EQ(p->name(), "none");
}

TEST(PrunerFactoryTest, MedianWithDefaultsAndOptions) {
  auto p = make_pruner(Json::parse(R"({"type": "median"})"));
  auto* m = dynamic_cast<MedianPruner*>(p.get());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->name(), "median");
  EXPECT_EQ(m->options().percentile, 50.0);
  EXPECT_EQ(m->options().n_startup_trials, 5);
  p = make_pruner(Json::parse(
      R"({"type": "median", "n_startup_trials": 2, "n_warmup_steps": 3, "interval_steps": 4, "n_min_trials": 5})"));
  m = dynamic_cast<MedianPruner*>(p.get());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->options().n_startup_trials, 2);
  EXPECT_EQ(m->options().n_warmup_steps, 3);
  EXPECT_EQ(m->options().interval_steps, 4);
  EXPECT_EQ(m->options().n_min_trials, 5);
}

TEST(PrunerFactoryTest, Percentile) {
  auto p = make_pruner(Json::parse(R"({"type": "percentile", "percentile": 25.5})"));
  auto* q = dynamic_cast<PercentilePruner*>(p.get());
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->name(), "percentile");
  EXPECT_EQ(q->options().percentile, 25.5);
  EXPECT_EQ(error_of(R"({"type": "percentile"})").first, "pruner.percentile");
  EXPECT_EQ(error_of(R"({"type": "percentile", "percentile": 120})").first, "pruner.percentile");
  EXPECT_EQ(error_of(R"({"type": "median", "percentile": 20})").first, "pruner.percentile");
}

TEST(PrunerFactoryTest, Asha) {
  auto p = make_pruner(Json::parse(R"({"type": "asha"})"));
  auto* a = dynamic_cast<SuccessiveHalvingPruner*>(p.get());
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->options().min_resource, std::nullopt);
  EXPECT_EQ(a->options().reduction_factor, 4);
  p = make_pruner(Json::parse(
      R"({"type": "asha", "min_resource": 2, "reduction_factor": 3, "min_early_stopping_rate": 1})"));
  a = dynamic_cast<SuccessiveHalvingPruner*>(p.get());
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->options().min_resource, 2);
  EXPECT_EQ(a->options().reduction_factor, 3);
  EXPECT_EQ(a->options().min_early_stopping_rate, 1);
  p = make_pruner(Json::parse(R"({"type": "asha", "min_resource": "auto"})"));
  EXPECT_EQ(dynamic_cast<SuccessiveHalvingPruner*>(p.get())->options().min_resource, std::nullopt);
  EXPECT_EQ(error_of(R"({"type": "asha", "min_resource": "some"})").first, "pruner.min_resource");
  EXPECT_EQ(error_of(R"({"type": "asha", "min_resource": 0})").first, "pruner.min_resource");
  EXPECT_EQ(error_of(R"({"type": "asha", "min_resource": 1.5})").first, "pruner.min_resource");
  EXPECT_EQ(error_of(R"({"type": "asha", "reduction_factor": 1})").first,
            "pruner.reduction_factor");
  EXPECT_EQ(error_of(R"({"type": "asha", "min_early_stopping_rate": -1})").first,
            "pruner.min_early_stopping_rate");
}

TEST(PrunerFactoryTest, Hyperband) {
  auto p = make_pruner(Json::parse(R"({"type": "hyperband", "max_resource": 243})"));
  auto* hb = dynamic_cast<HyperbandPruner*>(p.get());
  ASSERT_NE(hb, nullptr);
  EXPECT_EQ(hb->n_brackets(), 6);
  EXPECT_EQ(hb->options().min_resource, 1);
  EXPECT_EQ(hb->options().reduction_factor, 3);
  p = make_pruner(Json::parse(
      R"({"type": "hyperband", "min_resource": 1, "max_resource": 1000, "reduction_factor": 10, "seed": 4})"));
  hb = dynamic_cast<HyperbandPruner*>(p.get());
  ASSERT_NE(hb, nullptr);
  EXPECT_EQ(hb->n_brackets(), 4);
  EXPECT_EQ(hb->options().seed, 4u);
  EXPECT_EQ(error_of(R"({"type": "hyperband"})").first, "pruner.max_resource");
  EXPECT_EQ(error_of(R"({"type": "hyperband", "max_resource": 5, "min_resource": 6})").first,
            "pruner.max_resource");
  EXPECT_EQ(error_of(R"({"type": "hyperband", "max_resource": 5, "seed": -1})").first,
            "pruner.seed");
  EXPECT_EQ(error_of(R"({"type": "hyperband", "max_resource": "auto"})").first,
            "pruner.max_resource");
}

TEST(PrunerFactoryTest, Threshold) {
  auto p = make_pruner(Json::parse(R"({"type": "threshold", "upper": 2.5, "n_warmup_steps": 1})"));
  auto* t = dynamic_cast<ThresholdPruner*>(p.get());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->options().upper, 2.5);
  EXPECT_EQ(t->options().lower, std::nullopt);
  EXPECT_EQ(t->options().n_warmup_steps, 1);
  EXPECT_EQ(error_of(R"({"type": "threshold"})").first, "pruner");
  EXPECT_EQ(error_of(R"({"type": "threshold", "lower": 3, "upper": 1})").first, "pruner.lower");
  EXPECT_EQ(error_of(R"({"type": "threshold", "lower": "low"})").first, "pruner.lower");
}

TEST(PrunerFactoryTest, PatientWithAndWithoutWrappedPruner) {
  auto p = make_pruner(Json::parse(R"({"type": "patient", "patience": 3, "min_delta": 0.01})"));
  auto* pp = dynamic_cast<PatientPruner*>(p.get());
  ASSERT_NE(pp, nullptr);
  EXPECT_EQ(pp->options().patience, 3);
  EXPECT_EQ(pp->options().min_delta, 0.01);
  EXPECT_EQ(pp->wrapped(), nullptr);
  p = make_pruner(Json::parse(
      R"({"type": "patient", "patience": 1, "wrapped_pruner": {"type": "asha", "min_resource": 1}})"));
  pp = dynamic_cast<PatientPruner*>(p.get());
  ASSERT_NE(pp, nullptr);
  ASSERT_NE(dynamic_cast<SuccessiveHalvingPruner*>(pp->wrapped().get()), nullptr);
  EXPECT_EQ(error_of(R"({"type": "patient"})").first, "pruner.patience");
  EXPECT_EQ(error_of(R"({"type": "patient", "patience": -2})").first, "pruner.patience");
  EXPECT_EQ(error_of(R"({"type": "patient", "patience": 1, "min_delta": -1})").first,
            "pruner.min_delta");
  EXPECT_EQ(
      error_of(
          R"({"type": "patient", "patience": 1, "wrapped_pruner": {"type": "asha", "reduction_factor": 0}})")
          .first,
      "pruner.wrapped_pruner.reduction_factor");
  EXPECT_EQ(error_of(R"({"type": "patient", "patience": 1, "wrapped_pruner": 3})").first,
            "pruner.wrapped_pruner");
  EXPECT_EQ(
      error_of(R"({"type": "patient", "patience": 1, "wrapped_pruner": {"type": "medain"}})").first,
      "pruner.wrapped_pruner.type");
}

TEST(PrunerFactoryTest, DeepNestingIsRefused) {
  Json config = Json{{"type", "none"}};
  for (int i = 0; i < 100; ++i)
    config = Json{{"type", "patient"}, {"patience", 1}, {"wrapped_pruner", config}};
  try {
    make_pruner(config);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nested"), std::string::npos) << e.what();
  }
  // A few levels are fine.
  Json two = Json{{"type", "patient"},
                  {"patience", 1},
                  {"wrapped_pruner", Json{{"type", "patient"}, {"patience", 2}}}};
  EXPECT_NE(make_pruner(two), nullptr);
}

TEST(PrunerFactoryTest, ErrorsNameTheField) {
  auto [path, what] = error_of(R"({"type": "medain"})");
  EXPECT_EQ(path, "pruner.type");
  EXPECT_NE(what.find("did you mean 'median'"), std::string::npos) << what;
  EXPECT_NE(what.find("hyperband"), std::string::npos) << what;  // lists the known types
  EXPECT_EQ(error_of(R"({"n_startup_trials": 1})").first, "pruner.type");
  EXPECT_EQ(error_of(R"({"type": 5})").first, "pruner.type");
  EXPECT_EQ(error_of(R"([1])").first, "pruner");
  std::tie(path, what) = error_of(R"({"type": "median", "n_startup_trails": 1})");
  EXPECT_EQ(path, "pruner.n_startup_trails");
  EXPECT_NE(what.find("n_startup_trials"), std::string::npos) << what;
  EXPECT_EQ(error_of(R"({"type": "median", "n_warmup_steps": -1})").first, "pruner.n_warmup_steps");
  EXPECT_EQ(error_of(R"({"type": "median", "interval_steps": 0})").first, "pruner.interval_steps");
  EXPECT_EQ(error_of(R"({"type": "median", "n_min_trials": true})").first, "pruner.n_min_trials");
  EXPECT_EQ(error_of(R"({"type": "median", "n_startup_trials": 1e30})").first,
            "pruner.n_startup_trials");
  EXPECT_EQ(error_of(R"({"type": "none", "x": 1})").first, "pruner.x");
  // A number below the least allowed is quoted beside the rule.
  EXPECT_EQ(error_of(R"({"type": "median", "n_startup_trials": -3})").second,
            "pruner.n_startup_trials: must be >= 0, got -3");
  EXPECT_EQ(error_of(R"({"type": "asha", "reduction_factor": 1})").second,
            "pruner.reduction_factor: must be >= 2, got 1");
  EXPECT_EQ(error_of(R"({"type": "patient", "patience": -1})").second,
            "pruner.patience: must be >= 0, got -1");
}

}  // namespace
}  // namespace hps
