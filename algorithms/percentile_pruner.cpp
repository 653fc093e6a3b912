#include "algorithms/percentile_pruner.h"

#include <cmath>
#include <vector>

#include "algorithms/pruner_util.h"
#include "search/errors.h"
#include "search/json_util.h"

namespace hps {

void PercentilePrunerOptions::validate(const std::string& path) const {
  if (!(percentile >= 0.0 && percentile <= 100.0))
    throw ConfigError(join_path(path, "percentile"),
                      "must be in [0, 100]" + got_number(percentile));
  require_at_least(join_path(path, "n_startup_trials"), n_startup_trials, 0);
  require_at_least(join_path(path, "n_warmup_steps"), n_warmup_steps, 0);
  require_at_least(join_path(path, "interval_steps"), interval_steps, 1);
  require_at_least(join_path(path, "n_min_trials"), n_min_trials, 1);
}

PercentilePruner::PercentilePruner(PercentilePrunerOptions options) : options_(options) {
  options_.validate();
}

bool PercentilePruner::prune(const PruningContext& ctx) {
  const auto value = pruning::value_at(ctx.trial, ctx.step);
  if (!value) return false;
  if (std::isnan(*value)) return true;
  if (!pruning::passes_warmup_and_interval(ctx.trial, ctx.step, options_.n_warmup_steps,
                                           options_.interval_steps))
    return false;

  std::int64_t n_complete = 0;
  std::vector<double> reference;
  for (const auto& t : ctx.trials) {
    if (!t || t->state != TrialState::kComplete || t->trial_id == ctx.trial.trial_id) continue;
    ++n_complete;
    if (auto v = pruning::value_at(*t, ctx.step); v && !std::isnan(*v)) reference.push_back(*v);
  }
  if (n_complete < options_.n_startup_trials) return false;
  if (static_cast<std::int64_t>(reference.size()) < options_.n_min_trials) return false;
  if (reference.empty()) return false;

  const double q = ctx.direction == StudyDirection::kMaximize ? 100.0 - options_.percentile
                                                              : options_.percentile;
  const double bar = pruning::percentile(reference, q);
  const auto best = pruning::best_value_up_to(ctx.trial, ctx.direction, ctx.step);
  if (!best) return false;
  return pruning::is_better(ctx.direction, bar, *best);
}

MedianPruner::MedianPruner(MedianPrunerOptions options)
    : PercentilePruner(PercentilePrunerOptions{50.0, options.n_startup_trials,
                                               options.n_warmup_steps, options.interval_steps,
                                               options.n_min_trials}) {}

Json PercentilePruner::settings() const {
  return {{"type", name()},
          {"percentile", options_.percentile},
          {"n_startup_trials", options_.n_startup_trials},
          {"n_warmup_steps", options_.n_warmup_steps},
          {"interval_steps", options_.interval_steps},
          {"n_min_trials", options_.n_min_trials}};
}

Json MedianPruner::settings() const {
  Json j = PercentilePruner::settings();
  j["type"] = name();
  j.erase("percentile");  // always 50
  return j;
}

}  // namespace hps
