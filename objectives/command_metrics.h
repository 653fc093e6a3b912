// Metrics collection of the "command" objective (objectives/command.h): reads
// the objective's metric, and optional extra metrics stored as user attrs,
// from what an unmodified program already prints or writes, for programs
// that do not print "hpsearch: {...}" report lines.
//
//   "metrics": {"name": "val_loss",                  the objective's metric
//               "regex": "val_loss=(?<value>\\S+)",  optional (output only)
//               "final": "last" | "best",            default "last"
//               "source": "output" | "stdout" | "stderr" |
//                         {"file": "{trial_dir}/metrics.csv",
//                          "format": "csv" | "jsonl", "step": "epoch"},
//               "attrs": ["val_acc", {"name": "lr", "regex": "lr (\\S+)"}]}
//
// Output sources ("output", the default: stdout and stderr; or one of them)
// read every line that does not start with "hpsearch:"; a '\r' inside a
// line (a progress bar redrawing itself) separates lines too. A metric without
// "regex" matches `name=value`, `name: value`, `name = value`, and the
// same with the name quoted ('name': value, as Python prints a dict), where
// the name is a whole token: not preceded by a letter, digit, '_', '.', '-' or '/' (so 'loss' is
// not read from 'train-loss' or 'eval/loss'); the value is the text up to the next blank, ',' or
// ';', less trailing '%', ')', ']', '}' and
// '.'. The step of such a line is the first number after a word "step",
// "epoch", "iter" or "iteration" (any case; "epoch 3", "Epoch [3/10]",
// "step=120") on the same line, else the count of the metric's values so far
// (1, 2, ...). A "regex" is RE2 syntax (github.com/google/re2/wiki/Syntax),
// searched anywhere in the line: with exactly one capture group, that group
// is the value; otherwise the named groups (?<value>...) (required) and
// (?<step>...) (optional; an integer >= 0, else the count is used). RE2 runs
// in time linear in the line (no catastrophic backtracking on long lines);
// std::regex was not used because its ECMAScript grammar has no named
// groups and libstdc++'s matcher recurses per character (a 1 MB line can
// overflow the stack).
//
// A file source is followed while the program runs (polled every 100 ms and
// once more at its end): a file that does not exist yet is waited for (as
// is one last modified more than 1 s before the trial started: a stale file
// of an earlier run, read once the program writes it), a
// last line without '\n' waits for the rest (it is read as a whole line when
// the program has ended), and a file rewritten from the start (truncated,
// replaced, or a CSV whose header line changed, as older PyTorch Lightning
// CSVLoggers do on every save) is read again from its first line, skipping
// the rows already taken. "csv": the first line is the header (RFC 4180
// quoting, no newlines inside fields); a row's empty cell means the metric
// is absent from that row. "jsonl": one JSON object per line; a metric is a
// key holding a number or a string such as "nan". "format" defaults from
// the file name's extension (.csv; .jsonl, .ndjson, .json). "step" names the
// column or key holding the step (default: the count of values so far).
//
// Values: a number ("0.41", "-1e-3", "+2"), or nan / inf / infinity with an
// optional sign (any case). Text that is not a number: the line is logged
// to the trial log (the first 100 such lines) and ignored. Each value of the
// objective's metric is an intermediate value (Trial::report at its step;
// pruners work on the program unchanged); the final value is the last value
// ("last") or the best by the study's direction ("best"; NaN values are
// skipped). Extra metrics become user attrs holding their last value, set
// when the trial ends, however it ends (a value, pruned, failed, timed out,
// interrupted).
//
// Errors (ConfigError naming the field, at study creation): unknown keys,
// a regex that does not compile, one without a capture group, with several
// unnamed groups and no (?<value>...), with a named group other than value
// and step, or with "regex" on a file source.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "search/json_util.h"
#include "search/study.h"

struct stat;

namespace re2 {
class RE2;
}

