#include "algorithms/patient_pruner.h"

#include <cmath>

#include "algorithms/pruner_util.h"
#include "search/errors.h"
#include "search/json_util.h"

namespace hps {

void PatientPrunerOptions::validate(const std::string& path) const {
  require_at_least(join_path(path, "patience"), patience, 0);
  if (!(min_delta >= 0.0) || std::isinf(min_delta))
    throw ConfigError(join_path(path, "min_delta"),
                      "must be finite and >= 0" + got_number(min_delta));
}

PatientPruner::PatientPruner(std::shared_ptr<Pruner> wrapped, PatientPrunerOptions options)
    : wrapped_(std::move(wrapped)), options_(options) {
  options_.validate();
}

bool PatientPruner::prune(const PruningContext& ctx) {
  const auto value = pruning::value_at(ctx.trial, ctx.step);
  if (!value) return false;
  if (std::isnan(*value)) return true;

  std::optional<double> best;
  std::int64_t stall = 0;
  const bool maximize = ctx.direction == StudyDirection::kMaximize;
  for (const auto& [step, v] : ctx.trial.intermediate_values) {
    if (step > ctx.step) break;
    if (std::isnan(v)) continue;
    if (!best) {
      best = v;
      continue;
    }
    // Improvement by more than min_delta. Written as a difference so that
    // infinities compare sensibly (inf - inf is NaN: no improvement).
    const double gain = maximize ? v - *best : *best - v;
    if (gain > options_.min_delta) {
      best = v;
      stall = 0;
    } else {
      ++stall;
    }
  }
  if (stall <= options_.patience) return false;
  return wrapped_ ? wrapped_->prune(ctx) : true;
}

std::vector<TrialPtr> PatientPruner::trials_for_sampler(const FrozenTrial& trial,
                                                        const std::vector<TrialPtr>& trials) {
  return wrapped_ ? wrapped_->trials_for_sampler(trial, trials) : trials;
}

Json PatientPruner::settings() const {
  return {{"type", name()},
          {"patience", options_.patience},
          {"min_delta", options_.min_delta},
          {"wrapped_pruner", wrapped() ? wrapped()->settings() : Json()}};
}

}  // namespace hps
