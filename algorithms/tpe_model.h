// TpeModel (private; not installed): the estimators of one TpeSampler call.
// The observations where the params of a group are present are split at
// gamma into a below group (l) and an above group (g) (Bergstra et al.
// 2011, section 4); each group is weighted (TpeOptions::weights) and made
// into a Parzen estimator (algorithms/parzen_estimator.h); a draw takes the
// best of n_ei_candidates candidates from l by log l(x) - log g(x).
//
// Warm-start trials (TpeOptions::warm_start_weighting kSimilarity): the
// task-similarity meta-learning TPE of Watanabe, Awad, Onishi, Hutter,
// "Speeding Up Multi-Objective Hyperparameter Optimization by Task
// Similarity-Based Meta-Learning for the Tree-Structured Parzen Estimator",
// IJCAI 2023, sections 3-4, for one objective. Task 0 is the new study's own
// observations (liars included), task t >= 1 the warm-start trials of the
// t-th earlier study. Each task is split at gamma of its own finished
// observations, by rank within the task (values of different functions are
// never compared), into n_l^t below and n_g^t above, giving l_t and g_t.
// Then
//   l(x) = sum_t w_t n_l^t l_t(x) / sum_t w_t n_l^t,
//   g(x) = sum_t w_t n_g^t g_t(x) / sum_t w_t n_g^t,
//   w_t = s_t / T (t >= 1),  w_0 = 1 - sum_{t>=1} s_t / T,
// T the number of tasks with observations of the params (the new study
// counted), and s_t in [0, 1] the similarity of task t to the new study:
// the intersection over union of their promising regions (section 4), each
// estimated as the top kSimilarityTop of kSimilaritySamples uniform points
// ranked by the task's promising density (its below group, no prior,
// bandwidths at least 0.1 of the domain, as the paper's code). With no
// finished new observation s_t = 1 and n_l^0 = n_g^0 = 0: the earlier
// studies' model alone drives the search; as new trials show that the good
// region moved, s_t falls and the earlier study fades. Candidates:
// n_ei_candidates from each l_t with a weight (as the paper's code), the one
// with the largest log l(x) - log g(x) taken. Univariate and multivariate fits both do this, per
// param or per group of params. A history without warm-start trials (or
// kNone) is modelled exactly as before, as one task.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/parzen_estimator.h"
#include "algorithms/tpe_history.h"

namespace hps::tpe {

// The estimator options of TpeOptions (resolved).
EstimatorOptions estimator_options(const TpeOptions& o);

// TpeOptions::marginal_mixture_select: whether the product of the params'
// own estimators models a joint group better than the joint estimator.
// below_x / above_x: the below and above groups' rows (dims.size() values
// each, internal values as a ParzenEstimator takes them), below_w / above_w
// their weights (one per row). Each model is read as a classifier,
// P(below | x) = sigmoid(log l(x) - log g(x) + log(nb / na)), and scored by
// the log-likelihood of the observed below/above labels, each row's own
// group's estimators fitted without it (leave-one-out; likelihood
// cross-validation, Stone 1974). True when the product's score is higher by
// more than kSelectMinGain nats per row and param; false with fewer than 2
// dims, fewer than kSelectMinObservations rows, fewer than 2 on a side, a
// categorical dim, or a score that is not a number. Cost: about
// nb + na estimator fits of n - 1 rows (joint and one per dim).
bool product_classifies_better(const std::vector<DimensionSpec>& dims,
                               const std::vector<double>& below_x,
                               const std::vector<double>& below_w,
                               const std::vector<double>& above_x,
                               const std::vector<double>& above_w, const EstimatorOptions& options);
inline constexpr double kSelectMinGain = 0.07;
inline constexpr std::size_t kSelectMinObservations = 30;
// "select" decides at checkpoints of the number n of finished observations:
// 30, then each previous one + max(kSelectMinStep, previous /
// kSelectStepDivisor) (30, 35, 40, ..., 60, 66, 72, ..., 1000, 1100, ...),
// on the most recent kSelectMaxRows of the checkpoint's first observations:
// its cost (about 7 ms of CPU for 100 rows of 10 params) is paid once per
// checkpoint, not on every suggestion.
inline constexpr std::size_t kSelectMinStep = 5;
inline constexpr std::size_t kSelectStepDivisor = 10;
inline constexpr std::size_t kSelectMaxRows = 100;
// The checkpoint for n finished observations: the largest one <= n; 0 below
// kSelectMinObservations.
std::size_t select_checkpoint(std::size_t n);

class TpeModel {
 public:
  // All references must outlive the model (one sample call).
  TpeModel(const TpeOptions& options, TpeSampler::Cache& cache, const History& history)
      : options_(options), cache_(cache), h_(history), eopt_(estimator_options(options)) {}
  // Hands the per-call arrays back to this thread's pool (buffer_pool.h).
  ~TpeModel();
  TpeModel(const TpeModel&) = delete;
  TpeModel& operator=(const TpeModel&) = delete;

