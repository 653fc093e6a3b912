#include "algorithms/successive_halving_pruner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "algorithms/pruner_util.h"
#include "search/errors.h"
#include "search/json_util.h"
#include "search/storage.h"

namespace hps {

namespace {

constexpr std::int64_t kMaxStep = std::numeric_limits<std::int64_t>::max();

// JSON has no infinities: they are kept as the strings "inf" and "-inf".
Json rung_value_to_json(double v) {
  if (std::isinf(v)) return v > 0 ? Json("inf") : Json("-inf");
  return Json(v);
}

std::optional<double> rung_value_from_json(const Json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

std::string rung_key(std::int64_t rung) { return kAttrCompletedRungPrefix + std::to_string(rung); }

bool has_attr(const FrozenTrial& t, const std::string& key) {
  return t.system_attrs.is_object() && t.system_attrs.contains(key);
}

// True if `value` is among the top max(1, floor(n / eta)) of `competing`
// (which holds `value` itself).
bool promotable(double value, std::vector<double> competing, std::int64_t eta,
                StudyDirection direction) {
  const auto n = static_cast<std::int64_t>(competing.size());
  const std::int64_t m = std::max<std::int64_t>(1, n / eta);
  // Best first.
  std::sort(competing.begin(), competing.end(),
            [&](double a, double b) { return pruning::is_better(direction, a, b); });
  const double bar = competing[static_cast<std::size_t>(m - 1)];
  return !pruning::is_better(direction, bar, value);
}

}  // namespace

void SuccessiveHalvingPrunerOptions::validate(const std::string& path) const {
  if (min_resource && *min_resource < 1)
    throw ConfigError(join_path(path, "min_resource"),
                      "must be >= 1 or \"auto\", got " + std::to_string(*min_resource));
  require_at_least(join_path(path, "reduction_factor"), reduction_factor, 2);
  require_at_least(join_path(path, "min_early_stopping_rate"), min_early_stopping_rate, 0);
}

SuccessiveHalvingPruner::SuccessiveHalvingPruner(SuccessiveHalvingPrunerOptions options)
    : options_(options) {
  options_.validate();
}

std::optional<std::int64_t> SuccessiveHalvingPruner::resolve_min_resource(
    const std::vector<TrialPtr>& trials) const {
  if (options_.min_resource) return options_.min_resource;
  const FrozenTrial* first = nullptr;
  for (const auto& t : trials) {
    if (!t || t->state != TrialState::kComplete || t->intermediate_values.empty()) continue;
    if (!first) {
      first = t.get();
      continue;
    }
    // Earliest completion; a trial without a completion time sorts last.
    const auto& a = t->datetime_complete;
    const auto& b = first->datetime_complete;
    bool earlier = a && (!b || *a < *b || (*a == *b && t->number < first->number));
    if (earlier) first = t.get();
  }
  if (!first) return std::nullopt;
  const std::int64_t last_step = first->intermediate_values.rbegin()->first;
  return std::max<std::int64_t>(1, last_step / 100);
}

bool SuccessiveHalvingPruner::prune(const PruningContext& ctx) {
  const auto value = pruning::value_at(ctx.trial, ctx.step);
  if (!value) return false;
  if (std::isnan(*value) || has_attr(ctx.trial, kAttrPrunedAtRung)) return true;
  const auto min_resource = resolve_min_resource(ctx.trials);
  if (!min_resource) return false;
  return judge(ctx, ctx.trials, *min_resource, options_.reduction_factor,
               options_.min_early_stopping_rate);
}

bool SuccessiveHalvingPruner::judge(const PruningContext& ctx,
                                    const std::vector<TrialPtr>& competitors,
                                    std::int64_t min_resource, std::int64_t reduction_factor,
                                    std::int64_t min_early_stopping_rate,
                                    std::optional<std::int64_t> max_resource) {
  const FrozenTrial& trial = ctx.trial;
  const auto value = pruning::value_at(trial, ctx.step);
  if (!value) return false;
  if (std::isnan(*value) || has_attr(trial, kAttrPrunedAtRung)) return true;

  for (std::int64_t rung = 0;; ++rung) {
    const std::int64_t exponent =
        min_early_stopping_rate > kMaxStep - rung ? kMaxStep : min_early_stopping_rate + rung;
    const std::int64_t rung_step =
        pruning::saturating_power(min_resource, reduction_factor, exponent);
    if (rung_step == kMaxStep || ctx.step < rung_step) return false;
    if (max_resource && rung_step >= *max_resource) return false;
    const std::string key = rung_key(rung);
    if (has_attr(trial, key)) continue;  // promoted there earlier

    if (!ctx.storage)
      throw Error(
          "successive halving pruner: the PruningContext has no storage; rung "
          "bookkeeping needs one");
    // The trial's value at this rung: at its first report at or after rung_step.
    auto it = trial.intermediate_values.lower_bound(rung_step);
    const double rung_value = it->second;  // exists: ctx.step >= rung_step was reported
    if (std::isnan(rung_value)) {
      ctx.storage->set_trial_system_attr(trial.trial_id, kAttrPrunedAtRung, rung);
      return true;
    }

    std::vector<double> competing{rung_value};
    for (const auto& t : competitors) {
      if (!t || t->trial_id == trial.trial_id || t->was_retried()) continue;
      if (!t->system_attrs.is_object()) continue;
      auto a = t->system_attrs.find(key);
      if (a == t->system_attrs.end()) continue;
      if (auto v = rung_value_from_json(*a); v && !std::isnan(*v)) competing.push_back(*v);
    }
    const bool promoted =
        promotable(rung_value, std::move(competing), reduction_factor, ctx.direction);
    ctx.storage->run_in_transaction([&] {
      ctx.storage->set_trial_system_attr(trial.trial_id, key, rung_value_to_json(rung_value));
      if (!promoted) ctx.storage->set_trial_system_attr(trial.trial_id, kAttrPrunedAtRung, rung);
    });
    if (!promoted) return true;
  }
}

Json SuccessiveHalvingPruner::settings() const {
  return {{"type", name()},
          {"min_resource", options_.min_resource ? Json(*options_.min_resource) : Json("auto")},
          {"reduction_factor", options_.reduction_factor},
          {"min_early_stopping_rate", options_.min_early_stopping_rate}};
}

}  // namespace hps
