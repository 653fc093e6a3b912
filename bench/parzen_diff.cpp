// parzen_diff: our TPE estimators l(x) and g(x) on a given split, for
// bench/parzen_diff.py, which feeds the same split to Optuna 3.1's
// _ParzenEstimator and compares the two (a differential check of the
// estimators, not a benchmark).
//
//   parzen_diff < request.json > answer.json
//
// Request (one JSON object on stdin):
//   {"space":   {name: spec, ...}      space.json's "space" section, no "when"
//    "sampler": {"type": "tpe", ...}   the options (TpeOptions::from_json)
//    "below":   [{name: value, ...}]   the below group, oldest first
//    "above":   [{name: value, ...}]   the above group, oldest first
//    "points":  [{name: value, ...}]   where to evaluate
//    "draws":   N}                     optional: N draws from l (seed 0)
// One estimator over all the params of "space" (a joint fit when there are
// several; one param: the univariate fit), weighted as TpeModel weighs a
// group (TpeModel::weights).
// Answer: {"log_l": [...], "log_g": [...], per point;
//          "below_sigma": {name: [...]}, "above_sigma": {...}, per kernel
//          (observations, then the prior), in the transformed space [0, 1]
//          (categoricals left out); "below_weights", "above_weights";
//          "draws": [{name: value}] if asked}.
// An error: {"error": "..."} and exit code 1.
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "algorithms/parzen_estimator.h"
#include "algorithms/tpe_cache.h"
#include "algorithms/tpe_history.h"
#include "algorithms/tpe_model.h"
#include "algorithms/tpe_sampler.h"
#include "search/distributions.h"
#include "search/json_util.h"

namespace {

using hps::Json;

// Rows of internal values (row-major) of `rows` (objects by param name).
std::vector<double> internal_rows(const Json& rows, const std::vector<std::string>& names,
                                  const std::vector<hps::Distribution>& dists) {
  std::vector<double> out;
  for (const Json& row : rows)
    for (std::size_t d = 0; d < names.size(); ++d)
      out.push_back(dists[d].to_internal(row.at(names[d])));
  return out;
}

Json sigmas(const hps::tpe::ParzenEstimator& e, const std::vector<std::string>& names) {
  Json out = Json::object();
  for (std::size_t d = 0; d < names.size(); ++d) {
    if (e.dims()[d].kind == hps::tpe::DimensionSpec::Kind::kCategorical) continue;
    Json s = Json::array();
    for (std::size_t k = 0; k < e.n_kernels(); ++k) s.push_back(e.kernel_sigma(d, k));
    out[names[d]] = s;
  }
  return out;
}

Json run(const Json& req) {
  std::vector<std::string> names;
  std::vector<hps::Distribution> dists;
  std::vector<hps::tpe::DimensionSpec> dims;
  for (const auto& [name, spec] : req.at("space").items()) {
    names.push_back(name);
    dists.push_back(hps::Distribution::from_json(spec, "space." + name));
    dims.push_back(hps::tpe::DimensionSpec::from(dists.back()));
  }
  const hps::TpeOptions options = hps::TpeOptions::from_json(req.at("sampler")).resolved();
  // TpeModel::weights reads the options alone; the cache and history are
  // never touched.
  hps::TpeSampler::Cache cache;
  const hps::tpe::History history;
  const hps::tpe::TpeModel model(options, cache, history);
  const std::vector<double> below = internal_rows(req.at("below"), names, dists);
  const std::vector<double> above = internal_rows(req.at("above"), names, dists);
  const std::vector<double> points = internal_rows(req.at("points"), names, dists);
  const std::size_t nb = req.at("below").size(), na = req.at("above").size();
  const std::vector<double> wb = model.weights(nb), wa = model.weights(na);
  const hps::tpe::EstimatorOptions eopt = hps::tpe::estimator_options(options);
  const hps::tpe::ParzenEstimator l(dims, below, wb, eopt);
  const hps::tpe::ParzenEstimator g(dims, above, wa, eopt);
  const std::size_t np = req.at("points").size();
  std::vector<double> ll(np), lg(np);
  l.log_pdf(points, ll);
  g.log_pdf(points, lg);
  Json out = {{"log_l", ll},
              {"log_g", lg},
              {"below_sigma", sigmas(l, names)},
              {"above_sigma", sigmas(g, names)},
              {"below_weights", wb},
              {"above_weights", wa}};
  if (auto it = req.find("draws"); it != req.end()) {
    std::mt19937_64 rng(0);
    std::vector<double> x;
    l.sample(rng, it->get<std::size_t>(), x);
    Json draws = Json::array();
    for (std::size_t j = 0; j < x.size() / names.size(); ++j) {
      Json row = Json::object();
      for (std::size_t d = 0; d < names.size(); ++d)
        row[names[d]] = dists[d].to_external(x[j * names.size() + d]);
      draws.push_back(row);
    }
    out["draws"] = draws;
  }
  return out;
}

}  // namespace

int main() {
  try {
    const std::string text(std::istreambuf_iterator<char>(std::cin), {});
    std::cout << run(hps::parse_json_text(text, "request")).dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cout << Json{{"error", e.what()}}.dump() << "\n";
    return 1;
  }
}
