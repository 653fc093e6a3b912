// Parzen estimators (kernel density estimators) for the TPE sampler.
//
// A ParzenEstimator is a weighted mixture of product kernels, one kernel per
// observation plus an optional prior kernel, over one or more dimensions
// (one dimension: univariate TPE; several: multivariate TPE, where kernel k
// is the product over dimensions of the k-th observation's kernels).
//
// Numeric dimensions are modelled in a transformed space t(x): log(x) for
// log-scale params, x otherwise, mapped affinely onto [0, 1].
//   continuous  (float without step)    truncated Gaussian on [t(low), t(high)]
//   discrete    (int, stepped float,     truncated Gaussian on the cells
//                ordinal index)          [t(v - step/2), t(v + step/2)] of the
//                                        grid points v; a point's mass is the
//                                        kernel's integral over its cell
//   categorical (choice index)          Aitchison-Aitken kernel: mass
//                                        1 - lambda + lambda/K on the observed
//                                        choice, lambda/K on every other
// Sources: Bergstra, Bardenet, Bengio, Kegl, "Algorithms for Hyper-Parameter
// Optimization", NeurIPS 2011, section 4 (the estimators l(x), g(x), the
// prior, the neighbour-distance bandwidth); Watanabe, "Tree-Structured Parzen
// Estimator: Understanding Its Algorithm Components and Why They Matter for
// Optimization", 2023, section 3 (bandwidth rules, magic clip, minimum
// bandwidth, multivariate kernels, Aitchison-Aitken categorical kernel);
// Scott, "Multivariate Density Estimation", 1992 (the n^(-1/(d+4)) rule).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "search/distributions.h"

namespace hps::tpe {

// How the Gaussian kernels' standard deviations (bandwidths) are chosen, in
// the transformed space, per dimension.
enum class BandwidthRule {
  // Bergstra et al. 2011: the larger of the distances to the two neighbours
  // among the sorted observations (and the prior's mean); the domain's ends
  // count as neighbours with consider_endpoints.
  kNeighbor,
  // Scott's rule of thumb: 1.059 * min(sd, IQR / 1.349) * n^(-1/(d+4)) of the
  // n observations (d = dimensions of the estimator); one bandwidth for all
  // kernels of a dimension. Fewer than 2 observations: the range rule.
  kScott,
  // A fraction of the domain: 0.2 * n^(-1/(d+4)) (the transformed domain
  // has width 1); one bandwidth for all kernels of a dimension.
  kRange,
};

// The kernel of a categorical dimension (K choices, n observations).
enum class CategoricalKernel {
  // Aitchison-Aitken (Watanabe 2023, section 3.5): mass 1 - lambda + lambda/K
  // on the observed choice, lambda/K on each other, lambda = 1 / (1 + n).
  // An unobserved choice gets about 1/(K n) per kernel.
  kAitchisonAitken,
  // As Optuna 3.1's parzen_estimator.py (_calculate_categorical_params):
  // every choice gets v = prior_weight / (n + 1), the observed one 1 more,
  // normalized: mass (1 + v) / (1 + K v) on the observed choice and
  // v / (1 + K v) on each other, about prior_weight / n per kernel for large
  // n, K times Aitchison-Aitken's. A choice absent from the below group keeps
  // enough density in l(x) to be drawn again, so a branch that looked bad
  // early is revisited.
  kPriorWeighted,
};

// The model of one param's domain. Built from a Distribution with
// DimensionSpec::from(); a single-value distribution cannot be modelled.
// Numeric domains are mapped affinely onto the unit interval [0, 1] after the
// log transform (so kernels are comparable across params and even
// [-1e308, 1e308] has a finite width): the "transformed space".
struct DimensionSpec {
  enum class Kind { kContinuous, kDiscrete, kCategorical };
  Kind kind = Kind::kContinuous;
  bool log = false;
  double low = 0;           // continuous: low; discrete: first grid point (raw)
  double high = 0;          // continuous: high; discrete: last grid point (raw)
  double step = 0;          // discrete: grid step (raw, > 0)
  std::uint64_t count = 0;  // discrete: number of grid points; categorical: choices
  // The domain's ends before the unit mapping: u(low), u(high) (continuous)
  // or u(low - step/2), u(high + step/2) (discrete), u = log or identity.
  double u0 = 0, u1 = 0;

