// Tests of search/search_space.h: the "space" object of space.json
// (distributions, conditions, scale_with), SearchSpace::is_active/check,
// and StudyConfig::from_json/from_file errors.
#include "search/search_space.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/tpe_sampler.h"
#include "search/errors.h"
#include "search/json_util.h"
#include "search/printable.h"
#include "search/resources.h"
#include "search/study_name.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

template <typename F>
ConfigError config_error(F&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ConfigError, got another exception: " << e.what();
    return ConfigError("", "");
  }
  ADD_FAILURE() << "expected ConfigError, nothing was thrown";
  return ConfigError("", "");
}

bool contains_text(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

SearchSpace parse_space(const char* text) { return SearchSpace::from_json(Json::parse(text)); }

// ------------------------------------------------------------ distributions

TEST(SearchSpaceTest, ParsesEveryDistributionKind) {
  auto space = parse_space(R"({
    "lr":         {"type": "float", "low": 1e-4, "high": 1e-1, "log": true},
    "dropout":    {"type": "float", "low": 0.0, "high": 0.5, "step": 0.05},
    "hidden":     {"type": "int", "low": 32, "high": 512, "log": true},
    "layers":     {"type": "int", "low": 1, "high": 9, "step": 2},
    "optimizer":  {"type": "categorical", "choices": ["adam", "sgd", null, 1, 1.0, true]},
    "batch_size": {"type": "ordinal", "values": [16, 32, 64]},
    "fixed":      {"type": "float", "low": 3, "high": 3}
  })");
  ASSERT_EQ(space.size(), 7u);
  EXPECT_FALSE(space.empty());
  EXPECT_EQ(space.find("lr")->distribution.kind(), DistributionKind::kFloat);
  EXPECT_TRUE(space.find("lr")->distribution.is_log());
  EXPECT_EQ(space.find("dropout")->distribution.step(), 0.05);
  EXPECT_EQ(space.find("hidden")->distribution.kind(), DistributionKind::kInt);
  EXPECT_EQ(space.find("layers")->distribution.cardinality(), 5u);
  EXPECT_EQ(space.find("optimizer")->distribution.cardinality(), 6u);
  EXPECT_EQ(space.find("batch_size")->distribution.kind(), DistributionKind::kOrdinal);
  EXPECT_TRUE(space.find("fixed")->distribution.single_value());
  EXPECT_EQ(space.find("nope"), nullptr);
  for (const auto& p : space.params()) {
    EXPECT_FALSE(p.condition);
    EXPECT_FALSE(p.scale_with);
  }
}

TEST(SearchSpaceTest, EmptySpaceIsAllowed) {
  auto space = SearchSpace::from_json(Json::object());
  EXPECT_TRUE(space.empty());
  EXPECT_EQ(space.check({}), "");
}

TEST(SearchSpaceTest, SpaceMustBeAnObject) {
  EXPECT_EQ(config_error([] { SearchSpace::from_json(Json::array()); }).path(), "space");
  EXPECT_EQ(config_error([] { SearchSpace::from_json(Json("x")); }).path(), "space");
}

TEST(SearchSpaceTest, DistributionErrorsNameTheParam) {
  auto e = config_error([] {
    parse_space(R"({"ok": {"type": "int", "low": 1, "high": 2},
                    "lr": {"type": "float", "low": 0, "high": 1, "log": true}})");
  });
  EXPECT_STREQ(e.what(), "space.lr.low: log scale needs low > 0, got low = 0");
  auto typo = config_error(
      [] { parse_space(R"({"lr": {"type": "float", "low": 0, "high": 1, "wehn": {}}})"); });
  EXPECT_EQ(typo.path(), "space.lr.wehn");
  EXPECT_TRUE(contains_text(typo.what(), "did you mean 'when'?")) << typo.what();
  auto not_obj = config_error([] { parse_space(R"({"lr": 0.1})"); });
  EXPECT_EQ(not_obj.path(), "space.lr");
}

// A "type" key written as a near miss ("typ") gets check_keys' hint, in a
// param spec as in the sampler, pruner and objective sections, not "type:
// is required"; a far key still finds "type" missing.
TEST(SearchSpaceTest, AMisspeltTypeKeyGetsADidYouMean) {
  auto typ = config_error([] { parse_space(R"({"lr": {"typ": "float", "low": 0, "high": 1}})"); });
  EXPECT_EQ(typ.path(), "space.lr.typ");
  EXPECT_STREQ(typ.what(), "space.lr.typ: unknown key (did you mean 'type'?)");
  auto tpye = config_error([] { parse_space(R"({"n": {"tpye": "int", "low": 0, "high": 1}})"); });
  EXPECT_EQ(tpye.path(), "space.n.tpye");
  auto missing = config_error([] { parse_space(R"({"lr": {"low": 0, "high": 1}})"); });
  EXPECT_STREQ(missing.what(), "space.lr.type: is required (a string)");
  for (const char* section : {"sampler", "pruner", "objective"}) {
    Json doc = Json::parse(R"({"study": {"name": "s"}, "objective": {"type": "branin"},
                               "space": {}})");
    doc[section] = Json{{"typ", "none"}};
    auto e = config_error([&] { StudyConfig::from_json(doc); });
    EXPECT_EQ(e.path(), std::string(section) + ".typ") << e.what();
    EXPECT_TRUE(contains_text(e.what(), "unknown key (did you mean 'type'?)")) << e.what();
  }
}

// ------------------------------------------------------------ conditions

TEST(SearchSpaceTest, ConditionWithOneValue) {
  auto space = parse_space(R"({
    "momentum":  {"type": "float", "low": 0, "high": 0.99, "when": {"optimizer": "sgd"}},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]}
  })");
  ASSERT_EQ(space.size(), 2u);
  // Parents come before their children whatever the order in the file.
  EXPECT_EQ(space.params()[0].name, "optimizer");
  EXPECT_EQ(space.params()[1].name, "momentum");
  const ParamSpec& m = *space.find("momentum");
  ASSERT_TRUE(m.condition);
  EXPECT_EQ(m.condition->parent, "optimizer");
  ASSERT_EQ(m.condition->values.size(), 1u);
  EXPECT_EQ(m.condition->values[0], "sgd");
  EXPECT_TRUE(SearchSpace::is_active(m, {{"optimizer", "sgd"}}));
  EXPECT_FALSE(SearchSpace::is_active(m, {{"optimizer", "adam"}}));
  EXPECT_FALSE(SearchSpace::is_active(m, {}));
  EXPECT_EQ(space.check({{"optimizer", "sgd"}, {"momentum", 0.9}}), "");
  EXPECT_EQ(space.check({{"optimizer", "adam"}}), "");
  EXPECT_TRUE(contains_text(space.check({{"optimizer", "sgd"}}), "momentum"));
  EXPECT_TRUE(contains_text(space.check({{"optimizer", "adam"}, {"momentum", 0.9}}), "inactive"));
  EXPECT_TRUE(contains_text(space.check({{"optimizer", "sgd"}, {"momentum", 2.0}}), "momentum"));
  EXPECT_TRUE(contains_text(space.check({{"optimizer", "rmsprop"}}), "optimizer"));
  EXPECT_TRUE(contains_text(space.check({{"optimizer", "adam"}, {"extra", 1}}), "extra"));
}

