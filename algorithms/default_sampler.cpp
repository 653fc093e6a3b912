// The definition of make_default_sampler() (declared in search/sampler.h):
// the sampler a Study gets when its options name none.
#include "algorithms/random_sampler.h"
#include "search/sampler.h"

namespace hps {

std::shared_ptr<Sampler> make_default_sampler() { return std::make_shared<RandomSampler>(); }

}  // namespace hps
