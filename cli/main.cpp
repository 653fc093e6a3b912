// hpsearch: the command-line front end.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "search/errors.h"
#include "search/json_util.h"
#include "search/printable.h"
#include "search/writer_lock.h"

#ifdef HPSEARCH_HAVE_TORCH
#include "objectives/torch_objectives.h"
#endif

namespace {

// The console log shows every message through printable_lines(): text from
// programs and workers (a trial's failure reason, a program's last lines)
// reaches the terminal without its escape sequences or control bytes, so a
// program cannot retitle the window or recolor the terminal; its line breaks
// (a Python traceback) are real ones, each next line indented by 4 spaces
// under the message, so no line of a program passes for a log line.
class PrintableConsoleSink : public spdlog::sinks::ansicolor_stderr_sink_mt {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    const std::string text =
        hps::printable_lines(std::string_view(msg.payload.data(), msg.payload.size()), "    ");
    spdlog::details::log_msg shown = msg;
    shown.payload = spdlog::string_view_t(text.data(), text.size());
    spdlog::sinks::ansicolor_stderr_sink_mt::log(shown);
  }
};

// The text of an integer option: parse_whole_number's rule (digits only,
// within T's range; a negative number is said to be one, against `lowest`,
// the least value the option takes: 0 or 1). CLI11 2.1 alone takes "" as
// "not given" and clamps a number out of range to the largest value.
template <typename T>
CLI::Validator whole_number(int lowest = 0) {
  return CLI::Validator(
      [lowest](std::string& text) -> std::string {
        std::string error;
        hps::cli::parse_whole_number<T>(text, error, lowest);
        return error;
      },
      "");  // no description: the option's type (INT) alone names what it takes
}

// The text of a number option (seconds): a whole decimal number, finite
// (CLI11 alone takes "" as "not given", and "inf" or "1e400" would be stored
// in the study's config, which a later resume then refuses).
const CLI::Validator kFiniteSeconds(
    [](std::string& text) -> std::string {
      double value = 0;
      const char* end = text.data() + text.size();
      auto [ptr, ec] = std::from_chars(text.data(), end, value);
      if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value))
        return "must be a finite number of seconds, got '" + text + "'";
      return std::string();
    },
    "");  // no description: the option's type (FLOAT) alone names what it takes

// For a command line whose first word is no subcommand ("hpsearch bogus"),
// which CLI11 reports as "A subcommand is required": "unknown command
// 'bogus' (did you mean 'best'?); commands: run, resume, ...". "" when a
// subcommand was given or no word at all (CLI11's message then stands).
std::string unknown_command_rule(const CLI::App& app) {
  if (!app.get_subcommands().empty()) return "";
  std::string word;
  for (const std::string& arg : app.remaining()) {
    if (!arg.empty() && arg[0] != '-') {
      word = arg;
      break;
    }
  }
  if (word.empty()) return "";
  std::vector<std::string_view> names;
  std::string list;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.emplace_back(sub->get_name());
    list += (list.empty() ? "" : ", ") + sub->get_name();
  }
  const std::string best = hps::nearest_name(word, names);
  return "unknown command '" + hps::printable(word) + "'" +
         (best.empty() ? "" : " (did you mean '" + best + "'?)") + "; commands: " + list;
}

// The subcommands the command line named, outermost first ("keys", "init").
std::vector<const CLI::App*> named_commands(const CLI::App& app) {
  std::vector<const CLI::App*> chain;
  for (const CLI::App* at = &app;;) {
    const std::vector<CLI::App*> subs = at->get_subcommands();
    if (subs.empty()) return chain;
    at = subs.front();
    chain.push_back(at);
  }
}

// "keys init": the words of the command named (`chain` not empty).
std::string command_words(const std::vector<const CLI::App*>& chain) {
  std::string words;
  for (const CLI::App* sub : chain) words += (words.empty() ? "" : " ") + sub->get_name();
  return words;
}