TEST(SearchSpaceTest, ConditionWithAListOfValues) {
  auto space = parse_space(R"({
    "opt":  {"type": "categorical", "choices": ["adam", "sgd", "rmsprop"]},
    "beta": {"type": "float", "low": 0.5, "high": 0.999, "when": {"opt": ["adam", "rmsprop"]}}
  })");
  const ParamSpec& b = *space.find("beta");
  ASSERT_EQ(b.condition->values.size(), 2u);
  EXPECT_TRUE(SearchSpace::is_active(b, {{"opt", "adam"}}));
  EXPECT_TRUE(SearchSpace::is_active(b, {{"opt", "rmsprop"}}));
  EXPECT_FALSE(SearchSpace::is_active(b, {{"opt", "sgd"}}));
}

TEST(SearchSpaceTest, NestedConditionsNeedAnActiveParent) {
  auto space = parse_space(R"({
    "c":   {"type": "int", "low": 1, "high": 3, "when": {"b": true}},
    "b":   {"type": "categorical", "choices": [true, false], "when": {"a": "x"}},
    "a":   {"type": "categorical", "choices": ["x", "y"]}
  })");
  EXPECT_EQ(space.params()[0].name, "a");
  EXPECT_EQ(space.params()[1].name, "b");
  EXPECT_EQ(space.params()[2].name, "c");
  EXPECT_EQ(space.check({{"a", "x"}, {"b", true}, {"c", 2}}), "");
  EXPECT_EQ(space.check({{"a", "y"}}), "");
  EXPECT_NE(space.check({{"a", "y"}, {"c", 2}}), "");
  EXPECT_NE(space.check({{"a", "x"}, {"b", false}, {"c", 2}}), "");
}

TEST(SearchSpaceTest, NullChoiceIsNotAnAbsentParam) {
  auto space = parse_space(R"({
    "norm":  {"type": "categorical", "choices": [null, "batch", "layer"]},
    "eps":   {"type": "float", "low": 1e-6, "high": 1e-3, "log": true, "when": {"norm": null}},
    "group": {"type": "int", "low": 1, "high": 8, "when": {"norm": ["batch", "layer"]}}
  })");
  const ParamSpec& eps = *space.find("eps");
  ASSERT_EQ(eps.condition->values.size(), 1u);
  EXPECT_TRUE(eps.condition->values[0].is_null());
  EXPECT_TRUE(SearchSpace::is_active(eps, {{"norm", Json()}}));
  EXPECT_FALSE(SearchSpace::is_active(eps, {}));  // absent is not null
  EXPECT_FALSE(SearchSpace::is_active(eps, {{"norm", "batch"}}));
  EXPECT_FALSE(SearchSpace::is_active(eps, {{"norm", false}}));
  EXPECT_FALSE(SearchSpace::is_active(eps, {{"norm", "null"}}));
  EXPECT_EQ(space.check({{"norm", Json()}, {"eps", 1e-4}}), "");
  EXPECT_NE(space.check({{"norm", Json()}}), "");  // eps missing
  EXPECT_NE(space.check({{"eps", 1e-4}}), "");     // norm missing
  EXPECT_NE(space.check({{"norm", Json()}, {"eps", 1e-4}, {"group", 2}}), "");
}

TEST(SearchSpaceTest, ConditionValuesKeepTheirJsonType) {
  auto space = parse_space(R"({
    "flag": {"type": "categorical", "choices": [0, false, "0", null]},
    "x":    {"type": "float", "low": 0, "high": 1, "when": {"flag": false}}
  })");
  const ParamSpec& x = *space.find("x");
  EXPECT_TRUE(SearchSpace::is_active(x, {{"flag", false}}));
  EXPECT_FALSE(SearchSpace::is_active(x, {{"flag", 0}}));
  EXPECT_FALSE(SearchSpace::is_active(x, {{"flag", "0"}}));
  EXPECT_FALSE(SearchSpace::is_active(x, {{"flag", Json()}}));
}

TEST(SearchSpaceTest, ConditionOnNumericParents) {
  auto space = parse_space(R"({
    "layers": {"type": "int", "low": 1, "high": 3},
    "width2": {"type": "int", "low": 8, "high": 64, "when": {"layers": [2, 3]}},
    "scale":  {"type": "float", "low": 0, "high": 2, "step": 0.5},
    "extra":  {"type": "float", "low": 0, "high": 1, "when": {"scale": 1.5}},
    "tens":   {"type": "float", "low": 0, "high": 2, "step": 1},
    "w":      {"type": "float", "low": 0, "high": 1, "when": {"tens": 1}},
    "n":      {"type": "int", "low": 0, "high": 4},
    "v":      {"type": "float", "low": 0, "high": 1, "when": {"n": 2.0}},
    "one":    {"type": "float", "low": 0.5, "high": 0.5},
    "u":      {"type": "float", "low": 0, "high": 1, "when": {"one": 0.5}}
  })");
  // A float of one value (low = high) is drawn as that value.
  EXPECT_TRUE(SearchSpace::is_active(*space.find("u"), {{"one", 0.5}}));
  // A sampled int is a JSON integer (signed); a value in a file is unsigned.
  const auto& layers = space.find("layers")->distribution;
  EXPECT_TRUE(SearchSpace::is_active(*space.find("width2"), {{"layers", layers.to_external(2)}}));
  EXPECT_FALSE(SearchSpace::is_active(*space.find("width2"), {{"layers", layers.to_external(1)}}));
  const auto& scale = space.find("scale")->distribution;
  EXPECT_TRUE(SearchSpace::is_active(*space.find("extra"), {{"scale", scale.to_external(1.5)}}));
  // The condition value 1 (integer in the file) must match the sampled 1.0
  // of a float parent, and 2.0 the sampled integer 2 of an int parent:
  // otherwise the child could never be active.
  const auto& tens = space.find("tens")->distribution;
  EXPECT_TRUE(SearchSpace::is_active(*space.find("w"), {{"tens", tens.to_external(1.0)}}));
  const auto& n = space.find("n")->distribution;
  EXPECT_TRUE(SearchSpace::is_active(*space.find("v"), {{"n", n.to_external(2.0)}}));
  EXPECT_EQ(space.check({{"layers", 1},
                         {"one", 0.5},
                         {"u", 0.25},
                         {"scale", 0.5},
                         {"tens", tens.to_external(1.0)},
                         {"w", 0.5},
                         {"n", n.to_external(2.0)},
                         {"v", 0.25}}),
            "");
}

