// LogLimiter: at most `burst` log lines a second for one kind of message
// (bad frames, late results, refused peers). The lines over the rate are
// held back and counted, and the count is logged, as a warning that names
// the kind ("coordinator: 290 more refused peers that failed the CURVE
// handshake not shown (at most 10 lines a second)"), once their one-second
// window has passed: by the next allow() of the kind, or by flush(), which
// the owner calls from its loop (the coordinator's step loop, the handshake
// monitor's and the ZAP handler's poll loops), so a flood that stops is
// still counted; and by flush_at_exit() when the owner stops, whatever the
// window. Lines go to spdlog's default logger. Not thread-safe: one thread
// uses a limiter. Private to the coordinator (not installed).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace hps {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // burst: lines allowed per one-second window (>= 1). what: the kind of
  // message, as a plural noun phrase that the count line names ("dropped
  // bad frames"; "" reads "similar messages").
  LogLimiter(int burst, std::string what);

  // Whether a line may be logged at `now`: true for the first `burst` of
  // its window; false (and counted) for the rest. Opening a new window
  // (`now` at least one second after the last one opened) first logs the
  // count of the last one, if any was held back.
  bool allow(Clock::time_point now);

  // Logs the count of the lines held back, if any, once their window has
  // passed (`now` at least one second after it opened); the count then
  // starts again from 0. Cheap when nothing is held back: call it from a
  // loop.
  void flush(Clock::time_point now);

  // Logs the count of the lines held back, if any, whatever the window:
  // for the owner's shutdown, so that no count is lost.
  void flush_at_exit();

  // Lines held back whose count has not been logged yet.
  std::int64_t pending() const { return suppressed_; }

 private:
  void log_count();

  int burst_;
  std::string what_;
  int count_ = 0;
  std::int64_t suppressed_ = 0;
  Clock::time_point window_{};
};

}  // namespace hps
