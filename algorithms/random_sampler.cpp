#include "algorithms/random_sampler.h"

#include <cmath>
#include <string>

#include "algorithms/tried_points.h"
#include "search/util/hash.h"
#include "search/util/random.h"

namespace hps {

namespace {

// Portable draws only (search/util/random.h), no std:: distribution: their
// outputs differ between standard libraries.
template <class Rng>
double draw_with(Rng& rng, const Distribution& d) {
  if (d.is_indexed()) return static_cast<double>(util::uniform_below(rng, d.choices().size()));
  if (d.single_value()) return d.low();
  const bool grid = d.step() > 0;
  double low = d.low(), high = grid ? d.grid_high() : d.high();
  if (grid) {
    // Each grid point owns a cell of width step; draw uniformly over cells.
    std::uint64_t n = d.cardinality();
    if (!d.is_log()) return low + static_cast<double>(util::uniform_below(rng, n)) * d.step();
    low -= 0.5 * d.step();
    high += 0.5 * d.step();
  }
  if (d.is_log()) return std::exp(util::uniform_real(rng, std::log(low), std::log(high)));
  // A width that overflows (e.g. [-1e308, 1e308]) is interpolated.
  return util::uniform_real(rng, low, high);
}

}  // namespace

RandomSampler::RandomSampler(std::optional<std::uint64_t> seed)
    : seed_(seed ? *seed : util::entropy_seed()) {}

double RandomSampler::draw(std::mt19937_64& rng, const Distribution& d) {
  return draw_with(rng, d);
}

void RandomSampler::sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) {
  const Params fixed = params;
  Sampler::sample(ctx, space, params);  // the plain (seed, number, name) draw
  if (params.size() == fixed.size() || !tried::all_discrete(space, params)) return;
  const tried::TriedPoints tried = tried::tried_points(ctx);
  if (!tried.contains(params)) return;
  using util::splitmix64;
  for (int attempt = 1; attempt <= kDuplicateRetries; ++attempt) {
    Params p = fixed;
    const std::uint64_t base =
        splitmix64(seed_ ^ splitmix64(static_cast<std::uint64_t>(ctx.trial.number) ^
                                      splitmix64(static_cast<std::uint64_t>(attempt))));
    for (const auto& spec : space.params()) {
      if (p.count(spec.name) || !SearchSpace::is_active(spec, p)) continue;
      util::SplitMix64 rng(splitmix64(base ^ util::fnv1a64(spec.name)));
      p[spec.name] = spec.distribution.to_external(draw_with(rng, spec.distribution));
    }
    if (!tried::all_discrete(space, p) || !tried.contains(p)) {
      params = std::move(p);
      return;
    }
  }
  if (tried::space_size(space, fixed) > tried::kMaxEnumerate) return;  // keep the repeat
  std::mt19937_64 rng(splitmix64(seed_ ^ splitmix64(static_cast<std::uint64_t>(ctx.trial.number)) ^
                                 0x756E7472696564ULL));
  params = tried::untried_point(space, fixed, tried, rng);
}

double RandomSampler::sample_independent(const SamplingContext& ctx, const std::string& name,
                                         const Distribution& distribution) {
  // One stream per (seed, trial number, param name).
  using util::splitmix64;
  std::uint64_t key =
      splitmix64(splitmix64(seed_ ^ splitmix64(static_cast<std::uint64_t>(ctx.trial.number))) ^
                 util::fnv1a64(name));
  util::SplitMix64 rng(key);
  return draw_with(rng, distribution);
}

}  // namespace hps
