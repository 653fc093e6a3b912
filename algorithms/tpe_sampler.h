// TpeSampler: the Tree-structured Parzen Estimator.
//
// Sources: Bergstra, Bardenet, Bengio, Kegl, "Algorithms for Hyper-Parameter
// Optimization", NeurIPS 2011 (section 4: the split of the observations at a
// quantile gamma into a "below" and an "above" group, the estimators l(x)
// and g(x), and the choice of x maximizing l(x)/g(x) among candidates drawn
// from l); Watanabe, "Tree-Structured Parzen Estimator: Understanding Its
// Algorithm Components and Why They Matter for Optimization", 2023 (the
// components and their options: gamma rules, weights, prior, bandwidth
// rules and magic clip, multivariate kernels, categorical kernels);
// Ginsbourger, Le Riche, Carraro, "Kriging is well-suited to parallelize
// optimization", 2010 (the constant liar). The kernels themselves are in
// algorithms/parzen_estimator.h.
//
// How a suggestion is made:
//   1. Observations: COMPLETE trials by their value; PRUNED trials by the
//      value at the deepest step they reported (ranked below a COMPLETE
//      trial of the same value; deeper steps first); with the constant liar,
//      RUNNING trials as the worst observations (never in the below group).
//      FAIL and WAITING trials, and NaN values, never enter.
//   2. Startup: until n_startup_trials trials are COMPLETE (RUNNING ones do
//      not count), params are drawn at random (RandomSampler::draw), or
//      are the points of a Sobol or Halton sequence (TpeOptions::startup).
//      Unset ("auto"), the startup size follows the study's budget when
//      the sampler was told it (Sampler::plan_budget; TpeOptions::
//      startup_trials), else 10.
//   3. For each param (univariate) or group of params (multivariate), the
//      observations where the param(s) were active are split: the best
//      gamma(m) of the m finished ones form the below group, the rest (and
//      the liars) the above group. A conditional param's model therefore
//      uses only the trials where it was active; an absent param is never
//      confused with a null choice.
//   4. n_ei_candidates points are drawn from l; the one with the largest
//      log l(x) - log g(x) is taken (the first on ties).
//   5. No duplicates (declared spaces, sample()): a suggestion equal, after
//      rounding to the grid, to a tried point (a COMPLETE, RUNNING, PRUNED
//      or enqueued trial's params, or a FAIL trial's unless it was queued
//      again as a retry; the rule: algorithms/tried_points.h) is drawn
//      again, first by TPE, then at random, then an untried point of a
//      finite space is chosen at random; when none is left,
//      SearchSpaceExhausted is thrown. So a failed or pruned configuration
//      is never suggested again while untried points remain.
//
// State: the sampler keeps no history of its own. Its caches (per finished
// trial: its score and its params as internal values per (param,
// distribution)) are filled from the trials it is shown and can always be
// rebuilt from them. Random numbers come from a generator seeded by
// (seed, trial number, attempt) for each suggestion, so the same seed and the
// same history give the same suggestion, whatever was asked before and
// across a restart of the coordinator.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/parzen_estimator.h"
#include "algorithms/qmc_sampler.h"
#include "search/json_util.h"
#include "search/sampler.h"

namespace hps {

// The size of the below group as a function of the number n of finished
// observations: ceil(factor * n) (kLinear) or ceil(factor * sqrt(n))
// (kSqrt), at most cap, and never more than n.
struct TpeGamma {
  enum class Rule { kLinear, kSqrt };
  Rule rule = Rule::kLinear;  // default linear (Optuna's default_gamma)
  double factor = 0.1;        // default 0.1; in (0, 1] for kLinear, > 0 for kSqrt
  std::size_t cap = 25;       // default 25; >= 1