TEST(SearchSpaceTest, ConditionErrors) {
  struct Case {
    const char* space;
    const char* path;
    const char* words;
  };
  const Case cases[] = {
      {R"({"m": {"type": "float", "low": 0, "high": 1, "when": {"optimizer": "sgd"}}})",
       "space.m.when.optimizer", "unknown parent param 'optimizer'"},
      {R"({"o": {"type": "categorical", "choices": ["adam", "sgd"]},
           "m": {"type": "float", "low": 0, "high": 1, "when": {"o": "rmsprop"}}})",
       "space.m.when.o", "not a possible value"},
      {R"({"o": {"type": "categorical", "choices": ["adam", "sgd"]},
           "m": {"type": "float", "low": 0, "high": 1, "when": {"o": ["sgd", "rmsprop"]}}})",
       "space.m.when.o", "\"rmsprop\""},
      {R"({"o": {"type": "categorical", "choices": [1, 2]},
           "m": {"type": "float", "low": 0, "high": 1, "when": {"o": "1"}}})",
       "space.m.when.o", "not a possible value"},
      {R"({"n": {"type": "int", "low": 1, "high": 3},
           "m": {"type": "float", "low": 0, "high": 1, "when": {"n": 1.5}}})",
       "space.m.when.n", "not a possible value"},
      {R"({"o": {"type": "categorical", "choices": ["a"]},
           "m": {"type": "float", "low": 0, "high": 1, "when": {"o": []}}})",
       "space.m.when.o", "at least one value"},
      {R"({"o": {"type": "categorical", "choices": ["a"]},
           "m": {"type": "float", "low": 0, "high": 1, "when": {}}})",
       "space.m.when", "exactly one parent"},
      {R"({"o": {"type": "categorical", "choices": ["a"]}, "p": {"type": "categorical", "choices": ["a"]},
           "m": {"type": "float", "low": 0, "high": 1, "when": {"o": "a", "p": "a"}}})",
       "space.m.when", "exactly one parent"},
      {R"({"o": {"type": "categorical", "choices": ["a"]},
           "m": {"type": "float", "low": 0, "high": 1, "when": "o"}})",
       "space.m.when", "object"},
      {R"({"m": {"type": "float", "low": 0, "high": 1, "when": {"m": 0.5}}})", "space.m.when", "m"},
      // A continuous float parent: 0.5 is in [0, 1] but almost never drawn.
      {R"({"x": {"type": "float", "low": 0, "high": 1},
           "m": {"type": "float", "low": 0, "high": 1, "when": {"x": 0.5}}})",
       "space.m.when.x",
       "'x' is a float without a step, so a trial almost never draws 0.5 and 'm' would never "
       "be active; condition on a categorical, ordinal or int param, or give 'x' a step"},
      {R"({"x": {"type": "float", "low": 0.1, "high": 1, "log": true},
           "m": {"type": "float", "low": 0, "high": 1, "when": {"x": [0.5, 1]}}})",
       "space.m.when.x", "'x' is a float without a step"},
      {R"({"a": {"type": "categorical", "choices": ["x"], "when": {"b": "x"}},
           "b": {"type": "categorical", "choices": ["x"], "when": {"a": "x"}}})",
       "space.a.when", "cycle"},
      {R"({"a": {"type": "categorical", "choices": ["x"], "when": {"c": "x"}},
           "b": {"type": "categorical", "choices": ["x"], "when": {"a": "x"}},
           "c": {"type": "categorical", "choices": ["x"], "when": {"b": "x"}},
           "d": {"type": "categorical", "choices": ["x"]}})",
       "space.a.when", "cycle"},
  };
  for (const auto& c : cases) {
    auto e = config_error([&] { parse_space(c.space); });
    EXPECT_EQ(e.path(), c.path) << c.space << "\n -> " << e.what();
    EXPECT_TRUE(contains_text(e.what(), c.words)) << c.space << "\n -> " << e.what();
  }
}

// A param named "a.b" (or with a quote, a space, a bracket) is not a nested
// key "a" then "b": such names are quoted in paths, plain names are not.
TEST(SearchSpaceTest, PathsQuoteNamesThatAreNotPlainSoTheyAreNotAmbiguous) {
  EXPECT_EQ(join_path("space", "lr"), "space.lr");
  EXPECT_EQ(join_path("space", "optimizer/lr"), "space.optimizer/lr");
  EXPECT_EQ(join_path("space", "a.b"), R"(space["a.b"])");
  EXPECT_EQ(join_path(join_path("space", "a.b"), "low"), R"(space["a.b"].low)");
  EXPECT_EQ(join_path("space", "it's"), R"(space["it's"])");
  EXPECT_EQ(join_path("space", R"(q"x)"), R"(space["q\"x"])");
  EXPECT_EQ(join_path("", "a b"), R"(["a b"])");
  EXPECT_EQ(join_path("space", ""), R"(space[""])");
  EXPECT_EQ(join_path("space", "\xff"), "space[\"\xEF\xBF\xBD\"]");  // not UTF-8: U+FFFD
  // The two spaces that used to give the same path "space.a.b.low":
  auto dotted =
      config_error([] { parse_space(R"({"a.b": {"type": "float", "low": 2, "high": 1}})"); });
  EXPECT_EQ(dotted.path(), R"(space["a.b"])") << dotted.what();
  auto when = config_error([] {
    parse_space(R"({"a.b": {"type": "float", "low": 0, "high": 1, "when": {"c.d": 1}}})");
  });
  EXPECT_EQ(when.path(), R"(space["a.b"].when["c.d"])") << when.what();
  // A key written twice in a param with a dot in its name.
  auto twice = config_error([] {
    parse_json_text(R"({"space": {"a.b": {"type": "float", "low": 0, "low": 1}}})", "in");
  });
  EXPECT_TRUE(contains_text(twice.what(), R"(key 'low' appears twice in 'space["a.b"]')"))
      << twice.what();
  // A plain name too long to quote whole is cut, and bracketed so that the
  // size note does not read as more of the path.
  const std::string long_name(300, 'p');
  EXPECT_EQ(join_path("space", long_name),
            "space[\"" + std::string(kMaxQuotedChars, 'p') + "... (300 bytes in all)\"]");
  EXPECT_EQ(join_path("space", std::string(kMaxQuotedChars, 'p')),
            "space." + std::string(kMaxQuotedChars, 'p'));
}

TEST(SearchSpaceTest, NamesAndValuesQuotedInRulesAreCut) {
  // The rule's own text quotes a user's name or value: at most
  // kMaxQuotedChars characters of it, so the rule stays in view.
  const std::string huge(100000, 'q');
  const auto short_enough = [](const ConfigError& e) {
    return std::string(e.what()).size() < 2000;
  };
  // "when" naming an unknown parent.
  Json space = {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}, {"when", {{huge, 1}}}}}};
  auto e = config_error([&] { SearchSpace::from_json(space); });
  EXPECT_TRUE(short_enough(e)) << std::string(e.what()).size();
  EXPECT_TRUE(contains_text(e.what(), "unknown parent param")) << e.what();
  EXPECT_TRUE(contains_text(e.what(), "(100000 bytes in all)")) << e.what();
  // "when" naming a value the parent does not take.
  space = {{"c", {{"type", "categorical"}, {"choices", {"a", "b"}}}},
           {"x", {{"type", "float"}, {"low", 0}, {"high", 1}, {"when", {{"c", huge}}}}}};
  e = config_error([&] { SearchSpace::from_json(space); });
  EXPECT_TRUE(short_enough(e)) << std::string(e.what()).size();
  EXPECT_TRUE(contains_text(e.what(), "is not a possible value of 'c'")) << e.what();
  // The quote around the cut string value closes, and the size is the text's.
  EXPECT_TRUE(contains_text(e.what(), "qqq... (100000 bytes in all)\" is not")) << e.what();
  // scale_with naming an unknown param, and an unknown rule.
  space = {{"lr",
            {{"type", "float"},
             {"low", 0.1},
             {"high", 1},
             {"scale_with", {{"param", huge}, {"reference", 32}}}}}};
  e = config_error([&] { SearchSpace::from_json(space); });
  EXPECT_TRUE(short_enough(e)) << std::string(e.what()).size();
  EXPECT_TRUE(contains_text(e.what(), "unknown param")) << e.what();
  space = {{"b", {{"type", "int"}, {"low", 1}, {"high", 8}}},
           {"lr",
            {{"type", "float"},
             {"low", 0.1},
             {"high", 1},
             {"scale_with", {{"param", "b"}, {"reference", 32}, {"rule", huge}}}}}};
  e = config_error([&] { SearchSpace::from_json(space); });
  EXPECT_TRUE(short_enough(e)) << std::string(e.what()).size();
  // An integer field (or "auto") given a huge string.
  e = config_error([&] {
    (void)optional_int_in(Json{{"n_startup_trials", huge}}, "sampler", "n_startup_trials", 0, 9,
                          "\"auto\"");
  });
  EXPECT_TRUE(short_enough(e)) << std::string(e.what()).size();
  EXPECT_TRUE(contains_text(e.what(), "or \"auto\", got 'qqq")) << e.what();
}

