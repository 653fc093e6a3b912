#include "objectives/objective.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "objectives/command.h"
#include "objectives/sleep.h"
#include "objectives/synthetic.h"
#include "search/errors.h"
#include "search/printable.h"

namespace hps {
namespace {

// ------------------------------------------------------------ synthetic types

// The index i of a param named "x<i>" (decimal, no sign, no leading zero
// unless i == 0), nullopt for any other name. Throws ConfigError for names
// that look like inputs but are not canonical ("x01", "x99999999999999999999").
std::optional<std::size_t> input_index(const std::string& param, const std::string& type) {
  if (param.size() < 2 || param[0] != 'x') return std::nullopt;
  for (std::size_t i = 1; i < param.size(); ++i) {
    if (param[i] < '0' || param[i] > '9') return std::nullopt;
  }
  std::size_t index = 0;
  const char* first = param.data() + 1;
  const char* last = param.data() + param.size();
  auto [ptr, ec] = std::from_chars(first, last, index);
  if (ec != std::errc() || ptr != last || (param[1] == '0' && param.size() > 2)) {
    throw ConfigError(join_path("space", param), "objective '" + type +
                                                     "' reads its inputs from params x0, x1, ... " +
                                                     "(decimal index without leading zeros); '" +
                                                     param + "' is not one of them");
  }
  return index;
}

std::string input_list(std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    if (n > 4 && i == 2) {
      out += "..., x" + std::to_string(n - 1);
      break;
    }
    out += "x" + std::to_string(i);
  }
  return out;
}

// Checks `config` and the fit of `space` with synthetic function `f`, and
// returns the number of inputs N. See synthetic.h for the rules.
std::size_t synthetic_dimension(const SyntheticFunction& f, const Json& config,
                                const SearchSpace& space) {
  check_keys(config, "objective", {"type"});
  const std::string& type = f.name;

  std::map<std::size_t, const ParamSpec*> inputs;
  for (const ParamSpec& spec : space.params()) {
    if (auto index = input_index(spec.name, type)) inputs.emplace(*index, &spec);
  }

  std::size_t n = 0;
  if (f.dimension != 0) {
    n = f.dimension;
    for (std::size_t i = 0; i < n; ++i) {
      if (inputs.count(i) == 0) {
        throw ConfigError("space", "objective '" + type + "' needs params " + input_list(n) +
                                       " (float or int); x" + std::to_string(i) +
                                       " is not declared");
      }
    }
    if (!inputs.empty() && inputs.rbegin()->first >= n) {
      const std::size_t extra = inputs.rbegin()->first;
      throw ConfigError(join_path("space", "x" + std::to_string(extra)),
                        "objective '" + type + "' takes exactly " + std::to_string(n) +
                            " inputs, " + input_list(n) + "; remove this param");
    }
  } else {
    while (inputs.count(n) != 0) ++n;
    if (n < f.min_dimension) {
      throw ConfigError("space", "objective '" + type + "' needs at least " +
                                     std::to_string(f.min_dimension) + " input" +
                                     (f.min_dimension == 1 ? "" : "s") +
                                     ", params x0, x1, ... (float or int); x" + std::to_string(n) +
                                     " is not declared");
    }
    if (inputs.rbegin()->first >= n) {
      const std::size_t extra = inputs.rbegin()->first;
      throw ConfigError(join_path("space", "x" + std::to_string(extra)),
                        "objective '" + type + "' reads contiguous params x0, x1, ...; x" +
                            std::to_string(n) + " is not declared");
    }
  }

  for (std::size_t i = 0; i < n; ++i) {
    const ParamSpec& spec = *inputs.at(i);
    if (!spec.distribution.is_numeric()) {
      throw ConfigError(join_path("space", spec.name),
                        "objective '" + type +
                            "' needs a numeric distribution (float or int), got " +
                            to_string(spec.distribution.kind()));
    }
    if (spec.condition) {
      throw ConfigError(join_path("space", spec.name),
                        "objective '" + type + "' needs every input to be unconditional, but " +
                            spec.name + " has \"when\"");
    }
  }
  return n;
}

ObjectiveType synthetic_type(const SyntheticFunction& f) {
  ObjectiveType type;
  type.type = f.name;
  type.description = f.description;
  type.validate = [&f](const Json& config, const SearchSpace& space) {
    synthetic_dimension(f, config, space);
  };
  type.make = [&f](const Json& config, const SearchSpace& space,
                   const ObjectiveContext&) -> Objective {
    const std::size_t n = synthetic_dimension(f, config, space);
    std::vector<std::string> names;
    names.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::string name = "x";
      name += std::to_string(i);
      names.push_back(std::move(name));
    }
    return [&f, names = std::move(names)](Trial& trial) {
      std::vector<double> x(names.size());
      for (std::size_t i = 0; i < names.size(); ++i) {
        const Json& value = trial.param(names[i]);
        if (!value.is_number()) {
          throw Error("objective '" + f.name + "': param '" + names[i] +
                      "' must be a number, got " + value.dump());
        }
        x[i] = value.get<double>();
      }
      return f.function(x);
    };
  };
  return type;
}

