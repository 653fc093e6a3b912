#include "objectives/command.h"

#include <spdlog/spdlog.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

#include "objectives/child_process.h"
#include "objectives/command_report.h"
#include "search/errors.h"
#include "search/private_files.h"

extern char** environ;

namespace hps {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr std::size_t kTailLines = 20;    // stderr lines kept for a FAIL reason
constexpr std::size_t kTailBytes = 4000;  // and at most this many bytes of them
constexpr double kMaxTimeoutS = 1e9;
// How often a running trial checks Trial::interrupted().
constexpr std::chrono::milliseconds kInterruptPoll{100};

// Environment variables that hpsearch sets itself.
const std::vector<std::string>& reserved_env() {
  static const std::vector<std::string> names = {"HPSEARCH_PARAMS", "HPSEARCH_TRIAL_NUMBER",
                                                 "HPSEARCH_STUDY", "HPSEARCH_THREADS",
                                                 "CUDA_VISIBLE_DEVICES"};
  return names;
}

// ------------------------------------------------------------ templates

// One piece of an argument: literal text, or a placeholder.
struct Piece {
  std::string text;  // literal text, or the param name
  bool is_param = false;
  bool optional = false;  // "{name?}"
};
using Template = std::vector<Piece>;

// Parses "--lr={lr}" into pieces. Throws ConfigError(path, ...).
Template parse_template(const std::string& text, const std::string& path) {
  if (text.find('\0') != std::string::npos) throw ConfigError(path, "contains a NUL character");
  Template out;
  std::string literal;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '}') {
      if (i + 1 < text.size() && text[i + 1] == '}') {
        literal += '}';
        ++i;
        continue;
      }
      throw ConfigError(
          path, "single '}' at offset " + std::to_string(i) + "; write '}}' for a literal brace");
    }
    if (c != '{') {
      literal += c;
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '{') {
      literal += '{';
      ++i;
      continue;
    }
    std::size_t close = text.find('}', i + 1);
    if (close == std::string::npos)
      throw ConfigError(path, "'{' at offset " + std::to_string(i) +
                                  " has no closing '}'; write '{{' for a literal brace");
    std::string name = text.substr(i + 1, close - i - 1);
    if (name.find('{') != std::string::npos)
      throw ConfigError(path, "'{' inside the placeholder at offset " + std::to_string(i));
    Piece p;
    p.is_param = true;
    if (!name.empty() && name.back() == '?') {
      p.optional = true;
      name.pop_back();
    }
    if (name.empty())
      throw ConfigError(
          path, "empty placeholder at offset " + std::to_string(i) + "; write {param} or {param?}");
    p.text = std::move(name);
    if (!literal.empty()) out.push_back({std::move(literal), false, false});
    literal.clear();
    out.push_back(std::move(p));
    i = close;
  }
  if (!literal.empty() || out.empty()) out.push_back({std::move(literal), false, false});
  return out;
}

bool has_param(const Template& t) {
  return std::any_of(t.begin(), t.end(), [](const Piece& p) { return p.is_param; });
}

// Checks the placeholders of `t` against the space.
void check_placeholders(const Template& t, const SearchSpace& space, const std::string& path,
                        const std::string& drop_what) {
  for (const Piece& p : t) {
    if (!p.is_param) continue;
    const ParamSpec* spec = space.find(p.text);
    if (!spec) {
      std::string rule =
          "placeholder {" + p.text + (p.optional ? "?" : "") + "} names no param in space";
      std::string best;
      std::size_t best_d = std::numeric_limits<std::size_t>::max();
      for (const ParamSpec& s : space.params()) {
        std::size_t d = edit_distance(p.text, s.name);
        if (d < best_d) {
          best_d = d;
          best = s.name;
        }
      }
      if (!best.empty() && best_d <= std::max<std::size_t>(2, p.text.size() / 3))
        rule += " (did you mean '" + best + "'?)";
      else if (space.empty())
        rule += " (the space declares no params)";
      throw ConfigError(path, rule);
    }
    if (spec->condition && !p.optional)
      throw ConfigError(path, "param '" + p.text +
                                  "' is conditional (\"when\") and absent from some trials; "
                                  "write {" +
                                  p.text + "?} to drop " + drop_what + " when it is inactive");
  }
}

