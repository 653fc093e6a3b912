// Tests of the objective registry (objectives/objective.h) and of the
// synthetic objective types it registers on first use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "objectives/objective.h"
#include "objectives/synthetic.h"
#include "search/errors.h"

namespace hps {
namespace {

using ::testing::HasSubstr;

Json type_config(const std::string& type) { return Json{{"type", type}}; }

SearchSpace float_space(std::size_t n, double low = -5.0, double high = 10.0) {
  SearchSpace space;
  for (std::size_t i = 0; i < n; ++i) {
    space.add("x" + std::to_string(i), Distribution::make_float(low, high));
  }
  return space;
}

// Runs `f` and returns the ConfigError it throws (fails the test if none).
template <typename F>
ConfigError config_error(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no ConfigError thrown";
  return ConfigError("", "");
}

// ---------------------------------------------------------------- names

TEST(ObjectiveRegistryTest, SyntheticTypesAreRegisteredOnFirstUse) {
  const std::vector<std::string> names = objective_type_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const char* type : {"ackley", "branin", "hartmann6", "rosenbrock", "styblinski_tang"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), type), names.end()) << type;
  }
}

// ---------------------------------------------------------------- objective section

TEST(ObjectiveRegistryTest, ValidSyntheticConfigsPass) {
  EXPECT_NO_THROW(validate_objective(type_config("branin"), float_space(2)));
  EXPECT_NO_THROW(validate_objective(type_config("hartmann6"), float_space(6, 0.0, 1.0)));
  EXPECT_NO_THROW(validate_objective(type_config("styblinski_tang"), float_space(1)));
  EXPECT_NO_THROW(validate_objective(type_config("rosenbrock"), float_space(2)));
  EXPECT_NO_THROW(validate_objective(type_config("ackley"), float_space(7)));
}

TEST(ObjectiveRegistryTest, UnknownTypeSuggestsTheClosestName) {
  ConfigError e = config_error([] { validate_objective(type_config("brannin"), float_space(2)); });
  EXPECT_EQ(e.path(), "objective.type");
  EXPECT_THAT(e.what(), HasSubstr("unknown type 'brannin'"));
  // The known types are listed (in name order), whatever else is registered.
  std::string known;
  for (const std::string& name : objective_type_names())
    known += (known.empty() ? "" : ", ") + name;
  EXPECT_THAT(e.what(), HasSubstr("(known: " + known + ")"));
  EXPECT_THAT(known, HasSubstr("ackley, branin, "));
  EXPECT_THAT(e.what(), HasSubstr("did you mean 'branin'?"));

  e = config_error([] { validate_objective(type_config("hartman6"), float_space(6)); });
  EXPECT_THAT(e.what(), HasSubstr("did you mean 'hartmann6'?"));
}

TEST(ObjectiveRegistryTest, UnknownTypeFarFromAllNamesHasNoSuggestion) {
  ConfigError e = config_error([] { validate_objective(type_config("zzz"), float_space(2)); });
  EXPECT_EQ(e.path(), "objective.type");
  EXPECT_THAT(e.what(), HasSubstr("unknown type 'zzz' (known: "));
  EXPECT_EQ(std::string(e.what()).find("did you mean"), std::string::npos) << e.what();
}

TEST(ObjectiveRegistryTest, MissingOrMistypedTypeIsAnError) {
  ConfigError e = config_error([] { validate_objective(Json::object(), float_space(2)); });
  EXPECT_EQ(e.path(), "objective.type");
  e = config_error([] { validate_objective(Json{{"type", 3}}, float_space(2)); });
  EXPECT_EQ(e.path(), "objective.type");
  e = config_error([] { validate_objective(Json::array(), float_space(2)); });
  EXPECT_EQ(e.path(), "objective");
}

TEST(ObjectiveRegistryTest, SyntheticConfigAllowsOnlyType) {
  ConfigError e = config_error([] {
    validate_objective(Json{{"type", "branin"}, {"dim", 2}}, float_space(2));
  });
  EXPECT_EQ(e.path(), "objective.dim");
}

