#include "search/sampler.h"

namespace hps {

void Sampler::sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) {
  for (const auto& spec : space.params()) {
    if (params.count(spec.name) || !SearchSpace::is_active(spec, params)) continue;
    params[spec.name] =
        spec.distribution.to_external(sample_independent(ctx, spec.name, spec.distribution));
  }
}

}  // namespace hps
