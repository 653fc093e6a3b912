#include "algorithms/parzen_estimator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "search/errors.h"

namespace hps::tpe {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kHalfLog2Pi = 0.91893853320467274178;  // 0.5 * log(2 pi)
constexpr double kInvSqrt2 = 0.70710678118654752440;
// A discrete cell narrower than this many bandwidths gets its mass from the
// density at its middle (relative error below 1e-4 * (z^2 - 1)), which costs
// one exp instead of two erfc.
constexpr double kMidpointWidth = 0.05;
// Rejection sampling of a truncated Gaussian accepts with probability >= 0.34
// (its mean lies in the domain and its bandwidth is at most the domain's
// width), so this many tries fail with probability below 1e-11.
constexpr int kMaxRejections = 64;

// P(a < Z < b) for a standard normal Z, a <= b, without cancellation in the
// tails.
double normal_mass(double a, double b) {
  if (a >= 0) return 0.5 * (std::erfc(a * kInvSqrt2) - std::erfc(b * kInvSqrt2));
  if (b <= 0) return 0.5 * (std::erfc(-b * kInvSqrt2) - std::erfc(-a * kInvSqrt2));
  return 1.0 - 0.5 * std::erfc(-a * kInvSqrt2) - 0.5 * std::erfc(b * kInvSqrt2);
}

double safe_log(double x) { return x > 0 ? std::log(x) : -kInf; }

}  // namespace

double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

double standard_normal(std::mt19937_64& rng) {
  for (;;) {
    double u = 2.0 * uniform01(rng) - 1.0;
    double v = 2.0 * uniform01(rng) - 1.0;
    double s = u * u + v * v;
    if (s > 0 && s < 1) return u * std::sqrt(-2.0 * std::log(s) / s);
  }
}

double log_sum_exp(std::span<const double> values) {
  double m = -kInf;
  for (double v : values) m = std::max(m, v);
  if (m == -kInf) return -kInf;
  if (m == kInf) return kInf;
  double s = 0;
  for (double v : values) s += std::exp(v - m);
  return m + std::log(s);
}

// ---------------------------------------------------------------- DimensionSpec

DimensionSpec DimensionSpec::from(const Distribution& d) {
  if (d.single_value()) throw Error("a single-value distribution has nothing to model");
  DimensionSpec s;
  switch (d.kind()) {
    case DistributionKind::kCategorical:
      s.kind = Kind::kCategorical;
      s.count = d.choices().size();
      return s;
    case DistributionKind::kOrdinal:
      s.kind = Kind::kDiscrete;
      s.low = 0;
      s.high = static_cast<double>(d.choices().size() - 1);
      s.step = 1;
      s.count = d.choices().size();
      break;
    case DistributionKind::kFloat:
    case DistributionKind::kInt:
      s.log = d.is_log();
      if (d.step() > 0) {
        s.kind = Kind::kDiscrete;
        s.low = d.low();
        s.high = d.grid_high();
        s.step = d.step();
        s.count = d.cardinality();
      } else {
        s.kind = Kind::kContinuous;
        s.low = d.low();
        s.high = d.high();
      }
      break;
  }
  if (s.kind == Kind::kDiscrete) {
    s.u0 = s.u(s.low - 0.5 * s.step);
    s.u1 = s.u(s.high + 0.5 * s.step);
  } else {
    s.u0 = s.u(s.low);
    s.u1 = s.u(s.high);
  }
  return s;
}

double DimensionSpec::u(double raw) const { return log ? std::log(raw) : raw; }

double DimensionSpec::to_unit(double raw) const {
  // Halves keep u1 - u0 finite even for [-1e308, 1e308].
  return (0.5 * u(raw) - 0.5 * u0) / (0.5 * u1 - 0.5 * u0);
}

double DimensionSpec::from_unit(double t) const {
  double v = (1.0 - t) * u0 + t * u1;
  if (log) v = std::exp(v);
  if (kind == Kind::kDiscrete) return v;
  return std::clamp(v, low, high);
}

