#include "objectives/command_metrics.h"

#include <fcntl.h>
#include <re2/re2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>

#include "objectives/command_report.h"
#include "search/errors.h"
#include "search/printable.h"

namespace hps {

namespace {

constexpr std::string_view kPath = "objective.metrics";
constexpr int kMaxBadValuesLogged = 100;
constexpr std::size_t kMaxFileLine = 1 << 20;      // longer lines are cut
constexpr std::size_t kMaxReadPerPoll = 16 << 20;  // bytes read per poll
// A metrics file modified this long before the trial's start still counts
// as written during the trial (file systems with coarse clocks).
constexpr std::chrono::seconds kFileClockSlack{1};

// The modification time of a file.
std::chrono::system_clock::time_point modified(const struct stat& st) {
  auto since_epoch =
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(since_epoch));
}

std::string field(std::string_view key) { return join_path(kPath, key); }

// RE2 (Debian 12: 2022-06-01) spells named groups (?P<name>...); accept the
// (?<name>...) of Perl, PCRE, Python 3.12+ and ECMAScript too by inserting
// the 'P' (outside escapes and character classes).
std::string with_re2_group_syntax(const std::string& re) {
  std::string out;
  out.reserve(re.size() + 8);
  bool in_class = false;
  for (std::size_t i = 0; i < re.size(); ++i) {
    char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      out += c;
      out += re[++i];
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < re.size() && re[i + 1] == '^') out += re[++i];
      if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];  // a leading ']' is literal
      continue;
    }
    out += c;
    if (c == '(' && re.compare(i + 1, 2, "?<") == 0 && i + 3 < re.size() && re[i + 3] != '=' &&
        re[i + 3] != '!') {
      out += "?P<";
      i += 2;
    }
  }
  return out;
}

RE2::Options re2_options() {
  RE2::Options o;
  o.set_log_errors(false);
  return o;
}

// The name=value rule of `name` (see the header).
MetricRule default_rule(const std::string& name) {
  MetricRule r;
  r.name = name;
  std::string re =
      "(?:^|[^A-Za-z0-9_./-])[\"']?" + RE2::QuoteMeta(name) + "[\"']?[ \\t]*[=:][ \\t]*([^\\s,;]+)";
  r.re = std::make_shared<RE2>(re, re2_options());
  r.value_group = 1;
  return r;
}

// Any name printed with a value as the name=value rule reads one (names_seen).
const RE2& any_name_re() {
  static const RE2 re(
      "(?:^|[^A-Za-z0-9_./-])[\"']?([A-Za-z_][A-Za-z0-9_./-]*)[\"']?[ \\t]*[=:][ \\t]*([^\\s,;]+)",
      re2_options());
  return re;
}

const RE2& default_step_re() {
  static const RE2 re(
      "(?i)(?:^|[^a-z0-9_])(?:step|epoch|iter|iteration)[\"']?[ \\t]*[=:]?[ \\t]*\\[?[ "
      "\\t]*([0-9]+)",
      re2_options());
  return re;
}