// Fills a template. nullopt when an optional placeholder's param is absent;
// throws Error(path: ...) when a required one is.
std::optional<std::string> expand(const Template& t, const Params& params,
                                  const std::string& path) {
  std::string out;
  bool drop = false;
  for (const Piece& p : t) {
    if (!p.is_param) {
      out += p.text;
      continue;
    }
    auto it = params.find(p.text);
    if (it == params.end()) {
      if (p.optional) {
        drop = true;
        continue;
      }
      throw Error(path + ": param '" + p.text + "' is inactive in this trial; write {" + p.text +
                  "?} to drop the argument when it is inactive");
    }
    out += format_param_value(it->second);
  }
  if (drop) return std::nullopt;
  return out;
}

// ------------------------------------------------------------ config

struct CommandConfig {
  std::vector<Template> argv;
  std::vector<std::string> argv_source;
  std::string cwd;
  std::vector<std::pair<std::string, Template>> env;
  std::optional<double> timeout_s;
  double grace_s = 10.0;
};

std::string argv_path(std::size_t i) { return "objective.argv[" + std::to_string(i) + "]"; }

// Parses and checks the config; with `space`, also the placeholders.
CommandConfig parse_config(const Json& config, const SearchSpace* space) {
  check_keys(config, "objective", {"type", "argv", "cwd", "env", "timeout_s", "grace_s"});
  CommandConfig c;
  if (!config.contains("argv"))
    throw ConfigError("objective.argv",
                      "required: the program and its arguments, e.g. [\"python3\", \"train.py\", "
                      "\"--lr\", \"{lr}\"]");
  const Json& argv = config.at("argv");
  if (!argv.is_array()) throw ConfigError("objective.argv", "must be an array of strings");
  if (argv.empty()) throw ConfigError("objective.argv", "must not be empty: name the program");
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string path = argv_path(i);
    if (!argv[i].is_string()) throw ConfigError(path, "must be a string");
    Template t = parse_template(argv[i].get<std::string>(), path);
    if (space) check_placeholders(t, *space, path, "the argument (and its flag)");
    c.argv.push_back(std::move(t));
    c.argv_source.push_back(argv[i].get<std::string>());
  }
  if (c.argv_source[0].empty()) throw ConfigError(argv_path(0), "must name the program");
  for (const Piece& p : c.argv[0])
    if (p.optional)
      throw ConfigError(argv_path(0), "the program cannot be optional ({" + p.text + "?})");

  if (auto cwd = optional_string(config, "objective", "cwd")) {
    if (cwd->empty()) throw ConfigError("objective.cwd", "must not be empty (omit it instead)");
    if (cwd->find('\0') != std::string::npos)
      throw ConfigError("objective.cwd", "contains a NUL character");
    c.cwd = *cwd;
  }

  if (config.contains("env")) {
    const Json& env = config.at("env");
    if (!env.is_object())
      throw ConfigError("objective.env", "must be an object {\"NAME\": \"value\"}");
    for (const auto& [name, value] : env.items()) {
      std::string path = join_path("objective.env", name);
      if (name.empty() || name.find('=') != std::string::npos ||
          name.find('\0') != std::string::npos)
        throw ConfigError(path, "not a valid variable name (empty, or holds '=' or NUL)");
      const auto& reserved = reserved_env();
      if (std::find(reserved.begin(), reserved.end(), name) != reserved.end())
        throw ConfigError(path, "set by hpsearch for every trial; it cannot be set here");
      if (!value.is_string()) throw ConfigError(path, "must be a string");
      Template t = parse_template(value.get<std::string>(), path);
      if (space) check_placeholders(t, *space, path, "the variable");
      c.env.emplace_back(name, std::move(t));
    }
  }

  if (auto timeout = optional_number(config, "objective", "timeout_s")) {
    if (!(*timeout > 0 && *timeout <= kMaxTimeoutS))
      throw ConfigError("objective.timeout_s",
                        "must be in (0, 1e9] seconds (omit it for no limit)");
    c.timeout_s = *timeout;
  }
  if (auto grace = optional_number(config, "objective", "grace_s")) {
    if (!(*grace >= 0 && *grace <= 3600))
      throw ConfigError("objective.grace_s", "must be in [0, 3600] seconds");
    c.grace_s = *grace;
  }
  return c;
}