double DimensionSpec::center(double internal) const {
  return kind == Kind::kCategorical ? internal : to_unit(internal);
}

double DimensionSpec::snap(double t) const {
  double x = from_unit(t);
  double k = std::round((x - low) / step);
  if (std::isnan(k)) k = 0;
  k = std::clamp(k, 0.0, static_cast<double>(count - 1));
  return std::clamp(low + k * step, low, high);
}

void DimensionSpec::cell(double v, double& e0, double& e1) const {
  e0 = to_unit(v - 0.5 * step);
  e1 = to_unit(v + 0.5 * step);
}

// ---------------------------------------------------------------- ParzenEstimator

ParzenEstimator::ParzenEstimator(std::vector<DimensionSpec> dims,
                                 std::span<const double> observations,
                                 std::span<const double> weights, const EstimatorOptions& options)
    : dims_(std::move(dims)) {
  const std::size_t n_dims = dims_.size();
  if (n_dims == 0) throw Error("ParzenEstimator: no dimensions");
  if (observations.size() % n_dims != 0 || observations.size() / n_dims != weights.size())
    throw Error("ParzenEstimator: observations and weights disagree in size");
  const std::size_t n = weights.size();
  has_prior_ = options.consider_prior || n == 0;
  const std::size_t n_kernels = n + (has_prior_ ? 1 : 0);

  // Mixture weights.
  double prior_w = n == 0 ? 1.0 : options.prior_weight;
  double total = has_prior_ ? prior_w : 0.0;
  for (double w : weights) total += w;
  log_w_.resize(n_kernels);
  cum_w_.resize(n_kernels);
  double acc = 0;
  for (std::size_t k = 0; k < n_kernels; ++k) {
    double w = k < n ? weights[k] : prior_w;
    log_w_[k] = std::log(w / total);
    acc += w / total;
    cum_w_[k] = acc;
  }
  cum_w_.back() = 1.0;
  base_ = log_w_;

  num_.resize(n_dims);
  cat_.resize(n_dims);
  for (std::size_t d = 0; d < n_dims; ++d) {
    if (dims_[d].kind == DimensionSpec::Kind::kCategorical) {
      fit_categorical(d, observations, n, options);
    } else {
      fit_numeric(d, observations, n, options);
      if (options.equal_heights)
        for (std::size_t k = 0; k < n_kernels; ++k) base_[k] += std::log(num_[d].sigma[k]);
    }
  }
}

