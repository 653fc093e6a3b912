// libFuzzer target: the command objective's metrics collector
// (objectives/command_metrics.h), which reads values out of whatever an
// unmodified program prints.
//
// The input is a program's output: split at '\n' into lines, given to
// MetricsCollector::output_line() in turn as stdout and stderr, through two
// collectors: the default `name=value` rule (final "best", minimize) with
// an extra metric read by a regex with a step group, and a regex rule with
// named value and step groups (final "last").
// Checks, for every input:
//  - nothing throws (no crash, no UB, no leak; RE2 keeps long lines linear);
//  - every value handed on has a step >= 0;
//  - final_value() is the last value ("last") or the least non-NaN one
//    ("best"), and is absent exactly when no value was seen;
//  - never_seen_reason() names the metric.
// Run: make test-fuzz, or build/asan/tests/fuzz/fuzz_metrics_line CORPUS_DIR.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "objectives/command_metrics.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_metrics_line: %s\n", what);
  std::abort();
}

struct Collected {
  std::vector<std::pair<std::int64_t, double>> values;
};

const hps::MetricsConfig& default_config() {
  static const hps::MetricsConfig config = hps::parse_metrics_config(hps::Json::parse(R"json({
      "name": "val_loss", "final": "best",
      "attrs": ["acc", {"name": "lr", "regex": "lr\\[(?<step>\\d+)\\]=(?<value>\\S+)"}]})json"));
  return config;
}

const hps::MetricsConfig& regex_config() {
  static const hps::MetricsConfig config = hps::parse_metrics_config(hps::Json::parse(R"json({
      "name": "loss", "regex": "^epoch (?<step>\\d+).*loss (?<value>[^ ,]+)", "final": "last"})json"));
  return config;
}

void run(const hps::MetricsConfig& config, bool best, std::string_view output) {
  Collected got;
  hps::MetricsCollector collector(
      config, "", hps::StudyDirection::kMinimize,
      [&](std::int64_t step, double value) {
        if (step < 0) fail("a negative step");
        got.values.emplace_back(step, value);
      },
      [](const std::string&) {});
  bool is_stderr = false;
  while (!output.empty()) {
    const std::size_t nl = output.find('\n');
    collector.output_line(is_stderr, output.substr(0, nl));
    output.remove_prefix(nl == std::string_view::npos ? output.size() : nl + 1);
    is_stderr = !is_stderr;
  }
  collector.poll_file(true);
  const std::optional<double> final_value = collector.final_value();
  if (got.values.empty()) {
    if (final_value) fail("a final value without any value");
    if (collector.never_seen_reason().find(config.objective.name) == std::string::npos)
      fail("never_seen_reason() does not name the metric");
    return;
  }
  if (!best) {
    const double last = got.values.back().second;
    if (!final_value || !(*final_value == last || (std::isnan(*final_value) && std::isnan(last))))
      fail("final \"last\" is not the last value");
    return;
  }
  std::optional<double> least;
  for (const auto& [step, v] : got.values)
    if (!std::isnan(v) && (!least || v < *least)) least = v;
  if (least && (!final_value || *final_value != *least)) fail("final \"best\" is not the least");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view output(reinterpret_cast<const char*>(data), size);
  try {
    run(default_config(), true, output);
    run(regex_config(), false, output);
  } catch (...) {
    fail("the collector threw");
  }
  return 0;
}