// What a command line that names no command, or a command without its
// required argument, option or subcommand, lacks ("a command is required",
// "run: the argument 'space' is missing (space.json file)"), as git says it
// before its usage; "" for any other parse error. `help` gets the usage to
// show after it: the commands (with what each does), or the named command's
// arguments and options.
std::string missing_rule(const CLI::App& app, const CLI::ParseError& e, std::string& help) {
  if (dynamic_cast<const CLI::RequiredError*>(&e) == nullptr) return "";
  const std::vector<const CLI::App*> chain = named_commands(app);
  const CLI::App& at = chain.empty() ? app : *chain.back();
  std::string rule;
  if (at.get_require_subcommand_min() > 0 && at.get_subcommands().empty()) {
    rule = "a command is required";
  } else {
    for (const CLI::Option* opt : at.get_options()) {
      if (!opt->get_required() || opt->count() > 0) continue;
      rule = std::string(opt->get_positional() ? "the argument '" : "the option '") +
             opt->get_name() + "' is missing (" + opt->get_description() + ")";
      break;
    }
  }
  if (rule.empty()) return "";
  help = app.help();  // the named command's (CLI11 follows the parsed subcommands)
  return chain.empty() ? rule : command_words(chain) + ": " + rule;
}

// For CLI11's "The following argument was not expected: --wrkers" (an
// option the command does not know): "run: unknown option '--wrkers' (did
// you mean '--workers'?)", the nearest option of that command (its own or
// one that falls through to hpsearch's), by nearest_name's rule; "" when no
// unexpected argument is an option (an extra file name keeps CLI11's
// message).
std::string unknown_option_rule(const CLI::App& app, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) return "";
  const std::vector<const CLI::App*> chain = named_commands(app);
  std::string word;
  for (const CLI::App* at : {&app, chain.empty() ? &app : chain.back()}) {
    for (const std::string& arg : at->remaining()) {
      // An option, not a negative number.
      if (arg.size() > 1 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1]))) {
        word = arg.substr(0, arg.find('='));  // "--wrkers=2": the name
        break;
      }
    }
    if (!word.empty()) break;
  }
  if (word.empty()) return "";
  std::vector<std::string> names;
  for (const CLI::App* at = chain.empty() ? &app : chain.back(); at != nullptr;
       at = at->get_parent()) {
    for (const CLI::Option* opt : at->get_options()) {
      for (const std::string& name : opt->get_lnames()) names.push_back("--" + name);
      for (const std::string& name : opt->get_snames()) names.push_back("-" + name);
    }
  }
  const std::string best = hps::nearest_name(word, {names.begin(), names.end()});
  const std::string command = chain.empty() ? "hpsearch" : "hpsearch " + command_words(chain);
  return (chain.empty() ? "" : command_words(chain) + ": ") + "unknown option '" +
         hps::printable(word) + "'" + (best.empty() ? "" : " (did you mean '" + best + "'?)") +
         "; see '" + command + " --help' for its options";
}

// The options of run and resume whose defaults resume replaces with the
// last run's settings (--workers, --bind, --prefetch, --keys): run's help
// gives its default, resume's says "the last run's".
void add_kept_options(CLI::App* cmd, hps::cli::RunOptions& run, bool resume) {
  const std::string last = " (default: the last run's)";
  auto* workers =
      cmd->add_option("--workers", run.workers,
                      std::string("local worker processes (0: remote workers only, with --bind)") +
                          (resume ? last : ""));
  if (!resume) workers->capture_default_str();
  workers->check(whole_number<int>());
  cmd->add_option("--bind", run.bind,
                  std::string("coordinator endpoint, e.g. tcp://0.0.0.0:5555 for remote workers "
                              "(PORT 0 or *: any free port) or ipc://PATH") +
                      (resume ? " (default: the last run's; none if it had none)"
                              : " (default: none; local workers use a private ipc socket)"));
  auto* prefetch = cmd->add_option(
      "--prefetch", run.prefetch,
      std::string("trials each worker it starts holds besides the one it runs (0 or 1; 1 for "
                  "objectives of about a second or less: no wait between trials)") +
          (resume ? last : ""));
  if (!resume) prefetch->capture_default_str();
  prefetch->check(whole_number<int>());
  cmd->add_option(
      "--keys", run.keys_dir,
      std::string("CURVE keys folder (hpsearch keys init) for a tcp --bind: admits "
                  "only its authorized workers (default: ") +
          (resume ? "the last run's, else $HPSEARCH_KEYS_DIR)" : "$HPSEARCH_KEYS_DIR)"));
}

