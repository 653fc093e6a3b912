// RunLimits: when the coordinator may dispatch a trial and when the study
// is done, decided in one place: the trial budget (n_trials, counting
// finished and running trials), the timeout, the min_workers gate, an
// interrupt (stop()) and an exhausted search space. Private to the
// coordinator (not installed).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "coordinator/coordinator.h"

namespace hps {

// What the limits are checked against, as the coordinator sees it now.
struct RunProgress {
  std::int64_t finished = 0;  // trials counting as finished (the budget's)
  std::int64_t running = 0;   // trials dispatched and not ended
  bool any_waiting = false;   // a WAITING trial is queued
  bool exhausted = false;     // the sampler found no untried point
  bool stopping = false;      // stop() was called
};

class RunLimits {
 public:
  using Clock = std::chrono::steady_clock;

  // `options` must outlive this; `start` is when the run started (timeout_s
  // and min_workers_wait_s count from it).
  RunLimits(const CoordinatorOptions& options, Clock::time_point start)
      : options_(options), start_(start) {}

  // Whether timeout_s has passed since the start.
  bool timed_out(Clock::time_point now) const;
  // Whether another trial may be dispatched within n_trials.
  bool budget_left(const RunProgress& p) const;
  // Whether a trial may be dispatched now. The first time that `n_workers`
  // reaches min_workers (or min_workers_wait_s has passed), the gate opens
  // and stays open.
  bool can_dispatch(Clock::time_point now, std::size_t n_workers, const RunProgress& p);
  // Why the study is done at `now` ("interrupted", "budget reached",
  // "timeout", "search space exhausted"), or "" while it is not: it is done
  // when nothing runs and nothing more will be dispatched.
  std::string done_reason(Clock::time_point now, const RunProgress& p) const;

 private:
  const CoordinatorOptions& options_;
  Clock::time_point start_;
  bool gate_open_ = false;
};

}  // namespace hps
