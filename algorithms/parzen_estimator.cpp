// The kernels' hot loops (exp, Gaussian exponents) must vectorize; GCC
// if-converts the clamp in exp_nonpositive() only without trapping math.
// hpsearch never enables floating-point exceptions, so nothing changes.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "algorithms/parzen_estimator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include "algorithms/buffer_pool.h"
#include "search/errors.h"
#include "search/util/random.h"

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
// log_pdf() of a one-dimensional estimator with at least kMinWindowKernels
// kernels visits only kernels within kWindow bandwidths of the point (one
// further away adds under e^-32 = 1e-14 of its peak).
constexpr double kWindow = 8.0;
constexpr std::size_t kMinWindowKernels = 64;
// log_pdf() of a multi-dimensional estimator with many kernels computes
// the points' terms this many kernels at a time (log_pdf_blocked).
constexpr std::size_t kKernelBlock = 1024;

// P(a < Z < b) for a standard normal Z, a <= b, without cancellation in the
// tails.
double normal_mass(double a, double b) {
  if (a >= 0) return 0.5 * (std::erfc(a * kInvSqrt2) - std::erfc(b * kInvSqrt2));
  if (b <= 0) return 0.5 * (std::erfc(-b * kInvSqrt2) - std::erfc(-a * kInvSqrt2));
  return 1.0 - 0.5 * std::erfc(-a * kInvSqrt2) - 0.5 * std::erfc(b * kInvSqrt2);
}

double safe_log(double x) { return x > 0 ? std::log(x) : -kInf; }

// log Phi(b) for b >= 0 (Phi the standard normal CDF), from a table on
// [0, kTableEnd] with cubic Hermite interpolation (values and slopes at the
// nodes; error below 1e-10), and 0 beyond (where -log Phi < 1e-19). The
// normalizers of thousands of kernels need it on every suggestion; erfc
// would cost several times more.
class LogPhiTable {
 public:
  LogPhiTable() {
    for (int i = 0; i <= kNodes; ++i) {
      double b = i * kStep;
      double phi_cdf = 0.5 * std::erfc(-b * kInvSqrt2);
      double pdf = std::exp(-0.5 * b * b) * 0.39894228040143267794;
      value_[i] = std::log(phi_cdf);
      slope_[i] = pdf / phi_cdf;
    }
  }
  double operator()(double b) const { return b >= kTableEnd ? 0.0 : interpolate(b); }
  // The same value as operator() for b >= 0, computed without a branch on
  // b (a select at the end), so that a loop over many kernels does not
  // mispredict: beyond the table the interpolation runs on its last
  // interval and its result is dropped.
  double select(double b) const {
    const double v = interpolate(std::min(b, kTableEnd - kStep));
    // +0.0 beyond the table: the bits of v masked off.
    const std::uint64_t keep = std::uint64_t{0} - static_cast<std::uint64_t>(b < kTableEnd);
    return std::bit_cast<double>(std::bit_cast<std::uint64_t>(v) & keep);
  }

 private:
  static constexpr double kTableEnd = 9.0;
  static constexpr double kStep = 1.0 / 128;
  static constexpr int kNodes = static_cast<int>(kTableEnd / kStep);
  // The cubic Hermite interpolation at 0 <= b < kTableEnd.
  double interpolate(double b) const {
    double t = b / kStep;
    int i = static_cast<int>(t);
    double u = t - i;
    double h00 = (1 + 2 * u) * (1 - u) * (1 - u), h10 = u * (1 - u) * (1 - u);
    double h01 = u * u * (3 - 2 * u), h11 = u * u * (u - 1);
    return h00 * value_[i] + h10 * kStep * slope_[i] + h01 * value_[i + 1] +
           h11 * kStep * slope_[i + 1];
  }
  double value_[kNodes + 1];
  double slope_[kNodes + 1];
};

// exp(x) for x <= 0 with relative error below 1e-13 (x < -708, -inf
// included, gives about 1e-308 instead of 0: nothing next to the term 1 that
// every shifted sum holds). Plain arithmetic so that loops over it
// vectorize: x = k ln2 + r with |r| <= ln2/2, exp(r) by its Taylor
// polynomial of degree 11, 2^k by building the exponent bits.
inline double exp_nonpositive(double x) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShift = 0x1.8p52;  // adding it rounds to an integer
  x = x < -708.0 ? -708.0 : x;
  double t = x * kLog2e + kShift;
  double k = t - kShift;
  std::int64_t ki = std::bit_cast<std::int64_t>(t) - std::bit_cast<std::int64_t>(kShift);
  double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  return p * std::bit_cast<double>((ki + 1023) << 52);
}

// out[i] = exp(v[i] - m) for i < n, all v[i] <= m. Same dispatch as below.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx2", "default")))
#endif
void exp_shifted(const double* v, double* out, std::size_t n, double m) {
  for (std::size_t i = 0; i < n; ++i) out[i] = exp_nonpositive(v[i] - m);
}

// log(sum(exp(v[i]))) for i < n; scratch holds n doubles.
double log_sum_exp(const double* v, std::size_t n, double* scratch) {
  double m0 = -kInf, m1 = -kInf;
  std::size_t k = 0;
  for (; k + 2 <= n; k += 2) {
    m0 = v[k] > m0 ? v[k] : m0;
    m1 = v[k + 1] > m1 ? v[k + 1] : m1;
  }
  if (k < n) m0 = v[k] > m0 ? v[k] : m0;
  const double m = std::max(m0, m1);
  if (m == -kInf || m == kInf) return m;
  exp_shifted(v, scratch, n, m);
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += scratch[k];
    s1 += scratch[k + 1];
    s2 += scratch[k + 2];
    s3 += scratch[k + 3];
  }
  for (; k < n; ++k) s0 += scratch[k];
  return m + std::log((s0 + s1) + (s2 + s3));
}

// acc[k] -= ((x - mu[k]) * inv[k])^2 / 2 for k < n: the hot loop of
// multivariate TPE. Compiled twice (AVX2 where the CPU has it, SSE2
// otherwise) and picked at load time; both give bit-identical results (no
// FMA contraction). Not under ThreadSanitizer: the ifunc resolver that
// picks the clone runs before the TSan runtime is set up and crashes.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx2", "default")))
#endif
void add_gaussian_exponents(double* acc, const double* mu, const double* inv, double x,
                            std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    double z = (x - mu[k]) * inv[k];
    acc[k] -= 0.5 * z * z;
  }
}