  // Throws Error if `d` is single-valued (nothing to model).
  static DimensionSpec from(const Distribution& d);
  // Raw value -> transformed coordinate in [0, 1] (numeric kinds).
  double to_unit(double raw) const;
  // Transformed coordinate -> raw value, clamped into [low, high]
  // (continuous) or the grid's span (discrete, before snapping).
  double from_unit(double t) const;
  // Transformed coordinate of an internal value (grid value, index) as used
  // for a kernel's mean; categorical: the index itself.
  double center(double internal) const;
  // Discrete: the grid point whose cell holds transformed coordinate t,
  // clamped into the grid (a raw grid value low + k*step).
  double snap(double t) const;
  // Discrete: the cell [e0, e1] of grid value v in the transformed space.
  void cell(double v, double& e0, double& e1) const;
  // Discrete: the width of the narrowest cell in the transformed space (the
  // top one of a log-scale grid; every cell of a linear one: 1 / count).
  double narrowest_cell() const;

 private:
  double u(double raw) const;
};

struct EstimatorOptions {
  // Add a prior kernel: for numeric dimensions a Gaussian at the middle of
  // the domain with standard deviation 1 (the transformed domain's width);
  // uniform for categorical ones.
  bool consider_prior = true;
  // The prior kernel's weight, relative to observation weights (> 0).
  double prior_weight = 1.0;
  // Bergstra's "magic clip": bandwidths are at least 1 / min(100, 1 + n)
  // (a fraction of the transformed domain) for n kernels.
  bool consider_magic_clip = true;
  // Neighbour rule only: the domain's ends are neighbours of the outermost
  // observations.
  bool consider_endpoints = false;
  BandwidthRule bandwidth = BandwidthRule::kNeighbor;
  // Multiplies the rule's bandwidth (> 0).
  double bandwidth_factor = 1.0;
  // Bandwidths are at least this fraction of the domain (>= 0).
  double min_bandwidth_factor = 0.0;
  // Discrete dimensions: bandwidths are at least this many grid cells (>= 0;
  // of a log-scale dimension, its narrowest cell, at the top of the grid).
  // A kernel narrower than about 0.4 cell puts almost nothing on the
  // neighbouring grid points, so a model whose good points all share one
  // value stops trying the values beside it.
  double min_bandwidth_cells = 0.0;
  // log_pdf() weighs kernel k by w_k times the product of its numeric
  // bandwidths (kernels of equal weight have equal peak heights) instead of
  // w_k (equal mass). Draws still use w_k. Isolated observations, which get
  // wide kernels, then count for more. This is what Optuna 3.1's estimator
  // computes in effect, in both modes (its truncated normal leaves out the
  // 1/sigma factor; bench/parzen_diff.py); bench/tpe_quality measures it
  // better for univariate TPE and worse for multivariate TPE.
  bool equal_heights = false;
  // The categorical dimensions' kernel.
  CategoricalKernel categorical_kernel = CategoricalKernel::kAitchisonAitken;
  // The estimator is only evaluated (log_pdf), never drawn from (TPE's
  // above-group estimator g(x)); sample() then throws Error. A
  // one-dimensional numeric estimator with many kernels (the windowed case
  // of log_pdf) and the neighbour rule then lays its kernels out by mean,
  // so that its fit reads and writes them in order instead of through the
  // sort order (a cache miss per kernel at 100,000 kernels). log_pdf gives
  // the same values either way.
  bool density_only = false;
};

// The normalizers of one numeric dimension's kernels (the log of each
// kernel's mass inside the domain: log_mass_in_domain of its mean and
// bandwidth, a pure function of the two) kept between fits. TPE fits its
// estimators anew on every suggestion over nearly the same observations,
// nearly all with the same clipped bandwidth; at 100,000 trials these
// normalizers were a quarter of a multivariate suggestion. Kept by the
// caller (TPE: per column of its cache), one per dimension.
struct NormalizerMemo {
  // 1/bandwidth of the entries: kernels of another bandwidth are not kept.
  double inv_sigma = 0;
  struct Entry {
    double mu = std::numeric_limits<double>::quiet_NaN();  // NaN: empty
    double log_z = 0;
  };
  // By slot (NormalizerMemos::slots): the kernel's mean and normalizer.
  std::vector<Entry> by_slot;
};

// Optional input of a fit: where each observation's normalizers are kept.
// The values fitted are the same with or without it, bit for bit (an entry
// is used only for the same mean and bandwidth).
struct NormalizerMemos {
  // Per observation: its slot in the memos (>= 0), or -1 (not kept).
  std::span<const std::ptrdiff_t> slots;
  // Per dimension: its memo, or null (categorical, or not kept).
  std::vector<NormalizerMemo*> by_dim;
};

// A fitted estimator. Immutable after construction; sample() and log_pdf()
// are const and need no locking.
class ParzenEstimator {
 public:
  // dims: the dimensions (>= 1). observations: n rows of dims.size()
  // internal values, row-major (numeric: the raw value; discrete: the grid
  // value; categorical/ordinal: the index). weights: n positive weights
  // (relative; the prior's weight is added to them). n may be 0: then the
  // prior kernel alone is used, whatever consider_prior says.
  // orders (optional, a speed-up for the neighbour rule): for each numeric
  // dimension d, orders[d] lists the observation indices 0..n-1 sorted by
  // their value in d (ties by index); without it they are sorted here in
  // O(n log n). An entry of the wrong size is ignored.
  // memos (optional): normalizers kept between fits (NormalizerMemo),
  // used and updated for estimators of at least kMemoMinKernels kernels;
  // ignored unless memos->slots has n entries. The fit is the same with or
  // without it.
  // Throws Error on mismatched sizes.
  ParzenEstimator(std::vector<DimensionSpec> dims, std::span<const double> observations,
                  std::span<const double> weights, const EstimatorOptions& options,
                  const std::vector<std::vector<std::size_t>>* orders = nullptr,
                  NormalizerMemos* memos = nullptr);
  // Below this many observations an estimator neither reads nor writes
  // NormalizerMemos (computing its normalizers costs less than keeping
  // them; TPE's below group, a few dozen kernels with another bandwidth,
  // would empty the above group's entries on every fit).
  static constexpr std::size_t kMemoMinKernels = 2048;
  // log_pdf(points, out) of the estimator that the constructor above fits
  // from the same arguments: the same values, bit for bit. With
  // options.density_only, a one-dimensional numeric estimator with many
  // kernels (the windowed case of log_pdf) then computes the normalizers
  // (bandwidth, mass in the domain, weight) only of the kernels within its
  // window of some point and of the wide ones, the kernels log_pdf visits at
  // these points; the others need their bandwidths alone (for the window).
  // TPE's g(x) at n_ei_candidates points from a large above group reaches
  // a fraction of its kernels. log_weights (optional, empty or n values):
  // std::log(weights[k]) for every k whose weight is not 1 and 0 where it
  // is 1 (the value the constructor uses), so that a caller scoring
  // several params under the same weights takes the logs once; empty:
  // taken here. Throws Error if its size is neither 0 nor n.
  static void log_pdf_at(std::vector<DimensionSpec> dims, std::span<const double> observations,
                         std::span<const double> weights, const EstimatorOptions& options,
                         const std::vector<std::vector<std::size_t>>* orders,
                         std::span<const double> points, std::span<double> out,
                         std::span<const double> log_weights = {});
  // Hands the kernels' arrays to a per-thread pool for the next estimator.
  ~ParzenEstimator();
  ParzenEstimator(const ParzenEstimator&) = default;
  ParzenEstimator& operator=(const ParzenEstimator&) = default;
  ParzenEstimator(ParzenEstimator&&) = default;
  ParzenEstimator& operator=(ParzenEstimator&&) = default;