// ---------------------------------------------------------------- space rules

TEST(ObjectiveRegistryTest, MissingInputIsAnError) {
  ConfigError e = config_error([] { validate_objective(type_config("branin"), float_space(1)); });
  EXPECT_EQ(e.path(), "space");
  EXPECT_THAT(e.what(), HasSubstr("'branin'"));
  EXPECT_THAT(e.what(), HasSubstr("x1 is not declared"));

  e = config_error([] { validate_objective(type_config("hartmann6"), float_space(5)); });
  EXPECT_EQ(e.path(), "space");
  EXPECT_THAT(e.what(), HasSubstr("x5 is not declared"));

  // Rosenbrock needs N >= 2; the N-D functions at least x0.
  e = config_error([] { validate_objective(type_config("rosenbrock"), float_space(1)); });
  EXPECT_EQ(e.path(), "space");
  EXPECT_THAT(e.what(), HasSubstr("at least 2 inputs"));
  e = config_error([] { validate_objective(type_config("ackley"), SearchSpace()); });
  EXPECT_EQ(e.path(), "space");
  EXPECT_THAT(e.what(), HasSubstr("x0 is not declared"));
}

TEST(ObjectiveRegistryTest, ExtraInputForFixedDimensionIsAnError) {
  ConfigError e = config_error([] { validate_objective(type_config("branin"), float_space(3)); });
  EXPECT_EQ(e.path(), "space.x2");
  EXPECT_THAT(e.what(), HasSubstr("exactly 2 inputs"));
}

TEST(ObjectiveRegistryTest, GapInNDInputsIsAnError) {
  SearchSpace space = float_space(2);
  space.add("x3", Distribution::make_float(0, 1));
  ConfigError e = config_error([&] { validate_objective(type_config("ackley"), space); });
  EXPECT_EQ(e.path(), "space.x3");
  EXPECT_THAT(e.what(), HasSubstr("x2 is not declared"));
}

TEST(ObjectiveRegistryTest, NonCanonicalInputNameIsAnError) {
  SearchSpace space = float_space(2);
  space.add("x01", Distribution::make_float(0, 1));
  ConfigError e = config_error([&] { validate_objective(type_config("rosenbrock"), space); });
  EXPECT_EQ(e.path(), "space.x01");
}

TEST(ObjectiveRegistryTest, CategoricalInputIsAnError) {
  SearchSpace space;
  space.add("x0", Distribution::make_float(-5, 10));
  space.add("x1", Distribution::make_categorical({Json(0.0), Json(1.0)}));
  ConfigError e = config_error([&] { validate_objective(type_config("branin"), space); });
  EXPECT_EQ(e.path(), "space.x1");
  EXPECT_THAT(e.what(), HasSubstr("numeric distribution (float or int), got categorical"));

  SearchSpace ordinal;
  ordinal.add("x0", Distribution::make_ordinal({Json(1), Json(2)}));
  e = config_error([&] { validate_objective(type_config("ackley"), ordinal); });
  EXPECT_EQ(e.path(), "space.x0");
  EXPECT_THAT(e.what(), HasSubstr("got ordinal"));
}

TEST(ObjectiveRegistryTest, ConditionalInputIsAnError) {
  SearchSpace space;
  space.add("mode", Distribution::make_categorical({Json("a"), Json("b")}));
  space.add("x0", Distribution::make_float(-5, 5));
  space.add(ParamSpec{"x1", Distribution::make_float(-5, 5), Condition{"mode", {Json("a")}},
                      std::nullopt});
  ConfigError e = config_error([&] { validate_objective(type_config("styblinski_tang"), space); });
  EXPECT_EQ(e.path(), "space.x1");
  EXPECT_THAT(e.what(), HasSubstr("unconditional"));
}

