#include "algorithms/threshold_pruner.h"

#include <cmath>

#include "algorithms/pruner_util.h"
#include "search/errors.h"
#include "search/json_util.h"

namespace hps {

void ThresholdPrunerOptions::validate(const std::string& path) const {
  if (!lower && !upper) throw ConfigError(path, "needs 'lower', 'upper' or both");
  if (lower && std::isnan(*lower)) throw ConfigError(join_path(path, "lower"), "must not be NaN");
  if (upper && std::isnan(*upper)) throw ConfigError(join_path(path, "upper"), "must not be NaN");
  if (lower && upper && *lower > *upper)
    throw ConfigError(join_path(path, "lower"), "must be <= upper");
  require_at_least(join_path(path, "n_warmup_steps"), n_warmup_steps, 0);
  require_at_least(join_path(path, "interval_steps"), interval_steps, 1);
}

ThresholdPruner::ThresholdPruner(ThresholdPrunerOptions options) : options_(options) {
  options_.validate();
}

bool ThresholdPruner::prune(const PruningContext& ctx) {
  const auto value = pruning::value_at(ctx.trial, ctx.step);
  if (!value) return false;
  if (std::isnan(*value)) return true;
  if (!pruning::passes_warmup_and_interval(ctx.trial, ctx.step, options_.n_warmup_steps,
                                           options_.interval_steps))
    return false;
  if (options_.lower && *value < *options_.lower) return true;
  if (options_.upper && *value > *options_.upper) return true;
  return false;
}

Json ThresholdPruner::settings() const {
  return {{"type", name()},
          {"lower", options_.lower ? Json(*options_.lower) : Json()},
          {"upper", options_.upper ? Json(*options_.upper) : Json()},
          {"n_warmup_steps", options_.n_warmup_steps},
          {"interval_steps", options_.interval_steps}};
}

}  // namespace hps
