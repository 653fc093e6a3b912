#include "objectives/sleep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "search/errors.h"
#include "search/printable.h"

namespace hps {

namespace {

struct SleepConfig {
  double seconds = 0.0;
  std::int64_t steps = 1;
  std::string fail_param;
};

// Sleeps `d` in slices of at most 250 ms and throws Interrupted once the
// run is interrupted (a signal to the worker, a lost lease), so that a
// trial that reports nothing while it sleeps still ends within 250 ms.
void sleep_unless_interrupted(const Trial& trial, std::chrono::duration<double> d) {
  using Steady = std::chrono::steady_clock;
  const auto until = Steady::now() + std::chrono::duration_cast<Steady::duration>(d);
  while (true) {
    if (trial.interrupted()) throw Interrupted();
    const auto left = until - Steady::now();
    if (left <= Steady::duration::zero()) return;
    std::this_thread::sleep_for(std::min<Steady::duration>(left, std::chrono::milliseconds(250)));
  }
}

SleepConfig parse(const Json& config) {
  check_keys(config, "objective", {"type", "seconds", "steps", "fail_param"});
  SleepConfig c;
  // Each rule shows the value as the file gives it.
  c.seconds = optional_number(config, "objective", "seconds").value_or(0.0);
  if (c.seconds < 0 || c.seconds > 86400)
    throw ConfigError("objective.seconds",
                      "must be in [0, 86400] (seconds), got " + config["seconds"].dump());
  c.steps = optional_int(config, "objective", "steps").value_or(1);
  if (c.steps < 1 || c.steps > 1000000)
    throw ConfigError("objective.steps", "must be in [1, 1000000], got " + config["steps"].dump());
  c.fail_param = optional_string(config, "objective", "fail_param").value_or("");
  return c;
}

}  // namespace

ObjectiveType sleep_objective_type() {
  ObjectiveType t;
  t.type = "sleep";
  t.description = "sleeps, reports a decreasing curve, returns the sum of numeric params";
  t.validate = [](const Json& config, const SearchSpace& space) {
    SleepConfig c = parse(config);
    if (c.fail_param.empty()) return;
    const ParamSpec* param = space.find(c.fail_param);
    if (!param)
      throw ConfigError("objective.fail_param",
                        "no param named '" + printable_excerpt(c.fail_param) + "' in space");
    // A trial fails when the param is true: a param that cannot be true (a
    // float, an int, categorical choices without true) would never fail.
    const Distribution& d = param->distribution;
    if (!d.is_indexed() || d.index_of(Json(true)) < 0)
      throw ConfigError("objective.fail_param",
                        "must name a bool param (a categorical with true among its choices: a "
                        "trial fails when it is true); '" +
                            printable_excerpt(c.fail_param) + "' is " + to_string(d.kind()) +
                            (d.is_indexed() ? " without true among its values" : "") +
                            ", so no trial would ever fail");
  };
  t.make = [](const Json& config, const SearchSpace&, const ObjectiveContext&) -> Objective {
    SleepConfig c = parse(config);
    return [c](Trial& trial) {
      if (!c.fail_param.empty() && trial.has_param(c.fail_param) &&
          trial.param(c.fail_param) == Json(true))
        throw Error("fail_param set");
      double value = 0.0;
      for (const auto& [k, v] : trial.params())
        if (v.is_number()) value += v.get<double>();
      auto per_step = std::chrono::duration<double>(c.seconds / static_cast<double>(c.steps));
      for (std::int64_t step = 1; step <= c.steps; ++step) {
        if (per_step.count() > 0) sleep_unless_interrupted(trial, per_step);
        double offset = static_cast<double>(c.steps - step) / static_cast<double>(c.steps);
        if (c.steps > 1) {
          trial.report(step, value + offset);
          if (trial.should_prune()) throw TrialPruned();
        }
      }
      return value;
    };
  };
  return t;
}

}  // namespace hps
