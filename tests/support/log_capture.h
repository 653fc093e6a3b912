// Captures what spdlog's default logger writes while an object lives.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <memory>
#include <string>

namespace hps::testsupport {

class LogSink;

class CapturedLog {
 public:
  // Adds a sink to spdlog's default logger and sets the global level to
  // `level` (restored with the sink removed by the destructor).
  explicit CapturedLog(spdlog::level::level_enum level = spdlog::level::info);
  ~CapturedLog();
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  // Everything logged so far, one line per message: "LEVEL: message\n"
  // (LEVEL as spdlog names it: "info", "warning", "debug", ...). Thread-safe.
  std::string text() const;

 private:
  std::shared_ptr<LogSink> sink_;
  spdlog::level::level_enum old_level_;
};

// The sum of the counts in the count lines of coordinator/log_limiter.h
// ("coordinator: N more WHAT not shown (at most ...)") for the kind `what`
// in `text` (CapturedLog::text()); `lines`, if not null, gets how many such
// lines there were.
std::int64_t held_back_count(const std::string& text, const std::string& what,
                             int* lines = nullptr);

}  // namespace hps::testsupport