MetricRule parse_rule(const Json& j, const std::string& path, bool allow_regex) {
  if (j.is_string()) {
    if (j.get<std::string>().empty()) throw ConfigError(path, "must not be empty: name the metric");
    return default_rule(j.get<std::string>());
  }
  if (!j.is_object())
    throw ConfigError(
        path, "must be a metric name or {\"name\": ..., \"regex\": ...}, got " + quoted_value(j));
  check_keys(j, path, {"name", "regex"});
  std::string name = require_string(j, path, "name");
  if (name.empty()) throw ConfigError(join_path(path, "name"), "must not be empty");
  auto regex = optional_string(j, path, "regex");
  if (!regex) return default_rule(name);
  std::string rpath = join_path(path, "regex");
  if (!allow_regex)
    throw ConfigError(rpath, "applies to output lines only; a file source reads columns by name");
  MetricRule r;
  r.name = name;
  r.regex = *regex;
  auto re = std::make_shared<RE2>(with_re2_group_syntax(*regex), re2_options());
  if (!re->ok()) throw ConfigError(rpath, "does not compile: " + re->error());
  int groups = re->NumberOfCapturingGroups();
  if (groups == 0)
    throw ConfigError(rpath, "has no capture group: put the value in (...) or (?<value>...)");
  const auto& named = re->NamedCapturingGroups();
  for (const auto& [group, index] : named) {
    (void)index;
    if (group != "value" && group != "step")
      throw ConfigError(rpath, "names a group '" + printable_excerpt(group) +
                                   "'; only (?<value>...) and (?<step>...) are read");
  }
  if (auto it = named.find("value"); it != named.end()) {
    r.value_group = it->second;
  } else if (groups == 1 && !named.count("step")) {
    r.value_group = 1;
  } else {
    throw ConfigError(
        rpath, "has " + std::to_string(groups) + " capture groups: name the value's (?<value>...)");
  }
  if (auto it = named.find("step"); it != named.end()) r.step_group = it->second;
  r.re = std::move(re);
  return r;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void parse_source(const Json& metrics, MetricsConfig& c) {
  if (!metrics.contains("source")) return;
  const Json& s = metrics.at("source");
  std::string path = field("source");
  if (s.is_string()) {
    std::string v = s.get<std::string>();
    if (v == "output")
      c.source = MetricsConfig::Source::kOutput;
    else if (v == "stdout")
      c.source = MetricsConfig::Source::kStdout;
    else if (v == "stderr")
      c.source = MetricsConfig::Source::kStderr;
    else
      throw ConfigError(path,
                        "unknown source '" + printable_excerpt(v) +
                            "' (known: \"output\", \"stdout\", \"stderr\", or {\"file\": ...})");
    return;
  }
  if (!s.is_object())
    throw ConfigError(path, "must be \"output\", \"stdout\", \"stderr\" or {\"file\": ...}");
  check_keys(s, path, {"file", "format", "step"});
  c.source = MetricsConfig::Source::kFile;
  c.file = require_string(s, path, "file");
  if (c.file.empty()) throw ConfigError(join_path(path, "file"), "must not be empty");
  if (auto format = optional_choice<MetricsConfig::Format>(
          s, path, "format",
          {{"csv", MetricsConfig::Format::kCsv}, {"jsonl", MetricsConfig::Format::kJsonLines}})) {
    c.format = *format;
  } else if (ends_with(c.file, ".csv")) {
    c.format = MetricsConfig::Format::kCsv;
  } else if (ends_with(c.file, ".jsonl") || ends_with(c.file, ".ndjson") ||
             ends_with(c.file, ".json")) {
    c.format = MetricsConfig::Format::kJsonLines;
  } else {
    throw ConfigError(join_path(path, "format"),
                      "required when the file name ends neither in .csv nor in .jsonl, .ndjson or "
                      ".json: \"csv\" or \"jsonl\"");
  }
  if (auto step = optional_string(s, path, "step")) {
    if (step->empty()) throw ConfigError(join_path(path, "step"), "must not be empty");
    c.step_key = *step;
  }
}

// Splits a CSV line (RFC 4180 quoting; no newlines inside fields).
std::vector<std::string> csv_cells(std::string_view line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"')
          cells.back() += line[++i];
        else
          quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<std::int64_t> parse_step(std::string_view text) {
  text = trim(text);
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && ptr == text.data() + text.size() && v >= 0) return v;
  // "3.0" (a float column, as pandas writes integers with gaps)
  if (auto d = parse_metric_number(text);
      d && std::isfinite(*d) && *d >= 0 && *d < 9e15 && std::floor(*d) == *d)
    return static_cast<std::int64_t>(*d);
  return std::nullopt;
}

std::string shorten(std::string_view s, std::size_t n = 200) {
  if (s.size() <= n) return std::string(s);
  return std::string(s.substr(0, n)) + "...";
}

}  // namespace

