// The cost of reading a program's metrics (objective "metrics",
// objectives/command_metrics.h) beside the `hpsearch:` protocol path, on a
// program that prints a line per step as fast as it can (issue #18: a
// program printing 100,000 lines per second must not be slowed down by the
// collector).
//
// Two measures, each the median of --repeats runs:
//  1. In process (the parsers alone): lines per second through
//     MetricsCollector::output_line() for the default name=value rule and a
//     regex rule, and through parse_command_report() for the protocol's
//     `hpsearch: {"step": s, "value": v}` line: the ratio is the collector's
//     cost against the protocol's.
//  2. End to end (a real trial of the command objective: the program, its
//     pipe, the trial log, every value reported to the trial): an awk
//     program printing --lines lines, once as protocol lines, once as
//     `epoch N train_loss=.. val_loss=.. val_acc=..` lines read by the
//     default rule, by a regex, and from a CSV metrics file it writes, and
//     once as plain lines nothing reads (the pipe and log alone). Lines per
//     second and the ratio to the protocol run.
//
// Measured (2-core VM, 100,000 lines, median of 3): the parsers read
// 690,000-820,000 lines/s (the collector costs 1.08-1.18x the protocol's
// parser); end to end, a trial of a program printing 100,000 lines takes
// 0.19 s with protocol lines (520,000 values/s), 1.08x that with the
// default name=value rule, 1.27x with a regex, 0.85x from a CSV file, and
// 0.10 s when nothing reads the lines. Before the in-memory storage updated
// a trial nobody else holds in place, each report copied all earlier
// intermediate values: 10,000 lines took 2.9 s, 100,000 over 11 minutes.
//
//   collector_throughput [--lines N] [--repeats R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "objectives/command_metrics.h"
#include "objectives/command_report.h"
#include "objectives/objective.h"
#include "search/json_util.h"
#include "search/search_space.h"
#include "search/storage.h"
#include "search/study.h"

