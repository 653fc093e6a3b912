// Warm start: the COMPLETE trials of an earlier study enter a new study as
// prior observations, so that a search continues from what is known (the
// usual habit when a model or its data changes a little: re-tuning after
// fine-tuning on new data).
//
//   // space.json: "warm_start": {"storage": "old.db", "study": "fmnist-mlp"}
//   // or: hpsearch run space.json --warm-start old.db:fmnist-mlp
//   hps::WarmStartSummary s =
//       hps::warm_start(study, {.storage = "old.db", .study = "fmnist-mlp"}, "new.db");
//   spdlog::info("{}", s.message());
//
// Rules:
//  - Each COMPLETE trial of the earlier study with a value (not NULL, not
//    NaN; others are left out, counted as "without a value") whose params
//    fit the new study's declared space (warm_start_fit) is copied into the
//    new study as a finished COMPLETE trial: its params (with the new
//    space's distributions), value, start and end times and user attrs; no
//    intermediate values (a pruner compares new trials with new trials
//    only). Its system attr warm_start = {"storage", "study", "trial"}
//    names where it came from (FrozenTrial::is_warm_start), and its worker
//    is "warm start: STUDY #NUMBER" (so `hpsearch trials` shows it).
//  - Samplers (TPE, random, QMC, grid) see such trials as COMPLETE trials
//    of the history: TPE's n_startup_trials counts them, so with enough of
//    them TPE models from the first new trial on; TPE models each earlier
//    study as a task of its own, weighted by its similarity to the new
//    trials (TpeOptions::warm_start_weighting, algorithms/tpe_model.h).
//  - They are never dispatched, never re-run, do not count towards the
//    budget (FrozenTrial::counts_as_finished) and are never the study's best
//    trial (lifecycle::is_best_candidate): their values come from the
//    earlier study's objective.
//  - The copy happens once per study: in one transaction that also sets the
//    study's system attr warm_start ({"storage", "study", "copied",
//    "left_out", "out_of_bounds", "missing_params", "no_value"}). A study
//    that has it (a resumed run) is left as it is, and the earlier store is
//    not even opened again.
//
// This is what Optuna cannot do directly (its only way is to enqueue the
// earlier best params with Study.enqueue_trial, which runs them again);
// bench/warm_start.cpp compares both.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "search/search_space.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/trial.h"

namespace hps {

// Why an earlier trial does or does not fit a new space.
enum class WarmStartFit {
  kFits,          // every active param present and inside its distribution
  kOutOfBounds,   // a param's value is outside the new bounds / choices / step grid
  kMissingParam,  // an active param of the new space is absent from the trial
};

// Whether the params of an earlier trial fit `space`, and the params to
// store if so (`fitted`, set only for kFits): in the space's order, each
// param of `space` active given the params before it (conditionals: a param
// inactive under the trial's own values is legitimately absent and, if the
// trial has it, left out) must be present (else kMissingParam) with a value
// the new distribution contains (else kOutOfBounds; checked in that order
// per param, the first failing param decides). Params of the trial that
// `space` lacks are dropped: the new objective does not read them.
// Values are stored as a sampler gives them: to_external(to_internal(v)).
WarmStartFit warm_start_fit(const SearchSpace& space, const Params& params, Params* fitted);

// What a warm start did.
struct WarmStartSummary {
  std::string storage;              // the earlier store, as given
  std::string study;                // the earlier study's name
  bool already_done = false;        // true: the study had been warm-started before (resume)
  std::int64_t copied = 0;          // trials copied
  std::int64_t out_of_bounds = 0;   // COMPLETE trials left out: a value outside the new space
  std::int64_t missing_params = 0;  // COMPLETE trials left out: an active param missing
  std::int64_t no_value = 0;        // COMPLETE trials left out: no value (NULL) or NaN
  std::int64_t left_out() const { return out_of_bounds + missing_params + no_value; }
  // "warm start: 40 trials from old in old.db; 3 left out (1 out of bounds,
  // 1 missing params, 1 without a value)" ("1 trial" for one); for
  // already_done: "warm start: already done (40 trials from old in old.db)".
  std::string message() const;
};

// Copies the fitting COMPLETE trials of study `source_study` of `source`
// into `study` (rules above), in one transaction, unless the study was
// warm-started before (then already_done, nothing written). `source_label`
// is the store's name recorded in the warm_start attrs. Needs a declared
// space (StudyOptions::space; else ConfigError("warm_start", ...)) and the
// same direction as the earlier study (else ConfigError("warm_start.study",
// ...)). Throws ConfigError("warm_start.study", ...) if the study is not in
// `source` (the message lists the studies there), StorageError from
// either store. Reads `source` only; works with any Storage (an
// InMemoryStorage too).
WarmStartSummary copy_warm_start(Study& study, Storage& source, const std::string& source_label,
                                 const std::string& source_study);

// Whether study `study_name` of `storage` was warm-started before (its
// system attr warm_start is set); false if there is no such study.
bool warm_started(Storage& storage, const std::string& study_name);

// How many trials the warm start of study `info` copied into it (its system
// attr warm_start's "copied"): 0 when it was not warm-started, or when that
// attr is damaged (a store edited by hand: not an object, or "copied" not
// an integer >= 0). The one count of the copies that `status`, `run`'s
// budget (Sampler::plan_budget) and the end summary use. Never throws.
std::int64_t warm_start_copies(const StudyInfo& info);

// An earlier study, opened and checked (open_warm_start_source).
struct WarmStartSource {
  std::shared_ptr<Storage> storage;  // the earlier store
  std::string label;                 // WarmStartConfig::storage, as given
  std::string study;                 // the earlier study's name (resolved)
};

// Opens the earlier study of space.json's warm_start / --warm-start and
// checks it against the new study (`study_name`, `direction`, stored in
// `study_storage`, a storage URL), before the new study is touched. Throws
// ConfigError naming the field:
//  - "warm_start.storage": "memory"; not an existing file (open_storage
//    would create one; the file is opened only once it is known to exist);
//    not a regular file; an empty file (open_storage would make it a store);
//    a file that is no readable hpsearch store (a StorageError while
//    opening it or reading the study's COMPLETE trials, wrapped: so a
//    broken store is refused before the new study is touched);
//  - "warm_start.study": absent from the store (the message lists the
//    studies there), empty with a store of several studies or none, the new
//    study itself (same name in the same file), or another direction (a
//    value to maximize is no observation for a minimization).
// The earlier store is only read (an older schema version is migrated, as
// any open does).
WarmStartSource open_warm_start_source(const WarmStartConfig& config, const std::string& study_name,
                                       StudyDirection direction, const std::string& study_storage);

// warm_start(study, config, study_storage): the whole warm start of an
// open study in one call. If it was warm-started before, returns a summary
// with already_done set and opens nothing; else open_warm_start_source and
// copy_warm_start.
WarmStartSummary warm_start(Study& study, const WarmStartConfig& config,
                            const std::string& study_storage);

}  // namespace hps
