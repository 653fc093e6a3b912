#include "search/pbt_options.h"

#include <cmath>
#include <string>

#include "search/errors.h"
#include "search/search_space.h"
#include "search/trial_lifecycle.h"

namespace hps {

namespace {

constexpr const char* kPath = "scheduler";
constexpr std::int64_t kMaxPopulation = 100000;

std::string field(const char* key) { return join_path(kPath, key); }

std::vector<double> read_factors(const Json& value) {
  const std::string path = field("perturbation_factors");
  if (!value.is_array() || value.empty())
    throw ConfigError(path, "must be a non-empty array of numbers > 0, got " + quoted_value(value));
  std::vector<double> out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const Json& f = value[i];
    if (!f.is_number())
      throw ConfigError(path + "[" + std::to_string(i) + "]",
                        "must be a number > 0, got " + quoted_value(f));
    out.push_back(f.get<double>());
  }
  return out;
}

std::vector<Params> read_initial_params(const Json& value, const SearchSpace& space) {
  const std::string path = field("initial_params");
  if (!value.is_array())
    throw ConfigError(
        path, "must be an array of objects {\"<param>\": value, ...}, got " + quoted_value(value));
  std::vector<Params> out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    const Json& p = value[i];
    if (!p.is_object())
      throw ConfigError(at, "must be an object {\"<param>\": value, ...}, got " + quoted_value(p));
    Params params;
    for (const auto& [name, v] : p.items()) params.insert_or_assign(name, v);
    try {
      lifecycle::check_enqueued_params(space, params);
    } catch (const ConfigError& e) {
      throw ConfigError(at, e.what());
    }
    out.push_back(std::move(params));
  }
  return out;
}

}  // namespace

const char* to_string(PbtMode mode) { return mode == PbtMode::kSync ? "sync" : "async"; }

std::int64_t PbtOptions::quantile_size() const {
  auto n = static_cast<std::int64_t>(std::ceil(static_cast<double>(population) * quantile));
  n = std::min(n, population / 2);
  return std::max<std::int64_t>(n, 1);
}

void PbtOptions::validate() const {
  if (population < 2 || population > kMaxPopulation)
    throw ConfigError(field("population"),
                      "must be an integer from 2 to " + std::to_string(kMaxPopulation) +
                          " (members trained at once; exploit needs a better member to copy), "
                          "got " +
                          std::to_string(population));
  if (perturbation_interval <= 0)
    throw ConfigError(field("perturbation_interval"),
                      "must be > 0 (reported steps between exploits), got " +
                          std::to_string(perturbation_interval));
  if (max_steps <= 0)
    throw ConfigError(field("max_steps"),
                      "must be > 0 (steps each member trains), got " + std::to_string(max_steps));
  if (perturbation_interval >= max_steps)
    throw ConfigError(field("perturbation_interval"),
                      "must be < max_steps (" + std::to_string(max_steps) +
                          "), else no member is ever exploited, got " +
                          std::to_string(perturbation_interval));
  if (!(quantile > 0.0 && quantile <= 0.5))
    throw ConfigError(field("quantile"),
                      "must be in (0, 0.5] (the fraction of members exploited, and of donors)" +
                          got_number(quantile));
  if (!(resample_probability >= 0.0 && resample_probability <= 1.0))
    throw ConfigError(field("resample_probability"),
                      "must be in [0, 1]" + got_number(resample_probability));
  if (perturbation_factors.empty())
    throw ConfigError(field("perturbation_factors"), "must hold at least one factor");
  for (std::size_t i = 0; i < perturbation_factors.size(); ++i) {
    const double f = perturbation_factors[i];
    if (!(std::isfinite(f) && f > 0.0))
      throw ConfigError(field("perturbation_factors") + "[" + std::to_string(i) + "]",
                        "must be a finite number > 0" + got_number(f));
  }
  if (budget_steps && *budget_steps <= 0)
    throw ConfigError(field("budget_steps"),
                      "must be > 0 (steps trained by the whole population), got " +
                          std::to_string(*budget_steps));
  if (mode == PbtMode::kSync)
    throw ConfigError(field("mode"),
                      "\"sync\" is not implemented yet; use \"async\" (the default: each "
                      "member is judged when it reaches an interval boundary, no member waits)");
  if (static_cast<std::int64_t>(initial_params.size()) > population)
    throw ConfigError(field("initial_params"), "holds " + std::to_string(initial_params.size()) +
                                                   " members, more than the population (" +
                                                   std::to_string(population) + ")");
}

