// Trial lifecycle: the rules every runner of trials follows, in one place
// (as Optuna's optuna/study/_tell.py). Used by hps::Study (trials run in
// this process), the coordinator (trials run by workers) and hps::Worker
// (the objective's side of a remote trial).
//
//  - Tell rules: how a requested end (state, value, reason) is stored
//    (resolve_end).
//  - An objective's outcome (a value, TrialPruned, Interrupted, another
//    exception) and the end it asks for (run_objective, requested_end).
//  - Enqueued params: the system attr fixed_params of a WAITING trial, and
//    how its values enter sampling (fixed_params_of, apply_fixed_params).
//  - Retries: a new WAITING trial with the params of a FAIL one, linked by
//    the system attrs retry_of / retried_as, its cause recorded as the
//    system attr retry_cause; the retry limit counts causes, never messages
//    (queue_retry, retry_depth).
//  - The best trial (is_best_candidate, ranks_before, best_trial).
//  - Define-by-run suggest (suggest_param).
//
// Functions here write to a Storage only where they say so; the caller
// picks the transaction (Storage::run_in_transaction) around them.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "search/distributions.h"
#include "search/search_space.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/trial.h"

namespace hps::lifecycle {

// ------------------------------------------------------------ tell rules

// The fail reason of a trial whose objective returned NaN (or that was told
// FAIL without a reason).
inline constexpr const char* kReasonNaN = "objective returned NaN";
// The fail reason of a trial interrupted in this process (Study::optimize
// with OptimizeOptions::stop set).
inline constexpr const char* kReasonInterrupted = "interrupted";

// How a trial ends, as stored.
struct TrialEnd {
  TrialState state = TrialState::kFail;
  // COMPLETE: the value (never NaN); PRUNED: the value if any (never NaN);
  // FAIL: none.
  std::optional<double> value{};
  // FAIL: why (never empty); "" otherwise.
  std::string fail_reason{};
};

// Applies the tell rules to a requested end of a trial:
//  - `state` must be COMPLETE, PRUNED or FAIL; else
//    Error("tell: state must be COMPLETE, PRUNED or FAIL").
//  - COMPLETE needs a value (else Error("tell: COMPLETE needs a value")); a
//    NaN value makes the trial FAIL.
//  - PRUNED without a value takes `last_intermediate()` (the value at the
//    deepest step reported, if any); a NaN value is dropped.
//  - FAIL has no value; its reason is `fail_reason`, or kReasonNaN if empty.
// `last_intermediate` is called only for PRUNED without a value (so a
// caller may read the store there); it may be empty otherwise.
TrialEnd resolve_end(TrialState state, std::optional<double> value, std::string fail_reason,
                     const std::function<std::optional<double>()>& last_intermediate);

// ------------------------------------------------------------ outcomes

enum class OutcomeKind {
  kValue,        // the objective returned (the value may be NaN)
  kPruned,       // it threw TrialPruned
  kInterrupted,  // it threw Interrupted (the run or the worker stopped)
  kException,    // it threw anything else
};

// How an objective call ended.
struct Outcome {
  OutcomeKind kind = OutcomeKind::kValue;
  double value = 0.0;          // kValue: what the objective returned
  std::string message{};       // kException: the exception's what(), never empty
  std::exception_ptr error{};  // kException: the exception itself, to rethrow
};

// Calls objective(trial) and tells how it ended. Never throws: every
// exception, std:: or not, becomes an Outcome. The message of a
// std::exception is its what() ("exception" if empty); of any other type,
// "exception of a type not derived from std::exception".
Outcome run_objective(const Objective& objective, Trial& trial);

// The end an outcome asks for, before the tell rules: kValue -> COMPLETE
// with the value (resolve_end makes NaN FAIL), kPruned -> PRUNED without a
// value (the last intermediate value is taken), kInterrupted ->
// FAIL(kReasonInterrupted), kException -> FAIL(message).
TrialEnd requested_end(const Outcome& outcome);

// ------------------------------------------------------------ enqueued params

// The enqueued params of a trial (its system attr fixed_params); empty if
// it has none.
Params fixed_params_of(const FrozenTrial& trial);

// The value of the system attr fixed_params for `params` (a JSON object).
Json fixed_params_attr(const Params& params);

// Checks params to enqueue against a declared space: each must be a param
// of `space` whose distribution contains the value, and none may be
// inactive given the other params enqueued with it. Throws
// ConfigError("params.<name>", rule) for the first that breaks a rule.
void check_enqueued_params(const SearchSpace& space, const Params& params);

// Adds to `chosen` the enqueued values that fit the declared space, in the
// space's order: a param not yet in `chosen`, active given `chosen`, whose
// distribution contains the enqueued value (stored as a sampler gives it:
// to_external(to_internal(v))). The sampler then fills in the rest.
void apply_fixed_params(const SearchSpace& space, const Params& fixed, Params& chosen);

// The enqueued values not yet taken as params (what the trial's
// define-by-run suggest calls may still take).
Params pending_fixed_params(const Params& fixed, const Params& params);

// Stores the params of `space` that `chosen` has and `existing` lacks (the
// values a sampler just chose) with Storage::set_trial_param; returns them
// in the space's order. Throws StorageError from the store.
std::vector<const ParamSpec*> store_new_params(Storage& storage, std::int64_t trial_id,
                                               const SearchSpace& space, const Params& existing,
                                               const Params& chosen);

// ------------------------------------------------------------ retries

// The system attr of a retry trial that says why the trial it retries
// ended FAIL: to_string(RetryCause). Stores written before it existed lack
// it (see retry_depth).
inline constexpr const char* kAttrRetryCause = "retry_cause";

// Why a trial is queued again.
enum class RetryCause {
  kWorkerLost,     // "worker_lost": its worker went silent, exited or moved on
                   // (the only cause that counts against the retry limit)
  kWorkerStopped,  // "worker_stopped": its worker was stopped (a signal) mid-trial
  kInterrupted,    // "interrupted": the run was stopped (Ctrl-C, Coordinator::stop)
  kStale,          // "stale": left RUNNING by a process that is gone (a restart)
};

// "worker_lost", "worker_stopped", "interrupted", "stale".
const char* to_string(RetryCause cause);
// Inverse of to_string; nullopt for anything else.
std::optional<RetryCause> parse_retry_cause(const std::string& text);

// Whether a retry for `cause` counts against the retry limit
// (CoordinatorOptions::max_retries). Only a lost worker does (the trial may
// have killed its worker: a crash, out of memory, a hang). An interruption
// from outside does not, as the trial would have finished: a worker
// stopped by a signal (Ctrl-C, scancel, preemption: a whole Slurm step
// stops together, and the retry may well be handed to a task of that same
// step before its signal arrives), an interrupted run, a stale trial of a
// coordinator that is gone. Such a trial is queued again whatever the
// limit (the coordinator: Coordinator::Impl::end_lost_trial), and its retry
// does not add to retry_depth; such retries are bounded by the
// interruptions themselves.
bool counts_against_retry_limit(RetryCause cause);

// Queues a retry of `failed` (a FAIL trial): a new WAITING trial of
// `study_id` whose enqueued params are failed.params plus the enqueued
// params it never asked for; system attrs retry_of (failed.number) and
// retry_cause on the new trial, retried_as (the new number) on `failed`.
// Writes in one Storage::run_in_transaction (nested in the caller's, if
// any). Returns the new trial. Throws StorageError from the store.
TrialPtr queue_retry(Storage& storage, std::int64_t study_id, const FrozenTrial& failed,
                     RetryCause cause);

// Long trials (search/checkpoints.h): queue_retry also sets the retry's
// system attr lineage (the lineage of `failed`) and, when `failed`'s
// lineage has a snapshot (checkpoints::snapshot_step), resumed_from
// {"trial": failed.number, "step": S}, so the retry continues from step S.

// Called by a runner once the retry `claimed` (resumed_from {"trial": N,
// "step": S}) has its checkpoint folder prepared (Study::ask; the
// coordinator on the worker's Restored message). restored = true: the
// folder holds the snapshot of step S; the trial gets trial N's
// intermediate values at steps <= S (those it lacks), so its learning
// curve is whole and pruners judge the whole of it, and resumed_from gets
// "restored": true. restored = false: the snapshot could not be used and
// the trial trains from step 0; resumed_from gets "restored": false and
// "warning" (`warning`), nothing is copied, and a later retry of it does not
// resume from S. Does nothing for a trial without resumed_from. Returns the
// trial as stored after that. Throws StorageError from the store.
TrialPtr start_resumed_trial(Storage& storage, std::int64_t study_id, const TrialPtr& claimed,
                             bool restored, const std::string& warning = "");

// How many times the params of trial `number` were already queued again for
// a cause that counts against the retry limit: the trials of its retry_of
// chain whose retry counts. `trials`: the study's trials by number
// (trials[i]->number == i). A retry written before retry_cause existed
// counts when the trial it retries failed with a reason starting "worker"
// (the rule of those versions), so older stores resume as they would have.
int retry_depth(const std::vector<TrialPtr>& trials, std::int64_t number);

// ------------------------------------------------------------ best trial

// Whether `trial` may be the best: COMPLETE with a value that is not NaN,
// and not a warm-start trial (FrozenTrial::is_warm_start: its value comes
// from the earlier study's objective, which the new study no longer runs;
// so Study::best_trial, the coordinator's best and `hpsearch best` name
// trials of this study only).
bool is_best_candidate(const FrozenTrial& trial);

// Whether candidate `a` ranks before candidate `b`: a better value in
// `direction` (lower to minimize, higher to maximize), a tie going to the
// lower number. Both must satisfy is_best_candidate().
bool ranks_before(StudyDirection direction, const FrozenTrial& a, const FrozenTrial& b);

// The best of `trials` (any states, any order), or null if none is a
// candidate.
TrialPtr best_trial(StudyDirection direction, const std::vector<TrialPtr>& trials);

// ------------------------------------------------------------ define-by-run

// A value for a define-by-run suggest call.
struct Suggested {
  Json value;           // external value (see distributions.h)
  bool is_new = false;  // true: not yet a param of the trial (store it)
};

// The value of param `name` asked for with `distribution` by a trial with
// `params` (and their `distributions`) set and `fixed` enqueued:
//  - already set: that value (is_new false); Error("suggest '<name>': ...
//    differs from the distribution it was first suggested with ...") if
//    `distributions` records another distribution for it;
//  - else its enqueued value, if `distribution` contains it (stored as a
//    sampler gives it);
//  - else sample(), the external value the study's sampler draws (called
//    only here, so it may take a lock and read the history).
Suggested suggest_param(const Params& params,
                        const std::map<std::string, Distribution>& distributions,
                        const Params& fixed, const std::string& name,
                        const Distribution& distribution, const std::function<Json()>& sample);

}  // namespace hps::lifecycle