// ------------------------------------------------------------ external

// "external": the objective lives in the programs that serve the study's
// trials (hps::Worker::run(objective), workers/worker.h); the coordinator
// only needs the section to be valid. Building it (an `hpsearch worker`
// connected to such a study) fails the trial with a clear message.
ObjectiveType external_type() {
  ObjectiveType type;
  type.type = "external";
  type.description = "trials run by programs that embed hps::Worker with their own objective";
  type.validate = [](const Json& config, const SearchSpace&) {
    check_keys(config, "objective", {"type", "description"});
    optional_string(config, "objective", "description");
  };
  type.make = [](const Json&, const SearchSpace&, const ObjectiveContext&) -> Objective {
    throw Error(
        "objective type 'external': this study's trials are run by programs that embed "
        "hps::Worker with their own objective; `hpsearch worker` has nothing to run");
  };
  return type;
}

// ------------------------------------------------------------ registry

class Registry {
 public:
  Registry() {
    // Table entries live for the whole program, so the types may keep
    // references to them.
    for (const SyntheticFunction& f : synthetic_functions()) {
      types_.emplace(f.name, synthetic_type(f));
    }
    for (ObjectiveType type : {sleep_objective_type(), command_objective_type(), external_type()}) {
      std::string name = type.type;
      types_.emplace(std::move(name), std::move(type));
    }
  }

  void add(ObjectiveType type) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string name = type.type;
    types_.insert_or_assign(std::move(name), std::move(type));
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    out.reserve(types_.size());
    for (const auto& [name, type] : types_) out.push_back(name);
    return out;  // std::map keeps them sorted
  }

  // A copy, so the caller runs validate/make without holding the lock.
  std::optional<ObjectiveType> find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = types_.find(name);
    if (it == types_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, ObjectiveType> types_;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

// Looks up the type named by config["type"]; throws ConfigError naming
// "objective" or "objective.type".
ObjectiveType find_type(const Json& config) {
  if (!config.is_object()) {
    throw ConfigError("objective",
                      "must be an object with a \"type\", got " + std::string(config.type_name()));
  }
  const std::string name = require_type_field(config, "objective");
  if (auto type = registry().find(name)) return std::move(*type);

  const std::vector<std::string> known = registry().names();
  std::string rule = "unknown type '" + printable_excerpt(name) + "' (known: ";
  for (std::size_t i = 0; i < known.size(); ++i) {
    if (i > 0) rule += ", ";
    rule += known[i];
  }
  rule += ")";
  const std::string best = nearest_name(name, {known.begin(), known.end()});
  if (!best.empty()) rule += "; did you mean '" + best + "'?";
  throw ConfigError("objective.type", rule);
}

}  // namespace

void register_objective_type(ObjectiveType type) {
  if (type.type.empty()) throw Error("register_objective_type: the type name is empty");
  if (!type.make) {
    throw Error("register_objective_type: type '" + type.type + "' has no make function");
  }
  registry().add(std::move(type));
}

std::vector<std::string> objective_type_names() { return registry().names(); }

void validate_objective(const Json& config, const SearchSpace& space) {
  const ObjectiveType type = find_type(config);
  if (type.validate) type.validate(config, space);
}

Objective make_objective(const Json& config, const SearchSpace& space,
                         const ObjectiveContext& context) {
  const ObjectiveType type = find_type(config);
  if (type.validate) type.validate(config, space);
  Objective objective = type.make(config, space, context);
  if (!objective) {
    throw Error("objective type '" + type.type + "' made an empty objective");
  }
  return objective;
}

AfterStudyOutcome run_after_study(const Json& config, const SearchSpace& space, const Study& study,
                                  const ObjectiveContext& context, std::ostream& out) {
  AfterStudyOutcome outcome;
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    return outcome;
  const std::optional<ObjectiveType> type = registry().find(config["type"].get<std::string>());
  if (!type || !type->after_study.run) return outcome;
  const std::string& name = type->after_study.name.empty() ? type->type : type->after_study.name;
  try {
    if (study.trials({TrialState::kComplete}).empty()) return outcome;
    outcome.ran = true;
    const TrialPtr best = study.best_trial();
    const Json attrs = type->after_study.run(config, space, study, *best, context, out);
    if (!attrs.is_null() && !attrs.is_object())
      throw Error("the hook returned " + std::string(attrs.type_name()) +
                  " instead of a JSON object of user attrs");
    if (attrs.is_object()) {
      for (const auto& [key, value] : attrs.items()) {
        study.storage().set_trial_user_attr(best->trial_id, key, value);
        outcome.user_attrs[key] = value;
      }
    }
  } catch (const std::exception& e) {
    outcome.error = e.what();
    spdlog::warn("{}: {}", name, outcome.error);
  }
  return outcome;
}

}  // namespace hps