std::vector<std::string> expand_argv(const CommandConfig& c, const Params& params) {
  std::vector<std::string> out;
  std::vector<bool> literal_flag;  // out[i] is a kept literal starting with '-'
  for (std::size_t i = 0; i < c.argv.size(); ++i) {
    std::optional<std::string> arg = expand(c.argv[i], params, argv_path(i));
    if (arg) {
      bool flag = i > 0 && !has_param(c.argv[i]) && !arg->empty() && (*arg)[0] == '-';
      out.push_back(std::move(*arg));
      literal_flag.push_back(flag);
      continue;
    }
    // Dropped: the flag before a whole-argument "{name?}" goes too.
    bool whole = c.argv[i].size() == 1 && c.argv[i][0].is_param;
    if (whole && !out.empty() && literal_flag.back()) {
      out.pop_back();
      literal_flag.pop_back();
    }
  }
  return out;
}

// ------------------------------------------------------------ environment

// CUDA_VISIBLE_DEVICES for a device "cpu" or "cuda:N".
std::string visible_devices(const std::string& device) {
  if (device == "cpu" || device.empty()) return "";
  std::string_view d = device;
  if (d.substr(0, 5) != "cuda:" && d != "cuda")
    throw Error("worker device '" + device + "': expected \"cpu\" or \"cuda:N\"");
  std::size_t index = 0;
  if (d.size() > 5) {
    auto digits = d.substr(5);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || ptr != digits.data() + digits.size())
      throw Error("worker device '" + device + "': expected \"cpu\" or \"cuda:N\"");
  }
  const char* mine = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!mine) return std::to_string(index);
  std::vector<std::string> list;
  std::string_view rest = mine;
  while (!rest.empty()) {
    std::size_t comma = rest.find(',');
    list.emplace_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (index >= list.size())
    throw Error("worker device '" + device + "': this worker sees only " +
                std::to_string(list.size()) + " GPU(s) (CUDA_VISIBLE_DEVICES=" + mine + ")");
  return list[index];
}

std::vector<std::string> build_env(const CommandConfig& c, const ObjectiveContext& ctx,
                                   const Trial& trial) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry = *e;
    std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  for (const auto& [name, t] : c.env) {
    std::optional<std::string> value = expand(t, trial.params(), join_path("objective.env", name));
    if (value)
      env[name] = *value;
    else
      env.erase(name);
  }
  Json params = Json::object();
  for (const auto& [k, v] : trial.params()) params[k] = v;
  env["HPSEARCH_PARAMS"] = params.dump(-1, ' ', false, Json::error_handler_t::replace);
  env["HPSEARCH_TRIAL_NUMBER"] = std::to_string(trial.number());
  env["HPSEARCH_STUDY"] = ctx.study_name;
  int threads = std::max(1, ctx.threads);
  env["HPSEARCH_THREADS"] = std::to_string(threads);
  if (!env.count("OMP_NUM_THREADS")) env["OMP_NUM_THREADS"] = std::to_string(threads);
  env["CUDA_VISIBLE_DEVICES"] = visible_devices(ctx.device);

  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) {
    std::string entry = k;
    entry += '=';
    entry += v;
    out.push_back(std::move(entry));
  }
  return out;
}

// ------------------------------------------------------------ trial log

// Shell-like quoting, for the log's command line.
std::string quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_./=:,+@%") == std::string::npos)
    return arg;
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