MetricsConfig parse_metrics_config(const Json& metrics) {
  std::string path(kPath);
  if (!metrics.is_object())
    throw ConfigError(
        path, "must be an object such as {\"name\": \"val_loss\"}, got " + quoted_value(metrics));
  check_keys(metrics, path, {"name", "regex", "final", "source", "attrs"});
  MetricsConfig c;
  parse_source(metrics, c);
  bool output = c.source != MetricsConfig::Source::kFile;
  if (!metrics.contains("name"))
    throw ConfigError(field("name"), "required: the objective's metric, e.g. \"val_loss\"");
  Json rule = {{"name", metrics.at("name")}};
  if (metrics.contains("regex")) rule["regex"] = metrics.at("regex");
  if (!metrics.at("name").is_string())
    throw ConfigError(field("name"), "must be a string, got " + quoted_value(metrics.at("name")));
  c.objective = parse_rule(rule, path, output);
  if (auto final = optional_string(metrics, path, "final")) {
    if (*final == "best")
      c.final_best = true;
    else if (*final != "last")
      throw ConfigError(field("final"), "must be \"last\" or \"best\"");
  }
  if (metrics.contains("attrs")) {
    const Json& attrs = metrics.at("attrs");
    if (!attrs.is_array())
      throw ConfigError(
          field("attrs"),
          "must be an array of metric names or {\"name\", \"regex\"}, got " + quoted_value(attrs));
    for (std::size_t i = 0; i < attrs.size(); ++i) {
      std::string p = field("attrs") + "[" + std::to_string(i) + "]";
      MetricRule r = parse_rule(attrs[i], p, output);
      if (r.name == c.objective.name)
        throw ConfigError(
            p, "'" + printable_excerpt(r.name) + "' is the objective's metric (metrics.name)");
      for (const MetricRule& other : c.attrs)
        if (other.name == r.name)
          throw ConfigError(p, "'" + printable_excerpt(r.name) + "' is listed twice");
      c.attrs.push_back(std::move(r));
    }
  }
  return c;
}

std::optional<double> parse_metric_number(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  bool negative = false;
  if (text.front() == '+' || text.front() == '-') {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.front() == '+' || text.front() == '-') return std::nullopt;
  std::string lower(text);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double v = 0;
  if (lower == "nan") {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (lower == "inf" || lower == "infinity") {
    v = std::numeric_limits<double>::infinity();
  } else {
    // Digits, '.', exponent only (from_chars alone would take "infinity"
    // spellings and hex forms too).
    if (lower.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
    auto [ptr, ec] = std::from_chars(lower.data(), lower.data() + lower.size(), v);
    if (ec != std::errc() || ptr != lower.data() + lower.size()) return std::nullopt;
  }
  return negative ? -v : v;
}

MetricsCollector::MetricsCollector(const MetricsConfig& config, std::string file,
                                   std::optional<StudyDirection> direction, ValueHandler on_value,
                                   NoteHandler note,
                                   std::optional<std::chrono::system_clock::time_point> trial_start)
    : config_(config),
      file_(std::move(file)),
      direction_(direction),
      on_value_(std::move(on_value)),
      note_(std::move(note)) {
  if (trial_start) not_before_ = *trial_start - kFileClockSlack;
  if (config_.source == MetricsConfig::Source::kFile && not_before_) {
    // A first look (before the program starts, when the caller creates
    // this first): an earlier run's file is known as such even if the
    // program appends to it before the first poll.
    int fd = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd >= 0 && ::fstat(fd, &st) == 0) stale(fd, st);
    if (fd >= 0) ::close(fd);
  }
  if (config_.final_best && !direction_)
    throw ConfigError(field("final"), "\"best\" needs the study's direction, which was not given");
}

void MetricsCollector::output_line(bool is_stderr, std::string_view line) {
  using Source = MetricsConfig::Source;
  if (config_.source == Source::kFile) return;
  if (config_.source == Source::kStdout && is_stderr) return;
  if (config_.source == Source::kStderr && !is_stderr) return;
  // A progress bar (tqdm, Keras) redraws its line with '\r': each
  // '\r'-separated segment is a line of its own ("\r\n" ends one line).
  while (!line.empty()) {
    std::size_t cr = line.find('\r');
    std::string_view segment = line.substr(0, cr);
    line.remove_prefix(cr == std::string_view::npos ? line.size() : cr + 1);
    if (segment.empty() || segment.substr(0, kReportPrefix.size()) == kReportPrefix) continue;
    for (const MetricRule& r : config_.attrs) take(segment, r, false);
    take(segment, config_.objective, true);
    see_names(segment);
  }
}

void MetricsCollector::see_names(std::string_view line) {
  if (names_seen_.size() >= kMaxNamesSeen && typo_checked_) return;
  re2::StringPiece input(line.data(), line.size());
  re2::StringPiece name;
  re2::StringPiece value;
  std::vector<std::string> in_line;  // this line's names with a number
  while (in_line.size() < kMaxNamesSeen &&
         RE2::FindAndConsume(&input, any_name_re(), &name, &value)) {
    std::string_view v(value.data(), value.size());
    while (!v.empty() && std::string_view("%)]}.'\"").find(v.back()) != std::string_view::npos)
      v.remove_suffix(1);
    if (!parse_metric_number(v)) continue;
    see_name(std::string_view(name.data(), name.size()));
    in_line.emplace_back(name.data(), name.size());
  }
  if (typo_checked_ || in_line.empty() || !config_.objective.regex.empty()) return;
  if (!RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), default_step_re())) return;
  typo_checked_ = true;  // the first report-like line
  const std::string& metric = config_.objective.name;
  if (count_ > 0 || not_numbers_.count(metric)) return;
  std::vector<std::string_view> names(in_line.begin(), in_line.end());
  const std::string best = nearest_name(metric, names);
  // Stricter than the hint's closeness: failing a trial needs a clear
  // near miss (one edit per 4 characters, at least one), so that "lr" is
  // not taken for "err".
  if (best.empty() || best == metric ||
      edit_distance(best, metric) > std::max<std::size_t>(1, metric.size() / 4))
    return;
  std::string list;
  for (const std::string& n : in_line) list += (list.empty() ? "'" : ", '") + printable(n) + "'";
  typo_reason_ = "metric '" + printable(metric) +
                 "' (objective.metrics.name) is not in the program's first report line '" +
                 printable(shorten(line)) + "', which shows " + list + " (did you mean '" +
                 printable(best) + "'?)";
}

