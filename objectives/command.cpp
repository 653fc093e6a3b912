#include "objectives/command.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
#include <thread>
#include <utility>
#include <vector>

#include "objectives/child_process.h"
#include "objectives/command_metrics.h"
#include "objectives/command_report.h"
#include "objectives/persistent_program.h"
#include "search/errors.h"
#include "search/printable.h"
#include "search/private_files.h"

extern char** environ;

namespace hps {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr std::size_t kTailLines = 20;    // stderr lines kept for a FAIL reason
constexpr std::size_t kTailBytes = 4000;  // and at most this many bytes of them
constexpr double kMaxTimeoutS = 1e9;
// objective.log_max_bytes: default and bounds of a trial log's size.
constexpr std::int64_t kDefaultLogMaxBytes = std::int64_t{64} << 20;  // 64 MiB
constexpr std::int64_t kMinLogMaxBytes = 4096;
constexpr std::int64_t kMaxLogMaxBytes = std::int64_t{1} << 50;
// hpsearch's own notes may go this far past the cap (the exit status stays).
constexpr std::int64_t kLogNoteReserveBytes = 64 << 10;
// How often a running trial checks Trial::interrupted().
constexpr std::chrono::milliseconds kInterruptPoll{100};
// How long a program killed by SIGTERM/SIGINT/SIGHUP/SIGKILL from outside
// waits for the worker's own stop before it counts as a failure.
constexpr std::chrono::milliseconds kOutsideSignalWait{500};

// Environment variables that hpsearch sets itself.
const std::vector<std::string>& reserved_env() {
  static const std::vector<std::string> names = {
      "HPSEARCH_PARAMS",         "HPSEARCH_TRIAL_NUMBER", "HPSEARCH_STUDY",
      "HPSEARCH_THREADS",        "HPSEARCH_MODE",         "CUDA_VISIBLE_DEVICES",
      "HPSEARCH_CHECKPOINT_DIR", "HPSEARCH_RESUME_STEP",  "HPSEARCH_ARTIFACT_DIR",
      "HPSEARCH_RANK",           "HPSEARCH_WORLD_SIZE"};
  return names;
}

// ------------------------------------------------------------ templates

// The built-in placeholder of the per-trial folder.
constexpr std::string_view kTrialDir = "trial_dir";
// The built-in placeholder of the lineage's checkpoint folder
// (search/checkpoints.h; HPSEARCH_CHECKPOINT_DIR).
constexpr std::string_view kCheckpointDir = "checkpoint_dir";
// The built-in placeholder of the trial's user artifact folder
// (search/checkpoints.h; HPSEARCH_ARTIFACT_DIR).
constexpr std::string_view kArtifactDir = "artifact_dir";

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
      throw ConfigError(path, "'{' inside the placeholder at offset " + std::to_string(i) +
                                  "; write '{{' and '}}' for literal braces");
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

// Whether `p` is a built-in placeholder ({trial_dir}, {checkpoint_dir},
// {artifact_dir}); throws ConfigError(path) when it is written optional or
// the space has a param of that name.
bool check_builtin_placeholder(const Piece& p, const SearchSpace& space, const std::string& path) {
  struct Builtin {
    std::string_view name;
    const char* folder;
  };
  static constexpr Builtin kBuiltins[] = {{kCheckpointDir, "the trial's checkpoint folder"},
                                          {kArtifactDir, "the trial's artifact folder"},
                                          {kTrialDir, "the per-trial folder"}};
  for (const Builtin& b : kBuiltins) {
    if (p.text != b.name) continue;
    const std::string name(b.name);
    if (p.optional)
      throw ConfigError(
          path, fmt::format("{{{}?}}: {} is always there; write {{{}}}", name, b.folder, name));
    if (space.find(p.text))
      throw ConfigError(path, fmt::format("{{{}}} is {}, and the space has a param named '{}' "
                                          "too: rename the param",
                                          name, b.folder, name));
    return true;
  }
  return false;
}

// Checks the placeholders of `t` against the space.
void check_placeholders(const Template& t, const SearchSpace& space, const std::string& path,
                        const std::string& drop_what) {
  for (const Piece& p : t) {
    if (!p.is_param) continue;
    if (check_builtin_placeholder(p, space, path)) continue;
    const ParamSpec* spec = space.find(p.text);
    if (!spec) {
      std::string rule = "placeholder {" + printable_excerpt(p.text) + (p.optional ? "?" : "") +
                         "} names no param in space";
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
      rule += "; for literal braces (JSON in an argument) write '{{' and '}}'";
      throw ConfigError(path, rule);
    }
    if (spec->condition && !p.optional)
      throw ConfigError(path, "param '" + printable_excerpt(p.text) +
                                  "' is conditional (\"when\") and absent from some trials; "
                                  "write {" +
                                  printable_excerpt(p.text) + "?} to drop " + drop_what +
                                  " when it is inactive");
  }
}

// Fills a template. nullopt when an optional placeholder's param is absent;
// throws Error(path: ...) when a required one is.
// `trial_dir`: the value of {trial_dir} ("" when the trial has none yet);
// `checkpoint_dir`: of {checkpoint_dir} (Trial::checkpoint_dir());
// `artifact_dir`: of {artifact_dir} (Trial::artifact_dir()).
std::optional<std::string> expand(const Template& t, const Params& params, const std::string& path,
                                  const std::string& trial_dir = "",
                                  const std::string& checkpoint_dir = "",
                                  const std::string& artifact_dir = "") {
  std::string out;
  bool drop = false;
  for (const Piece& p : t) {
    if (!p.is_param) {
      out += p.text;
      continue;
    }
    if (p.text == kTrialDir && !p.optional) {
      out += trial_dir;
      continue;
    }
    if (p.text == kCheckpointDir && !p.optional) {
      out += checkpoint_dir;
      continue;
    }
    if (p.text == kArtifactDir && !p.optional) {
      out += artifact_dir;
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
  std::int64_t log_max_bytes = kDefaultLogMaxBytes;  // a trial log's size cap
  std::optional<MetricsConfig> metrics;  // "metrics": collect from the program's own output
  Template metrics_file;                 // metrics->file as a template
  bool uses_trial_dir = false;           // {trial_dir} appears somewhere
  bool persistent = false;               // "mode": "persistent"
};

bool uses_trial_dir(const Template& t) {
  return std::any_of(t.begin(), t.end(),
                     [](const Piece& p) { return p.is_param && p.text == kTrialDir; });
}

std::string argv_path(std::size_t i) { return "objective.argv[" + std::to_string(i) + "]"; }

// objective.argv: templates of the program and its arguments.
void parse_argv(const Json& config, const SearchSpace* space, CommandConfig& c) {
  if (!config.contains("argv"))
    throw ConfigError("objective.argv",
                      "required: the program and its arguments, e.g. [\"python3\", \"train.py\", "
                      "\"--lr\", \"{lr}\"]");
  const Json& argv = config.at("argv");
  if (!argv.is_array())
    throw ConfigError("objective.argv", "must be an array of strings, got " + quoted_value(argv));
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
}

// objective.env: variables whose values are templates; the names hpsearch
// sets itself are refused.
void parse_env(const Json& config, const SearchSpace* space, CommandConfig& c) {
  if (!config.contains("env")) return;
  const Json& env = config.at("env");
  if (!env.is_object())
    throw ConfigError("objective.env", "must be an object {\"NAME\": \"value\"}");
  const auto& reserved = reserved_env();
  for (const auto& [name, value] : env.items()) {
    std::string path = join_path("objective.env", name);
    if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos)
      throw ConfigError(path, "not a valid variable name (empty, or holds '=' or NUL)");
    if (std::find(reserved.begin(), reserved.end(), name) != reserved.end())
      throw ConfigError(path, "set by hpsearch for every trial; it cannot be set here");
    if (!value.is_string()) throw ConfigError(path, "must be a string");
    Template t = parse_template(value.get<std::string>(), path);
    if (space) check_placeholders(t, *space, path, "the variable");
    c.env.emplace_back(name, std::move(t));
  }
}

// objective.cwd.
void parse_cwd(const Json& config, CommandConfig& c) {
  auto cwd = optional_string(config, "objective", "cwd");
  if (!cwd) return;
  if (cwd->empty()) throw ConfigError("objective.cwd", "must not be empty (omit it instead)");
  if (cwd->find('\0') != std::string::npos)
    throw ConfigError("objective.cwd", "contains a NUL character");
  c.cwd = *cwd;
}

// objective.timeout_s and grace_s.
void parse_time_limits(const Json& config, CommandConfig& c) {
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
}

// objective.log_max_bytes: an integer number of bytes.
void parse_log_cap(const Json& config, CommandConfig& c) {
  if (!config.contains("log_max_bytes")) return;
  const Json& v = config.at("log_max_bytes");
  const bool integer =
      v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                std::floor(v.get<double>()) == v.get<double>());
  const double bytes = v.is_number() ? v.get<double>() : 0.0;
  if (!integer || bytes < static_cast<double>(kMinLogMaxBytes) ||
      bytes > static_cast<double>(kMaxLogMaxBytes))
    throw ConfigError("objective.log_max_bytes",
                      "must be an integer number of bytes in [4096, 2^50] (default 67108864, "
                      "64 MiB)");
  c.log_max_bytes = static_cast<std::int64_t>(bytes);
}

// The placeholder of `t` as written ("{lr}", "{m?}"), or "" when it has none.
std::string first_placeholder(const Template& t) {
  for (const Piece& p : t)
    if (p.is_param) return "{" + p.text + (p.optional ? "?" : "") + "}";
  return "";
}

// objective.mode, and what persistent mode rules out: placeholders in argv
// and env (the program starts before any trial; params come on stdin) and
// a metrics file shared by every trial (its path must hold {trial_dir}: the
// trial line tells the program its folder).
void parse_mode(const Json& config, CommandConfig& c) {
  auto mode = optional_string(config, "objective", "mode");
  if (!mode || *mode == "per_trial") return;
  if (*mode != "persistent")
    throw ConfigError("objective.mode",
                      "must be \"per_trial\" (default: the program runs once "
                      "per trial) or \"persistent\", got \"" +
                          *mode + "\"");
  c.persistent = true;
  const std::string why =
      ": in persistent mode the program starts once for many trials and reads each trial's "
      "params from stdin; placeholders are not allowed here. A script that runs one trial per "
      "process (its params from argv) is not a persistent program: remove \"mode\": "
      "\"persistent\" (docs: tutorials/tune-any-script.md, \"Persistent mode\")";
  for (std::size_t i = 0; i < c.argv.size(); ++i)
    if (std::string p = first_placeholder(c.argv[i]); !p.empty())
      throw ConfigError(argv_path(i), p + why);
  for (const auto& [name, t] : c.env)
    if (std::string p = first_placeholder(t); !p.empty())
      throw ConfigError(join_path("objective.env", name), p + why);
  if (c.metrics && c.metrics->source == MetricsConfig::Source::kFile &&
      !uses_trial_dir(c.metrics_file))
    throw ConfigError("objective.metrics.source.file",
                      "in persistent mode the metrics file must be the trial's own: put "
                      "{trial_dir} in its path (each trial line on stdin holds \"trial_dir\", "
                      "the folder the program writes it in)");
}

// Parses and checks the config; with `space`, also the placeholders.
CommandConfig parse_config(const Json& config, const SearchSpace* space) {
  check_keys(
      config, "objective",
      {"type", "argv", "cwd", "env", "timeout_s", "grace_s", "log_max_bytes", "metrics", "mode"});
  CommandConfig c;
  parse_argv(config, space, c);
  parse_cwd(config, c);
  parse_env(config, space, c);
  parse_time_limits(config, c);
  parse_log_cap(config, c);
  if (config.contains("metrics")) {
    c.metrics = parse_metrics_config(config.at("metrics"));
    if (c.metrics->source == MetricsConfig::Source::kFile) {
      std::string path = "objective.metrics.source.file";
      c.metrics_file = parse_template(c.metrics->file, path);
      for (const Piece& p : c.metrics_file)
        if (p.is_param && p.text != kTrialDir)
          throw ConfigError(path, "only the placeholder {trial_dir} may appear here, not {" +
                                      p.text + (p.optional ? "?" : "") + "}");
      const Piece& last = c.metrics_file.back();  // parse_template never returns none
      if (last.is_param || (!last.text.empty() && last.text.back() == '/'))
        throw ConfigError(path, "names a folder, not a file (\"" + c.metrics->file +
                                    "\"): the program writes its metrics to a file, e.g. "
                                    "\"{trial_dir}/metrics.csv\"");
      if (space) check_placeholders(c.metrics_file, *space, path, "the file");
      c.uses_trial_dir = uses_trial_dir(c.metrics_file);
    }
  }
  for (const Template& t : c.argv) c.uses_trial_dir = c.uses_trial_dir || uses_trial_dir(t);
  for (const auto& e : c.env) c.uses_trial_dir = c.uses_trial_dir || uses_trial_dir(e.second);
  parse_mode(config, c);
  return c;
}

std::vector<std::string> expand_argv(const CommandConfig& c, const Params& params,
                                     const std::string& trial_dir = "",
                                     const std::string& checkpoint_dir = "",
                                     const std::string& artifact_dir = "") {
  std::vector<std::string> out;
  std::vector<bool> literal_flag;  // out[i] is a kept literal starting with '-'
  for (std::size_t i = 0; i < c.argv.size(); ++i) {
    std::optional<std::string> arg =
        expand(c.argv[i], params, argv_path(i), trial_dir, checkpoint_dir, artifact_dir);
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

// A trial's params as the JSON object the program reads (HPSEARCH_PARAMS,
// the "params" of a persistent-mode trial line).
Json params_json(const Params& params) {
  Json out = Json::object();
  for (const auto& [k, v] : params) out[k] = v;
  return out;
}

// CUDA_VISIBLE_DEVICES for a device "cpu" or "cuda:N" (build_env leaves the
// worker's own for "cuda": all its GPUs).
std::string visible_devices(const std::string& device) {
  if (device == "cpu" || device.empty()) return "";
  std::string_view d = device;
  if (d.substr(0, 5) != "cuda:" && d != "cuda")
    throw Error("worker device '" + printable_excerpt(device) +
                "': expected \"cpu\" or \"cuda:N\"");
  std::size_t index = 0;
  if (d.size() > 5) {
    auto digits = d.substr(5);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || ptr != digits.data() + digits.size())
      throw Error("worker device '" + printable_excerpt(device) +
                  "': expected \"cpu\" or \"cuda:N\"");
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
    throw Error("worker device '" + printable_excerpt(device) + "': this worker sees only " +
                std::to_string(list.size()) + " GPU(s) (CUDA_VISIBLE_DEVICES=" + mine + ")");
  return list[index];
}

// The program's environment. `trial`: nullptr in persistent mode (the
// program serves many trials: no HPSEARCH_PARAMS, HPSEARCH_TRIAL_NUMBER;
// HPSEARCH_MODE=persistent instead).
std::vector<std::string> build_env(const CommandConfig& c, const ObjectiveContext& ctx,
                                   const Trial* trial, const std::string& trial_dir) {
  static const Params kNoParams;
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry = *e;
    std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  for (const auto& [name, t] : c.env) {
    std::optional<std::string> value =
        expand(t, trial ? trial->params() : kNoParams, join_path("objective.env", name), trial_dir,
               trial ? trial->checkpoint_dir() : std::string(),
               trial ? trial->artifact_dir() : std::string());
    if (value)
      env[name] = *value;
    else
      env.erase(name);
  }
  if (trial) {
    env["HPSEARCH_PARAMS"] =
        params_json(trial->params()).dump(-1, ' ', false, Json::error_handler_t::replace);
    env["HPSEARCH_TRIAL_NUMBER"] = std::to_string(trial->number());
    // Long trials: the lineage's folder, and on a retry the step it holds.
    env.erase("HPSEARCH_CHECKPOINT_DIR");
    env.erase("HPSEARCH_RESUME_STEP");
    if (!trial->checkpoint_dir().empty()) env["HPSEARCH_CHECKPOINT_DIR"] = trial->checkpoint_dir();
    if (trial->resume_step()) env["HPSEARCH_RESUME_STEP"] = std::to_string(*trial->resume_step());
    // Multi-process trials: the torchrun environment contract, so a script
    // that calls torch.distributed.init_process_group() (env://) runs
    // unchanged. A single-process trial's environment is left as it is.
    if (const auto& r = trial->ranks()) {
      env["RANK"] = std::to_string(r->rank);
      env["WORLD_SIZE"] = std::to_string(r->world_size);
      env["LOCAL_RANK"] = std::to_string(r->local_rank);
      env["LOCAL_WORLD_SIZE"] = std::to_string(r->local_world_size);
      env["GROUP_RANK"] = std::to_string(r->group_rank);
      env["MASTER_ADDR"] = r->master_addr;
      env["MASTER_PORT"] = std::to_string(r->master_port);
      env["HPSEARCH_RANK"] = std::to_string(r->rank);
      env["HPSEARCH_WORLD_SIZE"] = std::to_string(r->world_size);
    }
    // User artifacts: what the program leaves there is kept.
    env.erase("HPSEARCH_ARTIFACT_DIR");
    if (!trial->artifact_dir().empty()) env["HPSEARCH_ARTIFACT_DIR"] = trial->artifact_dir();
  } else {
    env["HPSEARCH_MODE"] = "persistent";
  }
  env["HPSEARCH_STUDY"] = ctx.study_name;
  int threads = std::max(1, ctx.threads);
  env["HPSEARCH_THREADS"] = std::to_string(threads);
  if (!env.count("OMP_NUM_THREADS")) env["OMP_NUM_THREADS"] = std::to_string(threads);
  // stdout is a pipe: Python would buffer it and print its values (and so
  // allow pruning) only at exit.
  if (!env.count("PYTHONUNBUFFERED")) env["PYTHONUNBUFFERED"] = "1";
  // "cuda" (a worker with several GPUs): the program sees all of them, as
  // the worker does (its CUDA_VISIBLE_DEVICES, inherited, or every GPU).
  if (ctx.device != "cuda") env["CUDA_VISIBLE_DEVICES"] = visible_devices(ctx.device);

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

// "" for a single-process trial and rank 0 of a multi-process one, else
// ".rank-<R>": the other ranks' log and folder sit beside rank 0's
// (trial-<number>.rank-<R>.log), so that ranks on one host do not mix.
std::string rank_suffix(const Trial& trial) {
  const auto& r = trial.ranks();
  return r && r->rank != 0 ? ".rank-" + std::to_string(r->rank) : "";
}

// <log_dir>/trial-<number><suffix>.log, opened close-on-exec; a no-op without a dir.
// At most `max_bytes` of the program's lines are written (one note says
// where the log was cut); hpsearch's own notes may go kLogNoteReserveBytes
// further, so the end of the trial (exit status) is still recorded.
class TrialLog {
 public:
  TrialLog(const std::string& log_dir, std::int64_t number, std::int64_t max_bytes,
           const std::string& suffix = "")
      : max_bytes_(max_bytes) {
    if (log_dir.empty()) return;
    path_ = (std::filesystem::path(log_dir) / ("trial-" + std::to_string(number) + suffix + ".log"))
                .string();
    // Owner-only (search/private_files.h): the output may show the env. A
    // folder another user owns or can write (a <study>.logs made beforehand
    // in a shared folder) could hold their file, which the output would be
    // appended to, or a link to one of the user's files: refused.
    try {
      const OwnerOnlyFolder folder(log_dir, true);
    } catch (const Error& e) {
      spdlog::warn("trial {}: the program's output is not logged: {}", number, e.what());
      path_.clear();
      return;
    }
    // A link (symbolic or hard: another name for a file elsewhere, which
    // could be any file of the user's), a FIFO or another user's file at
    // the log's name is not written (written_file_refusal).
    int fd = -1;
    try {
      fd = open_private_append(path_, "the trial log", "the program's output would be appended to");
    } catch (const Error& e) {
      spdlog::warn("trial {}: the program's output is not logged: {}", number, e.what());
      path_.clear();
      return;
    }
    file_ = ::fdopen(fd, "a");
    if (file_) return;
    const int err = errno;
    ::close(fd);
    spdlog::warn("trial {}: cannot write the program's output to {}: {}", number, path_,
                 strerrordesc_np(err) ? strerrordesc_np(err) : "error");
  }
  ~TrialLog() {
    if (file_) ::fclose(file_);
  }
  TrialLog(const TrialLog&) = delete;
  TrialLog& operator=(const TrialLog&) = delete;

  void line(std::string_view text) {
    if (!file_ || cut_) return;
    const std::int64_t room = max_bytes_ - written_;
    if (static_cast<std::int64_t>(text.size()) + 1 > room) {
      // The part of the line that fits, then nothing more of the program's.
      cut_ = true;
      if (room > 1) write(text.substr(0, static_cast<std::size_t>(room - 1)));
      note("output cut: the log reached " + std::to_string(max_bytes_) +
           " bytes (objective.log_max_bytes); later output of the program is not kept");
      return;
    }
    write(text);
  }
  void note(const std::string& text) {
    if (!file_) return;
    const std::string full = "[hpsearch] " + text;
    if (written_ + static_cast<std::int64_t>(full.size()) + 1 > max_bytes_ + kLogNoteReserveBytes)
      return;
    write(full);
  }
  void flush() {
    if (file_) ::fflush(file_);
  }

 private:
  void write(std::string_view text) {
    ::fwrite(text.data(), 1, text.size(), file_);
    ::fputc('\n', file_);
    written_ += static_cast<std::int64_t>(text.size()) + 1;
  }

  std::string path_;
  FILE* file_ = nullptr;
  std::int64_t max_bytes_;
  std::int64_t written_ = 0;  // bytes written by this run of the trial
  bool cut_ = false;
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

std::string with_tail(const std::string& reason, const Tail& tail,
                      const std::string& what = "stderr") {
  if (tail.empty()) return valid_utf8(reason + "; " + what + " was empty");
  return valid_utf8(reason + "; last lines of " + what + ":\n" + tail.text());
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// ------------------------------------------------------------ one trial

// Writes the command line (shell-quoted) and its folder to the trial log.
void log_command_line(TrialLog& log, std::int64_t number, const std::vector<std::string>& argv,
                      const std::string& cwd) {
  std::string text = "trial " + std::to_string(number) + ":";
  for (const std::string& a : argv) {
    text += ' ';
    text += quote(a);
  }
  if (!cwd.empty()) {
    text += " (in ";
    text += cwd;
    text += ')';
  }
  log.note(text);
  log.flush();
}

// What the running program writes: every line goes to the trial log, stderr
// lines also to the tail, and stdout's report lines (objectives/
// command_report.h) to the trial: user attrs, intermediate values (asking
// the pruner after each) and the final value. With "metrics", the other
// lines (or the metrics file) go to a MetricsCollector
// (objectives/command_metrics.h) whose values reach the trial the same way,
// until the program prints a valid report line: the protocol wins.
class ProgramOutput {
 public:
  // `started`: when the trial started (a metrics file older than that is
  // an earlier run's).
  ProgramOutput(Trial& trial, TrialLog& log, Tail& tail, const CommandConfig& c,
                const ObjectiveContext& ctx, const std::string& metrics_file,
                std::chrono::system_clock::time_point started)
      : trial_(trial), log_(log), tail_(tail) {
    if (!c.metrics) return;
    collector_.emplace(
        *c.metrics, metrics_file, ctx.direction,
        [this](std::int64_t step, double value) {
          if (protocol_ || prune_step_) return;
          intermediate(step, value);
        },
        [this](const std::string& note) { log_.note(note); }, started);
  }

  // How a persistent-mode trial ended (kRunning until the program says).
  enum class End { kRunning, kValue, kDone, kPruned, kFail };

  // Long trials: `pause(true)` stops the program (its process group) and
  // `pause(false)` lets it go on; each report of a trial with a checkpoint
  // folder runs between the two, so the snapshot Trial::report() takes
  // (search/checkpoints.h) sees the folder as it was when the program
  // printed the step, not half of the next step's files.
  void set_pause(std::function<void(bool)> pause) { pause_ = std::move(pause); }

  // `persistent`: the program serves many trials (objective.mode): a final
  // value line or a "status" line ends the trial, and report lines are read
  // after the prune notice too (for the program's acknowledgement).
  void set_persistent() { persistent_ = true; }

  // A line of the program's output, read for reports. After the pruner's
  // decision, report lines are still read (what the program printed before
  // it acted on it: later intermediate values, and a final value, which
  // makes the trial COMPLETE), but the pruner is not asked again.
  // `continued`: the line is a later piece of a line longer than
  // ChildProcess::kMaxLineBytes (ChildProcess::continued()): never a report
  // line (it does not start a line), still read by objective.metrics.
  void read_line(ChildProcess::Stream stream, std::string_view line, bool continued) {
    log_line(stream, line);
    ++lines_;
    if (end_ != End::kRunning) return;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    bool report_line = !continued && line.substr(0, kReportPrefix.size()) == kReportPrefix;
    if (collector_ && !protocol_ && !report_line && !prune_step_) {
      collector_->output_line(stream == ChildProcess::Stream::kStderr, line);
      // A typo in metrics.name, seen at the program's first report line:
      // the trial fails now, not after the whole training.
      if (!persistent_ && !collector_->typo_reason().empty())
        throw Error(collector_->typo_reason() + "; the trial was stopped there");
    }
    if (stream == ChildProcess::Stream::kStdout && report_line)
      read_report(line.substr(kReportPrefix.size()), line);
  }
  // A line of the program's output, only logged (while it is being stopped).
  void log_line(ChildProcess::Stream stream, std::string_view line) {
    log_.line(line);
    if (stream == ChildProcess::Stream::kStderr) tail_.add(line);
    output_tail_.add(line);
  }
  // Reads what the metrics file gained (metrics from a file only).
  void poll_metrics_file(bool at_end) {
    if (collector_ && !protocol_ && !prune_step_) collector_->poll_file(at_end);
  }
  // Sets the extra metrics seen as user attrs (metrics.attrs).
  void store_metric_attrs() {
    if (!collector_) return;
    if (std::string note = collector_->unparsed_attrs_note(); !note.empty()) log_.note(note);
    for (const auto& [name, value] : collector_->attrs()) {
      Json v = std::isfinite(value) ? Json(value) : Json(format_param_value(Json(value)));
      trial_.set_user_attr(name, v);
    }
  }
  // The final value: the protocol's, else the collected metric's.
  std::optional<double> final_value() const {
    if (final_value_ || protocol_ || !collector_) return final_value_;
    return collector_->final_value();
  }
  // Reports the intermediate values read after the prune decision: called
  // when the trial counts COMPLETE all the same (a pruned trial keeps only
  // those up to the step it was pruned at).
  void report_late_values() {
    for (const auto& [step, value] : late_values_) trial_.report(step, value);
    late_values_.clear();
  }
  // Whether a final value line ('hpsearch: {"value": ...}' without a step)
  // was read.
  bool final_value_reported() const { return final_value_.has_value(); }
  // Whether the trial's value comes from objective.metrics.
  bool collects() const { return collector_.has_value() && !protocol_; }
  // Why the collected metric is missing (collects() only).
  std::string never_seen_reason() const { return collector_->never_seen_reason(); }
  // The last lines of stdout and stderr together.
  const Tail& output_tail() const { return output_tail_; }

  // How the trial ended (persistent mode), and the reason of kFail.
  End end() const { return end_; }
  const std::string& fail_reason() const { return fail_reason_; }
  // How many lines the program wrote during this trial.
  std::int64_t lines() const { return lines_; }

  // The step after which the pruner said to prune; nullopt until it does.
  const std::optional<std::int64_t>& prune_step() const { return prune_step_; }
  // The last report line that could not be read, with the reason ("" if none).
  const std::string& malformed() const { return malformed_; }

 private:
  // A report line: `text` after the prefix, `line` whole (for messages).
  void read_report(std::string_view text, std::string_view line) {
    CommandReport report;
    std::string error = parse_command_report(text, report);
    if (error.empty() && !report.status.empty() && !persistent_)
      error = "\"status\" is read in persistent mode only (objective.mode)";
    if (!error.empty()) {
      malformed_ = std::string(line.substr(0, 200)) + " (" + error + ")";
      log_.note("ignored a report line: " + error);
      // Said on the console and kept with the trial once: a trainer that
      // writes every step as a string ("3") would otherwise get no
      // intermediate value, and its pruner never act, with a note only in
      // the trial log (Optuna #5471).
      if (!malformed_said_) {
        malformed_said_ = true;
        const std::string shown = printable_excerpt(std::string(line.substr(0, 200)));
        spdlog::warn("trial {}: ignored a report line ({}): {}; later ones only in its log",
                     trial_.number(), error, shown);
        try {
          trial_.set_user_attr("report_warning", "ignored a report line (" + error + "): " + shown);
        } catch (const std::exception& e) {
          log_.note(std::string("report_warning not stored: ") + e.what());
        }
      }
      return;
    }
    if (report.number && *report.number != trial_.number()) {
      log_.note("ignored a report line for trial " + std::to_string(*report.number) +
                " (this is trial " + std::to_string(trial_.number()) + ")");
      return;
    }
    if (persistent_ && report.status == "pruned" && !prune_step_)
      log_.note("the program ended the trial as pruned on its own (no prune notice was sent)");
    if (persistent_ && !report.status.empty()) {
      end_ = report.status == "pruned" ? End::kPruned
             : report.status == "fail" ? End::kFail
                                       : End::kDone;
      fail_reason_ = report.reason;
    }
    if (collector_ && !prune_step_ && !protocol_ && (report.value || report.step))
      log_.note(
          "the program reports with 'hpsearch:' lines: objective.metrics is not read "
          "from here on");
    if (report.value) protocol_ = true;
    take(report);
    if (persistent_ && report.value && !report.step && end_ == End::kRunning) end_ = End::kValue;
  }

  void take(const CommandReport& report) {
    if (report.attrs.is_object())
      for (const auto& [k, v] : report.attrs.items()) trial_.set_user_attr(k, v);
    if (!report.value) return;
    if (report.step) {
      intermediate(*report.step, *report.value);
    } else {
      if (final_value_) log_.note("a later final value replaces the earlier one");
      final_value_ = report.value;
    }
  }

  void intermediate(std::int64_t step, double value) {
    if (prune_step_) {  // kept for report_late_values()
      late_values_.emplace_back(step, value);
      return;
    }
    {
      const bool pause = pause_ && !trial_.checkpoint_dir().empty();
      if (pause) pause_(true);
      struct Resume {
        const std::function<void(bool)>* pause;
        ~Resume() {
          if (pause) (*pause)(false);
        }
      } resume{pause ? &pause_ : nullptr};
      trial_.report(step, value);
    }
    if (trial_.should_prune()) prune_step_ = step;
  }

  Trial& trial_;
  TrialLog& log_;
  Tail& tail_;
  Tail output_tail_;
  std::optional<MetricsCollector> collector_;
  bool protocol_ = false;  // a valid report line with a value was read
  std::optional<double> final_value_;
  std::string malformed_;
  bool malformed_said_ = false;  // the first ignored report line was said
  std::optional<std::int64_t> prune_step_;
  std::vector<std::pair<std::int64_t, double>> late_values_;  // after prune_step_
  bool persistent_ = false;
  std::function<void(bool)> pause_;
  End end_ = End::kRunning;
  std::string fail_reason_;
  std::int64_t lines_ = 0;
};

// The note of a trial whose program printed its final value before it acted
// on the pruner's decision: the trial counts COMPLETE (as in Optuna, where a
// trial whose objective returned is complete whatever should_prune() said),
// with every intermediate value it reported.
constexpr std::string_view kCompleteDespitePrune =
    "the program printed its final value before it acted on the prune decision: the trial "
    "counts COMPLETE; pruned after step ";

// ProgramOutput::set_pause's function for the process group `group` (the
// program's pid): SIGSTOP, then SIGCONT.
std::function<void(bool)> group_pauser(pid_t group) {
  return [group](bool stop) {
    if (group > 1) ::kill(-group, stop ? SIGSTOP : SIGCONT);
  };
}

// What supervise() saw when it returned.
struct Supervised {
  // The program printed its final value and was still running grace_s
  // later: it was stopped, and the trial keeps the value (a data loader's
  // workers, a logging thread or a distributed shutdown that hangs).
  bool lingered = false;
};

// Waits for the program to end, passing its output to `output`. Stops it
// (SIGTERM to its group, SIGKILL after grace_s) and throws TrialPruned when
// the pruner says to prune (unless the program printed its final value and
// exited with status 0 before it was stopped: then it returns, COMPLETE), Interrupted when the
// trial is interrupted, Error("timeout: ...") after timeout_s; on any other exception (from
// Trial::report(), ...) stops it and passes the exception on. A program
// that printed its final value and still runs grace_s later is stopped
// (SIGTERM, SIGKILL after grace_s) and the trial keeps the value
// (Supervised::lingered).
Supervised supervise(const CommandConfig& c, Trial& trial, ChildProcess& child, TrialLog& log,
                     ProgramOutput& output) {
  auto on_line = [&output, &child](ChildProcess::Stream s, std::string_view line) {
    output.read_line(s, line, child.continued());
  };
  auto log_only = [&output](ChildProcess::Stream s, std::string_view line) {
    output.log_line(s, line);
  };
  const auto grace = std::chrono::duration<double>(c.grace_s);
  auto stop = [&](const std::string& why) {
    log.note(why);
    child.terminate(grace, log_only);
    log.note("stopped: " + child.describe_status());
  };
  std::optional<SteadyClock::time_point> deadline;
  if (c.timeout_s)
    deadline = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                        std::chrono::duration<double>(*c.timeout_s));
  std::optional<SteadyClock::time_point> linger_deadline;
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
      output.poll_metrics_file(done);
      log.flush();  // the log can be followed (tail -f) while the trial runs
      if (const auto& step = output.prune_step()) {
        if (!done) {
          // Its lines until it ends are still read: a final value printed
          // before it acted on the decision counts.
          log.note("pruned after step " + std::to_string(*step) +
                   ": stopping the program (SIGTERM, SIGKILL after " + format_seconds(c.grace_s) +
                   " s)");
          child.terminate(grace, on_line);
          log.note("stopped: " + child.describe_status());
        }
        if (output.final_value_reported() && child.exit_code() == 0) {
          log.note(std::string(kCompleteDespitePrune) + std::to_string(*step));
          output.report_late_values();
          return {};
        }
        throw TrialPruned();  // the metrics' attrs: MetricAttrsOnExit
      }
      if (done) return {};
      if (output.final_value_reported()) {
        const auto now = SteadyClock::now();
        if (!linger_deadline) {
          linger_deadline = now + std::chrono::duration_cast<SteadyClock::duration>(grace);
        } else if (now >= *linger_deadline) {
          log.note("the program printed its final value and still runs " +
                   format_seconds(c.grace_s) +
                   " s later (objective.grace_s): stopping it; the trial keeps its value");
          child.terminate(grace, log_only);
          log.note("stopped: " + child.describe_status());
          return Supervised{true};
        }
      }
      if (trial.interrupted()) {
        if (output.final_value_reported()) {
          // Its value is known (it lingers): a worker being stopped (a
          // preempted Slurm task) still ends the trial COMPLETE with it.
          stop(
              "interrupted after the program printed its final value: stopping it; the trial "
              "keeps its value");
          return Supervised{true};
        }
        stop("interrupted: stopping the program");
        throw Interrupted();
      }
      if (deadline && SteadyClock::now() >= *deadline) {
        std::string reason = "timeout: still running after " + format_seconds(*c.timeout_s) +
                             " s (objective.timeout_s)";
        stop(reason + ": stopping the program");
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
}

// The per-trial folder of {trial_dir}: <log_dir>/trial-<number> as an
// absolute path, or without
// a log folder a fresh one in the temporary folder, removed with this object.
class TrialDir {
 public:
  TrialDir(const CommandConfig& c, const ObjectiveContext& ctx, std::int64_t number,
           const std::string& suffix = "") {
    if (!c.uses_trial_dir) return;
    if (ctx.log_dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/hpsearch-trial-" +
                         std::to_string(number) + "-XXXXXX";
      if (!::mkdtemp(tmpl.data()))
        throw Error("{trial_dir}: cannot create a folder " + tmpl + ": " +
                    (strerrordesc_np(errno) ? strerrordesc_np(errno) : "error"));
      path_ = tmpl;
      remove_ = true;
      return;
    }
    // Absolute: the program may run in another folder (objective.cwd) than
    // the worker, whose folder a relative log folder is relative to.
    path_ = std::filesystem::absolute(std::filesystem::path(ctx.log_dir) /
                                      ("trial-" + std::to_string(number) + suffix))
                .lexically_normal()
                .string();
    // <study>.logs, then its trial-<number>, each made 0700 if missing; one
    // made beforehand by someone else, writable by others, or a link planted
    // in its place is refused (the program would write its files where
    // another user reads or swaps them): Error naming the folder and the
    // rule -> FAIL. The parent is checked first, so nothing is made through
    // a planted one.
    const std::string hint =
        "hpsearch makes this folder itself: remove the one found there (after checking who "
        "made it) and run the trial again";
    { const OwnerOnlyFolder parent(ctx.log_dir, true, hint); }
    const OwnerOnlyFolder checked(path_, true, hint);
  }
  ~TrialDir() {
    std::error_code ec;
    if (remove_) std::filesystem::remove_all(path_, ec);
  }
  TrialDir(const TrialDir&) = delete;
  TrialDir& operator=(const TrialDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool remove_ = false;
};

// Killed by a signal from outside while this worker is being stopped too
// (a Slurm job cancelled or preempted signals every process of the step;
// Ctrl-C to a process group): the trial was interrupted, not failed, and
// runs again. The worker notices its own signal a moment later: look for
// up to kOutsideSignalWait. Throws Interrupted then.
void throw_if_stopped_with_worker(const ChildProcess& child, Trial& trial, TrialLog& log) {
  auto sig = child.term_signal();
  if (!sig || (*sig != SIGTERM && *sig != SIGINT && *sig != SIGHUP && *sig != SIGKILL)) return;
  const auto until = SteadyClock::now() + kOutsideSignalWait;
  while (!trial.interrupted() && SteadyClock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (trial.interrupted()) {
    log.note("interrupted: the program was stopped together with this worker");
    throw Interrupted();
  }
}

// The metrics file of a trial (objective.metrics.source.file with
// {trial_dir} filled in, relative to the program's folder), or "" when the
// metrics are not read from a file. A file left in the trial's own folder
// by an earlier run of it is removed (it is not this run's).
std::string trial_metrics_file(const CommandConfig& c, const Trial& trial, const TrialDir& dir,
                               TrialLog& log) {
  if (!c.metrics || c.metrics->source != MetricsConfig::Source::kFile) return "";
  std::string file =
      *expand(c.metrics_file, trial.params(), "objective.metrics.source.file", dir.path());
  if (!c.cwd.empty() && std::filesystem::path(file).is_relative())
    file = (std::filesystem::path(c.cwd) / file).string();
  std::error_code ec;
  if (uses_trial_dir(c.metrics_file) && std::filesystem::remove(file, ec))
    log.note("removed " + file + " left by an earlier run of this trial");
  log.note("reading metrics from " + file);
  return file;
}

// Sets the extra metrics seen (objective.metrics.attrs) as user attrs
// however the trial ends: with a value, pruned, failed, timed out or
// interrupted (an error storing them then does not hide the first one).
struct MetricAttrsOnExit {
  ProgramOutput& output;
  explicit MetricAttrsOnExit(ProgramOutput& o) : output(o) {}
  MetricAttrsOnExit(const MetricAttrsOnExit&) = delete;
  MetricAttrsOnExit& operator=(const MetricAttrsOnExit&) = delete;
  ~MetricAttrsOnExit() {
    if (std::uncaught_exceptions() == 0) return;  // stored by the normal path
    try {
      output.store_metric_attrs();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the trial's own error goes on
    }
  }
};

double run_trial(const CommandConfig& c, const ObjectiveContext& ctx, Trial& trial) {
  const auto started = std::chrono::system_clock::now();
  TrialDir trial_dir(c, ctx, trial.number(), rank_suffix(trial));
  std::vector<std::string> argv = expand_argv(c, trial.params(), trial_dir.path(),
                                              trial.checkpoint_dir(), trial.artifact_dir());
  SpawnOptions spawn{argv, c.cwd, build_env(c, ctx, &trial, trial_dir.path())};

  TrialLog log(ctx.log_dir, trial.number(), c.log_max_bytes, rank_suffix(trial));
  log_command_line(log, trial.number(), argv, c.cwd);
  if (!c.cwd.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(c.cwd, ec))
      throw Error("objective.cwd: '" + printable_excerpt(c.cwd) + "' is not a directory");
  }
  const std::string metrics_file = trial_metrics_file(c, trial, trial_dir, log);

  Tail tail;
  // Before the program starts: the collector looks at the metrics file first.
  ProgramOutput output(trial, log, tail, c, ctx, metrics_file, started);
  MetricAttrsOnExit attrs{output};
  // Error("cannot run ...") -> FAIL, with what to write instead when the
  // program is not where it was looked for.
  std::optional<ChildProcess> started_child;
  try {
    started_child.emplace(spawn);
  } catch (const Error& e) {
    const std::string problem = program_problem(argv.at(0), c.cwd);
    if (problem.empty()) throw;
    throw Error(std::string(e.what()) + "; " + problem);
  }
  ChildProcess& child = *started_child;
  if (!trial.checkpoint_dir().empty()) {
    log.note("checkpoint folder " + trial.checkpoint_dir() +
             (trial.resume_step() ? "; resuming after step " + std::to_string(*trial.resume_step())
                                  : std::string()));
    output.set_pause(group_pauser(child.pid()));
  }
  const Supervised supervised = supervise(c, trial, child, log, output);
  output.store_metric_attrs();
  const std::optional<double> final_value = output.final_value();
  const std::string& malformed = output.malformed();

  std::string status = child.describe_status();
  log.note("program ended: " + status);
  if (!supervised.lingered) throw_if_stopped_with_worker(child, trial, log);
  bool ok = child.exit_code() == 0 || (!child.exit_code() && !child.term_signal()) ||
            (supervised.lingered && final_value);
  if (!ok) throw Error(with_tail("the program failed (" + status + ")", tail));
  // A rank other than 0 of a multi-process trial reports nothing: rank 0's
  // value is the trial's, and the coordinator drops the others' ends.
  if (!final_value && trial.ranks() && trial.ranks()->rank > 0) {
    log.note("rank " + std::to_string(trial.ranks()->rank) +
             " ended without a value of its own (rank 0's is the trial's)");
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (!final_value && output.collects())
    throw Error(with_tail(output.never_seen_reason(), output.output_tail(), "output"));
  if (!final_value) {
    std::string reason = "the program ended (" + status +
                         ") without reporting a final value (a line 'hpsearch: {\"value\": ...}' "
                         "on stdout)";
    if (!malformed.empty()) reason += "; last unreadable report line: " + malformed;
    throw Error(with_tail(reason, tail));
  }
  return *final_value;
}

// ------------------------------------------------------------ persistent mode

// Waits until the program ends the trial (ProgramOutput::end()) or exits,
// passing its output to `output`. When the pruner says to prune, writes
// {"type": "prune", "number": N} to the program's stdin and waits up to
// grace_s for the trial to end; past that the program's group is killed
// (the next trial starts a new one) and TrialPruned is thrown. Interrupted
// and timeout_s stop the program as in per-trial mode (Interrupted,
// Error("timeout: ...")). Returns normally when the trial ended or the
// program exited; any other exception stops the program and passes on.
void supervise_persistent(const CommandConfig& c, Trial& trial, PersistentProgram& program,
                          TrialLog& log, ProgramOutput& output) {
  auto on_line = [&output, &program](ChildProcess::Stream s, std::string_view line) {
    output.read_line(s, line, program.child() != nullptr && program.child()->continued());
  };
  auto log_only = [&output](ChildProcess::Stream s, std::string_view line) {
    output.log_line(s, line);
  };
  const auto grace = std::chrono::duration<double>(c.grace_s);
  auto stop = [&](const std::string& why, std::chrono::duration<double> within) {
    log.note(why);
    program.stop(within, log_only);
    log.note("stopped: " + program.describe_status() + "; the next trial starts it again");
  };
  auto after = [](double s) {
    return SteadyClock::now() +
           std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
  };
  // time_point::max(): none (plain time points, no optionals: simpler for
  // GCC's -Wmaybe-uninitialized at -O1).
  constexpr SteadyClock::time_point kNever = SteadyClock::time_point::max();
  const SteadyClock::time_point deadline = c.timeout_s ? after(*c.timeout_s) : kNever;
  SteadyClock::time_point prune_deadline = kNever;
  try {
    while (true) {
      auto wait = kInterruptPoll;
      const SteadyClock::time_point until = std::min(deadline, prune_deadline);
      if (until != kNever)
        wait = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(until - SteadyClock::now()),
                          std::chrono::milliseconds(0), wait);
      const bool exited = program.wait_for_output(wait, on_line);
      const bool ended = output.end() != ProgramOutput::End::kRunning || exited;
      output.poll_metrics_file(ended);
      log.flush();  // the log can be followed (tail -f) while the trial runs
      if (ended) return;
      if (output.prune_step() && prune_deadline == kNever) {
        const std::string sent = program.send(Json{{"type", "prune"}, {"number", trial.number()}});
        log.note("pruned after step " + std::to_string(*output.prune_step()) +
                 ": sent the prune notice on stdin; waiting up to " + format_seconds(c.grace_s) +
                 " s for {\"status\": \"pruned\"}" + (sent.empty() ? "" : " (" + sent + ")"));
        prune_deadline = after(c.grace_s);
      }
      if (prune_deadline != kNever && SteadyClock::now() >= prune_deadline) {
        stop("the program did not end the pruned trial within grace_s: killing it",
             std::chrono::duration<double>(0));
        throw TrialPruned();
      }
      if (trial.interrupted()) {
        stop("interrupted: stopping the program", grace);
        throw Interrupted();
      }
      if (deadline != kNever && SteadyClock::now() >= deadline) {
        std::string reason = "timeout: the trial still ran after " + format_seconds(*c.timeout_s) +
                             " s (objective.timeout_s)";
        stop(reason + ": stopping the program", grace);
        throw Error(reason);
      }
    }
  } catch (const TrialPruned&) {
    throw;
  } catch (...) {
    if (program.running()) {
      log.note("stopping the program");
      program.stop(grace, log_only);
    }
    throw;
  }
}

// What a program that exits with status 0 without ending its trial is told
// (persistent mode): the contract, where the docs say it, and the way back
// to one process per trial.
constexpr const char* kPersistentContract =
    "in objective.mode \"persistent\" the program must read its trials on stdin (one JSON "
    "line each, {\"type\": \"trial\", \"params\": ...}), end each with a result line and "
    "keep running for the next one (docs: tutorials/tune-any-script.md, \"Persistent mode\"; "
    "examples/persistent/hpsearch_trials.py does it for Python); a script that runs one trial "
    "per process and exits needs per-trial mode: remove \"mode\": \"persistent\" from the "
    "objective";

// The trial's result once the program ended it (ProgramOutput::end()).
double persistent_result(ProgramOutput& output, TrialLog& log) {
  using End = ProgramOutput::End;
  if (output.end() == End::kValue && output.prune_step()) {
    log.note(std::string(kCompleteDespitePrune) + std::to_string(*output.prune_step()));
    output.report_late_values();
  } else if (output.prune_step() || output.end() == End::kPruned) {
    log.note("the trial ended pruned");
    throw TrialPruned();
  }
  if (output.end() == End::kFail)
    throw Error("the program failed the trial" + (output.fail_reason().empty()
                                                      ? std::string()
                                                      : ": " + valid_utf8(output.fail_reason())));
  if (std::optional<double> value = output.final_value()) return *value;
  if (output.collects())
    throw Error(with_tail(output.never_seen_reason(), output.output_tail(), "output"));
  std::string reason =
      "the program ended the trial ({\"status\": \"done\"}) without a final value (a line "
      "'hpsearch: {\"value\": ...}' on stdout)";
  if (!output.malformed().empty()) reason += "; last unreadable report line: " + output.malformed();
  throw Error(reason);
}

// One attempt at a trial on `program`: starts it if needed, sends the trial
// line, supervises. Returns the value; throws as run_trial() does. Returns
// nullopt when the program exited with status 0 before writing anything for
// this trial (it ended between trials and did not read the line): the
// caller runs the trial again on a new program.
std::optional<double> persistent_attempt(const CommandConfig& c, const ObjectiveContext& ctx,
                                         Trial& trial, PersistentProgram& program, TrialLog& log) {
  auto log_line = [&log](ChildProcess::Stream, std::string_view text) { log.line(text); };
  if (program.running() && program.wait_for_output(std::chrono::milliseconds(0), log_line))
    log.note("the program had ended (" + program.describe_status() + "): starting it again");
  const bool started_now = program.start();  // Error("cannot run ...") -> FAIL
  if (started_now) {
    log_command_line(log, trial.number(), program.argv(), c.cwd);
    log.note("started the program (pid " + std::to_string(program.pid()) +
             ", persistent mode; start " + std::to_string(program.starts()) + ")");
  } else {
    log.note("trial " + std::to_string(trial.number()) + ": served by the program (pid " +
             std::to_string(program.pid()) + ")");
  }
  log.flush();
  const auto started = std::chrono::system_clock::now();
  TrialDir trial_dir(c, ctx, trial.number(), rank_suffix(trial));
  const std::string metrics_file = trial_metrics_file(c, trial, trial_dir, log);
  Tail tail;
  ProgramOutput output(trial, log, tail, c, ctx, metrics_file, started);
  MetricAttrsOnExit attrs{output};
  output.set_persistent();
  Json line = {
      {"type", "trial"}, {"number", trial.number()}, {"params", params_json(trial.params())}};
  if (c.uses_trial_dir) line["trial_dir"] = trial_dir.path();
  if (!trial.checkpoint_dir().empty()) {
    line["checkpoint_dir"] = trial.checkpoint_dir();
    if (trial.resume_step()) line["resume_step"] = *trial.resume_step();
    output.set_pause(group_pauser(program.pid()));
  }
  if (!trial.artifact_dir().empty()) line["artifact_dir"] = trial.artifact_dir();
  if (std::string error = program.send(line); !error.empty())
    log.note("cannot send the trial: " + error);
  supervise_persistent(c, trial, program, log, output);
  output.store_metric_attrs();
  if (output.end() != ProgramOutput::End::kRunning) return persistent_result(output, log);

  // The program exited during the trial.
  const ChildProcess& child = *program.child();
  const std::string status = child.describe_status();
  log.note("program ended: " + status);
  if (output.prune_step()) {
    log.note("the program exited after the prune notice; the trial ended pruned");
    throw TrialPruned();
  }
  throw_if_stopped_with_worker(child, trial, log);
  if (child.exit_code() == 0 && output.lines() == 0) return std::nullopt;
  // A program started for this trial that exits with status 0 before it
  // ends the trial never served one: most likely a per-trial script (it
  // reads no trial on stdin, prints its result and exits).
  if (child.exit_code() == 0 && started_now)
    throw Error(with_tail(
        "the program exited (" + status +
            ") during its first trial without ending it: " + std::string(kPersistentContract),
        tail));
  throw Error(with_tail(
      "the program exited during the trial (" + status + "); the next trial starts it again",
      tail));
}

// A trial in persistent mode: the program of this worker (taken from the
// pool) serves it; see objectives/command.h.
double run_persistent_trial(const CommandConfig& c, const ObjectiveContext& ctx, Trial& trial,
                            PersistentProgramPool& pool) {
  if (!c.cwd.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(c.cwd, ec))
      throw Error("objective.cwd: '" + printable_excerpt(c.cwd) + "' is not a directory");
  }
  struct Lease {
    PersistentProgramPool& pool;
    std::unique_ptr<PersistentProgram> program;
    ~Lease() { pool.give_back(std::move(program)); }
  } lease{pool, pool.take()};
  TrialLog log(ctx.log_dir, trial.number(), c.log_max_bytes, rank_suffix(trial));
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (std::optional<double> value = persistent_attempt(c, ctx, trial, *lease.program, log))
      return *value;
    log.note("the program exited (exit code 0) before it read the trial: running it again");
  }
  throw Error("the program exited (exit code 0) twice without reading the trial from stdin: " +
              std::string(kPersistentContract));
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

CommandLine command_line(const Json& config, const Params& params, std::int64_t number,
                         const std::string& trial_dir, const std::string& checkpoint_dir,
                         const std::string& artifact_dir) {
  const CommandConfig c = parse_config(config, nullptr);
  CommandLine out;
  out.argv = expand_argv(c, params, trial_dir, checkpoint_dir, artifact_dir);
  for (const auto& [name, t] : c.env)
    if (std::optional<std::string> value =
            expand(t, c.persistent ? Params() : params, join_path("objective.env", name), trial_dir,
                   checkpoint_dir, artifact_dir))
      out.env[name] = *value;
  // argv[0] from a placeholder ("{program}") differs between trials.
  const Json& argv0 = config["argv"][0];
  if (!out.argv.empty() &&
      !(argv0.is_string() && argv0.get<std::string>().find('{') != std::string::npos))
    out.program_problem = program_problem(out.argv[0], c.cwd);
  if (c.persistent) {
    out.env["HPSEARCH_MODE"] = "persistent";
  } else {
    out.env["HPSEARCH_PARAMS"] =
        params_json(params).dump(-1, ' ', false, Json::error_handler_t::replace);
    out.env["HPSEARCH_TRIAL_NUMBER"] = std::to_string(number);
  }
  return out;
}

std::string program_problem(const std::string& program, const std::string& cwd) {
  if (program.empty()) return "argv[0] is empty";
  namespace fs = std::filesystem;
  const std::string shown = "'" + printable_excerpt(program) + "'";
  const bool script = program.ends_with(".py") || program.ends_with(".sh");
  const std::string via = script ? std::string(", or run it through its interpreter: [\"") +
                                       (program.ends_with(".py") ? "python3" : "sh") + "\", \"" +
                                       printable_excerpt(program) + "\", ...]"
                                 : std::string();
  if (program.find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    while (true) {
      const std::size_t colon = dirs.find(':');
      const std::string dir(dirs.substr(0, colon));
      const fs::path candidate = fs::path(dir.empty() ? "." : dir) / program;
      std::error_code ec;
      if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) return "";
      if (colon == std::string_view::npos) break;
      dirs.remove_prefix(colon + 1);
    }
    std::error_code ec;
    const fs::path here = fs::path(cwd.empty() ? "." : cwd) / program;
    return shown + " is not on PATH (a name without '/' is looked up on PATH only" +
           (fs::exists(here, ec) ? ", not in the program's folder, where it is" : "") +
           "): write './" + printable_excerpt(program) + "'" + via;
  }
  fs::path file(program);
  if (file.is_relative() && !cwd.empty()) file = fs::path(cwd) / file;
  std::error_code ec;
  if (!fs::exists(file, ec))
    return shown + ": no such file" + (cwd.empty() ? "" : " in '" + printable_excerpt(cwd) + "'");
  if (!fs::is_regular_file(file, ec)) return shown + " is not a regular file";
  if (::access(file.c_str(), X_OK) != 0) return shown + " is not executable: chmod +x it" + via;
  return "";
}

ObjectiveType command_objective_type() {
  ObjectiveType t;
  t.type = "command";
  t.description =
      "runs a program per trial (argv with {param} placeholders); reads 'hpsearch: {json}' "
      "lines from its stdout, or the metrics it prints or writes (\"metrics\")";
  t.validate = [](const Json& config, const SearchSpace& space) { parse_config(config, &space); };
  t.make = [](const Json& config, const SearchSpace& space,
              const ObjectiveContext& context) -> Objective {
    auto c = std::make_shared<const CommandConfig>(parse_config(config, &space));
    if (c->metrics && c->metrics->source == MetricsConfig::Source::kFile &&
        !uses_trial_dir(c->metrics_file))
      spdlog::warn(
          "objective.metrics.source.file '{}' has no {{trial_dir}}: trials running in parallel "
          "share this one file and read each other's metrics; use {{trial_dir}} in the path "
          "(and in argv or env, where the program writes it)",
          c->metrics->file);
    if (c->metrics && c->metrics->final_best && !context.direction)
      throw ConfigError("objective.metrics.final",
                        "\"best\" needs the study's direction, which this caller did not give "
                        "(ObjectiveContext::direction)");
    if (c->persistent) {
      auto pool = std::make_shared<PersistentProgramPool>(
          SpawnOptions{expand_argv(*c, {}), c->cwd, build_env(*c, context, nullptr, "")},
          c->grace_s);
      return [c, context, pool](Trial& trial) {
        return run_persistent_trial(*c, context, trial, *pool);
      };
    }
    return [c, context](Trial& trial) { return run_trial(*c, context, trial); };
  };
  return t;
}

}  // namespace hps