// Built at load time (a function-local static costs a guard per call; the
// normalizers of a 10-D estimator at 100,000 trials call it ~10^5 times).
const LogPhiTable kLogPhiTable;

inline double log_phi_nonnegative(double b) { return kLogPhiTable(b); }

}  // namespace

double log_sum_exp(std::span<const double> values) {
  std::vector<double> scratch(values.size());
  return log_sum_exp(values.data(), values.size(), scratch.data());
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

double DimensionSpec::narrowest_cell() const {
  double e0 = 0, e1 = 0;
  cell(high, e0, e1);
  return e1 - e0;
}

// ---------------------------------------------------------------- ParzenEstimator

namespace {

// The transformed domain of numeric dimensions is [0, 1].
constexpr double kUnitLow = 0.0, kUnitHigh = 1.0, kUnitRange = 1.0;

// Throws Error unless the sizes agree and the weights are finite and > 0.
void check_inputs(std::size_t n_dims, std::span<const double> observations,
                  std::span<const double> weights, const EstimatorOptions& options) {
  if (n_dims == 0) throw Error("ParzenEstimator: no dimensions");
  if (observations.size() % n_dims != 0 || observations.size() / n_dims != weights.size())
    throw Error("ParzenEstimator: observations and weights disagree in size");
  for (double w : weights)
    if (!(w > 0) || !std::isfinite(w))
      throw Error("ParzenEstimator: weights must be finite and > 0");
  if (!(options.prior_weight > 0) || !std::isfinite(options.prior_weight))
    throw Error("ParzenEstimator: prior_weight must be finite and > 0");
}

// Kernel indices sorted by mean `mu` (ties by index): observations 0..n-1
// from `hint` if given, else sorted here; with a prior (index n), it goes
// after the observations with the same mean.
std::vector<std::size_t> kernels_by_mean(const std::vector<double>& mu, std::size_t n,
                                         bool has_prior, const std::vector<std::size_t>* hint) {
  std::vector<std::size_t> order = pool<std::size_t>().take(mu.size());
  if (hint && has_prior) {
    // The hint with the prior inserted after the observations of its mean:
    // one copy, no shift of the tail.
    auto at = std::upper_bound(hint->begin(), hint->end(), mu[n],
                               [&](double m, std::size_t k) { return m < mu[k]; });
    order.insert(order.end(), hint->begin(), at);
    order.push_back(n);
    order.insert(order.end(), at, hint->end());
    return order;
  }
  if (hint) {
    order.assign(hint->begin(), hint->end());
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return mu[a] < mu[b] || (mu[a] == mu[b] && a < b);
    });
  }
  if (has_prior) {
    auto at = std::upper_bound(order.begin(), order.end(), mu[n],
                               [&](double m, std::size_t k) { return m < mu[k]; });
    order.insert(at, n);
  }
  return order;
}

// The neighbour rule (Bergstra et al. 2011): each kernel's bandwidth
// (before clipping, times bandwidth_factor) is the larger gap to its
// neighbours among the means sorted by `order` (prior included); the
// domain's ends count as neighbours with consider_endpoints.
void neighbor_bandwidths_in_order(const std::vector<double>& mu, const EstimatorOptions& opt,
                                  std::vector<double>& sigma);

void neighbor_bandwidths(const std::vector<double>& mu, const std::vector<std::size_t>& order,
                         const EstimatorOptions& opt, std::vector<double>& sigma) {
  // The means gathered in order once (one random read per kernel instead
  // of three), the gaps taken in order, the bandwidths put back.
  const std::size_t n_kernels = order.size();
  std::vector<double> sorted = pool<double>().take(n_kernels);
  const PooledScope<double> keep_sorted(sorted);
  for (std::size_t k : order) sorted.push_back(mu[k]);
  std::vector<double> by_place = pooled<double>(n_kernels);
  const PooledScope<double> keep_by_place(by_place);
  neighbor_bandwidths_in_order(sorted, opt, by_place);
  for (std::size_t p = 0; p < n_kernels; ++p) sigma[order[p]] = by_place[p];
}

// neighbor_bandwidths() with the identity order: `mu` sorted (places in
// mean order), the same arithmetic without an order array.
void neighbor_bandwidths_in_order(const std::vector<double>& mu, const EstimatorOptions& opt,
                                  std::vector<double>& sigma) {
  const std::size_t n_kernels = mu.size();
  for (std::size_t p = 0; p < n_kernels; ++p) {
    double x = mu[p];
    double s = -1;
    if (p > 0)
      s = std::max(s, x - mu[p - 1]);
    else if (opt.consider_endpoints)
      s = std::max(s, x - kUnitLow);
    if (p + 1 < n_kernels)
      s = std::max(s, mu[p + 1] - x);
    else if (opt.consider_endpoints)
      s = std::max(s, kUnitHigh - x);
    if (s < 0) s = kUnitRange;  // a single point and no endpoints
    sigma[p] = opt.bandwidth_factor * s;
  }
}

// Scott's rule over the means of the n >= 2 observations:
// 1.059 * min(sd, IQR / 1.349) * n^dim_exponent.
double scott_bandwidth(const std::vector<double>& mu, std::size_t n, double dim_exponent) {
  double mean = 0;
  for (std::size_t i = 0; i < n; ++i) mean += mu[i];
  mean /= static_cast<double>(n);
  double var = 0;
  for (std::size_t i = 0; i < n; ++i) var += (mu[i] - mean) * (mu[i] - mean);
  double sd = std::sqrt(var / static_cast<double>(n - 1));
  std::vector<double> sorted(mu.begin(), mu.begin() + static_cast<std::ptrdiff_t>(n));
  auto q1 = sorted.begin() + static_cast<std::ptrdiff_t>(n / 4);
  std::nth_element(sorted.begin(), q1, sorted.end());
  double lo = *q1;
  auto q3 = sorted.begin() + static_cast<std::ptrdiff_t>((3 * n) / 4);
  std::nth_element(sorted.begin(), q3, sorted.end());
  double iqr = *q3 - lo;
  double spread = iqr > 0 ? std::min(sd, iqr / 1.349) : sd;
  return 1.059 * spread * std::pow(static_cast<double>(n), dim_exponent);
}