void MetricsCollector::see_name(std::string_view name) {
  if (names_seen_.size() >= kMaxNamesSeen || name.empty()) return;
  if (std::find(names_seen_.begin(), names_seen_.end(), name) != names_seen_.end()) return;
  names_seen_.emplace_back(shorten(name, 64));
}

std::string MetricsCollector::names_seen_hint() const {
  if (names_seen_.empty()) return "";
  std::string list;
  std::vector<std::string_view> names;
  for (const std::string& n : names_seen_) {
    list += (list.empty() ? "'" : ", '") + printable(n) + "'";
    names.emplace_back(n);
  }
  std::string out = "; names seen with a number: " + list;
  const std::string best = nearest_name(config_.objective.name, names);
  if (!best.empty() && best != config_.objective.name)
    out += " (did you mean '" + printable(best) + "'?)";
  return out;
}

void MetricsCollector::take(std::string_view line, const MetricRule& rule, bool objective) {
  // The name=value rule needs the name in the line: a cheap test first.
  if (rule.regex.empty() && line.find(rule.name) == std::string_view::npos) return;
  re2::StringPiece groups[8];
  int n = std::min(1 + rule.re->NumberOfCapturingGroups(), 8);
  if (std::max(rule.value_group, rule.step_group) >= n) return;
  re2::StringPiece input(line.data(), line.size());
  if (!rule.re->Match(input, 0, line.size(), RE2::UNANCHORED, groups, n)) return;
  std::string_view value(groups[rule.value_group].data(), groups[rule.value_group].size());
  std::optional<std::int64_t> step;
  if (objective) {
    if (rule.step_group > 0) {
      std::string_view s(groups[rule.step_group].data(), groups[rule.step_group].size());
      step = parse_step(s);
      if (!step && !s.empty())
        note_("metric '" + rule.name + "': step '" + shorten(s) +
              "' is not an integer >= 0; using the count of values");
    } else if (rule.regex.empty()) {
      re2::StringPiece digits;
      if (RE2::PartialMatch(input, default_step_re(), &digits))
        step = parse_step(std::string_view(digits.data(), digits.size()));
    }
  }
  if (rule.regex.empty()) {
    // The default format's value stops at a blank, ',' or ';'; drop closing
    // punctuation ("88%", "0.41.", "(0.5)").
    while (!value.empty() &&
           std::string_view("%)]}.'\"").find(value.back()) != std::string_view::npos)
      value.remove_suffix(1);
  }
  take_value(rule.name, value, step, objective, line);
}

