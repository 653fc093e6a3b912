#include "algorithms/random_sampler.h"

#include <cmath>
#include <string>

#include "search/util/hash.h"
#include "search/util/random.h"

namespace hps {

namespace {

std::uint64_t random_seed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

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
    : seed_(seed ? *seed : random_seed()) {}

double RandomSampler::draw(std::mt19937_64& rng, const Distribution& d) {
  return draw_with(rng, d);
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
