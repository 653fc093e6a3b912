// PercentilePruner and MedianPruner: stop a trial whose learning curve is
// worse than a percentile of the curves of earlier finished trials at the
// same step (the median stopping rule of Golovin et al. 2017, "Google
// Vizier", section 3.2.2; options as documented for Optuna's
// PercentilePruner/MedianPruner).
#pragma once

#include <cstdint>
#include <string>

#include "search/pruner.h"

namespace hps {

struct PercentilePrunerOptions {
  // Which percentile of the other trials' values the trial must reach, in
  // [0, 100], counted from the best end: 25 keeps trials in the best quarter
  // (for maximize the 75th percentile of the raw values is the bar).
  // Default 50 (the median). Lower prunes more.
  double percentile = 50.0;
  // No pruning until this many trials are COMPLETE. Default 5. Higher
  // gives the bar a firmer footing at the cost of pruning later.
  std::int64_t n_startup_trials = 5;
  // No pruning (except NaN) while the reported step is below this. Default
  // 0. Protects noisy early epochs.
  std::int64_t n_warmup_steps = 0;
  // Check only the first report in each interval of this many steps after
  // the warm-up (>= 1). Default 1 (every report).
  std::int64_t interval_steps = 1;
  // At least this many COMPLETE trials must have a value at the step, else
  // the trial is not pruned (>= 1). Default 1.
  std::int64_t n_min_trials = 1;

  // Throws ConfigError("<path>.<field>", rule) for the first bad field.
  void validate(const std::string& path = "pruner") const;
};

// Decision for a report of trial T at step s (value v):
//  1. v is NaN: prune (regardless of any other option).
//  2. Fewer than n_startup_trials COMPLETE trials, s < n_warmup_steps, or s
//     not the first report of its interval: continue.
//  3. The reference values are the non-NaN values at exactly step s of the
//     COMPLETE trials other than T. Trials that stopped before s (or skipped
//     it) do not count; fewer than n_min_trials values: continue.
//  4. bar = the percentile of the reference values (linear interpolation),
//     taken from the best end for the study's direction. T's best value at
//     steps <= s is compared with it: prune if strictly worse.
// Only COMPLETE trials are references (as Optuna): their curves are final,
// so the decision depends on stored history only. Keeps no state.
class PercentilePruner : public Pruner {
 public:
  // Throws ConfigError (path "pruner") for invalid options.
  explicit PercentilePruner(PercentilePrunerOptions options = {});
  bool prune(const PruningContext& ctx) override;
  std::string name() const override { return "percentile"; }
  Json settings() const override;
  const PercentilePrunerOptions& options() const { return options_; }

 private:
  PercentilePrunerOptions options_;
};

// The options of PercentilePrunerOptions without the percentile (fixed at 50).
struct MedianPrunerOptions {
  std::int64_t n_startup_trials = 5;  // default 5; see PercentilePrunerOptions
  std::int64_t n_warmup_steps = 0;    // default 0
  std::int64_t interval_steps = 1;    // default 1
  std::int64_t n_min_trials = 1;      // default 1
};

// PercentilePruner at the 50th percentile (the median stopping rule).
class MedianPruner : public PercentilePruner {
 public:
  // Throws ConfigError (path "pruner") for invalid options.
  explicit MedianPruner(MedianPrunerOptions options = {});
  std::string name() const override { return "median"; }
  Json settings() const override;
};

}  // namespace hps