void MetricsCollector::not_a_number(const std::string& name, std::string_view text,
                                    std::string_view line, bool objective) {
  auto& [count, last] = not_numbers_[name];
  ++count;
  last = shorten(text);
  if (bad_values_logged_ >= kMaxBadValuesLogged) return;
  ++bad_values_logged_;
  note_((objective ? "metric '" : "user attr '") + name + "': '" + shorten(text) +
        "' is not a number; this value is ignored (line: " + shorten(line) + ")" +
        (bad_values_logged_ == kMaxBadValuesLogged ? " (further such values are not logged)" : ""));
}

namespace {
// " matched 3 times, never as a number (last: '2101/10000')".
std::string never_a_number(const std::pair<std::int64_t, std::string>& seen) {
  return " matched " + std::to_string(seen.first) + (seen.first == 1 ? " time" : " times") +
         ", never as a number (last: '" + seen.second + "')";
}
}  // namespace

std::string MetricsCollector::unparsed_attrs_note() const {
  std::string out;
  for (const auto& [name, seen] : not_numbers_) {
    if (name == config_.objective.name || attr_values_.count(name)) continue;
    out += (out.empty() ? "" : "; ") +
           ("user attr '" + name + "' (objective.metrics.attrs) was not set: it was" +
            never_a_number(seen));
  }
  if (!out.empty()) out += "; give it a \"regex\" whose group holds only the number";
  return out;
}

void MetricsCollector::take_value(const std::string& name, std::string_view text,
                                  std::optional<std::int64_t> step, bool objective,
                                  std::string_view line) {
  std::optional<double> v = parse_metric_number(text);
  if (!v) {
    not_a_number(name, text, line, objective);
    return;
  }
  if (!objective) {
    attr_values_[name] = *v;
    return;
  }
  ++count_;
  last_ = v;
  if (!std::isnan(*v)) {
    bool maximize = direction_ == StudyDirection::kMaximize;
    if (!best_ || (maximize ? *v > *best_ : *v < *best_)) best_ = v;
  }
  on_value_(step ? *step : count_, *v);
}

std::optional<double> MetricsCollector::final_value() const {
  if (config_.final_best && best_) return best_;
  return last_;
}

std::string MetricsCollector::never_seen_reason() const {
  const std::string& name = config_.objective.name;
  if (config_.source != MetricsConfig::Source::kFile) {
    std::string where = config_.source == MetricsConfig::Source::kStdout   ? "stdout"
                        : config_.source == MetricsConfig::Source::kStderr ? "stderr"
                                                                           : "stdout or stderr";
    std::string how = config_.objective.regex.empty()
                          ? "lines such as '" + name + "=0.5' or '" + name + ": 0.5'"
                          : "lines matching the regex '" + config_.objective.regex + "'";
    std::string out = "metric '" + name + "' (objective.metrics.name) was never seen on " + where +
                      " (" + how + ")";
    if (auto it = not_numbers_.find(name); it != not_numbers_.end())
      return out + ": it was" + never_a_number(it->second) +
             (config_.objective.regex.empty()
                  ? "; give it a \"regex\" whose group holds only the number"
                  : "; make the regex's value group hold only the number");
    return out + names_seen_hint();
  }
  std::string out = "metric '" + name + "' (objective.metrics.name) was never seen in " + file_;
  if (!file_seen_ && stale_seen_)
    return out + ": the file was not written during the trial (it predates the trial's start: " +
           "left by an earlier run?)";
  if (!file_seen_) return out + ": the file was never created";
  if (config_.format == MetricsConfig::Format::kCsv) {
    if (columns_.empty()) return out + ": the file has no header line";
    std::string cols;
    for (const std::string& c : columns_) cols += (cols.empty() ? "" : ", ") + c;
    if (std::find(columns_.begin(), columns_.end(), name) == columns_.end()) {
      std::vector<std::string_view> names(columns_.begin(), columns_.end());
      const std::string best = nearest_name(name, names);
      return out + ": no column '" + name + "' in its header (" + shorten(cols) + ")" +
             (best.empty() ? "" : " (did you mean '" + printable(best) + "'?)");
    }
    return out + ": its column '" + name + "' has no number in " + std::to_string(rows_total_) +
           " row(s)";
  }
  return out + ": no line of its " + std::to_string(rows_total_) + " has a number under key '" +
         name + "'" + names_seen_hint();
}