// The one bandwidth of the Scott and range rules (before clipping, times
// bandwidth_factor), for n observations with means `mu`.
double shared_bandwidth(const std::vector<double>& mu, std::size_t n, const EstimatorOptions& opt,
                        double dim_exponent) {
  double s = -1;
  if (opt.bandwidth == BandwidthRule::kScott && n >= 2) s = scott_bandwidth(mu, n, dim_exponent);
  if (s < 0)
    s = 0.2 * kUnitRange * std::pow(std::max<double>(1.0, static_cast<double>(n)), dim_exponent);
  return s * opt.bandwidth_factor;
}

// The smallest bandwidth for n_kernels kernels of `dim`: min_bandwidth_factor
// of the domain, min_bandwidth_cells of a discrete one's cells, and
// Bergstra's magic clip.
double smallest_bandwidth(const EstimatorOptions& opt, const DimensionSpec& dim,
                          std::size_t n_kernels) {
  double floor = std::max(1e-12 * kUnitRange, opt.min_bandwidth_factor * kUnitRange);
  if (dim.kind == DimensionSpec::Kind::kDiscrete && opt.min_bandwidth_cells > 0)
    floor = std::max(floor, std::min(kUnitRange, opt.min_bandwidth_cells * dim.narrowest_cell()));
  if (opt.consider_magic_clip)
    floor = std::max(floor, kUnitRange / std::min(100.0, 1.0 + static_cast<double>(n_kernels)));
  return floor;
}

// log of the mass inside the domain of the Gaussian with mean mu (in the
// domain) and 1/sigma inv_sigma.
double log_mass_in_domain(double mu, double inv_sigma) {
  double a = (kUnitLow - mu) * inv_sigma;
  double b = (kUnitHigh - mu) * inv_sigma;
  // Beyond 9 bandwidths a tail holds under 1e-18: ignore it (and its erfc).
  // (The mean lies in the domain, so a <= 0 <= b.)
  if (a < -9.0 && b > 9.0) return 0.0;
  if (a < -9.0) return log_phi_nonnegative(b);
  if (b > 9.0) return log_phi_nonnegative(-a);
  return safe_log(normal_mass(a, b));
}

// out[k] = log_mass_in_domain(mu[k], inv[k]) for k < n, the same values,
// for the normalizers of many kernels (a 10-D estimator at 100,000 trials
// needs 10^6 of them per suggestion). With a narrow bandwidth at most one
// tail is within 9 bandwidths of the mean: then the mass is
// log Phi(min(-a, b)), which is 0 (log_phi's table ends at 9) when both are
// beyond, computed without a branch on which case it is (at random means,
// those branches were mispredicted for a third of the kernels).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx2", "default")))
#endif
void log_masses_in_domain(const double* mu, const double* inv, double* out, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    const double a = (kUnitLow - mu[k]) * inv[k];
    const double b = (kUnitHigh - mu[k]) * inv[k];
    // One branch, and a predictable one: taken for (nearly) every kernel
    // or for (nearly) none, as the bandwidths are wide or narrow.
    const bool near = static_cast<int>(a >= -9.0) & static_cast<int>(b <= 9.0);
    if (near)
      out[k] = safe_log(normal_mass(a, b));
    else
      out[k] = kLogPhiTable.select(std::min(-a, b));
  }
}

// The element of rank floor(0.9 n) of v (n = v.size() > 0), as
// std::nth_element finds it. At large n the magic clip gives most kernels
// the smallest bandwidth: when that value fills the rank, it is the answer
// without a copy and a selection.
double percentile90(const std::vector<double>& v) {
  const std::size_t rank = (v.size() * 9) / 10;
  double lo = v[0];
  std::size_t at_lo = 0;
  for (double x : v) {
    if (x < lo) {
      lo = x;
      at_lo = 0;
    }
    at_lo += x == lo ? 1 : 0;
  }
  if (at_lo > rank) return lo;
  std::vector<double> sig = v;
  auto p90 = sig.begin() + static_cast<std::ptrdiff_t>(rank);
  std::nth_element(sig.begin(), p90, sig.end());
  return *p90;
}

// Grows both buffers to at least n elements.
void grow(std::vector<double>& a, std::vector<double>& b, std::size_t n) {
  if (a.size() < n) a.resize(n);
  if (b.size() < n) b.resize(n);
}

}  // namespace

ParzenEstimator::ParzenEstimator(std::vector<DimensionSpec> dims,
                                 std::span<const double> observations,
                                 std::span<const double> weights, const EstimatorOptions& options,
                                 const std::vector<std::vector<std::size_t>>* orders,
                                 NormalizerMemos* memos)
    : ParzenEstimator(std::move(dims), observations, weights, options, orders, {}, {}, memos) {}

void ParzenEstimator::log_pdf_at(std::vector<DimensionSpec> dims,
                                 std::span<const double> observations,
                                 std::span<const double> weights, const EstimatorOptions& options,
                                 const std::vector<std::vector<std::size_t>>* orders,
                                 std::span<const double> points, std::span<double> out,
                                 std::span<const double> log_weights) {
  if (!log_weights.empty() && log_weights.size() != weights.size())
    throw Error("ParzenEstimator: log_weights and weights disagree in size");
  const ParzenEstimator e(std::move(dims), observations, weights, options, orders, points,
                          log_weights, nullptr);
  e.log_pdf(points, out);
}

