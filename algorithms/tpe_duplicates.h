// TpeSampler's last resort against duplicates (private; not installed):
// when every draw repeated a COMPLETE or RUNNING trial's params, a finite
// space is enumerated and an untried point chosen uniformly (reservoir
// sampling), or SearchSpaceExhausted thrown when none is left.
#pragma once

#include <random>

#include "algorithms/tpe_history.h"

namespace hps::tpe {

// A finite space with at most this many points is enumerated.
inline constexpr double kMaxEnumerate = 1e6;

// Number of points of the space's params not in `fixed` (an upper bound
// with conditions), or +inf when a param is continuous.
double space_size(const SearchSpace& space, const Params& fixed);

// An untried assignment of the (finite) space extending `fixed`, chosen
// uniformly with `rng`. Throws SearchSpaceExhausted ("search space
// exhausted: all N points were tried (COMPLETE or RUNNING)") when every one
// is taken in `h`.
Params untried_point(const SearchSpace& space, const Params& fixed, const History& h,
                     std::mt19937_64& rng);

}  // namespace hps::tpe
