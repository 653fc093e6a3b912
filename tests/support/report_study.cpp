#include "tests/support/report_study.h"

#include <cmath>
#include <random>

namespace hps::testsupport {

Json report_study_config(const std::string& name) {
  return Json::parse(R"({
    "study": {"name": ")" +
                     name + R"(", "direction": "minimize"},
    "sampler": {"type": "random", "seed": 1},
    "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 2},
    "budget": {"n_trials": 100},
    "objective": {"type": "branin"},
    "space": {
      "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": true,
             "scale_with": {"param": "batch_size", "reference": 64, "rule": "sqrt"}},
      "batch_size": {"type": "ordinal", "values": [16, 32, 64, 128, 256]},
      "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
      "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
      "dropout": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.05}
    }})");
}

ReportStudyCounts make_report_study(Storage& storage, const std::string& name, int n,
                                    std::uint64_t seed) {
  Json config = report_study_config(name);
  SearchSpace space = SearchSpace::from_json(config["space"]);
  std::int64_t id = storage.create_study(name, StudyDirection::kMinimize, config);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  ReportStudyCounts c;
  storage.run_in_transaction([&] {
    for (int i = 0; i < n; ++i) {
      NewTrial init;
      init.worker = "host:" + std::to_string(100 + i % 3);
      TrialPtr t = storage.create_trial(id, init);
      Params p;
      for (const auto& spec : space.params()) {
        if (!SearchSpace::is_active(spec, p)) continue;
        const Distribution& d = spec.distribution;
        double x =
            d.is_indexed() ? u(rng) * static_cast<double>(d.choices().size()) - 0.5
            : d.is_log()
                ? std::exp(std::log(d.low()) + u(rng) * (std::log(d.high()) - std::log(d.low())))
                : d.low() + u(rng) * (d.high() - d.low());
        Json v = d.to_external(x);
        p[spec.name] = v;
        storage.set_trial_param(t->trial_id, spec.name, v, d);
      }
      double lr = p["lr"].get<double>();
      double value = std::pow(std::log10(lr) + 2.5, 2) + 0.1 * p["dropout"].get<double>();
      if (i == n - 1) {
        ++c.running;
        continue;
      }
      bool pruned = i % 5 == 4, failed = !pruned && i % 7 == 6;
      int steps = pruned ? 1 + i % 3 : 4;
      if (!failed) {
        for (int s = 1; s <= steps; ++s)
          storage.set_trial_intermediate_value(t->trial_id, s, value + 1.0 / s);
        ++c.with_curves;
      }
      if (pruned) {
        storage.set_trial_state(t->trial_id, TrialState::kPruned);
        ++c.pruned;
      } else if (failed) {
        storage.set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, "objective raised");
        ++c.fail;
      } else {
        storage.set_trial_user_attr(t->trial_id, "best_step", steps);
        storage.set_trial_state(t->trial_id, TrialState::kComplete, value);
        ++c.complete;
        if (p.count("momentum")) ++c.momentum_active;
      }
    }
  });
  return c;
}

}  // namespace hps::testsupport
