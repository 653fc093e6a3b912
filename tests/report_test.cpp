// report/: PED-ANOVA importances, the page data, the HTML page.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "report/html.h"
#include "report/importance.h"
#include "report/page_data.h"
#include "tests/support/report_study.h"
#include "tests/support/temp_dir.h"

namespace hps::report {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// n COMPLETE trials with params drawn uniformly from `space` (seeded) and
// value f(params).
std::vector<TrialPtr> random_trials(const SearchSpace& space, int n,
                                    const std::function<double(const Params&)>& f,
                                    std::uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<TrialPtr> out;
  for (int i = 0; i < n; ++i) {
    auto t = std::make_shared<FrozenTrial>();
    t->number = i;
    t->state = TrialState::kComplete;
    for (const auto& spec : space.params()) {
      if (!SearchSpace::is_active(spec, t->params)) continue;
      const Distribution& d = spec.distribution;
      double x =
          d.is_indexed() ? u(rng) * static_cast<double>(d.choices().size()) - 0.5
          : d.is_log()
              ? std::exp(std::log(d.low()) + u(rng) * (std::log(d.high()) - std::log(d.low())))
              : d.low() + u(rng) * (d.high() - d.low());
      t->params[spec.name] = d.to_external(x);
      t->distributions.emplace(spec.name, d);
    }
    t->value = f(t->params);
    out.push_back(t);
  }
  return out;
}

double importance_of(const Importances& imp, const std::string& name) {
  for (const auto& v : imp.values)
    if (v.param == name) return v.importance;
  ADD_FAILURE() << "no importance for " << name;
  return -1;
}

SearchSpace four_floats() {
  SearchSpace s;
  for (const char* n : {"a", "b", "c", "d"}) s.add(n, Distribution::make_float(0, 1));
  return s;
}

TEST(PedAnova, AFunctionOfOneParamGivesItNearlyAllTheImportance) {
  auto space = four_floats();
  auto trials = random_trials(
      space, 1000, [](const Params& p) { return std::pow(p.at("a").get<double>() - 0.3, 2); });
  Importances imp = ped_anova_importances(trials, space, StudyDirection::kMinimize);
  EXPECT_EQ(imp.method, "PED-ANOVA");
  EXPECT_EQ(imp.n_trials, 1000);
  EXPECT_EQ(imp.n_top, 100);
  EXPECT_EQ(imp.values[0].param, "a");
  EXPECT_GT(importance_of(imp, "a"), 0.9);
  double sum = 0;
  for (const auto& v : imp.values) sum += v.importance;
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(PedAnova, RanksOneThatMattersAboveTwoThatBarelyDoAndOneThatDoesNot) {
  auto space = four_floats();
  auto trials = random_trials(space, 2000, [](const Params& p) {
    return 10 * std::pow(p.at("a").get<double>() - 0.5, 2) + 0.5 * p.at("b").get<double>() +
           0.5 * p.at("c").get<double>();
  });
  Importances imp = ped_anova_importances(trials, space, StudyDirection::kMinimize);
  EXPECT_EQ(imp.values[0].param, "a");
  EXPECT_EQ(imp.values[3].param, "d");
  EXPECT_GT(importance_of(imp, "b"), 2 * importance_of(imp, "d"));
  EXPECT_GT(importance_of(imp, "c"), 2 * importance_of(imp, "d"));
}

TEST(PedAnova, OnlyTheRankingOfValuesCountsAndMaximizeMirrorsMinimize) {
  auto space = four_floats();
  auto f = [](const Params& p) {
    return std::pow(p.at("a").get<double>() - 0.3, 2) + 0.3 * p.at("b").get<double>();
  };
  auto base = random_trials(space, 300, f);
  auto exp_f = random_trials(space, 300, [&](const Params& p) { return std::exp(5 * f(p)); });
  auto neg_f = random_trials(space, 300, [&](const Params& p) { return -f(p); });
  auto a = ped_anova_importances(base, space, StudyDirection::kMinimize);
  auto b = ped_anova_importances(exp_f, space, StudyDirection::kMinimize);
  auto c = ped_anova_importances(neg_f, space, StudyDirection::kMaximize);
  ASSERT_EQ(a.values.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a.values[i].param, b.values[i].param);
    EXPECT_DOUBLE_EQ(a.values[i].importance, b.values[i].importance);
    EXPECT_EQ(a.values[i].param, c.values[i].param);
    EXPECT_DOUBLE_EQ(a.values[i].importance, c.values[i].importance);
  }
}

TEST(PedAnova, CategoricalAndLogParams) {
  SearchSpace space;
  space.add("opt", Distribution::make_categorical({"adam", "sgd", "rmsprop"}));
  space.add("lr", Distribution::make_float(1e-5, 1, true));
  space.add("noise", Distribution::make_float(0, 1));
  // Best trials: opt == sgd (categorical), whatever lr.
  auto trials =
      random_trials(space, 600, [](const Params& p) { return p.at("opt") == "sgd" ? 0.0 : 1.0; });
  auto imp = ped_anova_importances(trials, space, StudyDirection::kMinimize);
  EXPECT_EQ(imp.values[0].param, "opt");
  EXPECT_GT(importance_of(imp, "opt"), 0.7);
  // Best trials: small lr on its log scale (lr < 1e-4 is a fifth of the
  // log range, a tiny corner of the linear range).
  auto trials2 = random_trials(space, 600, [](const Params& p) {
    return std::abs(std::log10(p.at("lr").get<double>()) + 4.5);
  });
  auto imp2 = ped_anova_importances(trials2, space, StudyDirection::kMinimize);
  EXPECT_EQ(imp2.values[0].param, "lr");
  EXPECT_GT(importance_of(imp2, "lr"), 0.8);
}

TEST(PedAnova, ConditionalParamIsMeasuredWhereActiveAndTooFewTrialsGiveZeros) {
  Json spec = Json::parse(R"({
    "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
    "momentum": {"type": "float", "low": 0, "high": 1, "when": {"opt": "sgd"}}})");
  SearchSpace space = SearchSpace::from_json(spec);
  auto trials = random_trials(space, 400, [](const Params& p) {
    return p.count("momentum") ? std::abs(p.at("momentum").get<double>() - 0.9) : 0.5;
  });
  auto imp = ped_anova_importances(trials, space, StudyDirection::kMinimize);
  int active = 0;
  for (const auto& t : trials) active += t->params.count("momentum") > 0;
  for (const auto& v : imp.values)
    if (v.param == "momentum") {
      EXPECT_EQ(v.n_trials, active);
    }
  EXPECT_GT(importance_of(imp, "momentum"), 0.0);