TEST(ObjectiveRegistryTest, IntInputsAndOtherParamsAreAllowed) {
  SearchSpace space;
  space.add("x0", Distribution::make_int(-5, 10));
  space.add("x1", Distribution::make_float(0, 15));
  space.add("lr", Distribution::make_float(1e-4, 1e-1, true));
  space.add("xa", Distribution::make_categorical({Json("p"), Json("q")}));
  EXPECT_NO_THROW(validate_objective(type_config("branin"), space));
}

// ---------------------------------------------------------------- make + evaluate

// A Trial whose params are set by hand, with no backend behind it.
class HandTrial {
 public:
  explicit HandTrial(const SearchSpace& space)
      : trial_(nullptr, /*trial_id=*/1, /*number=*/0, Params{}, {}, Params{}, &space) {}
  HandTrial& set(const std::string& name, const Json& value, const Distribution& d) {
    trial_.record_param(name, value, d);
    return *this;
  }
  Trial& trial() { return trial_; }

 private:
  Trial trial_;
};

TEST(ObjectiveRegistryTest, MadeBraninEvaluatesTheTrialsParams) {
  const SearchSpace space = float_space(2, -5.0, 15.0);
  const Objective objective = make_objective(type_config("branin"), space);
  ASSERT_TRUE(objective);
  const Distribution d = space.params()[0].distribution;
  HandTrial t(space);
  t.set("x0", std::numbers::pi, d).set("x1", 2.275, d);
  EXPECT_NEAR(objective(t.trial()), 5.0 / (4.0 * std::numbers::pi), 1e-12);

  // The order is x0, x1 (not swapped): at (0, 0), 56 - 5/(4 pi); at
  // (x0, x1) = (pi, 3.275), 1 + 5/(4 pi).
  HandTrial u(space);
  u.set("x0", std::numbers::pi, d).set("x1", 3.275, d);
  EXPECT_NEAR(objective(u.trial()), 1.0 + 5.0 / (4.0 * std::numbers::pi), 1e-12);
}

TEST(ObjectiveRegistryTest, MadeNDObjectiveTakesNFromTheSpaceAndReadsInts) {
  SearchSpace space;
  const Distribution d = Distribution::make_int(-5, 10);
  for (int i = 0; i < 3; ++i) space.add("x" + std::to_string(i), d);
  const Objective objective = make_objective(type_config("rosenbrock"), space);
  HandTrial t(space);
  t.set("x0", 1, d).set("x1", 2, d).set("x2", 3, d);
  // Worked out in synthetic_test: f(1, 2, 3) = 201.
  EXPECT_EQ(objective(t.trial()), 201.0);

  const Objective st = make_objective(type_config("styblinski_tang"), space);
  HandTrial u(space);
  u.set("x0", -5, d).set("x1", 5, d).set("x2", 0, d);
  EXPECT_EQ(st(u.trial()), 225.0);  // 100 + 125 + 0
}

TEST(ObjectiveRegistryTest, MadeObjectiveFailsOnAMissingParam) {
  const SearchSpace space = float_space(2);
  const Objective objective = make_objective(type_config("branin"), space);
  HandTrial t(space);
  t.set("x0", 1.0, space.params()[0].distribution);
  EXPECT_THROW(objective(t.trial()), Error);
}

TEST(ObjectiveRegistryTest, MadeObjectiveRunsInAStudy) {
  // The Trials a Study hands out (declared space, random sampler) carry
  // x0..x{N-1}; every value the study records is f at the trial's params.
  SearchSpace space;
  for (int i = 0; i < 3; ++i) {
    space.add("x" + std::to_string(i), Distribution::make_float(-5.0, 5.0));
  }
  StudyOptions options;
  options.space = space;
  Study study =
      Study::create(open_storage("memory"), "synthetic", StudyDirection::kMinimize, options);
  OptimizeOptions run;
  run.n_trials = 10;
  study.optimize(make_objective(type_config("styblinski_tang"), space), run);
  const std::vector<TrialPtr> trials = study.trials({TrialState::kComplete});
  ASSERT_EQ(trials.size(), 10u);
  for (const TrialPtr& t : trials) {
    std::vector<double> x;
    for (int i = 0; i < 3; ++i) x.push_back(t->params.at("x" + std::to_string(i)).get<double>());
    ASSERT_TRUE(t->value.has_value());
    EXPECT_EQ(*t->value, styblinski_tang(x));
    EXPECT_GE(*t->value, -39.16617 * 3 - 3 * 5e-6);
  }
}