  std::size_t operator()(std::size_t n) const;
};

// Weights of the observations inside each group (Watanabe 2023, section 3.3).
enum class TpeWeights {
  kUniform,  // every observation weighs 1
  // The newest `weights_window` observations of a group (by trial number)
  // weigh 1; older ones weigh linearly less, down to about 1/(m-window+1)
  // for the oldest of m (Bergstra et al. 2011, "old observations fade").
  kOldDecay,
};

// How warm-start trials (FrozenTrial::is_warm_start: copies of an earlier
// study's COMPLETE trials, search/warm_start.h) enter TPE's model.
enum class TpeWarmStartWeighting {
  // Each earlier study is a task of its own, weighted by its similarity to
  // the new study (Watanabe, Awad, Onishi, Hutter, IJCAI 2023; see
  // algorithms/tpe_model.h for the formula).
  kSimilarity,
  // Warm-start trials are ordinary observations of the new study: their
  // values are ranked with the new trials' values.
  kNone,
};

const char* to_string(TpeWeights weights);
const char* to_string(TpeWarmStartWeighting weighting);
const char* to_string(tpe::BandwidthRule rule);
const char* to_string(tpe::CategoricalKernel kernel);

// Options of TpeSampler. Defaults were chosen with bench/tpe_quality (see
// README.md, "Benchmarks"); each comment gives the default and the
// trade-off.
struct TpeOptions {
  // Random suggestions until this many trials are COMPLETE. More explores
  // more before modelling. Default nullopt ("auto"): startup_trials() of the
  // budget the sampler was told (Sampler::plan_budget), 10 without one.
  std::optional<std::size_t> n_startup_trials;
  // The startup size for a study that ends with at most `max_complete`
  // COMPLETE trials (nullopt: not known): n_startup_trials when set, else
  // the "auto" rule kAutoStartupMax (10, Optuna's and Hyperopt's usual
  // size) for an unknown budget or one of 100 trials or more, and
  // ceil(max_complete / 10) but at least kAutoStartupMin (5) below that:
  // on bench/hpo_suite.py's surrogates 5 startup trials beat 10 at budgets
  // of 20 and 40 trials (README, "TPE: mixed spaces").
  std::size_t startup_trials(std::optional<std::int64_t> max_complete) const;
  static constexpr std::size_t kAutoStartupMin = 5;
  static constexpr std::size_t kAutoStartupMax = 10;
  // How the startup trials are drawn: nullopt (default) at random, as
  // RandomSampler; or the points of a scrambled low-discrepancy sequence
  // (QmcSampler, scrambled from this sampler's seed, or with QMC's fixed
  // default scramble when there is none, so that a resumed study continues
  // the same design), which cover the space
  // more evenly for the same number of trials. A startup point that is a
  // tried point of a finite space is drawn at random instead.
  std::optional<QmcSequence> startup;
  // Candidates drawn from l(x) per suggestion. Default 24. More exploits
  // more (and costs linearly more time).
  // At most kMaxEiCandidates (each costs a draw and a density per param).
  std::size_t n_ei_candidates = 24;
  static constexpr std::size_t kMaxEiCandidates = 100000;
  // Size of the below group. Default linear, 0.1, cap 25.
  TpeGamma gamma;
  // In a conditional space (the finished trials do not all have the same
  // params, e.g. a model choice with params of its own for each choice):
  // the below group's size for the params that every trial has (the branch
  // choices and the params shared by all branches); nullopt (default) uses
  // `gamma`. {sqrt, 0.25, 25} is Hyperopt's rule (Bergstra et al. 2011,
  // section 4): the branch choice then follows its few best trials and
  // keeps exploring. Measured on bench/hpo_suite.py's held-out seeds
  // (README.md, "TPE: mixed spaces"): far fewer runs stuck in a wrong
  // branch of cash_surrogate and much better on train_surrogate, but worse
  // on svc_digits and a slightly worse median on cash_surrogate, so it is
  // not the default. Spaces without conditions are unaffected; the
  // conditional params themselves always use `gamma`.
  std::optional<TpeGamma> branch_gamma;
  // C++ only: replaces `gamma` and `branch_gamma` when set; must return a value <= n (larger
  // values are clamped).
  std::function<std::size_t(std::size_t)> gamma_function;
  // Weight of the prior kernel relative to an observation's. Default 1.0.
  // Larger explores more.
  double prior_weight = 1.0;
  // Add a prior kernel (domain-wide Gaussian, uniform over choices) to
  // both estimators. Default true. Off makes the model greedier.
  bool consider_prior = true;
  // Neighbour bandwidth only: the domain's ends are neighbours of the
  // outermost observations. Default false.
  bool consider_endpoints = false;
  // Bandwidths are at least (high - low) / min(100, 1 + n) ("magic clip",
  // Bergstra et al.). Default (unset): on for univariate, off for
  // multivariate TPE, as measured best. Off lets kernels shrink to the
  // observations' spacing (more exploitation).
  std::optional<bool> consider_magic_clip;
  // Bandwidths are at least this fraction of the domain (Watanabe's minimum
  // bandwidth). Default (unset): 0.0 univariate, 0.04 multivariate, as
  // measured best.
  std::optional<double> min_bandwidth_factor;
  // Bandwidths of discrete params (int, stepped float, ordinal) are at
  // least this many grid cells (of a log-scale one, its narrowest cell, at
  // the top of its grid), in [0, 10]. Default (unset): 0.5 for multivariate
  // TPE (a kernel then puts Phi(3) - Phi(1) = 16% of its mass on each
  // neighbouring grid point), 0 for univariate TPE (whose magic clip already
  // keeps small models wide; 0.5 was no better there). With 0 (before
  // 2026-12-04) the multivariate kernels were 0.04 of the domain wide, under
  // 0.3 cell of a 7-value ordinal, and a model whose good trials shared a
  // value next to the optimum rarely drew the optimum (bench/hpo_suite.py's
  // config_surrogate: 54 of 200 seeds ended one width off). Measured
  // (README.md, "Discrete params: a minimum bandwidth in grid cells").
  std::optional<double> min_bandwidth_cells;
  // Multivariate: l(x) and g(x) of a joint group are the mixtures
  //   l = (1 - a) l_joint + a prod_d l_d,  g = (1 - a) g_joint + a prod_d g_d
  // of the joint estimator and the product of the params' own estimators
  // (univariate TPE's model, fitted from the same split with the same
  // estimator options); a share a of the n_ei_candidates is drawn from
  // prod_d l_d, the rest from l_joint, and all are scored by the mixtures'
  // log l - log g. The joint kernels sit on the observed combinations of
  // values; the product also rates new combinations of values that are
  // good param by param. A number a in [0, 1], "auto"
  // (marginal_mixture_auto) or "select" (marginal_mixture_select).
  // Default (unset): "select" for multivariate TPE. Measured (README.md,
  // "The joint model against the product of marginals"): a fixed a > 0 or
  // "auto" is better than the joint model alone on Styblinski-Tang and
  // Branin, worse on Rosenbrock's mean, and on xgb_cancer better on the
  // tuning seeds only, not on held-out seeds.
  std::optional<double> marginal_mixture;
  // "marginal_mixture": "auto": a is fitted on every suggestion, per joint
  // group, as the maximum-likelihood weight (EM, kept in [0.01, 0.99]) of
  // the mixture (1 - a) l_joint + a prod_d l_d for the below group's
  // leave-one-out densities (each below observation under both models
  // fitted to the others): a goes to the joint model when the good points
  // cluster in all params together, to the product when they agree only
  // param by param (0.5 with fewer than two below observations).
  // Cost: one more one-dimensional estimator per param on each side; with
  // "auto", also m (d + 1) small fits of the below group's m observations
  // (m <= gamma's cap) over d params.
  bool marginal_mixture_auto = false;
  // "marginal_mixture": "select" (the multivariate default): on every
  // suggestion, per joint group, a is 1 (the product of the marginals alone,
  // as univariate TPE's model) or 0 (the joint model alone), whichever
  // classifies the observations better: each model is read as the
  // classifier P(below | x) = sigmoid(log l(x) - log g(x) + log(nb / na))
  // and scored by the log-likelihood of the observed below/above labels,
  // leave-one-out (each observation's own group's estimators fitted without
  // it: likelihood cross-validation). The product is taken only when it
  // scores higher by more than 0.07 nats per observation and param, with at
  // least 30 observations of the group, and for groups without a
  // categorical param; otherwise the joint model. Chosen on tuning seeds
  // (README.md, "Choosing between the joint model and the product"): on
  // xgb_cancer and Styblinski-Tang (good values that combine param by
  // param) the product wins by 0.06-0.12 nats per observation and param and
  // is taken on most suggestions; on Rosenbrock, Ackley, Hartmann6 and
  // Branin (params that interact) mostly below 0.07, so the joint model
  // stays. Cost: with n observations of d params, about 2n fits of n - 1
  // rows (one joint, d one-dimensional), only from 30 observations on.
  bool marginal_mixture_select = false;
  // Evaluate kernels with equal peak heights rather than equal mass (see
  // tpe::EstimatorOptions::equal_heights). Default (unset): on for
  // univariate, off for multivariate TPE, as measured best.
  std::optional<bool> equal_kernel_heights;
  // The bandwidth rule of numeric params (see parzen_estimator.h): neighbor,
  // scott or range, used by every estimator. Default (unset, "auto"): the
  // neighbour rule, except in a multivariate joint group in which
  // categorical params are more than half of the params: there the range
  // rule (one bandwidth per param, 0.2 n^(-1/(d+4)) of the domain, Optuna
  // 3.1's multivariate rule; Watanabe 2023, section 3.3), times
  // bandwidth_factor and at least min_bandwidth_factor and
  // min_bandwidth_cells. Why: a joint kernel's l(x) at a candidate sums
  // the kernels of the good trials; with the neighbour rule the numeric
  // params make each kernel as narrow as the good trials' spacing, so a
  // candidate is rated by the one trial it was drawn from, and choices
  // that the good trials share (the combination of categorical values the
  // search must find) hardly add up. Measured on bench/hpo_suite.py's
  // tuning seeds (README.md, "Mostly categorical groups: the range rule"):
  // better on config_surrogate (5 categoricals of 7 params) and
  // et_cancer (3 of 5), level on sgd_cancer (2 of 3); the range rule
  // everywhere was much worse on train_surrogate (1 of 4); the continuous
  // functions, on which the neighbour rule was chosen, keep it.
  std::optional<tpe::BandwidthRule> bandwidth;
  // Multiplies every rule's bandwidth. Default (unset): 1.0 univariate, 0.7
  // multivariate, as measured best (bench/tpe_quality over seeds 0..79:
  // better on Hartmann6 in every block of 20 seeds, even elsewhere).
  std::optional<double> bandwidth_factor;
  // The kernel of categorical params (ordinals are discrete, not categorical)
  // (parzen_estimator.h). Default kPriorWeighted (Optuna 3.1's): on
  // bench/hpo_suite.py's held-out seeds the Aitchison-Aitken kernel left
  // a branch that looked bad early untried and stayed in a wrong one.
  tpe::CategoricalKernel categorical_kernel = tpe::CategoricalKernel::kPriorWeighted;
  // Observation weights. Default kOldDecay with a window of 25.
  TpeWeights weights = TpeWeights::kOldDecay;
  std::size_t weights_window = 25;
  // How warm-start trials are modelled. Default kSimilarity: the new
  // trials and each earlier study are split into below/above groups
  // separately (their values are of different functions), and an earlier
  // study's estimators are mixed in with a weight that falls as the new
  // trials' good region parts from its good region; with no new finished
  // trial the earlier studies' model alone drives the search. kNone ranks
  // all values together (an earlier study's good points stay in the below
  // group, which helps only when the function did not change). No effect on
  // a study without warm-start trials.
  TpeWarmStartWeighting warm_start_weighting = TpeWarmStartWeighting::kSimilarity;
  // Seed of the random numbers; nullopt draws one from std::random_device.
  std::optional<std::uint64_t> seed;
  // Joint kernels over the params that every observation has (declared
  // spaces: the unconditional ones); other params are modelled one by one.
  // Default true: better than univariate on every function of
  // bench/tpe_quality (most on Rosenbrock and Ackley, whose params interact).
  bool multivariate = true;
  // With multivariate: params are grouped by the set of trials they were
  // active in (a conditional branch's params form a group), and each group
  // gets joint kernels. Default false.
  bool group = false;
  // RUNNING trials count as the worst observations, so parallel workers get
  // different suggestions. Default false; it is on for a sample() call
  // whose SamplingContext::n_workers is above 1 (the coordinator's connected
  // workers), or after set_n_workers(n > 1).
  bool constant_liar = false;
  // Tries to avoid a duplicate: this many TPE draws, then as many random
  // draws, before a finite space is enumerated. Default 16.
  std::size_t duplicate_retries = 16;

