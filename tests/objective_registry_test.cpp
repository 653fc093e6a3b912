// Tests of the objective registry (objectives/objective.h) and of the
// synthetic objective types it registers on first use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "objectives/objective.h"
#include "objectives/synthetic.h"
#include "search/errors.h"
#include "search/storage.h"

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

// ---------------------------------------------------------------- sleep

// "fail_param" must name a param that can be true (a bool categorical): a
// float, an int or categorical choices without true would never fail a
// trial, so the config is refused naming objective.fail_param and the rule.
TEST(ObjectiveRegistryTest, SleepFailParamMustNameABoolParam) {
  SearchSpace space;
  space.add("x", Distribution::make_float(0.0, 1.0));
  space.add("n", Distribution::make_int(0, 3));
  space.add("word", Distribution::make_categorical({"a", "b"}));
  space.add("crash", Distribution::make_categorical({false, true}));
  const auto sleep_failing_on = [](const std::string& name) {
    return Json{{"type", "sleep"}, {"fail_param", name}};
  };
  for (const char* name : {"x", "n", "word"}) {
    ConfigError e = config_error([&] { validate_objective(sleep_failing_on(name), space); });
    EXPECT_EQ(e.path(), "objective.fail_param") << name;
    EXPECT_THAT(e.what(), HasSubstr("must name a bool param")) << name;
    EXPECT_THAT(e.what(), HasSubstr(std::string("'") + name + "' is ")) << name;
    EXPECT_THAT(e.what(), HasSubstr("so no trial would ever fail")) << name;
  }
  EXPECT_THAT(config_error([&] { validate_objective(sleep_failing_on("x"), space); }).what(),
              HasSubstr("'x' is float, so no trial would ever fail"));
  EXPECT_THAT(config_error([&] { validate_objective(sleep_failing_on("nope"), space); }).what(),
              HasSubstr("no param named 'nope'"));
  EXPECT_NO_THROW(validate_objective(sleep_failing_on("crash"), space));
  Objective f = make_objective(sleep_failing_on("crash"), space);
  HandTrial fails(space);
  fails.set("crash", true, space.find("crash")->distribution);
  EXPECT_THROW(f(fails.trial()), Error);
  HandTrial runs(space);
  runs.set("crash", false, space.find("crash")->distribution);
  runs.set("x", 0.25, space.find("x")->distribution);
  EXPECT_EQ(f(runs.trial()), 0.25);
}

