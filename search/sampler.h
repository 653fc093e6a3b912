// Sampler interface (implementations live in algorithms/).
//
// As in Optuna, a sampler answers one question: "sample these params given
// the study's history". It keeps no private history (only an RNG and caches
// that can be rebuilt from the trials), so a restarted process samples the
// same way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "search/distributions.h"
#include "search/search_space.h"
#include "search/trial.h"

namespace hps {

class TrialView;  // search/trial_view.h

// What a sampler sees when asked.
struct SamplingContext {
  StudyDirection direction = StudyDirection::kMinimize;
  // Every trial of the study in number order, any state. The trial being
  // sampled is among them as RUNNING when it is stored already (Study::ask);
  // the coordinator samples a new trial before storing it (its params go in
  // the same write), so there it is absent: samplers skip `trial.number` in
  // `trials` and must not rely on finding it. RUNNING trials let samplers
  // spread parallel suggestions (constant liar).
  const std::vector<TrialPtr>& trials;
  // The trial being sampled: its number and the params already fixed.
  const FrozenTrial& trial;
  // How many workers run trials at once (the coordinator: its connected
  // workers; Study: 1). Parallel-aware samplers use it, e.g. TPE turns its
  // constant liar on when it is above 1. Default 1.
  int n_workers = 1;
  // The view `trials` is (then &trials == &view->trials()), or null (a
  // storage without a change feed, or trials narrowed by the pruner's
  // trials_for_sampler). A sampler that keeps per-trial caches can update
  // them from view->changed_since(the view version it saw last), O(changes),
  // keyed by view->id(), instead of rescanning `trials`. Default null.
  const TrialView* view = nullptr;
};

// Raised when a finite search space has no untried point left.
class SearchSpaceExhausted : public Error {
 public:
  using Error::Error;
};

class Sampler {
 public:
  virtual ~Sampler() = default;

  // Adds to `params` a value for every param of `space` that is active given
  // the values before it, in the space's order. Values already in `params`
  // (enqueued, fixed) are kept and condition the rest. Every value added
  // satisfies its distribution's contains(). The default calls
  // sample_independent() param by param; joint samplers override it.
  // May throw SearchSpaceExhausted.
  virtual void sample(const SamplingContext& ctx, const SearchSpace& space, Params& params);

  // Samples one param on its own (define-by-run suggest calls), returning
  // an *internal* value (see distributions.h); the caller maps it with
  // Distribution::to_external().
  virtual double sample_independent(const SamplingContext& ctx, const std::string& name,
                                    const Distribution& distribution) = 0;

  // A short name for logs ("random", "tpe").
  virtual std::string name() const = 0;

  // Tells the sampler that the study's budget ends with at most
  // `max_complete` COMPLETE trials (a count >= 0), before the run samples:
  // Study::optimize (when n_trials is set: the COMPLETE trials so far plus
  // n_trials) and `hpsearch run` / `resume` (when budget.n_trials is set)
  // call it once at the start and log what it returns with spdlog::warn.
  // A sampler may size itself to the budget (TPE's "auto" startup size).
  // Returns a warning when this sampler cannot work as configured within
  // the budget (TPE: at or below its startup size every trial is drawn at
  // random), or "" (the default: nothing to say, nothing kept).
  virtual std::string plan_budget(std::int64_t max_complete) {
    (void)max_complete;
    return {};
  }

  // Checks that this sampler can sample the declared `space`, before
  // anything is stored: Study::create, Study::load_if_exists (with
  // StudyOptions::space) and `hpsearch run` call it first. Throws
  // ConfigError naming the field ("sampler.values.lr: ..."). Default:
  // nothing to check.
  virtual void check_space(const SearchSpace& space) { (void)space; }
};

// The sampler a Study uses when StudyOptions::sampler is null: a
// RandomSampler with a seed from std::random_device. Declared here, defined
// by algorithms/ (algorithms/default_sampler.cpp), so that search/ does not
// depend on the samplers it may be given (as LevelDB's Env::Default()).
// Each call returns a new sampler.
std::shared_ptr<Sampler> make_default_sampler();

}  // namespace hps