namespace {

using Clock = std::chrono::steady_clock;
using hps::Json;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of `f`, the median of `repeats` runs.
double time_median(int repeats, const std::function<void()>& f) {
  std::vector<double> s;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    f();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(s);
}

std::vector<std::string> epoch_lines(int n) {
  std::vector<std::string> lines;
  lines.reserve(static_cast<std::size_t>(n));
  char buf[160];
  for (int i = 1; i <= n; ++i) {
    std::snprintf(buf, sizeof buf, "epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.4f", i,
                  1.0 / i + 0.01, 1.0 / i, 1.0 - 1.0 / (i + 1));
    lines.emplace_back(buf);
  }
  return lines;
}

std::vector<std::string> protocol_lines(int n) {
  std::vector<std::string> lines;
  lines.reserve(static_cast<std::size_t>(n));
  char buf[160];
  for (int i = 1; i <= n; ++i) {
    std::snprintf(buf, sizeof buf, "hpsearch: {\"step\": %d, \"value\": %.4f}", i, 1.0 / i);
    lines.emplace_back(buf);
  }
  return lines;
}

const char* kRegex = "^epoch (?<step>\\d+) .*val_loss=(?<value>\\S+)";

// 1. In process: lines per second of each parser.
void in_process(int n, int repeats) {
  const auto epochs = epoch_lines(n);
  const auto reports = protocol_lines(n);
  std::int64_t sink = 0;
  auto collect = [&](const Json& metrics) {
    const hps::MetricsConfig config = hps::parse_metrics_config(metrics);
    return time_median(repeats, [&] {
      hps::MetricsCollector c(
          config, "", hps::StudyDirection::kMinimize,
          [&](std::int64_t step, double) { sink += step; }, [](const std::string&) {});
      for (const auto& l : epochs) c.output_line(false, l);
    });
  };
  const double protocol = time_median(repeats, [&] {
    for (const auto& l : reports) {
      hps::CommandReport r;
      std::string_view text(l);
      text.remove_prefix(hps::kReportPrefix.size());
      if (hps::parse_command_report(text, r).empty() && r.step) sink += *r.step;
    }
  });
  const double name_value = collect(Json{{"name", "val_loss"}});
  const double regex = collect(Json{{"name", "val_loss"}, {"regex", kRegex}});
  std::printf("in process, %d lines (median of %d)       lines/s       cost vs protocol\n", n,
              repeats);
  auto row = [&](const char* what, double s) {
    std::printf("  %-36s %12.0f   %6.2fx\n", what, n / s, s / protocol);
  };
  row("protocol: parse_command_report", protocol);
  row("metrics: name=value (default rule)", name_value);
  row("metrics: regex with step and value", regex);
  if (sink == 42) std::printf(" ");  // keeps the work observable
}

// 2. End to end: one trial of the command objective running `awk_body`.
double trial_seconds(const Json& metrics, const std::string& awk_body, int repeats,
                     const std::filesystem::path& dir, int n) {
  hps::SearchSpace space =
      hps::SearchSpace::from_json(Json::parse(R"({"x": {"type": "float", "low": 0, "high": 1}})"));
  // The program from a file: braces in argv are placeholders ({lr}).
  const auto program = dir / "program.awk";
  std::ofstream(program) << awk_body << "\n";
  Json objective{
      {"type", "command"},
      {"argv", Json::array({"awk", "-v", "n=" + std::to_string(n), "-f", program.string()})}};
  if (!metrics.is_null()) objective["metrics"] = metrics;
  double s = time_median(repeats, [&] {
    hps::StudyOptions options;
    options.space = space;
    hps::Study study = hps::Study::create(std::make_shared<hps::InMemoryStorage>(), "bench",
                                          hps::StudyDirection::kMinimize, options);
    hps::ObjectiveContext ctx;
    ctx.log_dir = (dir / "logs").string();
    ctx.direction = hps::StudyDirection::kMinimize;
    hps::Objective f = hps::make_objective(objective, space, ctx);
    study.optimize(f, {.n_trials = 1, .catch_exceptions = true});
    auto trials = study.trials();
    if (trials.size() != 1 || trials[0]->state != hps::TrialState::kComplete)
      throw std::runtime_error("the bench trial did not complete: " +
                               (trials.empty() ? std::string("none") : trials[0]->fail_reason));
    if (!metrics.is_null() && trials[0]->intermediate_values.size() != static_cast<std::size_t>(n))
      throw std::runtime_error("the bench trial got " +
                               std::to_string(trials[0]->intermediate_values.size()) +
                               " values, not " + std::to_string(n));
  });
  return s;
}

void end_to_end(int n, int repeats) {
  const auto dir = std::filesystem::temp_directory_path() / "hpsearch-collector-bench";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string epoch_line =
      "printf \"epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.4f\\n\", i, 1/i+0.01, 1/i, "
      "1-1/(i+1)";
  const std::string protocol =
      "BEGIN { for (i = 1; i <= n; i++) printf \"hpsearch: {\\\"step\\\": %d, \\\"value\\\": "
      "%.4f}\\n\", i, 1/i; print \"hpsearch: {\\\"value\\\": 0.5}\" }";
  const std::string epochs = "BEGIN { for (i = 1; i <= n; i++) " + epoch_line + " }";
  const std::string plain = "BEGIN { for (i = 1; i <= n; i++) " + epoch_line +
                            "; print \"hpsearch: {\\\"value\\\": 0.5}\" }";
  const std::string csv_file = (dir / "metrics.csv").string();
  const std::string csv = "BEGIN { f = \"" + csv_file +
                          "\"; print \"epoch,train_loss,val_loss,val_acc\" > f; "
                          "for (i = 1; i <= n; i++) printf \"%d,%.4f,%.4f,%.4f\\n\", i, 1/i+0.01, "
                          "1/i, 1-1/(i+1) > f; close(f) }";
  const double t_protocol = trial_seconds(Json(), protocol, repeats, dir, n);
  const double t_plain = trial_seconds(Json(), plain, repeats, dir, n);
  const double t_default = trial_seconds(Json{{"name", "val_loss"}}, epochs, repeats, dir, n);
  const double t_regex =
      trial_seconds(Json{{"name", "val_loss"}, {"regex", kRegex}}, epochs, repeats, dir, n);
  const double t_csv =
      trial_seconds(Json{{"name", "val_loss"}, {"source", {{"file", csv_file}, {"step", "epoch"}}}},
                    csv, repeats, dir, n);
  std::printf(
      "\nend to end, one trial of a program printing %d lines (median of %d)\n"
      "                                         seconds     lines/s   vs protocol\n",
      n, repeats);
  auto row = [&](const char* what, double s) {
    std::printf("  %-36s %8.3f  %10.0f   %6.2fx\n", what, s, n / s, s / t_protocol);
  };
  row("protocol lines (reference)", t_protocol);
  row("plain lines, nothing read", t_plain);
  row("metrics: name=value (default rule)", t_default);
  row("metrics: regex", t_regex);
  row("metrics: CSV file (written, then read)", t_csv);
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 100000;
  int repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--lines") n = std::max(1, std::stoi(argv[i + 1]));
    if (a == "--repeats") repeats = std::max(1, std::stoi(argv[i + 1]));
  }
  try {
    in_process(n, repeats);
    end_to_end(n, repeats);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collector_throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