// ------------------------------------------------------------ files

void MetricsCollector::poll_file(bool at_end) {
  if (config_.source != MetricsConfig::Source::kFile) return;
  int fd = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // not there (yet)
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return;
  }
  if (!file_seen_ && stale(fd, st)) {
    ::close(fd);
    return;
  }
  auto size = static_cast<std::uint64_t>(st.st_size);
  bool restart = file_seen_ && (static_cast<std::uint64_t>(st.st_ino) != inode_ || size < offset_);
  if (!restart && file_seen_ && !header_line_.empty() &&
      config_.format == MetricsConfig::Format::kCsv) {
    // A rewritten CSV may grow past the old offset between two polls: its
    // header line tells (a logger that adds a column rewrites the file).
    std::string head(header_line_.size() + 1, '\0');
    ssize_t n = ::pread(fd, head.data(), head.size(), 0);
    if (n != static_cast<ssize_t>(head.size()) ||
        head.substr(0, header_line_.size()) != header_line_ ||
        (head.back() != '\n' && head.back() != '\r'))
      restart = true;
  }
  if (restart) {
    note_("the metrics file " + file_ + " was rewritten; reading it again from its start");
    rows_skip_ = rows_done_;
    rows_done_ = 0;
    offset_ = 0;
    partial_.clear();
    header_line_.clear();
    columns_.clear();
  }
  file_seen_ = true;
  inode_ = static_cast<std::uint64_t>(st.st_ino);
  std::string buffer;
  while (offset_ < size && (at_end || buffer.size() < kMaxReadPerPoll)) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(size - offset_, 1 << 16));
    std::size_t at = buffer.size();
    buffer.resize(at + want);
    ssize_t n = ::pread(fd, buffer.data() + at, want, static_cast<off_t>(offset_));
    if (n <= 0) {
      buffer.resize(at);
      break;
    }
    buffer.resize(at + static_cast<std::size_t>(n));
    offset_ += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  std::size_t start = 0;
  while (true) {
    std::size_t nl = buffer.find('\n', start);
    if (nl == std::string::npos) break;
    if (partial_.empty()) {
      file_line(std::string_view(buffer).substr(start, nl - start));
    } else {
      partial_.append(buffer, start, nl - start);
      file_line(partial_);
      partial_.clear();
    }
    start = nl + 1;
  }
  if (partial_.size() < kMaxFileLine)
    partial_.append(buffer, start, std::min(buffer.size() - start, kMaxFileLine - partial_.size()));
  if (at_end && !partial_.empty()) {
    file_line(partial_);
    partial_.clear();
  }
}

bool MetricsCollector::stale(int fd, const struct stat& st) {
  if (!not_before_) return false;
  auto inode = static_cast<std::uint64_t>(st.st_ino);
  auto size = static_cast<std::uint64_t>(st.st_size);
  if (modified(st) < *not_before_) {
    // Left by an earlier run (a path without {trial_dir}): not this
    // trial's until the program writes it.
    if (!stale_seen_)
      note_("the metrics file " + file_ +
            " predates the trial's start (left by an earlier run?): not read until it is "
            "written");
    if (!stale_seen_ || inode != stale_inode_ || size != stale_size_) stale_scan_ = scan(fd, size);
    stale_seen_ = true;
    stale_inode_ = inode;
    stale_size_ = size;
    return true;
  }
  if (stale_seen_ && inode == stale_inode_ && size >= stale_size_ && stale_scan_.rows > 0 &&
      scan(fd, stale_size_).hash == stale_scan_.hash) {
    // The program appended to the earlier run's file (its bytes are all
    // still there): those rows are not this trial's (a CSV keeps its header).
    rows_skip_ = stale_scan_.rows;
    note_("the metrics file " + file_ + " was appended to: skipping its " +
          std::to_string(rows_skip_) + " row(s) from before the trial");
  }
  return false;
}