PbtOptions PbtOptions::from_json(const Json& section, const SearchSpace& space) {
  if (!section.is_object())
    throw ConfigError(kPath,
                      "must be an object {\"type\": \"pbt\", ...}, got " + quoted_value(section));
  const std::string type = require_type_field(section, kPath);
  if (type != "pbt") bad_choice(field("type"), {"pbt"}, type);
  check_keys(section, kPath,
             {"type", "population", "perturbation_interval", "max_steps", "quantile",
              "resample_probability", "perturbation_factors", "mode", "budget_steps", "seed",
              "initial_params"});
  PbtOptions o;
  o.population = require_int(section, kPath, "population");
  o.perturbation_interval = require_int(section, kPath, "perturbation_interval");
  o.max_steps = require_int(section, kPath, "max_steps");
  o.quantile = optional_number(section, kPath, "quantile").value_or(o.quantile);
  o.resample_probability =
      optional_number(section, kPath, "resample_probability").value_or(o.resample_probability);
  if (auto f = section.find("perturbation_factors"); f != section.end())
    o.perturbation_factors = read_factors(*f);
  o.mode = optional_choice<PbtMode>(section, kPath, "mode",
                                    {{"async", PbtMode::kAsync}, {"sync", PbtMode::kSync}})
               .value_or(PbtMode::kAsync);
  o.budget_steps = optional_int(section, kPath, "budget_steps");
  o.seed = optional_seed(section, kPath);
  if (auto p = section.find("initial_params"); p != section.end())
    o.initial_params = read_initial_params(*p, space);
  o.validate();
  return o;
}

Json scheduler_section(const Json& doc) {
  if (!doc.is_object()) return Json();
  auto s = doc.find("scheduler");
  return s == doc.end() ? Json() : *s;
}

std::optional<PbtOptions> pbt_options_of(const Json& scheduler, const SearchSpace& space,
                                         const Json& pruner, const Json& artifacts,
                                         bool has_n_trials) {
  if (scheduler.is_null()) return std::nullopt;
  PbtOptions o = PbtOptions::from_json(scheduler, space);
  if (artifacts.is_object()) {
    auto c = artifacts.find("checkpoints");
    if (c != artifacts.end() && c->is_boolean() && !c->get<bool>())
      throw ConfigError(kPath,
                        "PBT needs checkpoints: an exploit starts the new trial from a copy of "
                        "the donor's snapshot, but artifacts.checkpoints is false (remove it or "
                        "set it to true, and have the program save its state in "
                        "HPSEARCH_CHECKPOINT_DIR before it reports each step)");
  }
  if (pruner.is_object()) {
    auto t = pruner.find("type");
    if (t != pruner.end() && !(t->is_string() && t->get<std::string>() == "none"))
      throw ConfigError("pruner",
                        "not used with scheduler pbt: PBT replaces the poorest members itself "
                        "(exploit), and a pruner would end members the population needs; "
                        "remove the pruner section or set {\"type\": \"none\"}");
  }
  if (has_n_trials)
    throw ConfigError("budget.n_trials",
                      "not used with scheduler pbt: the trials are the population's members "
                      "and their successors; bound the training with scheduler.max_steps (per "
                      "member) or scheduler.budget_steps (in all)");
  return o;
}

}  // namespace hps
