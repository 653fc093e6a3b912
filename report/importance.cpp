#include "report/importance.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string_view>

#include "search/trial_lifecycle.h"

namespace hps::report {

void PedAnovaOptions::validate() const {
  if (!(target_quantile > 0 && target_quantile < 1))
    throw ConfigError("importance.target_quantile", "must be in (0, 1)");
  if (min_n_top_trials < 2) throw ConfigError("importance.min_n_top_trials", "must be >= 2");
  if (n_steps < 2) throw ConfigError("importance.n_steps", "must be >= 2");
}

std::optional<double> unit_position(const Distribution& d, const Json& value) {
  if (!d.contains(value)) return std::nullopt;
  if (d.is_indexed()) {
    const auto n = d.choices().size();
    return n <= 1 ? 0.0 : static_cast<double>(d.index_of(value)) / static_cast<double>(n - 1);
  }
  double x = value.get<double>();
  double lo = d.low(), hi = d.grid_high();
  if (d.is_log()) {
    x = std::log(x);
    lo = std::log(lo);
    hi = std::log(hi);
  }
  if (!(hi > lo)) return 0.0;
  return std::clamp((x - lo) / (hi - lo), 0.0, 1.0);
}

namespace {

// Discrete params: the number of distinct values, or 0 for continuous ones
// (handled on a grid of n_steps points).
std::size_t n_discrete(const Distribution& d, int n_steps) {
  if (d.is_indexed()) return d.choices().size();
  std::uint64_t c = d.cardinality();
  if (c == 0 || c > static_cast<std::uint64_t>(n_steps)) return 0;
  return static_cast<std::size_t>(c);
}

// Index of a discrete value in 0 .. n-1.
std::size_t discrete_index(const Distribution& d, const Json& value, std::size_t n) {
  if (d.is_indexed()) return static_cast<std::size_t>(d.index_of(value));
  double step = d.step() > 0 ? d.step() : 1.0;
  double k = std::round((value.get<double>() - d.low()) / step);
  return std::min(n - 1, static_cast<std::size_t>(std::max(0.0, k)));
}

// A normalized density on `n` bins from the values `u` (in [0, 1], or bin
// indices when discrete).
std::vector<double> density(const std::vector<double>& u, std::size_t n, bool discrete,
                            int n_steps) {
  std::vector<double> p(n, 0.0);
  if (discrete) {
    for (double i : u) p[static_cast<std::size_t>(i)] += 1.0;
    for (double& x : p) x += 1.0 / static_cast<double>(n);  // uniform prior of weight 1
  } else {
    const double m = static_cast<double>(u.size());
    double mean = std::accumulate(u.begin(), u.end(), 0.0) / m;
    double var = 0;
    for (double x : u) var += (x - mean) * (x - mean);
    double sigma = u.size() > 1 ? std::sqrt(var / (m - 1)) : 0.0;
    double h = std::max(1.059 * sigma * std::pow(m, -0.2), 1.0 / n_steps);
    for (std::size_t k = 0; k < n; ++k) {
      double g = static_cast<double>(k) / static_cast<double>(n - 1);
      double s = 0;
      for (double x : u) {
        double z = (g - x) / h;
        s += std::exp(-0.5 * z * z);
      }
      p[k] = s;
    }
  }
  double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x = total > 0 ? x / total : 1.0 / static_cast<double>(n);
  return p;
}

// The values of each param of `space` over the trials of `ranked` that hold
// it, in rank order, as positions (the bin index of a discrete param,
// unit_position() of a continuous one), and how many of them come from the
// first n_top trials. One pass over the trials: each trial's params are
// read once for all params (at 100,000 trials, a lookup per param and trial
// in rank order was a sixth of a report's time, in cache misses).
struct ParamValues {
  std::vector<double> all;
  std::size_t n_top = 0;  // all[0 .. n_top) are the top trials' values
};
std::vector<ParamValues> param_values(const SearchSpace& space,
                                      const std::vector<const FrozenTrial*>& ranked,
                                      std::size_t n_top, const PedAnovaOptions& options) {
  const auto& specs = space.params();
  std::vector<ParamValues> out(specs.size());
  std::vector<std::size_t> nd(specs.size());
  std::map<std::string_view, std::size_t> index;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    nd[i] = n_discrete(specs[i].distribution, options.n_steps);
    index.emplace(specs[i].name, i);
    out[i].all.reserve(ranked.size());
  }
  for (std::size_t r = 0; r < ranked.size(); ++r) {
    for (const auto& [name, value] : ranked[r]->params) {
      auto at = index.find(name);
      if (at == index.end()) continue;
      const std::size_t i = at->second;
      const Distribution& d = specs[i].distribution;
      double u;
      if (nd[i] > 0) {
        if (!d.contains(value)) continue;
        u = static_cast<double>(discrete_index(d, value, nd[i]));
      } else {
        auto pos = unit_position(d, value);
        if (!pos) continue;
        u = *pos;
      }
      out[i].all.push_back(u);
      if (r < n_top) ++out[i].n_top;
    }
  }
  return out;
}

// PED-ANOVA's divergence of one param (section 3 of the paper): the
// chi-square-like distance between the density of its values over the top
// trials (values.all[0 .. values.n_top)) and over all of them, on
// options.n_steps bins (or its own values when it has at most that many).
// Sets pi.n_trials and pi.divergence; 0 when too few top trials hold the
// param, or it has a single value.
double param_divergence(const ParamSpec& spec, const ParamValues& values,
                        const PedAnovaOptions& options, ParamImportance& pi) {
  const Distribution& d = spec.distribution;
  const std::size_t nd = n_discrete(d, options.n_steps);
  const bool discrete = nd > 0;
  const std::size_t bins = discrete ? nd : static_cast<std::size_t>(options.n_steps);
  const std::vector<double>& all = values.all;
  const std::vector<double> top(all.begin(),
                                all.begin() + static_cast<std::ptrdiff_t>(values.n_top));
  pi.n_trials = static_cast<int>(all.size());
  if (top.size() < static_cast<std::size_t>(options.min_n_top_trials) || bins < 2 ||
      d.single_value())
    return 0.0;
  std::vector<double> p = density(top, bins, discrete, options.n_steps);
  std::vector<double> q = density(all, bins, discrete, options.n_steps);
  double div = 0;
  for (std::size_t k = 0; k < bins; ++k) {
    if (q[k] <= 0) continue;
    double r = p[k] / q[k] - 1.0;
    div += q[k] * r * r;
  }
  pi.divergence = div;
  return div;
}

}  // namespace