// <log_dir>/trial-<number>.log, opened close-on-exec; a no-op without a dir.
class TrialLog {
 public:
  TrialLog(const std::string& log_dir, std::int64_t number) {
    if (log_dir.empty()) return;
    // Owner-only (search/private_files.h): the output may show the env.
    try {
      create_private_directories(log_dir);
    } catch (const Error&) {
      // fopen below fails too and says why
    }
    path_ =
        (std::filesystem::path(log_dir) / ("trial-" + std::to_string(number) + ".log")).string();
    int fd = open_private_append(path_);
    file_ = fd >= 0 ? ::fdopen(fd, "a") : nullptr;
    if (fd >= 0 && !file_) ::close(fd);
    if (!file_)
      spdlog::warn("trial {}: cannot write the program's output to {}: {}", number, path_,
                   strerrordesc_np(errno) ? strerrordesc_np(errno) : "error");
  }
  ~TrialLog() {
    if (file_) ::fclose(file_);
  }
  TrialLog(const TrialLog&) = delete;
  TrialLog& operator=(const TrialLog&) = delete;

  void line(std::string_view text) {
    if (!file_) return;
    ::fwrite(text.data(), 1, text.size(), file_);
    ::fputc('\n', file_);
  }
  void note(const std::string& text) { line("[hpsearch] " + text); }
  void flush() {
    if (file_) ::fflush(file_);
  }

 private:
  std::string path_;
  FILE* file_ = nullptr;
};

// The last lines of stderr.
class Tail {
 public:
  void add(std::string_view line) {
    if (line.size() > kTailBytes) line = line.substr(line.size() - kTailBytes);
    lines_.emplace_back(line);
    bytes_ += line.size() + 1;
    while (lines_.size() > kTailLines || (bytes_ > kTailBytes && lines_.size() > 1)) {
      bytes_ -= lines_.front().size() + 1;
      lines_.pop_front();
    }
  }
  std::string text() const {
    std::string out;
    for (const std::string& l : lines_) {
      if (!out.empty()) out += '\n';
      out += l;
    }
    return out;
  }
  bool empty() const { return lines_.empty(); }

 private:
  std::deque<std::string> lines_;
  std::size_t bytes_ = 0;
};