  std::vector<TrialPtr> two(trials.begin(), trials.begin() + 2);
  auto none = ped_anova_importances(two, space, StudyDirection::kMinimize);
  EXPECT_NE(none.note.find("at least 3"), std::string::npos) << none.note;
  for (const auto& v : none.values) EXPECT_EQ(v.importance, 0.0);
  EXPECT_EQ(none.n_top, 0);
  // Computed but called rough below kFewTrialsForImportance COMPLETE trials;
  // no note at or above it.
  std::vector<TrialPtr> few(trials.begin(), trials.begin() + kFewTrialsForImportance - 1);
  auto rough = ped_anova_importances(few, space, StudyDirection::kMinimize);
  EXPECT_GT(rough.n_top, 0);
  EXPECT_NE(rough.note.find("only 19 COMPLETE trials: a rough ranking"), std::string::npos)
      << rough.note;
  EXPECT_EQ(imp.note, "");
  PedAnovaOptions bad;
  bad.target_quantile = 1.5;
  EXPECT_THROW(ped_anova_importances(trials, space, StudyDirection::kMinimize, bad), ConfigError);
}

class PageData : public ::testing::Test {
 protected:
  void SetUp() override {
    counts_ = testsupport::make_report_study(storage_, "page", 40);
    id_ = *storage_.find_study("page");
    info_ = storage_.get_study(id_);
    trials_ = storage_.get_all_trials(id_, {});
  }
  InMemoryStorage storage_;
  testsupport::ReportStudyCounts counts_;
  std::int64_t id_ = -1;
  StudyInfo info_;
  std::vector<TrialPtr> trials_;
};