TEST(JsonUtilTest, RulesQuoteTheNumberGiven) {
  EXPECT_EQ(got_number(0.25), ", got 0.25");
  EXPECT_EQ(got_number(-3), ", got -3.0");
  EXPECT_EQ(got_number(std::nan("")), ", got nan");
  EXPECT_EQ(got_number(-INFINITY), ", got -inf");
  EXPECT_EQ(quoted_value(Json("ab")), "\"ab\"");
  EXPECT_EQ(quoted_value(Json::parse("[1, 2]")), "[1,2]");
  Json space = {{"b", {{"type", "int"}, {"low", 1}, {"high", 8}}},
                {"lr",
                 {{"type", "float"},
                  {"low", 0.1},
                  {"high", 1},
                  {"scale_with", {{"param", "b"}, {"reference", -2}}}}}};
  EXPECT_TRUE(contains_text(config_error([&] { SearchSpace::from_json(space); }).what(),
                            "scale_with.reference: must be > 0, got -2"));
  auto e = config_error([] { Budget::from_json(Json{{"timeout_s", -1.5}}); });
  EXPECT_STREQ(e.what(), "budget.timeout_s: must be > 0 (seconds), got -1.5");
}

// A value of the wrong type is quoted in the rule it broke (cut as every
// quoted value is), so a user sees what was read, not only what was wanted.
TEST(JsonUtilTest, TypeRulesQuoteTheValueGiven) {
  auto what = [](auto&& f) { return std::string(config_error(f).what()); };
  EXPECT_EQ(what([] {
              TpeOptions::from_json(Json{{"type", "tpe"}, {"gamma", 0}});
            }),
            "sampler.gamma: must be an object {\"rule\": \"linear\"|\"sqrt\", \"factor\": x, "
            "\"cap\": n}, got 0");
  EXPECT_EQ(what([] { check_keys(Json("x"), "pruner", {"type"}); }),
            "pruner: must be an object, got \"x\"");
  EXPECT_EQ(what([] {
              Distribution::from_json(Json::array({1, 2}), "space.lr");
            }),
            "space.lr: must be an object like {\"type\": \"float\", \"low\": 0, \"high\": 1}, "
            "got [1,2]");
  EXPECT_EQ(what([] {
              Distribution::from_json(Json{{"type", "categorical"}, {"choices", "ab"}}, "space.c");
            }),
            "space.c.choices: must be an array, got \"ab\"");
  EXPECT_EQ(what([] { SearchSpace::from_json(Json(true)); }),
            "space: must be an object of params, got true");
  Json when = {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}, {"when", "y"}}}};
  EXPECT_TRUE(contains_text(what([&] { SearchSpace::from_json(when); }), "}, got \"y\""));
  // A long value is cut, not quoted whole.
  std::string big(5000, 'v');
  std::string e = what([&] { TpeOptions::from_json(Json{{"type", "tpe"}, {"gamma", big}}); });
  EXPECT_TRUE(contains_text(e, "(5000 bytes in all)")) << e;
  EXPECT_LT(e.size(), 400u);
}

TEST(SearchSpaceTest, AddRejectsDuplicatesAndUnknownParents) {
  SearchSpace space;
  space.add("x", Distribution::make_float(0, 1));
  EXPECT_EQ(config_error([&] { space.add("x", Distribution::make_float(0, 2)); }).path(),
            "space.x");
  EXPECT_THROW(space.add("", Distribution::make_float(0, 1)), ConfigError);
  ParamSpec child{"y", Distribution::make_float(0, 1), Condition{"z", {Json(1)}}, std::nullopt};
  EXPECT_EQ(config_error([&] { space.add(child); }).path(), "space.y.when.z");
  ParamSpec self{"w", Distribution::make_float(0, 1), Condition{"w", {Json(0.5)}}, std::nullopt};
  EXPECT_THROW(space.add(self), ConfigError);
  EXPECT_EQ(space.size(), 1u);
}

TEST(SearchSpaceTest, JsonRoundTrip) {
  const char* text = R"({
    "batch_size": {"type": "ordinal", "values": [16, 32, 64, 128]},
    "lr":         {"type": "float", "low": 1e-4, "high": 1e-1, "log": true,
                   "scale_with": {"param": "batch_size", "reference": 64, "rule": "sqrt"}},
    "optimizer":  {"type": "categorical", "choices": ["adam", "sgd", null]},
    "momentum":   {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
    "beta":       {"type": "float", "low": 0.5, "high": 0.99, "when": {"optimizer": ["adam", null]}},
    "layers":     {"type": "int", "low": 1, "high": 9, "step": 2}
  })";
  auto space = parse_space(text);
  Json j = space.to_json();
  auto back = SearchSpace::from_json(j);
  ASSERT_EQ(back.size(), space.size());
  for (std::size_t i = 0; i < space.size(); ++i) {
    const auto& a = space.params()[i];
    const auto& b = back.params()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_TRUE(a.distribution == b.distribution) << a.name;
    ASSERT_EQ(a.condition.has_value(), b.condition.has_value()) << a.name;
    if (a.condition) {
      EXPECT_EQ(a.condition->parent, b.condition->parent);
      ASSERT_EQ(a.condition->values.size(), b.condition->values.size());
      for (std::size_t k = 0; k < a.condition->values.size(); ++k)
        EXPECT_TRUE(same_json_scalar(a.condition->values[k], b.condition->values[k]));
    }
    ASSERT_EQ(a.scale_with.has_value(), b.scale_with.has_value()) << a.name;
    if (a.scale_with) {
      EXPECT_EQ(a.scale_with->param, b.scale_with->param);
      EXPECT_EQ(a.scale_with->reference, b.scale_with->reference);
      EXPECT_EQ(a.scale_with->rule, b.scale_with->rule);
    }
  }
  EXPECT_EQ(back.to_json(), j);
}

// ------------------------------------------------------------ scale_with