void ParzenEstimator::fit_numeric(std::size_t d, std::span<const double> obs, std::size_t n,
                                  const EstimatorOptions& opt) {
  const DimensionSpec& dim = dims_[d];
  const std::size_t n_dims = dims_.size();
  const std::size_t n_kernels = log_w_.size();
  // The transformed domain is [0, 1].
  constexpr double t_low = 0.0, t_high = 1.0, range = 1.0;
  NumericKernels& kern = num_[d];
  kern.mu.resize(n_kernels);
  kern.sigma.resize(n_kernels);
  for (std::size_t i = 0; i < n; ++i)
    kern.mu[i] = std::clamp(dim.center(obs[i * n_dims + d]), t_low, t_high);
  if (has_prior_) kern.mu[n] = 0.5 * (t_low + t_high);

  // Smallest bandwidth.
  double floor = std::max(1e-12 * range, opt.min_bandwidth_factor * range);
  if (opt.consider_magic_clip)
    floor = std::max(floor, range / std::min(100.0, 1.0 + static_cast<double>(n_kernels)));

  const double dim_exponent = -1.0 / (static_cast<double>(n_dims) + 4.0);
  auto range_rule = [&] {
    return 0.2 * range * std::pow(std::max<double>(1.0, static_cast<double>(n)), dim_exponent);
  };

  if (opt.bandwidth == BandwidthRule::kNeighbor) {
    // Sort the means (prior included, as Bergstra et al.) and take the larger
    // gap to a neighbour.
    std::vector<std::size_t> order(n_kernels);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return kern.mu[a] < kern.mu[b] || (kern.mu[a] == kern.mu[b] && a < b);
    });
    for (std::size_t p = 0; p < n_kernels; ++p) {
      double x = kern.mu[order[p]];
      double s = -1;
      if (p > 0) s = std::max(s, x - kern.mu[order[p - 1]]);
      else if (opt.consider_endpoints) s = std::max(s, x - t_low);
      if (p + 1 < n_kernels) s = std::max(s, kern.mu[order[p + 1]] - x);
      else if (opt.consider_endpoints) s = std::max(s, t_high - x);
      if (s < 0) s = range;  // a single point and no endpoints
      kern.sigma[order[p]] = opt.bandwidth_factor * s;
    }
  } else {
    double s = -1;
    if (opt.bandwidth == BandwidthRule::kScott && n >= 2) {
      double mean = 0;
      for (std::size_t i = 0; i < n; ++i) mean += kern.mu[i];
      mean /= static_cast<double>(n);
      double var = 0;
      for (std::size_t i = 0; i < n; ++i) var += (kern.mu[i] - mean) * (kern.mu[i] - mean);
      double sd = std::sqrt(var / static_cast<double>(n - 1));
      std::vector<double> sorted(kern.mu.begin(), kern.mu.begin() + static_cast<std::ptrdiff_t>(n));
      auto q1 = sorted.begin() + static_cast<std::ptrdiff_t>(n / 4);
      std::nth_element(sorted.begin(), q1, sorted.end());
      double lo = *q1;
      auto q3 = sorted.begin() + static_cast<std::ptrdiff_t>((3 * n) / 4);
      std::nth_element(sorted.begin(), q3, sorted.end());
      double iqr = *q3 - lo;
      double spread = iqr > 0 ? std::min(sd, iqr / 1.349) : sd;
      s = 1.059 * spread * std::pow(static_cast<double>(n), dim_exponent);
    }
    if (s < 0) s = range_rule();
    s *= opt.bandwidth_factor;
    for (std::size_t k = 0; k < n; ++k) kern.sigma[k] = s;
  }
  for (std::size_t k = 0; k < n; ++k) kern.sigma[k] = std::clamp(kern.sigma[k], floor, range);
  if (has_prior_) kern.sigma[n] = range;

  kern.inv_sigma.resize(n_kernels);
  kern.log_z.resize(n_kernels);
  for (std::size_t k = 0; k < n_kernels; ++k) {
    kern.inv_sigma[k] = 1.0 / kern.sigma[k];
    double a = (t_low - kern.mu[k]) * kern.inv_sigma[k];
    double b = (t_high - kern.mu[k]) * kern.inv_sigma[k];
    // A kernel more than 9 bandwidths from both ends loses under 1e-18.
    kern.log_z[k] = a < -9.0 && b > 9.0 ? 0.0 : safe_log(normal_mass(a, b));
    if (dim.kind == DimensionSpec::Kind::kContinuous)
      base_[k] += -std::log(kern.sigma[k]) - kern.log_z[k] - kHalfLog2Pi;
  }
}

void ParzenEstimator::fit_categorical(std::size_t d, std::span<const double> obs, std::size_t n,
                                      const EstimatorOptions&) {
  const std::size_t n_dims = dims_.size();
  const std::size_t n_kernels = log_w_.size();
  const std::size_t c = dims_[d].count;
  const double kc = static_cast<double>(c);
  // Aitchison-Aitken smoothing: shrinks as observations accumulate.
  const double lambda = 1.0 / (1.0 + static_cast<double>(n));
  CategoricalKernels& kern = cat_[d];
  kern.log_p.assign(n_kernels * c, 0.0);
  kern.cum_p.assign(n_kernels * c, 0.0);
  for (std::size_t k = 0; k < n_kernels; ++k) {
    double* p = &kern.log_p[k * c];
    if (k < n) {
      double idx = std::clamp(std::round(obs[k * n_dims + d]), 0.0, kc - 1);
      for (std::size_t j = 0; j < c; ++j) p[j] = lambda / kc;
      p[static_cast<std::size_t>(idx)] += 1.0 - lambda;
    } else {
      for (std::size_t j = 0; j < c; ++j) p[j] = 1.0 / kc;
    }
    double acc = 0;
    for (std::size_t j = 0; j < c; ++j) {
      acc += p[j];
      kern.cum_p[k * c + j] = acc;
      p[j] = std::log(p[j]);
    }
    kern.cum_p[k * c + c - 1] = 1.0;
  }
}

