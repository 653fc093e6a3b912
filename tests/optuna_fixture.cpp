// Writes the hpsearch study that optuna_interop_test.py exports to Optuna:
// every param kind (float, float log, float step, int, int log, int step,
// categorical with mixed types, ordinal), a conditional param, COMPLETE /
// PRUNED / FAIL / RUNNING / WAITING trials, intermediate values, a unicode
// study name and param names, extreme floats (-0.0, denormals, +-inf, the
// largest and smallest normal doubles) and typed user attrs (1, 1.0, "1",
// inf, NaN).
//
// Usage: optuna_fixture STORAGE.db   (prints the study's name)
#include <cmath>
#include <iostream>
#include <limits>
#include <random>

#include "search/sqlite_storage.h"

using hps::Json;
using hps::NewTrial;
using hps::TrialState;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* kSpace = R"({
  "lr":        {"type": "float", "low": 1e-5, "high": 1.0, "log": true},
  "dropout":   {"type": "float", "low": 0.0, "high": 0.5, "step": 0.05},
  "x":         {"type": "float", "low": -1.0, "high": 1.0},
  "units":     {"type": "int", "low": 1, "high": 1024, "log": true},
  "layers":    {"type": "int", "low": 0, "high": 10, "step": 2},
  "optimizer": {"type": "categorical", "choices": ["adam", 1, 2.5, true, null, "1"]},
  "batch":     {"type": "ordinal", "values": [16, 32, 64, 128]},
  "momentum":  {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "adam"}},
  "学習率":    {"type": "float", "low": 0.0, "high": 1.0}
})";

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: optuna_fixture STORAGE.db\n";
    return 2;
  }
  const std::string name = "étude ✓ 研究";
  Json config = {{"study", {{"name", name}, {"direction", "minimize"}}},
                 {"space", Json::parse(kSpace)}};
  hps::SearchSpace space = hps::SearchSpace::from_json(config["space"]);
  hps::SqliteStorage storage(argv[1]);
  auto study = storage.create_study(name, hps::StudyDirection::kMinimize, config);
  storage.set_study_user_attr(study, "owner", "ünïcode");
  storage.set_study_user_attr(study, "inf", kInf);
  storage.set_study_system_attr(study, "sampler_seed", 7);

  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto sample = [&](int forced_choice) {
    NewTrial init;
    for (const auto& p : space.params()) {
      if (!hps::SearchSpace::is_active(p, init.params)) continue;
      const auto& d = p.distribution;
      double internal;
      if (d.is_indexed()) {
        internal = std::floor(u(rng) * static_cast<double>(d.choices().size()));
        if (p.name == "optimizer" && forced_choice >= 0) internal = forced_choice;
      } else if (d.is_log()) {
        internal = std::exp(std::log(d.low()) + u(rng) * (std::log(d.high()) - std::log(d.low())));
      } else {
        internal = d.low() + u(rng) * (d.high() - d.low());
      }
      init.params[p.name] = d.to_external(internal);
      init.distributions.emplace(p.name, d);
    }
    return init;
  };
  // Trials with given values: each a RUNNING trial finished through the API.
  auto add = [&](TrialState state, std::optional<double> value, std::optional<double> x,
                 const std::map<std::int64_t, double>& steps, const Json& attrs,
                 int forced_choice = -1) {
    NewTrial init = sample(forced_choice);
    if (x) init.params["x"] = *x;
    init.worker = "host:4242";
    auto t = storage.create_trial(study, init);
    for (const auto& [s, v] : steps) storage.set_trial_intermediate_value(t->trial_id, s, v);
    for (const auto& [k, v] : attrs.items()) storage.set_trial_user_attr(t->trial_id, k, v);
    if (state != TrialState::kRunning)
      storage.set_trial_state(t->trial_id, state, value,
                              state == TrialState::kFail ? "objective crashed ✗" : "");
  };
  Json typed = {{"int", 1},
                {"float", 1.0},
                {"string", "1"},
                {"inf", kInf},
                {"ninf", -kInf},
                {"nan", kNaN},
                {"nested", {{"a", Json::array({1, 2.5, kNaN, "x"})}}}};
  add(TrialState::kComplete, -0.0, -0.0, {{0, kInf}, {1, 0.5}, {2, -0.0}}, typed, 0);
  add(TrialState::kComplete, 4.9406564584124654e-324, 4.9406564584124654e-324, {{0, 1e-310}},
      {{"note", "denormal"}}, 1);
  add(TrialState::kComplete, -kInf, -4.9406564584124654e-324, {{0, -kInf}}, Json::object(), 0);
  add(TrialState::kComplete, kInf, std::nullopt, {}, Json::object(), 2);
  add(TrialState::kComplete, std::numeric_limits<double>::max(), std::nullopt, {}, Json::object());
  add(TrialState::kComplete, 2.2250738585072014e-308, std::nullopt, {}, Json::object());
  add(TrialState::kPruned, std::nullopt, std::nullopt, {{0, 3.0}, {1, kNaN}, {5, -kInf}},
      {{"pruned_at", 5}}, 0);
  add(TrialState::kFail, std::nullopt, std::nullopt, {{0, 2.0}}, Json::object());
  for (int i = 0; i < 24; ++i) {  // enough COMPLETE trials for importances
    NewTrial init = sample(-1);
    auto t = storage.create_trial(study, init);
    double v = 0;
    for (const auto& [k, p] : init.params)
      if (p.is_number()) v += std::fabs(p.get<double>()) * (k == "x" ? 10.0 : 1e-4);
    for (int s = 0; s < 3; ++s) storage.set_trial_intermediate_value(t->trial_id, s, v * (3 - s));
    storage.set_trial_state(t->trial_id, TrialState::kComplete, v);
  }
  add(TrialState::kRunning, std::nullopt, std::nullopt, {{0, 9.5}}, {{"epoch", 1}});
  NewTrial waiting;
  waiting.state = TrialState::kWaiting;
  waiting.params["x"] = 0.25;
  waiting.distributions.emplace("x", space.find("x")->distribution);
  storage.create_trial(study, waiting);
  std::cout << name << "\n";
  return 0;
}