TEST(SearchSpaceTest, ScaleWith) {
  auto space = parse_space(R"({
    "batch_size": {"type": "ordinal", "values": [16, 32, 64]},
    "lr":  {"type": "float", "low": 1e-4, "high": 1e-1, "log": true,
            "scale_with": {"param": "batch_size", "reference": 64}},
    "lr2": {"type": "float", "low": 1e-4, "high": 1e-1,
            "scale_with": {"param": "batch_size", "reference": 32, "rule": "linear"}}
  })");
  const auto& lr = *space.find("lr");
  ASSERT_TRUE(lr.scale_with);
  EXPECT_EQ(lr.scale_with->param, "batch_size");
  EXPECT_EQ(lr.scale_with->reference, 64);
  EXPECT_EQ(lr.scale_with->rule, "sqrt");
  EXPECT_EQ(lr.scale_with->exponent(), 0.5);
  EXPECT_EQ(space.find("lr2")->scale_with->exponent(), 1.0);
}

TEST(SearchSpaceTest, ScaleWithErrors) {
  struct Case {
    const char* space;
    const char* path;
    const char* words;
  };
  const char* bs = R"("bs": {"type": "ordinal", "values": [16, 32, 64]}, )";
  const Case cases[] = {
      {R"("lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"param": "nope", "reference": 64}}})",
       "space.lr.scale_with.param", "unknown param 'nope'"},
      {R"("lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"param": "bs", "reference": 0}}})",
       "space.lr.scale_with.reference", "> 0"},
      {R"("lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"param": "bs", "reference": -8}}})",
       "space.lr.scale_with.reference", "> 0"},
      {R"("lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"param": "bs", "reference": 64, "rule": "cube"}}})",
       "space.lr.scale_with.rule", "sqrt"},
      {R"("lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"param": "bs", "refrence": 64}}})",
       "space.lr.scale_with.refrence", "did you mean 'reference'?"},
      {R"("lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"reference": 64}}})",
       "space.lr.scale_with.param", "required"},
      {R"("lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"param": "bs"}}})",
       "space.lr.scale_with.reference", "required"},
      {R"("lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": "bs"}})",
       "space.lr.scale_with", "object"},
      {R"("lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"param": "lr", "reference": 1}}})",
       "space.lr.scale_with.param", "itself"},
      {R"("act": {"type": "categorical", "choices": ["a", "b"], "scale_with": {"param": "bs", "reference": 64}}})",
       "space.act.scale_with", "float and int"},
      {R"("o": {"type": "categorical", "choices": ["a", 2]},
          "lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"param": "o", "reference": 2}}})",
       "space.lr.scale_with.param", "positive numbers"},
      {R"("z": {"type": "int", "low": 0, "high": 4},
          "lr": {"type": "float", "low": 0.1, "high": 1, "scale_with": {"param": "z", "reference": 2}}})",
       "space.lr.scale_with.param", "positive numbers"},
  };
  for (const auto& c : cases) {
    std::string text = std::string("{") + bs + c.space;
    auto e = config_error([&] { parse_space(text.c_str()); });
    EXPECT_EQ(e.path(), c.path) << text << "\n -> " << e.what();
    EXPECT_TRUE(contains_text(e.what(), c.words)) << text << "\n -> " << e.what();
  }
}

// ------------------------------------------------------------ StudyConfig

const char* kGoodConfig = R"({
  "study":     {"name": "fmnist-mlp", "direction": "maximize", "storage": "x.db"},
  "sampler":   {"type": "random", "seed": 1},
  "pruner":    {"type": "none"},
  "budget":    {"n_trials": 64, "timeout_s": 3600},
  "objective": {"type": "branin"},
  "space": {
    "x0": {"type": "float", "low": -5, "high": 10},
    "x1": {"type": "float", "low": 0, "high": 15}
  }
})";

TEST(StudyConfigTest, ParsesAWholeFile) {
  auto c = StudyConfig::from_json(Json::parse(kGoodConfig));
  EXPECT_EQ(c.name, "fmnist-mlp");
  EXPECT_EQ(c.direction, StudyDirection::kMaximize);
  EXPECT_EQ(c.storage, "x.db");
  EXPECT_EQ(c.sampler["type"], "random");
  EXPECT_EQ(c.pruner["type"], "none");
  EXPECT_EQ(c.budget.n_trials, 64);
  EXPECT_EQ(c.budget.timeout_s, 3600.0);
  Json doc = Json::parse(kGoodConfig);
  doc["budget"]["max_failed_trials"] = 3;
  doc["budget"]["fail_fast"] = false;
  auto rules = StudyConfig::from_json(doc);
  EXPECT_EQ(rules.budget.max_failed_trials, 3);
  EXPECT_FALSE(rules.budget.fail_fast);
  EXPECT_EQ(c.objective["type"], "branin");
  EXPECT_EQ(c.space.size(), 2u);
  EXPECT_EQ(c.source, Json::parse(kGoodConfig));
}

TEST(StudyConfigTest, Defaults) {
  auto c = StudyConfig::from_json(Json::parse(R"({
    "study": {"name": "s"}, "objective": {"type": "branin"}, "space": {}})"));
  EXPECT_EQ(c.direction, StudyDirection::kMinimize);
  EXPECT_EQ(c.storage, "s.db");
  EXPECT_EQ(c.sampler, Json::parse(R"({"type": "random"})"));
  EXPECT_EQ(c.pruner, Json::parse(R"({"type": "none"})"));
  EXPECT_FALSE(c.budget.n_trials);
  EXPECT_FALSE(c.budget.timeout_s);
  EXPECT_FALSE(c.budget.max_failed_trials);
  EXPECT_TRUE(c.budget.fail_fast);
}

// Applies a JSON merge patch to the good config and expects a ConfigError
// at `path` whose message contains `words`.
void expect_config_error(const char* patch, const std::string& path, const std::string& words) {
  Json doc = Json::parse(kGoodConfig);
  doc.merge_patch(Json::parse(patch));
  auto e = config_error([&] { StudyConfig::from_json(doc); });
  EXPECT_EQ(e.path(), path) << patch << " -> " << e.what();
  EXPECT_TRUE(contains_text(e.what(), words)) << patch << " -> " << e.what();
}

// "$schema" (the JSON Schema an editor checks the file with) is accepted
// and ignored when it is a string, and kept in the source document.
TEST(StudyConfigTest, SchemaKeyIsAcceptedAndIgnored) {
  Json doc = Json::parse(kGoodConfig);
  doc["$schema"] = "../../search/space.schema.json";
  auto c = StudyConfig::from_json(doc);
  EXPECT_EQ(c.name, "fmnist-mlp");
  EXPECT_EQ(c.space.size(), 2u);
  EXPECT_EQ(c.source["$schema"], "../../search/space.schema.json");
  expect_config_error(R"({"$schema": 1})", R"(["$schema"])", "must be a string");
  expect_config_error(R"({"$schema": {"$ref": "x"}})", R"(["$schema"])", "must be a string");
  expect_config_error(R"({"$schem": "x"})", R"(["$schem"])", "did you mean '$schema'?");
}

TEST(StudyConfigTest, UnknownKeysSuggestTheRightOne) {
  expect_config_error(R"({"spce": {}})", "spce", "did you mean 'space'?");
  expect_config_error(R"({"budget": {"n_trial": 5, "n_trials": null}})", "budget.n_trial",
                      "did you mean 'n_trials'?");
  expect_config_error(R"({"study": {"nmae": "x"}})", "study.nmae", "did you mean 'name'?");
  expect_config_error(R"({"study": {"direciton": "minimize"}})", "study.direciton",
                      "did you mean 'direction'?");
  expect_config_error(R"({"budget": {"timeout": 5}})", "budget.timeout",
                      "did you mean 'timeout_s'?");
  expect_config_error(R"({"extra_section": {}})", "extra_section", "unknown key");
}