  // Internal values of the param `name` for each observation (NaN: absent),
  // computed once per call.
  const std::vector<double>& values(const std::string& name, const Distribution& d);

  // One task's part of a warm-start mixture: its estimators (null when
  // its group is empty) and their mixture weights (normalized; 0 if null).
  struct TaskPart {
    std::unique_ptr<ParzenEstimator> below, above;
    double below_weight = 0, above_weight = 0;
    double similarity = 1;  // s_t (1 for the new study itself)
  };

  // A fitted pair of estimators over some params: `below` and `above`, or
  // (warm-start trials with kSimilarity) the mixture of `tasks`.
  // The inputs of a one-dimensional above group's estimator, kept instead
  // of fitting it: draw() evaluates g(x) at its candidates with
  // ParzenEstimator::log_pdf_at (the same values), which fits only the
  // kernels near them. A second draw from the same fit (another attempt)
  // fits the estimator once and keeps it.
  struct AboveInputs {
    std::vector<DimensionSpec> dims;
    std::vector<double> x;
    const std::vector<double>* weights = nullptr;  // TpeModel's, lives as long
    // TpeModel's std::log of `weights` (group_log_weights), or null.
    const std::vector<double>* log_weights = nullptr;
    std::vector<std::vector<std::size_t>> orders;
    EstimatorOptions options;
    ~AboveInputs();
  };

  struct Fitted {
    std::unique_ptr<ParzenEstimator> below;
    // g(x): `above`, or (one dimension) `above_inputs` until a second draw
    // fits `above` from them.
    mutable std::unique_ptr<ParzenEstimator> above;
    std::unique_ptr<AboveInputs> above_inputs;
    mutable bool drawn = false;
    std::vector<TaskPart> tasks;  // empty unless a warm-start mixture
    // TpeOptions::marginal_mixture (several params): each param's own
    // below and above estimators, whose product is mixed into l and g.
    std::vector<std::unique_ptr<ParzenEstimator>> marginal_below, marginal_above;
    double marginal_weight = 0;  // a of the mixture
    bool random = false;         // no finished observation: draw at random
  };

  // Uniform points and the top fraction of them used to estimate a task
  // similarity (the paper's code draws 1000 points; its quantile is TPE's
  // gamma, 0.1 here as the default linear gamma).
  static constexpr std::size_t kSimilaritySamples = 1000;
  static constexpr double kSimilarityTop = 0.1;
  // The intersection over union of the top kSimilarityTop of
  // kSimilaritySamples uniform points (internal values of `dists`, a fixed
  // seed) ranked by a's and by b's density: in [0, 1], 1 for equal rankings.
  static double similarity(const ParzenEstimator& a, const ParzenEstimator& b,
                           const std::vector<Distribution>& dists);

  // Fits l and g for the params `names` (distributions `dists`), using the
  // observations where all of them are present.
  Fitted fit(const std::vector<std::string>& names, const std::vector<Distribution>& dists);

  // Weights of a group of m observations in trial-number order.
  std::vector<double> weights(std::size_t m) const;

  // The best of n_ei_candidates draws from l (internal values).
  std::vector<double> draw(const Fitted& f, const std::vector<Distribution>& dists,
                           std::mt19937_64& rng) const;

  // Univariate: a fitted model per (name, distribution), built once per call.
  const Fitted& univariate(const std::string& name, const Distribution& d);

  // For each param: the number of finished observations it is present in
  // and a hash of that set (the "signature" used to group params; 0 unless
  // `signature`: the count alone costs no hash per observation).
  std::pair<std::size_t, std::uint64_t> presence(const std::string& name, const Distribution& d,
                                                 bool signature = true);