// `text` with every byte that is not part of a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, surrogates or code points above U+10FFFF)
// replaced by U+FFFD, so that a program's binary output cannot break the
// JSON of the store, the protocol or `hpsearch trials`.
std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    unsigned char c = byte(i);
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80)
      len = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c == 0xE0) {
      len = 3;
      lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
      len = 3;
    else if (c == 0xED) {
      len = 3;
      hi = 0x9F;
    } else if (c == 0xF0) {
      len = 4;
      lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3)
      len = 4;
    else if (c == 0xF4) {
      len = 4;
      hi = 0x8F;
    }
    bool ok = len > 0 && i + len <= text.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      unsigned char b = byte(i + k);
      ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (ok) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string with_tail(const std::string& reason, const Tail& tail) {
  if (tail.empty()) return valid_utf8(reason + "; stderr was empty");
  return valid_utf8(reason + "; last lines of stderr:\n" + tail.text());
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// ------------------------------------------------------------ one trial

double run_trial(const CommandConfig& c, const ObjectiveContext& ctx, Trial& trial) {
  std::vector<std::string> argv = expand_argv(c, trial.params());
  SpawnOptions spawn{argv, c.cwd, build_env(c, ctx, trial)};

  TrialLog log(ctx.log_dir, trial.number());
  {
    std::string cmd;
    for (const std::string& a : argv) cmd += (cmd.empty() ? "" : " ") + quote(a);
    log.note("trial " + std::to_string(trial.number()) + ": " + cmd +
             (c.cwd.empty() ? "" : " (in " + c.cwd + ")"));
    log.flush();
  }
  if (!c.cwd.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(c.cwd, ec))
      throw Error("objective.cwd: '" + c.cwd + "' is not a directory");
  }

  ChildProcess child(spawn);  // Error("cannot run ...") -> FAIL
  Tail tail;
  std::optional<double> final_value;
  std::string malformed;  // the last report line that could not be read
  std::optional<std::int64_t> prune_step;

  auto log_only = [&](ChildProcess::Stream stream, std::string_view line) {
    log.line(line);
    if (stream == ChildProcess::Stream::kStderr) tail.add(line);
  };
  auto on_line = [&](ChildProcess::Stream stream, std::string_view line) {
    log_only(stream, line);
    if (stream != ChildProcess::Stream::kStdout || prune_step) return;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, kReportPrefix.size()) != kReportPrefix) return;
    CommandReport report;
    std::string error = parse_command_report(line.substr(kReportPrefix.size()), report);
    if (!error.empty()) {
      malformed = std::string(line.substr(0, 200)) + " (" + error + ")";
      log.note("ignored a report line: " + error);
      return;
    }
    if (report.attrs.is_object())
      for (const auto& [k, v] : report.attrs.items()) trial.set_user_attr(k, v);
    if (!report.value) return;
    if (report.step) {
      trial.report(*report.step, *report.value);
      if (trial.should_prune()) prune_step = report.step;
    } else {
      if (final_value) log.note("a later final value replaces the earlier one");
      final_value = report.value;
    }
  };

  auto grace = std::chrono::duration<double>(c.grace_s);
  std::optional<SteadyClock::time_point> deadline;
  if (c.timeout_s)
    deadline = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                        std::chrono::duration<double>(*c.timeout_s));
  try {
    while (true) {
      // Short waits, so an interrupted run (Ctrl-C, a worker told to stop)
      // stops the program promptly.
      auto wait = kInterruptPoll;
      if (deadline) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - SteadyClock::now());
        wait = std::clamp(left, std::chrono::milliseconds(0), wait);
      }
      bool done = child.wait_for_output(wait, on_line);
      if (prune_step) {
        log.note("pruned after step " + std::to_string(*prune_step) +
                 ": stopping the program (SIGTERM, SIGKILL after " + format_seconds(c.grace_s) +
                 " s)");
        child.terminate(grace, log_only);
        log.note("stopped: " + child.describe_status());
        throw TrialPruned();
      }
      if (done) break;
      if (trial.interrupted()) {
        log.note("interrupted: stopping the program");
        child.terminate(grace, log_only);
        log.note("stopped: " + child.describe_status());
        throw Interrupted();
      }
      if (deadline && SteadyClock::now() >= *deadline) {
        std::string reason = "timeout: still running after " + format_seconds(*c.timeout_s) +
                             " s (objective.timeout_s)";
        log.note(reason + ": stopping the program");
        child.terminate(grace, log_only);
        log.note("stopped: " + child.describe_status());
        throw Error(reason);
      }
    }
  } catch (const TrialPruned&) {
    throw;
  } catch (...) {
    // Interrupted from report(), a failed report, ...: stop the program
    // (if still running), then pass it on.
    if (!child.finished()) {
      log.note("stopping the program");
      child.terminate(grace, log_only);
    }
    throw;
  }

  std::string status = child.describe_status();
  log.note("program ended: " + status);
  bool ok = child.exit_code() == 0 || (!child.exit_code() && !child.term_signal());
  if (!ok) throw Error(with_tail("the program failed (" + status + ")", tail));
  if (!final_value) {
    std::string reason = "the program ended (" + status +
                         ") without reporting a final value (a line 'hpsearch: {\"value\": ...}' "
                         "on stdout)";
    if (!malformed.empty()) reason += "; last unreadable report line: " + malformed;
    throw Error(with_tail(reason, tail));
  }
  return *final_value;
}

}  // namespace

std::string format_param_value(const Json& value) {
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_unsigned()) return std::to_string(value.get<std::uint64_t>());
  if (value.is_number_integer()) return std::to_string(value.get<std::int64_t>());
  if (value.is_number_float()) {
    char buf[64];
    auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, value.get<double>());
    return std::string(buf, ec == std::errc() ? ptr : buf);
  }
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "null";
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::vector<std::string> command_argv(const Json& config, const Params& params) {
  return expand_argv(parse_config(config, nullptr), params);
}

ObjectiveType command_objective_type() {
  ObjectiveType t;
  t.type = "command";
  t.description =
      "runs a program per trial (argv with {param} placeholders); reads 'hpsearch: {json}' "
      "lines from its stdout";
  t.validate = [](const Json& config, const SearchSpace& space) { parse_config(config, &space); };
  t.make = [](const Json& config, const SearchSpace& space,
              const ObjectiveContext& context) -> Objective {
    auto c = std::make_shared<const CommandConfig>(parse_config(config, &space));
    return [c, context](Trial& trial) { return run_trial(*c, context, trial); };
  };
  return t;
}

}  // namespace hps