void ParzenEstimator::sample(std::mt19937_64& rng, std::size_t count,
                             std::vector<double>& out) const {
  const std::size_t n_dims = dims_.size();
  out.resize(count * n_dims);
  for (std::size_t j = 0; j < count; ++j) {
    double u = uniform01(rng);
    std::size_t k = static_cast<std::size_t>(
        std::upper_bound(cum_w_.begin(), cum_w_.end(), u) - cum_w_.begin());
    k = std::min(k, cum_w_.size() - 1);
    for (std::size_t d = 0; d < n_dims; ++d) {
      const DimensionSpec& dim = dims_[d];
      double& x = out[j * n_dims + d];
      if (dim.kind == DimensionSpec::Kind::kCategorical) {
        const double* cum = &cat_[d].cum_p[k * dim.count];
        double v = uniform01(rng);
        std::size_t c = static_cast<std::size_t>(std::upper_bound(cum, cum + dim.count, v) - cum);
        x = static_cast<double>(std::min<std::size_t>(c, dim.count - 1));
        continue;
      }
      const double mu = num_[d].mu[k], sigma = num_[d].sigma[k];
      double y = mu;
      for (int t = 0; t < kMaxRejections; ++t) {
        double cand = mu + sigma * standard_normal(rng);
        if (cand >= 0.0 && cand <= 1.0) {
          y = cand;
          break;
        }
      }
      if (dim.kind == DimensionSpec::Kind::kDiscrete) {
        x = dim.snap(y);
      } else {
        x = dim.from_unit(y);
      }
    }
  }
}

void ParzenEstimator::log_pdf(std::span<const double> points, std::span<double> out) const {
  const std::size_t n_dims = dims_.size();
  const std::size_t n_kernels = log_w_.size();
  std::vector<double> acc(n_kernels);
  for (std::size_t j = 0; j < out.size(); ++j) {
    std::copy(base_.begin(), base_.end(), acc.begin());
    for (std::size_t d = 0; d < n_dims; ++d) {
      const DimensionSpec& dim = dims_[d];
      const double v = points[j * n_dims + d];
      if (dim.kind == DimensionSpec::Kind::kCategorical) {
        std::size_t c = static_cast<std::size_t>(
            std::clamp(std::round(v), 0.0, static_cast<double>(dim.count - 1)));
        const double* lp = cat_[d].log_p.data();
        for (std::size_t k = 0; k < n_kernels; ++k) acc[k] += lp[k * dim.count + c];
        continue;
      }
      const NumericKernels& kern = num_[d];
      const double* mu = kern.mu.data();
      const double* inv = kern.inv_sigma.data();
      if (dim.kind == DimensionSpec::Kind::kContinuous) {
        const double x = dim.to_unit(v);
        double* a = acc.data();
        for (std::size_t k = 0; k < n_kernels; ++k) {
          double z = (x - mu[k]) * inv[k];
          a[k] -= 0.5 * z * z;
        }
        continue;
      }
      double e0, e1;
      dim.cell(v, e0, e1);
      const double mid = 0.5 * (e0 + e1), width = e1 - e0;
      for (std::size_t k = 0; k < n_kernels; ++k) {
        double a = (e0 - mu[k]) * inv[k], b = (e1 - mu[k]) * inv[k];
        double lm;
        if (b - a < kMidpointWidth) {
          double z = (mid - mu[k]) * inv[k];
          lm = -0.5 * z * z - kHalfLog2Pi + std::log(width * inv[k]);
        } else {
          lm = safe_log(normal_mass(a, b));
        }
        acc[k] += lm - kern.log_z[k];
      }
    }
    out[j] = log_sum_exp(acc);
  }
}

}  // namespace hps::tpe