ParzenEstimator::ParzenEstimator(std::vector<DimensionSpec> dims,
                                 std::span<const double> observations,
                                 std::span<const double> weights, const EstimatorOptions& options,
                                 const std::vector<std::vector<std::size_t>>* orders,
                                 std::span<const double> points,
                                 std::span<const double> log_weights, NormalizerMemos* memos)
    : dims_(std::move(dims)) {
  const std::size_t n_dims = dims_.size();
  check_inputs(n_dims, observations, weights, options);
  const std::size_t n = weights.size();
  has_prior_ = options.consider_prior || n == 0;
  density_only_ = options.density_only;
  num_.resize(n_dims);
  cat_.resize(n_dims);
  const std::size_t n_kernels = n + (has_prior_ ? 1 : 0);
  if (density_only_ && n_dims == 1 && dims_[0].kind != DimensionSpec::Kind::kCategorical &&
      options.bandwidth == BandwidthRule::kNeighbor && n_kernels >= kMinWindowKernels) {
    const std::vector<std::size_t>* order = nullptr;
    if (orders && !orders->empty() && (*orders)[0].size() == n) order = &(*orders)[0];
    fit_by_mean(observations, weights, options, order, points, log_weights);
    build_window();
    return;
  }
  fit_weights(weights, options);
  for (std::size_t d = 0; d < n_dims; ++d) {
    if (dims_[d].kind == DimensionSpec::Kind::kCategorical) {
      fit_categorical(d, observations, n, options);
      continue;
    }
    const std::vector<std::size_t>* order = nullptr;
    if (orders && d < orders->size() && (*orders)[d].size() == n) order = &(*orders)[d];
    fit_numeric(d, observations, n, options, order, memos);
    add_normalizers(d, options);
  }
  build_window();
}

void ParzenEstimator::fit_by_mean(std::span<const double> obs, std::span<const double> weights,
                                  const EstimatorOptions& opt, const std::vector<std::size_t>* hint,
                                  std::span<const double> points,
                                  std::span<const double> log_weights) {
  const DimensionSpec& dim = dims_[0];
  const std::size_t n = weights.size();
  const std::size_t n_kernels = n + (has_prior_ ? 1 : 0);
  // fit_weights(): the total in the observations' order.
  const double prior_w = n == 0 ? 1.0 : opt.prior_weight;
  double total = has_prior_ ? prior_w : 0.0;
  for (double w : weights) total += w;
  const double log_total = std::log(total);
  // fit_numeric(): the means in observation order (the prior's place in the
  // order is found from them), then every array in mean order.
  std::vector<double> mu = pool<double>().take(n_kernels);
  const PooledScope<double> keep_mu(mu);
  if (!dim.log) {
    // DimensionSpec::to_unit() without the log: the same arithmetic in a
    // loop that vectorizes.
    const double h0 = 0.5 * dim.u0, den = 0.5 * dim.u1 - 0.5 * dim.u0;
    mu.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double t = (0.5 * obs[i] - h0) / den;
      mu[i] = t < kUnitLow ? kUnitLow : (kUnitHigh < t ? kUnitHigh : t);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i)
      mu.push_back(std::clamp(dim.center(obs[i]), kUnitLow, kUnitHigh));
  }
  if (has_prior_) mu.push_back(0.5 * (kUnitLow + kUnitHigh));
  by_mean_ = kernels_by_mean(mu, n, has_prior_, hint);
  NumericKernels& kern = num_[0];
  kern.mu = pool<double>().take(n_kernels);
  for (std::size_t k : by_mean_) kern.mu.push_back(mu[k]);
  // In mean order the neighbours of place p are places p - 1 and p + 1:
  // neighbor_bandwidths() over the identity order, then the clip.
  kern.sigma = pooled<double>(n_kernels);
  neighbor_bandwidths_in_order(kern.mu, opt, kern.sigma);
  const double floor = smallest_bandwidth(opt, dim, n_kernels);
  for (std::size_t p = 0; p < n_kernels; ++p)
    kern.sigma[p] = by_mean_[p] == n ? kUnitRange : std::clamp(kern.sigma[p], floor, kUnitRange);
  // build_window()'s cut, found once for mark_needed_kernels() too.
  cut_ = percentile90(kern.sigma);
  // The kernels log_pdf() visits at `points` (all without points).
  std::vector<char> need = pool<char>().take(points.empty() ? 0 : n_kernels);
  const PooledScope<char> keep_need(need);
  if (!points.empty()) mark_needed_kernels(points, need);
  fill_by_mean_normalizers(weights, prior_w, log_total, opt, need, log_weights);
}

void ParzenEstimator::mark_needed_kernels(std::span<const double> points,
                                          std::vector<char>& need) const {
  const NumericKernels& kern = num_[0];
  const std::size_t n_kernels = kern.mu.size();
  const double cut = cut_;
  const double window = kWindow * cut;
  // +1 where a point's range starts, -1 after it ends.
  std::vector<int> starts = pooled<int>(n_kernels + 1, 0);
  const PooledScope<int> keep_starts(starts);
  bool any_wide = false;
  for (double v : points) {
    const NumericPoint pt = numeric_point(0, v);
    const double lo = (pt.continuous ? pt.x : pt.e0) - window;
    const double hi = (pt.continuous ? pt.x : pt.e1) + window;
    const auto first = std::lower_bound(kern.mu.begin(), kern.mu.end(), lo) - kern.mu.begin();
    const auto last = std::upper_bound(kern.mu.begin(), kern.mu.end(), hi) - kern.mu.begin();
    if (first >= last) continue;
    ++starts[static_cast<std::size_t>(first)];
    --starts[static_cast<std::size_t>(last)];
  }
  need.assign(n_kernels, 0);
  int depth = 0;
  for (std::size_t p = 0; p < n_kernels; ++p) {
    depth += starts[p];
    const bool wide = kern.sigma[p] > cut;
    any_wide = any_wide || wide;
    need[p] = depth > 0 || wide ? 1 : 0;
  }
  // No wide kernel: a point with an empty window sums every kernel.
  if (!any_wide) need.clear();
}