// --gpus, --gpus-per-worker and --workers-per-gpu of run and resume
// (resume's help names the last run's as the default of the last two).
void add_gpu_options(CLI::App* cmd, hps::cli::RunOptions& run, bool resume) {
  cmd->add_option("--gpus", run.gpus,
                  "GPUs for local workers, e.g. 0,1 (default: CUDA_VISIBLE_DEVICES or all)");
  const std::string kept = resume ? " (default: the last run's)" : "";
  cmd->add_option("--gpus-per-worker", run.gpus_per_worker,
                  "GPUs of each worker: worker i gets GPUs K*i..K*i+K-1 in "
                  "CUDA_VISIBLE_DEVICES (--workers defaults to GPUs / K; under --launcher "
                  "slurm: srun --gpus-per-task=K)" +
                      kept)
      ->check(whole_number<int>(1));
  cmd->add_option("--workers-per-gpu", run.workers_per_gpu,
                  "workers sharing each GPU: worker i gets GPU (i / K) mod G (--workers "
                  "defaults to G * K; local workers only)" +
                      kept)
      ->check(whole_number<int>(1));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hps::cli;
  remember_program_args(argc, argv);
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("hpsearch", std::make_shared<PrintableConsoleSink>()));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
#ifdef HPSEARCH_HAVE_TORCH
  hps::register_torch_objectives();