MetricsCollector::Scan MetricsCollector::scan(int fd, std::uint64_t size) const {
  Scan out;
  std::int64_t lines = 0;  // '\n'-terminated lines that are not blank
  bool blank = true;
  std::string chunk(1 << 16, '\0');
  for (std::uint64_t at = 0; at < size;) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(size - at, chunk.size()));
    ssize_t n = ::pread(fd, chunk.data(), want, static_cast<off_t>(at));
    if (n <= 0) break;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
      // FNV-1a, 64 bits.
      out.hash = (out.hash ^ static_cast<unsigned char>(chunk[i])) * 0x100000001b3ULL;
      if (chunk[i] == '\n') {
        lines += blank ? 0 : 1;
        blank = true;
      } else if (!std::isspace(static_cast<unsigned char>(chunk[i]))) {
        blank = false;
      }
    }
    at += static_cast<std::uint64_t>(n);
  }
  if (config_.format == MetricsConfig::Format::kCsv && lines > 0) --lines;  // the header
  out.rows = lines;
  return out;
}

void MetricsCollector::file_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (config_.format == MetricsConfig::Format::kCsv)
    csv_line(line);
  else
    json_line(line);
}

void MetricsCollector::take_row(
    const std::function<std::optional<std::string>(const std::string&)>& text_of,
    std::string_view line) {
  for (const MetricRule& r : config_.attrs)
    if (auto v = text_of(r.name)) take_value(r.name, *v, std::nullopt, false, line);
  const std::string& name = config_.objective.name;
  if (auto v = text_of(name)) {
    std::optional<std::int64_t> step;
    if (!config_.step_key.empty())
      if (auto s = text_of(config_.step_key)) step = parse_step(*s);
    take_value(name, *v, step, true, line);
  }
}

void MetricsCollector::csv_line(std::string_view line) {
  if (trim(line).empty()) return;
  if (columns_.empty()) {
    header_line_ = std::string(line);
    columns_ = csv_cells(line);
    for (std::string& c : columns_) c = std::string(trim(c));
    return;
  }
  if (++rows_done_ <= rows_skip_) return;
  ++rows_total_;
  const std::vector<std::string> cells = csv_cells(line);
  take_row(
      [&](const std::string& key) -> std::optional<std::string> {
        auto it = std::find(columns_.begin(), columns_.end(), key);
        if (it == columns_.end()) return std::nullopt;
        auto i = static_cast<std::size_t>(it - columns_.begin());
        if (i >= cells.size() || trim(cells[i]).empty()) return std::nullopt;
        return cells[i];
      },
      line);
}

void MetricsCollector::json_line(std::string_view line) {
  if (trim(line).empty()) return;
  if (++rows_done_ <= rows_skip_) return;
  ++rows_total_;
  if (json_too_deep_at(line) != std::string_view::npos) return;
  const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    if (bad_values_logged_ < kMaxBadValuesLogged) {
      ++bad_values_logged_;
      note_("metrics file: not a JSON object; ignored the line: " + shorten(line));
    }
    return;
  }
  take_row(
      [&](const std::string& key) -> std::optional<std::string> {
        if (names_seen_.size() < kMaxNamesSeen)
          for (const auto& [k, v] : j.items())
            if (v.is_number() || (v.is_string() && parse_metric_number(v.get<std::string>())))
              see_name(k);
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) return std::nullopt;
        if (it->is_string()) return it->get<std::string>();
        return it->dump();
      },
      line);
}

}  // namespace hps
