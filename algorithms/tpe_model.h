// TpeModel (private; not installed): the estimators of one TpeSampler call.
// The observations where the params of a group are present are split at
// gamma into a below group (l) and an above group (g) (Bergstra et al.
// 2011, section 4); each group is weighted (TpeOptions::weights) and made
// into a Parzen estimator (algorithms/parzen_estimator.h); a draw takes the
// best of n_ei_candidates candidates from l by log l(x) - log g(x).
#pragma once

#include <cstddef>
#include <cstdint>
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

class TpeModel {
 public:
  // All references must outlive the model (one sample call).
  TpeModel(const TpeOptions& options, TpeSampler::Cache& cache, const History& history)
      : options_(options), cache_(cache), h_(history), eopt_(estimator_options(options)) {}

  // Internal values of the param `name` for each observation (NaN: absent),
  // computed once per call.
  const std::vector<double>& values(const std::string& name, const Distribution& d);

  // A fitted pair of estimators over some params.
  struct Fitted {
    std::unique_ptr<ParzenEstimator> below, above;
    bool random = false;  // no finished observation: draw at random
  };

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
  // and a hash of that set (the "signature" used to group params).
  std::pair<std::size_t, std::uint64_t> presence(const std::string& name, const Distribution& d);

 private:
  // The observations where every column has a value, and those of them
  // that are finished.
  struct Selection {
    std::vector<std::size_t> present, finished;
  };
  Selection select(const std::vector<const std::vector<double>*>& cols) const;
  // Which observations are in the below group (by index in h_.obs).
  const std::vector<char>& split(Selection& sel);
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
  std::vector<std::pair<std::pair<std::string, Distribution>, Fitted>> uni_;
  struct Memo {
    std::string name;
    Distribution distribution;
    std::vector<double> values;
  };
  std::vector<std::unique_ptr<Memo>> memo_;
  std::vector<char> all_below_;  // the split when every observation takes part
  std::vector<char> split_;      // the split of the latest fit() otherwise
};

}  // namespace hps::tpe