TEST(ObjectiveRegistryTest, MakeValidatesFirst) {
  ConfigError e = config_error([] { make_objective(type_config("branin"), float_space(1)); });
  EXPECT_EQ(e.path(), "space");
  e = config_error([] { make_objective(type_config("branni"), float_space(2)); });
  EXPECT_EQ(e.path(), "objective.type");
}

// ---------------------------------------------------------------- registration

TEST(ObjectiveRegistryTest, RegisteredTypeIsValidatedAndMade) {
  std::atomic<int> validated{0};
  ObjectiveType type;
  type.type = "test.constant";
  type.description = "returns 42";
  type.validate = [&](const Json& config, const SearchSpace&) {
    ++validated;
    check_keys(config, "objective", {"type", "value"});
  };
  type.make = [](const Json& config, const SearchSpace&, const ObjectiveContext& ctx) -> Objective {
    const double value = config.value("value", 42.0) + ctx.threads;
    return [value](Trial&) { return value; };
  };
  register_objective_type(type);

  const std::vector<std::string> names = objective_type_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "test.constant"), names.end());

  ObjectiveContext ctx;
  ctx.threads = 3;
  const Objective objective =
      make_objective(Json{{"type", "test.constant"}, {"value", 4.0}}, SearchSpace(), ctx);
  SearchSpace space;
  HandTrial t(space);
  EXPECT_EQ(objective(t.trial()), 7.0);
  EXPECT_EQ(validated.load(), 1);

  ConfigError e = config_error([] {
    validate_objective(Json{{"type", "test.constant"}, {"vlaue", 1}}, SearchSpace());
  });
  EXPECT_EQ(e.path(), "objective.vlaue");

  // Registering the same name again replaces the type.
  type.make = [](const Json&, const SearchSpace&, const ObjectiveContext&) -> Objective {
    return [](Trial&) { return -1.0; };
  };
  register_objective_type(type);
  EXPECT_EQ(make_objective(type_config("test.constant"), SearchSpace())(t.trial()), -1.0);
}

TEST(ObjectiveRegistryTest, RegisteringWithoutNameOrMakeIsAnError) {
  ObjectiveType nameless;
  nameless.make = [](const Json&, const SearchSpace&, const ObjectiveContext&) -> Objective {
    return [](Trial&) { return 0.0; };
  };
  EXPECT_THROW(register_objective_type(nameless), Error);
  ObjectiveType no_make;
  no_make.type = "test.no_make";
  EXPECT_THROW(register_objective_type(no_make), Error);
  const std::vector<std::string> names = objective_type_names();
  EXPECT_EQ(std::find(names.begin(), names.end(), "test.no_make"), names.end());
}

TEST(ObjectiveRegistryTest, ConcurrentRegistrationAndLookup) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      const SearchSpace space = float_space(2);
      for (int i = 0; i < kPerThread; ++i) {
        ObjectiveType type;
        type.type = "test.concurrent." + std::to_string(t) + "." + std::to_string(i);
        type.make = [](const Json&, const SearchSpace&, const ObjectiveContext&) -> Objective {
          return [](Trial&) { return 0.0; };
        };
        register_objective_type(type);
        try {
          validate_objective(type_config("branin"), space);
          validate_objective(type_config(type.type), space);
          if (!make_objective(type_config(type.type), space)) ++failures;
        } catch (const std::exception&) {
          ++failures;
        }
        if (objective_type_names().empty()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const std::vector<std::string> names = objective_type_names();
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      const std::string name = "test.concurrent." + std::to_string(t) + "." + std::to_string(i);
      EXPECT_TRUE(std::binary_search(names.begin(), names.end(), name)) << name;
    }
  }
}

}  // namespace
}  // namespace hps
