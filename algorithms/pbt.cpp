#include "algorithms/pbt.h"

#include <algorithm>
#include <cmath>

#include "algorithms/random_sampler.h"

namespace hps::pbt {

namespace {

// A uniform index in [0, n) (n >= 1), the same on every platform.
std::size_t draw_index(std::mt19937_64& rng, std::size_t n) {
  return static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(n));
}

// A uniform double in [0, 1), the same on every platform.
double draw_unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

Json resample(const Distribution& d, std::mt19937_64& rng) {
  return d.to_external(RandomSampler::draw(rng, d));
}

Json perturb_numeric(const Distribution& d, const Json& value, double factor) {
  const double v = d.to_internal(value);
  double moved = v * factor;
  if (d.kind() == DistributionKind::kInt) {
    const double step = d.step() > 0 ? d.step() : 1.0;
    double rounded = d.low() + std::round((moved - d.low()) / step) * step;
    if (rounded == v && factor != 1.0) rounded = factor > 1.0 ? v + step : v - step;
    moved = rounded;
  }
  moved = std::clamp(moved, d.low(), d.high());
  return d.to_external(moved);
}

Json perturb_indexed(const Distribution& d, const Json& value, double factor,
                     std::mt19937_64& rng) {
  const auto n = static_cast<std::int64_t>(d.choices().size());
  const std::int64_t i = d.index_of(value);
  if (n <= 1 || i < 0) return d.choices().at(i < 0 ? 0 : static_cast<std::size_t>(i));
  if (d.kind() == DistributionKind::kCategorical) {
    // Another choice, uniformly: categories have no neighbours.
    auto j = static_cast<std::int64_t>(draw_index(rng, static_cast<std::size_t>(n - 1)));
    if (j >= i) ++j;
    return d.choices()[static_cast<std::size_t>(j)];
  }
  if (factor == 1.0) return value;
  std::int64_t j = factor > 1.0 ? i + 1 : i - 1;
  if (j < 0) j = 1;
  if (j >= n) j = n - 2;
  return d.choices()[static_cast<std::size_t>(j)];
}

}  // namespace

Quantiles quantiles(const std::vector<MemberReport>& reports, StudyDirection direction,
                    std::int64_t quantile_size, std::optional<std::int64_t> judged) {
  Quantiles q;
  const auto k = static_cast<std::size_t>(std::max<std::int64_t>(quantile_size, 0));
  if (k == 0 || reports.size() < 2 * k) return q;
  std::vector<MemberReport> ranked = reports;
  const bool maximize = direction == StudyDirection::kMaximize;
  std::stable_sort(ranked.begin(), ranked.end(), [&](const MemberReport& a, const MemberReport& b) {
    const bool an = std::isnan(a.value), bn = std::isnan(b.value);
    if (an != bn) return bn;  // NaN ranks worst
    if (!an && a.value != b.value) return maximize ? a.value > b.value : a.value < b.value;
    if (judged && (a.member == *judged) != (b.member == *judged)) return b.member == *judged;
    return a.member < b.member;
  });
  for (std::size_t i = 0; i < k; ++i) {
    q.top.push_back(ranked[i].member);
    q.bottom.push_back(ranked[ranked.size() - 1 - i].member);
  }
  return q;
}

bool is_boundary(std::int64_t step, const PbtOptions& options) {
  return options.perturbation_interval > 0 && step > 0 && step < options.max_steps &&
         step % options.perturbation_interval == 0;
}

std::optional<std::int64_t> choose_donor(const std::vector<MemberReport>& reports,
                                         std::int64_t member, StudyDirection direction,
                                         const PbtOptions& options, std::mt19937_64& rng) {
  const Quantiles q = quantiles(reports, direction, options.quantile_size(), member);
  if (std::find(q.bottom.begin(), q.bottom.end(), member) == q.bottom.end()) return std::nullopt;
  return q.top[draw_index(rng, q.top.size())];
}

Params explore(const SearchSpace& space, const Params& params, const PbtOptions& options,
               std::mt19937_64& rng) {
  Params out;
  for (const ParamSpec& spec : space.params()) {
    if (!SearchSpace::is_active(spec, out)) continue;
    const Distribution& d = spec.distribution;
    auto it = params.find(spec.name);
    // The uniform and the factor are drawn for every param, whatever the
    // branch taken.
    const double u = draw_unit(rng);
    const double factor =
        options.perturbation_factors[draw_index(rng, options.perturbation_factors.size())];
    if (it == params.end() || !d.contains(it->second) || u < options.resample_probability) {
      out.insert_or_assign(spec.name, resample(d, rng));
    } else if (d.is_numeric()) {
      out.insert_or_assign(spec.name, perturb_numeric(d, it->second, factor));
    } else {
      out.insert_or_assign(spec.name, perturb_indexed(d, it->second, factor, rng));
    }
  }
  return out;
}

}  // namespace hps::pbt