TEST_F(PageData, HoldsEveryTrialCountsBestSoFarRungsAndTheEffectiveValue) {
  Json d = build_page_data(info_, trials_);
  EXPECT_EQ(d["n_trials"], 40);
  EXPECT_EQ(d["counts"]["COMPLETE"], counts_.complete);
  EXPECT_EQ(d["counts"]["PRUNED"], counts_.pruned);
  EXPECT_EQ(d["counts"]["FAIL"], counts_.fail);
  EXPECT_EQ(d["counts"]["RUNNING"], 1);
  EXPECT_EQ(d["trials"].size(), 40u);
  EXPECT_EQ(d["history_numbers"].size(), static_cast<std::size_t>(counts_.complete));
  EXPECT_EQ(d["curve_numbers"].size(), static_cast<std::size_t>(counts_.with_curves));
  EXPECT_TRUE(d["downsampled"].empty());
  // Best so far: non-increasing, ends at the best COMPLETE value.
  double best = INFINITY;
  for (const auto& t : trials_)
    if (t->state == TrialState::kComplete) best = std::min(best, *t->value);
  const Json& bn = d["best_by_number"];
  ASSERT_GE(bn.size(), 2u);
  for (std::size_t i = 1; i < bn.size(); ++i) EXPECT_LE(bn[i][1], bn[i - 1][1]);
  EXPECT_EQ(bn.back()[1].get<double>(), best);
  EXPECT_EQ(d["top"][0]["v"].get<double>(), best);
  // ASHA with min_resource 1 and reduction factor 2 over steps 1..4.
  EXPECT_EQ(d["rungs"], Json::parse("[1, 2, 4]"));
  // Pruned trials carry their curve up to the step they stopped at.
  for (const auto& r : d["trials"]) {
    if (r["s"] == "PRUNED") {
      ASSERT_TRUE(r.contains("iv"));
      auto t = trials_[r["n"].get<std::size_t>()];
      EXPECT_EQ(r["iv"].back()[0].get<std::int64_t>(), t->intermediate_values.rbegin()->first);
    }
    if (r["s"] == "FAIL") {
      EXPECT_EQ(r["fr"], "objective raised");
    }
  }
  // Indexed params as indices; the effective lr = lr * sqrt(batch_size / 64).
  const Json& top = d["top"][0];
  auto t = trials_[top["n"].get<std::size_t>()];
  double lr = t->params.at("lr").get<double>();
  double bs = t->params.at("batch_size").get<double>();
  EXPECT_DOUBLE_EQ(top["effective"]["lr"].get<double>(), lr * std::sqrt(bs / 64));
  EXPECT_EQ(top["attrs"], Json::parse(R"({"best_step": 4})"));  // in the top trials table
  const SearchSpace space = SearchSpace::from_json(info_.config["space"]);
  const Distribution& bsd = space.find("batch_size")->distribution;
  EXPECT_EQ(d["trials"][top["n"].get<std::size_t>()]["p"]["batch_size"],
            bsd.index_of(t->params.at("batch_size")));
  // Timeline: one row per started trial, three workers.
  EXPECT_EQ(d["timeline"]["rows"].size(), 40u);
  EXPECT_EQ(d["timeline"]["workers"].size(), 3u);
  // Importance: lr decides the value.
  EXPECT_EQ(d["importance"]["values"][0]["param"], "lr");
  EXPECT_EQ(d["contour"]["x"]["param"], "lr");
  EXPECT_EQ(d["contour"]["x"]["type"], "log");
  // Settings: the stored space.json.
  EXPECT_EQ(d["settings"], info_.config);
}

TEST_F(PageData, StoredSettingsThatCouldNotBeReadAreNamedNotCalledMissing) {
  // A study made through the C++ API: no settings and no error.
  StudyInfo api = info_;
  api.config = Json();
  Json d = build_page_data(api, trials_);
  EXPECT_TRUE(d["settings"].is_null());
  EXPECT_FALSE(d.contains("settings_error"));
  // Settings that did not parse (StudyInfo::config_error): the page data
  // carries the reason, and the page shows it instead of "no stored space.json".
  StudyInfo damaged = api;
  damaged.config_error = "studies row study_id=1: column config_json: invalid JSON";
  d = build_page_data(damaged, trials_);
  EXPECT_TRUE(d["settings"].is_null());
  EXPECT_EQ(d["settings_error"], damaged.config_error);
  // The params still come from the trials.
  EXPECT_EQ(d["params"].size(), build_page_data(info_, trials_)["params"].size());
  // (tests/report_browser_test.py checks that the page shows it.)
}