// resources (search/resources.h): processes as an integer or a param's
// value; each wrong value names resources.<field> and the rule.
TEST(StudyConfigTest, ResourcesProcesses) {
  Json doc = Json::parse(kGoodConfig);
  doc["resources"] = Json::parse(R"({"processes": 4, "rendezvous_timeout_s": 30})");
  auto c = StudyConfig::from_json(doc);
  TrialResources r = TrialResources::from_json(c.resources, c.space);
  EXPECT_EQ(r.processes, 4);
  EXPECT_EQ(r.max_size(c.space), 4);
  EXPECT_EQ(r.size_of(Params{}), 4);
  EXPECT_DOUBLE_EQ(r.rendezvous_timeout_s, 30.0);
  EXPECT_EQ(TrialResources::from_json(Json(), c.space).processes, 1);  // null: one process

  doc["space"]["nproc"] = Json::parse(R"({"type": "ordinal", "values": [1, 2, 4]})");
  doc["resources"] = Json::parse(R"({"processes": {"param": "nproc"}})");
  c = StudyConfig::from_json(doc);
  r = TrialResources::from_json(c.resources, c.space);
  EXPECT_EQ(r.processes_param, "nproc");
  EXPECT_EQ(r.max_size(c.space), 4);
  EXPECT_EQ(r.size_of(Params{{"nproc", Json(2)}}), 2);
  EXPECT_EQ(r.size_of(Params{}), 1);  // an inactive size param: one process
  doc["space"]["nproc"] = Json::parse(R"({"type": "int", "low": 1, "high": 3})");
  EXPECT_EQ(TrialResources::from_json(StudyConfig::from_json(doc).resources,
                                      StudyConfig::from_json(doc).space)
                .max_size(StudyConfig::from_json(doc).space),
            3);

  expect_config_error(R"({"resources": {"processes": 0}})", "resources.processes",
                      "must be an integer from 1 to 1024");
  expect_config_error(R"({"resources": {"processes": 2.5}})", "resources.processes",
                      "must be an integer from 1 to 1024");
  expect_config_error(R"({"resources": {"processes": "2"}})", "resources.processes",
                      "must be an integer from 1 to 1024");
  expect_config_error(R"({"resources": {"proceses": 2}})", "resources.proceses",
                      "did you mean 'processes'?");
  expect_config_error(R"({"resources": {"processes": {"param": "nope"}}})",
                      "resources.processes.param", "names no param of the space");
  expect_config_error(R"({"resources": {"processes": {"param": "x0"}}})",
                      "resources.processes.param", "float");
  expect_config_error(R"({"resources": {"rendezvous_timeout_s": 0}})",
                      "resources.rendezvous_timeout_s", "> 0");
  expect_config_error(
      R"({"space": {"n": {"type": "categorical", "choices": [1, "two"]}},
          "resources": {"processes": {"param": "n"}}})",
      "resources.processes.param", "every value must be an integer in [1, 1024]");
  expect_config_error(R"({"space": {"n": {"type": "int", "low": 0, "high": 2}},
                          "resources": {"processes": {"param": "n"}}})",
                      "resources.processes.param", "values in [1, 1024], got [0, 2]");
}

TEST(StudyConfigTest, MissingSections) {
  for (const char* section : {"study", "objective", "space"}) {
    Json doc = Json::parse(kGoodConfig);
    doc.erase(section);
    auto e = config_error([&] { StudyConfig::from_json(doc); });
    EXPECT_EQ(e.path(), section) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "required")) << e.what();
  }
  expect_config_error(R"({"study": {"name": null}})", "study.name", "required");
}

TEST(StudyConfigTest, WrongTypes) {
  expect_config_error(R"({"study": "fmnist"})", "study", "object");
  expect_config_error(R"({"study": {"name": 3}})", "study.name", "string");
  expect_config_error(R"({"study": {"name": ""}})", "study.name", "empty");
  expect_config_error(R"({"study": {"direction": "up"}})", "study.direction", "minimize");
  expect_config_error(R"({"study": {"direction": 1}})", "study.direction", "string");
  expect_config_error(R"({"study": {"storage": ""}})", "study.storage", "empty");
  expect_config_error(R"({"sampler": "tpe"})", "sampler", "object");
  expect_config_error(R"({"sampler": {"type": null, "seed": null}})", "sampler.type", "required");
  expect_config_error(R"({"pruner": {"type": 5}})", "pruner.type", "string");
  expect_config_error(R"({"budget": 64})", "budget", "object");
  expect_config_error(R"({"budget": {"n_trials": "64"}})", "budget.n_trials", "integer");
  expect_config_error(R"({"budget": {"n_trials": 2.5}})", "budget.n_trials", "integer");
  // Integers beyond a 64-bit integer's range name that range.
  expect_config_error(R"({"budget": {"n_trials": 1e30}})", "budget.n_trials",
                      "must be an integer from -9223372036854775808 to 9223372036854775807, got "
                      "1e+30");
  expect_config_error(R"({"budget": {"n_trials": 9223372036854775808}})", "budget.n_trials",
                      "from -9223372036854775808 to 9223372036854775807, got 9223372036854775808");
  expect_config_error(R"({"budget": {"n_trials": 0}})", "budget.n_trials", "> 0");
  expect_config_error(R"({"budget": {"n_trials": -3}})", "budget.n_trials", "> 0");
  expect_config_error(R"({"budget": {"timeout_s": 0}})", "budget.timeout_s", "> 0");
  expect_config_error(R"({"budget": {"timeout_s": "1h"}})", "budget.timeout_s", "number");
  expect_config_error(R"({"budget": {"max_failed_trials": 0}})", "budget.max_failed_trials",
                      ">= 1, got 0");
  expect_config_error(R"({"budget": {"max_failed_trials": -2}})", "budget.max_failed_trials",
                      ">= 1");
  expect_config_error(R"({"budget": {"max_failed_trials": "x"}})", "budget.max_failed_trials",
                      "integer");
  expect_config_error(R"({"budget": {"fail_fast": "no"}})", "budget.fail_fast", "true or false");
  expect_config_error(R"({"objective": "branin"})", "objective", "object");
  expect_config_error(R"({"objective": {"type": null, "model": "mlp"}})", "objective.type",
                      "required");
  expect_config_error(R"({"space": [1]})", "space", "object");
  expect_config_error(R"({"space": {"x0": {"low": 30}}})", "space.x0", "low <= high");
  auto top = config_error([] { StudyConfig::from_json(Json::array()); });
  EXPECT_TRUE(contains_text(top.what(), "object")) << top.what();
}

// ------------------------------------------------------------ files

class StudyConfigFileTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    return dir_.write(name, text);
  }
  hps::testsupport::TempDir dir_{"search_space"};
};

TEST_F(StudyConfigFileTest, ReadsAFile) {
  auto c = StudyConfig::from_file(write("space.json", kGoodConfig));
  EXPECT_EQ(c.name, "fmnist-mlp");
}