  std::size_t n_dims() const { return dims_.size(); }
  // Number of mixture components (observations + prior).
  std::size_t n_kernels() const { return base_.size(); }
  const std::vector<DimensionSpec>& dims() const { return dims_; }
  // Kernel parameters of numeric dimension `d` (transformed space), for
  // tests: mean and bandwidth of kernel k.
  double kernel_mean(std::size_t d, std::size_t k) const { return num_[d].mu[stored(k)]; }
  double kernel_sigma(std::size_t d, std::size_t k) const { return num_[d].sigma[stored(k)]; }

  // Draws `count` points into `out` (resized to count * n_dims(), row-major):
  // internal values inside the domain, on the grid for discrete dimensions.
  // Portable (util::uniform01, util::standard_normal: the same points for
  // the same generator state on every platform).
  void sample(std::mt19937_64& rng, std::size_t count, std::vector<double>& out) const;
  // Log density (continuous dimensions, in the transformed space) times log
  // mass (discrete and categorical dimensions) of each row of `points`
  // (internal values, as sample() returns). out.size() rows; -inf where the
  // mixture has no mass. Never NaN.
  void log_pdf(std::span<const double> points, std::span<double> out) const;

 private:
  struct NumericKernels {
    std::vector<double> mu, sigma, inv_sigma, log_sigma;
    std::vector<double> log_z;  // log of the kernel's mass inside the domain
  };
  struct CategoricalKernels {
    std::vector<double> log_p;  // n_kernels x count, row-major
    std::vector<double> cum_p;  // n_kernels x count cumulative probabilities
  };

