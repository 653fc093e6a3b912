// SuccessiveHalvingPruner: asynchronous successive halving (ASHA), Li et
// al. 2020, "A System for Massively Parallel Hyperparameter Tuning"
// (MLSys), Algorithm 2, in the pruning form Optuna documents: a trial that
// reaches a rung is promoted (continues) only if its value there is among
// the top 1/reduction_factor of the values recorded at that rung so far;
// otherwise it is pruned. Trials are never paused and resumed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "search/pruner.h"

namespace hps {

// System attrs written by successive halving (and Hyperband) on a trial:
// "completed_rung_<k>": the trial's value at rung k (a number, or "inf" /
// "-inf"), written when the trial is judged at rung k;
// "pruned_at_rung": k, written when the trial was not promoted at rung k.
inline constexpr const char* kAttrCompletedRungPrefix = "completed_rung_";
inline constexpr const char* kAttrPrunedAtRung = "pruned_at_rung";

struct SuccessiveHalvingPrunerOptions {
  // Steps a trial gets before its first judgement, r (>= 1); rung k is
  // reached at step r * reduction_factor^(min_early_stopping_rate + k).
  // nullopt ("auto" in space.json): r = max(1, L / 100), L being the last
  // step of the first trial to end COMPLETE (earliest completion time,
  // lower number on a tie); nothing is pruned before such a trial exists.
  // Default "auto". Small r prunes early, on noisier values.
  std::optional<std::int64_t> min_resource;
  // eta (>= 2): the fraction 1/eta of the trials at a rung is promoted, and
  // each rung needs eta times the steps of the one below. Default 4.
  std::int64_t reduction_factor = 4;
  // s (>= 0): the first rung is at r * eta^s steps. Default 0. Larger s
  // prunes later and less.
  std::int64_t min_early_stopping_rate = 0;

  // Throws ConfigError("<path>.<field>", rule) for the first bad field.
  void validate(const std::string& path = "pruner") const;
};

// Decision for a report of trial T at step s (value v):
//  1. v is NaN: prune. T carries "pruned_at_rung": prune (a decision, once
//     made, is kept).
//  2. min_resource unresolved ("auto" with no COMPLETE trial yet): continue.
//  3. For each rung k, lowest first, with rung step R_k <= s: if T already
//     carries "completed_rung_<k>" it was promoted there; go on. Otherwise
//     T's value at rung k is its value at the first step it reported at or
//     after R_k. The competitors are the "completed_rung_<k>" values of all
//     other trials (any state, except FAIL trials that were retried: their
//     retry runs the same params) plus T's own. With n values, m =
//     max(1, floor(n / eta)); T is promoted if its value is at least as good
//     as the m-th best (direction-aware). When n < eta this promotes only a
//     new best, as Optuna does, rather than pruning every early trial.
//     T's value is recorded; if not promoted, "pruned_at_rung" too (one
//     storage transaction), and the trial is pruned.
//  4. Continue when no rung is left at or below s.
// All inputs are stored (intermediate values and system attrs), so a
// restarted coordinator judges the same way. Needs ctx.storage (throws
// hps::Error without it).
class SuccessiveHalvingPruner : public Pruner {
 public:
  // Throws ConfigError (path "pruner") for invalid options.
  explicit SuccessiveHalvingPruner(SuccessiveHalvingPrunerOptions options = {});
  bool prune(const PruningContext& ctx) override;
  std::string name() const override { return "asha"; }
  Json settings() const override;
  const SuccessiveHalvingPrunerOptions& options() const { return options_; }

  // min_resource, or for "auto" the value derived from `trials` as
  // described above (nullopt while no COMPLETE trial has reported a step).
  std::optional<std::int64_t> resolve_min_resource(const std::vector<TrialPtr>& trials) const;

  // The shared judgement (step 1 and 3-4 above) for a resolved min_resource,
  // with `competitors` as the trials whose rung values count (Hyperband
  // passes the trials of one bracket). Rungs whose step is >= max_resource
  // (when given) are not judged: there the trial is at its full budget.
  // Requires min_resource >= 1, reduction_factor >= 2, rate >= 0.
  static bool judge(const PruningContext& ctx, const std::vector<TrialPtr>& competitors,
                    std::int64_t min_resource, std::int64_t reduction_factor,
                    std::int64_t min_early_stopping_rate,
                    std::optional<std::int64_t> max_resource = std::nullopt);

 private:
  SuccessiveHalvingPrunerOptions options_;
};

}  // namespace hps