Importances ped_anova_importances(const std::vector<TrialPtr>& trials, const SearchSpace& space,
                                  StudyDirection direction, const PedAnovaOptions& options) {
  options.validate();
  Importances out;
  out.method = "PED-ANOVA";
  out.source =
      "Watanabe, Bansal, Hutter: PED-ANOVA: Efficiently Quantifying Hyperparameter Importance "
      "in Arbitrary Subspaces, IJCAI 2023";
  // COMPLETE trials of this study's objective (warm-start copies of an
  // earlier study excepted: lifecycle::is_best_candidate), best first (a
  // minimizing order of the signed value).
  const double sign = direction == StudyDirection::kMaximize ? -1.0 : 1.0;
  std::vector<const FrozenTrial*> complete;
  for (const auto& t : trials)
    if (lifecycle::is_best_candidate(*t)) complete.push_back(t.get());
  std::stable_sort(complete.begin(), complete.end(), [&](const auto* a, const auto* b) {
    return sign * *a->value < sign * *b->value;
  });
  out.n_trials = static_cast<int>(complete.size());
  for (const auto& spec : space.params()) out.values.push_back({spec.name, 0.0, 0.0, 0});
  if (complete.size() < static_cast<std::size_t>(options.min_n_top_trials) + 1) {
    out.note = "needs at least " + std::to_string(options.min_n_top_trials + 1) +
               " COMPLETE trials, has " + std::to_string(complete.size());
    return out;
  }
  // The top set: the best ceil(q * n) trials, at least min_n_top_trials,
  // and every trial tied with the last of them.
  std::size_t n_top = std::max<std::size_t>(
      static_cast<std::size_t>(options.min_n_top_trials),
      static_cast<std::size_t>(
          std::ceil(options.target_quantile * static_cast<double>(complete.size()))));
  n_top = std::min(n_top, complete.size());
  const double threshold = sign * *complete[n_top - 1]->value;
  while (n_top < complete.size() && sign * *complete[n_top]->value <= threshold) ++n_top;
  out.n_top = static_cast<int>(n_top);
  if (out.n_trials < kFewTrialsForImportance)
    out.note =
        "only " + std::to_string(out.n_trials) +
        " COMPLETE trials: a rough ranking, which can change as trials are added (at least " +
        std::to_string(kFewTrialsForImportance) + " make it steadier)";

  double total = 0;
  const std::vector<ParamValues> values = param_values(space, complete, n_top, options);
  for (std::size_t i = 0; i < space.params().size(); ++i)
    total += param_divergence(space.params()[i], values[i], options, out.values[i]);
  for (auto& pi : out.values) pi.importance = total > 0 ? pi.divergence / total : 0.0;
  std::stable_sort(out.values.begin(), out.values.end(), [](const auto& a, const auto& b) {
    return a.importance != b.importance ? a.importance > b.importance : a.param < b.param;
  });
  return out;
}

}  // namespace hps::report