// A trial of one step reports nothing while it sleeps: an interrupt (a
// signal to its worker) still ends it, with Interrupted, within a slice of
// the sleep (250 ms), not after the whole 60 s.
TEST(ObjectiveRegistryTest, SleepEndsWhenItsTrialIsInterrupted) {
  SearchSpace space;
  space.add("x", Distribution::make_float(0.0, 1.0));
  Objective f = make_objective(Json{{"type", "sleep"}, {"seconds", 60}, {"steps", 1}}, space);
  std::atomic<bool> interrupt{false};
  Trial trial(nullptr, 1, 0, Params{}, {}, Params{}, &space, &interrupt);
  trial.record_param("x", 0.5, space.find("x")->distribution);
  std::thread stop([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    interrupt = true;
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(f(trial), Interrupted);
  stop.join();
  // Far less than the 60 s asked (no timing claim: 30 s is the bound).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// A "seconds" or "steps" out of its range is refused naming the field, the
// range and the value given.
TEST(ObjectiveRegistryTest, SleepRangeErrorsShowTheValueGiven) {
  SearchSpace space;
  space.add("x", Distribution::make_float(0.0, 1.0));
  const auto sleep = [](const char* key, const Json& value) {
    return Json{{"type", "sleep"}, {key, value}};
  };
  EXPECT_STREQ(config_error([&] { validate_objective(sleep("seconds", -3), space); }).what(),
               "objective.seconds: must be in [0, 86400] (seconds), got -3");
  EXPECT_STREQ(config_error([&] { validate_objective(sleep("seconds", 1e5), space); }).what(),
               "objective.seconds: must be in [0, 86400] (seconds), got 100000.0");
  EXPECT_STREQ(config_error([&] { validate_objective(sleep("steps", 0), space); }).what(),
               "objective.steps: must be in [1, 1000000], got 0");
  EXPECT_NO_THROW(validate_objective(sleep("seconds", 86400), space));
}

// "seconds" is the whole trial's sleep, split over its steps (as the README
// and objectives/sleep.h say): 0.3 s in 3 steps takes 0.3 s, not 0.9 s.
TEST(ObjectiveRegistryTest, SleepSecondsAreInAllSplitOverTheSteps) {
  SearchSpace space;
  space.add("x", Distribution::make_float(0.0, 1.0));
  Objective f = make_objective(Json{{"type", "sleep"}, {"seconds", 0.3}, {"steps", 3}}, space);
  StudyOptions options;
  options.space = space;
  Study study = Study::create(open_storage("memory"), "sleep", StudyDirection::kMinimize, options);
  OptimizeOptions run;
  run.n_trials = 1;
  const auto start = std::chrono::steady_clock::now();
  study.optimize(f, run);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(elapsed, 0.29);
  EXPECT_LT(elapsed, 0.75) << "slept per step, not in all";
  ASSERT_EQ(study.trials({TrialState::kComplete}).size(), 1u);
  EXPECT_EQ(study.trials()[0]->intermediate_values.size(), 3u);
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

// ---------------------------------------------------------------- post-study hook

// A finished study of `n` trials of branin on x0, x1 in [-5, 15].
Study finished_branin_study(int n) {
  StudyOptions options;
  options.space = float_space(2, -5.0, 15.0);
  Study study =
      Study::create(open_storage("memory"), "after-study", StudyDirection::kMinimize, options);
  OptimizeOptions run;
  run.n_trials = n;
  study.optimize(make_objective(type_config("branin"), *options.space), run);
  return study;
}

// The type "test.after_study.<suffix>": branin's objective with `hook`.
std::string register_with_hook(const std::string& suffix, AfterStudyHook hook) {
  ObjectiveType type;
  type.type = "test.after_study." + suffix;
  type.make = [](const Json&, const SearchSpace& space, const ObjectiveContext&) {
    return make_objective(type_config("branin"), space);
  };
  type.after_study = std::move(hook);
  register_objective_type(type);
  return type.type;
}

// What a study holds, to compare before and after a hook.
struct Snapshot {
  std::vector<TrialState> states;
  std::vector<std::optional<double>> values;
  std::vector<Json> user_attrs;
  bool operator==(const Snapshot&) const = default;
};
Snapshot snapshot(const Study& study) {
  Snapshot s;
  for (const TrialPtr& t : study.trials()) {
    s.states.push_back(t->state);
    s.values.push_back(t->value);
    s.user_attrs.push_back(t->user_attrs);
  }
  return s;
}

TEST(ObjectiveRegistryTest, AfterStudyHookRunsOnceWithTheBestTrialAndItsAttrsAreStored) {
  Study study = finished_branin_study(12);
  const TrialPtr best = study.best_trial();
  int calls = 0;
  std::int64_t seen_number = -1;
  std::string seen_study, seen_config_field;
  std::size_t seen_space_size = 0;
  int seen_threads = 0;
  AfterStudyHook hook;
  hook.name = "checking the best trial";
  hook.run = [&](const Json& config, const SearchSpace& space, const Study& s,
                 const FrozenTrial& trial, const ObjectiveContext& context, std::ostream& out) {
    ++calls;
    seen_number = trial.number;
    seen_study = s.name();
    seen_config_field = config.value("extra", "");
    seen_space_size = space.params().size();
    seen_threads = context.threads;
    out << "checked trial " << trial.number << "\n";
    return Json{{"checked_value", *trial.value}, {"checked", true}};
  };
  const std::string type = register_with_hook("ok", hook);

  ObjectiveContext context;
  context.threads = 3;
  std::ostringstream out;
  const Json config = {{"type", type}, {"extra", "field"}};
  const AfterStudyOutcome outcome =
      run_after_study(config, float_space(2, -5.0, 15.0), study, context, out);
  EXPECT_TRUE(outcome.ran);
  EXPECT_EQ(outcome.error, "");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen_number, best->number);
  EXPECT_EQ(seen_study, "after-study");
  EXPECT_EQ(seen_config_field, "field");
  EXPECT_EQ(seen_space_size, 2u);
  EXPECT_EQ(seen_threads, 3);
  EXPECT_EQ(out.str(), "checked trial " + std::to_string(best->number) + "\n");
  EXPECT_EQ(outcome.user_attrs, (Json{{"checked_value", *best->value}, {"checked", true}}));

  // The attrs are stored with the best trial, and with no other.
  for (const TrialPtr& t : study.trials()) {
    if (t->number == best->number) {
      EXPECT_EQ(t->user_attrs.value("checked_value", 0.0), *best->value);
      EXPECT_EQ(t->user_attrs.value("checked", false), true);
    } else {
      EXPECT_FALSE(t->user_attrs.contains("checked")) << t->number;
    }
  }
}

TEST(ObjectiveRegistryTest, WithoutAHookOrACompleteTrialNothingRuns) {
  Study study = finished_branin_study(5);
  const Snapshot before = snapshot(study);
  std::ostringstream out;
  // A type without a hook (branin), an unknown type, a section without a type.
  for (const Json& config :
       {type_config("branin"), type_config("test.after_study.unknown"), Json::object()}) {
    const AfterStudyOutcome outcome =
        run_after_study(config, float_space(2, -5.0, 15.0), study, ObjectiveContext{}, out);
    EXPECT_FALSE(outcome.ran) << config.dump();
    EXPECT_EQ(outcome.error, "");
    EXPECT_TRUE(outcome.user_attrs.empty());
  }
  EXPECT_EQ(snapshot(study), before);
  EXPECT_EQ(out.str(), "");

  // A hook and a study without a COMPLETE trial: the hook is not called.
  int calls = 0;
  AfterStudyHook hook;
  hook.name = "counting";
  hook.run = [&](const Json&, const SearchSpace&, const Study&, const FrozenTrial&,
                 const ObjectiveContext&, std::ostream&) {
    ++calls;
    return Json();
  };
  const std::string type = register_with_hook("no_complete", hook);
  StudyOptions options;
  options.space = float_space(2, -5.0, 15.0);
  Study empty = Study::create(open_storage("memory"), "empty", StudyDirection::kMinimize, options);
  Trial failed = empty.ask();
  empty.tell(failed, TrialState::kFail, std::nullopt, "failed on purpose");
  const AfterStudyOutcome outcome =
      run_after_study(type_config(type), *options.space, empty, ObjectiveContext{}, out);
  EXPECT_FALSE(outcome.ran);
  EXPECT_EQ(calls, 0);
}

TEST(ObjectiveRegistryTest, AHooksErrorIsReportedAndLeavesTheStudyAsItWas) {
  Study study = finished_branin_study(8);
  const Snapshot before = snapshot(study);
  AfterStudyHook throwing;
  throwing.name = "scoring";
  throwing.run = [](const Json&, const SearchSpace&, const Study&, const FrozenTrial&,
                    const ObjectiveContext&, std::ostream& out) -> Json {
    out << "scoring...\n";
    throw Error("test data missing");
  };
  std::ostringstream out;
  AfterStudyOutcome outcome = run_after_study(type_config(register_with_hook("throws", throwing)),
                                              float_space(2, -5.0, 15.0), study, {}, out);
  EXPECT_TRUE(outcome.ran);
  EXPECT_EQ(outcome.error, "test data missing");
  EXPECT_TRUE(outcome.user_attrs.empty());
  EXPECT_EQ(snapshot(study), before);

  // Attrs that are not an object are refused, and nothing is written.
  AfterStudyHook bad_attrs;
  bad_attrs.name = "listing";
  bad_attrs.run = [](const Json&, const SearchSpace&, const Study&, const FrozenTrial&,
                     const ObjectiveContext&, std::ostream&) {
    return Json::array({1, 2});
  };
  outcome = run_after_study(type_config(register_with_hook("bad_attrs", bad_attrs)),
                            float_space(2, -5.0, 15.0), study, {}, out);
  EXPECT_TRUE(outcome.ran);
  EXPECT_THAT(outcome.error, HasSubstr("array instead of a JSON object of user attrs"));
  EXPECT_EQ(snapshot(study), before);

  // The study goes on: more trials run and are stored as before.
  OptimizeOptions run;
  run.n_trials = 10;
  study.optimize(make_objective(type_config("branin"), float_space(2, -5.0, 15.0)), run);
  EXPECT_EQ(study.trials({TrialState::kComplete}).size(), 18u);
}

}  // namespace
}  // namespace hps