  // A point's coordinate in numeric dimension d: x (continuous), or its
  // cell [e0, e1] with middle x (discrete).
  struct NumericPoint {
    bool continuous = true;
    double x = 0, e0 = 0, e1 = 0, width = 0, log_width = 0;
  };
  NumericPoint numeric_point(std::size_t d, double v) const;
  // Kernel k's log density (continuous) or log mass (discrete) in
  // dimension d at p, less what base_ holds (log weight, normalizers).
  double numeric_term(std::size_t d, std::size_t k, const NumericPoint& p) const;
  void build_window();
  // The density-only one-dimensional fit with kernels laid out by mean
  // (EstimatorOptions::density_only): what fit_weights, fit_numeric and
  // add_normalizers compute, each kernel at its place in mean order.
  // `points` (if not empty): only the kernels log_pdf() visits at these
  // points get their normalizers (log_pdf_at); the others hold zeros.
  // log_weights: as log_pdf_at's (empty: std::log here).
  void fit_by_mean(std::span<const double> observations, std::span<const double> weights,
                   const EstimatorOptions& options, const std::vector<std::size_t>* order,
                   std::span<const double> points, std::span<const double> log_weights);
  // fit_by_mean's choice of kernels for `points` (not empty): need[p] is 1
  // for the kernel at place p (mean order) when log_pdf() visits it at some
  // point: within the window of a point (build_window(): kWindow times the
  // 90th percentile of the bandwidths) or wider than that percentile; `need`
  // is left empty when no kernel is that wide (a point with an empty window
  // sums every kernel). Reads num_[0].mu and .sigma.
  void mark_needed_kernels(std::span<const double> points, std::vector<char>& need) const;
  // fit_by_mean's normalizers (fit_weights() and add_normalizers() per
  // kernel, in mean order) of the kernels `need` marks (all if empty);
  // zeros for the others.
  void fill_by_mean_normalizers(std::span<const double> weights, double prior_w, double log_total,
                                const EstimatorOptions& options, const std::vector<char>& need,
                                std::span<const double> log_weights);
  // The constructor, fitting for `points` only (see fit_by_mean).
  ParzenEstimator(std::vector<DimensionSpec> dims, std::span<const double> observations,
                  std::span<const double> weights, const EstimatorOptions& options,
                  const std::vector<std::vector<std::size_t>>* orders,
                  std::span<const double> points, std::span<const double> log_weights,
                  NormalizerMemos* memos);
  // Where kernel k (the order of the observations, the prior last) is
  // stored: k itself, or its place in mean order (by_mean_).
  std::size_t stored(std::size_t k) const;
  // log_pdf() of one point (n_dims() values); acc and scratch: buffers,
  // grown to the kernels visited. discrete_terms[d] (multi-dimensional
  // estimators): the terms of discrete dimension d for this point,
  // precomputed, or null.
  double log_pdf_one(const double* point, std::vector<double>& acc, std::vector<double>& scratch,
                     const std::vector<const double*>& discrete_terms) const;
  // Windowed estimators: the log density at `point` from the kernels in its
  // window and the wide ones, into `out`; false if there are none (then
  // every kernel is summed).
  bool log_pdf_windowed(const double* point, std::vector<double>& acc, std::vector<double>& scratch,
                        double& out) const;
  // Adds the terms of dimension d at value v of kernels [k0, k1) to
  // acc[0 .. k1 - k0): log_pdf_one()'s per-dimension step. terms: the
  // precomputed terms of a discrete dimension at v (all kernels), or null.
  void add_dimension_terms(std::size_t d, double v, const double* terms, std::size_t k0,
                           std::size_t k1, double* acc) const;
  // log_pdf() of several points of a multi-dimensional estimator, block of
  // kernels by block (the same values as log_pdf_one() per point).
  // terms[j][d]: point j's precomputed discrete terms of dimension d, or
  // null.
  void log_pdf_blocked(std::span<const double> points, std::span<double> out,
                       const std::vector<std::vector<const double*>>& terms) const;
  // log_pdf_windowed() of kernels laid out by mean (by_mean_): the window is
  // a run of places of num_[0] less the wide kernels in it, read in place
  // (no sorted copies); the same terms in the same order.
  bool log_pdf_windowed_by_mean(const double* point, std::vector<double>& acc,
                                std::vector<double>& scratch, double& out) const;

