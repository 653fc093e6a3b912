// The trials a sampler sees: one rule for Study (ask, suggest_*) and the
// coordinator's TrialSource. Private to hpsearch: not installed.
#pragma once

#include <functional>

#include "search/pruner.h"
#include "search/sampler.h"
#include "search/trial_view.h"

namespace hps {

// Calls `fn` once with the SamplingContext for sampling `current` in a study
// of `direction` whose history `view` holds (synced by the caller), with
// `n_workers` running trials at once (>= 1). When the pruner does not narrow
// the trials (Pruner::prunes() is false) the context holds view.trials() and
// `view` itself (ctx.view, for samplers' incremental caches); otherwise the
// trials pruner.trials_for_sampler(current, view.trials()) returns, and no
// view. The context and the trials it names live only during the call.
// Exceptions from the pruner or `fn` (SearchSpaceExhausted, ...) propagate.
void with_sampling_context(StudyDirection direction, const TrialView& view, Pruner& pruner,
                           const FrozenTrial& current, int n_workers,
                           const std::function<void(const SamplingContext&)>& fn);

}  // namespace hps