void ParzenEstimator::fill_by_mean_normalizers(std::span<const double> weights, double prior_w,
                                               double log_total, const EstimatorOptions& opt,
                                               const std::vector<char>& need,
                                               std::span<const double> log_weights) {
  const bool continuous = dims_[0].kind == DimensionSpec::Kind::kContinuous;
  const std::size_t n = weights.size();
  NumericKernels& kern = num_[0];
  const std::size_t n_kernels = kern.mu.size();
  // What log_pdf() reads: base_ and 1/sigma (and, discrete, log sigma for
  // numeric_term()); zeros for the kernels not needed, the needed ones
  // written in place. A density-only estimator keeps no log_w_ and log_z
  // (folded into base_).
  kern.inv_sigma = pooled<double>(n_kernels);
  if (!continuous) kern.log_sigma = pooled<double>(n_kernels);
  base_ = pooled<double>(n_kernels);
  // Many kernels share the clipped bandwidth: reuse the last 1/sigma and
  // log (the same values).
  double last_sigma = -1, last_inv = 0, last_log_sigma = 0;
  for (std::size_t p = 0; p < n_kernels; ++p) {
    if (!need.empty() && !need[p]) continue;
    if (kern.sigma[p] != last_sigma) {
      last_sigma = kern.sigma[p];
      last_inv = 1.0 / last_sigma;
      last_log_sigma = std::log(last_sigma);
    }
    const double inv = last_inv;
    kern.inv_sigma[p] = inv;
    if (!continuous) kern.log_sigma[p] = last_log_sigma;
    const double log_z = log_mass_in_domain(kern.mu[p], inv);
    // fit_weights() and add_normalizers() for this kernel.
    const std::size_t k = by_mean_[p];
    // log w (0 for the many weights of 1), from log_weights when given
    // (one read of it instead of weights: k is at random).
    double log_of_w = 0.0;
    if (k < n && !log_weights.empty()) {
      log_of_w = log_weights[k];
    } else {
      const double w = k < n ? weights[k] : prior_w;
      if (w != 1.0) log_of_w = std::log(w);
    }
    double base = log_of_w - log_total;
    const double ls = continuous != opt.equal_heights ? last_log_sigma : 0.0;
    base += (continuous ? -ls : ls) - log_z;
    if (continuous) base -= kHalfLog2Pi;
    base_[p] = base;
  }
}

std::size_t ParzenEstimator::stored(std::size_t k) const {
  if (by_mean_.empty()) return k;
  return static_cast<std::size_t>(std::find(by_mean_.begin(), by_mean_.end(), k) -
                                  by_mean_.begin());
}

void ParzenEstimator::fit_weights(std::span<const double> weights,
                                  const EstimatorOptions& options) {
  const std::size_t n = weights.size();
  const std::size_t n_kernels = n + (has_prior_ ? 1 : 0);
  double prior_w = n == 0 ? 1.0 : options.prior_weight;
  double total = has_prior_ ? prior_w : 0.0;
  for (double w : weights) total += w;
  log_w_ = pool<double>().take(n_kernels);
  cum_w_ = pool<double>().take(n_kernels);
  double acc = 0;
  const double log_total = std::log(total);
  for (std::size_t k = 0; k < n_kernels; ++k) {
    double w = k < n ? weights[k] : prior_w;
    log_w_.push_back((w == 1.0 ? 0.0 : std::log(w)) - log_total);  // most weights are 1
    acc += w / total;
    cum_w_.push_back(acc);
  }
  cum_w_.back() = 1.0;
  base_ = pool<double>().take(n_kernels);
  base_.assign(log_w_.begin(), log_w_.end());
}

void ParzenEstimator::add_normalizers(std::size_t d, const EstimatorOptions& options) {
  const bool continuous = dims_[d].kind == DimensionSpec::Kind::kContinuous;
  const std::size_t n_kernels = log_w_.size();
  for (std::size_t k = 0; k < n_kernels; ++k) {
    // Continuous: the density's 1/sigma (cancelled by equal heights).
    // Discrete: masses need no 1/sigma; equal heights multiply by sigma.
    double ls = continuous != options.equal_heights ? num_[d].log_sigma[k] : 0.0;
    base_[k] += (continuous ? -ls : ls) - num_[d].log_z[k];
    if (continuous) base_[k] -= kHalfLog2Pi;
  }
}

void ParzenEstimator::fit_numeric(std::size_t d, std::span<const double> obs, std::size_t n,
                                  const EstimatorOptions& opt, const std::vector<std::size_t>* hint,
                                  NormalizerMemos* memos) {
  const DimensionSpec& dim = dims_[d];
  const std::size_t n_dims = dims_.size();
  const std::size_t n_kernels = log_w_.size();
  NumericKernels& kern = num_[d];
  kern.mu = pool<double>().take(n_kernels);
  kern.sigma = pooled<double>(n_kernels);
  for (std::size_t i = 0; i < n; ++i)
    kern.mu.push_back(std::clamp(dim.center(obs[i * n_dims + d]), kUnitLow, kUnitHigh));
  if (has_prior_) kern.mu.push_back(0.5 * (kUnitLow + kUnitHigh));

  if (opt.bandwidth == BandwidthRule::kNeighbor) {
    std::vector<std::size_t> order = kernels_by_mean(kern.mu, n, has_prior_, hint);
    neighbor_bandwidths(kern.mu, order, opt, kern.sigma);
    if (d == 0 && n_dims == 1)
      order0_ = std::move(order);
    else
      pool<std::size_t>().give(order);
  } else {
    const double dim_exponent = -1.0 / (static_cast<double>(n_dims) + 4.0);
    const double s = shared_bandwidth(kern.mu, n, opt, dim_exponent);
    for (std::size_t k = 0; k < n; ++k) kern.sigma[k] = s;
  }
  const double floor = smallest_bandwidth(opt, dim, n_kernels);
  for (std::size_t k = 0; k < n; ++k) kern.sigma[k] = std::clamp(kern.sigma[k], floor, kUnitRange);
  if (has_prior_) kern.sigma[n] = kUnitRange;

  kern.inv_sigma = pool<double>().take(n_kernels);
  kern.log_sigma = pool<double>().take(n_kernels);
  // Many kernels share the clipped bandwidth: reuse the last 1/sigma and
  // log (the same values).
  double last_sigma = -1, last_inv = 0, last_log = 0;
  for (std::size_t k = 0; k < n_kernels; ++k) {
    if (kern.sigma[k] != last_sigma) {
      last_sigma = kern.sigma[k];
      last_inv = 1.0 / last_sigma;
      last_log = std::log(last_sigma);
    }
    kern.inv_sigma.push_back(last_inv);
    kern.log_sigma.push_back(last_log);
  }
  kern.log_z = pooled<double>(n_kernels);
  NormalizerMemo* memo =
      memos && n >= kMemoMinKernels && memos->slots.size() == n && d < memos->by_dim.size()
          ? memos->by_dim[d]
          : nullptr;
  if (!memo) {
    log_masses_in_domain(kern.mu.data(), kern.inv_sigma.data(), kern.log_z.data(), n_kernels);
    return;
  }
  // The memo keeps the kernels of the clipped bandwidth (most of them);
  // another one empties it.
  const double floor_inv = 1.0 / floor;
  if (memo->inv_sigma != floor_inv) {
    memo->inv_sigma = floor_inv;
    memo->by_slot.assign(memo->by_slot.size(), NormalizerMemo::Entry{});
  }
  std::ptrdiff_t max_slot = -1;
  for (std::ptrdiff_t s : memos->slots) max_slot = std::max(max_slot, s);
  if (max_slot >= static_cast<std::ptrdiff_t>(memo->by_slot.size()))
    memo->by_slot.resize(static_cast<std::size_t>(max_slot) + 1);
  for (std::size_t k = 0; k < n_kernels; ++k) {
    const std::ptrdiff_t s = k < n ? memos->slots[k] : -1;
    if (s < 0 || kern.inv_sigma[k] != floor_inv) {
      kern.log_z[k] = log_mass_in_domain(kern.mu[k], kern.inv_sigma[k]);
      continue;
    }
    NormalizerMemo::Entry& e = memo->by_slot[static_cast<std::size_t>(s)];
    if (e.mu != kern.mu[k]) {  // empty (NaN) or another mean
      e.mu = kern.mu[k];
      e.log_z = log_mass_in_domain(kern.mu[k], floor_inv);
    }
    kern.log_z[k] = e.log_z;
  }
}

