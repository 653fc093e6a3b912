// hpsearch: the command-line front end.
#include <iostream>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "search/errors.h"

#ifdef HPSEARCH_HAVE_TORCH
#include "objectives/torch_objectives.h"
#endif

int main(int argc, char** argv) {
  using namespace hps::cli;
  spdlog::set_default_logger(spdlog::stderr_color_mt("hpsearch"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
#ifdef HPSEARCH_HAVE_TORCH
  hps::register_torch_objectives();
#endif

  CLI::App app{"hpsearch: parallel hyperparameter search (TPE, random) with SQLite storage"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hpsearch 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  RunOptions run;
  auto* run_cmd = app.add_subcommand("run", "Run (or resume) the study described by a space.json file");
  run_cmd->add_option("space", run.space_file, "space.json file")->required();
  run_cmd->add_option("--storage", run.storage, "SQLite file (default: study.storage of the file)");
  run_cmd->add_option("--study", run.study, "study name (default: study.name of the file)");
  run_cmd->add_option("--n-trials", run.n_trials, "budget: finished trials in the study");
  run_cmd->add_option("--timeout", run.timeout_s, "budget: seconds of wall time for this run");
  run_cmd->add_option("--seed", run.seed, "sampler seed (overrides sampler.seed)");
  run_cmd->add_option("--jobs", run.n_jobs, "trials run at once in this process (threads)")
      ->capture_default_str();

  ReadOptions read;
  auto* best_cmd = app.add_subcommand("best", "Print the best trial of a study");
  auto* trials_cmd = app.add_subcommand("trials", "List the trials of a study");
  auto* studies_cmd = app.add_subcommand("studies", "List the studies in a storage file");
  for (auto* cmd : {best_cmd, trials_cmd, studies_cmd}) {
    cmd->add_option("storage", read.storage, "SQLite file")->required();
    if (cmd != studies_cmd)
      cmd->add_option("--study", read.study, "study name (needed if the file holds several)");
    cmd->add_option("--format", read.format, "table, csv or json")
        ->check(CLI::IsMember({"table", "csv", "json"}))
        ->capture_default_str();
  }
  trials_cmd->add_option("--state", read.state, "only trials in this state (COMPLETE, FAIL, ...)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));

  try {
    if (*run_cmd) return run_command(run);
    if (*best_cmd) return best_command(read);
    if (*trials_cmd) return trials_command(read);
    if (*studies_cmd) return studies_command(read);
  } catch (const hps::ConfigError& e) {
    std::cerr << "hpsearch: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "hpsearch: error: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitUsage;
}
