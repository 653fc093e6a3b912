// Tests of LogLimiter (coordinator/log_limiter.h): at most `burst` lines a
// second of one kind, and the count of those held back logged, naming the
// kind, once their second has passed: by the next allowed line, by flush()
// without one (a flood that stopped), and by flush_at_exit() whatever the
// window. Time is given, never waited for.
#include "coordinator/log_limiter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "tests/support/log_capture.h"

namespace hps {
namespace {

using Clock = LogLimiter::Clock;
using std::chrono::milliseconds;
using testsupport::CapturedLog;
using testsupport::held_back_count;

constexpr const char* kWhat = "refused peers that failed the CURVE handshake";

// The defect: 300 lines in a burst, 10 allowed, and no later line of the
// kind. The count of the other 290 was logged only by a later allow(), so
// never; flush() logs it once the second has passed, once.
TEST(LogLimiter, AFloodThatStopsHasItsCountLoggedByFlushOnceItsSecondPassed) {
  CapturedLog log;
  LogLimiter limiter(10, kWhat);
  const Clock::time_point t0 = Clock::now();
  int allowed = 0;
  for (int i = 0; i < 300; ++i) allowed += limiter.allow(t0 + milliseconds(i / 10)) ? 1 : 0;
  EXPECT_EQ(allowed, 10);
  EXPECT_EQ(limiter.pending(), 290);

  limiter.flush(t0 + milliseconds(999));  // the window has not passed: nothing yet
  EXPECT_EQ(log.text(), "");
  EXPECT_EQ(limiter.pending(), 290);

  limiter.flush(t0 + milliseconds(1000));
  EXPECT_EQ(log.text(), "warning: coordinator: 290 more " + std::string(kWhat) +
                            " not shown (at most 10 lines a second)\n");
  EXPECT_EQ(limiter.pending(), 0);

  // Said once: neither a later flush nor the next window says it again.
  limiter.flush(t0 + milliseconds(5000));
  EXPECT_TRUE(limiter.allow(t0 + milliseconds(6000)));
  limiter.flush_at_exit();
  int lines = 0;
  EXPECT_EQ(held_back_count(log.text(), kWhat, &lines), 290);
  EXPECT_EQ(lines, 1) << log.text();
}

// A line of the kind in a later window logs the last window's count first,
// as before; a flush after it has nothing left to say.
TEST(LogLimiter, ALaterLineLogsTheLastWindowsCountFirst) {
  CapturedLog log;
  LogLimiter limiter(2, "dropped bad frames");
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(limiter.allow(t0));
  EXPECT_TRUE(limiter.allow(t0));
  EXPECT_FALSE(limiter.allow(t0));
  EXPECT_FALSE(limiter.allow(t0 + milliseconds(500)));
  EXPECT_EQ(log.text(), "");
  EXPECT_TRUE(limiter.allow(t0 + milliseconds(1500)));  // a new window
  EXPECT_EQ(log.text(),
            "warning: coordinator: 2 more dropped bad frames not shown (at most 2 lines a "
            "second)\n");
  limiter.flush(t0 + milliseconds(9000));
  EXPECT_EQ(held_back_count(log.text(), "dropped bad frames"), 2);
}

// At shutdown the count is logged whatever the window.
TEST(LogLimiter, FlushAtExitLogsTheCountBeforeItsSecondPassed) {
  CapturedLog log;
  LogLimiter limiter(1, "rejected late results");
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(limiter.allow(t0));
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(limiter.allow(t0));
  limiter.flush(t0 + milliseconds(10));  // too early for flush()
  EXPECT_EQ(log.text(), "");
  limiter.flush_at_exit();
  EXPECT_EQ(log.text(),
            "warning: coordinator: 7 more rejected late results not shown (at most 1 line a "
            "second)\n");
  EXPECT_EQ(limiter.pending(), 0);
}

// Nothing held back, nothing said; a limiter without a kind says "similar
// messages".
TEST(LogLimiter, NoCountLineWithoutHeldBackLinesAndADefaultKind) {
  CapturedLog log;
  LogLimiter limiter(3, "");
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.allow(t0));
  limiter.flush(t0 + milliseconds(2000));
  limiter.flush_at_exit();
  EXPECT_EQ(log.text(), "");
  for (int i = 0; i < 4; ++i) (void)limiter.allow(t0 + milliseconds(3000));
  limiter.flush_at_exit();
  EXPECT_EQ(log.text(),
            "warning: coordinator: 1 more similar messages not shown (at most 3 lines a "
            "second)\n");
}

// Over any sequence of lines, flushes and windows (seeded), every line is
// either allowed or counted exactly once by the time of the final flush,
// and no window allows more than `burst`.
TEST(LogLimiter, EveryLineIsShownOrCountedExactlyOnce) {
  CapturedLog log;
  const int burst = 4;
  LogLimiter limiter(burst, "messages of the test");
  std::mt19937_64 rng(7);
  Clock::time_point now = Clock::now();
  Clock::time_point window = now - std::chrono::hours(1);
  int in_window = 0;
  std::int64_t allowed = 0;
  const int total = 5000;
  for (int i = 0; i < total; ++i) {
    now += milliseconds(rng() % 40);  // about 50 lines a second
    if (rng() % 10 == 0) limiter.flush(now);
    const bool ok = limiter.allow(now);
    if (now - window >= std::chrono::seconds(1)) {
      window = now;
      in_window = 0;
    }
    if (ok) {
      ++allowed;
      ++in_window;
    }
    EXPECT_LE(in_window, burst);
  }
  limiter.flush_at_exit();
  EXPECT_EQ(allowed + held_back_count(log.text(), "messages of the test"), total);
  EXPECT_EQ(limiter.pending(), 0);
}

}  // namespace
}  // namespace hps
