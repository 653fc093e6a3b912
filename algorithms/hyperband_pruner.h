// HyperbandPruner: Hyperband (Li et al. 2018, "Hyperband: A Novel
// Bandit-Based Approach to Hyperparameter Optimization", JMLR 18(185),
// Algorithm 1) run as several asynchronous successive halving brackets, as
// Optuna's HyperbandPruner documents: each trial is assigned to one bracket;
// bracket b judges its trials by successive halving with
// min_early_stopping_rate = b, against the trials of the same bracket only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "search/pruner.h"

namespace hps {

// System attr written on a trial when it is first judged: its bracket
// (an integer in [0, n_brackets)).
inline constexpr const char* kAttrHyperbandBracket = "hyperband_bracket";

struct HyperbandPrunerOptions {
  // Steps before the first judgement in the most aggressive bracket (>= 1).
  // Default 1.
  std::int64_t min_resource = 1;
  // The full budget of a trial in steps (>= min_resource): the last step
  // an unpruned trial reports. Required (no default; 0 is invalid). Rungs
  // at or beyond it are not judged.
  std::int64_t max_resource = 0;
  // eta (>= 2), as for successive halving. Default 3.
  std::int64_t reduction_factor = 3;
  // Salt of the bracket assignment hash; studies that should split trials
  // differently use different seeds. Default 0.
  std::uint64_t seed = 0;

  // Throws ConfigError("<path>.<field>", rule) for the first bad field.
  void validate(const std::string& path = "pruner") const;
};

// Brackets. n = 1 + the largest k with min_resource * eta^k <= max_resource
// (exact integer arithmetic: (1, 243, 3) -> 6, (1, 1000, 10) -> 4,
// (1, 81, 3) -> 5). Bracket b in [0, n) has budget
// ceil(n * eta^(n-1-b) / (n-b)) (the number of configurations bracket
// s = n-1-b starts with in Hyperband's Algorithm 1); trial number t goes to
// the bracket whose cumulative-budget interval holds
// mix_hash(seed, t) mod (total budget), so brackets receive trials in
// proportion to their budgets, deterministically (a restart assigns the
// same brackets). The bracket is also stored as "hyperband_bracket", and a
// stored bracket takes precedence.
//
// Decision for a report: NaN prunes; otherwise SuccessiveHalvingPruner::judge
// with min_early_stopping_rate = the trial's bracket, max_resource, and the
// trials of that bracket as competitors (see successive_halving_pruner.h).
// Needs ctx.storage (throws hps::Error without it).
class HyperbandPruner : public Pruner {
 public:
  // Throws ConfigError (path "pruner") for invalid options.
  explicit HyperbandPruner(HyperbandPrunerOptions options);
  bool prune(const PruningContext& ctx) override;
  // The trials of `trial`'s bracket (trial itself included when listed).
  std::vector<TrialPtr> trials_for_sampler(const FrozenTrial& trial,
                                           const std::vector<TrialPtr>& trials) override;
  std::string name() const override { return "hyperband"; }
  Json settings() const override;
  const HyperbandPrunerOptions& options() const { return options_; }

  // The number of brackets for valid options (see above); >= 1.
  static std::int64_t n_brackets(std::int64_t min_resource, std::int64_t max_resource,
                                 std::int64_t reduction_factor);
  std::int64_t n_brackets() const { return n_brackets_; }
  // The bracket of trial number `number` by the hash (ignores stored attrs).
  std::int64_t bracket_for_number(std::int64_t number) const;
  // The stored bracket if valid, else bracket_for_number(trial.number).
  std::int64_t bracket_of(const FrozenTrial& trial) const;

 private:
  HyperbandPrunerOptions options_;
  std::int64_t n_brackets_ = 1;
  // Cumulative budgets: bracket b covers [cumulative_[b-1], cumulative_[b]).
  std::vector<unsigned __int128> cumulative_;
};

}  // namespace hps