void ParzenEstimator::fit_categorical(std::size_t d, std::span<const double> obs, std::size_t n,
                                      const EstimatorOptions& options) {
  const std::size_t n_dims = dims_.size();
  const std::size_t n_kernels = log_w_.size();
  const std::size_t c = dims_[d].count;
  const double kc = static_cast<double>(c);
  // The total mass lambda spread evenly over the choices (lambda/K each), the
  // rest on the observed choice; both rules shrink as observations accumulate.
  double lambda = 1.0 / (1.0 + static_cast<double>(n));  // Aitchison-Aitken
  if (options.categorical_kernel == CategoricalKernel::kPriorWeighted) {
    const double v = options.prior_weight / (static_cast<double>(n) + 1.0);
    lambda = kc * v / (1.0 + kc * v);  // (1 + v)/(1 + K v) = 1 - lambda + lambda/K
  }
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
  if (density_only_) throw Error("ParzenEstimator: a density-only estimator cannot be sampled");
  const std::size_t n_dims = dims_.size();
  out.resize(count * n_dims);
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t k = util::weighted_index(rng, cum_w_);
    for (std::size_t d = 0; d < n_dims; ++d) {
      const DimensionSpec& dim = dims_[d];
      double& x = out[j * n_dims + d];
      if (dim.kind == DimensionSpec::Kind::kCategorical) {
        const std::span<const double> cum(&cat_[d].cum_p[k * dim.count], dim.count);
        x = static_cast<double>(util::weighted_index(rng, cum));
        continue;
      }
      const double mu = num_[d].mu[k], sigma = num_[d].sigma[k];
      double y = mu;
      for (int t = 0; t < kMaxRejections; ++t) {
        double cand = mu + sigma * util::standard_normal(rng);
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

double ParzenEstimator::numeric_term(std::size_t d, std::size_t k, const NumericPoint& p) const {
  const NumericKernels& kern = num_[d];
  if (p.continuous) {
    double z = (p.x - kern.mu[k]) * kern.inv_sigma[k];
    return -0.5 * z * z;
  }
  const double inv = kern.inv_sigma[k];
  double a = (p.e0 - kern.mu[k]) * inv, b = (p.e1 - kern.mu[k]) * inv;
  double lm;
  if (b - a < kMidpointWidth) {
    double z = (p.x - kern.mu[k]) * inv;
    lm = -0.5 * z * z - kHalfLog2Pi + p.log_width - kern.log_sigma[k];
  } else {
    lm = safe_log(normal_mass(a, b));
  }
  return lm;  // the kernel's log_z is in base_
}

ParzenEstimator::NumericPoint ParzenEstimator::numeric_point(std::size_t d, double v) const {
  const DimensionSpec& dim = dims_[d];
  NumericPoint p;
  p.continuous = dim.kind == DimensionSpec::Kind::kContinuous;
  if (p.continuous) {
    p.x = dim.to_unit(v);
  } else {
    dim.cell(v, p.e0, p.e1);
    p.x = 0.5 * (p.e0 + p.e1);
    p.width = p.e1 - p.e0;
    p.log_width = p.width > 0 ? std::log(p.width) : -kInf;
  }
  return p;
}

void ParzenEstimator::build_window() {
  // One numeric dimension with many kernels: index the narrow kernels by
  // mean, so that log_pdf() visits only those within kWindow bandwidths of
  // a point.
  const std::size_t n_kernels = base_.size();
  if (dims_.size() != 1 || dims_[0].kind == DimensionSpec::Kind::kCategorical ||
      n_kernels < kMinWindowKernels)
    return;
  const NumericKernels& kern = num_[0];
  if (!by_mean_.empty()) {
    // Kernels laid out by mean (fit_by_mean): the window reads the kernels'
    // own arrays, skipping the wide ones; no copies.
    window_ = kWindow * cut_;
    for (std::size_t p = 0; p < n_kernels; ++p)
      if (kern.sigma[p] > cut_) wide_.push_back(p);
    windowed_ = true;
    return;
  }
  // Kernels up to the 90th percentile of bandwidths are "narrow".
  const double cut = percentile90(kern.sigma);
  window_ = kWindow * cut;
  std::vector<std::size_t> order = std::move(order0_);
  order0_ = std::vector<std::size_t>();
  if (order.size() != n_kernels) {
    order.resize(n_kernels);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return kern.mu[a] < kern.mu[b] || (kern.mu[a] == kern.mu[b] && a < b);
    });
  }
  sorted_mu_ = pool<double>().take(n_kernels);
  sorted_k_ = pool<std::size_t>().take(n_kernels);
  sorted_inv_ = pool<double>().take(n_kernels);
  sorted_base_ = pool<double>().take(n_kernels);
  for (std::size_t k : order) {
    if (kern.sigma[k] <= cut) {
      sorted_mu_.push_back(kern.mu[k]);
      sorted_k_.push_back(k);
      sorted_inv_.push_back(kern.inv_sigma[k]);
      sorted_base_.push_back(base_[k]);
    } else {
      wide_.push_back(k);
    }
  }
  pool<std::size_t>().give(order);
  windowed_ = true;
}

ParzenEstimator::~ParzenEstimator() {
  BufferPool<double>& doubles = pool<double>();
  for (NumericKernels& k : num_)
    for (std::vector<double>* v : {&k.mu, &k.sigma, &k.inv_sigma, &k.log_sigma, &k.log_z})
      doubles.give(*v);
  for (std::vector<double>* v :
       {&log_w_, &cum_w_, &base_, &sorted_mu_, &sorted_inv_, &sorted_base_})
    doubles.give(*v);
  pool<std::size_t>().give(sorted_k_);
  pool<std::size_t>().give(order0_);
  pool<std::size_t>().give(by_mean_);
}

void ParzenEstimator::log_pdf(std::span<const double> points, std::span<double> out) const {
  const std::size_t n_dims = dims_.size();
  const std::size_t n_kernels = base_.size();
  const std::size_t n_points = out.size();
  // A windowed estimator visits a few kernels per point: its buffers grow
  // to the largest window met (log_pdf_one) instead of n_kernels.
  std::vector<double> acc = pooled<double>(windowed_ ? 0 : n_kernels);
  std::vector<double> scratch = pooled<double>(windowed_ ? 0 : n_kernels);
  const PooledScope<double> keep_acc(acc), keep_scratch(scratch);
  if (n_dims == 1) {
    // Candidates often repeat (a discrete grid, a categorical): compute
    // each distinct value once.
    std::vector<std::size_t> order(n_points);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return points[a] < points[b]; });
    const std::vector<const double*> none;
    for (std::size_t i = 0; i < n_points; ++i) {
      const std::size_t j = order[i];
      if (i > 0 && points[j] == points[order[i - 1]])
        out[j] = out[order[i - 1]];
      else
        out[j] = log_pdf_one(&points[j], acc, scratch, none);
    }
    return;
  }
  // Several dimensions: the terms of a discrete dimension depend on the
  // point only through its grid value, so compute them once per value.
  std::vector<std::vector<double>> values(n_dims);  // distinct values per dim
  std::vector<std::vector<std::vector<double>>> terms(n_dims);
  for (std::size_t d = 0; d < n_dims; ++d) {
    if (dims_[d].kind != DimensionSpec::Kind::kDiscrete) continue;
    for (std::size_t j = 0; j < n_points; ++j) values[d].push_back(points[j * n_dims + d]);
    std::sort(values[d].begin(), values[d].end());
    values[d].erase(std::unique(values[d].begin(), values[d].end()), values[d].end());
    for (double v : values[d]) {
      const NumericPoint p = numeric_point(d, v);
      std::vector<double> t(n_kernels);
      for (std::size_t k = 0; k < n_kernels; ++k) t[k] = numeric_term(d, k, p);
      terms[d].push_back(std::move(t));
    }
  }
  // Per point, the precomputed terms of each discrete dimension (or null).
  std::vector<std::vector<const double*>> point_terms(n_points,
                                                      std::vector<const double*>(n_dims, nullptr));
  for (std::size_t j = 0; j < n_points; ++j) {
    for (std::size_t d = 0; d < n_dims; ++d) {
      if (values[d].empty()) continue;
      auto at = std::lower_bound(values[d].begin(), values[d].end(), points[j * n_dims + d]);
      point_terms[j][d] = terms[d][static_cast<std::size_t>(at - values[d].begin())].data();
    }
  }
  if (n_points > 1 && n_kernels >= 2 * kKernelBlock) {
    log_pdf_blocked(points, out, point_terms);
    return;
  }
  for (std::size_t j = 0; j < n_points; ++j)
    out[j] = log_pdf_one(&points[j * n_dims], acc, scratch, point_terms[j]);
}

