#include "coordinator/log_limiter.h"

#include <spdlog/spdlog.h>

namespace hps {

bool LogLimiter::allow(Clock::time_point now) {
  if (now - window_ >= std::chrono::seconds(1)) {
    if (suppressed_ > 0)
      spdlog::warn("coordinator: {} more similar messages not shown", suppressed_);
    window_ = now;
    count_ = 0;
    suppressed_ = 0;
  }
  if (count_ < burst_) {
    ++count_;
    return true;
  }
  ++suppressed_;
  return false;
}

}  // namespace hps
