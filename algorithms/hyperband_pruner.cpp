#include "algorithms/hyperband_pruner.h"

#include <cmath>

#include "algorithms/pruner_util.h"
#include "algorithms/successive_halving_pruner.h"
#include "search/errors.h"
#include "search/json_util.h"
#include "search/storage.h"

namespace hps {

void HyperbandPrunerOptions::validate(const std::string& path) const {
  require_at_least(join_path(path, "min_resource"), min_resource, 1);
  if (max_resource < min_resource)
    throw ConfigError(join_path(path, "max_resource"),
                      "must be >= min_resource (" + std::to_string(min_resource) + "), got " +
                          std::to_string(max_resource));
  require_at_least(join_path(path, "reduction_factor"), reduction_factor, 2);
}

std::int64_t HyperbandPruner::n_brackets(std::int64_t min_resource, std::int64_t max_resource,
                                         std::int64_t reduction_factor) {
  // Largest k with min_resource * eta^k <= max_resource, without overflow:
  // r * eta <= max  <=>  r <= floor(max / eta) for positive integers.
  std::int64_t k = 0;
  std::int64_t r = min_resource;
  while (r <= max_resource / reduction_factor) {
    r *= reduction_factor;
    ++k;
  }
  return k + 1;
}

HyperbandPruner::HyperbandPruner(HyperbandPrunerOptions options) : options_(options) {
  options_.validate();
  n_brackets_ = n_brackets(options_.min_resource, options_.max_resource, options_.reduction_factor);
  // n <= 64 and eta^(n-1) <= max_resource / min_resource < 2^63, so every
  // budget is below 2^70 and the total below 2^77: exact in 128 bits.
  using U = unsigned __int128;
  const U n = static_cast<U>(n_brackets_);
  U total = 0;
  for (std::int64_t b = 0; b < n_brackets_; ++b) {
    const std::int64_t s = n_brackets_ - 1 - b;
    U power = 1;
    for (std::int64_t i = 0; i < s; ++i) power *= static_cast<U>(options_.reduction_factor);
    const U denom = static_cast<U>(s) + 1;
    total += (n * power + denom - 1) / denom;
    cumulative_.push_back(total);
  }
}

std::int64_t HyperbandPruner::bracket_for_number(std::int64_t number) const {
  const unsigned __int128 h = static_cast<unsigned __int128>(pruning::mix_hash(
                                  options_.seed, static_cast<std::uint64_t>(number))) %
                              cumulative_.back();
  for (std::size_t b = 0; b < cumulative_.size(); ++b)
    if (h < cumulative_[b]) return static_cast<std::int64_t>(b);
  return n_brackets_ - 1;  // unreachable: h < total
}

std::int64_t HyperbandPruner::bracket_of(const FrozenTrial& trial) const {
  if (trial.system_attrs.is_object()) {
    auto it = trial.system_attrs.find(kAttrHyperbandBracket);
    if (it != trial.system_attrs.end() && it->is_number_integer()) {
      auto b = it->get<std::int64_t>();
      if (b >= 0 && b < n_brackets_) return b;
    }
  }
  return bracket_for_number(trial.number);
}

std::vector<TrialPtr> HyperbandPruner::trials_for_sampler(const FrozenTrial& trial,
                                                          const std::vector<TrialPtr>& trials) {
  const std::int64_t bracket = bracket_of(trial);
  std::vector<TrialPtr> same;
  for (const auto& t : trials)
    if (t && bracket_of(*t) == bracket) same.push_back(t);
  return same;
}

bool HyperbandPruner::prune(const PruningContext& ctx) {
  const auto value = pruning::value_at(ctx.trial, ctx.step);
  if (!value) return false;
  if (std::isnan(*value)) return true;
  if (!ctx.storage)
    throw Error(
        "hyperband pruner: the PruningContext has no storage; bracket bookkeeping needs one");
  const std::int64_t bracket = bracket_of(ctx.trial);
  const bool stored =
      ctx.trial.system_attrs.is_object() && ctx.trial.system_attrs.contains(kAttrHyperbandBracket);
  if (!stored)
    ctx.storage->set_trial_system_attr(ctx.trial.trial_id, kAttrHyperbandBracket, bracket);
  std::vector<TrialPtr> same;
  for (const auto& t : ctx.trials)
    if (t && bracket_of(*t) == bracket) same.push_back(t);
  return SuccessiveHalvingPruner::judge(ctx, same, options_.min_resource, options_.reduction_factor,
                                        bracket, options_.max_resource);
}

Json HyperbandPruner::settings() const {
  return {{"type", name()},
          {"min_resource", options_.min_resource},
          {"max_resource", options_.max_resource},
          {"reduction_factor", options_.reduction_factor},
          {"seed", options_.seed}};
}

}  // namespace hps