TEST_F(StudyConfigFileTest, MissingFile) {
  std::string path = dir_.file("nope.json");
  auto e = config_error([&] { StudyConfig::from_file(path); });
  EXPECT_EQ(e.path(), path);
  EXPECT_TRUE(contains_text(e.what(), "cannot open")) << e.what();
}

TEST_F(StudyConfigFileTest, InvalidJsonGivesLineAndColumn) {
  struct Case {
    const char* text;
    int line, column;
  };
  const Case cases[] = {
      {"{\n  \"study\": {\"name\": \"x\"},\n  \"space\": ,\n}", 3, 12},
      {"{\"a\": 1,}", 1, 9},
      {"{\n\n  \"a\": tru\n}", 3, 11},
      {"{\"a\": 1}\n}", 2, 1},
      {"", 1, 1},
  };
  for (const auto& c : cases) {
    std::string path = write("bad.json", c.text);
    auto e = config_error([&] { StudyConfig::from_file(path); });
    EXPECT_EQ(e.path(), path);
    std::string want =
        "invalid JSON at line " + std::to_string(c.line) + ", column " + std::to_string(c.column);
    EXPECT_TRUE(contains_text(e.what(), want))
        << c.text << "\n -> " << e.what() << "\n want " << want;
  }
}

TEST_F(StudyConfigFileTest, ParseJsonTextNamesTheOrigin) {
  auto e = config_error([] { parse_json_text("[1, 2", "inline"); });
  EXPECT_EQ(e.path(), "inline");
  EXPECT_TRUE(contains_text(e.what(), "line 1")) << e.what();
}

// nlohmann keeps the last of two equal keys; a config must not lose a
// setting written twice without a word.
TEST_F(StudyConfigFileTest, AKeyTwiceInAnObjectIsRefusedWithItsPlace) {
  const std::string text = R"({"study": {"name": "s", "direction": "minimize"},
    "objective": {"type": "branin"},
    "space": {"x0": {"type": "float", "low": -5, "high": 10},
              "x1": {"type": "float", "low": 0, "high": 15, "low": 3}}})";
  std::string path = write("dup.json", text);
  auto e = config_error([&] { StudyConfig::from_file(path); });
  EXPECT_EQ(e.path(), path);
  EXPECT_TRUE(contains_text(e.what(), "key 'low' appears twice in 'space.x1'")) << e.what();
  auto top = config_error([] { parse_json_text(R"({"a": 1, "b": [{"a": 2}], "a": 3})", "in"); });
  EXPECT_TRUE(contains_text(top.what(), "key 'a' appears twice in the top-level object"))
      << top.what();
  auto nested =
      config_error([] { parse_json_text(R"({"b": [{"c": 1}, {"c": 2, "c": 3}]})", "in"); });
  EXPECT_TRUE(contains_text(nested.what(), "key 'c' appears twice in 'b[1]'")) << nested.what();
  // Equal keys in different objects, or in objects of an array, are fine.
  EXPECT_NO_THROW(parse_json_text(R"({"a": {"a": {"a": 1}}, "b": [{"a": 1}, {"a": 2}]})", "in"));
}

// nlohmann's lexer ends the input at a NUL byte: a file with one would be
// read up to it and the rest ignored.
TEST_F(StudyConfigFileTest, ANulByteIsRefusedNotTakenForTheEnd) {
  const std::string text = std::string(R"({"objective": {"type": "branin"},
    "space": {"x0": {"type": "float", "low": -5, "high": 10}}})") +
                           std::string(1, '\0') + "junk";
  std::string path = write("nul.json", text);
  auto e = config_error([&] { StudyConfig::from_file(path); });
  EXPECT_TRUE(contains_text(e.what(), "line 2, column 63: a NUL byte")) << e.what();
  EXPECT_THROW(parse_json_nonfinite(std::string("[1]\0junk", 8)), Json::parse_error);
  EXPECT_THROW(parse_json_nonfinite(std::string("[NaN]\0", 6)), Json::parse_error);
}

TEST_F(StudyConfigFileTest, ADirectoryIsNotAFile) {
  auto e = config_error([&] { StudyConfig::from_file(dir_.path().string()); });
  EXPECT_EQ(e.path(), dir_.path().string());
}

TEST_F(StudyConfigFileTest, DeepNestingAndNumberOverflowAreConfigErrors) {
  // Deeper than kMaxJsonDepth: refused before parsing (no stack exhaustion,
  // however deep), with the place of the first level too many.
  for (std::size_t depth : {kMaxJsonDepth + 1, std::size_t{500000}}) {
    std::string text = "{\"study\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
    std::string path = write("deep.json", text);
    auto e = config_error([&] { StudyConfig::from_file(path); });
    EXPECT_EQ(e.path(), path);
    EXPECT_TRUE(contains_text(e.what(), "nested deeper than")) << e.what();
    EXPECT_TRUE(contains_text(e.what(), "line 1, column " + std::to_string(10 + kMaxJsonDepth)))
        << e.what();
  }
  // Brackets inside strings do not count.
  EXPECT_NO_THROW(parse_json_text("[\"" + std::string(1000, '[') + "\"]", "inline"));
  EXPECT_EQ(json_too_deep_at("[[1]]", 2), std::string_view::npos);
  EXPECT_EQ(json_too_deep_at("[[[1]]]", 2), 2u);
  EXPECT_EQ(json_too_deep_at("\"\\\"[[[\" [[1]]", 2), std::string_view::npos);

  auto e = config_error([] { parse_json_text(R"({"low": -1e400})", "space.json"); });
  EXPECT_EQ(e.path(), "space.json");
  EXPECT_TRUE(contains_text(e.what(), "invalid JSON at 'low'")) << e.what();
  EXPECT_TRUE(contains_text(e.what(), "1e400")) << e.what();
  EXPECT_TRUE(contains_text(e.what(), "range of a double")) << e.what();
  // The field is named however deep it is (keys read before it do not
  // leak into the path), and an array's element by its index.
  e = config_error([] {
    parse_json_text(R"({"study": {"name": "s"}, "space": {"x": {"type": "float", "low": 0,
                          "high": 1e309}}})",
                    "space.json");
  });
  EXPECT_TRUE(contains_text(e.what(), "invalid JSON at 'space.x.high'")) << e.what();
  e = config_error([] { parse_json_text(R"({"values": [1, 2e999]})", "space.json"); });
  EXPECT_TRUE(contains_text(e.what(), "invalid JSON at 'values[1]'")) << e.what();
  e = config_error([] {
    parse_json_text(
        R"({"space": {"x1": {"type": "ordinal", "values": [1, [2], {"a": 3}, 1e309]}}})",
        "space.json");
  });
  EXPECT_TRUE(contains_text(e.what(), "invalid JSON at 'space.x1.values[3]'")) << e.what();
  e = config_error([] { parse_json_text(R"({"zz": [[[1e309]]]})", "space.json"); });
  EXPECT_TRUE(contains_text(e.what(), "invalid JSON at 'zz[0][0][0]'")) << e.what();
  e = config_error([] { parse_json_text(R"([0, [1, {"a": [5, -1e309]}]])", "space.json"); });
  EXPECT_TRUE(contains_text(e.what(), "invalid JSON at '[1][1].a[1]'")) << e.what();
  e = config_error([] { parse_json_text("1e999", "space.json"); });
  EXPECT_TRUE(contains_text(e.what(), "space.json: invalid JSON: number overflow")) << e.what();
}

