#include "coordinator/run_limits.h"

#include <algorithm>

#include "search/printable.h"

namespace hps {

namespace {

constexpr std::int64_t kFailFastTrials = 5;

}  // namespace

void RunOutcomes::add(const FrozenTrial& t) {
  if (t.is_warm_start()) return;
  if (t.state == TrialState::kComplete || t.state == TrialState::kPruned) {
    ++succeeded;
  } else if (t.state == TrialState::kFail && !t.was_retried()) {
    ++failed;
    if (succeeded == 0) ++failed_before_success;
    last_fail_reason = t.fail_reason;
  }
}

std::int64_t fail_fast_trials(const CoordinatorOptions& options) {
  return options.n_trials ? std::min(kFailFastTrials, *options.n_trials) : kFailFastTrials;
}

std::string failure_stop_reason(const CoordinatorOptions& options, const RunOutcomes& o) {
  if (options.max_failed_trials && o.failed >= *options.max_failed_trials)
    return std::to_string(*options.max_failed_trials) +
           (*options.max_failed_trials == 1 ? " trial" : " trials") +
           " failed (budget.max_failed_trials)";
  const std::int64_t k = fail_fast_trials(options);
  if (options.fail_fast && k > 0 && o.failed_before_success >= k)
    return (k == 1 ? std::string("the first trial failed; reason: ")
                   : "the first " + std::to_string(k) + " trials all failed; last reason: ") +
           one_line_reason(o.last_fail_reason) + ": the objective looks broken";
  return "";
}

bool RunLimits::timed_out(Clock::time_point now) const {
  return options_.timeout_s &&
         std::chrono::duration<double>(now - start_).count() >= *options_.timeout_s;
}

bool RunLimits::budget_left(const RunProgress& p) const {
  return !options_.n_trials || p.finished + p.running < *options_.n_trials;
}

bool RunLimits::may_prefetch(const RunProgress& p, std::size_t n_workers) const {
  return !options_.n_trials ||
         *options_.n_trials - p.finished - p.running > static_cast<std::int64_t>(n_workers);
}

bool RunLimits::can_dispatch(Clock::time_point now, std::size_t n_workers, const RunProgress& p) {
  if (!gate_open_) {
    gate_open_ = static_cast<int>(n_workers) >= options_.min_workers || start_wait_over(now);
    if (!gate_open_) return false;
  }
  return !p.stopping && failure_reason_.empty() && budget_left(p) && !timed_out(now) &&
         (p.any_waiting || (!p.exhausted && !p.schedule_done));
}

std::string RunLimits::done_reason(Clock::time_point now, const RunProgress& p) const {
  if (p.running > 0) return "";
  if (p.stopping) return "interrupted";
  if (!failure_reason_.empty()) return failure_reason_;
  if (options_.n_trials && p.finished >= *options_.n_trials) return "budget reached";
  if (timed_out(now)) return "timeout";
  if (p.exhausted && !p.any_waiting) return "search space exhausted";
  if (p.schedule_done && !p.any_waiting) return "population trained (scheduler pbt)";
  return "";
}

void RunLimits::trial_ended(const FrozenTrial& t) {
  outcomes_.add(t);
  if (failure_reason_.empty()) failure_reason_ = failure_stop_reason(options_, outcomes_);
}

}  // namespace hps
