#include "coordinator/log_limiter.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace hps {

LogLimiter::LogLimiter(int burst, std::string what)
    : burst_(burst < 1 ? 1 : burst), what_(what.empty() ? "similar messages" : std::move(what)) {}

void LogLimiter::log_count() {
  if (suppressed_ == 0) return;
  spdlog::warn("coordinator: {} more {} not shown (at most {} line{} a second)", suppressed_, what_,
               burst_, burst_ == 1 ? "" : "s");
  suppressed_ = 0;
}

bool LogLimiter::allow(Clock::time_point now) {
  if (now - window_ >= std::chrono::seconds(1)) {
    log_count();
    window_ = now;
    count_ = 0;
  }
  if (count_ < burst_) {
    ++count_;
    return true;
  }
  ++suppressed_;
  return false;
}

void LogLimiter::flush(Clock::time_point now) {
  if (suppressed_ > 0 && now - window_ >= std::chrono::seconds(1)) log_count();
}

void LogLimiter::flush_at_exit() { log_count(); }

}  // namespace hps
