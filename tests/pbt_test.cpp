// Tests of Population Based Training: the settings (search/pbt_options.h),
// the exploit and explore decisions (algorithms/pbt.h), and whole studies
// through the hpsearch executable on the toy problem of the PBT paper
// (Jaderberg et al. 2017, arXiv:1711.09846, section 4.1 and appendix A):
// exploit copies the donor's checkpoint, and a coordinator killed mid-
// population resumes.
//
// HPSEARCH_TEST_CLI=/path/to/hpsearch runs the studies against another build.
#include "algorithms/pbt.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "search/errors.h"
#include "search/json_util.h"
#include "search/pbt_options.h"
#include "search/search_space.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using testsupport::ProcessResult;
using testsupport::read_file;
using testsupport::TempDir;
using testsupport::wait_until;

// ------------------------------------------------------------ settings

Json pbt_doc(const Json& scheduler) {
  return Json{{"study", {{"name", "toy"}, {"direction", "maximize"}}},
              {"objective", {{"type", "command"}, {"argv", {"/bin/true"}}}},
              {"space",
               {{"h0", {{"type", "float"}, {"low", 0}, {"high", 1}}},
                {"h1", {{"type", "float"}, {"low", 0}, {"high", 1}}}}},
              {"scheduler", scheduler}};
}

Json good_scheduler() {
  return Json{{"type", "pbt"}, {"population", 2}, {"perturbation_interval", 4}, {"max_steps", 40}};
}