TEST_F(PageData, StoredSettingsThatBreakARuleAreNamed) {
  // A valid stored document: no note.
  ASSERT_TRUE(info_.config.is_object());
  EXPECT_FALSE(build_page_data(info_, trials_).contains("settings_error"));
  // Parsed, but not an object.
  StudyInfo odd = info_;
  odd.config = Json::parse("[1, 2]");
  Json d = build_page_data(odd, trials_);
  EXPECT_THAT(d["settings_error"].get<std::string>(),
              AllOf(HasSubstr("column config_json"), HasSubstr("must be a JSON object")));
  // An object whose budget breaks a rule: named, the stored space still used.
  StudyInfo bad_budget = info_;
  bad_budget.config["budget"] = Json{{"n_trials", -5}};
  d = build_page_data(bad_budget, trials_);
  EXPECT_THAT(d["settings_error"].get<std::string>(),
              HasSubstr("budget.n_trials: must be > 0, got -5"));
  EXPECT_EQ(d["params"], build_page_data(info_, trials_)["params"]);
  // A misspelt pruner type.
  StudyInfo bad_pruner = info_;
  bad_pruner.config["pruner"] = Json{{"type", "medain"}};
  EXPECT_THAT(build_page_data(bad_pruner, trials_)["settings_error"].get<std::string>(),
              HasSubstr("pruner.type: unknown type 'medain'"));
  // A stored space that breaks a rule (low > high): the page is still built,
  // its params from the trials' distributions.
  StudyInfo bad_space = info_;
  bad_space.config["space"]["lr"]["low"] = 10;
  bad_space.config["space"]["lr"]["high"] = 1;
  d = build_page_data(bad_space, trials_);
  EXPECT_THAT(d["settings_error"].get<std::string>(), HasSubstr("space.lr"));
  EXPECT_FALSE(d["params"].empty());
  EXPECT_EQ(d["n_trials"], 40);
}

TEST_F(PageData, StudiesUpToTheThresholdAreNeverDownsampled) {
  // Caps below the study's size do not apply at or below downsample_above.
  PageOptions o;
  o.max_points = 10;
  o.max_slice_points = 3;
  o.max_parcoords = 2;
  o.max_curves = 5;
  o.max_timeline = 7;
  o.downsample_above = 40;
  Json d = build_page_data(info_, trials_, o);
  EXPECT_TRUE(d["downsampled"].empty());
  EXPECT_EQ(d["history_numbers"].size(), static_cast<std::size_t>(counts_.complete));
  EXPECT_EQ(d["curve_numbers"].size(), static_cast<std::size_t>(counts_.with_curves));
  EXPECT_TRUE(d["parcoords_numbers"].is_null());
  EXPECT_TRUE(d["slice_numbers"].is_null());
  EXPECT_EQ(d["timeline"]["rows"].size(), 40u);
  EXPECT_EQ(d["downsample_above"], 40);
  // One trial more than the threshold: the caps apply.
  o.downsample_above = 39;
  Json cut = build_page_data(info_, trials_, o);
  EXPECT_EQ(cut["history_numbers"].size(), 10u);
  EXPECT_EQ(cut["slice_numbers"].size(), 3u);
  EXPECT_EQ(cut["parcoords_numbers"].size(), 2u);
  EXPECT_EQ(kDownsampleAbove, PageOptions{}.downsample_above);
}

TEST_F(PageData, DenseStudiesAreDownsampledAndSaySo) {
  PageOptions o;
  o.downsample_above = 0;
  o.max_points = 10;
  o.max_curves = 5;
  o.max_timeline = 7;
  Json d = build_page_data(info_, trials_, o);
  EXPECT_EQ(d["history_numbers"].size(), 10u);
  EXPECT_EQ(d["curve_numbers"].size(), 5u);
  EXPECT_EQ(d["downsampled"]["points"], Json::array({10, counts_.complete}));
  EXPECT_EQ(d["downsampled"]["timeline"], Json::array({7, 40}));
  EXPECT_EQ(d["timeline"]["rows"].size(), 7u);
  EXPECT_TRUE(d["parcoords_numbers"].is_null());  // 10 <= max_parcoords
  EXPECT_TRUE(d["slice_numbers"].is_null());      // 10 <= max_slice_points
  o.max_parcoords = 4;
  o.max_slice_points = 6;
  Json pc = build_page_data(info_, trials_, o);
  ASSERT_EQ(pc["parcoords_numbers"].size(), 4u);
  EXPECT_EQ(pc["downsampled"]["parcoords"], Json::array({4, counts_.complete}));
  std::set<std::int64_t> dense(pc["history_numbers"].begin(), pc["history_numbers"].end());
  for (const auto& n : pc["parcoords_numbers"]) EXPECT_TRUE(dense.count(n.get<std::int64_t>()));
  ASSERT_EQ(pc["slice_numbers"].size(), 6u);
  EXPECT_EQ(pc["downsampled"]["slices"], Json::array({6, counts_.complete}));
  for (const auto& n : pc["slice_numbers"]) EXPECT_TRUE(dense.count(n.get<std::int64_t>()));
  // The best trial is always shown, and best-so-far still covers all.
  std::int64_t best_n = d["top"][0]["n"];
  bool shown = false;
  for (const auto& n : d["history_numbers"]) shown |= n == best_n;
  EXPECT_TRUE(shown);
  shown = false;
  for (const auto& n : pc["parcoords_numbers"]) shown |= n == best_n;
  EXPECT_TRUE(shown);
  EXPECT_EQ(d["best_by_number"].back()[1], d["top"][0]["v"]);
  PageOptions bad;
  bad.max_points = 0;
  EXPECT_THROW(build_page_data(info_, trials_, bad), ConfigError);
  PageOptions bad_slices;
  bad_slices.max_slice_points = 0;
  try {
    build_page_data(info_, trials_, bad_slices);
    ADD_FAILURE() << "max_slice_points 0 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("report.max_slice_points"), std::string::npos) << e.what();
  }
}

