// ThresholdPruner: stop a trial whose intermediate value leaves a fixed
// range [lower, upper] (as Optuna's ThresholdPruner documents). Useful as a
// guard against diverging runs (loss above 10, accuracy below chance).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "search/pruner.h"

namespace hps {

struct ThresholdPrunerOptions {
  // Prune when the value is below this. Default none. Same units as the
  // intermediate values.
  std::optional<double> lower;
  // Prune when the value is above this. Default none. At least one of
  // lower and upper must be set; lower <= upper.
  std::optional<double> upper;
  // No pruning (except NaN) while the reported step is below this. Default 0.
  std::int64_t n_warmup_steps = 0;
  // Check only the first report in each interval of this many steps after
  // the warm-up (>= 1). Default 1.
  std::int64_t interval_steps = 1;

  // Throws ConfigError("<path>.<field>", rule) for the first bad field.
  void validate(const std::string& path = "pruner") const;
};

// Decision for a report of value v at step s: NaN prunes; before the
// warm-up or off the interval, continue; else prune if v < lower or
// v > upper. The bounds are absolute, so the study's direction plays no
// part: for a maximized accuracy set `lower`, for a minimized loss `upper`.
// Keeps no state.
class ThresholdPruner : public Pruner {
 public:
  // Throws ConfigError (path "pruner") for invalid options.
  explicit ThresholdPruner(ThresholdPrunerOptions options);
  bool prune(const PruningContext& ctx) override;
  std::string name() const override { return "threshold"; }
  Json settings() const override;
  const ThresholdPrunerOptions& options() const { return options_; }

 private:
  ThresholdPrunerOptions options_;
};

}  // namespace hps