bool ParzenEstimator::log_pdf_windowed_by_mean(const double* point, std::vector<double>& acc_buf,
                                               std::vector<double>& scratch_buf,
                                               double& out) const {
  const NumericPoint p = numeric_point(0, point[0]);
  const NumericKernels& kern = num_[0];
  const double lo = (p.continuous ? p.x : p.e0) - window_;
  const double hi = (p.continuous ? p.x : p.e1) + window_;
  const auto first = static_cast<std::size_t>(std::lower_bound(kern.mu.begin(), kern.mu.end(), lo) -
                                              kern.mu.begin());
  const auto last = static_cast<std::size_t>(
      std::upper_bound(kern.mu.begin() + static_cast<std::ptrdiff_t>(first), kern.mu.end(), hi) -
      kern.mu.begin());
  // The wide kernels inside [first, last) are left out of the window's run
  // (they come after it, as all wide ones do).
  const auto wide_first = std::lower_bound(wide_.begin(), wide_.end(), first);
  const auto wide_last = std::lower_bound(wide_first, wide_.end(), last);
  const auto n_wide_in = static_cast<std::size_t>(wide_last - wide_first);
  const std::size_t narrow = last - first - n_wide_in;
  const std::size_t m = narrow + wide_.size();
  if (m == 0) return false;
  grow(acc_buf, scratch_buf, m);
  double* acc = acc_buf.data();
  std::size_t w = 0;
  auto run = [&](std::size_t a, std::size_t b) {  // narrow places [a, b)
    if (p.continuous) {
      const double* mu = kern.mu.data();
      const double* inv = kern.inv_sigma.data();
      const double* base = base_.data();
      for (std::size_t q = a; q < b; ++q) {
        double z = (p.x - mu[q]) * inv[q];
        acc[w + q - a] = base[q] - 0.5 * z * z;
      }
    } else {
      for (std::size_t q = a; q < b; ++q) acc[w + q - a] = base_[q] + numeric_term(0, q, p);
    }
    w += b - a;
  };
  std::size_t from = first;
  for (auto it = wide_first; it != wide_last; ++it) {
    run(from, *it);
    from = *it + 1;
  }
  run(from, last);
  for (std::size_t k : wide_) acc[w++] = base_[k] + numeric_term(0, k, p);
  out = log_sum_exp(acc, m, scratch_buf.data());
  return true;
}

