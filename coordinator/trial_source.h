// TrialSource: where a dispatched trial comes from. The oldest WAITING
// trial is claimed (its enqueued params kept, the rest sampled), else a new
// trial is created with params the study's sampler chooses at that moment,
// with every RUNNING trial visible (and the number of connected workers in
// the SamplingContext). Also answers define-by-run Suggest requests. The
// sampler sees all trials unless the pruner narrows them
// (Pruner::trials_for_sampler, as Hyperband does). Private to the
// coordinator (not installed).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/trial_mirror.h"
#include "search/study.h"

namespace hps {

class TrialSource {
 public:
  // A trial to send to a worker: the trial (RUNNING) and its enqueued
  // (fixed) params.
  struct Dispatch {
    TrialPtr trial;
    Params fixed;
  };

  // All references must outlive this.
  TrialSource(Study& study, TrialMirror& mirror, const SearchSpace& space);

  // The next trial for the worker named `worker` (n_workers: connected
  // workers). nullopt when the sampler found the space exhausted
  // (exhausted() is then true); a claimed WAITING trial that could not be
  // sampled is failed and appended to `ended`.
  std::optional<Dispatch> next(const std::string& worker, int n_workers,
                               std::vector<TrialPtr>& ended);
  // Whether the sampler has found no untried point left.
  bool exhausted() const { return exhausted_; }

  // Define-by-run: the value of param `name` with `distribution` for the
  // RUNNING trial `number` (lifecycle::suggest_param), stored if new.
  // Throws Error if the trial already has that param with another
  // distribution, or from the sampler.
  Json suggest(std::int64_t number, const std::string& name, const Distribution& distribution,
               int n_workers);

 private:
  std::optional<Dispatch> claim_waiting(const std::string& worker, int n_workers,
                                        std::vector<TrialPtr>& ended);
  std::optional<Dispatch> create_new(const std::string& worker, int n_workers);
  // Calls f(the SamplingContext for trial `t`): the mirror's view, or the
  // trials the pruner lets the sampler see (search/sampling_context.h).
  void with_sampling_context(const FrozenTrial& t, int n_workers,
                             const std::function<void(const SamplingContext&)>& f);

  Study& study_;
  Storage& storage_;
  TrialMirror& mirror_;
  const SearchSpace& space_;
  bool exhausted_ = false;
  DistributionMap last_distributions_;  // of the last new trial (shared with it)
};

}  // namespace hps