// The error StudyConfig::from_json gives for `doc`, "" if none.
std::string refusal(const Json& doc) {
  try {
    StudyConfig::from_json(doc);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string refusal_with(const std::string& key, const Json& value) {
  Json s = good_scheduler();
  s[key] = value;
  return refusal(pbt_doc(s));
}

TEST(PbtOptions, DefaultsAndFieldsAreRead) {
  Json s = good_scheduler();
  s["initial_params"] = Json::array({{{"h0", 1.0}, {"h1", 0.0}}, {{"h0", 0.0}, {"h1", 1.0}}});
  s["seed"] = 7;
  StudyConfig c = StudyConfig::from_json(pbt_doc(s));
  PbtOptions o =
      *pbt_options_of(scheduler_section(c.source), c.space, c.pruner, c.artifacts, false);
  EXPECT_EQ(o.population, 2);
  EXPECT_EQ(o.perturbation_interval, 4);
  EXPECT_EQ(o.max_steps, 40);
  EXPECT_EQ(o.quantile, 0.25);
  EXPECT_EQ(o.resample_probability, 0.25);
  EXPECT_EQ(o.perturbation_factors, (std::vector<double>{0.8, 1.2}));
  EXPECT_EQ(o.mode, PbtMode::kAsync);
  EXPECT_FALSE(o.budget_steps);
  EXPECT_EQ(o.seed, 7u);
  ASSERT_EQ(o.initial_params.size(), 2u);
  EXPECT_EQ(o.initial_params[0].at("h0"), 1.0);
  EXPECT_EQ(o.quantile_size(), 1);
  // No scheduler: no PBT.
  EXPECT_FALSE(pbt_options_of(Json(), c.space, c.pruner, c.artifacts, false));
}

TEST(PbtOptions, QuantileSizeIsTheCeilingAtMostHalf) {
  PbtOptions o;
  o.population = 8;
  o.quantile = 0.25;
  EXPECT_EQ(o.quantile_size(), 2);
  o.population = 5;
  EXPECT_EQ(o.quantile_size(), 2);  // ceil(1.25)
  o.population = 3;
  o.quantile = 0.5;
  EXPECT_EQ(o.quantile_size(), 1);  // ceil(1.5) = 2, at most 3 / 2
}

TEST(PbtOptions, BadSettingsAreRefusedNamingTheField) {
  EXPECT_EQ(refusal(pbt_doc(good_scheduler())), "");
  EXPECT_NE(refusal_with("population", 1).find("scheduler.population: must be an integer from 2"),
            std::string::npos);
  EXPECT_NE(
      refusal_with("perturbation_interval", 0).find("scheduler.perturbation_interval: must be > 0"),
      std::string::npos);
  EXPECT_NE(refusal_with("perturbation_interval", -3).find("scheduler.perturbation_interval"),
            std::string::npos);
  EXPECT_NE(refusal_with("perturbation_interval", 40).find("must be < max_steps"),
            std::string::npos);
  EXPECT_NE(refusal_with("quantile", 0).find("scheduler.quantile: must be in (0, 0.5]"),
            std::string::npos);
  EXPECT_NE(refusal_with("quantile", 0.6).find("scheduler.quantile"), std::string::npos);
  EXPECT_EQ(refusal_with("quantile", 0.5), "");
  EXPECT_NE(refusal_with("resample_probability", 1.5).find("scheduler.resample_probability"),
            std::string::npos);
  EXPECT_NE(refusal_with("perturbation_factors", Json::array({1.2, -1}))
                .find("scheduler.perturbation_factors[1]: must be a finite number > 0"),
            std::string::npos);
  EXPECT_NE(
      refusal_with("perturbation_factors", Json::array()).find("scheduler.perturbation_factors"),
      std::string::npos);
  EXPECT_NE(refusal_with("mode", "lockstep").find("scheduler.mode: must be one of 'async', 'sync'"),
            std::string::npos);
  EXPECT_NE(refusal_with("mode", "sync").find("scheduler.mode"), std::string::npos);
  EXPECT_NE(refusal_with("budget_steps", 0).find("scheduler.budget_steps: must be > 0"),
            std::string::npos);
  EXPECT_NE(refusal_with("populaton", 2).find("did you mean 'population'"), std::string::npos);
  EXPECT_NE(refusal_with("type", "pb2").find("scheduler.type"), std::string::npos);
  EXPECT_NE(refusal_with("initial_params", Json::array({{{"h0", 2.0}}}))
                .find("scheduler.initial_params[0]"),
            std::string::npos);
  EXPECT_NE(
      refusal_with("initial_params", Json::array({{{"h0", 1.0}}, {{"h0", 0.5}}, {{"h0", 0.0}}}))
          .find("more than the population"),
      std::string::npos);
  Json s = good_scheduler();
  s.erase("max_steps");
  EXPECT_NE(refusal(pbt_doc(s)).find("scheduler.max_steps"), std::string::npos);
}

TEST(PbtOptions, AStudyWithoutCheckpointsAPrunerOrNTrialsIsRefused) {
  Json doc = pbt_doc(good_scheduler());
  doc["artifacts"] = {{"checkpoints", false}};
  const std::string no_checkpoints = refusal(doc);
  EXPECT_NE(no_checkpoints.find("scheduler: PBT needs checkpoints"), std::string::npos)
      << no_checkpoints;
  EXPECT_NE(no_checkpoints.find("artifacts.checkpoints"), std::string::npos);
  doc = pbt_doc(good_scheduler());
  doc["pruner"] = {{"type", "median"}};
  EXPECT_NE(refusal(doc).find("pruner: not used with scheduler pbt"), std::string::npos);
  doc["pruner"] = {{"type", "none"}};
  EXPECT_EQ(refusal(doc), "");
  doc["budget"] = {{"n_trials", 10}};
  EXPECT_NE(refusal(doc).find("budget.n_trials: not used with scheduler pbt"), std::string::npos);
}

// ------------------------------------------------------------ decisions

TEST(PbtDecisions, QuantilesRankByDirectionWithNanLast) {
  std::vector<pbt::MemberReport> r = {{0, 4, 0.5}, {1, 4, 0.9}, {2, 4, NAN}, {3, 4, 0.1}};
  pbt::Quantiles max = pbt::quantiles(r, StudyDirection::kMaximize, 1);
  EXPECT_EQ(max.top, std::vector<std::int64_t>{1});
  EXPECT_EQ(max.bottom, std::vector<std::int64_t>{2});  // NaN ranks worst
  pbt::Quantiles min = pbt::quantiles(r, StudyDirection::kMinimize, 2);
  EXPECT_EQ(min.top, (std::vector<std::int64_t>{3, 0}));
  EXPECT_EQ(min.bottom, (std::vector<std::int64_t>{2, 1}));
  // Too few members for two quantiles: nothing decided.
  EXPECT_TRUE(pbt::quantiles({{0, 4, 1.0}}, StudyDirection::kMaximize, 1).bottom.empty());
  // Ties go to the lower member index.
  pbt::Quantiles tie = pbt::quantiles({{0, 4, 1.0}, {1, 4, 1.0}}, StudyDirection::kMaximize, 1);
  EXPECT_EQ(tie.top, std::vector<std::int64_t>{0});
  EXPECT_EQ(tie.bottom, std::vector<std::int64_t>{1});
  // ... unless member 0 is the one judged: a member only as good as
  // another ranks below it.
  tie = pbt::quantiles({{0, 4, 1.0}, {1, 4, 1.0}}, StudyDirection::kMaximize, 1, 0);
  EXPECT_EQ(tie.top, std::vector<std::int64_t>{1});
  EXPECT_EQ(tie.bottom, std::vector<std::int64_t>{0});
  PbtOptions o;
  o.population = 2;
  std::mt19937_64 rng(1);
  EXPECT_EQ(pbt::choose_donor({{0, 4, 1.0}, {1, 4, 1.0}}, 0, StudyDirection::kMaximize, o, rng), 1);
  EXPECT_EQ(pbt::choose_donor({{0, 4, 1.0}, {1, 4, 1.0}}, 1, StudyDirection::kMaximize, o, rng), 0);
}

TEST(PbtDecisions, OnlyTheBottomQuantileExploitsADonorOfTheTop) {
  PbtOptions o;
  o.population = 8;
  o.perturbation_interval = 5;
  o.max_steps = 50;
  std::vector<pbt::MemberReport> r;
  for (std::int64_t m = 0; m < 8; ++m) r.push_back({m, 10, static_cast<double>(m)});
  std::mt19937_64 rng(3);
  std::set<std::int64_t> donors;
  for (int i = 0; i < 200; ++i) {
    // Maximize: members 0 and 1 are the bottom quantile, 7 and 6 the top.
    for (std::int64_t m : {0, 1}) {
      auto d = pbt::choose_donor(r, m, StudyDirection::kMaximize, o, rng);
      ASSERT_TRUE(d);
      EXPECT_TRUE(*d == 6 || *d == 7) << *d;
      donors.insert(*d);
    }
    for (std::int64_t m = 2; m < 8; ++m)
      EXPECT_FALSE(pbt::choose_donor(r, m, StudyDirection::kMaximize, o, rng));
  }
  EXPECT_EQ(donors.size(), 2u);  // both donors drawn
  EXPECT_TRUE(pbt::is_boundary(5, o));
  EXPECT_TRUE(pbt::is_boundary(45, o));
  EXPECT_FALSE(pbt::is_boundary(50, o));  // max_steps: the member stops there
  EXPECT_FALSE(pbt::is_boundary(7, o));
  EXPECT_FALSE(pbt::is_boundary(0, o));
}

SearchSpace explore_space() {
  return SearchSpace::from_json(Json::parse(R"({
    "lr":    {"type": "float", "low": 1e-4, "high": 1.0, "log": true},
    "wd":    {"type": "float", "low": 0.0, "high": 0.5},
    "units": {"type": "int", "low": 1, "high": 8},
    "batch": {"type": "ordinal", "values": [16, 32, 64, 128]},
    "opt":   {"type": "categorical", "choices": ["adam", "sgd", "rmsprop"]}
  })"));
}

TEST(PbtDecisions, ExploreMultipliesByAFactorRoundsClampsAndMovesToNeighbours) {
  const SearchSpace space = explore_space();
  PbtOptions o;
  o.resample_probability = 0.0;
  o.perturbation_factors = {1.2};
  const Params donor = {{"lr", 0.01}, {"wd", 0.45}, {"units", 1}, {"batch", 128}, {"opt", "sgd"}};
  std::mt19937_64 rng(11);
  Params up = pbt::explore(space, donor, o, rng);
  EXPECT_DOUBLE_EQ(up.at("lr").get<double>(), 0.012);
  EXPECT_EQ(up.at("wd").get<double>(), 0.5);          // 0.54 clamped to high
  EXPECT_EQ(up.at("units").get<std::int64_t>(), 2);   // 1.2 rounds to 1: one step up
  EXPECT_EQ(up.at("batch").get<std::int64_t>(), 64);  // at the end: inward
  EXPECT_NE(up.at("opt"), "sgd");                     // another category
  o.perturbation_factors = {0.8};
  Params down = pbt::explore(space, donor, o, rng);
  EXPECT_DOUBLE_EQ(down.at("lr").get<double>(), 0.008);
  EXPECT_DOUBLE_EQ(down.at("wd").get<double>(), 0.36);
  EXPECT_EQ(down.at("units").get<std::int64_t>(), 1);  // 0.8 rounds to 1; a step down is low
  EXPECT_EQ(down.at("batch").get<std::int64_t>(), 64);
  // Every value stays in its distribution, whatever the draws.
  o.perturbation_factors = {0.5, 0.8, 1.2, 3.0};
  o.resample_probability = 0.3;
  Params p = donor;
  for (int i = 0; i < 500; ++i) {
    p = pbt::explore(space, p, o, rng);
    for (const ParamSpec& spec : space.params())
      ASSERT_TRUE(spec.distribution.contains(p.at(spec.name)))
          << spec.name << " " << p.at(spec.name);
  }
}

TEST(PbtDecisions, ResampleProbabilityOneDrawsFromTheDistribution) {
  const SearchSpace space = explore_space();
  PbtOptions o;
  o.resample_probability = 1.0;
  const Params donor = {{"lr", 0.01}, {"wd", 0.0}, {"units", 4}, {"batch", 32}, {"opt", "adam"}};
  std::mt19937_64 rng(5);
  std::set<double> wd;
  for (int i = 0; i < 50; ++i) wd.insert(pbt::explore(space, donor, o, rng).at("wd").get<double>());
  // A linear value of 0 times a factor stays 0; resampling moves it.
  EXPECT_GT(wd.size(), 40u);
  o.resample_probability = 0.0;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(pbt::explore(space, donor, o, rng).at("wd"), 0.0);
}

TEST(PbtDecisions, TheSameSeedGivesTheSameDecisions) {
  const SearchSpace space = explore_space();
  PbtOptions o;
  o.population = 4;
  const Params donor = {{"lr", 0.01}, {"wd", 0.2}, {"units", 4}, {"batch", 32}, {"opt", "adam"}};
  std::vector<pbt::MemberReport> r = {{0, 4, 1.0}, {1, 4, 2.0}, {2, 4, 3.0}, {3, 4, 4.0}};
  auto run = [&](std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<Json> out;
    for (int i = 0; i < 20; ++i) {
      out.emplace_back(*pbt::choose_donor(r, 0, StudyDirection::kMaximize, o, rng));
      Json params = Json::object();
      for (const auto& [k, v] : pbt::explore(space, donor, o, rng)) params[k] = v;
      out.push_back(params);
    }
    return out;
  };
  EXPECT_EQ(run(9), run(9));
  EXPECT_NE(run(9), run(10));
}

// ------------------------------------------------------------ the toy problem

std::string cli_path() {
  const char* other = std::getenv("HPSEARCH_TEST_CLI");
  return other && *other ? other : HPSEARCH_CLI_PATH;
}

// The toy problem of the PBT paper (section 4.1): params h = (h0, h1), state
// theta, each step theta += 0.01 * grad Qhat with Qhat = 1.2 - (h0 theta0^2 +
// h1 theta1^2); the value is Q = 1.2 - (theta0^2 + theta1^2). Theta is saved
// in HPSEARCH_CHECKPOINT_DIR before each report and read back from there on a
// resume. Logs "<trial> <step> <theta0> <theta1>" to steps.log per step
// trained and "<trial> <resume step> <theta0> <theta1>" to starts.log. The first trials of a
// population of `members` wait until all have started.
constexpr const char* kToyPy = R"(import json, os, sys, time
ck = os.environ["HPSEARCH_CHECKPOINT_DIR"]
p = json.loads(os.environ["HPSEARCH_PARAMS"])
h = [p["h0"], p["h1"]]
steps, delay, members = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
trial = os.environ["HPSEARCH_TRIAL_NUMBER"]
resume = os.environ.get("HPSEARCH_RESUME_STEP")
if resume is None and members > 1:
    # The first trials wait for each other, so that the members train side
    # by side from step 1 (a worker started late would find the other member
    # done) and exploits happen whatever the machine's load.
    os.makedirs("started", exist_ok=True)
    open(os.path.join("started", trial), "w").close()
    t0 = time.time()
    while len(os.listdir("started")) < members and time.time() - t0 < 60:
        time.sleep(0.01)
theta, start = [0.9, 0.9], 1
if resume is not None:
    with open(os.path.join(ck, "theta.json")) as f:
        st = json.load(f)
    assert st["step"] == int(resume), (st, resume)
    theta, start = st["theta"], st["step"] + 1
with open("starts.log", "a") as f:
    f.write("%s %s %r %r\n" % (trial, resume, theta[0], theta[1]))
q = 1.2 - (theta[0] ** 2 + theta[1] ** 2)
for step in range(start, steps + 1):
    time.sleep(delay)
    theta = [theta[i] + 0.01 * (-2.0 * h[i] * theta[i]) for i in range(2)]
    q = 1.2 - (theta[0] ** 2 + theta[1] ** 2)
    tmp = os.path.join(ck, "theta.tmp")
    with open(tmp, "w") as f:
        json.dump({"step": step, "theta": theta}, f)
    os.replace(tmp, os.path.join(ck, "theta.json"))
    with open("steps.log", "a") as f:
        f.write("%s %d %r %r\n" % (trial, step, theta[0], theta[1]))
    print("hpsearch: " + json.dumps({"step": step, "value": q}), flush=True)
print("hpsearch: " + json.dumps({"value": q}), flush=True)
)";

constexpr int kToySteps = 400;

// The first members: (1, 0) and (0, 1) as in the paper, unless `initial`.
std::string toy_space(bool pbt, const std::string& name, double delay, int steps = kToySteps,
                      const Json& initial = Json()) {
  Json doc = {{"study", {{"name", name}, {"direction", "maximize"}, {"storage", name + ".db"}}},
              {"sampler", {{"type", "random"}, {"seed", 1}}},
              {"objective",
               {{"type", "command"},
                {"argv",
                 {"/usr/bin/python3", "toy.py", std::to_string(steps), std::to_string(delay),
                  pbt ? "2" : "1"}},
                {"grace_s", 2}}},
              {"space",
               {{"h0", {{"type", "float"}, {"low", 0}, {"high", 1}}},
                {"h1", {{"type", "float"}, {"low", 0}, {"high", 1}}}}}};
  if (pbt) {
    doc["scheduler"] = {
        {"type", "pbt"},
        {"population", 2},
        {"perturbation_interval", 4},
        {"max_steps", steps},
        {"seed", 3},
        {"initial_params",
         initial.is_null() ? Json::array({{{"h0", 1.0}, {"h1", 0.0}}, {{"h0", 0.0}, {"h1", 1.0}}})
                           : initial}};
  } else {
    // The same two members, never exploited: the warm start of an enqueue
    // is not in space.json, so each member is a study of one trial.
    doc["budget"] = {{"n_trials", 1}};
  }
  return doc.dump();
}

class PbtToyTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_.write("toy.py", kToyPy); }
  ProcessResult cli(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {cli_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  }
  Json trials(const std::string& db) const {
    ProcessResult r = cli({"trials", db, "--format", "json"});
    if (r.exit_code != 0) return Json();
    Json j = Json::parse(r.out, nullptr, false);
    return j.is_array() ? j : Json();
  }
  // Lines of a log, split on spaces.
  std::vector<std::vector<std::string>> lines(const std::string& name) const {
    std::vector<std::vector<std::string>> out;
    std::istringstream in(read_file(dir_.file(name)));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::vector<std::string> w;
      std::string s;
      while (words >> s) w.push_back(s);
      if (!w.empty()) out.push_back(w);
    }
    return out;
  }
  TempDir dir_{"pbt_toy"};
};

