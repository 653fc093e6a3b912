// Captures what spdlog's default logger writes while an object lives.
#pragma once

#include <spdlog/spdlog.h>

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

}  // namespace hps::testsupport
