#include "coordinator/run_limits.h"

namespace hps {

bool RunLimits::timed_out(Clock::time_point now) const {
  return options_.timeout_s &&
         std::chrono::duration<double>(now - start_).count() >= *options_.timeout_s;
}

bool RunLimits::budget_left(const RunProgress& p) const {
  return !options_.n_trials || p.finished + p.running < *options_.n_trials;
}

bool RunLimits::can_dispatch(Clock::time_point now, std::size_t n_workers, const RunProgress& p) {
  if (!gate_open_) {
    gate_open_ = static_cast<int>(n_workers) >= options_.min_workers ||
                 std::chrono::duration<double>(now - start_).count() >= options_.min_workers_wait_s;
    if (!gate_open_) return false;
  }
  return !p.stopping && budget_left(p) && !timed_out(now) && (p.any_waiting || !p.exhausted);
}

std::string RunLimits::done_reason(Clock::time_point now, const RunProgress& p) const {
  if (p.running > 0) return "";
  if (p.stopping) return "interrupted";
  if (options_.n_trials && p.finished >= *options_.n_trials) return "budget reached";
  if (timed_out(now)) return "timeout";
  if (p.exhausted && !p.any_waiting) return "search space exhausted";
  return "";
}

}  // namespace hps