namespace hps {

// How one metric is found in a line of output.
struct MetricRule {
  std::string name;
  std::string regex;                   // as written; "" = name=value format
  std::shared_ptr<const re2::RE2> re;  // compiled regex, or the default one
  int value_group = 1;                 // capture group of the value
  int step_group = 0;                  // capture group of the step; 0 = none
};

struct MetricsConfig {
  enum class Source { kOutput, kStdout, kStderr, kFile };
  enum class Format { kCsv, kJsonLines };
  MetricRule objective;
  std::vector<MetricRule> attrs;
  bool final_best = false;  // "final": "best"
  Source source = Source::kOutput;
  std::string file;  // the "file" template as written ({trial_dir} not filled)
  Format format = Format::kCsv;
  std::string step_key;  // file column/key of the step; "" = count
};

// Parses objective.metrics. Throws ConfigError("objective.metrics.<field>",
// rule) for any bad field (see the file comment).
MetricsConfig parse_metrics_config(const Json& metrics);

// Parses a metric value: a number with an optional sign, or nan / inf /
// infinity (any case), surrounded by optional blanks. nullopt otherwise.
std::optional<double> parse_metric_number(std::string_view text);

// Collects the metrics of one trial. Not thread-safe; one per trial.
class MetricsCollector {
 public:
  // Receives each value of the objective's metric with its step; may throw
  // (the exception passes through the call that found the value).
  using ValueHandler = std::function<void(std::int64_t step, double value)>;
  // Receives notes for the trial log ("metric 'x': 'abc' is not a number").
  using NoteHandler = std::function<void(const std::string& note)>;

  // `file`: the metrics file's path with {trial_dir} filled (file sources).
  // `direction`: the study's; required when config.final_best.
  // `trial_start`: when the trial started (wall clock); a metrics file
  // whose modification time is more than 1 s older (slack for coarse
  // file-system clocks) is left by an earlier run and is not read until it
  // is modified (never_seen_reason() then says it was not written during
  // the trial); if the program appends to it, its earlier rows are skipped
  // (create the collector before the program starts: it looks at the file
  // once here). nullopt: any file is read.
  // Throws ConfigError("objective.metrics.final") when config.final_best
  // and no direction.
  MetricsCollector(const MetricsConfig& config, std::string file,
                   std::optional<StudyDirection> direction, ValueHandler on_value, NoteHandler note,
                   std::optional<std::chrono::system_clock::time_point> trial_start = std::nullopt);

  // A line of the program's stdout (`is_stderr` false) or stderr, without
  // its '\n'. Each '\r'-separated segment is read as a line of its own
  // (progress bars such as tqdm and Keras redraw with '\r'; a trailing '\r'
  // of "\r\n" ends nothing more). Segments starting with "hpsearch:" are
  // skipped (the caller reads whole report lines).
  void output_line(bool is_stderr, std::string_view line);
  // Reads what the metrics file gained since the last call (no-op for
  // output sources). `at_end`: the program has ended; a last line without
  // '\n' is read too.
  void poll_file(bool at_end);

  // The final value of the objective's metric ("last" or "best"); nullopt
  // when no value was seen.
  std::optional<double> final_value() const;
  // The extra metrics seen, by name, with their last value.
  const std::map<std::string, double>& attrs() const { return attr_values_; }
  // Why the objective's metric was never seen, for a FAIL reason:
  // "metric 'val_loss' was never seen in the program's output (lines such
  // as 'val_loss=0.5')", or naming the file and what it lacked.
  // A metric matched but never as a number adds what it read: "... was
  // matched 4 times, never as a number (last: '2.2863,'): ...".
  std::string never_seen_reason() const;
  // The names the output showed with a number, as a metric would be printed
  // ("name=0.5", "name: 0.5", 'name': 0.5; a file source: the CSV header's
  // columns, the JSON lines' keys holding numbers), in the order first seen,
  // at most kMaxNamesSeen. never_seen_reason() lists them with "did you
  // mean 'x'?" (nearest_name, search/json_util.h).
  static constexpr std::size_t kMaxNamesSeen = 32;
  // A likely typo in metrics.name, found at the first report-like line: an
  // output line with a step word ("epoch 3", "step=120") and names with
  // numbers, one of them a near miss of the objective's metric ("val_loss"
  // for "val_los": nearest_name), while the metric itself was never
  // matched (the name=value rule only, not a "regex" or a file), within
  // one edit per 4 characters of the name (at least one). Then the
  // reason to fail the trial now rather than after the whole training:
  // "metric 'val_los' (objective.metrics.name) is not in the program's
  // report line 'epoch 1 loss=0.9 val_loss=0.5', which shows 'loss',
  // 'val_loss' (did you mean 'val_loss'?)". "" otherwise; set once.
  const std::string& typo_reason() const { return typo_reason_; }
  const std::vector<std::string>& names_seen() const { return names_seen_; }
  // The extra metrics (attrs) matched but never as a number, for the trial
  // log ("" when none): "user attr 'acc' (objective.metrics.attrs) was not
  // set: matched 3 times, never as a number (last: '2101/10000')".
  std::string unparsed_attrs_note() const;

