// Param importances of a study: PED-ANOVA (Watanabe, Bansal and Hutter,
// "PED-ANOVA: Efficiently Quantifying Hyperparameter Importance in
// Arbitrary Subspaces", IJCAI 2023), computed from the stored trials.
//
// PED-ANOVA measures how much the marginal distribution of a param among the
// best trials (the top `target_quantile` of COMPLETE trials) differs from its
// distribution among all COMPLETE trials: the Pearson divergence
//   D_d = sum_k q_k (p_k / q_k - 1)^2
// between p (top trials) and q (all trials), each a density of the param
// estimated on a grid (Sec. 3, Theorem 1: D_d equals the local variance of
// the indicator "trial is in the top set" explained by the param, as in
// fANOVA's functional ANOVA, Hutter et al. 2014; Sec. 4: estimation by
// kernel density on a discretized domain). A param whose values among the
// best trials look like its values among all trials gets ~0; a param that
// alone decides which trials are best gets the largest share. Importances are
// reported normalized to sum 1 (as Optuna's get_param_importances does).
//
// Estimation (as in Optuna's PedAnovaImportanceEvaluator): continuous params
// (float without step, or any numeric param with more than `n_steps`
// values) are mapped to [0, 1] (on a log scale for log params) and smoothed
// with a Gaussian kernel of Scott's bandwidth (1.059 sigma n^(-1/5), at least
// 1/n_steps), evaluated at n_steps grid points; discrete params (categorical,
// ordinal, int or stepped float with at most n_steps values) use the
// frequency of each value with a uniform prior of weight 1. Only the ranking
// of the values matters: a monotone transform of the objective gives the
// same importances. A conditional param is measured over the trials where it
// is active (its top set: the top trials among them); with fewer than
// `min_n_top_trials` such top trials its importance is 0.
#pragma once

#include <string>
#include <vector>

#include "search/search_space.h"
#include "search/trial.h"

namespace hps::report {

struct PedAnovaOptions {
  // Fraction of the COMPLETE trials, best first, forming the top set (the
  // paper's gamma'). Default 0.1 (Optuna's target_quantile). Smaller looks at
  // the very best region (noisier with few trials). Must be in (0, 1).
  double target_quantile = 0.1;
  // Fewest trials in the top set (taken even if above the quantile).
  // Default 2. Must be >= 2.
  int min_n_top_trials = 2;
  // Grid points of a continuous param's density. Default 50. Must be >= 2.
  int n_steps = 50;

  // Throws ConfigError naming the bad field ("importance.target_quantile").
  void validate() const;
};

struct ParamImportance {
  std::string param;
  double importance = 0;  // normalized: the importances of a study sum to 1 (or all are 0)
  double divergence = 0;  // the Pearson divergence D_d before normalization
  int n_trials = 0;       // COMPLETE trials where the param is active
};

// Below this many COMPLETE trials the importances are computed but called a
// rough ranking (Importances::note): with 10% in the top set, 20 trials put
// 2 in it, and a single trial moves every density.
inline constexpr int kFewTrialsForImportance = 20;

struct Importances {
  std::string method;                   // "PED-ANOVA"
  std::string source;                   // the paper
  std::string note;                     // why none were computed, a caution, or ""
  int n_trials = 0;                     // COMPLETE trials used
  int n_top = 0;                        // of which in the top set
  std::vector<ParamImportance> values;  // most important first (ties: by name)
};

// PED-ANOVA importances of `params` (the declared search space; params
// absent from it are ignored) over the COMPLETE trials of `trials` (other
// states are ignored; +-inf values count as worst/best as they compare).
// With fewer than min_n_top_trials + 1 COMPLETE trials every importance is 0
// and `note` says why (n_top stays 0); with fewer than kFewTrialsForImportance
// they are computed and `note` says the ranking is rough. Throws ConfigError
// if options are invalid.
Importances ped_anova_importances(const std::vector<TrialPtr>& trials, const SearchSpace& space,
                                  StudyDirection direction, const PedAnovaOptions& options = {});

// The param's position in [0, 1] used by the importance and the contour:
// (x - low) / (high - low), on a log scale for log params; the index over
// (n - 1) for categorical and ordinal params (0 if there is one choice).
// nullopt if `value` is not a member of the distribution.
std::optional<double> unit_position(const Distribution& distribution, const Json& value);

}  // namespace hps::report
