// The plan of `hpsearch run --dry-run` and `hpsearch validate` (print_plan,
// cli/commands.h), and validate's --try-output.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/factory.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "objectives/command.h"
#include "objectives/command_metrics.h"
#include "objectives/command_report.h"
#include "search/checkpoints.h"
#include "search/pbt_options.h"
#include "search/printable.h"
#include "search/resources.h"
#include "search/search_space.h"
#include "search/study.h"
#include "search/study_diff.h"

namespace hps::cli {

namespace {

// A value of a setting as the text plan writes it: strings bare, null as
// "none", anything else as compact JSON.
std::string setting_text(const Json& value) {
  if (value.is_string()) return printable(value.get<std::string>());
  if (value.is_null()) return "none";
  if (value.is_number_float()) return format_value(value.get<double>());
  return printable(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

// The "key=value" items of a resolved section, less its type.
std::vector<std::string> setting_items(const Json& section) {
  std::vector<std::string> out;
  if (!section.is_object()) return {setting_text(section)};
  for (const auto& [key, value] : section.items()) {
    if (key == "type") continue;
    std::string text;
    if (value.is_object()) {
      text = "{";
      for (const std::string& item : setting_items(value)) {
        if (text.size() > 1) text += ", ";
        text += item;
      }
      text += "}";
    } else {
      text = key == "seed" && value.is_null() ? "none (a new one each run)" : setting_text(value);
    }
    out.push_back(printable(key) + "=" + text);
  }
  return out;
}

// The items, comma-separated, in lines of about 96 characters, each after
// `indent`; the first line's indent is left to the caller.
std::string settings_lines(const Json& section, const std::string& indent) {
  std::string out;
  std::size_t column = 0;
  for (const std::string& item : setting_items(section)) {
    if (column > 0 && column + item.size() > 96) {
      out += ",\n" + indent;
      column = 0;
    } else if (column > 0) {
      out += ", ";
      column += 2;
    }
    out += item;
    column += item.size();
  }
  return out;
}

// An argument as a shell would need it to read it back: as is when it holds
// only safe characters, else in single quotes.
std::string shell_word(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_./=:,+@%{}") == std::string::npos)
    return printable(arg);
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return printable(out + "'");
}

// The params of trial 0 of a new study with this sampler: the sampler's
// first suggestion, drawn in an in-memory study (nothing is written).
Params example_params(const StudyConfig& config, const RunOptions& o) {
  StudyOptions so;
  so.sampler = make_sampler(config.sampler, o.seed);
  so.space = config.space;
  Study study = Study::create(open_storage("memory"), config.name, config.direction, so);
  return study.ask().params();
}

// The example trial of a command objective: its params, argv and env.
Json command_example(const StudyConfig& config, const RunOptions& o,
                     const std::string& checkpoint_root, const std::string& log_dir) {
  Json example = {{"trial", 0}};
  Params params;
  try {
    params = example_params(config, o);
  } catch (const std::exception& e) {
    example["error"] = std::string("no example trial: ") + e.what();
    return example;
  }
  example["params"] = Json::object();
  for (const auto& [name, value] : params) example["params"][name] = value;
  try {
    const CommandLine line = command_line(
        config.objective, params, 0,
        (std::filesystem::absolute(log_dir) / "trial-0").lexically_normal().string(),
        (std::filesystem::path(checkpoints::lineage_path(checkpoint_root, 0)) / "work")
            .lexically_normal()
            .string(),
        checkpoints::trial_artifact_path(
            checkpoints::artifact_root_for(
                checkpoint_root,
                !checkpoints::ArtifactOptions::from_json(config.artifacts).path.empty()),
            0));
    example["argv"] = line.argv;
    example["env"] = line.env;
    if (!line.program_problem.empty())
      example["warning"] = "objective.argv[0]: " + line.program_problem +
                           " (on this machine; a remote worker's may differ)";
  } catch (const std::exception& e) {
    example["error"] = std::string("trial 0 would fail: ") + e.what();
  }
  return example;
}

// What --try-output reads, as a trial reads its program's output.
struct OutputReading {
  Json steps = Json::array();  // {"step", "value", "from"} each
  Json attrs = Json::object();
  std::vector<std::string> notes;
  bool protocol = false;  // a report line with a value: the protocol wins from there on
  std::optional<double> final_value;

  void step(std::int64_t s, double v, const char* from) {
    steps.push_back({{"step", s}, {"value", v}, {"from", from}});
  }
  // A report line ("hpsearch: ..."), the `number`-th line of the file.
  void report_line(const std::string& line, std::int64_t number) {
    CommandReport report;
    if (std::string error = parse_command_report(line.substr(kReportPrefix.size()), report);
        !error.empty()) {
      notes.push_back("line " + std::to_string(number) + ": ignored a report line: " + error);
      return;
    }
    if (report.attrs.is_object())
      for (const auto& [k, v] : report.attrs.items()) attrs[k] = v;
    if (!report.value) return;
    protocol = true;
    if (report.step)
      step(*report.step, *report.value, "report line");
    else
      final_value = report.value;
  }
};

// Reads the lines of `in` into `reading`: report lines, and the others
// through `collector` (may be null) as stdout lines, or stderr lines when
// the metrics' source is stderr.
void read_output(std::istream& in, MetricsCollector* collector, bool as_stderr,
                 OutputReading& reading) {
  std::int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind(kReportPrefix, 0) == 0)
      reading.report_line(line, number);
    else if (collector && !reading.protocol)
      collector->output_line(as_stderr, line);
  }
}

// What the metrics rules (objective.metrics) and report lines read from a
// saved output file, as a trial reads its program's output.
Json try_output(const StudyConfig& config, const std::string& file) {
  const std::string type = config.objective.value("type", std::string());
  if (type != "command")
    throw ConfigError("--try-output",
                      "reads the output of a \"command\" objective; this "
                      "study's objective.type is '" +
                          printable_excerpt(type) + "'");
  if (std::error_code ec; std::filesystem::is_directory(file, ec))
    throw ConfigError("--try-output", "'" + printable(file) + "' is a folder, not a file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError("--try-output", "cannot read '" + printable(file) + "'");
  std::optional<MetricsConfig> metrics;
  if (const auto it = config.objective.find("metrics"); it != config.objective.end())
    metrics = parse_metrics_config(*it);
  OutputReading reading;
  std::unique_ptr<MetricsCollector> collector;
  if (metrics)
    collector = std::make_unique<MetricsCollector>(
        *metrics, file, config.direction,
        [&reading](std::int64_t s, double v) {
          if (!reading.protocol) reading.step(s, v, "metrics");
        },
        [&reading](const std::string& note) { reading.notes.push_back(note); });
  if (metrics && metrics->source == MetricsConfig::Source::kFile)
    collector->poll_file(true);
  else
    read_output(in, collector.get(), metrics && metrics->source == MetricsConfig::Source::kStderr,
                reading);
  const bool collected = collector && !reading.protocol;
  Json out = {{"file", file}};
  if (collected) {
    reading.final_value = collector->final_value();
    for (const auto& [name, value] : collector->attrs()) reading.attrs[name] = value;
    if (std::string note = collector->unparsed_attrs_note(); !note.empty())
      reading.notes.push_back(note);
    out["names_seen"] = collector->names_seen();
  }
  out["read_by"] = collected ? "objective.metrics" : "report lines";
  out["steps"] = reading.steps;
  out["attrs"] = reading.attrs;
  out["final_value"] = reading.final_value ? Json(*reading.final_value) : Json();
  if (!reading.final_value)
    out["reason"] = collected ? collector->never_seen_reason()
                              : "no final value: the output has no report line 'hpsearch: "
                                "{\"value\": ...}' (and objective.metrics is not set, or a "
                                "report line took over from it)";
  out["notes"] = reading.notes;
  return out;
}

void print_try_output(const Json& t) {
  std::cout << "\nTry output " << printable(t["file"].get<std::string>()) << " (read by "
            << t["read_by"].get<std::string>() << "):\n";
  for (const Json& s : t["steps"])
    std::cout << "  step " << s["step"].get<std::int64_t>() << ": "
              << (s["value"].is_number() ? format_value(s["value"].get<double>()) : "nan") << "\n";
  if (t["steps"].empty()) std::cout << "  no intermediate value\n";
  if (t["final_value"].is_number())
    std::cout << "  final value: " << format_value(t["final_value"].get<double>()) << "\n";
  else
    std::cout << "  no final value: " << printable(t["reason"].get<std::string>()) << "\n";
  for (const auto& [name, value] : t["attrs"].items())
    std::cout << "  attr " << printable(name) << " = " << setting_text(value) << "\n";
  for (const Json& note : t["notes"]) std::cout << "  note: " << setting_text(note) << "\n";
}

Json study_part(const StudyConfig& config, const PlanStudy& existing) {
  Json j = {{"name", config.name},
            {"direction", to_string(config.direction)},
            {"storage", config.storage},
            {"storage_exists", existing.storage_exists},
            {"study_exists", existing.info.has_value()}};
  if (!existing.info) {
    j["run"] = "create";
    return j;
  }
  j["trials"] = existing.trials;
  j["finished"] = existing.finished;
  j["run"] = existing.refusal.empty() ? "continue" : "refuse";
  if (!existing.refusal.empty()) j["refusal"] = existing.refusal;
  if (!existing.running.empty()) j["running"] = existing.running;
  j["changes"] = Json::array();
  if (existing.info->config.is_object())
    for (const SettingChange& c : settings_changes(existing.info->config, config.source))
      j["changes"].push_back(
          {{"field", c.field}, {"stored", c.stored}, {"now", c.now}, {"text", change_text(c)}});
  else
    j["stored_settings"] = false;
  return j;
}

void print_study(const Json& s) {
  std::cout << "Study '" << printable(s["name"].get<std::string>()) << "' ("
            << s["direction"].get<std::string>() << "), storage "
            << printable(s["storage"].get<std::string>()) << "\n";
  if (!s["storage_exists"].get<bool>()) {
    std::cout << "  the storage does not exist yet: run would create it with this study\n";
    return;
  }
  if (!s["study_exists"].get<bool>()) {
    std::cout << "  no study of this name in the storage: run would create it\n";
    return;
  }
  std::cout << "  the study exists (" << s["trials"].get<std::int64_t>() << " trials, "
            << s["finished"].get<std::int64_t>() << " finished): run would "
            << (s["run"] == "continue" ? "continue it" : "REFUSE it (see the error below)") << "\n";
  if (s.contains("running"))
    std::cout << "  a coordinator runs it now (" << printable(s["running"].get<std::string>())
              << "): another run of it is refused until that one ends\n";
  if (s.contains("stored_settings")) {
    std::cout << "  it has no stored settings to compare (not made by hpsearch run)\n";
    return;
  }
  if (s["changes"].empty()) {
    std::cout << "  no difference from the settings stored with it\n";
    return;
  }
  std::cout << "  differences from the settings stored with it (stored -> now):\n";
  for (const Json& c : s["changes"]) std::cout << "    " << c["text"].get<std::string>() << "\n";
}

Json budget_part(const StudyConfig& config) {
  const Budget& b = config.budget;
  return {{"n_trials", b.n_trials ? Json(*b.n_trials) : Json()},
          {"timeout_s", b.timeout_s ? Json(*b.timeout_s) : Json()},
          {"max_failed_trials", b.max_failed_trials ? Json(*b.max_failed_trials) : Json()},
          {"fail_fast", b.fail_fast}};
}

Json artifacts_part(const StudyConfig& config, const std::string& checkpoint_root) {
  const checkpoints::ArtifactOptions a = checkpoints::ArtifactOptions::from_json(config.artifacts);
  return {
      {"checkpoints", a.checkpoints},
      {"keep_best", a.keep_best},
      {"keep_pruned", a.keep_pruned},
      {"keep_failed", a.keep_failed},
      {"max_snapshot_bytes", a.max_snapshot_bytes},
      {"max_study_bytes", a.max_study_bytes},
      {"max_artifact_bytes", a.max_artifact_bytes},
      {"folder", std::filesystem::path(checkpoint_root).lexically_normal().string()},
      // The trials' user artifacts (Trial::upload_artifact, HPSEARCH_ARTIFACT_DIR).
      {"user_artifacts_folder", checkpoints::artifact_root_for(checkpoint_root, !a.path.empty())}};
}

void print_text(const Json& plan, const StudyConfig& config) {
  std::cout << printable(plan["file"].get<std::string>()) << ": valid\n\n";
  print_study(plan["study"]);
  const Json& space = plan["space"];
  std::cout << "\nSearch space (" << space.size() << " param" << (space.size() == 1 ? "" : "s")
            << ", in sampling order):\n";
  std::size_t width = 0;
  for (const Json& p : space)
    width = std::max(width, printable(p["name"].get<std::string>()).size());
  for (const Json& p : space) {
    const std::string name = printable(p["name"].get<std::string>());
    std::cout << "  " << name << std::string(width + 2 - std::min(width, name.size()), ' ')
              << p["text"].get<std::string>() << "\n";
  }
  std::cout << "\nSampler: " << setting_text(plan["sampler"]["type"]) << "\n  "
            << settings_lines(plan["sampler"], "  ") << "\n";
  std::cout << "Pruner: " << setting_text(plan["pruner"]["type"]) << "\n";
  if (const std::string lines = settings_lines(plan["pruner"], "  "); !lines.empty())
    std::cout << "  " << lines << "\n";
  if (plan["scheduler"].is_object()) {
    std::cout << "Scheduler: " << setting_text(plan["scheduler"]["type"]) << "\n";
    if (const std::string lines = settings_lines(plan["scheduler"], "  "); !lines.empty())
      std::cout << "  " << lines << "\n";
  }
  const Json& objective = plan["objective"];
  std::cout << "\nObjective: " << setting_text(objective["type"]) << "\n";
  if (objective.contains("example")) {
    const Json& e = objective["example"];
    std::cout << "  example only: trial 0 of a new study, with the sampler's first suggestion\n";
    if (e.contains("params")) std::cout << "    params: " << setting_text(e["params"]) << "\n";
    if (e.contains("argv")) {
      std::cout << "    argv:";
      for (const Json& a : e["argv"]) std::cout << " " << shell_word(a.get<std::string>());
      std::cout << "\n";
    }
    if (e.contains("env"))
      for (const auto& [k, v] : e["env"].items())
        std::cout << "    env " << printable(k) << "=" << setting_text(v) << "\n";
    if (e.contains("warning")) std::cout << "    warning: " << setting_text(e["warning"]) << "\n";
    if (e.contains("error")) std::cout << "    " << setting_text(e["error"]) << "\n";
    if (config.objective.contains("cwd"))
      std::cout << "    cwd: " << setting_text(config.objective["cwd"]) << "\n";
    if (objective.contains("metrics"))
      std::cout << "  metrics: " << setting_text(objective["metrics"]) << "\n";
    else
      std::cout << "  metrics: the program's report lines (hpsearch: {\"step\": N, \"value\": "
                   "V}); no objective.metrics\n";
  } else {
    std::cout << "  " << settings_lines(objective["settings"], "  ") << "\n";
  }
  const Json& b = plan["budget"];
  std::cout << "\nBudget: n_trials=" << setting_text(b["n_trials"])
            << ", timeout_s=" << setting_text(b["timeout_s"])
            << ", max_failed_trials=" << setting_text(b["max_failed_trials"])
            << ", fail_fast=" << setting_text(b["fail_fast"])
            << (b["fail_fast"].get<bool>()
                    ? " (a run stops when its first " +
                          std::to_string(std::min<std::int64_t>(
                              5,
                              b["n_trials"].is_number() ? b["n_trials"].get<std::int64_t>() : 5)) +
                          " finished trials all fail)"
                    : std::string())
            << "\n";
  std::cout << "Artifacts:\n  " << settings_lines(plan["artifacts"], "  ") << "\n";
  const Json& w = plan["workers"];
  const int processes = w["processes_per_trial"].get<int>();
  if (processes > 1)
    std::cout << "Processes per trial: up to " << processes
              << " (each on its own worker: run with --workers " << processes
              << " or more, or --bind for workers that join)\n";
  std::cout << "Workers: " << setting_text(w["workers"]) << " (" << setting_text(w["launcher"])
            << ")"
            << (w["gpus_per_worker"].is_number()
                    ? ", " + setting_text(w["gpus_per_worker"]) + " GPUs per worker"
                : w["workers_per_gpu"].is_number()
                    ? ", " + setting_text(w["workers_per_gpu"]) + " workers per GPU"
                    : std::string())
            << "\n";
  std::cout << "\nNothing was created or started.\n";
}

}  // namespace

int print_plan(const StudyConfig& config, const RunOptions& o, const Json& sampler,
               const Json& pruner, const std::string& checkpoint_root, const std::string& log_dir,
               const PlanStudy& existing) {
  Json plan = {{"file", o.space_file}, {"valid", true}};
  plan["study"] = study_part(config, existing);
  plan["space"] = Json::array();
  const Json space = config.space.to_json();
  for (const ParamSpec& p : config.space.params()) {
    const Json& spec = space.at(p.name);
    plan["space"].push_back({{"name", p.name}, {"distribution", spec}, {"text", param_text(spec)}});
  }
  plan["sampler"] = sampler;
  plan["pruner"] = pruner;
  plan["scheduler"] = scheduler_section(config.source);  // null: none (search/pbt_options.h)
  const std::string type = config.objective.value("type", std::string());
  Json objective = {{"type", type}};
  if (type == "command") {
    objective["example"] = command_example(config, o, checkpoint_root, log_dir);
    if (config.objective.contains("metrics")) objective["metrics"] = config.objective["metrics"];
  } else {
    objective["settings"] = config.objective;
  }
  plan["objective"] = objective;
  plan["budget"] = budget_part(config);
  plan["artifacts"] = artifacts_part(config, checkpoint_root);
  const int processes =
      TrialResources::from_json(config.resources, config.space).max_size(config.space);
  plan["workers"] = {{"workers", o.workers},
                     {"processes_per_trial", processes},
                     {"launcher", o.launcher},
                     {"gpus_per_worker", o.gpus_per_worker ? Json(*o.gpus_per_worker) : Json()},
                     {"workers_per_gpu", o.workers_per_gpu ? Json(*o.workers_per_gpu) : Json()}};
  int rc = existing.refusal.empty() ? kExitOk : kExitUsage;
  if (o.try_output) {
    plan["try_output"] = try_output(config, *o.try_output);
    if (rc == kExitOk && plan["try_output"]["final_value"].is_null()) rc = kExitFailure;
  }
  plan["accepted"] = existing.refusal.empty();  // run would go ahead with this study
  if (o.format == "json") {
    std::cout << json_output(plan) << "\n";
  } else {
    print_text(plan, config);
    if (plan.contains("try_output")) print_try_output(plan["try_output"]);
  }
  std::cout.flush();
  if (!existing.refusal.empty()) print_error(existing.refusal);
  return rc;
}

int validate_command(const ValidateOptions& options) {
  RunOptions o;
  o.space_file = options.space_file;
  o.storage = options.storage;
  o.study = options.study;
  o.try_output = options.try_output;
  o.format = options.format;
  o.dry_run = true;
  o.validate_only = true;
  return run_command(o);
}

}  // namespace hps::cli