TEST_F(PageData, RevisionsTellWhatChanged) {
  TrialRevisions rev;
  std::int64_t r1 = rev.update(trials_);
  EXPECT_EQ(rev.changed_since(0).size(), 40u);
  EXPECT_TRUE(rev.changed_since(r1).empty());
  EXPECT_EQ(rev.update(storage_.get_all_trials(id_, {})), r1);  // nothing new
  TrialPtr running = trials_.back();
  storage_.set_trial_intermediate_value(running->trial_id, 1, 0.5);
  NewTrial init;
  storage_.create_trial(id_, init);
  std::int64_t r2 = rev.update(storage_.get_all_trials(id_, {}));
  auto changed = rev.changed_since(r1);
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_EQ(changed[0]->number, running->number);
  EXPECT_EQ(changed[1]->number, 40);
  EXPECT_TRUE(rev.changed_since(r2).empty());
}

TEST(PageDataLabels, ChoicesThatWouldLookAlikeKeepTheirTypes) {
  // 1 and "1", true and "true" are different choices (types are kept): the
  // page must not show them as one category. Strings are quoted only then.
  StudyInfo info;
  info.name = "labels";
  info.config = Json::parse(R"({"space": {
      "mixed": {"type": "categorical", "choices": [null, true, 1, 1.0, "1", "true", "x"]},
      "plain": {"type": "categorical", "choices": ["a", "b"]}}})");
  Json d = build_page_data(info, {});
  ASSERT_EQ(d["params"].size(), 2u);
  for (const auto& p : d["params"]) {
    if (p["name"] == "mixed")
      EXPECT_EQ(p["labels"],
                Json::parse(R"(["null", "true", "1", "1.0", "\"1\"", "\"true\"", "x"])"));
    else
      EXPECT_EQ(p["labels"], Json::parse(R"(["a", "b"])"));
  }
}

TEST(ReportPage, InlinesLibraryAndDataAndNoStudyTextCanCloseTheScript) {
  Json data{{"study", {{"name", "x</script><script>alert(1)</script>"}}}, {"n", 1}};
  std::string page = render_page(data, "window.LIB = 1;");
  EXPECT_NE(page.find("window.LIB = 1;"), std::string::npos);
  EXPECT_EQ(page.find("</script><script>alert"), std::string::npos);
  EXPECT_NE(page.find("x\\u003c/script>"), std::string::npos);
  EXPECT_NE(page.find("connect-src 'none'"), std::string::npos);
  EXPECT_EQ(page.find("src=\"http"), std::string::npos);
  EXPECT_THROW(render_page(data, "a</script>b"), Error);
  PageMode live;
  live.live = true;
  EXPECT_NE(render_page(data, "", live).find("connect-src 'self'"), std::string::npos);
}

TEST(ReportPage, AnEmptyOrCutShortPlotlyIsAClearError) {
  testsupport::TempDir dir("plotly");
  const std::string empty = dir.write("empty.js", "");
  const std::string cut = dir.write("cut.js", "/**\n* plotly.js v2.35.2\n*/ var a=1;");
  for (const std::string& path : {empty, cut}) {
    try {
      load_plotly_js(path);
      FAIL() << "no error for " << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not the Plotly.js bundle"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  // The real bundle fetched by the set-up script passes.
  const std::string real = std::string(HPSEARCH_SOURCE_DIR) + "/third_party/plotly/plotly.min.js";
  EXPECT_GT(load_plotly_js(real).size(), 1'000'000u);
}

TEST(ReportPage, MissingPlotlyIsAClearError) {
  try {
    find_plotly_js("/nonexistent/dir/hpsearch", "/nonexistent/plotly.min.js");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scripts/fetch-plotly.sh"), std::string::npos);
  }
}

}  // namespace
}  // namespace hps::report