 private:
  void take(std::string_view line, const MetricRule& rule, bool objective);
  void take_value(const std::string& name, std::string_view text, std::optional<std::int64_t> step,
                  bool objective, std::string_view line);
  // The first bytes of a file: their FNV-1a hash, and their data rows (not
  // blank, '\n'-terminated; less a CSV's header).
  struct Scan {
    std::uint64_t hash = 0xcbf29ce484222325ULL;
    std::int64_t rows = 0;
  };
  // Whether the file (open as `fd`, with `st` from fstat) is an earlier
  // run's, not written since the trial started; when it was and the
  // program has appended to it since, sets rows_skip_ to its earlier rows.
  bool stale(int fd, const struct stat& st);
  // Scans the first `size` bytes of `fd`.
  Scan scan(int fd, std::uint64_t size) const;
  // Adds the names `line` shows with a number (names_seen()).
  // Adds the names `line` shows with a number (names_seen()); the first
  // line with a step word and such names sets typo_reason() when the
  // objective's metric was never matched and a name is a near miss of it.
  void see_names(std::string_view line);
  void see_name(std::string_view name);
  // never_seen_reason()'s end: "; names seen with a number: a, b (did you
  // mean 'a'?)", or "" when none was seen.
  std::string names_seen_hint() const;
  void file_line(std::string_view line);
  void csv_line(std::string_view line);
  void json_line(std::string_view line);
  // Takes the attrs and the objective's metric (with its step column) from
  // one row of a metrics file; `text_of` gives a column's or key's text
  // (nullopt when absent or empty).
  void take_row(const std::function<std::optional<std::string>(const std::string&)>& text_of,
                std::string_view line);
  // Notes a value that is not a number (the trial log, at most
  // kMaxBadValuesLogged) and keeps it for never_seen_reason() and
  // unparsed_attrs_note().
  void not_a_number(const std::string& name, std::string_view text, std::string_view line,
                    bool objective);

  const MetricsConfig& config_;
  std::string file_;
  std::optional<StudyDirection> direction_;
  ValueHandler on_value_;
  NoteHandler note_;

  std::int64_t count_ = 0;  // values of the objective's metric so far
  std::optional<double> last_;
  std::optional<double> best_;
  std::map<std::string, double> attr_values_;
  int bad_values_logged_ = 0;
  // Values read that were not numbers, by metric: how many, and the last.
  std::map<std::string, std::pair<std::int64_t, std::string>> not_numbers_;
  std::vector<std::string> names_seen_;  // names_seen()
  std::string typo_reason_;              // typo_reason()
  bool typo_checked_ = false;            // the first report-like line was looked at

  // File following.
  bool file_seen_ = false;
  std::optional<std::chrono::system_clock::time_point> not_before_;  // older files are stale
  bool stale_seen_ = false;        // the file was there, but older than not_before_
  std::uint64_t stale_inode_ = 0;  // the stale file's inode, size and bytes
  std::uint64_t stale_size_ = 0;
  Scan stale_scan_;
  std::uint64_t inode_ = 0;
  std::uint64_t offset_ = 0;
  std::string partial_;
  std::string header_line_;           // CSV header as read
  std::vector<std::string> columns_;  // CSV header cells
  std::int64_t rows_done_ = 0;        // data rows read since the file (re)started
  std::int64_t rows_skip_ = 0;        // rows to skip after a rewrite
  std::int64_t rows_total_ = 0;       // data rows read in all
};

}  // namespace hps
