// LogLimiter: at most `burst` log lines per second for one kind of message
// (bad frames, late results); the next window reports how many it held
// back. Private to the coordinator (not installed).
#pragma once

#include <chrono>
#include <cstdint>

namespace hps {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // burst: lines allowed per one-second window (>= 1).
  explicit LogLimiter(int burst) : burst_(burst) {}

  // Whether a line may be logged at `now`. Opening a new window logs (as a
  // warning) how many lines the last one suppressed.
  bool allow(Clock::time_point now);

 private:
  int burst_;
  int count_ = 0;
  std::int64_t suppressed_ = 0;
  Clock::time_point window_{};
};

}  // namespace hps
