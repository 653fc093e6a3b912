// hpsearch run space.json: runs a study in this process (the coordinator
// issue adds worker processes).
#include <unistd.h>

#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "algorithms/factory.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/table.h"
#include "objectives/objective.h"
#ifdef HPSEARCH_HAVE_TORCH
#include "objectives/torch_objectives.h"
#endif
#include "search/storage.h"
#include "search/study.h"

namespace hps::cli {

int run_command(const RunOptions& o) {
  // 1. Read and validate everything before touching the store.
  StudyConfig config = StudyConfig::from_file(o.space_file);
  if (o.study) {
    if (o.study->empty()) throw ConfigError("--study", "must not be empty");
    config.name = *o.study;
  }
  if (o.storage) config.storage = *o.storage;
  if (o.n_trials) {
    if (*o.n_trials <= 0) throw ConfigError("--n-trials", "must be > 0");
    config.budget.n_trials = o.n_trials;
  }
  if (o.timeout_s) {
    if (!(*o.timeout_s > 0)) throw ConfigError("--timeout", "must be > 0 (seconds)");
    config.budget.timeout_s = o.timeout_s;
  }
  if (o.n_jobs < 1) throw ConfigError("--jobs", "must be >= 1");
  auto sampler = make_sampler(config.sampler, o.seed);
  auto pruner = make_pruner(config.pruner);
  validate_objective(config.objective, config.space);
  if (!config.budget.n_trials && !config.budget.timeout_s)
    spdlog::warn("no budget (n_trials or timeout_s): running until interrupted");

  // 2. Open the study (resume if it exists).
  auto storage = open_storage(config.storage);
  StudyOptions so;
  so.sampler = sampler;
  so.pruner = pruner;
  so.space = config.space;
  Study study = Study::load_if_exists(storage, config.name, config.direction, so, config.source);
  StudyInfo info = storage->get_study(study.study_id());
  if (!info.config.is_null() && info.config.contains("space") &&
      info.config["space"] != config.source["space"])
    spdlog::warn("study '{}': the search space differs from the one stored with the study; "
                 "continuing with the new one", config.name);
  storage->set_study_config(study.study_id(), config.source);
  int stale = study.fail_stale_trials("interrupted: process restarted");
  std::int64_t finished = study.n_finished();
  if (finished > 0 || stale > 0)
    spdlog::info("resuming study '{}': {} finished trials{}", config.name, finished,
                 stale ? fmt::format(", {} interrupted trials queued again", stale) : "");

  std::optional<std::int64_t> remaining;
  if (config.budget.n_trials) {
    remaining = std::max<std::int64_t>(0, *config.budget.n_trials - finished);
    if (*remaining == 0) {
      std::cout << "Budget of " << *config.budget.n_trials << " trials already reached.\n\n"
                << summary(study, 0.0);
      return kExitOk;
    }
  }

  ObjectiveContext octx;
  octx.study_name = config.name;
  octx.threads = 1;
  octx.direction = config.direction;
  Objective objective = make_objective(config.objective, config.space, octx);

  // 3. Run.
  std::atomic<bool>* stop = install_stop_handlers();
  Progress progress(stdout, isatty(STDOUT_FILENO) == 1);
  ProgressState ps;
  ps.finished = finished;
  ps.n_trials = config.budget.n_trials;
  ps.timeout_s = config.budget.timeout_s;
  try {
    auto best = study.best_trial();
    ps.best_value = best->value;
    ps.best_number = best->number;
  } catch (const Error&) {
  }
  progress.update(ps, "", true);
  OptimizeOptions opt;
  opt.n_trials = remaining;
  opt.timeout_s = config.budget.timeout_s;
  opt.n_jobs = o.n_jobs;
  opt.catch_exceptions = true;
  opt.stop = stop;
  const bool maximize = config.direction == StudyDirection::kMaximize;
  opt.callback = [&](const FrozenTrial& t) {
    if (t.counts_as_finished()) ++ps.finished;
    if (t.state == TrialState::kComplete && t.value &&
        (!ps.best_value || (maximize ? *t.value > *ps.best_value : *t.value < *ps.best_value))) {
      ps.best_value = t.value;
      ps.best_number = t.number;
    }
    std::string last = fmt::format("trial {} {}", t.number, to_string(t.state));
    if (t.value) last += " " + format_value(*t.value);
    if (t.state == TrialState::kFail) last += " (" + t.fail_reason + ")";
    progress.update(ps, last, t.state == TrialState::kFail);
  };
  study.optimize(objective, opt);
  progress.update(ps, "", true);
  progress.finish();
#ifdef HPSEARCH_HAVE_TORCH
  // The held-out test set is scored once, for the best trial, at the end.
  if (!stop_signal() && is_torch_objective(config.objective)) {
    try {
      TrialPtr best = study.best_trial();
      if (!best->user_attrs.contains("test_accuracy")) {
        std::cout << "Scoring the best trial (" << best->number << ") on the test set...\n";
        // Same threads and device as the trials: the retrained model is the trial's own.
        TestEvaluation test = evaluate_on_test_set(config.objective, config.space, best->params, octx);
        for (const auto& [key, value] : test.to_user_attrs().items())
          storage->set_trial_user_attr(best->trial_id, key, value);
      }
    } catch (const Error& e) {
      spdlog::warn("test set evaluation: {}", e.what());
    }
  }
#endif
  std::cout << "\n" << summary(study, progress.elapsed_s());
  std::cout << "Storage: " << config.storage << "\n";
  if (int sig = stop_signal()) {
    std::cout << "Interrupted; run the same command again to resume.\n";
    return 128 + sig;
  }
  return kExitOk;
}

}  // namespace hps::cli