  // Sets log_w_ and cum_w_ from the observations' weights and the prior's,
  // and base_ to log_w_.
  void fit_weights(std::span<const double> weights, const EstimatorOptions& options);
  // Adds the normalizers of numeric dimension d (fitted) to base_.
  void add_normalizers(std::size_t d, const EstimatorOptions& options);
  // memos: as the constructor's (null: none).
  void fit_numeric(std::size_t d, std::span<const double> observations, std::size_t n,
                   const EstimatorOptions& options, const std::vector<std::size_t>* order,
                   NormalizerMemos* memos);
  void fit_categorical(std::size_t d, std::span<const double> observations, std::size_t n,
                       const EstimatorOptions& options);

  std::vector<DimensionSpec> dims_;
  bool has_prior_ = false;
  std::vector<double> log_w_;            // normalized log weights, one per kernel (not kept by
                                         // fit_by_mean: in base_)
  std::vector<double> cum_w_;            // cumulative normalized weights
  std::vector<double> base_;             // per kernel: log w + numeric dims' log normalizers
  std::vector<NumericKernels> num_;      // per dim (empty for categorical)
  std::vector<CategoricalKernels> cat_;  // per dim (empty for numeric)
  // One-dimensional numeric estimators with many kernels: narrow kernels
  // sorted by mean (their indices), the wide ones, and the window's
  // half-width (see build_window()).
  std::vector<std::size_t> order0_;  // kernels sorted by mean in dimension 0
  // Kernels laid out by mean (fit_by_mean): the kernel stored at place p is
  // by_mean_[p]; empty otherwise.
  std::vector<std::size_t> by_mean_;
  bool density_only_ = false;
  bool windowed_ = false;
  double window_ = 0;
  // fit_by_mean: the 90th percentile of the bandwidths (build_window()'s
  // cut between narrow and wide kernels), found once.
  double cut_ = 0;
  std::vector<double> sorted_mu_, sorted_inv_, sorted_base_;
  std::vector<std::size_t> sorted_k_;
  std::vector<std::size_t> wide_;
};

// log(sum(exp(values))), stable; -inf for an empty span or all -inf.
double log_sum_exp(std::span<const double> values);

}  // namespace hps::tpe
