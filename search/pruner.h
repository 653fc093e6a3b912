// Pruner interface (implementations live in algorithms/).
//
// A pruner answers "prune this trial now?" from the study's stored history
// only, so a restarted coordinator decides the same way. Bookkeeping a
// pruner needs across calls (successive halving rungs, Hyperband brackets)
// is written to the trials' system attrs through ctx.storage, never kept
// only in memory.
//
// Rules every pruner of algorithms/ follows:
// - One value per step. A second report for a step already reported keeps
//   the first value: Storage::set_trial_intermediate_value() returns false,
//   Trial::report() logs a warning ("step S was already reported; keeping
//   the first value") and returns false, and pruners only ever see the first
//   value. A coordinator refuses such a report the same way.
// - A NaN intermediate value at the reported step prunes the trial (except
//   with NopPruner), whatever the warm-up and startup options say.
// - Values are compared by the study's direction (maximize: higher is
//   better); only ThresholdPruner uses absolute bounds.
// - ctx.step must be a step reported by ctx.trial; otherwise the answer is
//   "continue".
// Pruners available from space.json: algorithms/factory.h (make_pruner).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "search/search_space.h"
#include "search/trial.h"

namespace hps {

class Storage;

struct PruningContext {
  StudyDirection direction = StudyDirection::kMinimize;
  // Every trial of the study in number order, any state.
  const std::vector<TrialPtr>& trials;
  // The trial that just reported, its newest intermediate value included.
  const FrozenTrial& trial;
  std::int64_t step = 0;  // the step just reported
  // For pruners that keep bookkeeping (rungs, brackets) as system attrs.
  Storage* storage = nullptr;
};

class Pruner {
 public:
  virtual ~Pruner() = default;
  // True if the trial should stop now (it then ends as PRUNED).
  virtual bool prune(const PruningContext& ctx) = 0;
  // The trials a sampler may learn from when sampling `trial` (Hyperband
  // shows only the trial's own bracket). Default: all of them.
  virtual std::vector<TrialPtr> trials_for_sampler(const FrozenTrial& trial,
                                                   const std::vector<TrialPtr>& trials) {
    (void)trial;
    return trials;
  }
  // Whether this pruner may ever prune, write bookkeeping or narrow the
  // trials a sampler sees. False (NopPruner) lets a coordinator skip reading
  // the trial again after a report and hand samplers every trial without
  // calling trials_for_sampler(). Default true.
  virtual bool prunes() const { return true; }
  virtual std::string name() const = 0;
  // The pruner's settings as space.json's "pruner" section with every
  // default resolved ({"type": name()} plus each option; `hpsearch
  // validate` prints it). Default: {"type": name()}.
  virtual Json settings() const { return Json{{"type", name()}}; }
};

// Never prunes.
class NopPruner : public Pruner {
 public:
  bool prune(const PruningContext&) override { return false; }
  bool prunes() const override { return false; }
  std::string name() const override { return "none"; }
};

}  // namespace hps
