#include "tests/support/log_capture.h"

#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <mutex>

namespace hps::testsupport {

class LogSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string text() {
    std::lock_guard lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const auto level = spdlog::level::to_string_view(msg.level);
    text_.append(level.data(), level.size());
    text_ += ": ";
    text_.append(msg.payload.data(), msg.payload.size());
    text_ += '\n';
  }
  void flush_() override {}

 private:
  std::string text_;
};

CapturedLog::CapturedLog(spdlog::level::level_enum level)
    : sink_(std::make_shared<LogSink>()), old_level_(spdlog::get_level()) {
  spdlog::default_logger()->sinks().push_back(sink_);
  spdlog::set_level(level);
}

CapturedLog::~CapturedLog() {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  spdlog::set_level(old_level_);
}

std::string CapturedLog::text() const { return sink_->text(); }

std::int64_t held_back_count(const std::string& text, const std::string& what, int* lines) {
  const std::string prefix = "coordinator: ";
  const std::string needle = " more " + what + " not shown (at most ";
  std::int64_t sum = 0;
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    std::size_t digits = at;
    while (digits > 0 && text[digits - 1] >= '0' && text[digits - 1] <= '9') --digits;
    if (digits == at || digits < prefix.size() ||
        text.compare(digits - prefix.size(), prefix.size(), prefix) != 0)
      continue;
    sum += std::stoll(text.substr(digits, at - digits));
    ++n;
  }
  if (lines) *lines = n;
  return sum;
}

}  // namespace hps::testsupport
