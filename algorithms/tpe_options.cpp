// TpeOptions and TpeGamma (algorithms/tpe_sampler.h): defaults that depend
// on the mode, validation, and the "sampler" config section.
#include <algorithm>
#include <cmath>
#include <limits>

#include "algorithms/tpe_sampler.h"
#include "search/json_util.h"

namespace hps {

namespace {

// Reads a count (an integer from 0 to 2^63 - 1) at obj[key] into `out`, if
// present; ConfigError "p.key: must be an integer from 0 to
// 9223372036854775807[ or ALTERNATIVE], got X" otherwise.
void read_count(const Json& obj, const std::string& p, const char* key, std::size_t& out,
                std::string_view alternative = "") {
  if (auto v =
          optional_int_in(obj, p, key, 0, std::numeric_limits<std::int64_t>::max(), alternative))
    out = static_cast<std::size_t>(*v);
}

// Reads {"rule": "linear"|"sqrt", "factor": x, "cap": n} at `gp`.
TpeGamma gamma_from_json(const Json& j, const std::string& gp) {
  TpeGamma gamma;  // missing keys: the defaults of TpeGamma
  if (!j.is_object())
    throw ConfigError(
        gp, "must be an object {\"rule\": \"linear\"|\"sqrt\", \"factor\": x, \"cap\": n}, got " +
                quoted_value(j));
  check_keys(j, gp, {"rule", "factor", "cap"});
  if (auto rule = optional_choice<TpeGamma::Rule>(
          j, gp, "rule", {{"linear", TpeGamma::Rule::kLinear}, {"sqrt", TpeGamma::Rule::kSqrt}}))
    gamma.rule = *rule;
  if (auto f = optional_number(j, gp, "factor")) gamma.factor = *f;
  read_count(j, gp, "cap", gamma.cap);
  return gamma;
}

// Reads "branch_gamma" (a gamma object, or null for none) into `out`, if present.
void read_branch_gamma(const Json& config, const std::string& path, std::optional<TpeGamma>& out) {
  auto it = config.find("branch_gamma");
  if (it == config.end()) return;
  if (it->is_null())
    out.reset();
  else
    out = gamma_from_json(*it, join_path(path, "branch_gamma"));
}

Json gamma_to_json(const TpeGamma& g) {
  return {{"rule", g.rule == TpeGamma::Rule::kLinear ? "linear" : "sqrt"},
          {"factor", g.factor},
          {"cap", g.cap}};
}

}  // namespace

std::size_t TpeGamma::operator()(std::size_t n) const {
  double x = static_cast<double>(n);
  double g = std::ceil(rule == Rule::kLinear ? factor * x : factor * std::sqrt(x));
  std::size_t k = g <= 0 ? 0 : static_cast<std::size_t>(g);
  return std::min({k, cap, n});
}

const char* to_string(TpeWeights weights) {
  return weights == TpeWeights::kUniform ? "uniform" : "old_decay";
}

const char* to_string(TpeWarmStartWeighting weighting) {
  return weighting == TpeWarmStartWeighting::kSimilarity ? "similarity" : "none";
}

const char* to_string(tpe::BandwidthRule rule) {
  switch (rule) {
    case tpe::BandwidthRule::kNeighbor:
      return "neighbor";
    case tpe::BandwidthRule::kScott:
      return "scott";
    case tpe::BandwidthRule::kRange:
      return "range";
  }
  return "?";
}

const char* to_string(tpe::CategoricalKernel kernel) {
  return kernel == tpe::CategoricalKernel::kPriorWeighted ? "prior_weighted" : "aitchison_aitken";
}

void TpeOptions::validate(const std::string& path) const {
  // key: a field, or a field of a nested section ("gamma.factor").
  auto fail = [&](std::string_view key, const std::string& rule) {
    std::string where(path);
    for (std::size_t dot; (dot = key.find('.')) != std::string_view::npos;
         key.remove_prefix(dot + 1))
      where = join_path(where, key.substr(0, dot));
    throw ConfigError(join_path(where, key), rule);
  };
  if (n_ei_candidates < 1 || n_ei_candidates > kMaxEiCandidates)
    fail("n_ei_candidates", "must be between 1 and " + std::to_string(kMaxEiCandidates) + ", got " +
                                std::to_string(n_ei_candidates));
  if (!(gamma.factor > 0) || !std::isfinite(gamma.factor))
    fail("gamma.factor", "must be a finite number > 0" + got_number(gamma.factor));
  if (gamma.rule == TpeGamma::Rule::kLinear && gamma.factor > 1)
    fail("gamma.factor", "must be <= 1 for the linear rule" + got_number(gamma.factor));
  if (gamma.cap < 1) fail("gamma.cap", "must be >= 1, got " + std::to_string(gamma.cap));
  if (branch_gamma) {
    if (!(branch_gamma->factor > 0) || !std::isfinite(branch_gamma->factor))
      fail("branch_gamma.factor", "must be a finite number > 0" + got_number(branch_gamma->factor));
    if (branch_gamma->rule == TpeGamma::Rule::kLinear && branch_gamma->factor > 1)
      fail("branch_gamma.factor",
           "must be <= 1 for the linear rule" + got_number(branch_gamma->factor));
    if (branch_gamma->cap < 1)
      fail("branch_gamma.cap", "must be >= 1, got " + std::to_string(branch_gamma->cap));
  }
  if (!(prior_weight > 0) || !std::isfinite(prior_weight))
    fail("prior_weight", "must be a finite number > 0" + got_number(prior_weight));
  if (min_bandwidth_factor && !(*min_bandwidth_factor >= 0 && *min_bandwidth_factor <= 1))
    fail("min_bandwidth_factor", "must be in [0, 1]" + got_number(*min_bandwidth_factor));
  if (min_bandwidth_cells && !(*min_bandwidth_cells >= 0 && *min_bandwidth_cells <= 10))
    fail("min_bandwidth_cells", "must be in [0, 10]" + got_number(*min_bandwidth_cells));
  if (marginal_mixture && !(*marginal_mixture >= 0 && *marginal_mixture <= 1))
    fail("marginal_mixture", "must be in [0, 1]" + got_number(*marginal_mixture));
  if (bandwidth_factor && (!(*bandwidth_factor > 0) || !std::isfinite(*bandwidth_factor)))
    fail("bandwidth_factor", "must be a finite number > 0" + got_number(*bandwidth_factor));
  if (weights_window < 1)
    fail("weights_window", "must be >= 1, got " + std::to_string(weights_window));
  if (group && !multivariate) fail("group", "needs multivariate: true");
  if (duplicate_retries < 1)
    fail("duplicate_retries", "must be >= 1, got " + std::to_string(duplicate_retries));
}

std::size_t TpeOptions::startup_trials(std::optional<std::int64_t> max_complete) const {
  if (n_startup_trials) return *n_startup_trials;
  if (!max_complete) return kAutoStartupMax;
  // ceil(max_complete / 10) within [kAutoStartupMin, kAutoStartupMax].
  const std::int64_t tenth = *max_complete / 10 + (*max_complete % 10 > 0 ? 1 : 0);
  return static_cast<std::size_t>(
      std::clamp<std::int64_t>(tenth, static_cast<std::int64_t>(kAutoStartupMin),
                               static_cast<std::int64_t>(kAutoStartupMax)));
}

TpeOptions TpeOptions::resolved() const {
  TpeOptions o = *this;
  if (!o.consider_magic_clip) o.consider_magic_clip = !multivariate;
  if (!o.min_bandwidth_factor) o.min_bandwidth_factor = multivariate ? 0.04 : 0.0;
  if (!o.min_bandwidth_cells) o.min_bandwidth_cells = multivariate ? 0.5 : 0.0;
  if (!o.marginal_mixture && !o.marginal_mixture_auto && !o.marginal_mixture_select)
    o.marginal_mixture_select = multivariate;
  if (!o.marginal_mixture) o.marginal_mixture = 0.0;
  if (!o.equal_kernel_heights) o.equal_kernel_heights = !multivariate;
  if (!o.bandwidth_factor) o.bandwidth_factor = multivariate ? 0.7 : 1.0;
  return o;
}

TpeOptions TpeOptions::from_json(const Json& config, const std::string& path) {
  check_keys(config, path,
             {"type",
              "seed",
              "n_startup_trials",
              "startup",
              "n_ei_candidates",
              "gamma",
              "branch_gamma",
              "prior_weight",
              "consider_prior",
              "consider_endpoints",
              "consider_magic_clip",
              "min_bandwidth_factor",
              "min_bandwidth_cells",
              "marginal_mixture",
              "equal_kernel_heights",
              "bandwidth",
              "bandwidth_factor",
              "categorical_kernel",
              "weights",
              "weights_window",
              "warm_start_weighting",
              "multivariate",
              "group",
              "constant_liar",
              "duplicate_retries"});
  TpeOptions o;
  o.seed = optional_seed(config, path);
  if (auto it = config.find("n_startup_trials"); it != config.end() && *it != "auto") {
    std::size_t n = 0;
    read_count(config, path, "n_startup_trials", n, "\"auto\"");
    o.n_startup_trials = n;
  }
  if (auto v = optional_choice<std::optional<QmcSequence>>(config, path, "startup",
                                                           {{"random", std::nullopt},
                                                            {"sobol", QmcSequence::kSobol},
                                                            {"halton", QmcSequence::kHalton}}))
    o.startup = *v;
  read_count(config, path, "n_ei_candidates", o.n_ei_candidates);
  if (auto it = config.find("gamma"); it != config.end())
    o.gamma = gamma_from_json(*it, join_path(path, "gamma"));
  read_branch_gamma(config, path, o.branch_gamma);
  if (auto v = optional_number(config, path, "prior_weight")) o.prior_weight = *v;
  if (auto v = optional_bool(config, path, "consider_prior")) o.consider_prior = *v;
  if (auto v = optional_bool(config, path, "consider_endpoints")) o.consider_endpoints = *v;
  if (auto v = optional_bool(config, path, "consider_magic_clip")) o.consider_magic_clip = *v;
  if (auto v = optional_number(config, path, "min_bandwidth_factor")) o.min_bandwidth_factor = *v;
  if (auto v = optional_number(config, path, "min_bandwidth_cells")) o.min_bandwidth_cells = *v;
  if (auto it = config.find("marginal_mixture"); it != config.end() && it->is_string()) {
    const std::string v = it->get<std::string>();
    if (v != "auto" && v != "select")
      throw ConfigError(
          join_path(path, "marginal_mixture"),
          "must be a number in [0, 1], \"auto\" or \"select\", got " + quoted_value(*it));
    (v == "auto" ? o.marginal_mixture_auto : o.marginal_mixture_select) = true;
  } else if (auto v = optional_number(config, path, "marginal_mixture")) {
    o.marginal_mixture = *v;
  }
  if (auto v = optional_bool(config, path, "equal_kernel_heights")) o.equal_kernel_heights = *v;
  if (auto v = optional_choice<std::optional<tpe::BandwidthRule>>(
          config, path, "bandwidth",
          {{"auto", std::nullopt},
           {"neighbor", tpe::BandwidthRule::kNeighbor},
           {"scott", tpe::BandwidthRule::kScott},
           {"range", tpe::BandwidthRule::kRange}}))
    o.bandwidth = *v;
  if (auto v = optional_number(config, path, "bandwidth_factor")) o.bandwidth_factor = *v;
  if (auto v = optional_choice<tpe::CategoricalKernel>(
          config, path, "categorical_kernel",
          {{"prior_weighted", tpe::CategoricalKernel::kPriorWeighted},
           {"aitchison_aitken", tpe::CategoricalKernel::kAitchisonAitken}}))
    o.categorical_kernel = *v;
  if (auto v = optional_choice<TpeWeights>(
          config, path, "weights",
          {{"uniform", TpeWeights::kUniform}, {"old_decay", TpeWeights::kOldDecay}}))
    o.weights = *v;
  read_count(config, path, "weights_window", o.weights_window);
  if (auto v = optional_choice<TpeWarmStartWeighting>(
          config, path, "warm_start_weighting",
          {{"similarity", TpeWarmStartWeighting::kSimilarity},
           {"none", TpeWarmStartWeighting::kNone}}))
    o.warm_start_weighting = *v;
  if (auto v = optional_bool(config, path, "multivariate")) o.multivariate = *v;
  if (auto v = optional_bool(config, path, "group")) o.group = *v;
  if (auto v = optional_bool(config, path, "constant_liar")) o.constant_liar = *v;
  read_count(config, path, "duplicate_retries", o.duplicate_retries);
  o.validate(path);
  return o;
}

Json TpeOptions::to_json() const {
  const TpeOptions r = resolved();
  const TpeOptions& o = r;
  Json j = {
      {"type", "tpe"},
      {"n_startup_trials", n_startup_trials ? Json(*n_startup_trials) : Json("auto")},
      {"startup", startup ? to_string(*startup) : "random"},
      {"n_ei_candidates", n_ei_candidates},
      {"gamma", gamma_to_json(gamma)},
      {"branch_gamma", branch_gamma ? gamma_to_json(*branch_gamma) : Json(nullptr)},
      {"prior_weight", prior_weight},
      {"consider_prior", consider_prior},
      {"consider_endpoints", consider_endpoints},
      {"consider_magic_clip", *o.consider_magic_clip},
      {"min_bandwidth_factor", *o.min_bandwidth_factor},
      {"min_bandwidth_cells", *o.min_bandwidth_cells},
      {"marginal_mixture", o.marginal_mixture_auto     ? Json("auto")
                           : o.marginal_mixture_select ? Json("select")
                                                       : Json(*o.marginal_mixture)},
      {"equal_kernel_heights", *o.equal_kernel_heights},
      {"bandwidth", bandwidth ? to_string(*bandwidth) : "auto"},
      {"bandwidth_factor", *o.bandwidth_factor},
      {"categorical_kernel", to_string(categorical_kernel)},
      {"weights", to_string(weights)},
      {"weights_window", weights_window},
      {"warm_start_weighting", to_string(warm_start_weighting)},
      {"multivariate", multivariate},
      {"group", group},
      {"constant_liar", constant_liar},
      {"duplicate_retries", duplicate_retries},
  };
  if (seed) j["seed"] = *seed;
  return j;
}

}  // namespace hps
