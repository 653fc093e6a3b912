#include "algorithms/qmc_sampler.h"

#include <bit>
#include <boost/random/sobol.hpp>
#include <cmath>
#include <limits>
#include <utility>

#include "algorithms/tried_points.h"
#include "search/json_util.h"
#include "search/util/random.h"

namespace hps {

namespace {

using SobolEngine =
    boost::random::sobol_engine<std::uint64_t, 64, boost::random::default_sobol_table>;

constexpr std::size_t kMaxSobolDims = boost::random::default_sobol_table::max_dimension;
constexpr std::size_t kMaxHaltonDims = 100'000;
constexpr double kBelowOne = 0x1.fffffffffffffp-1;  // the largest double < 1

// A 64-bit word to [0, 1): its top 53 bits times 2^-53.
double unit_of(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// Sobol's random linear matrix scramble and digital shift of one dimension
// (Owen 2003, section 2): y = L x + e over GF(2), digit 1 the most
// significant bit, L lower triangular with a unit diagonal.
struct SobolScramble {
  std::uint64_t rows[64];  // rows[i]: the digits k <= i that feed digit i
  std::uint64_t shift;

  explicit SobolScramble(util::SplitMix64& rng) {
    for (int i = 0; i < 64; ++i) {
      const std::uint64_t digit = 1ULL << (63 - i);
      const std::uint64_t above = i == 0 ? 0 : ~((digit << 1) - 1);  // digits 1 .. i-1
      rows[i] = (rng() & above) | digit;
    }
    shift = rng();
  }
  std::uint64_t apply(std::uint64_t x) const {
    std::uint64_t y = 0;
    for (int i = 0; i < 64; ++i)
      y |= static_cast<std::uint64_t>(std::popcount(x & rows[i]) & 1) << (63 - i);
    return y ^ shift;
  }
};

// Halton's digit scramble of one dimension: per digit position k, digit x
// -> (a_k x + c_k) mod base (identity when not scrambled).
struct HaltonDimension {
  std::uint64_t base = 2;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> digit_maps;  // (a_k, c_k)
};

bool is_prime(std::uint64_t n) {
  if (n < 2) return false;
  for (std::uint64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

}  // namespace

const char* to_string(QmcSequence sequence) {
  return sequence == QmcSequence::kSobol ? "sobol" : "halton";
}

QmcSequence parse_qmc_sequence(const std::string& name, const std::string& path) {
  return parse_choice<QmcSequence>(
      name, path, {{"sobol", QmcSequence::kSobol}, {"halton", QmcSequence::kHalton}});
}

QmcOptions QmcOptions::from_json(const Json& config, const std::string& path) {
  check_keys(config, path, {"type", "sequence", "scramble", "seed"});
  QmcOptions o;
  if (auto s = optional_string(config, path, "sequence"))
    o.sequence = parse_qmc_sequence(*s, join_path(path, "sequence"));
  if (auto b = optional_bool(config, path, "scramble")) o.scramble = *b;
  o.seed = optional_seed(config, path);
  return o;
}

Json QmcOptions::to_json() const {
  return {{"type", "qmc"},
          {"sequence", to_string(sequence)},
          {"scramble", scramble},
          {"seed", seed.value_or(0)}};
}

// ------------------------------------------------------------------ points

struct QmcPoints::Impl {
  QmcSequence sequence;
  bool scramble;
  std::uint64_t seed;
  std::mutex mutex;
  // Sobol: an engine of at least the dimensions asked so far (a dimension's
  // coordinates do not depend on how many there are).
  std::unique_ptr<SobolEngine> sobol;
  std::vector<SobolScramble> sobol_scrambles;
  std::vector<HaltonDimension> halton;

  util::SplitMix64 stream(std::size_t dim) const {
    return util::SplitMix64(util::splitmix64(seed ^ util::splitmix64(0x716d63ULL + dim)));  // "qmc"
  }

  void sobol_point(std::uint64_t index, std::size_t n_dims, std::vector<double>& out) {
    if (n_dims > kMaxSobolDims)
      throw ConfigError("sampler.sequence", "a Sobol point has at most " +
                                                std::to_string(kMaxSobolDims) +
                                                " dimensions (params), " + std::to_string(n_dims) +
                                                " asked; use \"halton\"");
    if (!sobol || sobol->dimension() < n_dims) sobol = std::make_unique<SobolEngine>(n_dims);
    while (scramble && sobol_scrambles.size() < n_dims) {
      util::SplitMix64 rng = stream(sobol_scrambles.size());
      sobol_scrambles.emplace_back(rng);
    }
    // Boost's sequence starts at the standard point 1 (it skips the origin).
    std::vector<std::uint64_t> bits(sobol->dimension(), 0);
    if (index > 0) {
      sobol->seed(index - 1);
      for (auto& b : bits) b = (*sobol)();
    }
    for (std::size_t d = 0; d < n_dims; ++d)
      out[d] = unit_of(scramble ? sobol_scrambles[d].apply(bits[d]) : bits[d]);
  }

  const HaltonDimension& halton_dimension(std::size_t d) {
    while (halton.size() <= d) {
      HaltonDimension h;
      h.base = halton.empty() ? 2 : halton.back().base + 1;
      while (!is_prime(h.base)) ++h.base;
      // Digits enough for 53 bits: base^k >= 2^53.
      std::size_t k = 0;
      for (double r = 1.0; r < 0x1.0p53; r *= static_cast<double>(h.base)) ++k;
      util::SplitMix64 rng = stream(halton.size());
      for (std::size_t i = 0; i < k; ++i) {
        if (!scramble) {
          h.digit_maps.emplace_back(1, 0);
          continue;
        }
        const std::uint64_t a = 1 + util::uniform_below(rng, h.base - 1);
        const std::uint64_t c = util::uniform_below(rng, h.base);
        h.digit_maps.emplace_back(a, c);
      }
      halton.push_back(std::move(h));
    }
    return halton[d];
  }

  void halton_point(std::uint64_t index, std::size_t n_dims, std::vector<double>& out) {
    if (n_dims > kMaxHaltonDims)
      throw ConfigError("sampler.sequence",
                        "a Halton point has at most " + std::to_string(kMaxHaltonDims) +
                            " dimensions (params), " + std::to_string(n_dims) + " asked");
    for (std::size_t d = 0; d < n_dims; ++d) {
      const HaltonDimension& h = halton_dimension(d);
      const auto b = static_cast<double>(h.base);
      double u = 0.0, scale = 1.0 / b;
      std::uint64_t n = index;
      for (const auto& [a, c] : h.digit_maps) {
        const std::uint64_t digit = n % h.base;
        n /= h.base;
        // a < base and digit < base: the product fits when base < 2^32.
        u += static_cast<double>((a * digit + c) % h.base) * scale;
        scale /= b;
      }
      out[d] = std::min(u, kBelowOne);
    }
  }
};

QmcPoints::QmcPoints(QmcSequence sequence, bool scramble, std::uint64_t seed)
    : impl_(std::make_unique<Impl>()) {
  impl_->sequence = sequence;
  impl_->scramble = scramble;
  impl_->seed = seed;
}

QmcPoints::~QmcPoints() = default;

std::size_t QmcPoints::max_dims() const {
  return impl_->sequence == QmcSequence::kSobol ? kMaxSobolDims : kMaxHaltonDims;
}

std::vector<double> QmcPoints::point(std::uint64_t index, std::size_t n_dims) {
  std::lock_guard lock(impl_->mutex);
  std::vector<double> out(n_dims, 0.0);
  if (n_dims == 0) return out;
  if (impl_->sequence == QmcSequence::kSobol)
    impl_->sobol_point(index, n_dims, out);
  else
    impl_->halton_point(index, n_dims, out);
  return out;
}

// ------------------------------------------------------------------ sampler

QmcSampler::QmcSampler(QmcOptions options)
    : options_(options),
      seed_(options.seed ? *options.seed : 0),
      points_(options.sequence, options.scramble, seed_),
      fallback_(util::splitmix64(seed_ ^ 0x66616c6c6261636bULL)) {}  // "fallback"

double QmcSampler::from_unit(const Distribution& d, double u) {
  u = std::clamp(std::isfinite(u) ? u : 0.0, 0.0, kBelowOne);
  if (d.is_indexed()) {
    const auto n = static_cast<double>(d.choices().size());
    return std::min(std::floor(u * n), n - 1);
  }
  if (d.single_value()) return d.low();
  const bool grid = d.step() > 0;
  double low = d.low(), high = grid ? d.grid_high() : d.high();
  if (grid) {
    // Each grid point owns a cell of width step.
    if (!d.is_log()) {
      const auto n = static_cast<double>(d.cardinality());
      return low + std::min(std::floor(u * n), n - 1) * d.step();
    }
    low -= 0.5 * d.step();
    high += 0.5 * d.step();
  }
  if (d.is_log()) return std::exp(std::log(low) + u * (std::log(high) - std::log(low)));
  const double width = high - low;
  if (!std::isfinite(width)) return low * (1 - u) + high * u;
  return low + u * width;
}

void QmcSampler::check_space(const SearchSpace& space) {
  if (space.size() > points_.max_dims())
    throw ConfigError("sampler.sequence",
                      std::string("the space has ") + std::to_string(space.size()) +
                          " params, more than " + to_string(options_.sequence) + "'s " +
                          std::to_string(points_.max_dims()) + " dimensions" +
                          (options_.sequence == QmcSequence::kSobol ? "; use \"halton\"" : ""));
}

void QmcSampler::add_point(std::int64_t number, const SearchSpace& space, Params& params) {
  const std::vector<double> u =
      points_.point(static_cast<std::uint64_t>(std::max<std::int64_t>(number, 0)), space.size());
  std::size_t dim = 0;
  for (const auto& spec : space.params()) {
    const std::size_t d = dim++;
    if (params.count(spec.name) || !SearchSpace::is_active(spec, params)) continue;
    params[spec.name] = spec.distribution.to_external(from_unit(spec.distribution, u[d]));
  }
}

void QmcSampler::sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) {
  const Params fixed = params;
  add_point(ctx.trial.number, space, params);
  if (params.size() == fixed.size() || !tried::all_discrete(space, params)) return;
  if (!tried::tried_points(ctx).contains(params)) return;
  // A finite space's point already tried: a random untried one instead.
  params = fixed;
  fallback_.sample(ctx, space, params);
}

double QmcSampler::sample_independent(const SamplingContext& ctx, const std::string& name,
                                      const Distribution& distribution) {
  // The dimensions: the params of the first COMPLETE trial, by name. Read
  // from the history each time, so a restarted sampler uses the same ones.
  const FrozenTrial* first = nullptr;
  for (const auto& t : ctx.trials)
    if (t->state == TrialState::kComplete && t->number != ctx.trial.number) {
      first = t.get();
      break;
    }
  if (first) {
    std::size_t dim = 0;
    for (const auto& [param, value] : first->params) {
      if (param == name) {
        const std::vector<double> u =
            points_.point(static_cast<std::uint64_t>(std::max<std::int64_t>(ctx.trial.number, 0)),
                          first->params.size());
        return from_unit(distribution, u[dim]);
      }
      ++dim;
    }
  }
  return fallback_.sample_independent(ctx, name, distribution);
}

}  // namespace hps