  // Throws ConfigError("sampler.<field>", rule) for an invalid value.
  void validate(const std::string& path = "sampler") const;
  // A copy with every unset (mode-dependent) default filled in.
  TpeOptions resolved() const;

  // Reads the "sampler" section {"type": "tpe", ...}. Keys: seed,
  // n_startup_trials, startup ("random"|"sobol"|"halton"), n_ei_candidates, gamma ({"rule":
  // "linear"|"sqrt", "factor": x, "cap": n}), branch_gamma (as gamma, or null), prior_weight,
  // consider_prior, consider_endpoints, consider_magic_clip, min_bandwidth_factor,
  // min_bandwidth_cells,
  // marginal_mixture (a number, "auto" or "select"), bandwidth
  // ("neighbor"|"scott"|"range"), bandwidth_factor, categorical_kernel
  // ("prior_weighted"|"aitchison_aitken"), weights
  // ("uniform"|"old_decay"), weights_window, warm_start_weighting
  // ("similarity"|"none"), multivariate, group, constant_liar,
  // duplicate_retries. Missing keys keep their defaults; an
  // unknown key or a bad value throws ConfigError naming it
  // ("sampler.gamma.factor: must be > 0").
  static TpeOptions from_json(const Json& config, const std::string& path = "sampler");
  // The resolved options as from_json() reads them (without gamma_function).
  Json to_json() const;
};

class TpeSampler : public Sampler {
 public:
  // Throws ConfigError if options.validate() fails. Unset defaults are
  // resolved (TpeOptions::resolved()).
  explicit TpeSampler(const TpeOptions& options = {});