// The best value of a study's COMPLETE trials.
double best_value(const Json& trials) {
  double best = -INFINITY;
  for (const Json& t : trials)
    if (t["state"] == "COMPLETE") best = std::max(best, t["value"].get<double>());
  return best;
}

TEST_F(PbtToyTest, PbtReachesTheOptimumWhereTheSameMembersWithoutExploitDoNot) {
  dir_.write("pbt.json", toy_space(true, "pbt", 0.01));
  ProcessResult r = cli({"run", "pbt.json", "--workers", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  Json t = trials("pbt.db");
  ASSERT_TRUE(t.is_array());
  EXPECT_GE(best_value(t), 1.19) << t.dump(1);
  // Two members; each trial names its member, generation, parent and donor.
  std::set<std::int64_t> members;
  int exploited = 0;
  for (const Json& x : t) {
    const Json& a = x["system_attrs"]["pbt"];
    ASSERT_TRUE(a.is_object()) << x.dump(1);
    members.insert(a["member"].get<std::int64_t>());
    if (a.contains("exploited")) {
      ++exploited;
      EXPECT_EQ(x["state"], "PRUNED");
      const std::int64_t next = a["exploited"]["successor"].get<std::int64_t>();
      const Json& s = t.at(static_cast<std::size_t>(next))["system_attrs"]["pbt"];
      EXPECT_EQ(s["parent"], x["number"]);
      EXPECT_EQ(s["member"], a["member"]);
      EXPECT_EQ(s["generation"].get<std::int64_t>(), a["generation"].get<std::int64_t>() + 1);
      // It starts from the donor's newest snapshot (asynchronous: any step).
      EXPECT_GE(s["start_step"].get<std::int64_t>(), 1);
    }
  }
  EXPECT_EQ(members, (std::set<std::int64_t>{0, 1}));
  EXPECT_GT(exploited, 0);
  // The initial members are the enqueued params.
  EXPECT_EQ(t[0]["params"]["h0"], 1.0);
  EXPECT_EQ(t[1]["params"]["h1"], 1.0);

  // `best` gives the best trial's schedule: the trials whose params trained
  // its state, each from the step it started at, following the donors.
  ProcessResult b = cli({"best", "pbt.db", "--format", "json"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const Json best = Json::parse(b.out);
  const Json& schedule = best["schedule"];
  ASSERT_TRUE(schedule.is_array()) << best.dump(1);
  ASSERT_GE(schedule.size(), 2u) << "the best trial's state went through an exploit";
  EXPECT_EQ(schedule.front()["start_step"], 0);
  EXPECT_LE(schedule.front()["trial"].get<std::int64_t>(), 1);  // a first member
  EXPECT_EQ(schedule.back()["trial"], best["number"]);
  for (std::size_t i = 1; i < schedule.size(); ++i) {
    const Json& step = schedule[i];
    const Json& trial = t.at(step["trial"].get<std::size_t>());
    EXPECT_EQ(trial["system_attrs"]["pbt"]["donor"], schedule[i - 1]["trial"]);
    EXPECT_EQ(step["start_step"], trial["system_attrs"]["pbt"]["start_step"]);
    EXPECT_GT(step["start_step"].get<std::int64_t>(),
              schedule[i - 1]["start_step"].get<std::int64_t>());
    EXPECT_EQ(step["params"], trial["params"]);
  }
  ProcessResult text = cli({"best", "pbt.db"});
  EXPECT_NE(text.out.find("schedule from step 0"), std::string::npos) << text.out;

  // The same two members without exploit stay below 0.4.
  for (int m = 0; m < 2; ++m) {
    const std::string name = "plain" + std::to_string(m);
    Json doc = Json::parse(toy_space(false, name, 0.0));
    doc["space"]["h0"] = {{"type", "categorical"}, {"choices", {m == 0 ? 1.0 : 0.0}}};
    doc["space"]["h1"] = {{"type", "categorical"}, {"choices", {m == 0 ? 0.0 : 1.0}}};
    dir_.write(name + ".json", doc.dump());
    ProcessResult p = cli({"run", name + ".json", "--workers", "1"});
    ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
    const double v = best_value(trials(name + ".db"));
    EXPECT_LT(v, 0.4);
    EXPECT_GT(v, 0.38);  // it trained: theta of the other coordinate went to 0
  }
}

TEST_F(PbtToyTest, ValidateRefusesBadSettingsNamingTheField) {
  Json doc = Json::parse(toy_space(true, "pbt", 0.01));
  doc["scheduler"]["quantile"] = 0.75;
  dir_.write("bad.json", doc.dump());
  ProcessResult r = cli({"validate", "bad.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("scheduler.quantile: must be in (0, 0.5]"), std::string::npos) << r.err;
  doc = Json::parse(toy_space(true, "pbt", 0.01));
  doc["artifacts"] = {{"checkpoints", false}};
  dir_.write("bad.json", doc.dump());
  r = cli({"run", "bad.json", "--workers", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("PBT needs checkpoints"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("pbt.db"))) << "refused before the store";
}

TEST_F(PbtToyTest, AnExploitStartsFromACopyOfTheDonorsCheckpoint) {
  // Member 1 trains slower than member 0 (the paper's members tie at every
  // step: which one is exploited first would depend on timing).
  dir_.write("pbt.json",
             toy_space(true, "pbt", 0.01, 60,
                       Json::array({{{"h0", 1.0}, {"h1", 0.0}}, {{"h0", 0.0}, {"h1", 0.5}}})));
  ProcessResult r = cli({"run", "pbt.json", "--workers", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  Json t = trials("pbt.db");
  ASSERT_TRUE(t.is_array());
  // theta of each (trial, step) trained.
  std::map<std::pair<std::string, std::int64_t>, std::pair<std::string, std::string>> theta;
  for (const auto& l : lines("steps.log"))
    theta[{l.at(0), std::stoll(l.at(1))}] = {l.at(2), l.at(3)};
  std::map<std::string, std::vector<std::string>> starts;
  for (const auto& l : lines("starts.log")) starts[l.at(0)] = l;
  int successors = 0;
  for (const Json& x : t) {
    const Json& a = x["system_attrs"]["pbt"];
    if (a["donor"].is_null()) continue;
    ++successors;
    const std::string number = std::to_string(x["number"].get<std::int64_t>());
    const std::string donor = std::to_string(a["donor"].get<std::int64_t>());
    const std::int64_t s = a["start_step"].get<std::int64_t>();
    // Its program resumed at the donor's step with the donor's theta.
    ASSERT_TRUE(starts.count(number)) << number;
    EXPECT_EQ(starts[number].at(1), std::to_string(s));
    const auto& d = theta.at({donor, s});
    EXPECT_EQ(starts[number].at(2), d.first);
    EXPECT_EQ(starts[number].at(3), d.second);
    // Its first step trained is the next one, and its curve has the donor's
    // values up to s.
    EXPECT_TRUE(theta.count({number, s + 1}) || x["state"] != "COMPLETE") << x.dump(1);
    EXPECT_FALSE(theta.count({number, s}));
    EXPECT_EQ(x["system_attrs"]["resumed_from"]["restored"], true) << x.dump(1);
    const Json& iv = x["intermediate_values"];
    const Json& div = t.at(a["donor"].get<std::size_t>())["intermediate_values"];
    EXPECT_EQ(iv[std::to_string(s)], div[std::to_string(s)]);
  }
  EXPECT_GT(successors, 0);
}

TEST_F(PbtToyTest, ACoordinatorKilledMidPopulationResumesAndFinishesTheBudget) {
  constexpr int kSteps = 120;
  dir_.write("pbt.json", toy_space(true, "pbt", 0.03, kSteps));
  {
    auto run = std::make_unique<testsupport::BackgroundProcess>(
        std::vector<std::string>{cli_path(), "run", "pbt.json", "--workers", "2"},
        dir_.path().string(), dir_.file("run1.out"), dir_.file("run1.err"));
    ASSERT_TRUE(wait_until([&] { return lines("steps.log").size() >= 100; })) << "no progress";
    run->send_signal(SIGKILL);
    run->wait();
  }
  // Its workers and programs end with it; wait until nothing trains.
  ASSERT_TRUE(wait_until([&] {
    auto n = lines("steps.log").size();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return lines("steps.log").size() == n;
  }));
  ProcessResult again = cli({"resume", "pbt.db"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  Json t = trials("pbt.db");
  ASSERT_TRUE(t.is_array());
  // Each member's chain ends COMPLETE at max_steps.
  std::map<std::int64_t, int> complete;
  for (const Json& x : t) {
    if (x["state"] != "COMPLETE") continue;
    ++complete[x["system_attrs"]["pbt"]["member"].get<std::int64_t>()];
    EXPECT_EQ(x["intermediate_values"].size(), static_cast<std::size_t>(kSteps)) << x.dump(1);
  }
  EXPECT_EQ(complete, (std::map<std::int64_t, int>{{0, 1}, {1, 1}})) << t.dump(1);
  // Nothing trained twice but around the kill: a retry of a trial left
  // RUNNING by the killed coordinator trains again at most one interval of
  // the steps that trial trained (those after its last recorded snapshot).
  std::map<std::string, std::set<std::int64_t>> trained;
  for (const auto& l : lines("steps.log")) trained[l.at(0)].insert(std::stoll(l.at(1)));
  int retries = 0;
  for (const Json& x : t) {
    auto of = x["system_attrs"].find("retry_of");
    // (A retry of a trial the scheduler had ended already never ran: it
    // has no pbt attr.)
    if (of == x["system_attrs"].end() || !x["system_attrs"].contains("pbt")) continue;
    ++retries;
    const auto& mine = trained[std::to_string(x["number"].get<std::int64_t>())];
    const auto& theirs = trained[std::to_string(of->get<std::int64_t>())];
    std::int64_t twice = 0;
    for (std::int64_t step : mine) twice += theirs.count(step) ? 1 : 0;
    EXPECT_LE(twice, 4) << "trial " << x["number"] << " retries trial " << *of;
    EXPECT_EQ(x["system_attrs"]["pbt"]["member"],
              t.at(of->get<std::size_t>())["system_attrs"]["pbt"]["member"]);
  }
  EXPECT_GE(retries, 1) << t.dump(1);
}

}  // namespace
}  // namespace hps