#endif

  // Named "hpsearch" (not argv[0]'s path) in its usage lines.
  CLI::App app{
      "hpsearch: parallel hyperparameter search (TPE, random, grid, QMC) with SQLite storage",
      "hpsearch"};
  // CLI11's own parse errors (an unknown flag, a missing argument, a
  // validator's rule) start as ours do: "hpsearch: error: <CLI11's message>".
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return "hpsearch: error: " + CLI::FailureMessage::simple(a, e);
  });
  app.require_subcommand(1);
  app.set_version_flag("--version", "hpsearch 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  RunOptions run;
  auto* run_cmd =
      app.add_subcommand("run", "Run (or continue) the study described by a space.json file");
  run_cmd->add_option("space", run.space_file, "space.json file")->required();
  run_cmd->add_option("--storage", run.storage, "SQLite file (default: study.storage of the file)");
  run_cmd->add_option("--study", run.study, "study name (default: study.name of the file)");
  run_cmd->add_option("--warm-start", run.warm_start,
                      "STORAGE[:STUDY]: start from the COMPLETE trials of an earlier study "
                      "(overrides warm_start of the file; split at the last ':' unless a '/' "
                      "follows it, so a path may hold ':'; STUDY may be omitted when STORAGE "
                      "holds one study)");
  run_cmd->add_flag("--allow-objective-change", run.allow_objective_change,
                    "continue an existing study whose stored objective differs from the file's "
                    "(its values then mix two objectives; default: refused)");
  run_cmd->add_flag("--dry-run", run.dry_run,
                    "check everything run checks and print the plan (as hpsearch validate), "
                    "without creating or starting anything");
  auto* resume_cmd =
      app.add_subcommand("resume", "Continue a study from the settings stored with it");
  resume_cmd->add_option("storage", run.storage, "SQLite file")->required();
  resume_cmd->add_option("--study", run.study, "study name (needed if the file holds several)");
  for (auto* cmd : {run_cmd, resume_cmd}) {
    cmd->add_option("--n-trials", run.n_trials, "budget: finished trials in the study")
        ->check(whole_number<std::int64_t>(1));
    cmd->add_option("--timeout", run.timeout_s, "budget: seconds of wall time for this run")
        ->check(kFiniteSeconds);
    cmd->add_option("--max-failed-trials", run.max_failed_trials,
                    "stop dispatching once N trials of this run failed (overrides "
                    "budget.max_failed_trials; default: no limit)")
        ->check(whole_number<std::int64_t>(1));
    cmd->add_flag("--no-fail-fast", run.no_fail_fast,
                  "keep going when the first 5 trials of the run all fail (default: stop, "
                  "the objective looks broken; overrides budget.fail_fast)");
    cmd->add_option("--seed", run.seed, "sampler seed (overrides sampler.seed)")
        ->check(whole_number<std::uint64_t>());
    add_kept_options(cmd, run, cmd == resume_cmd);
    add_gpu_options(cmd, run, cmd == resume_cmd);
    cmd->add_option("--heartbeat-ms", run.heartbeat_ms, "heartbeat interval in milliseconds")
        ->capture_default_str()
        ->check(whole_number<int>(1));
    cmd->add_option("--liveness", run.liveness, "missed heartbeats before a worker is lost")
        ->capture_default_str()
        ->check(whole_number<int>(1));
    cmd->add_option("--max-retries", run.max_retries,
                    "times a trial of a lost worker is queued again")
        ->capture_default_str()
        ->check(whole_number<int>());
    cmd->add_flag("--insecure", run.insecure,
                  "allow a tcp --bind without keys: anyone who reaches it can join as a worker");
    cmd->add_option("--max-workers", run.max_workers, "most workers connected at once")
        ->capture_default_str()
        ->check(whole_number<int>(1));
    cmd->add_option("--launcher", run.launcher,
                    "how --workers start: local (processes on this machine) or slurm (tasks of "
                    "one Slurm job step, srun, connecting back over CURVE)")
        ->check(CLI::IsMember({"local", "slurm"}))
        ->capture_default_str();
    cmd->add_option("--slurm-args", run.slurm_args,
                    "extra srun options for --launcher slurm, e.g. \"--partition=gpu "
                    "--gpus-per-task=1 --time=2:00:00\"");
  }

  WorkerCommandOptions worker;
  auto* worker_cmd = app.add_subcommand("worker", "Serve trials for a coordinator");
  worker_cmd->add_option("--connect", worker.connect, "coordinator endpoint, e.g. tcp://host:5555")
      ->required();
  worker_cmd
      ->add_option("--device", worker.device,
                   "cpu, cuda:N, cuda (every GPU CUDA_VISIBLE_DEVICES names), or auto (cuda:0 "
                   "when CUDA_VISIBLE_DEVICES names one GPU, cuda when several, as Slurm sets it "
                   "with --gpus-per-task)")
      ->capture_default_str();
  worker_cmd
      ->add_option("--threads", worker.threads,
                   "CPU threads for the objective (0: all; in a Slurm task, "
                   "SLURM_CPUS_PER_TASK or 1)")
      ->check(whole_number<int>())
      ->capture_default_str();
  worker_cmd->add_option("--id", worker.id,
                         "worker name (default: host:pid; in a Slurm task, "
                         "node:jobJ.S:taskP from SLURM_PROCID)");
  worker_cmd
      ->add_option("--heartbeat-ms", worker.heartbeat_ms,
                   "heartbeat interval until the coordinator sets it")
      ->capture_default_str()
      ->check(whole_number<int>(1));
  worker_cmd->add_option("--liveness", worker.liveness, "missed heartbeats before reconnecting")
      ->capture_default_str()
      ->check(whole_number<int>(1));
  worker_cmd
      ->add_option("--prefetch", worker.prefetch,
                   "trials held besides the one running (0 or 1; 1 for objectives of about a "
                   "second or less: no wait between trials)")
      ->capture_default_str()
      ->check(whole_number<int>());
  worker_cmd
      ->add_option("--reconnect-attempts", worker.reconnect_attempts,
                   "failed connection attempts in a row before giving up")
      ->capture_default_str()
      ->check(whole_number<int>());
  worker_cmd
      ->add_option("--reconnect-initial-ms", worker.reconnect_initial_ms,
                   "first back-off between attempts (doubles up to 32 s)")
      ->capture_default_str()
      ->check(whole_number<int>());
  worker_cmd->add_option("--log-dir", worker.log_dir,
                         "where objectives write per-trial logs (default: ./<study>.logs)");
  worker_cmd->add_option("--keys", worker.keys_dir,
                         "this worker's CURVE keys folder (DIR/worker-N from hpsearch keys init; "
                         "default: $HPSEARCH_KEYS_DIR)");
  worker_cmd->add_flag("--insecure", worker.insecure,
                       "connect over tcp without keys: serve whatever process answers there");
  worker_cmd->add_flag("--allow-command", worker.allow_command,
                       "run \"command\" objectives (any program the coordinator names)");
  worker_cmd->add_option("--allow-program", worker.allow_programs,
                         "run \"command\" objectives of this program only (absolute path; "
                         "repeatable)");
  worker_cmd->add_option("--allow-env", worker.allow_env,
                         "with --allow-program: an environment variable the objective's env may "
                         "set (exact name; repeatable; default none)");

  KeysOptions keys;
  auto* keys_cmd = app.add_subcommand("keys", "Make CURVE keys for remote workers");
  keys_cmd->require_subcommand(1);
  auto* keys_init = keys_cmd->add_subcommand(
      "init", "Make a keys folder: the coordinator's key pair and N worker key pairs");
  auto* keys_add =
      keys_cmd->add_subcommand("add", "Add N worker key pairs to an existing keys folder");
  for (auto* cmd : {keys_init, keys_add}) {
    cmd->add_option("dir", keys.dir, "keys folder (created 0700)")->required();
    cmd->add_option("--workers", keys.workers, "worker key pairs to make")
        ->capture_default_str()
        ->check(whole_number<int>(1));
  }

  ReadOptions read;
  auto* best_cmd = app.add_subcommand("best", "Print the best trial of a study");
  auto* trials_cmd = app.add_subcommand("trials", "List the trials of a study");
  auto* studies_cmd = app.add_subcommand("studies", "List the studies in a storage file");
  auto* status_cmd = app.add_subcommand(
      "status", "Trials by state, what each worker runs now, the best trial so far");
  for (auto* cmd : {best_cmd, trials_cmd, studies_cmd, status_cmd}) {
    cmd->add_option("storage", read.storage, "SQLite file")->required();
    if (cmd != studies_cmd)
      cmd->add_option("--study", read.study, "study name (needed if the file holds several)");
    cmd->add_option("--format", read.format, "table, csv or json")
        ->check(CLI::IsMember({"table", "csv", "json"}))
        ->capture_default_str();
  }
  trials_cmd->add_option("--state", read.state,
                         "only trials in this state, or these (COMPLETE,PRUNED; any of WAITING, "
                         "RUNNING, COMPLETE, PRUNED, FAIL)");
  // Read as text and parsed by trials_command (parse_whole_number); shown as
  // what they take.
  trials_cmd->add_option("--limit", read.limit, "at most N trials (after --sort)")
      ->type_name("INT");
  trials_cmd->add_option("--sort", read.sort,
                         "number (default) or value: best first in the study's direction, "
                         "trials without a value last");
  trials_cmd->add_option("--since", read.since, "only trials numbered N or higher")
      ->type_name("INT");
  status_cmd->add_flag("--verbose,-v", read.verbose,
                       "also every sampler setting (TPE's internals), as one JSON line");

  ArtifactsOptions art;
  auto* art_cmd = app.add_subcommand(
      "artifacts",
      "List the trials' checkpoint snapshots and user artifacts (copy them: artifacts get)");
  auto* art_get = art_cmd->add_subcommand(
      "get", "Copy a trial's user artifacts or its newest checkpoint snapshot into a folder");
  art_cmd->require_subcommand(0, 1);
  art_cmd->add_option("storage", art.storage, "SQLite file");
  art_cmd->add_option("--study", art.study, "study name (needed if the file holds several)");
  art_cmd->add_option("--trial", art.trial, "only this trial")->check(whole_number<std::int64_t>());
  art_cmd->add_option("--format", art.format, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  art_get->add_option("storage", art.storage, "SQLite file")->required();
  art_get->add_option("--study", art.study, "study name (needed if the file holds several)");
  art_get->add_option("--trial", art.trial, "the trial whose files are copied")
      ->required()
      ->check(whole_number<std::int64_t>());
  art_get
      ->add_option("-o,--output", art.output,
                   "the folder to copy into (a snapshot: new or empty; user artifacts: files "
                   "already there are refused)")
      ->required();
  art_get
      ->add_option("--kind", art.kind,
                   "user (the trial's user artifacts), snapshot (its newest checkpoint "
                   "snapshot) or auto (user artifacts if any, else the snapshot)")
      ->check(CLI::IsMember({"auto", "user", "snapshot"}))
      ->capture_default_str();
  art_get->add_flag("--overwrite", art.overwrite,
                    "replace files of the same name already in the folder (user artifacts)");

  ExportOptions exp;
  auto* export_cmd =
      app.add_subcommand("export", "Write a study to another tool's storage (Optuna's SQLite)");
  export_cmd->add_option("storage", exp.storage, "SQLite file")->required();
  export_cmd->add_option("--study", exp.study, "study name (needed if the file holds several)");
  export_cmd->add_option("--format", exp.format, "optuna: a SQLite file in Optuna's RDB schema")
      ->check(CLI::IsMember({"optuna"}))
      ->capture_default_str();
  export_cmd->add_option("-o,--output", exp.output, "the file to write")->required();
  export_cmd->add_flag("--force", exp.force, "replace the output file if it exists");
  ImportOptions imp;
  auto* import_cmd = app.add_subcommand("import", "Copy a study from an Optuna SQLite storage");
  import_cmd->add_option("file", imp.file, "Optuna SQLite file (sqlite:///FILE in Optuna)")
      ->required();
  import_cmd->add_option("--study", imp.study,
                         "the Optuna study's name (default: the file's only study)");
  import_cmd->add_option("--into", imp.into, "hpsearch storage to copy into (created if missing)")
      ->required();
  import_cmd->add_option("--as", imp.as, "the new study's name (default: the --study name)");

  ReportOptions report;
  auto* report_cmd = app.add_subcommand(
      "report", "Write the study's plots and tables as one self-contained HTML file");
  report_cmd->add_option("storage", report.storage, "SQLite file")->required();
  report_cmd->add_option("--study", report.study, "study name (needed if the file holds several)");
  report_cmd->add_option("-o,--output", report.output, "the HTML file to write")->required();
  DashboardOptions dash;
  auto* dash_cmd = app.add_subcommand(
      "dashboard", "Serve the report page over HTTP, refreshed while the study runs (read-only)");
  dash_cmd->add_option("storage", dash.storage, "SQLite file")->required();
  dash_cmd->add_option("--study", dash.study, "study name (needed if the file holds several)");
  dash_cmd->add_option("--host", dash.host, "address to listen on (loopback unless --allow-remote)")
      ->capture_default_str();
  dash_cmd->add_option("--port", dash.port, "TCP port (0: any free port)")
      ->capture_default_str()
      ->check(whole_number<int>());
  dash_cmd->add_flag(
      "--allow-remote", dash.allow_remote,
      "listen on a --host that is not loopback: anyone who reaches it sees the study");
  dash_cmd->add_option("--refresh-ms", dash.poll_ms, "how often the page asks for changes")
      ->capture_default_str()
      ->check(whole_number<int>(1));

  auto* schema_cmd = app.add_subcommand(
      "schema", "Print the JSON Schema (draft 2020-12) of space.json, for editors and validators");
  schema_cmd->footer(
      "Prints the schema hpsearch was built with, byte for byte the file "
      "search/space.schema.json of its source (installed as "
      "share/hpsearch/space.schema.json). Point a file's \"$schema\" key at it "
      "(\"$schema\": \"space.schema.json\") and a JSON-Schema aware editor "
      "(VS Code, JetBrains IDEs) completes and checks the file as you type; "
      "hpsearch ignores the key. Example: hpsearch schema > space.schema.json");

  // Registered last: the commands before it keep their order in the list.
  ValidateOptions validate;
  auto* validate_cmd = app.add_subcommand(
      "validate", "Check a space.json file as run does and print the plan, running nothing");
  validate_cmd->footer(
      "Prints each param's distribution, the sampler and pruner with their defaults resolved, "
      "an example command line (trial 0 with the sampler's first suggestion), the metrics "
      "rules, the budget and the checkpoint settings; against an existing study (opened "
      "read-only), whether run would continue it and what differs, param by param. Creates "
      "nothing: no store, no log folder, no lock, no worker. `hpsearch run space.json "
      "--dry-run` does the same. Exit status: 0 valid, 2 not valid (the error names the field) "
      "or refused by the existing study, 1 when --try-output reads no final value.");
  validate_cmd->add_option("space", validate.space_file, "space.json file")->required();
  validate_cmd->add_option("--storage", validate.storage,
                           "SQLite file to compare with (default: study.storage of the file); "
                           "opened read-only, also while a coordinator runs it");
  validate_cmd->add_option("--study", validate.study,
                           "study name (default: study.name of the file)");
  validate_cmd->add_option(
      "--try-output", validate.try_output,
      "a saved output of the program (its stdout and stderr, or the metrics file of "
      "objective.metrics.source.file): print what the metrics rules or report lines read from "
      "it (each step and value, the final value, attrs) and, when the metric is never seen, the "
      "names seen with \"did you mean\"");
  validate_cmd->add_option("--format", validate.format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  // Global options (--log-level) may also follow the subcommand.
  for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) sub->fallthrough();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (std::string rule = unknown_command_rule(app); !rule.empty()) {
      print_error(rule);
      std::cerr << "Run with --help for more information.\n";
      return kExitUsage;
    }
    if (std::string rule = unknown_option_rule(app, e); !rule.empty()) {
      print_error(rule);
      return kExitUsage;
    }
    if (std::string help, rule = missing_rule(app, e, help); !rule.empty()) {
      print_error(rule);
      std::cerr << "\n" << help;
      return kExitUsage;
    }
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  run.log_level = log_level;
  run.workers_given = (*resume_cmd ? resume_cmd : run_cmd)->count("--workers") > 0;
  run.prefetch_given = (*resume_cmd ? resume_cmd : run_cmd)->count("--prefetch") > 0;

  try {
    if (*run_cmd) return run_command(run);
    if (*resume_cmd) return resume_command(run);
    if (*validate_cmd) return validate_command(validate);
    if (*worker_cmd) return worker_command(worker);
    if (*keys_cmd) {
      keys.add = static_cast<bool>(*keys_add);
      return keys_command(keys);
    }
    if (*status_cmd) return status_command(read);
    if (*best_cmd) return best_command(read);
    if (*trials_cmd) return trials_command(read);
    if (*studies_cmd) return studies_command(read);
    if (*art_get) return artifacts_get_command(art);
    if (*art_cmd) {
      if (art.storage.empty())
        throw hps::ConfigError("STORAGE", "is required (the study's SQLite file)");
      return artifacts_command(art);
    }
    if (*report_cmd) return report_command(report);
    if (*export_cmd) return export_command(exp);
    if (*import_cmd) return import_command(imp);
    if (*dash_cmd) return dashboard_command(dash);
    if (*schema_cmd) return schema_command();
  } catch (const hps::ConfigError& e) {
    print_error(e.what());
    return kExitUsage;
  } catch (const hps::StoreRefused& e) {
    // Bad input or state, as a ConfigError: a newer schema, a store an
    // older coordinator runs, a file of another program.
    print_error(e.what());
    return kExitUsage;
  } catch (const hps::WriterLockBusy& e) {
    // The study is run by another coordinator: refused, nothing done.
    print_error(e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitFailure;
  }
  return kExitUsage;
}
