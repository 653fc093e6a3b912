// Objectives: what a trial runs. Built-in types are created from the
// "objective" section of space.json through a registry, so the CLI, the
// coordinator's validation and the workers all make them the same way.
#pragma once

#include <functional>
#include <iosfwd>
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

// A step an objective type runs once at the end of a study (e.g. scoring the
// best trial on a held-out test set), after the search. See run_after_study().
struct AfterStudyHook {
  // Names the step in messages, e.g. "test set evaluation".
  std::string name;
  // Runs the step for `study` and its best trial `best` (a COMPLETE trial).
  // `config` and `space` are the study's objective section and search space;
  // `out` takes lines for the user (the CLI: stdout). Returns the user attrs
  // to set on `best` (a JSON object; null or {}: none); they are written
  // only when the step returns. May throw; nothing is written then.
  std::function<Json(const Json& config, const SearchSpace& space, const Study& study,
                     const FrozenTrial& best, const ObjectiveContext& context, std::ostream& out)>
      run;
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
  // Optional post-study step (after_study.run empty: none).
  AfterStudyHook after_study;
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

// What run_after_study() did.
struct AfterStudyOutcome {
  bool ran = false;                  // the type has a hook and the study a best trial: it ran
  std::string error;                 // the hook's error ("" when it succeeded or did not run)
  Json user_attrs = Json::object();  // the attrs it set on the best trial
};

// Runs the post-study hook of the objective type of `config` (the study's
// objective section), if the type has one.
//
// When: `hpsearch run` and `hpsearch resume` call it once per run, after the
// run ended by its budget (n_trials or timeout_s reached; not after an
// interrupt, nor when the budget was already reached before the run
// started), once the local workers have exited. Where: in that process, the
// coordinator's, the single writer of the store (never on a worker);
// `context` is that process's (the CLI: all its cores, device "cpu").
// Embedding programs may call it after Study::optimize() the same way.
//
// With the type's hook and a COMPLETE trial in `study`, runs the hook once
// with study.best_trial(), then sets the user attrs it returned on that
// trial through study.storage(). A study without a COMPLETE trial, a type
// without a hook or an unknown type: nothing runs (ran false).
//
// Errors: whatever the hook throws (std::exception), attrs that are not a
// JSON object, or a storage error reading the study or storing the attrs is
// reported as a warning "<hook name>: <message>" (spdlog) and returned in
// `error`; it is not thrown. The study's trials, states and values are never changed; attrs are
// written only after the hook returned.
AfterStudyOutcome run_after_study(const Json& config, const SearchSpace& space, const Study& study,
                                  const ObjectiveContext& context, std::ostream& out);

}  // namespace hps