// nlohmann quotes the bytes it read last ("last read: ..."): a file's raw
// control bytes and bytes that are not UTF-8 are escaped in the message
// (printable()), never sent to the terminal.
TEST_F(StudyConfigFileTest, BytesQuotedInAJsonErrorAreEscaped) {
  for (const auto& [text, kept] : std::vector<std::pair<std::string, std::string>>{
           {"{\"a\": \"tp\xff\"}", "ill-formed UTF-8 byte"},
           {"{\"a\": \"tp\x9b\"}", "ill-formed UTF-8 byte"},
           {"{\"a\": \xc2\x9b}", "invalid literal"},
           {"{\"a\": \"tp\x1b[31m\"}", "control character U+001B (ESC)"}}) {
    const std::string input = text;  // clang cannot capture a structured binding
    auto e = config_error([&] { parse_json_text(input, "space.json"); });
    const std::string what = e.what();
    EXPECT_TRUE(contains_text(what, kept)) << what;
    EXPECT_EQ(printable(what), what) << "raw bytes in: " << what;
  }
}

// A document this program stored (studies.config_json) is read as a file
// is, and may hold the literals NaN and +-Infinity (the C++ API's config).
TEST_F(StudyConfigFileTest, StoredDocumentsAreReadAsFilesAre) {
  const Json doc =
      parse_stored_json_text(R"({"a": NaN, "b": [Infinity, -Infinity], "c": "NaN"})", "stored");
  EXPECT_TRUE(std::isnan(doc["a"].get<double>()));
  EXPECT_EQ(doc["b"][0].get<double>(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(doc["b"][1].get<double>(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(doc["c"], "NaN");
  auto e = config_error(
      [] { parse_stored_json_text(R"({"sampler": {"type": "tpe", "type": "random"}})", "col"); });
  EXPECT_EQ(e.path(), "col");
  EXPECT_TRUE(contains_text(e.what(), "key 'type' appears twice in 'sampler'")) << e.what();
  e = config_error([] { parse_stored_json_text(R"({"x": NaN, "s": {"seed": 1e309}})", "col"); });
  EXPECT_TRUE(contains_text(e.what(),
                            "invalid JSON at 's.seed': number overflow parsing '1e309' "
                            "(a number must lie within +-1.8e308"))
      << e.what();
  e = config_error([] { parse_stored_json_text(std::string("{\"a\": 1}\0", 9), "col"); });
  EXPECT_TRUE(contains_text(e.what(), "a NUL byte")) << e.what();
}

TEST_F(StudyConfigFileTest, StudyNameLengthIsBounded) {
  Json doc = {{"study", {{"name", std::string(kMaxStudyNameBytes, 'n')}}},
              {"objective", {{"type", "branin"}}},
              {"space", {{"x0", {{"type", "float"}, {"low", 0}, {"high", 1}}}}}};
  EXPECT_NO_THROW(StudyConfig::from_json(doc));
  doc["study"]["name"] = std::string(kMaxStudyNameBytes + 1, 'n');
  auto e = config_error([&] { StudyConfig::from_json(doc); });
  EXPECT_EQ(e.path(), "study.name");
  // The same rule wherever a name is given: control characters and invalid
  // UTF-8 are refused, non-ASCII UTF-8 is fine.
  for (const std::string& bad : {std::string("a\nb"), std::string("x\x1b[31m"),
                                 std::string("tab\there"), std::string("\xff\xfe")}) {
    auto err = config_error([&] { check_study_name(bad, "--study"); });
    EXPECT_EQ(err.path(), "--study") << err.what();
  }
  EXPECT_NO_THROW(check_study_name("résumé-研究", "--study"));
  EXPECT_THROW(check_study_name("", "--study"), ConfigError);
  // A C0 control is named escaped, with its place (not its value).
  EXPECT_STREQ(config_error([] { check_study_name("abcdef\x07", "study.name"); }).what(),
               "study.name: must not contain control characters (\\x07 at byte 6)");
  // Characters that print as something else or as nothing: a C1 control
  // (the one-byte CSI), a right-to-left override, a zero-width space and a
  // byte order mark. The error names the character and where it is.
  const std::pair<std::string, std::string> hidden[] = {{"a\xc2\x9b"
                                                         "31mb",
                                                         "\\u009b at byte 1"},
                                                        {"evil\xe2\x80\xae"
                                                         "txt.exe",
                                                         "\\u202e at byte 4"},
                                                        {"ab\xe2\x80\x8b"
                                                         "c",
                                                         "\\u200b at byte 2"},
                                                        {"\xef\xbb\xbf"
                                                         "name",
                                                         "\\ufeff at byte 0"}};
  for (const auto& [hidden_name, where] : hidden) {
    // (clang 14 cannot capture a structured binding.)
    const std::string name = hidden_name;
    auto err = config_error([&] { check_study_name(name, "study.name"); });
    EXPECT_EQ(err.path(), "study.name") << err.what();
    EXPECT_TRUE(contains_text(err.what(), "bidirectional or zero-width")) << err.what();
    EXPECT_TRUE(contains_text(err.what(), where)) << err.what();
  }
}

// ------------------------------------------------------------ json_util

TEST(JsonUtilTest, EditDistanceAndJoinPath) {
  EXPECT_EQ(edit_distance("spce", "space"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(join_path("", "lr"), "lr");
  EXPECT_EQ(join_path("space", "lr"), "space.lr");
}

TEST(JsonUtilTest, NoSuggestionForAFarKey) {
  auto e = config_error([] {
    check_keys(Json::parse(R"({"zzzzzz": 1})"), "budget", {"n_trials", "timeout_s"});
  });
  EXPECT_EQ(e.path(), "budget.zzzzzz");
  EXPECT_FALSE(contains_text(e.what(), "did you mean")) << e.what();
  EXPECT_TRUE(contains_text(e.what(), "n_trials")) << e.what();  // the allowed keys are listed
}

// An error that lists a store's studies names at most kMaxListedStudyNames
// of them, each escaped and cut, so a store of thousands of studies (or one
// edited by hand) gives a readable line.
TEST(StudyNameListTest, ListsAreBoundedAndNamesEscapedAndCut) {
  EXPECT_EQ(study_name_list({}), "none");
  EXPECT_EQ(study_name_list({"a", "b"}), "'a', 'b'");
  std::vector<std::string> many;
  for (int i = 0; i < 25; ++i) many.push_back("s" + std::to_string(i));
  const std::string list = study_name_list(many);
  EXPECT_TRUE(contains_text(list, "'s19', ... (5 more)")) << list;
  EXPECT_FALSE(contains_text(list, "'s20'")) << list;
  const std::string odd = study_name_list({std::string(5000, 'n'),
                                           "a\xe2\x80\xae"
                                           "b"});
  EXPECT_TRUE(contains_text(odd, "(5000 bytes in all)")) << odd;
  EXPECT_TRUE(contains_text(odd, "'a\\u202eb'")) << odd;
  EXPECT_LT(odd.size(), 400u);
}

}  // namespace
}  // namespace hps
