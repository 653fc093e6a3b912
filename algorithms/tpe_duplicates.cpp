#include "algorithms/tpe_duplicates.h"

#include <limits>

#include "search/util/random.h"

namespace hps::tpe {

namespace {

// Visits every assignment of the (finite) space that extends `fixed`,
// calling visit(params) at each complete one.
template <typename Visit>
void enumerate(const SearchSpace& space, std::size_t index, Params& params, const Params& fixed,
               Visit& visit) {
  const auto& specs = space.params();
  while (index < specs.size() &&
         (fixed.count(specs[index].name) || !SearchSpace::is_active(specs[index], params)))
    ++index;
  if (index == specs.size()) {
    visit(params);
    return;
  }
  const ParamSpec& spec = specs[index];
  const std::uint64_t c = spec.distribution.cardinality();
  for (std::uint64_t k = 0; k < c; ++k) {
    double internal =
        spec.distribution.is_indexed()
            ? static_cast<double>(k)
            : spec.distribution.low() + static_cast<double>(k) * spec.distribution.step();
    params[spec.name] = spec.distribution.to_external(internal);
    enumerate(space, index + 1, params, fixed, visit);
  }
  params.erase(spec.name);
}

}  // namespace

double space_size(const SearchSpace& space, const Params& fixed) {
  double n = 1;
  for (const auto& spec : space.params()) {
    if (fixed.count(spec.name)) continue;
    std::uint64_t c = spec.distribution.cardinality();
    if (c == 0) return std::numeric_limits<double>::infinity();
    n *= static_cast<double>(c);
  }
  return n;
}

Params untried_point(const SearchSpace& space, const Params& fixed, const History& h,
                     std::mt19937_64& rng) {
  Params chosen;
  std::uint64_t untried = 0, total = 0;
  Params work = fixed;
  auto visit = [&](const Params& candidate) {
    ++total;
    if (h.is_taken(candidate)) return;
    ++untried;
    // Reservoir sampling: each untried point is chosen with equal chance.
    if (util::uniform01(rng) * static_cast<double>(untried) < 1.0) chosen = candidate;
  };
  enumerate(space, 0, work, fixed, visit);
  if (untried == 0) {
    std::string what = "search space exhausted: all ";
    what += std::to_string(total);
    what += " points were tried (COMPLETE or RUNNING)";
    throw SearchSpaceExhausted(what);
  }
  return chosen;
}

}  // namespace hps::tpe
