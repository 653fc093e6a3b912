// Objectives: what a trial runs. Built-in types are created from the
// "objective" section of space.json through a registry, so the CLI, the
// coordinator's validation and the workers all make them the same way.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "search/json_util.h"
#include "search/search_space.h"
#include "search/study.h"

namespace hps {

// Where and how an objective runs (set by the worker that runs it).
struct ObjectiveContext {
  int threads = 1;             // CPU threads the objective may use (>= 1)
  std::string device = "cpu";  // "cpu" or "cuda:N"
  std::string study_name;      // for logs and the environment of commands
  std::string log_dir;         // per-study log directory ("" = none)
  // The study's direction, when the caller knows it; objectives whose metric
  // depends on it (torch.fashion_mnist: val_loss or val_accuracy) derive or
  // check it. nullopt = unknown.
  std::optional<StudyDirection> direction;
};

struct ObjectiveType {
  std::string type;  // "branin", "torch.fashion_mnist", "command", ...
  std::string description;
  // Checks the objective section and its fit with the space before any trial
  // runs; throws ConfigError naming "objective.<field>" (or "space.<param>").
  std::function<void(const Json& config, const SearchSpace& space)> validate;
  // Builds the objective; may load data once and keep it for all trials.
  std::function<Objective(const Json& config, const SearchSpace& space,
                          const ObjectiveContext& context)>
      make;
};

// Registers a type (replacing one of the same name). Built-in types are
// registered on first use of the registry: the synthetic functions
// (objectives/synthetic.h), "sleep" (objectives/sleep.h), "command"
// (objectives/command.h) and "external" (the workers bring the objective:
// hps::Worker::run(objective), workers/worker.h); others (LibTorch) by their
// library's register function.
void register_objective_type(ObjectiveType type);
// Names of all registered types, sorted.
std::vector<std::string> objective_type_names();
// Validates `config` ({"type": ..., ...}); unknown type -> ConfigError
// ("objective.type: unknown type 'x' (known: ...)", with "did you mean").
void validate_objective(const Json& config, const SearchSpace& space);
// validate_objective() then make.
Objective make_objective(const Json& config, const SearchSpace& space,
                         const ObjectiveContext& context = {});

}  // namespace hps