 private:
  // The observations where every column has a value, and those of them
  // that are finished.
  struct Selection {
    std::vector<std::size_t> present, finished;
  };
  Selection select(const std::vector<const std::vector<double>*>& cols) const;
  // Which observations are in the below group (by index in h_.obs).
  const std::vector<char>& split(Selection& sel);
  // The below flags (by index in h_.obs) of the best gamma(m) of the m
  // observations `finished` (reordered); branch_gamma(m) instead when
  // `branch` (params present in every observation of a conditional history).
  std::vector<char> split_of(std::vector<std::size_t>& finished, bool branch = false) const;
  // Whether the finished observations do not all have the same params (a
  // conditional space: some params exist only for some choices).
  bool conditional_history();
  // The estimators of the observations of `sel` split by `is_below`; their
  // sizes in nb, na; `promising` (if not null): the below group's
  // estimator without prior, for the task similarity.
  // `defer` (if not null): a one-dimensional above group's inputs go there
  // instead of into `above` (AboveInputs).
  void estimate(const std::vector<std::string>& names, const std::vector<Distribution>& dists,
                const std::vector<const std::vector<double>*>& cols, const Selection& sel,
                const std::vector<char>& is_below, std::unique_ptr<ParzenEstimator>& below,
                std::unique_ptr<ParzenEstimator>& above, std::size_t& nb, std::size_t& na,
                std::unique_ptr<ParzenEstimator>* promising,
                std::unique_ptr<AboveInputs>* defer = nullptr) const;
  // The warm-start mixture (see the top of this file) of `sel`.
  void fit_tasks(const std::vector<std::string>& names, const std::vector<Distribution>& dists,
                 const std::vector<const std::vector<double>*>& cols, const Selection& sel,
                 Fitted& f) const;
  // The best of n_ei_candidates draws from each task of a warm-start mixture.
  std::vector<double> draw_mixture(const Fitted& f, std::size_t n_dims, std::mt19937_64& rng) const;
  // TpeOptions::marginal_mixture_auto: the EM weight of the product of the
  // marginals for the below group's rows `below_x` (n_dims values each).
  double fit_marginal_weight(const std::vector<DimensionSpec>& dims,
                             const std::vector<double>& below_x) const;
  // TpeOptions::marginal_mixture_select: whether the group `names` (dims,
  // columns `cols`, observations `sel`) is drawn from the product of the
  // marginals: product_classifies_better() on the rows of the checkpoint
  // (select_checkpoint) of its finished observations, split at gamma of
  // those; kept in the cache by group, checkpoint and last trial.
  bool select_product(const std::vector<std::string>& names, const std::vector<DimensionSpec>& dims,
                      const std::vector<const std::vector<double>*>& cols,
                      const Selection& sel) const;
  // draw() with TpeOptions::marginal_mixture: candidates from the joint
  // l and from the product of the marginal l's, scored by the mixtures.
  std::vector<double> draw_marginal_mixture(const Fitted& f, std::size_t n_dims,
                                            std::mt19937_64& rng) const;
  // Per numeric dimension, each group's observations sorted by value, read
  // off the cached sorted columns in O(n) (for the neighbour bandwidth).
  void neighbor_orders(const std::vector<std::string>& names,
                       const std::vector<Distribution>& dists,
                       const std::vector<DimensionSpec>& dims, const Selection& sel,
                       const std::vector<char>& is_below, const std::vector<double>& above_x,
                       std::vector<std::vector<std::size_t>>& below_orders,
                       std::vector<std::vector<std::size_t>>& above_orders) const;

  const TpeOptions& options_;
  TpeSampler::Cache& cache_;
  const History& h_;
  EstimatorOptions eopt_;
  // eopt_ for an estimator over params of `dims`, with TpeOptions::bandwidth's
  // default resolved for them (the range rule when categorical params are
  // more than half of them, else eopt_'s rule).
  EstimatorOptions group_estimator_options(const std::vector<DimensionSpec>& dims) const;
  std::vector<std::pair<std::pair<std::string, Distribution>, Fitted>> uni_;
  struct Memo {
    std::string name;
    Distribution distribution;
    std::vector<double> values;
    std::size_t n_nan = 0;  // observations without a value
  };
  std::vector<std::unique_ptr<Memo>> memo_;
  // h_.obs[i].slot and .finished as compact arrays (one pass over the
  // observations per call, instead of one per param: an Observation is
  // 64 bytes), built on first use.
  void index_observations() const;
  mutable bool indexed_ = false;
  mutable std::vector<std::ptrdiff_t> obs_slot_;
  mutable std::vector<char> obs_finished_;
  // select() when no column has a NaN (every observation present), kept
  // for the call's later params.
  mutable std::vector<std::size_t> all_present_, all_finished_;
  mutable bool all_selected_ = false;
  std::vector<char> all_below_;  // the split when every observation takes part
  int conditional_ = -1;         // conditional_history(): -1 not yet known
  std::vector<char> split_;      // the split of the latest fit() otherwise
  // weights(m) by m, computed once per call (univariate params share their
  // group sizes).
  const std::vector<double>& group_weights(std::size_t m) const;
  mutable std::map<std::size_t, std::vector<double>> weights_memo_;
  // std::log(w) of each weight w of weights(m) that is not 1 (0 where it
  // is), for ParzenEstimator::log_pdf_at, computed once per call (the
  // univariate params share their group sizes); null when every weight
  // is 1.
  const std::vector<double>* group_log_weights(std::size_t m) const;
  mutable std::map<std::size_t, std::pair<int, std::vector<double>>> log_weights_memo_;
};

}  // namespace hps::tpe