bool ParzenEstimator::log_pdf_windowed(const double* point, std::vector<double>& acc_buf,
                                       std::vector<double>& scratch_buf, double& out) const {
  if (!by_mean_.empty()) return log_pdf_windowed_by_mean(point, acc_buf, scratch_buf, out);
  const NumericPoint p = numeric_point(0, point[0]);
  double lo = (p.continuous ? p.x : p.e0) - window_;
  double hi = (p.continuous ? p.x : p.e1) + window_;
  const auto first = static_cast<std::size_t>(
      std::lower_bound(sorted_mu_.begin(), sorted_mu_.end(), lo) - sorted_mu_.begin());
  const auto last = static_cast<std::size_t>(
      std::upper_bound(sorted_mu_.begin() + static_cast<std::ptrdiff_t>(first), sorted_mu_.end(),
                       hi) -
      sorted_mu_.begin());
  const std::size_t m = last - first + wide_.size();
  if (m == 0) return false;
  grow(acc_buf, scratch_buf, m);
  double* acc = acc_buf.data();
  if (p.continuous) {
    const double* mu = sorted_mu_.data() + first;
    const double* inv = sorted_inv_.data() + first;
    const double* base = sorted_base_.data() + first;
    for (std::size_t i = 0; i < last - first; ++i) {
      double z = (p.x - mu[i]) * inv[i];
      acc[i] = base[i] - 0.5 * z * z;
    }
  } else {
    for (std::size_t i = first; i < last; ++i)
      acc[i - first] = sorted_base_[i] + numeric_term(0, sorted_k_[i], p);
  }
  std::size_t w = last - first;
  for (std::size_t k : wide_) acc[w++] = base_[k] + numeric_term(0, k, p);
  out = log_sum_exp(acc, m, scratch_buf.data());
  return true;
}

void ParzenEstimator::add_dimension_terms(std::size_t d, double v, const double* terms,
                                          std::size_t k0, std::size_t k1, double* acc) const {
  const DimensionSpec& dim = dims_[d];
  if (dim.kind == DimensionSpec::Kind::kCategorical) {
    std::size_t c = static_cast<std::size_t>(
        std::clamp(std::round(v), 0.0, static_cast<double>(dim.count - 1)));
    const double* lp = cat_[d].log_p.data();
    for (std::size_t k = k0; k < k1; ++k) acc[k - k0] += lp[k * dim.count + c];
    return;
  }
  if (terms) {
    for (std::size_t k = k0; k < k1; ++k) acc[k - k0] += terms[k];
    return;
  }
  const NumericPoint p = numeric_point(d, v);
  if (p.continuous) {
    add_gaussian_exponents(acc, num_[d].mu.data() + k0, num_[d].inv_sigma.data() + k0, p.x,
                           k1 - k0);
    return;
  }
  for (std::size_t k = k0; k < k1; ++k) acc[k - k0] += numeric_term(d, k, p);
}

void ParzenEstimator::log_pdf_blocked(std::span<const double> points, std::span<double> out,
                                      const std::vector<std::vector<const double*>>& terms) const {
  const std::size_t n_dims = dims_.size();
  const std::size_t n_kernels = base_.size();
  const std::size_t n_points = out.size();
  // Every point's terms, kernel block by kernel block: a block's means and
  // bandwidths are read from memory once for all points instead of once
  // per point. Each term is the same as log_pdf_one's, summed per kernel
  // in the same order (base, then dimension 0, 1, ...).
  std::vector<double> all = pooled<double>(n_points * n_kernels);
  const PooledScope<double> keep_all(all);
  for (std::size_t k0 = 0; k0 < n_kernels; k0 += kKernelBlock) {
    const std::size_t k1 = std::min(n_kernels, k0 + kKernelBlock);
    for (std::size_t j = 0; j < n_points; ++j) {
      double* acc = all.data() + j * n_kernels + k0;
      std::copy(base_.begin() + static_cast<std::ptrdiff_t>(k0),
                base_.begin() + static_cast<std::ptrdiff_t>(k1), acc);
      for (std::size_t d = 0; d < n_dims; ++d)
        add_dimension_terms(d, points[j * n_dims + d], terms[j][d], k0, k1, acc);
    }
  }
  std::vector<double> scratch = pooled<double>(n_kernels);
  const PooledScope<double> keep_scratch(scratch);
  for (std::size_t j = 0; j < n_points; ++j)
    out[j] = log_sum_exp(all.data() + j * n_kernels, n_kernels, scratch.data());
}

double ParzenEstimator::log_pdf_one(const double* point, std::vector<double>& acc_buf,
                                    std::vector<double>& scratch_buf,
                                    const std::vector<const double*>& discrete_terms) const {
  const std::size_t n_dims = dims_.size();
  const std::size_t n_kernels = base_.size();
  double windowed = 0;
  if (windowed_ && log_pdf_windowed(point, acc_buf, scratch_buf, windowed)) return windowed;
  grow(acc_buf, scratch_buf, n_kernels);
  double* acc = acc_buf.data();
  double* scratch = scratch_buf.data();
  if (!by_mean_.empty()) {
    // Kernels laid out by mean: each term at its kernel's own place, so
    // that the sum runs in the same order as for any other layout.
    const NumericPoint p = numeric_point(0, point[0]);
    const NumericKernels& kern = num_[0];
    for (std::size_t q = 0; q < n_kernels; ++q) {
      double a = base_[q];
      if (p.continuous) {
        const double z = (p.x - kern.mu[q]) * kern.inv_sigma[q];
        a -= 0.5 * z * z;
      } else {
        a += numeric_term(0, q, p);
      }
      acc[by_mean_[q]] = a;
    }
    return log_sum_exp(acc, n_kernels, scratch);
  }
  std::copy(base_.begin(), base_.end(), acc);
  for (std::size_t d = 0; d < n_dims; ++d) {
    const double* t = d < discrete_terms.size() ? discrete_terms[d] : nullptr;
    add_dimension_terms(d, point[d], t, 0, n_kernels, acc);
  }
  return log_sum_exp(acc, n_kernels, scratch);
}

}  // namespace hps::tpe
