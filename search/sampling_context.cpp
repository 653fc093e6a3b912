#include "search/sampling_context.h"

#include <vector>

namespace hps {

void with_sampling_context(StudyDirection direction, const TrialView& view, Pruner& pruner,
                           const FrozenTrial& current, int n_workers,
                           const std::function<void(const SamplingContext&)>& fn) {
  if (!pruner.prunes()) {
    SamplingContext ctx{direction, view.trials(), current, n_workers};
    ctx.view = &view;
    fn(ctx);
    return;
  }
  const std::vector<TrialPtr> subset = pruner.trials_for_sampler(current, view.trials());
  SamplingContext ctx{direction, subset, current, n_workers};
  fn(ctx);
}

}  // namespace hps