  // Samples every active param of `space` (joint groups when multivariate),
  // keeping the values already in `params`. Never returns a tried point
  // (COMPLETE, RUNNING, PRUNED, FAIL not retried, enqueued: see step 5
  // above); throws SearchSpaceExhausted when a finite space has no untried
  // point.
  void sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) override;
  // Define-by-run: one param. With multivariate, the first call for a trial
  // draws all params shared by every finished observation jointly and later
  // calls take their values from that draw.
  double sample_independent(const SamplingContext& ctx, const std::string& name,
                            const Distribution& distribution) override;
  std::string name() const override { return "tpe"; }
  // Keeps the budget for the "auto" startup size (TpeOptions::
  // startup_trials). Returns a warning when max_complete <= the startup
  // size: then no suggestion of the study is modelled (step 2 above), the
  // study is a random search; "" otherwise.
  std::string plan_budget(std::int64_t max_complete) override;
  // The startup size in use: TpeOptions::startup_trials() of the budget
  // given to plan_budget() (none yet: 10 unless n_startup_trials is set).
  std::size_t startup_trials() const;

  // The resolved options.
  const TpeOptions& options() const { return options_; }
  // Tells the sampler how many workers run trials at once; more than one
  // turns the constant liar on (it stays on if the options asked for it).
  // For callers without a SamplingContext::n_workers to set (the
  // coordinator passes its worker count there).
  void set_n_workers(int n_workers);
  // Whether RUNNING trials count as bad observations regardless of
  // SamplingContext::n_workers (options or set_n_workers()).
  bool constant_liar_active() const;

  struct Cache;  // implementation detail

 private:
  TpeOptions options_;
  std::uint64_t seed_;
  int n_workers_ = 1;
  // The last budget given to plan_budget(), if any.
  std::optional<std::int64_t> max_complete_;
  mutable std::mutex mu_;
  std::unique_ptr<Cache> cache_;
  // The startup design when options_.startup is set.
  std::unique_ptr<QmcSampler> startup_design_;

 public:
  ~TpeSampler() override;
};

}  // namespace hps
