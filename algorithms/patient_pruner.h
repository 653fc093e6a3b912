// PatientPruner: tolerate a stalled learning curve for `patience` reports
// before letting another pruner (or itself) stop the trial (after Optuna's
// PatientPruner; the improvement rule is Keras EarlyStopping's min_delta).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "search/pruner.h"

namespace hps {

struct PatientPrunerOptions {
  // Reports in a row without improvement that are tolerated (>= 0).
  // Default 0: the first report that does not improve ends the patience.
  std::int64_t patience = 0;
  // A value improves only if it beats the best earlier value by more than
  // this (>= 0, same units as the values). Default 0. Larger values treat
  // slow progress as a stall.
  double min_delta = 0.0;

  // Throws ConfigError("<path>.<field>", rule) for the first bad field.
  void validate(const std::string& path = "pruner") const;
};

// Decision for a report at step s: NaN prunes. Otherwise walk the trial's
// non-NaN values at steps <= s in step order, keeping the best value so far
// and a stall count: a value better than the best by more than min_delta
// (direction-aware) becomes the best and resets the count to 0; any other
// value adds 1. If the count is <= patience: continue (the wrapped pruner is
// not asked). Otherwise the trial is stalled: the wrapped pruner decides, or
// without one the trial is pruned. E.g. patience 2, minimize, min_delta 0:
// 1.0, 0.8, 0.9, 0.85, 0.81 prunes at the fifth report (three in a row not
// below 0.8). Keeps no state of its own.
class PatientPruner : public Pruner {
 public:
  // `wrapped` may be null. Throws ConfigError (path "pruner") for invalid
  // options.
  PatientPruner(std::shared_ptr<Pruner> wrapped, PatientPrunerOptions options);
  bool prune(const PruningContext& ctx) override;
  // The wrapped pruner's view (Hyperband's bracket), or all trials.
  std::vector<TrialPtr> trials_for_sampler(const FrozenTrial& trial,
                                           const std::vector<TrialPtr>& trials) override;
  std::string name() const override { return "patient"; }
  Json settings() const override;
  const PatientPrunerOptions& options() const { return options_; }
  const std::shared_ptr<Pruner>& wrapped() const { return wrapped_; }

 private:
  std::shared_ptr<Pruner> wrapped_;
  PatientPrunerOptions options_;
};

}  // namespace hps
