// RunLimits: when the coordinator may dispatch a trial and when the study
// is done, decided in one place: the trial budget (n_trials, counting
// finished and running trials), the timeout, the min_workers gate, an
// interrupt (stop()), an exhausted search space, and the failure rules
// (max_failed_trials; fail_fast: the first trials of the run all FAIL).
// Private to the coordinator (not installed).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "coordinator/coordinator.h"

namespace hps {

// What the limits are checked against, as the coordinator sees it now.
struct RunProgress {
  std::int64_t finished = 0;   // trials counting as finished (the budget's)
  std::int64_t running = 0;    // trials dispatched and not ended
  bool any_waiting = false;    // a WAITING trial is queued
  bool exhausted = false;      // the sampler found no untried point
  bool stopping = false;       // stop() was called
  bool schedule_done = false;  // the scheduler (PBT) starts no new member
};

// The trials of this run (since the coordinator started) as the failure
// rules count them. A FAIL queued again as a retry (its worker lost or
// stopped, the run interrupted, a coordinator restart: system attr
// retried_as) is not counted; warm-start copies never are.
struct RunOutcomes {
  std::int64_t succeeded = 0;              // ended COMPLETE or PRUNED
  std::int64_t failed = 0;                 // ended FAIL, not queued again
  std::int64_t failed_before_success = 0;  // of those, ended before any success
  std::string last_fail_reason;            // the newest counted FAIL's reason

  // Counts `t`, a trial of this run that just ended (its final snapshot).
  void add(const FrozenTrial& t);
};

// The first trials of a run that fail fast looks at: 5, or n_trials if
// smaller (0: the rule never applies).
std::int64_t fail_fast_trials(const CoordinatorOptions& options);

// The failure rules as a pure function: "" while they allow more trials,
// else why the run stops: "N trials failed (budget.max_failed_trials)" ("1
// trial failed ...") once
// `o.failed` reaches options.max_failed_trials; with options.fail_fast,
// "the first K trials all failed; last reason: R: the objective looks
// broken" ("the first trial failed; reason: R: ..." for K = 1) once K = fail_fast_trials(options)
// trials failed before any succeeded (R: the last reason on one line, its first and last non-empty
// lines of at most 150 bytes each, printable). Both counts only grow, so
// once non-empty it stays non-empty.
std::string failure_stop_reason(const CoordinatorOptions& options, const RunOutcomes& o);

class RunLimits {
 public:
  using Clock = std::chrono::steady_clock;

  // `options` must outlive this; `start` is when the run started (timeout_s
  // and min_workers_wait_s count from it).
  RunLimits(const CoordinatorOptions& options, Clock::time_point start)
      : options_(options), start_(start) {}

  // Whether timeout_s has passed since the start.
  bool timed_out(Clock::time_point now) const;
  // Whether min_workers_wait_s has passed since the start.
  bool start_wait_over(Clock::time_point now) const {
    return std::chrono::duration<double>(now - start_).count() >= options_.min_workers_wait_s;
  }
  // Whether another trial may be dispatched within n_trials.
  bool budget_left(const RunProgress& p) const;
  // Whether a trial may be dispatched now. The first time that `n_workers`
  // (the workers asking for a trial) reaches min_workers (or
  // min_workers_wait_s has passed), the gate opens and stays open. Never
  // once a failure rule stopped the run.
  bool can_dispatch(Clock::time_point now, std::size_t n_workers, const RunProgress& p);
  // Whether a trial may go to a worker that is busy (prefetch) when
  // `n_workers` are connected: while the budget (n_trials) leaves more
  // trials to start than there are workers, or without a budget. Near the
  // end, a prefetched trial would wait on a busy worker while another
  // worker idles, and the study would take up to a trial's length longer.
  bool may_prefetch(const RunProgress& p, std::size_t n_workers) const;
  // Why the study is done at `now` ("interrupted", failure_reason(),
  // "budget reached", "timeout", "search space exhausted"), or "" while it
  // is not: it is done when nothing runs and nothing more will be
  // dispatched.
  std::string done_reason(Clock::time_point now, const RunProgress& p) const;

  // A trial of this run ended (its final snapshot, after any retry was
  // queued): counted for the failure rules (RunOutcomes::add).
  void trial_ended(const FrozenTrial& t);
  const RunOutcomes& outcomes() const { return outcomes_; }
  // Why a failure rule stopped the run (failure_stop_reason), "" if none did.
  const std::string& failure_reason() const { return failure_reason_; }

 private:
  const CoordinatorOptions& options_;
  Clock::time_point start_;
  bool gate_open_ = false;
  RunOutcomes outcomes_;
  std::string failure_reason_;
};

}  // namespace hps
