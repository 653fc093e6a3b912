#include "algorithms/factory.h"

#include "algorithms/grid_sampler.h"
#include "algorithms/hyperband_pruner.h"
#include "algorithms/patient_pruner.h"
#include "algorithms/percentile_pruner.h"
#include "algorithms/qmc_sampler.h"
#include "algorithms/random_sampler.h"
#include "algorithms/successive_halving_pruner.h"
#include "algorithms/threshold_pruner.h"
#include "algorithms/tpe_sampler.h"
#include "search/json_util.h"
#include "search/printable.h"

namespace hps {

namespace {

[[noreturn]] void unknown_type(const std::string& path, const std::string& type,
                               std::initializer_list<std::string_view> known) {
  std::string rule = "unknown type '" + printable_excerpt(type) + "'";
  if (const std::string best = nearest_name(type, std::vector<std::string_view>(known));
      !best.empty())
    rule += " (did you mean '" + best + "'?)";
  std::string list;
  for (auto k : known) {
    if (!list.empty()) list += ", ";
    list += k;
  }
  rule += "; known types: " + list;
  throw ConfigError(path + ".type", rule);
}

}  // namespace

std::shared_ptr<Sampler> make_sampler(const Json& config,
                                      std::optional<std::uint64_t> seed_override) {
  const std::string path = "sampler";
  std::string type = require_type_field(config, path);
  if (type == "random") {
    check_keys(config, path, {"type", "seed"});
    auto seed = optional_seed(config, path);
    if (seed_override) seed = seed_override;
    return std::make_shared<RandomSampler>(seed);
  }
  if (type == "tpe") {
    TpeOptions options = TpeOptions::from_json(config, path);
    if (seed_override) options.seed = seed_override;
    return std::make_shared<TpeSampler>(std::move(options));
  }
  if (type == "qmc") {
    QmcOptions options = QmcOptions::from_json(config, path);
    if (seed_override) options.seed = seed_override;
    return std::make_shared<QmcSampler>(options);
  }
  if (type == "grid") {
    GridOptions options = GridOptions::from_json(config, path);
    if (seed_override) options.seed = seed_override;
    return std::make_shared<GridSampler>(std::move(options));
  }
  unknown_type(path, type, {"random", "tpe", "grid", "qmc"});
}

namespace {

// Patient pruners may wrap patient pruners; this bounds the nesting.
constexpr int kMaxPrunerNesting = 8;

template <typename T>
void read_int(const Json& config, const std::string& path, const char* key, T& out) {
  if (auto v = optional_int(config, path, key)) out = static_cast<T>(*v);
}

std::shared_ptr<Pruner> make_pruner_at(const Json& config, const std::string& path, int depth) {
  if (depth > kMaxPrunerNesting)
    throw ConfigError(path,
                      "pruners nested more than " + std::to_string(kMaxPrunerNesting) + " deep");
  if (!config.is_object())
    throw ConfigError(path, "must be an object, got " + quoted_value(config));
  std::string type = require_type_field(config, path);
  if (type == "none") {
    check_keys(config, path, {"type"});
    return std::make_shared<NopPruner>();
  }
  if (type == "median" || type == "percentile") {
    if (type == "median")
      check_keys(config, path,
                 {"type", "n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials"});
    else
      check_keys(config, path,
                 {"type", "percentile", "n_startup_trials", "n_warmup_steps", "interval_steps",
                  "n_min_trials"});
    PercentilePrunerOptions o;
    if (type == "percentile") o.percentile = require_number(config, path, "percentile");
    read_int(config, path, "n_startup_trials", o.n_startup_trials);
    read_int(config, path, "n_warmup_steps", o.n_warmup_steps);
    read_int(config, path, "interval_steps", o.interval_steps);
    read_int(config, path, "n_min_trials", o.n_min_trials);
    o.validate(path);
    if (type == "median")
      return std::make_shared<MedianPruner>(MedianPrunerOptions{
          o.n_startup_trials, o.n_warmup_steps, o.interval_steps, o.n_min_trials});
    return std::make_shared<PercentilePruner>(o);
  }
  if (type == "asha") {
    check_keys(config, path,
               {"type", "min_resource", "reduction_factor", "min_early_stopping_rate"});
    SuccessiveHalvingPrunerOptions o;
    if (config.contains("min_resource") && config["min_resource"].is_string()) {
      if (config["min_resource"].get<std::string>() != "auto")
        throw ConfigError(
            join_path(path, "min_resource"),
            "must be an integer >= 1 or \"auto\", got " + config["min_resource"].dump());
    } else {
      o.min_resource = optional_int(config, path, "min_resource");
    }
    read_int(config, path, "reduction_factor", o.reduction_factor);
    read_int(config, path, "min_early_stopping_rate", o.min_early_stopping_rate);
    o.validate(path);
    return std::make_shared<SuccessiveHalvingPruner>(o);
  }
  if (type == "hyperband") {
    check_keys(config, path, {"type", "min_resource", "max_resource", "reduction_factor", "seed"});
    HyperbandPrunerOptions o;
    read_int(config, path, "min_resource", o.min_resource);
    o.max_resource = require_int(config, path, "max_resource");
    read_int(config, path, "reduction_factor", o.reduction_factor);
    if (auto seed = optional_seed(config, path)) o.seed = *seed;
    o.validate(path);
    return std::make_shared<HyperbandPruner>(o);
  }
  if (type == "threshold") {
    check_keys(config, path, {"type", "lower", "upper", "n_warmup_steps", "interval_steps"});
    ThresholdPrunerOptions o;
    o.lower = optional_number(config, path, "lower");
    o.upper = optional_number(config, path, "upper");
    read_int(config, path, "n_warmup_steps", o.n_warmup_steps);
    read_int(config, path, "interval_steps", o.interval_steps);
    o.validate(path);
    return std::make_shared<ThresholdPruner>(o);
  }
  if (type == "patient") {
    check_keys(config, path, {"type", "patience", "min_delta", "wrapped_pruner"});
    PatientPrunerOptions o;
    o.patience = require_int(config, path, "patience");
    if (auto d = optional_number(config, path, "min_delta")) o.min_delta = *d;
    o.validate(path);
    std::shared_ptr<Pruner> wrapped;
    if (config.contains("wrapped_pruner"))
      wrapped =
          make_pruner_at(config["wrapped_pruner"], join_path(path, "wrapped_pruner"), depth + 1);
    return std::make_shared<PatientPruner>(std::move(wrapped), o);
  }
  unknown_type(path, type,
               {"none", "median", "percentile", "asha", "hyperband", "threshold", "patient"});
}

}  // namespace

std::shared_ptr<Pruner> make_pruner(const Json& config) {
  return make_pruner_at(config, "pruner", 0);
}

Json resolved_sampler_section(const Json& config, std::optional<std::uint64_t> seed_override) {
  (void)make_sampler(config, seed_override);  // its checks, in its order
  const std::string path = "sampler";
  const std::string type = require_type_field(config, path);
  Json out;
  if (type == "random") {
    auto seed = optional_seed(config, path);
    if (seed_override) seed = seed_override;
    out = {{"type", "random"}};
    out["seed"] = seed ? Json(*seed) : Json();
  } else if (type == "tpe") {
    TpeOptions options = TpeOptions::from_json(config, path);
    if (seed_override) options.seed = seed_override;
    out = options.to_json();
  } else if (type == "qmc") {
    QmcOptions options = QmcOptions::from_json(config, path);
    if (seed_override) options.seed = seed_override;
    out = options.to_json();
  } else {
    GridOptions options = GridOptions::from_json(config, path);
    if (seed_override) options.seed = seed_override;
    out = options.to_json();
  }
  if (!out.contains("seed")) out["seed"] = Json();
  return out;
}

Json resolved_pruner_section(const Json& config) { return make_pruner(config)->settings(); }

}  // namespace hps
