// Trials: FrozenTrial (a stored, immutable snapshot) and TrialState.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "search/distributions.h"
#include "search/search_space.h"

namespace hps {

enum class TrialState { kWaiting = 0, kRunning = 1, kComplete = 2, kPruned = 3, kFail = 4 };

// "WAITING", "RUNNING", "COMPLETE", "PRUNED", "FAIL".
const char* to_string(TrialState state);
// Inverse of to_string (case-insensitive); nullopt for anything else.
std::optional<TrialState> parse_trial_state(const std::string& text);
inline bool is_finished(TrialState s) {
  return s == TrialState::kComplete || s == TrialState::kPruned || s == TrialState::kFail;
}

using Clock = std::chrono::system_clock;
using TimePoint = Clock::time_point;

// System attribute keys used by hpsearch itself.
inline constexpr const char* kAttrRetryOf = "retry_of";          // trial number this retries
inline constexpr const char* kAttrRetriedAs = "retried_as";      // trial number of the retry
inline constexpr const char* kAttrFixedParams = "fixed_params";  // enqueued params (JSON)
// A COMPLETE trial copied from an earlier study by a warm start
// (search/warm_start.h): {"storage": ..., "study": ..., "trial": number}.
inline constexpr const char* kAttrWarmStart = "warm_start";
// A FAIL trial that does not count against the budget (n_trials), with why
// (a string): "objective changed" (it failed under an objective that a
// later run of the study changed) or "run stopped for failures" (it failed
// in a run that its failure rules, fail_fast or max_failed_trials, stopped
// before any of its trials succeeded: the objective was broken, not the
// params). Set by hpsearch run and resume (docs: reference/space-json.md,
// "budget").
inline constexpr const char* kAttrBudgetExcluded = "budget_excluded";

// A snapshot of one trial as stored. Values are immutable once the snapshot
// is taken; storages hand them out as shared pointers (TrialPtr).
struct FrozenTrial {
  std::int64_t trial_id = -1;  // storage-wide id
  std::int64_t number = -1;    // 0, 1, 2 ... per study, unique and contiguous
  TrialState state = TrialState::kWaiting;
  std::optional<double> value;                         // COMPLETE: the objective value (never NaN)
  Params params;                                       // external values; inactive params absent
  DistributionMap distributions;                       // one per param (shared)
  std::map<std::int64_t, double> intermediate_values;  // step -> value
  Json user_attrs = Json::object();
  Json system_attrs = Json::object();
  std::optional<TimePoint> datetime_start;
  std::optional<TimePoint> datetime_complete;
  std::string worker;       // who ran it ("host:pid", a worker id)
  std::string fail_reason;  // FAIL only

  // Seconds between start and completion, if both are set.
  std::optional<double> duration_s() const;
  // The value at the deepest step reported, if any.
  std::optional<std::pair<std::int64_t, double>> last_intermediate() const;
  // True if this FAIL trial was queued again (system attr retried_as set);
  // such a trial does not count towards the budget.
  bool was_retried() const;
  // True if this trial was copied from an earlier study by a warm start
  // (system attr warm_start set): a prior observation that samplers see as
  // any COMPLETE trial, but that never ran in this study.
  bool is_warm_start() const;
  // True if this FAIL trial was excluded from the budget (system attr
  // budget_excluded set: kAttrBudgetExcluded says when).
  bool budget_excluded() const;
  // Counts towards the budget: COMPLETE, PRUNED, or FAIL neither retried nor
  // excluded from the budget; never a warm-start trial.
  bool counts_as_finished() const {
    return is_finished(state) && !was_retried() && !budget_excluded() && !is_warm_start();
  }
};

using TrialPtr = std::shared_ptr<const FrozenTrial>;

// ISO 8601 in UTC with microseconds: "2026-11-29T10:49:27.123456Z".
std::string format_iso8601(TimePoint t);

// The JSON object of `hpsearch trials --format json`: keys number, state,
// value, params, distributions, intermediate_values (object step -> value),
// user_attrs, system_attrs, datetime_start, datetime_complete, duration_s,
// worker, fail_reason. Non-finite numbers (values, intermediate values,
// floats in attrs) are written as the strings "inf", "-inf", "nan" (JSON has
// no literal for them; stores keep them as floats).
Json trial_to_json(const FrozenTrial& trial);

}  // namespace hps
