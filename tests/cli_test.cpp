// Tests of the hpsearch executable (cli/), run as a child process in a
// temporary directory: run, best, trials, studies; bad space.json files;
// resuming after a rerun, kill -9 and SIGINT; readers while a run writes.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "protocol/zmq_util.h"
#include "search/json_util.h"
#include "search/search_space.h"
#include "search/sqlite_storage.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/trial.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testsupport::BackgroundProcess;
using testsupport::ProcessResult;
using testsupport::TempDir;
using testsupport::wait_until;

const char* kBraninSpace = R"({
  "study": {"name": "branin", "direction": "minimize", "storage": "branin.db"},
  "sampler": {"type": "random", "seed": 1},
  "pruner": {"type": "none"},
  "budget": {"n_trials": 20},
  "objective": {"type": "branin"},
  "space": {
    "x0": {"type": "float", "low": -5, "high": 10},
    "x1": {"type": "float", "low": 0, "high": 15}
  }
})";

// The Branin space with a budget of `n_trials` in the file.
std::string branin_space(int n_trials) {
  Json doc = Json::parse(kBraninSpace);
  doc["budget"]["n_trials"] = n_trials;
  return doc.dump();
}

// A space whose objective sleeps `seconds` per trial in `steps` steps,
// reporting after each when steps > 1.
std::string sleep_space(double seconds, int n_trials, int steps = 3) {
  return fmt::format(R"({{
    "study": {{"name": "slow", "direction": "minimize", "storage": "slow.db"}},
    "sampler": {{"type": "random", "seed": 3}},
    "budget": {{"n_trials": {}}},
    "objective": {{"type": "sleep", "seconds": {}, "steps": {}}},
    "space": {{"x": {{"type": "float", "low": 0, "high": 1}}}}
  }})",
                     n_trials, seconds, steps);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
  }
  return out;
}

bool is_complete(const Json& t) { return t["state"] == "COMPLETE"; }
// Counts towards the budget: COMPLETE, PRUNED, or FAIL that was not retried.
bool counts_as_finished(const Json& t) {
  if (t["state"] == "COMPLETE" || t["state"] == "PRUNED") return true;
  return t["state"] == "FAIL" && !t["system_attrs"].contains("retried_as");
}
int count_if(const Json& trials, const std::function<bool(const Json&)>& pred) {
  int n = 0;
  for (const auto& t : trials) n += pred(t) ? 1 : 0;
  return n;
}

class CliTest : public ::testing::Test {
 protected:
  // Runs `hpsearch args...` in the test's directory.
  ProcessResult cli(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {HPSEARCH_CLI_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  }
  std::unique_ptr<BackgroundProcess> cli_background(const std::vector<std::string>& args,
                                                    const std::string& label) const {
    std::vector<std::string> argv = {HPSEARCH_CLI_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<BackgroundProcess>(
        argv, dir_.path().string(), dir_.file(label + ".out"), dir_.file(label + ".err"));
  }
  // `hpsearch run space.json --workers 1` on a study `name` (stored in
  // NAME.db) of `n_trials` trials over one float param lr, whose objective
  // is /bin/sh -c `script` (a command objective: {lr} is a placeholder).
  ProcessResult run_shell_study(const std::string& name, int n_trials,
                                const std::string& script) const {
    const Json space = {{"study", {{"name", name}, {"direction", "minimize"}}},
                        {"space", {{"lr", {{"type", "float"}, {"low", 0.001}, {"high", 0.1}}}}},
                        {"budget", {{"n_trials", n_trials}}},
                        {"objective", {{"type", "command"}, {"argv", {"/bin/sh", "-c", script}}}}};
    dir_.write("space.json", space.dump());
    return cli({"run", "space.json", "--workers", "1"});
  }
  // `hpsearch trials <db> --format json`, parsed; null if it failed.
  Json trials_json(const std::string& db) const {
    ProcessResult r = cli({"trials", db, "--format", "json"});
    if (r.exit_code != 0) return Json();
    return Json::parse(r.out, nullptr, false);
  }
  Json trials_or_fail(const std::string& db) const {
    ProcessResult r = cli({"trials", db, "--format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    Json j = Json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_array()) << r.out;
    return j.is_array() ? j : Json::array();
  }
  // Files in the test directory other than `keep`.
  std::set<std::string> other_files(const std::set<std::string>& keep) const {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
      std::string name = e.path().filename().string();
      if (!keep.count(name)) out.insert(name);
    }
    return out;
  }
  // Numbers 0..n-1 in order, no RUNNING or WAITING trial left.
  void expect_consistent(const Json& trials) const {
    for (std::size_t i = 0; i < trials.size(); ++i) {
      EXPECT_EQ(trials[i]["number"], i);
      EXPECT_NE(trials[i]["state"], "RUNNING") << trials[i].dump();
    }
  }

  TempDir dir_{"cli"};
};

// ------------------------------------------------------------ run, read

TEST_F(CliTest, RunPrintsASummaryAndTheStoreCanBeRead) {
  dir_.write("space.json", kBraninSpace);
  ProcessResult run = cli({"run", "space.json"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  ASSERT_TRUE(std::filesystem::exists(dir_.file("branin.db")));

  // best --format json
  ProcessResult best = cli({"best", "branin.db", "--format", "json"});
  ASSERT_EQ(best.exit_code, 0) << best.err;
  Json b = Json::parse(best.out);
  ASSERT_TRUE(b["value"].is_number()) << best.out;
  double best_value = b["value"].get<double>();
  // best --format csv: field,value rows.
  ProcessResult best_csv = cli({"best", "branin.db", "--format", "csv"});
  ASSERT_EQ(best_csv.exit_code, 0) << best_csv.err;
  EXPECT_EQ(best_csv.out.rfind("field,value\r\n", 0), 0u) << best_csv.out;  // RFC 4180
  EXPECT_NE(best_csv.out.find("\ntrial," + b["number"].dump() + "\r\n"), std::string::npos)
      << best_csv.out;
  // The summary shows the best value as the table prints it.
  std::string shown = fmt::format("{:.10g}", best_value);
  EXPECT_NE(lower(run.out).find("best trial"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(shown), std::string::npos) << "summary lacks " << shown << ":\n"
                                                    << run.out;
  EXPECT_NE(run.out.find("20 COMPLETE"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("20 trials in"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("(budget reached)"), std::string::npos) << run.out;

  // trials --format json: every key, every trial.
  Json trials = trials_or_fail("branin.db");
  ASSERT_EQ(trials.size(), 20u);
  const std::set<std::string> keys = {"number",         "state",
                                      "value",          "params",
                                      "distributions",  "intermediate_values",
                                      "user_attrs",     "system_attrs",
                                      "datetime_start", "datetime_complete",
                                      "duration_s",     "worker",
                                      "fail_reason"};
  double min_value = 1e300;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const Json& t = trials[i];
    std::set<std::string> got;
    for (const auto& [k, v] : t.items()) got.insert(k);
    EXPECT_EQ(got, keys);
    EXPECT_EQ(t["number"], i);
    EXPECT_EQ(t["state"], "COMPLETE");
    ASSERT_TRUE(t["value"].is_number());
    min_value = std::min(min_value, t["value"].get<double>());
    EXPECT_GE(t["params"]["x0"].get<double>(), -5);
    EXPECT_LE(t["params"]["x0"].get<double>(), 10);
    EXPECT_EQ(t["distributions"]["x0"],
              Json::parse(R"({"type": "float", "low": -5.0, "high": 10.0})"));
    EXPECT_TRUE(t["intermediate_values"].is_object());
    EXPECT_TRUE(t["datetime_start"].is_string());
    EXPECT_TRUE(t["datetime_complete"].is_string());
    EXPECT_TRUE(t["duration_s"].is_number());
    EXPECT_FALSE(t["worker"].get<std::string>().empty());
    EXPECT_EQ(t["fail_reason"], "");
  }
  EXPECT_EQ(min_value, best_value);
  // The best trial is the first one with the lowest value.
  for (const auto& t : trials) {
    if (t["value"].get<double>() != best_value) continue;
    EXPECT_EQ(b["number"], t["number"]);
    break;
  }

  // trials --format csv: a header and one row per trial.
  ProcessResult csv = cli({"trials", "branin.db", "--format", "csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  auto csv_lines = lines(csv.out);
  ASSERT_EQ(csv_lines.size(), 21u) << csv.out;
  EXPECT_EQ(csv_lines[0], "number,state,value,duration_s,x0,x1,worker,fail_reason");
  EXPECT_EQ(csv_lines[1].rfind("0,COMPLETE,", 0), 0u) << csv_lines[1];
  // Every float reads back exactly (Ray #33283: 10 digits lost them).
  for (std::size_t i = 1; i < csv_lines.size(); ++i) {
    std::vector<std::string> f;
    std::stringstream row(csv_lines[i]);
    for (std::string cell; std::getline(row, cell, ',');) f.push_back(cell);
    ASSERT_GE(f.size(), 6u) << csv_lines[i];
    const Json& t = trials[i - 1];
    EXPECT_EQ(std::strtod(f[2].c_str(), nullptr), t["value"].get<double>()) << csv_lines[i];
    EXPECT_EQ(std::strtod(f[4].c_str(), nullptr), t["params"]["x0"].get<double>()) << csv_lines[i];
    EXPECT_EQ(std::strtod(f[5].c_str(), nullptr), t["params"]["x1"].get<double>()) << csv_lines[i];
  }

  // trials --format table (the default): header, rule, rows.
  ProcessResult table = cli({"trials", "branin.db"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  auto table_lines = lines(table.out);
  ASSERT_EQ(table_lines.size(), 22u) << table.out;
  EXPECT_EQ(table_lines[0].rfind("number", 0), 0u);
  EXPECT_EQ(table_lines[1].find_first_not_of("- "), std::string::npos) << table_lines[1];

  // --state filters.
  ProcessResult fails = cli({"trials", "branin.db", "--format", "json", "--state", "fail"});
  ASSERT_EQ(fails.exit_code, 0) << fails.err;
  EXPECT_EQ(Json::parse(fails.out), Json::array());
  EXPECT_EQ(cli({"trials", "branin.db", "--state", "DONE"}).exit_code, 2);

  // best as a table, studies.
  ProcessResult best_table = cli({"best", "branin.db"});
  ASSERT_EQ(best_table.exit_code, 0);
  EXPECT_NE(best_table.out.find(shown), std::string::npos) << best_table.out;
  EXPECT_NE(best_table.out.find("x0"), std::string::npos);
  ProcessResult studies = cli({"studies", "branin.db"});
  ASSERT_EQ(studies.exit_code, 0) << studies.err;
  EXPECT_NE(studies.out.find("branin"), std::string::npos);
  EXPECT_NE(studies.out.find("minimize"), std::string::npos);
  EXPECT_NE(studies.out.find(shown), std::string::npos) << studies.out;
  ProcessResult studies_json = cli({"studies", "branin.db", "--format", "json"});
  ASSERT_EQ(studies_json.exit_code, 0);
  Json s = Json::parse(studies_json.out);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0]["name"], "branin");
  EXPECT_EQ(s[0]["n_trials"], 20);
  EXPECT_EQ(s[0]["best_value"], best_value);
}

// --gpus-per-worker and --workers-per-gpu on local workers (no GPU here:
// --gpus names ids, CUDA_VISIBLE_DEVICES= hides any): --workers follows
// from the GPUs, layouts that do not fit are refused naming the option,
// and without GPUs the workers run on the CPU with a warning.
TEST_F(CliTest, GpuOptionsSetTheWorkersOrSayWhyNot) {
  dir_.write("space.json", branin_space(3));
  const auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/env", "CUDA_VISIBLE_DEVICES=", HPSEARCH_CLI_PATH,
                                     "run", "space.json"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  };
  ProcessResult r = run({"--gpus", "0,1,2,3", "--gpus-per-worker", "2", "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Workers: 2 (local), 2 GPUs per worker\n"));
  r = run({"--gpus", "0,1,2", "--gpus-per-worker", "2", "--dry-run"});
  EXPECT_THAT(r.out, HasSubstr("Workers: 1 (local), 2 GPUs per worker\n"));
  EXPECT_THAT(r.err, HasSubstr("--gpus-per-worker 2: GPU 2 of 0,1,2 is left unused (1 worker "
                               "with 2 each)"));
  r = run({"--gpus", "0,1", "--workers-per-gpu", "3", "--dry-run"});
  EXPECT_THAT(r.out, HasSubstr("Workers: 6 (local), 3 workers per GPU\n"));
  r = run({"--gpus", "0,1", "--workers-per-gpu", "3", "--workers", "2", "--dry-run"});
  EXPECT_THAT(r.out, HasSubstr("Workers: 2 (local), 3 workers per GPU\n"));
  r = run({"--gpus", "0,1", "--workers-per-gpu", "1", "--workers", "3", "--dry-run"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("some GPUs get more than 1 workers"));

  // Refusals: exit 2, nothing written.
  r = run({"--gpus", "0,1", "--gpus-per-worker", "3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpus-per-worker: is 3 but only 2 GPUs are available (0,1): "
                               "give at most 2"));
  r = run({"--gpus", "0,1,2,3", "--gpus-per-worker", "2", "--workers", "3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--workers: 3 workers with --gpus-per-worker 2 need 6 GPUs, only "
                               "4 are available (0,1,2,3): give --workers 2 or fewer, or "
                               "--workers-per-gpu to share GPUs"));
  r = run({"--gpus", "0,1", "--gpus-per-worker", "1", "--workers-per-gpu", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpus-per-worker: cannot be combined with --workers-per-gpu"));
  r = run({"--workers-per-gpu", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--workers-per-gpu: must be >= 1 (the workers on each GPU), got 0"));
  r = run({"--gpus-per-worker", "0", "--launcher", "slurm"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpus-per-worker: must be >= 1 (the GPUs of each worker), got 0"));
  r = run({"--gpus", "0", "--workers-per-gpu", "100000"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--workers-per-gpu: is 100000: on 1 GPU that makes 100000 "
                               "workers, more than the 1024 a run takes (--max-workers"));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("branin.db")));

  // No GPU: a warning, then CPU workers (the CPU counts as one device:
  // --workers-per-gpu 2 makes two), which run the study.
  r = run({"--workers-per-gpu", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--workers-per-gpu 2: no GPU found"));
  EXPECT_THAT(r.err, HasSubstr("running 2 workers on the CPU"));
  EXPECT_THAT(r.err, HasSubstr("starting 2 workers (cpu,"));
  r = run({"--gpus-per-worker", "2", "--n-trials", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--gpus-per-worker 2: no GPU found"));
  EXPECT_THAT(r.err, HasSubstr("running 1 worker on the CPU"));
  EXPECT_EQ(count_if(trials_or_fail("branin.db"), is_complete), 4);
}

// hpsearch resume keeps the last run's --gpus-per-worker and its workers.
TEST_F(CliTest, ResumeKeepsTheGpuLayout) {
  dir_.write("space.json", branin_space(2));
  const auto env_cli = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/env", "CUDA_VISIBLE_DEVICES=", HPSEARCH_CLI_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  };
  ProcessResult r = env_cli({"run", "space.json", "--gpus", "0,1,2,3", "--gpus-per-worker", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("starting 2 workers (GPUs 0,1,2,3, 2 per worker"));
  r = env_cli({"resume", "branin.db", "--n-trials", "3", "--gpus", "0,1,2,3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("resume: --gpus-per-worker 2, as the last run"));
  EXPECT_THAT(r.err, HasSubstr("starting 2 workers (GPUs 0,1,2,3, 2 per worker"));
  // Given again on the command line, the layout sets the workers anew.
  r = env_cli(
      {"resume", "branin.db", "--n-trials", "4", "--gpus", "0,1,2,3", "--workers-per-gpu", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("starting 8 workers (GPUs 0,1,2,3, 2 workers per GPU"));
}

TEST_F(CliTest, RunsTheBraninExample) {
  std::string example = std::string(HPSEARCH_SOURCE_DIR) + "/examples/branin/space.json";
  ASSERT_TRUE(std::filesystem::exists(example)) << example;
  std::filesystem::copy_file(example, dir_.file("space.json"));
  Json doc = read_json_file(example);
  std::string db = doc["study"].value("storage", doc["study"]["name"].get<std::string>() + ".db");
  ProcessResult run = cli({"run", "space.json", "--n-trials", "5"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(lower(run.out).find("best trial"), std::string::npos) << run.out;
  EXPECT_EQ(trials_or_fail(db).size(), 5u);
}

// Issue #17: an int param of a SQLite study, four workers at once: every
// value once, no two trials with equal params, then "search space
// exhausted" (before the fix values read back unsigned were not seen as
// duplicates of the signed ones sampled).
TEST_F(CliTest, FourWorkersOnAnIntParamTryEachValueOnceThenStopExhausted) {
  dir_.write("space.json", R"({
    "study": {"name": "ints", "direction": "minimize", "storage": "ints.db"},
    "sampler": {"type": "tpe", "seed": 3},
    "pruner": {"type": "none"},
    "budget": {"n_trials": 30},
    "objective": {"type": "sleep", "seconds": 0.05},
    "space": {"p": {"type": "int", "low": 1, "high": 8}}
  })");
  ProcessResult run = cli({"run", "space.json", "--workers", "4"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(lower(run.out + run.err).find("search space exhausted"), std::string::npos)
      << run.out << run.err;
  // The summary says why the run ended.
  EXPECT_NE(run.out.find("trials in"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("(search space exhausted)"), std::string::npos) << run.out;
  Json trials = trials_or_fail("ints.db");
  std::set<std::int64_t> seen;
  for (const auto& t : trials) {
    if (t["state"] == "FAIL" && t["system_attrs"].contains("retried_as")) continue;
    EXPECT_TRUE(seen.insert(t["params"]["p"].get<std::int64_t>()).second)
        << "p = " << t["params"]["p"] << " ran twice: " << trials.dump();
  }
  EXPECT_EQ(seen.size(), 8u) << trials.dump();
}

// Issue #17: a budget within TPE's startup makes the study a random search;
// the run says so.
TEST_F(CliTest, RunWarnsWhenTheBudgetIsWithinTpeStartup) {
  Json doc = Json::parse(kBraninSpace);
  doc["sampler"] = {{"type", "tpe"}, {"seed", 1}, {"n_startup_trials", 10}};
  doc["budget"]["n_trials"] = 8;
  dir_.write("space.json", doc.dump());
  ProcessResult run = cli({"run", "space.json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("at most 8 COMPLETE trials, at or below n_startup_trials = 10"),
            std::string::npos)
      << run.err;
  // The default startup size ("auto") follows the budget: 5 of 8 trials,
  // so the last 3 are modelled and nothing is said; 5 of 5 is said.
  doc["sampler"].erase("n_startup_trials");
  doc["study"]["storage"] = "auto8.db";
  dir_.write("space.json", doc.dump());
  ProcessResult auto8 = cli({"run", "space.json"});
  ASSERT_EQ(auto8.exit_code, 0) << auto8.err;
  EXPECT_EQ(auto8.err.find("n_startup_trials"), std::string::npos) << auto8.err;
  doc["budget"]["n_trials"] = 5;
  doc["study"]["storage"] = "auto5.db";
  dir_.write("space.json", doc.dump());
  ProcessResult auto5 = cli({"run", "space.json"});
  ASSERT_EQ(auto5.exit_code, 0) << auto5.err;
  EXPECT_NE(auto5.err.find("at most 5 COMPLETE trials, at or below n_startup_trials = 5 "
                           "(\"auto\")"),
            std::string::npos)
      << auto5.err;
  doc["sampler"]["n_startup_trials"] = 10;
  doc["budget"]["n_trials"] = 11;
  doc["study"]["storage"] = "more.db";
  dir_.write("space.json", doc.dump());
  ProcessResult more = cli({"run", "space.json"});
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_EQ(more.err.find("n_startup_trials"), std::string::npos) << more.err;
}

// User attrs (keys and values) with escape sequences reach no terminal:
// the run summary, `best` and the `trials` table escape them (found by an
// attack pass: ESC, BEL and CR/LF came out raw).
TEST_F(CliTest, AttrsWithControlBytesAreEscapedInTextOutput) {
  ProcessResult run = run_shell_study(
      "escattr", 1,
      // \173 and \175 are { and }: braces in argv are placeholders.
      "echo {lr} > /dev/null; printf 'hpsearch: \\173\"value\": 1, \"attrs\": "
      "\\173\"k\\\\u001b[31m\": \"v\\\\u001b]0;T\\\\u0007\\\\r\\\\nFAKE\"\\175\\175\\n'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto raw_free = [](const std::string& text) {
    for (char c : text)
      if (c != '\n' && c != '\r' && static_cast<unsigned char>(c) < 0x20) return false;
    return text.find('\r') == std::string::npos;
  };
  EXPECT_NE(run.out.find("\\x1b"), std::string::npos) << run.out;  // shown, escaped
  EXPECT_TRUE(raw_free(run.out)) << run.out;
  ProcessResult best = cli({"best", "escattr.db"});
  ASSERT_EQ(best.exit_code, 0) << best.err;
  EXPECT_TRUE(raw_free(best.out)) << best.out;
  ProcessResult trials = cli({"trials", "escattr.db"});
  ASSERT_EQ(trials.exit_code, 0) << trials.err;
  EXPECT_NE(trials.out.find("attr k\\x1b[31m"), std::string::npos) << trials.out;
  EXPECT_TRUE(raw_free(trials.out)) << trials.out;
}

// A program's output that reaches the log and the progress line (a failure
// reason with its last lines) carries no escape sequence or control byte to
// the terminal: a program cannot retitle the window or recolor the screen.
TEST_F(CliTest, RunShowsNoControlBytesFromPrograms) {
  ProcessResult run = run_shell_study(
      "esc", 2,
      "printf '\\033]0;PWNED\\007\\033[31mRED\\033[0m\\n' >&2; echo {lr} > /dev/null; exit 3");
  ASSERT_EQ(run.exit_code, 1) << run.err;  // every trial failed (fail fast)
  // The failure is shown with the program's stderr, and nothing on
  // stderr or stdout is raw.
  const std::string all = run.out + run.err;
  EXPECT_NE(all.find("exit code 3"), std::string::npos) << all;
  EXPECT_NE(all.find("PWNED"), std::string::npos) << all;
  for (char c : all)
    EXPECT_TRUE(c == '\n' || c == '\r' || static_cast<unsigned char>(c) >= 0x20 || c == '\t')
        << "control byte " << static_cast<int>(c);
}

// A program's non-finite attrs (Python's json.dumps literals NaN, Infinity,
// -Infinity) cross the worker -> coordinator wire and are stored as floats,
// not as the strings "nan"/"inf"; a string attr "inf" stays a string.
TEST_F(CliTest, NonFiniteAttrsFromAProgramAreStoredAsFloats) {
  ProcessResult run = run_shell_study(
      "attrs", 1,
      R"(echo 'hpsearch: {{"value": 1.5, "attrs": {{"nan": NaN, "pinf": Infinity, "ninf": -Infinity, "text": "inf", "list": [1, NaN]}}}}')");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto storage = open_storage(dir_.file("attrs.db"));
  auto id = storage->find_study("attrs");
  ASSERT_TRUE(id);
  auto trials = storage->get_all_trials(*id, {});
  ASSERT_EQ(trials.size(), 1u);
  const Json& a = trials[0]->user_attrs;
  ASSERT_EQ(trials[0]->state, TrialState::kComplete) << a.dump();
  ASSERT_TRUE(a.contains("nan") && a["nan"].is_number_float()) << a.dump();
  EXPECT_TRUE(std::isnan(a["nan"].get<double>()));
  ASSERT_TRUE(a["pinf"].is_number_float()) << a.dump();
  EXPECT_EQ(a["pinf"].get<double>(), std::numeric_limits<double>::infinity());
  ASSERT_TRUE(a["ninf"].is_number_float()) << a.dump();
  EXPECT_EQ(a["ninf"].get<double>(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(a["text"], "inf");
  ASSERT_TRUE(a["list"].is_array() && a["list"].size() == 2u) << a.dump();
  EXPECT_TRUE(a["list"][1].is_number_float() && std::isnan(a["list"][1].get<double>()));
}

TEST_F(CliTest, ReadCommandsOnMissingOrEmptyStores) {
  EXPECT_EQ(cli({"best", "nope.db"}).exit_code, 2);
  EXPECT_EQ(cli({"trials", "nope.db"}).exit_code, 2);
  EXPECT_EQ(cli({"studies", "nope.db"}).exit_code, 2);
  // resume takes its STORAGE as the read commands do: one rule, one message.
  for (const std::string command : {"resume", "status", "best"}) {
    ProcessResult missing = cli({command, "nope.db"});
    EXPECT_EQ(missing.exit_code, 2) << command << ": " << missing.err;
    EXPECT_EQ(missing.err, "hpsearch: error: STORAGE: no such storage file: nope.db\n") << command;
  }
  dir_.write("empty.db", "");
  for (const std::string command : {"resume", "trials"}) {
    ProcessResult empty = cli({command, "empty.db"});
    EXPECT_EQ(empty.exit_code, 2) << command << ": " << empty.err;
    EXPECT_THAT(empty.err, HasSubstr("STORAGE: is empty, not a hpsearch store: empty.db"))
        << command;
  }
  EXPECT_EQ(testsupport::read_file(dir_.file("empty.db")), "");
  EXPECT_FALSE(std::filesystem::exists(dir_.file("nope.db")));  // reading creates nothing
  // Two studies in one store: --study picks one.
  dir_.write("a.json", kBraninSpace);
  ASSERT_EQ(
      cli({"run", "a.json", "--n-trials", "2", "--study", "one", "--storage", "two.db"}).exit_code,
      0);
  ASSERT_EQ(
      cli({"run", "a.json", "--n-trials", "3", "--study", "two", "--storage", "two.db"}).exit_code,
      0);
  ProcessResult ambiguous = cli({"trials", "two.db"});
  EXPECT_EQ(ambiguous.exit_code, 2);
  EXPECT_NE(ambiguous.err.find("--study"), std::string::npos) << ambiguous.err;
  ProcessResult two = cli({"trials", "two.db", "--study", "two", "--format", "json"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(Json::parse(two.out).size(), 3u);
  EXPECT_EQ(cli({"best", "two.db", "--study", "three"}).exit_code, 2);
  ProcessResult no_study = cli({"resume", "two.db", "--study", "three"});
  EXPECT_EQ(no_study.exit_code, 2) << no_study.err;
  EXPECT_THAT(no_study.err, HasSubstr("--study: no study named 'three' in two.db"));
  // resume names its argument, not run's flag, in a refusal of the store.
  std::filesystem::create_hard_link(dir_.file("two.db"), dir_.file("link.db"));
  ProcessResult linked = cli({"resume", "link.db", "--study", "two"});
  EXPECT_EQ(linked.exit_code, 2) << linked.err;
  EXPECT_THAT(linked.err, HasSubstr("hpsearch: error: STORAGE: the store has 2 hard links"));
}

TEST_F(CliTest, AStudyWhoseOnlyCompleteTrialsAreWarmCopiesSaysSo) {
  // Two COMPLETE trials, both warm-start copies (never the best), and a
  // RUNNING one: `best` and `status` say why there is no best trial,
  // without contradicting the count of COMPLETE trials beside it.
  {
    auto storage = open_storage(dir_.file("w.db"));
    auto id = storage->create_study("w", StudyDirection::kMinimize, Json());
    for (int i = 0; i < 3; ++i) {
      NewTrial t;
      t.state = i < 2 ? TrialState::kComplete : TrialState::kRunning;
      t.params = {{"x", Json(1.0 * i)}};
      if (i < 2) {
        t.value = 1.0 + i;
        t.system_attrs["warm_start"] = Json{{"storage", "o.db"}, {"study", "o"}};
      }
      storage->create_trial(id, t);
    }
  }
  ProcessResult best = cli({"best", "w.db"});
  EXPECT_EQ(best.exit_code, 1) << best.err;
  EXPECT_THAT(best.err, HasSubstr("study 'w' has no COMPLETE trial of its own yet (its 2 COMPLETE "
                                  "trials are warm-start copies of an earlier study"));
  ProcessResult status = cli({"status", "w.db"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("2 COMPLETE"));
  EXPECT_THAT(status.out, HasSubstr("Best: no COMPLETE trial of its own yet (its 2 COMPLETE"));
  EXPECT_THAT(status.out, Not(HasSubstr("Best: no COMPLETE trial yet")));
  // A study with no COMPLETE trial at all keeps the short message.
  {
    auto storage = open_storage(dir_.file("w.db"));
    storage->create_study("empty", StudyDirection::kMinimize, Json());
  }
  ProcessResult empty = cli({"best", "w.db", "--study", "empty"});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_THAT(empty.err, HasSubstr("study 'empty' has no COMPLETE trial yet"));
}

// status shows the sampler in a few words (type and main settings) and the
// pruner (type, settings, trials pruned); with --verbose (and in --format
// json) every sampler setting a run of the study uses, with every default
// resolved (TPE's "bandwidth": "auto" is otherwise visible nowhere); a
// stored section that is not valid (a store edited by hand) is named, and
// status still answers; a study without a stored document has no line.
TEST_F(CliTest, StatusShowsTheSamplerSettingsWithItsDefaultsResolved) {
  Json doc = Json::parse(sleep_space(0, 2));
  doc["sampler"] = {{"type", "tpe"}, {"n_startup_trials", 5}, {"seed", 4}};
  doc["pruner"] = {{"type", "median"}, {"n_warmup_steps", 2}};
  dir_.write("space.json", doc.dump());
  ASSERT_EQ(cli({"run", "space.json"}).exit_code, 0);
  ProcessResult text = cli({"status", "slow.db"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("Sampler: TPE: seed 4, n_startup_trials 5, multivariate\n"));
  EXPECT_THAT(text.out, HasSubstr("Pruner: median: n_warmup_steps 2; pruned 0 trials\n"));
  EXPECT_THAT(text.out, Not(HasSubstr("bandwidth")));  // the internals: --verbose
  ProcessResult verbose = cli({"status", "slow.db", "--verbose"});
  ASSERT_EQ(verbose.exit_code, 0) << verbose.err;
  EXPECT_THAT(verbose.out, HasSubstr("Sampler: TPE: seed 4"));
  EXPECT_THAT(verbose.out, HasSubstr("Sampler settings: {"));
  EXPECT_THAT(verbose.out, HasSubstr("\"bandwidth\":\"auto\""));
  EXPECT_THAT(verbose.out, HasSubstr("\"n_startup_trials\":5"));
  EXPECT_THAT(verbose.out, HasSubstr("\"min_bandwidth_factor\":0.04"));  // multivariate's default
  ProcessResult json = cli({"status", "slow.db", "--format", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json out = Json::parse(json.out);
  EXPECT_EQ(out["sampler"]["bandwidth"], "auto");
  EXPECT_EQ(out["sampler"]["multivariate"], true);
  EXPECT_EQ(out["sampler"]["seed"], 4);
  EXPECT_EQ(out["pruner"], Json::parse(R"({"type": "median", "n_warmup_steps": 2})"));
  EXPECT_EQ(out["pruned"], 0);

  {
    auto storage = open_storage(dir_.file("slow.db"));
    const std::int64_t id = *storage->find_study("slow");
    doc["sampler"] = {{"type", "tpe"}, {"bandwidth", "silverman\x1b[2J"}};
    storage->set_study_config(id, doc);
    storage->create_study("api", StudyDirection::kMinimize, Json());
  }
  ProcessResult bad = cli({"status", "slow.db", "--study", "slow"});
  ASSERT_EQ(bad.exit_code, 0) << bad.err;
  EXPECT_THAT(bad.out, HasSubstr("Sampler: the stored settings are not valid: studies row "
                                 "study_id=1: column config_json: sampler.bandwidth"));
  EXPECT_THAT(bad.out, Not(HasSubstr("\x1b"))) << "control bytes from the store reach the terminal";
  ProcessResult bad_json = cli({"status", "slow.db", "--study", "slow", "--format", "json"});
  ASSERT_EQ(bad_json.exit_code, 0) << bad_json.err;
  EXPECT_THAT(Json::parse(bad_json.out)["sampler"]["error"].get<std::string>(),
              HasSubstr("sampler.bandwidth"));
  ProcessResult api = cli({"status", "slow.db", "--study", "api"});
  ASSERT_EQ(api.exit_code, 0) << api.err;
  EXPECT_THAT(api.out, Not(HasSubstr("Sampler:")));
  EXPECT_TRUE(
      Json::parse(cli({"status", "slow.db", "--study", "api", "--format", "json"}).out)["sampler"]
          .is_null());
}

// Sets studies.config_json of every study in `file` to `text` (any bytes),
// as a store edited by hand with sqlite3.
void set_config_text(const std::string& file, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "UPDATE studies SET config_json = ?1", -1, &st, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_bind_text(st, 1, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  EXPECT_EQ(sqlite3_step(st), SQLITE_DONE) << sqlite3_errmsg(db);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

// Whether `text` holds a byte that is a raw control character (C0 but line
// breaks, DEL), a raw C1 control in UTF-8 (U+0080..U+009F), or a byte that
// is not UTF-8 (0xFF, a lone 0x9B).
bool has_raw_control_bytes(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f || c == 0xff || c == 0xfe) return true;
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9f)
      return true;
    if (c >= 0x80 && c <= 0xbf && (i == 0 || static_cast<unsigned char>(text[i - 1]) < 0x80))
      return true;  // a continuation byte with no lead byte
  }
  return false;
}

// A stored settings document that does not parse at all (a store edited by
// hand: a number beyond a double's range, nesting deeper than 256 levels,
// bytes that are not UTF-8, a raw control character, a NUL byte, a key
// twice) or is not an object: status still shows the study (name, counts,
// best trial), with one note naming the column and the reason where the
// settings' lines were, and exits 0 as for a sampler section that is not
// valid; --format json stays valid JSON (ASCII only), "sampler": {"error":
// ...}. resume, run and export refuse the study (exit 2) naming the column
// and the reason, nothing in the store changed.
// Stored settings that parse but break a rule of space.json (a hand-edited
// store): resume refuses them as the store's state (exit 2), naming the
// column and the rule, before it says or starts anything; nothing changes.
TEST_F(CliTest, ResumeRefusesStoredSettingsThatBreakARuleNamingTheColumn) {
  dir_.write("space.json", branin_space(3));
  ASSERT_EQ(cli({"run", "space.json"}).exit_code, 0);
  const std::string db = dir_.file("branin.db");
  const Json good = Json::parse(branin_space(3));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/sampler", R"({"type": "tpe", "n_startup_trials": "Auto"})"},
      {"/pruner", R"({"type": "median", "n_warmup_steps": -1})"},
      {"/budget", R"({"n_trials": -5})"},
  };
  for (const auto& [where, value] : cases) {
    SCOPED_TRACE(where);
    Json doc = good;
    doc[Json::json_pointer(where)] = Json::parse(value);
    set_config_text(db, doc.dump());
    const std::string before = testsupport::read_file(db);
    ProcessResult resume = cli({"resume", "branin.db"});
    EXPECT_EQ(resume.exit_code, 2) << resume.err;
    EXPECT_THAT(resume.err, HasSubstr("its stored settings are not valid (studies row study_id=1: "
                                      "column config_json: " +
                                      where.substr(1) + "."));
    EXPECT_THAT(resume.err, HasSubstr("nothing was changed"));
    EXPECT_THAT(resume.err, Not(HasSubstr("resume: 1 worker")));
    EXPECT_EQ(testsupport::read_file(db), before) << "a refused resume changed the store";
  }
}

TEST_F(CliTest, StatusShowsWhatItCanOfAStudyWhoseStoredSettingsDoNotParse) {
  dir_.write("space.json", branin_space(3));
  ASSERT_EQ(cli({"run", "space.json"}).exit_code, 0);
  const std::string db = dir_.file("branin.db");
  const std::string deep = R"({"sampler": )" + std::string(300, '[') + std::string(300, ']') + "}";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"sampler": {"type": "tpe", "seed": 1e309}, "budget": {"n_trials": 3}})",
       "invalid JSON at 'sampler.seed': number overflow parsing '1e309' (a number must lie "
       "within +-1.8e308"},
      {deep, "nested deeper than 256 levels"},
      {"{\"sampler\": {\"type\": \"tp\xff\"}}", "ill-formed UTF-8 byte"},
      {"{\"sampler\": {\"type\": \"tp\x9b\"}}", "ill-formed UTF-8 byte"},
      {"{\"sampler\": {\"type\": \"tp\x1b[31me\"}}", "control character U+001B (ESC)"},
      {std::string("{\"sampler\": {\"type\": \"tp") + '\0' + "e\"}}", "a NUL byte"},
      {R"({"sampler": {"type": "tpe", "type": "random"}})",
       "key 'type' appears twice in 'sampler'"},
      {"[]", "must be a JSON object (the study's space.json document), got array"},
  };
  for (const auto& [text, reason] : cases) {
    SCOPED_TRACE(reason);
    set_config_text(db, text);
    const std::string before = testsupport::read_file(db);
    ProcessResult status = cli({"status", "branin.db"});
    ASSERT_EQ(status.exit_code, 0) << status.err;
    EXPECT_THAT(status.out, HasSubstr("Study 'branin' (minimize) in branin.db"));
    EXPECT_THAT(status.out, HasSubstr("Trials: 3 (3 COMPLETE"));
    EXPECT_THAT(status.out, HasSubstr("Best: trial "));
    EXPECT_THAT(status.out, HasSubstr("Sampler: the stored settings are not valid: "));
    EXPECT_THAT(status.out, HasSubstr("column config_json"));
    EXPECT_THAT(status.out, HasSubstr(reason));
    EXPECT_THAT(status.out, HasSubstr("Coordinator: "));
    EXPECT_FALSE(has_raw_control_bytes(status.out)) << status.out;
    ProcessResult json = cli({"status", "branin.db", "--format", "json"});
    ASSERT_EQ(json.exit_code, 0) << json.err;
    EXPECT_FALSE(has_raw_control_bytes(json.out)) << json.out;
    const Json out = Json::parse(json.out);
    EXPECT_EQ(out["study"], "branin");
    EXPECT_EQ(out["counts"]["COMPLETE"], 3);
    EXPECT_TRUE(out["best"].is_object());
    EXPECT_THAT(out["sampler"]["error"].get<std::string>(), HasSubstr(reason));
    ProcessResult resume = cli({"resume", "branin.db"});
    EXPECT_EQ(resume.exit_code, 2) << resume.err;
    EXPECT_THAT(resume.err, HasSubstr("column config_json"));
    EXPECT_THAT(resume.err, HasSubstr(reason));
    EXPECT_FALSE(has_raw_control_bytes(resume.err)) << resume.err;
    EXPECT_THAT(resume.err, HasSubstr("its stored settings are not valid ("));
    EXPECT_THAT(resume.err, HasSubstr("nothing was changed"));
    ProcessResult run = cli({"run", "space.json"});
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_THAT(run.err, HasSubstr("its stored settings are not valid ("));
    EXPECT_THAT(run.err, HasSubstr(reason));
    EXPECT_THAT(run.err, HasSubstr("--allow-objective-change"));
    if (text != "[]") {  // the export carries the settings: refused, not written without them
      ProcessResult exported = cli({"export", "branin.db", "--format", "optuna", "-o", "o.db"});
      EXPECT_EQ(exported.exit_code, 2) << exported.err;
      EXPECT_THAT(exported.err, HasSubstr(reason));
      EXPECT_FALSE(std::filesystem::exists(dir_.file("o.db")));
    }
    EXPECT_EQ(testsupport::read_file(db), before) << "a refused command changed the store";
  }
  // --allow-objective-change continues the study with the file's settings.
  set_config_text(db, cases[0].first);
  ProcessResult allowed = cli({"run", "space.json", "--allow-objective-change", "--n-trials", "4"});
  ASSERT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_THAT(allowed.out + allowed.err, HasSubstr("its stored settings are not valid ("));
  ProcessResult status = cli({"status", "branin.db"});
  EXPECT_THAT(status.out, HasSubstr("Trials: 4 (4 COMPLETE"));
  EXPECT_THAT(status.out, HasSubstr("Sampler: random: seed 1\n"));
}

// A config error of run, resume or status quotes the user's text in full:
// control characters (ESC, BEL, CR, LF) and C1 controls escaped (never sent
// to the terminal raw; in --format json as \u00XX), and a NUL byte as "\x00"
// with the text after it and the rule kept (what() is a C string).
TEST_F(CliTest, ConfigErrorsQuoteTheUsersTextEscapedAndInFull) {
  Json doc = Json::parse(kBraninSpace);
  doc["sampler"] = {{"type", "tp\x1b[31me\x07"}};
  dir_.write("ctl.json", doc.dump());
  ProcessResult run = cli({"run", "ctl.json"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr("sampler.type: unknown type 'tp\\x1b[31me\\x07'"));
  EXPECT_FALSE(has_raw_control_bytes(run.err)) << run.err;

  dir_.write("space.json", branin_space(2));
  ASSERT_EQ(cli({"run", "space.json"}).exit_code, 0);
  const auto store = [&](const Json& sampler) {
    auto storage = open_storage(dir_.file("branin.db"));
    Json stored = doc;
    stored["sampler"] = sampler;
    storage->set_study_config(*storage->find_study("branin"), stored);
  };
  store({{"type", "tp\x1b[2J\r\ne\x07"}});
  ProcessResult resume = cli({"resume", "branin.db"});
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_THAT(resume.err, HasSubstr("unknown type 'tp\\x1b[2J\\r\\ne\\x07'"));
  EXPECT_FALSE(has_raw_control_bytes(resume.err)) << resume.err;

  // NUL bytes in a stored value and a stored key.
  store({{"type", std::string("tp\0e", 4)}});
  ProcessResult value = cli({"status", "branin.db"});
  ASSERT_EQ(value.exit_code, 0) << value.err;
  EXPECT_THAT(value.out,
              HasSubstr("not valid: studies row study_id=1: column config_json: sampler.type: "
                        "unknown type 'tp\\x00e'"));
  EXPECT_THAT(Json::parse(cli({"status", "branin.db", "--format", "json"}).out)["sampler"]["error"]
                  .get<std::string>(),
              HasSubstr("unknown type 'tp\\x00e'"));
  ProcessResult resume_nul = cli({"resume", "branin.db"});
  EXPECT_EQ(resume_nul.exit_code, 2) << resume_nul.err;
  EXPECT_THAT(resume_nul.err, HasSubstr("unknown type 'tp\\x00e'"));
  store({{"type", "random"}, {std::string("a\0b", 3), 1}});
  ProcessResult key = cli({"status", "branin.db"});
  ASSERT_EQ(key.exit_code, 0) << key.err;
  EXPECT_THAT(key.out, HasSubstr("column config_json: sampler[\"a\\x00b\"]: unknown key"));
  EXPECT_THAT(key.out, HasSubstr("allowed keys: type, seed"));

  // A C1 control (U+009B, the one-byte CSI) in valid UTF-8: \u009b in both
  // forms, never the raw bytes C2 9B.
  store({{"type",
          "tp\xc2\x9b"
          "31m"}});
  ProcessResult c1 = cli({"status", "branin.db"});
  EXPECT_THAT(c1.out, HasSubstr("tp\\u009b31m"));
  ProcessResult c1_json = cli({"status", "branin.db", "--format", "json"});
  ASSERT_EQ(c1_json.exit_code, 0) << c1_json.err;
  EXPECT_FALSE(has_raw_control_bytes(c1_json.out)) << c1_json.out;
  EXPECT_THAT(c1_json.out, HasSubstr("tp\\\\u009b31m"));  // the note's "\u009b", in JSON
  // The note itself is escaped (not only its JSON string): a consumer that
  // prints the field sends no control to the terminal.
  EXPECT_THAT(Json::parse(c1_json.out)["sampler"]["error"].get<std::string>(),
              HasSubstr("tp\\u009b31m"));
}

// A store made through the storage API (no run: no worker starts): study
// "branin" with settings `config` and `complete` COMPLETE trials.
void make_branin_store(const std::string& file, const Json& config, int complete) {
  auto storage = open_storage(file);
  const std::int64_t id = storage->create_study("branin", StudyDirection::kMinimize, config);
  for (int i = 0; i < complete; ++i) {
    NewTrial t;
    t.state = TrialState::kComplete;
    t.params = {{"x0", Json(1.0 * i)}, {"x1", Json(2.0)}};
    t.value = 10.0 - i;
    storage->create_trial(id, t);
  }
}

// Stored settings that parse but break a rule outside the sampler section
// (a negative budget): status shows what it can (counts, best, the
// sampler), leaves the budget out rather than "finished 3 of -5", and
// names the row, column and rule in a note (exit 0); --format json says
// the same in "settings_error" with "n_trials": null. A document that is
// not an object is named by row and column as every other stored-settings
// error is.
TEST_F(CliTest, StatusNamesAStoredBudgetThatBreaksARule) {
  Json doc = Json::parse(branin_space(3));
  doc["budget"]["n_trials"] = -5;
  make_branin_store(dir_.file("branin.db"), doc, 3);
  ProcessResult text = cli({"status", "branin.db"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("Trials: 3 (3 COMPLETE, 0 PRUNED, 0 FAIL, 0 RUNNING, 0 WAITING); "
                                  "finished 3\n"));
  EXPECT_THAT(text.out, Not(HasSubstr("of -5")));
  EXPECT_THAT(text.out, HasSubstr("Best: trial 2, value "));
  EXPECT_THAT(text.out, HasSubstr("Sampler: random: seed 1\n"));
  EXPECT_THAT(text.out, HasSubstr("Settings: the stored settings are not valid: studies row "
                                  "study_id=1: column config_json: budget.n_trials: must be > 0, "
                                  "got -5\n"));
  ProcessResult json = cli({"status", "branin.db", "--format", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json out = Json::parse(json.out);
  EXPECT_TRUE(out["n_trials"].is_null());
  EXPECT_EQ(out["sampler"], Json::parse(R"({"type": "random", "seed": 1})"));
  EXPECT_EQ(out["settings_error"],
            "studies row study_id=1: column config_json: budget.n_trials: must be > 0, got -5");

  // A valid document: no note, "settings_error": null.
  set_config_text(dir_.file("branin.db"), branin_space(3));
  ProcessResult good = cli({"status", "branin.db"});
  EXPECT_THAT(good.out, HasSubstr("finished 3 of 3\n"));
  EXPECT_THAT(good.out, Not(HasSubstr("Settings:")));
  EXPECT_TRUE(Json::parse(cli({"status", "branin.db", "--format", "json"}).out)["settings_error"]
                  .is_null());
  // Not an object: the note names the row like the other stored-settings
  // errors, once (the sampler line says it).
  set_config_text(dir_.file("branin.db"), "[1]");
  ProcessResult array = cli({"status", "branin.db"});
  ASSERT_EQ(array.exit_code, 0) << array.err;
  EXPECT_THAT(array.out, HasSubstr("Sampler: the stored settings are not valid: studies row "
                                   "study_id=1: column config_json: must be a JSON object"));
  EXPECT_THAT(array.out, Not(HasSubstr("Settings:")));
}

// For TPE's n_startup_trials "auto", the text form shows the size a run
// uses beside it (TpeOptions::startup_trials of the trial budget, the
// warm-start copies counted as a run counts them); --format json keeps the
// stored "auto" in the sampler object (it reads back as a sampler section)
// and gives the size in "startup_trials_in_effect".
TEST_F(CliTest, StatusShowsTheStartupSizeInEffectForAuto) {
  Json doc = Json::parse(kBraninSpace);
  doc["sampler"] = {{"type", "tpe"}};
  make_branin_store(dir_.file("branin.db"), doc, 0);
  // `hpsearch status` of the study with `budget`, in `format`.
  // (table: the summary line; --verbose adds every setting as JSON).
  const auto status_of = [&](const Json& budget, const std::string& format) {
    Json stored = doc;
    stored["budget"] = budget;
    set_config_text(dir_.file("branin.db"), stored.dump());
    ProcessResult r = format == "verbose" ? cli({"status", "branin.db", "--verbose"})
                                          : cli({"status", "branin.db", "--format", format});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const auto json_of = [&](const Json& budget) { return Json::parse(status_of(budget, "json")); };
  EXPECT_THAT(status_of({{"n_trials", 40}}, "table"),
              HasSubstr("Sampler: TPE: n_startup_trials auto (5 for a budget of 40 trials), "
                        "multivariate\n"));
  EXPECT_THAT(status_of({{"n_trials", 40}}, "verbose"),
              HasSubstr("\"n_startup_trials\":\"auto (5 for a budget of 40 trials)\""));
  const Json json = json_of({{"n_trials", 40}});
  EXPECT_EQ(json["sampler"]["n_startup_trials"], "auto");
  EXPECT_EQ(json["startup_trials_in_effect"], 5);
  EXPECT_THAT(status_of({{"n_trials", 200}}, "table"),
              HasSubstr("n_startup_trials auto (10 for a budget of 200 trials)"));
  EXPECT_THAT(status_of(Json::object(), "table"),
              HasSubstr("n_startup_trials auto (10 without a trial budget)"));
  {
    auto storage = open_storage(dir_.file("branin.db"));
    storage->set_study_system_attr(*storage->find_study("branin"), "warm_start",
                                   Json{{"copied", 40}});
  }
  EXPECT_THAT(status_of({{"n_trials", 50}}, "table"),
              HasSubstr("n_startup_trials auto (9 for a budget of 50 trials and 40 warm-start "
                        "copies)"));
  // A size given is shown as it is.
  doc["sampler"]["n_startup_trials"] = 7;
  EXPECT_THAT(status_of({{"n_trials", 40}}, "table"), HasSubstr("n_startup_trials 7, "));
  EXPECT_THAT(status_of({{"n_trials", 40}}, "verbose"), HasSubstr("\"n_startup_trials\":7,"));
  EXPECT_EQ(json_of({{"n_trials", 40}})["startup_trials_in_effect"], 7);
  // Not TPE: null.
  doc["sampler"] = {{"type", "random"}};
  EXPECT_TRUE(json_of({{"n_trials", 40}})["startup_trials_in_effect"].is_null());
}

// status --format json carries an error note escaped as the text form
// prints it: a stored sampler.type holding ESC reads "\x1b" in the parsed
// field (a consumer that prints it sends no escape sequence), not the ESC
// character that JSON's own \u001b would give back.
TEST_F(CliTest, StatusJsonEscapesControlCharactersInErrorNotes) {
  Json doc = Json::parse(branin_space(3));
  doc["sampler"] = {{"type", "tp\x1b[31me"}};
  doc["budget"]["n_trials"] = -1;
  make_branin_store(dir_.file("branin.db"), doc, 1);
  ProcessResult json = cli({"status", "branin.db", "--format", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json out = Json::parse(json.out);
  const std::string sampler_error = out["sampler"]["error"].get<std::string>();
  EXPECT_THAT(sampler_error, HasSubstr("sampler.type: unknown type 'tp\\x1b[31me'"));
  EXPECT_EQ(sampler_error.find('\x1b'), std::string::npos) << sampler_error;
  // The whole document's note (its first rule broken is the budget's).
  EXPECT_THAT(out["settings_error"].get<std::string>(), HasSubstr("budget.n_trials: must be > 0"));
  // The text form shows both, escaped.
  ProcessResult text = cli({"status", "branin.db"});
  EXPECT_THAT(text.out, HasSubstr("unknown type 'tp\\x1b[31me'"));
  EXPECT_THAT(text.out, HasSubstr("Settings: the stored settings are not valid: studies row "
                                  "study_id=1: column config_json: budget.n_trials"));
  EXPECT_FALSE(has_raw_control_bytes(text.out)) << text.out;
}

// run on an existing study whose stored settings parse but break a rule
// (a store edited by hand) refuses them as resume does: exit 2, naming the
// row, column, field and rule, the store unchanged; with
// --allow-objective-change it continues with the file's settings, which
// replace them, and says so.
TEST_F(CliTest, RunRefusesStoredSettingsThatBreakARuleUnlessAllowed) {
  dir_.write("space.json", branin_space(2));
  const Json good = Json::parse(branin_space(2));
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"/sampler", R"({"type": "tpe", "n_startup_trials": "Auto"})",
       "sampler.n_startup_trials: must be an integer from 0 to 9223372036854775807 or \"auto\", "
       "got 'Auto'"},
      {"/budget", R"({"n_trials": -5})", "budget.n_trials: must be > 0, got -5"},
      {"/pruner", R"({"type": "median", "n_warmup_steps": -1})", "pruner.n_warmup_steps: "},
  };
  for (const auto& [where, value, rule] : cases) {
    SCOPED_TRACE(where);
    std::filesystem::remove(dir_.file("branin.db"));
    Json doc = good;
    doc[Json::json_pointer(where)] = Json::parse(value);
    make_branin_store(dir_.file("branin.db"), doc, 1);
    const std::string before = testsupport::read_file(dir_.file("branin.db"));
    ProcessResult run = cli({"run", "space.json"});
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_THAT(run.err, HasSubstr("its stored settings are not valid (studies row study_id=1: "
                                   "column config_json: " +
                                   rule));
    EXPECT_THAT(run.err, HasSubstr("nothing was changed"));
    EXPECT_THAT(run.err, HasSubstr("--allow-objective-change"));
    EXPECT_EQ(testsupport::read_file(dir_.file("branin.db")), before)
        << "a refused run changed the store";
  }
  ProcessResult allowed = cli({"run", "space.json", "--allow-objective-change"});
  ASSERT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_THAT(allowed.err, HasSubstr("its stored settings are not valid (studies row study_id=1: "
                                     "column config_json: pruner.n_warmup_steps"));
  EXPECT_THAT(allowed.err, HasSubstr("which replace them"));
  ProcessResult status = cli({"status", "branin.db", "--format", "json"});
  EXPECT_TRUE(Json::parse(status.out)["settings_error"].is_null()) << status.out;
  EXPECT_EQ(Json::parse(status.out)["n_trials"], 2);
}

// A huge name or key from a store edited by hand is cut in an error to its
// first 200 characters and its size ("... (262144 bytes in all)"), the
// rule after it kept; bidirectional overrides and zero-width characters in
// a stored name are escaped (\u202e) in errors, never printed raw.
TEST_F(CliTest, ErrorsCutHugeStoredTextAndEscapeHiddenCharacters) {
  const std::string huge(1 << 18, 'N');
  Json doc = Json::parse(branin_space(2));
  doc["space"][huge] = {{"type", "float"}, {"low", 1}, {"high", 0}};
  make_branin_store(dir_.file("big.db"), doc, 1);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.file("big.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, ("UPDATE studies SET name = '" + huge + "'").c_str(), nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const std::string cut = std::string(200, 'N') + "... (262144 bytes in all)";
  ProcessResult resume = cli({"resume", "big.db"});
  EXPECT_EQ(resume.exit_code, 2);
  EXPECT_LT(resume.err.size(), 2000u);
  EXPECT_THAT(resume.err, HasSubstr("study '" + cut + "': its stored settings are not valid"));
  EXPECT_THAT(resume.err, HasSubstr("column config_json: space[\"" + cut + "\"]: "));
  {
    auto storage = open_storage(dir_.file("big.db"));
    storage->create_study("other", StudyDirection::kMinimize, Json());
  }
  ProcessResult several = cli({"trials", "big.db"});
  EXPECT_EQ(several.exit_code, 2);
  EXPECT_LT(several.err.size(), 1000u);
  EXPECT_THAT(several.err, HasSubstr("several studies ('" + cut + "', 'other'); name one"));

  // U+202E (shows the rest of a line backwards) and U+200B in a stored name.
  {
    auto storage = open_storage(dir_.file("w.db"));
    storage->create_study(
        "a\xe2\x80\xae"
        "b\xe2\x80\x8b",
        StudyDirection::kMinimize, Json());
  }
  ProcessResult best = cli({"best", "w.db"});
  EXPECT_EQ(best.exit_code, 1);
  EXPECT_THAT(best.err, HasSubstr("study 'a\\u202eb\\u200b' has no COMPLETE trial yet"));
  EXPECT_EQ(best.err.find("\xe2\x80"), std::string::npos) << best.err;
  // Every command that prints the name prints it escaped: status, report
  // and export (whose load_study hint is an ASCII Python string).
  ProcessResult status = cli({"status", "w.db"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("Study 'a\\u202eb\\u200b' (minimize)"));
  ProcessResult report = cli({"report", "w.db", "-o", "w.html"});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("(study 'a\\u202eb\\u200b', 0 trials"));
  // The page's title too (the browser tab); its data keeps the name as stored.
  EXPECT_THAT(testsupport::read_file(dir_.file("w.html")),
              HasSubstr("<title>hpsearch report: a\\u202eb\\u200b</title>"));
  ProcessResult exported = cli({"export", "w.db", "--format", "optuna", "-o", "w-optuna.db"});
  EXPECT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_THAT(exported.out, HasSubstr("Wrote study 'a\\u202eb\\u200b' (0 trials)"));
  EXPECT_THAT(exported.out, HasSubstr("study_name=\"a\\u202eb\\u200b\""));
  for (const ProcessResult* r : {&status, &report, &exported})
    EXPECT_EQ((r->out + r->err).find("\xe2\x80"), std::string::npos) << r->out << r->err;
}

// A store edited by hand: settings that name the other direction than the
// study's row are not valid (status names them, resume refuses them), and a
// stored name that breaks the rule of study names is named as the store's
// row and column, not as a --study that was never given.
TEST_F(CliTest, StoredDirectionOrNameEditedByHandAreNamedAsTheStores) {
  Json doc = Json::parse(branin_space(2));
  doc["study"]["direction"] = "maximize";
  make_branin_store(dir_.file("branin.db"), doc, 2);  // the row says minimize
  ProcessResult status = cli({"status", "branin.db", "--format", "json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(Json::parse(status.out)["settings_error"],
            "studies row study_id=1: column config_json: study.direction: says maximize, but "
            "the study was created to minimize");
  const std::string before = testsupport::read_file(dir_.file("branin.db"));
  ProcessResult resume = cli({"resume", "branin.db"});
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_THAT(resume.err, HasSubstr("column config_json: study.direction: says maximize"));
  EXPECT_THAT(resume.err, Not(HasSubstr("the file says")));

  doc["study"]["direction"] = "minimize";
  {
    auto storage = open_storage(dir_.file("named.db"));
    storage->create_study(
        "a\xe2\x80\xae"
        "b",
        StudyDirection::kMinimize, doc);
  }
  resume = cli({"resume", "named.db"});
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_THAT(resume.err,
              HasSubstr("its stored name is not valid (studies row study_id=1: column name: must "
                        "not contain control, bidirectional or zero-width characters (\\u202e "
                        "at byte 1))"));
  EXPECT_THAT(resume.err, Not(HasSubstr("--study")));
  EXPECT_EQ(testsupport::read_file(dir_.file("branin.db")), before);
}

// Every --format json of the read commands is ASCII (ensure_ascii, as
// status): a stored param value or attr holding a C1 control or a
// bidirectional override is written as \uXXXX, and reads back the same.
TEST_F(CliTest, TrialsAndBestJsonAreAscii) {
  const std::string odd = "caf\xc3\xa9 \xc2\x9b\xe2\x80\xae";
  {
    auto storage = open_storage(dir_.file("u.db"));
    const std::int64_t id =
        storage->create_study("\xc3\xa9t\xc3\xa9", StudyDirection::kMinimize, Json());
    NewTrial t;
    t.state = TrialState::kComplete;
    t.params = {{"opt", Json(odd)}};
    t.value = 1.0;
    t.user_attrs = {{"note", odd}};
    storage->create_trial(id, t);
  }
  const auto ascii = [](const std::string& text) {
    for (char c : text)
      if (static_cast<unsigned char>(c) >= 0x80) return false;
    return true;
  };
  for (const std::string command : {"trials", "best"}) {
    SCOPED_TRACE(command);
    ProcessResult r = cli({command, "u.db", "--format", "json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(ascii(r.out)) << r.out;
    EXPECT_THAT(r.out, HasSubstr("caf\\u00e9 \\u009b\\u202e"));
    const Json out = Json::parse(r.out);
    const Json& trial = out.is_array() ? out[0] : out;
    EXPECT_EQ(trial["params"]["opt"], odd);
    EXPECT_EQ(trial["user_attrs"]["note"], odd);
  }
  ProcessResult studies = cli({"studies", "u.db", "--format", "json"});
  EXPECT_TRUE(ascii(studies.out)) << studies.out;
  EXPECT_EQ(Json::parse(studies.out)[0]["name"], "\xc3\xa9t\xc3\xa9");
}

// status resolves the defaults of every sampler as a run uses them: grid's
// max_points (and its seed when set: without one each run draws its own),
// QMC's sequence, scramble and seed (0 without one); and a time budget too
// long to spell (>= 100 years; up to 1.8e308 s is accepted) is shown
// exactly, never as a negative time.
TEST_F(CliTest, StatusResolvesGridAndQmcDefaultsAndShowsAHugeTimeout) {
  Json doc = Json::parse(kBraninSpace);
  const auto status_of = [&](const Json& sampler) {
    auto storage = open_storage(dir_.file("s.db"));
    Json stored = doc;
    stored["sampler"] = sampler;
    if (auto id = storage->find_study("s"))
      storage->set_study_config(*id, stored);
    else
      storage->create_study("s", StudyDirection::kMinimize, stored);
    ProcessResult r = cli({"status", "s.db", "--format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? Json::parse(r.out) : Json();
  };
  EXPECT_EQ(status_of({{"type", "grid"}, {"values", {{"x0", {1, 2}}, {"x1", {3}}}}})["sampler"],
            Json::parse(R"({"type": "grid", "max_points": 1000000,
                            "values": {"x0": [1, 2], "x1": [3]}})"));
  EXPECT_EQ(status_of({{"type", "grid"}, {"seed", 7}, {"max_points", 10}})["sampler"],
            Json::parse(R"({"type": "grid", "max_points": 10, "values": {}, "seed": 7})"));
  EXPECT_EQ(status_of({{"type", "qmc"}})["sampler"],
            Json::parse(R"({"type": "qmc", "sequence": "sobol", "scramble": true, "seed": 0})"));
  EXPECT_EQ(
      status_of(
          {{"type", "qmc"}, {"sequence", "halton"}, {"scramble", false}, {"seed", 3}})["sampler"],
      Json::parse(R"({"type": "qmc", "sequence": "halton", "scramble": false, "seed": 3})"));
  ProcessResult text = cli({"status", "s.db"});
  EXPECT_THAT(text.out, HasSubstr("Sampler: QMC: sequence halton, scramble false, seed 3\n"));

  doc["budget"] = {{"n_trials", 5}, {"timeout_s", 1e20}};
  EXPECT_EQ(status_of({{"type", "random"}})["timeout_s"], 1e20);
  ProcessResult huge = cli({"status", "s.db"});
  ASSERT_EQ(huge.exit_code, 0) << huge.err;
  EXPECT_THAT(huge.out, HasSubstr("; timeout 1e+20s a run"));
  EXPECT_THAT(huge.out, Not(HasSubstr("timeout -")));
}

TEST_F(CliTest, TrialsFiltersSortsLimitsAndStreams) {
  // A store made through the storage API: 40 trials of every state, values
  // with ties, a warm-start copy with the best value.
  {
    auto storage = open_storage(dir_.file("f.db"));
    auto id = storage->create_study("f", StudyDirection::kMaximize, Json());
    for (int i = 0; i < 40; ++i) {
      NewTrial t;
      t.state = static_cast<TrialState>(i % 5);
      t.params = {{"x", Json(0.5 * i)}};
      if (is_finished(t.state)) t.value = static_cast<double>(i % 7);
      if (i == 12) t.system_attrs["warm_start"] = Json{{"storage", "o.db"}, {"study", "o"}};
      if (i == 12) t.value = 100.0;
      storage->create_trial(id, t);
    }
  }
  Json all = trials_or_fail("f.db");
  ASSERT_EQ(all.size(), 40u);
  auto numbers = [](const Json& trials) {
    std::vector<std::int64_t> n;
    for (const auto& t : trials) n.push_back(t["number"].get<std::int64_t>());
    return n;
  };
  auto json_of = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"trials", "f.db", "--format", "json"});
    ProcessResult r = cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? Json::parse(r.out) : Json();
  };
  // --state: one or several states; every key of a trial as without filters.
  Json done = json_of({"--state", "complete,PRUNED"});
  std::vector<std::int64_t> want;
  for (int i = 0; i < 40; ++i)
    if (i % 5 == 2 || i % 5 == 3) want.push_back(i);
  EXPECT_EQ(numbers(done), want);
  EXPECT_EQ(done[0], all[2]);
  // --since N: trials numbered N or higher; --limit N: the first N.
  EXPECT_EQ(numbers(json_of({"--since", "37"})), (std::vector<std::int64_t>{37, 38, 39}));
  EXPECT_EQ(numbers(json_of({"--limit", "2", "--since", "5"})), (std::vector<std::int64_t>{5, 6}));
  EXPECT_EQ(json_of({"--limit", "0"}), Json::array());
  // --sort value: best first (maximize), ties by number, no value last; the
  // warm-start copy is sorted by its value like any trial.
  Json by_value = json_of({"--sort", "value"});
  ASSERT_EQ(by_value.size(), 40u);
  EXPECT_EQ(by_value[0]["number"], 12);
  EXPECT_EQ(by_value[1]["number"], 13);  // value 6: the finished trials 13, 27, 34
  EXPECT_EQ(by_value[2]["number"], 27);
  EXPECT_TRUE(by_value[39]["value"].is_null());
  // The best trial is not the warm-start copy.
  ProcessResult best = cli({"best", "f.db", "--format", "json"});
  ASSERT_EQ(best.exit_code, 0) << best.err;
  EXPECT_EQ(Json::parse(best.out)["number"], 27);
  // Table and CSV with the filters: header, rule, one row per trial.
  ProcessResult table = cli({"trials", "f.db", "--state", "FAIL", "--limit", "3"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  auto table_lines = lines(table.out);
  ASSERT_EQ(table_lines.size(), 5u) << table.out;
  EXPECT_EQ(table_lines[2].substr(0, 6), "     4") << table.out;
  ProcessResult csv = cli({"trials", "f.db", "--format", "csv", "--sort", "value", "--limit", "1"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  auto csv_lines = lines(csv.out);
  ASSERT_EQ(csv_lines.size(), 2u) << csv.out;
  EXPECT_EQ(csv_lines[0], "number,state,value,duration_s,x,worker,fail_reason");
  EXPECT_EQ(csv_lines[1].rfind("12,COMPLETE,100,", 0), 0u) << csv.out;
  // Bad values: exit 2, the message names the flag.
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--limit", "-1"},
                                                        {"--limit", "ten"},
                                                        {"--limit", "+3"},
                                                        {"--limit", " 3"},
                                                        {"--since", "1.5"},
                                                        {"--sort", "loss"},
                                                        {"--state", "COMPLETE,DONE"}}) {
    ProcessResult bad = cli({"trials", "f.db", flag, value});
    EXPECT_EQ(bad.exit_code, 2) << flag << " " << value;
    EXPECT_NE(bad.err.find(flag), std::string::npos) << bad.err;
    if (flag == "--limit" || flag == "--since") {  // the integer flags' one rule
      const std::string rule = value == "-1" ? "must be 0 or a positive integer, got '"
                                             : "must be a whole number (digits only), got '";
      EXPECT_NE(bad.err.find(flag + ": " + rule + value + "'"), std::string::npos) << bad.err;
    }
  }
}

// ------------------------------------------------------------ bad input

TEST_F(CliTest, BadSpaceFilesExitWithCode2AndCreateNothing) {
  struct Case {
    std::string what;
    std::string patch;  // JSON merge patch on kBraninSpace, or raw text if not JSON
    std::string field;  // must appear in the message
  };
  const std::vector<Case> cases = {
      {"invalid JSON", "{\n  \"study\": {\"name\": \"b\"},\n  \"space\": {,\n}",
       "line 3, column 13"},
      {"unknown key", R"({"spce": {}})", "spce"},
      {"unknown nested key", R"({"budget": {"n_trial": 3}})", "budget.n_trial"},
      {"bad distribution",
       R"({"space": {"lr": {"type": "float", "low": 0, "high": 1, "log": true}}})", "space.lr.low"},
      {"bad distribution type", R"({"space": {"lr": {"type": "flaot", "low": 0, "high": 1}}})",
       "space.lr.type"},
      {"bad condition",
       R"({"space": {"m": {"type": "float", "low": 0, "high": 1, "when": {"opt": "sgd"}}}})",
       "space.m.when.opt"},
      {"missing objective", R"({"objective": null})", "objective"},
      {"unknown objective type", R"({"objective": {"type": "no-such-objective"}})",
       "objective.type"},
      {"unknown sampler type", R"({"sampler": {"type": "gird"}})", "sampler.type"},
      {"grid of a continuous param", R"({"sampler": {"type": "grid"}})", "sampler.values.x0"},
      {"grid value off the param", R"({"sampler": {"type": "grid", "values": {"x0": [99.0]}}})",
       "sampler.values.x0"},
      {"bad sampler seed", R"({"sampler": {"seed": "one"}})", "sampler.seed"},
      {"unknown pruner type", R"({"pruner": {"type": "sometimes"}})", "pruner.type"},
      {"bad budget", R"({"budget": {"n_trials": 0}})", "budget.n_trials"},
      {"bad budget type", R"({"budget": {"timeout_s": "1h"}})", "budget.timeout_s"},
      {"bad direction", R"({"study": {"direction": "down"}})", "study.direction"},
      {"missing space", R"({"space": null})", "space"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::string text;
    Json patch = Json::parse(c.patch, nullptr, false);
    if (patch.is_discarded()) {
      text = c.patch;
    } else {
      Json doc = Json::parse(kBraninSpace);
      doc.merge_patch(patch);
      text = doc.dump(2);
    }
    dir_.write("space.json", text);
    ProcessResult r = cli({"run", "space.json"});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(c.field), std::string::npos) << "stderr lacks '" << c.field << "':\n"
                                                      << r.err;
    EXPECT_EQ(other_files({"space.json"}), std::set<std::string>{})
        << "a bad space.json created files";
  }
  ProcessResult missing = cli({"run", "does-not-exist.json"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("does-not-exist.json"), std::string::npos) << missing.err;
  EXPECT_EQ(other_files({"space.json"}), std::set<std::string>{});
}

TEST_F(CliTest, BadArgumentsExitWithCode2) {
  dir_.write("space.json", kBraninSpace);
  EXPECT_EQ(cli({}).exit_code, 2);
  EXPECT_EQ(cli({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(cli({"run"}).exit_code, 2);
  ProcessResult zero = cli({"run", "space.json", "--n-trials", "0"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--n-trials"), std::string::npos) << zero.err;
  EXPECT_EQ(cli({"run", "space.json", "--timeout", "-1"}).exit_code, 2);
  EXPECT_EQ(cli({"run", "space.json", "--workers", "-1"}).exit_code, 2);
  EXPECT_EQ(cli({"run", "space.json", "--n-trials", "many"}).exit_code, 2);
  EXPECT_EQ(other_files({"space.json"}), std::set<std::string>{});
  EXPECT_EQ(cli({"trials", "x.db", "--format", "xml"}).exit_code, 2);
  EXPECT_EQ(cli({"--version"}).exit_code, 0);
  EXPECT_EQ(cli({"--help"}).exit_code, 0);
}

// Flags are named as the user typed them, with the rule; a store that is a
// folder or not SQLite is bad input (exit 2) for every command, like a bad
// flag; a --bind this machine cannot bind leaves no study behind.
TEST_F(CliTest, BadFlagsAndStoresExitWith2NamingThemAndWriteNothing) {
  dir_.write("space.json", kBraninSpace);
  const std::set<std::string> inputs = {"space.json", "text.db", "folder.db"};
  dir_.write("text.db", "this is a text file, not a SQLite database\n");
  std::filesystem::create_directory(dir_.file("folder.db"));

  ProcessResult max_workers = cli({"run", "space.json", "--max-workers", "0"});
  EXPECT_EQ(max_workers.exit_code, 2);
  EXPECT_THAT(max_workers.err, HasSubstr("--max-workers: must be >= 1"));
  EXPECT_THAT(max_workers.err, Not(HasSubstr("coordinator.")));

  ProcessResult gpus = cli({"run", "space.json", "--gpus", "abc"});
  EXPECT_EQ(gpus.exit_code, 2);
  EXPECT_THAT(gpus.err, HasSubstr("--gpus: entry 'abc' is not a GPU index (0, 1, ...) or UUID"));
  EXPECT_EQ(cli({"run", "space.json", "--gpus", "0,x1"}).exit_code, 2);

  for (const std::string store : {"text.db", "folder.db"}) {
    SCOPED_TRACE(store);
    const std::string rule =
        store == "text.db" ? "is not a SQLite database" : "is not a regular file";
    ProcessResult run = cli({"run", "space.json", "--storage", store});
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_THAT(run.err, HasSubstr("--storage: " + rule));
    ProcessResult resume = cli({"resume", store});
    EXPECT_EQ(resume.exit_code, 2) << resume.err;
    EXPECT_THAT(resume.err, HasSubstr("STORAGE: " + rule));
    for (const std::string command : {"trials", "best", "status", "studies"}) {
      ProcessResult read = cli({command, store});
      EXPECT_EQ(read.exit_code, 2) << command << ": " << read.err;
      EXPECT_THAT(read.err, HasSubstr(rule)) << command;
    }
  }
  EXPECT_EQ(testsupport::read_file(dir_.file("text.db")),
            "this is a text file, not a SQLite database\n");

  // An address of no interface here (TEST-NET-1, RFC 5737).
  ProcessResult bind =
      cli({"run", "space.json", "--workers", "0", "--bind", "tcp://192.0.2.1:5555", "--insecure"});
  EXPECT_EQ(bind.exit_code, 2) << bind.err;
  EXPECT_THAT(bind.err, HasSubstr("--bind: cannot bind 'tcp://192.0.2.1:5555'"));
  // An endpoint of no scheme ZeroMQ binds, or a port out of range: named as
  // --bind with the forms it takes (it was named coordinator.endpoint).
  ProcessResult scheme = cli({"run", "space.json", "--workers", "0", "--bind", "foo://x"});
  EXPECT_EQ(scheme.exit_code, 2) << scheme.err;
  EXPECT_THAT(scheme.err,
              HasSubstr("hpsearch: error: --bind: must be tcp://HOST:PORT (for workers on other "
                        "machines, e.g. tcp://0.0.0.0:5555; PORT 0 or *: any free port) or "
                        "ipc://PATH (for workers on this machine), got 'foo://x'"));
  ProcessResult port = cli({"run", "space.json", "--bind", "tcp://127.0.0.1:99999", "--insecure"});
  EXPECT_EQ(port.exit_code, 2) << port.err;
  EXPECT_THAT(port.err, HasSubstr("--bind: the port must be a number in [0, 65535] or * (0 and "
                                  "*: any free port), got 'tcp://127.0.0.1:99999'"));
  for (const ProcessResult* r : {&scheme, &port})
    EXPECT_THAT(r->err, Not(HasSubstr("coordinator.endpoint")));
  EXPECT_EQ(other_files(inputs), std::set<std::string>{}) << "a refused run left files";
}

// A store this hpsearch may not open as it is, a schema newer than this
// build's or a SQLite database of another program, is refused as bad input
// (exit 2, as a folder or a text file is), by run, resume and the read
// commands, naming the file and the rule; the file is left as it was.
TEST_F(CliTest, AStoreOfANewerSchemaOrOfAnotherProgramIsRefusedWithExit2) {
  dir_.write("space.json", branin_space(2));
  ASSERT_EQ(cli({"run", "space.json"}).exit_code, 0);
  const auto exec = [&](const std::string& file, const char* sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir_.file(file).c_str(), &db), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  };
  exec("branin.db", "PRAGMA user_version = 99");
  exec("other.db", "CREATE TABLE t(x); INSERT INTO t VALUES (1)");
  const std::string newer_before = testsupport::read_file(dir_.file("branin.db"));
  for (const auto& [store, rule] :
       {std::pair<std::string, std::string>{"branin.db",
                                            "branin.db: schema version 99 is newer than this "
                                            "hpsearch supports"},
        {"other.db", "other.db: is a SQLite database of another program"}}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"run", "space.json", "--storage", store},
          {"resume", store},
          {"trials", store},
          {"best", store},
          {"status", store}}) {
      ProcessResult r = cli(args);
      EXPECT_EQ(r.exit_code, 2) << args[0] << " " << store << ": " << r.err;
      EXPECT_THAT(r.err, HasSubstr(rule)) << args[0];
    }
  }
  EXPECT_EQ(testsupport::read_file(dir_.file("branin.db")), newer_before);
}

// Mistakes of a new user, each refused with exit 2 naming the flag and the
// rule, before anything is made: an empty --storage, one in a missing
// folder, more --workers than --max-workers admits; CLI11's own parse
// errors start as ours do ("hpsearch: error: ").
TEST_F(CliTest, StoragePathsWorkerCountsAndParseErrorsAreNamedWithExit2) {
  dir_.write("space.json", kBraninSpace);
  ProcessResult empty = cli({"run", "space.json", "--storage", ""});
  EXPECT_EQ(empty.exit_code, 2) << empty.err;
  EXPECT_THAT(empty.err, HasSubstr("hpsearch: error: --storage: must not be empty"));
  ProcessResult nodir = cli({"run", "space.json", "--storage", "nodir/x.db"});
  EXPECT_EQ(nodir.exit_code, 2) << nodir.err;
  EXPECT_THAT(nodir.err,
              HasSubstr("--storage: the folder 'nodir' does not exist (hpsearch makes the store, "
                        "not its folder: create the folder first): nodir/x.db"));
  ProcessResult too_many = cli({"run", "space.json", "--workers", "3000"});
  EXPECT_EQ(too_many.exit_code, 2) << too_many.err;
  EXPECT_THAT(too_many.err,
              HasSubstr("--workers: must be <= --max-workers (1024, the most workers connected "
                        "at once), got 3000"));
  EXPECT_EQ(cli({"run", "space.json", "--workers", "3", "--max-workers", "2"}).exit_code, 2);
  ProcessResult unknown = cli({"run", "space.json", "--no-such-flag"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_EQ(unknown.err.rfind("hpsearch: error: ", 0), 0u) << unknown.err;
  EXPECT_THAT(unknown.err, HasSubstr("--no-such-flag"));
  ProcessResult bad_number = cli({"run", "space.json", "--workers", "two"});
  EXPECT_EQ(bad_number.exit_code, 2) << bad_number.err;
  EXPECT_EQ(bad_number.err.rfind("hpsearch: error: ", 0), 0u) << bad_number.err;
  EXPECT_THAT(bad_number.err, HasSubstr("must be a whole number (digits only), got 'two'"));
  // An unknown command is named (not "A subcommand is required"), with the
  // nearest one and the list.
  ProcessResult bogus = cli({"bogus"});
  EXPECT_EQ(bogus.exit_code, 2) << bogus.err;
  EXPECT_THAT(bogus.err, HasSubstr("hpsearch: error: unknown command 'bogus'; commands: run, "
                                   "resume, worker, keys, best,"));
  ProcessResult typo = cli({"--log-level", "warn", "rsume", "x.db"});
  EXPECT_EQ(typo.exit_code, 2) << typo.err;
  EXPECT_THAT(typo.err, HasSubstr("unknown command 'rsume' (did you mean 'resume'?)"));
  EXPECT_THAT(cli({}).err, HasSubstr("hpsearch: error: a command is required"));
  // An empty store path is said to be empty, not missing.
  for (const std::string command : {"resume", "best"}) {
    ProcessResult empty_store = cli({command, ""});
    EXPECT_EQ(empty_store.exit_code, 2) << command << ": " << empty_store.err;
    EXPECT_THAT(empty_store.err, HasSubstr("STORAGE: must not be empty (name a SQLite file"))
        << command;
  }
  // A near miss of a direction gets a hint.
  Json british = Json::parse(kBraninSpace);
  british["study"]["direction"] = "minimise";
  dir_.write("british.json", british.dump());
  ProcessResult minimise = cli({"run", "british.json"});
  EXPECT_EQ(minimise.exit_code, 2) << minimise.err;
  EXPECT_THAT(minimise.err, HasSubstr("study.direction: must be \"minimize\" or \"maximize\", got "
                                      "\"minimise\" (did you mean \"minimize\"?)"));
  EXPECT_EQ(other_files({"space.json", "british.json"}), std::set<std::string>{})
      << "a refused run left files";
}

// --workers 0 without --bind is refused (exit 2, nothing made): no worker
// could ever join (it waited for ever on a private ipc socket); so is
// resume --workers 0 of a study run without --bind.
TEST_F(CliTest, RemoteWorkersOnlyNeedsBind) {
  dir_.write("space.json", kBraninSpace);
  const std::string remote_only =
      "hpsearch: error: --workers: 0 (remote workers only) needs --bind, so that remote workers "
      "can join (e.g. --bind tcp://0.0.0.0:5555 --keys KEYS, then `hpsearch worker --connect "
      "tcp://HOST:5555 --keys KEYS/worker-N` on each worker's machine); without --bind the "
      "coordinator listens only on a private ipc socket for the workers it starts itself\n";
  ProcessResult no_bind = cli({"run", "space.json", "--workers", "0", "--timeout", "5"});
  EXPECT_EQ(no_bind.exit_code, 2) << no_bind.err;
  EXPECT_THAT(no_bind.err, HasSubstr(remote_only));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("branin.db"))) << "a refused run made the store";
  ASSERT_EQ(cli({"run", "space.json", "--n-trials", "1"}).exit_code, 0);
  ProcessResult resume_no_bind = cli({"resume", "branin.db", "--workers", "0", "--timeout", "5"});
  EXPECT_EQ(resume_no_bind.exit_code, 2) << resume_no_bind.err;
  EXPECT_THAT(resume_no_bind.err, HasSubstr(remote_only));
}

// A command line that lacks something says what (a command, a command's
// argument, option or subcommand) and shows the usage, as git does: the
// commands with what each does, or the command's arguments and options;
// exit 2.
TEST_F(CliTest, AMissingCommandOrArgumentIsNamedWithTheUsage) {
  ProcessResult none = cli({});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_EQ(none.err.rfind("hpsearch: error: a command is required\n", 0), 0u) << none.err;
  EXPECT_THAT(none.err, HasSubstr("Usage: hpsearch [OPTIONS] SUBCOMMAND"));
  EXPECT_THAT(none.err, HasSubstr("Continue a study from the settings stored with it"));  // resume
  ProcessResult run = cli({"run"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.err.rfind("hpsearch: error: run: the argument 'space' is missing (space.json "
                          "file)\n",
                          0),
            0u)
      << run.err;
  EXPECT_THAT(run.err, HasSubstr("Usage: hpsearch run [OPTIONS] space"));
  EXPECT_THAT(run.err, HasSubstr("--workers"));
  ProcessResult worker = cli({"worker"});
  EXPECT_EQ(worker.exit_code, 2) << worker.err;
  EXPECT_THAT(worker.err, HasSubstr("hpsearch: error: worker: the option '--connect' is missing"));
  ProcessResult keys = cli({"keys"});
  EXPECT_EQ(keys.exit_code, 2) << keys.err;
  EXPECT_THAT(keys.err, HasSubstr("hpsearch: error: keys: a command is required"));
  EXPECT_THAT(keys.err, HasSubstr("Usage: hpsearch keys [OPTIONS] SUBCOMMAND"));
  EXPECT_EQ(other_files({}), std::set<std::string>{});
}

// An option a command does not know gets the nearest option of that
// command (nearest_name's rule, as for commands and keys), exit 2, nothing
// made; an extra argument that is no option keeps CLI11's message.
TEST_F(CliTest, AMisspeltOptionIsNamedWithTheNearestOptionOfItsCommand) {
  dir_.write("space.json", kBraninSpace);
  ProcessResult wrkers = cli({"run", "space.json", "--wrkers", "2"});
  EXPECT_EQ(wrkers.exit_code, 2) << wrkers.err;
  EXPECT_THAT(wrkers.err, HasSubstr("hpsearch: error: run: unknown option '--wrkers' (did you "
                                    "mean '--workers'?); see 'hpsearch run --help'"));
  ProcessResult joined = cli({"resume", "x.db", "--n-trial=3"});
  EXPECT_EQ(joined.exit_code, 2) << joined.err;
  EXPECT_THAT(joined.err, HasSubstr("resume: unknown option '--n-trial' (did you mean "
                                    "'--n-trials'?)"));
  ProcessResult format = cli({"best", "x.db", "--formt", "json"});
  EXPECT_EQ(format.exit_code, 2) << format.err;
  EXPECT_THAT(format.err, HasSubstr("best: unknown option '--formt' (did you mean '--format'?)"));
  ProcessResult far = cli({"run", "space.json", "--frobnicate"});
  EXPECT_EQ(far.exit_code, 2) << far.err;
  EXPECT_THAT(far.err, HasSubstr("run: unknown option '--frobnicate'; see"));
  ProcessResult extra = cli({"run", "space.json", "other.json"});
  EXPECT_EQ(extra.exit_code, 2) << extra.err;
  EXPECT_THAT(extra.err, HasSubstr("The following argument was not expected: other.json"));
  EXPECT_EQ(other_files({"space.json"}), std::set<std::string>{});
}

// A study keeps its direction and its objective: running the file again
// with another direction, or another objective section, is refused (exit
// 2, naming study.direction, or objective and the changed field) and the
// study is left as it was; --allow-objective-change continues it with the
// new objective after a warning, and stores it.
TEST_F(CliTest, AnotherDirectionOrObjectiveForAnExistingStudyIsRefused) {
  dir_.write("space.json", branin_space(3));
  ProcessResult first = cli({"run", "space.json"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  Json doc = Json::parse(branin_space(6));
  doc["study"]["direction"] = "maximize";
  dir_.write("space.json", doc.dump());
  ProcessResult direction = cli({"run", "space.json"});
  EXPECT_EQ(direction.exit_code, 2) << direction.err;
  EXPECT_THAT(direction.err,
              HasSubstr("study.direction: study 'branin' in branin.db was created to minimize, "
                        "the file says maximize"));
  EXPECT_EQ(trials_or_fail("branin.db").size(), 3u);

  doc["study"]["direction"] = "minimize";
  doc["objective"] = {{"type", "hartmann6"}};
  doc["space"] = Json::object();
  for (int i = 0; i < 6; ++i)
    doc["space"]["x" + std::to_string(i)] = {{"type", "float"}, {"low", 0}, {"high", 1}};
  dir_.write("space.json", doc.dump());
  ProcessResult objective = cli({"run", "space.json"});
  EXPECT_EQ(objective.exit_code, 2) << objective.err;
  EXPECT_THAT(objective.err, HasSubstr("objective: differs from the objective stored with study "
                                       "'branin' in branin.db (objective.type: 'branin' -> "
                                       "'hartmann6')"));
  EXPECT_THAT(objective.err, HasSubstr("--allow-objective-change"));
  EXPECT_EQ(trials_or_fail("branin.db").size(), 3u);
  ProcessResult status = cli({"status", "branin.db"});
  EXPECT_THAT(status.out, HasSubstr("of 3")) << status.out;  // the stored settings are kept

  ProcessResult allowed = cli({"run", "space.json", "--allow-objective-change"});
  ASSERT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_THAT(allowed.err, HasSubstr("the objective differs from the one stored with the study "
                                     "(objective.type: 'branin' -> 'hartmann6')"));
  EXPECT_EQ(trials_or_fail("branin.db").size(), 6u);
  // The new objective is the study's now.
  ProcessResult again = cli({"run", "space.json", "--n-trials", "7"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, Not(HasSubstr("objective differs")));
}

// The fields of a changed objective are listed in key order (a field the
// file adds among those it changes), whatever order the store kept them in.
TEST_F(CliTest, ChangedObjectiveFieldsAreListedInKeyOrder) {
  Json doc = Json::parse(sleep_space(0, 1));
  doc["objective"] = {{"type", "sleep"}, {"steps", 1}};
  dir_.write("space.json", doc.dump());
  ASSERT_EQ(cli({"run", "space.json"}).exit_code, 0);
  doc["objective"] = {{"type", "sleep"}, {"steps", 2}, {"seconds", 0}};
  dir_.write("space.json", doc.dump());
  ProcessResult changed = cli({"run", "space.json"});
  EXPECT_EQ(changed.exit_code, 2) << changed.err;
  EXPECT_THAT(changed.err, HasSubstr("(objective.seconds: added (0); objective.steps: 1 -> 2)"));
}

// A named objective.checkpoint_dir that breaks the owner-only rule (a
// folder others can write, a link, another user's folder) is refused when
// the run starts, exit 2 naming the field, before any worker starts or the
// study is stored (it was a FAIL of the first trial, the study left in the
// store).
TEST_F(CliTest, ACheckpointDirBreakingTheOwnerRuleIsRefusedBeforeTheRun) {
  namespace fs = std::filesystem;
  if (!fs::exists(fs::path(HPSEARCH_CLI_PATH).parent_path() / "hpsearch-torch"))
    GTEST_SKIP() << "built without LibTorch: no hpsearch-torch";
  const std::set<std::string> inputs = {"space.json", "shared", "mine", "link", "theirs"};
  const auto refused = [&](const std::string& folder, const std::string& rule) {
    SCOPED_TRACE(folder);
    const Json space = {
        {"study", {{"name", "ckpt"}, {"direction", "minimize"}, {"storage", "ckpt.db"}}},
        {"budget", {{"n_trials", 1}}},
        {"objective",
         {{"type", "torch.fashion_mnist"}, {"max_epochs", 1}, {"checkpoint_dir", folder}}},
        {"space", {{"lr", {{"type", "float"}, {"low", 0.001}, {"high", 0.1}, {"log", true}}}}}};
    dir_.write("space.json", space.dump());
    ProcessResult r = cli({"run", "space.json", "--workers", "1"});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("objective.checkpoint_dir: " + folder + ": " + rule));
    EXPECT_THAT(r.err, HasSubstr("set objective.checkpoint_dir to a folder only you can write"));
    EXPECT_EQ(other_files(inputs), std::set<std::string>{}) << "a refused run left files";
  };
  fs::create_directory(dir_.file("shared"));
  fs::permissions(dir_.file("shared"), fs::perms::all);
  refused(dir_.file("shared"), "writable by group or others (mode 0777)");
  fs::create_directory(dir_.file("mine"));
  fs::permissions(dir_.file("mine"), fs::perms::owner_all);
  fs::create_directory_symlink(dir_.file("mine"), dir_.file("link"));
  refused(dir_.file("link"), "is a symbolic link");
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot make a folder of another uid";
  fs::create_directory(dir_.file("theirs"));
  fs::permissions(dir_.file("theirs"), fs::perms::owner_all);
  ASSERT_EQ(::chown(dir_.file("theirs").c_str(), 4242, 4242), 0);
  refused(dir_.file("theirs"), "owned by uid 4242, not by this user");
}

// ------------------------------------------------------------ resume

TEST_F(CliTest, RunningTwiceCompletesOnlyTheRemainingBudget) {
  dir_.write("space.json", branin_space(10));
  ProcessResult first = cli({"run", "space.json", "--n-trials", "4"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(trials_or_fail("branin.db").size(), 4u);
  ProcessResult second = cli({"run", "space.json"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  Json trials = trials_or_fail("branin.db");
  ASSERT_EQ(trials.size(), 10u);
  EXPECT_EQ(count_if(trials, is_complete), 10);
  expect_consistent(trials);
  // The second run continued the seeded sequence; it did not start it over.
  std::set<std::string> params;
  for (const auto& t : trials)
    EXPECT_TRUE(params.insert(t["params"].dump()).second) << "repeated: " << t.dump();
  ProcessResult third = cli({"run", "space.json"});
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(trials_or_fail("branin.db").size(), 10u);
  EXPECT_NE(third.out.find("already"), std::string::npos) << third.out;
  // The run that had nothing to do is recorded as ended by its budget.
  ProcessResult status = cli({"status", "branin.db"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr(", budget reached; ")) << status.out;
  EXPECT_THAT(status.out, Not(HasSubstr("coordinator exited"))) << status.out;
  // Several workers share the budget the same way.
  ProcessResult more = cli({"run", "space.json", "--n-trials", "30", "--workers", "4"});
  ASSERT_EQ(more.exit_code, 0) << more.err;
  trials = trials_or_fail("branin.db");
  EXPECT_EQ(trials.size(), 30u);
  expect_consistent(trials);
}

// The budget given on the command line is stored with the study: status
// shows it (the trials and the time a run, --timeout) and resume continues
// with it, not with the file's.
TEST_F(CliTest, ResumeKeepsTheCommandLineBudget) {
  dir_.write("space.json", branin_space(3));
  ProcessResult first = cli({"run", "space.json", "--n-trials", "6", "--timeout", "90"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(trials_or_fail("branin.db").size(), 6u);
  ProcessResult status = cli({"status", "branin.db"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("; finished 6 of 6; timeout 1m30s a run\n")) << status.out;
  // A timeout under a second is shown as set (0.15 s was shown as 0.1s).
  ASSERT_EQ(
      cli({"run", "space.json", "--storage", "short.db", "--n-trials", "2", "--timeout", "0.15"})
          .exit_code,
      0);
  ProcessResult short_status = cli({"status", "short.db"});
  ASSERT_EQ(short_status.exit_code, 0) << short_status.err;
  EXPECT_THAT(short_status.out, HasSubstr("; timeout 0.15s a run\n")) << short_status.out;
  ProcessResult status_json = cli({"status", "branin.db", "--format", "json"});
  ASSERT_EQ(status_json.exit_code, 0) << status_json.err;
  const Json shown = Json::parse(status_json.out, nullptr, false);
  EXPECT_EQ(shown.value("n_trials", Json()), Json(6)) << status_json.out;
  EXPECT_EQ(shown.value("timeout_s", Json()), Json(90.0)) << status_json.out;
  ProcessResult again = cli({"resume", "branin.db"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("Budget of 6 trials already reached"), std::string::npos) << again.out;
  ProcessResult more = cli({"resume", "branin.db", "--n-trials", "8"});
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_EQ(trials_or_fail("branin.db").size(), 8u);
  ProcessResult last = cli({"resume", "branin.db"});
  ASSERT_EQ(last.exit_code, 0) << last.err;
  EXPECT_NE(last.out.find("Budget of 8 trials already reached"), std::string::npos) << last.out;
}

// A resumed run estimates the time left from its own trials: none before
// one of them finished (it printed "~0.0s left" at its start, the earlier
// runs' trials counted over none of its time), then one.
TEST_F(CliTest, ResumeShowsNoEstimateBeforeATrialOfItsOwnEnds) {
  dir_.write("space.json", sleep_space(0.5, 2, 1));
  ASSERT_EQ(cli({"run", "space.json", "--workers", "1"}).exit_code, 0);
  ProcessResult resumed = cli({"resume", "slow.db", "--n-trials", "6"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  bool first = true, estimated = false;
  for (const std::string& line : lines(resumed.out)) {
    if (line.find(" trials done | ") == std::string::npos) continue;
    if (first) {
      EXPECT_THAT(line, HasSubstr("] 2/6 trials done | best "));
      EXPECT_THAT(line, Not(HasSubstr(" left"))) << resumed.out;
      first = false;
    } else if (line.find(" left") != std::string::npos) {
      estimated = true;
    }
  }
  EXPECT_FALSE(first) << "no progress line: " << resumed.out;
  EXPECT_TRUE(estimated) << "no estimate once trials of the run ended: " << resumed.out;
}

TEST_F(CliTest, ResumeStartsAsManyWorkersAsTheLastRun) {
  dir_.write("space.json", branin_space(3));
  ProcessResult first = cli({"run", "space.json", "--n-trials", "4", "--workers", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE((first.out + first.err).find("starting 2 workers"), std::string::npos)
      << first.out << first.err;
  ProcessResult kept = cli({"resume", "branin.db", "--n-trials", "6"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_NE((kept.out + kept.err).find("resume: 2 workers (local), as the last run"),
            std::string::npos)
      << kept.out << kept.err;
  EXPECT_NE((kept.out + kept.err).find("starting 2 workers"), std::string::npos)
      << kept.out << kept.err;
  // --workers wins, and is what the next resume keeps.
  ProcessResult one = cli({"resume", "branin.db", "--n-trials", "7", "--workers", "1"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ((one.out + one.err).find("as the last run"), std::string::npos) << one.out << one.err;
  EXPECT_NE((one.out + one.err).find("starting 1 worker ("), std::string::npos)
      << one.out << one.err;
  ProcessResult again = cli({"resume", "branin.db", "--n-trials", "8"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE((again.out + again.err).find("resume: 1 worker (local), as the last run"),
            std::string::npos)
      << again.out << again.err;
  EXPECT_EQ(trials_or_fail("branin.db").size(), 8u);
}

// A run refused for a bad option writes nothing: no new file, and an
// existing study keeps its stored budget.
TEST_F(CliTest, RefusedRunLeavesTheStoreAlone) {
  dir_.write("space.json", branin_space(3));
  ProcessResult bad_new =
      cli({"run", "space.json", "--workers", "0", "--bind", "tcp://127.0.0.1:99999"});
  EXPECT_EQ(bad_new.exit_code, 2) << bad_new.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("branin.db")));
  ProcessResult first = cli({"run", "space.json"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"resume", "branin.db", "--n-trials", "50", "--bind",
                                 "tcp://127.0.0.1:99999"},
        std::vector<std::string>{"resume", "branin.db", "--n-trials", "50", "--workers",
                                 "100000"}}) {
    ProcessResult r = cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
  }
  ProcessResult status = cli({"status", "branin.db"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("of 3"), std::string::npos) << status.out;
  EXPECT_EQ(trials_or_fail("branin.db").size(), 3u);
}

// A command objective's relative cwd that is not a folder from where
// hpsearch runs (e.g. `resume` started in another folder) is refused before
// anything runs: no trial FAILs and uses up the budget.
TEST_F(CliTest, ACwdThatIsNotAFolderHereIsRefusedBeforeAnyTrial) {
  std::filesystem::create_directories(dir_.file("work"));
  const Json space = {
      {"study", {{"name", "cwd"}, {"direction", "minimize"}, {"storage", "cwd.db"}}},
      {"space", {{"lr", {{"type", "float"}, {"low", 0.001}, {"high", 0.1}}}}},
      {"budget", {{"n_trials", 2}}},
      {"objective",
       {{"type", "command"},
        {"cwd", "work"},
        {"argv", {"/bin/sh", "-c", "echo 'hpsearch: {{\"value\": 1}}'"}}}}};
  dir_.write("space.json", space.dump());
  ProcessResult first = cli({"run", "space.json", "--workers", "1"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // From another folder, where "work" is not there.
  std::filesystem::create_directories(dir_.file("elsewhere"));
  ProcessResult resumed = testsupport::run_process(
      {HPSEARCH_CLI_PATH, "resume", dir_.file("cwd.db"), "--n-trials", "4"},
      dir_.file("elsewhere"));
  EXPECT_EQ(resumed.exit_code, 2) << resumed.out << resumed.err;
  EXPECT_NE(resumed.err.find("objective.cwd: 'work' is not a directory under the current one"),
            std::string::npos)
      << resumed.err;
  Json trials = trials_or_fail("cwd.db");
  ASSERT_EQ(trials.size(), 2u);
  for (const auto& t : trials) EXPECT_EQ(t["state"], "COMPLETE") << t.dump();
}

// A queued trial (enqueued, or queued again after an interruption) lists
// the params it will run with, in the table and in CSV.
TEST_F(CliTest, QueuedTrialsShowTheParamsTheyWillRunWith) {
  {
    auto storage = std::make_shared<SqliteStorage>(dir_.file("q.db"));
    StudyOptions options;
    options.space = SearchSpace::from_json(
        Json::parse(R"({"lr": {"type": "float", "low": 0.001, "high": 0.1}})"));
    Study study = Study::create(storage, "q", StudyDirection::kMinimize, options);
    study.enqueue_trial({{"lr", 0.0625}});
  }
  for (const char* format : {"table", "csv"}) {
    ProcessResult r = cli({"trials", "q.db", "--format", format});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("WAITING"), std::string::npos) << format << ": " << r.out;
    EXPECT_NE(r.out.find("0.0625"), std::string::npos) << format << ": " << r.out;
  }
}

TEST_F(CliTest, Kill9ThenRerunLosesNothing) {
  // Long enough that the kill comes well before the end of the budget.
  const int budget = 30;
  dir_.write("space.json", sleep_space(0.2, budget));
  Json before;
  {
    auto run = cli_background({"run", "space.json"}, "run1");
    ASSERT_TRUE(wait_until([&] {
      Json t = trials_json("slow.db");
      return t.is_array() && count_if(t, is_complete) >= 3;
    })) << "no progress";
    run->send_signal(SIGKILL);
    ProcessResult r = run->wait();
    EXPECT_EQ(r.signal, SIGKILL);
    before = trials_or_fail("slow.db");
  }
  ASSERT_GE(count_if(before, is_complete), 3);
  ASSERT_LT(count_if(before, counts_as_finished), budget);

  ProcessResult again = cli({"run", "space.json"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  Json after = trials_or_fail("slow.db");
  expect_consistent(after);
  EXPECT_EQ(count_if(after, counts_as_finished), budget);
  // Every COMPLETE trial before the kill is unchanged ...
  for (const auto& t : before) {
    if (!is_complete(t)) continue;
    const Json& now = after[t["number"].get<std::size_t>()];
    EXPECT_EQ(now["state"], "COMPLETE");
    EXPECT_EQ(now["value"], t["value"]);
    EXPECT_EQ(now["params"], t["params"]);
  }
  // ... and was not run again: retries only repeat trials that did not finish.
  std::set<std::string> complete_params;
  for (const auto& t : after) {
    if (t["system_attrs"].contains("retry_of")) {
      const Json& original = after[t["system_attrs"]["retry_of"].get<std::size_t>()];
      EXPECT_EQ(original["state"], "FAIL") << t.dump();
      EXPECT_EQ(original["system_attrs"]["retried_as"], t["number"]);
      EXPECT_EQ(t["params"], original["params"]) << "a retry must reuse the params";
    }
    if (is_complete(t)) {
      EXPECT_TRUE(complete_params.insert(t["params"].dump()).second) << "run twice: " << t.dump();
    }
    EXPECT_NE(t["state"], "WAITING");
  }
  // The trial that was running at the kill was failed and queued again.
  for (const auto& t : before) {
    if (t["state"] != "RUNNING") continue;
    const Json& now = after[t["number"].get<std::size_t>()];
    EXPECT_EQ(now["state"], "FAIL");
    EXPECT_TRUE(now["system_attrs"].contains("retried_as")) << now.dump();
  }
}

TEST_F(CliTest, ReadersWhileOneProcessWrites) {
  const int budget = 80;
  dir_.write("space.json", sleep_space(0.05, budget));
  auto run = cli_background({"run", "space.json", "--workers", "2"}, "writer");
  ASSERT_TRUE(wait_until([&] {
    Json t = trials_json("slow.db");
    return t.is_array() && !t.empty();
  }));
  std::atomic<bool> done{false};
  std::vector<std::string> problems[2];
  int reads[2] = {0, 0};
  auto reader = [&](int k) {
    do {
      const char* cmd = reads[k] % 2 ? "studies" : "trials";
      ProcessResult r = cli({cmd, "slow.db", "--format", "json"});
      ++reads[k];
      if (r.exit_code != 0 || r.err.find("locked") != std::string::npos ||
          Json::parse(r.out, nullptr, false).is_discarded())
        problems[k].push_back(std::string(cmd) + " exit " + std::to_string(r.exit_code) + ": " +
                              r.err);
    } while (!done);
  };
  std::thread a(reader, 0), b(reader, 1);
  ProcessResult w = run->wait();
  done = true;
  a.join();
  b.join();
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_EQ(w.err.find("locked"), std::string::npos) << w.err;
  for (int k = 0; k < 2; ++k) {
    EXPECT_GT(reads[k], 0);
    EXPECT_TRUE(problems[k].empty())
        << problems[k].size() << " failed reads, first: " << problems[k][0];
  }
  Json trials = trials_or_fail("slow.db");
  EXPECT_EQ(trials.size(), static_cast<std::size_t>(budget));
  expect_consistent(trials);
}

// A hang-up (the ssh session on a login node dropped) stops the run as
// SIGTERM does: interrupted, trials queued again, the study resumable.
TEST_F(CliTest, SighupStopsAsInterruptedAndRerunResumes) {
  const int budget = 30;
  dir_.write("space.json", sleep_space(0.2, budget));
  auto run = cli_background({"run", "space.json", "--workers", "2"}, "run1");
  ASSERT_TRUE(wait_until([&] {
    Json t = trials_json("slow.db");
    return t.is_array() && count_if(t, is_complete) >= 2;
  }));
  run->send_signal(SIGHUP);
  ProcessResult r = run->wait();
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal;
  EXPECT_EQ(r.exit_code, 128 + SIGHUP) << r.out << r.err;
  EXPECT_NE(r.out.find("resume"), std::string::npos) << r.out;
  Json stopped = trials_or_fail("slow.db");
  expect_consistent(stopped);
  for (const auto& t : stopped) {
    EXPECT_NE(t["state"], "RUNNING") << t.dump();
    if (t["state"] == "FAIL") {
      EXPECT_EQ(t["fail_reason"], "interrupted") << t.dump();
      EXPECT_TRUE(t["system_attrs"].contains("retried_as")) << t.dump();
    }
  }
  EXPECT_LT(count_if(stopped, counts_as_finished), budget);
  ProcessResult again = cli({"resume", "slow.db"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  Json after = trials_or_fail("slow.db");
  expect_consistent(after);
  EXPECT_EQ(count_if(after, counts_as_finished), budget);
}

TEST_F(CliTest, SigintStopsCleanlyAndRerunResumes) {
  // Long enough that the signal comes well before the end of the budget.
  const int budget = 30;
  dir_.write("space.json", sleep_space(0.2, budget));
  auto run = cli_background({"run", "space.json"}, "run1");
  ASSERT_TRUE(wait_until([&] {
    Json t = trials_json("slow.db");
    return t.is_array() && count_if(t, is_complete) >= 2;
  }));
  run->send_signal(SIGINT);
  ProcessResult r = run->wait();
  EXPECT_EQ(r.exit_code, 130) << r.out << r.err;
  EXPECT_NE(r.out.find("resume"), std::string::npos) << r.out;
  Json stopped = trials_or_fail("slow.db");
  expect_consistent(stopped);
  for (const auto& t : stopped) {
    if (t["state"] == "FAIL") {
      EXPECT_EQ(t["fail_reason"], "interrupted") << t.dump();
      EXPECT_TRUE(t["system_attrs"].contains("retried_as")) << t.dump();
    }
  }
  int finished_before = count_if(stopped, counts_as_finished);
  EXPECT_LT(finished_before, budget);

  ProcessResult again = cli({"run", "space.json"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  Json after = trials_or_fail("slow.db");
  expect_consistent(after);
  EXPECT_EQ(count_if(after, counts_as_finished), budget);
  for (const auto& t : after) EXPECT_NE(t["state"], "WAITING");
  for (const auto& t : stopped) {
    if (is_complete(t)) {
      EXPECT_EQ(after[t["number"].get<std::size_t>()]["value"], t["value"]);
    }
  }
}

// `hpsearch run ... | head -2`: stdout a pipe whose reader is gone. The
// coordinator was killed by SIGPIPE at its next write to stdout (a progress
// line, the summary), leaving its ipc socket file and, from a progress
// line, no record of its end (status: "ended without recording its end").
// A run whose output is gone goes on and ends as it would have: SIGTERM
// stops it as interrupted, the end recorded, the socket file removed.
TEST_F(CliTest, SigtermWithStdoutAClosedPipeRecordsTheEndAndRemovesTheSocket) {
  dir_.write("space.json", sleep_space(2.0, 50, 4));
  const std::string socket = dir_.file("coordinator.sock");
  testsupport::PipedProcess run(
      {HPSEARCH_CLI_PATH, "run", "space.json", "--workers", "1", "--bind", "ipc://" + socket},
      dir_.path().string(), dir_.file("run.err"));
  // What `head -2` reads: the endpoint, then the first progress line.
  EXPECT_THAT(run.read_line().value_or("(none)"), HasSubstr("Coordinator listening on ipc://"));
  EXPECT_THAT(run.read_line().value_or("(none)"), HasSubstr("0/50 trials done"));
  run.close_stdout();
  // A trial RUNNING: the coordinator is in its step loop (its stop handlers
  // installed), and the first trial has not ended.
  ASSERT_TRUE(wait_until([&] {
    Json t = trials_json("slow.db");
    return t.is_array() && !t.empty() && t[0]["state"] == "RUNNING";
  })) << testsupport::read_file(dir_.file("run.err"));
  run.send_signal(SIGTERM);
  ProcessResult r = run.wait();
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << "\n" << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(socket, ec)))
      << "the ipc socket file is left: " << socket;
  ProcessResult status = cli({"status", "slow.db"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("Coordinator: not running (last run by "));
  EXPECT_THAT(status.out, HasSubstr(", interrupted; "));
  EXPECT_THAT(status.out, Not(HasSubstr("without recording its end")));
  Json stopped = trials_or_fail("slow.db");
  expect_consistent(stopped);
}

// A stop signal as soon as the coordinator says where it listens, while
// its workers start: the stop handlers were installed only when its step
// loop began, so the signal killed it there, leaving the ipc socket file
// and the run's end unrecorded. Now they are installed before anything is
// bound: the run stops as at any later time (exit 128 + SIGTERM).
TEST_F(CliTest, SigtermAsTheWorkersStartStopsTheRunCleanly) {
  dir_.write("space.json", sleep_space(2.0, 50, 4));
  const std::string socket = dir_.file("coordinator.sock");
  for (int attempt = 0; attempt < 3; ++attempt) {
    testsupport::PipedProcess run(
        {HPSEARCH_CLI_PATH, "run", "space.json", "--workers", "4", "--bind", "ipc://" + socket},
        dir_.path().string(), dir_.file("run.err"));
    EXPECT_THAT(run.read_line().value_or("(none)"), HasSubstr("Coordinator listening on ipc://"));
    run.send_signal(SIGTERM);
    ProcessResult r = run.wait();
    EXPECT_EQ(r.signal, 0) << "attempt " << attempt << ": killed by signal " << r.signal << "\n"
                           << r.err;
    EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
    std::error_code ec;
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(socket, ec)))
        << "attempt " << attempt << ": the ipc socket file is left: " << socket;
    ProcessResult status = cli({"status", "slow.db"});
    ASSERT_EQ(status.exit_code, 0) << status.err;
    EXPECT_THAT(status.out, HasSubstr(", interrupted; "));
    EXPECT_THAT(status.out, Not(HasSubstr("without recording its end")));
    expect_consistent(trials_or_fail("slow.db"));
  }
}

// The same closed pipe without a signal: the run is not killed at its next
// progress line; it runs its budget and exits 0, its end recorded and its
// socket file removed. The coordinator ignores SIGPIPE, the programs of
// its trials do not (the value: 1 if SIGPIPE is ignored in the program).
TEST_F(CliTest, AClosedStdoutPipeDoesNotStopTheRun) {
  const int budget = 4;
  const std::string script =
      "sleep 0.2; ignored=$(awk '/^SigIgn:/ {{print $2}}' /proc/self/status); "
      "echo \"hpsearch: {{\\\"value\\\": $(( 0x$ignored >> 12 & 1 ))}}\"";
  const Json space = {
      {"study", {{"name", "slow"}, {"direction", "minimize"}}},
      {"space", {{"lr", {{"type", "float"}, {"low", 0.001}, {"high", 0.1}}}}},
      {"budget", {{"n_trials", budget}}},
      {"objective", {{"type", "command"}, {"argv", {"/bin/sh", "-c", script, "{lr}"}}}}};
  dir_.write("space.json", space.dump());
  const std::string socket = dir_.file("coordinator.sock");
  testsupport::PipedProcess run(
      {HPSEARCH_CLI_PATH, "run", "space.json", "--workers", "1", "--bind", "ipc://" + socket},
      dir_.path().string(), dir_.file("run.err"));
  EXPECT_THAT(run.read_line().value_or("(none)"), HasSubstr("Coordinator listening on ipc://"));
  run.close_stdout();
  ProcessResult r = run.wait();
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << "\n" << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(socket, ec)))
      << "the ipc socket file is left: " << socket;
  ProcessResult status = cli({"status", "slow.db"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr(", budget reached; "));
  Json after = trials_or_fail("slow.db");
  expect_consistent(after);
  EXPECT_EQ(count_if(after, is_complete), budget);
  for (const auto& t : after) EXPECT_EQ(t["value"], 0) << "SIGPIPE ignored in the program";
}

// libzmq deletes the file at an ipc path to bind there, also the socket of
// a running coordinator: a second run given the same --bind took the path
// over (the first one's workers could no longer reach it, and the path was
// gone once the second ended). It is refused now; a socket nobody listens
// on (a killed run's) is still replaced. And a run refused before its
// coordinator binds (exit 2) leaves no socket file: the early bind check
// left one at PATH.
TEST_F(CliTest, ABindPathInUseIsRefusedAndARefusedRunLeavesNoSocket) {
  dir_.write("space.json", sleep_space(0.5, 50, 1));
  dir_.write("other.json", branin_space(3));
  const std::string socket = dir_.file("c.sock");
  auto first =
      cli_background({"run", "space.json", "--workers", "0", "--bind", "ipc://" + socket}, "first");
  ASSERT_TRUE(wait_until([&] { return zmq_util::unix_socket_listened(socket); }))
      << testsupport::read_file(dir_.file("first.err"));
  ProcessResult second = cli({"run", "other.json", "--bind", "ipc://" + socket});
  EXPECT_EQ(second.exit_code, 2) << second.out << second.err;
  EXPECT_THAT(second.err, HasSubstr("--bind: '" + socket +
                                    "' is the socket of a running process (another "
                                    "coordinator?)"));
  EXPECT_TRUE(zmq_util::unix_socket_listened(socket)) << "the first run lost its address";
  EXPECT_FALSE(std::filesystem::exists(dir_.file("branin.db")));
  first->send_signal(SIGTERM);
  ProcessResult r = first->wait();
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(socket, ec)));

  // Refused after the bind check (the study's direction changed): exit 2,
  // and no socket file at PATH.
  Json flipped = Json::parse(sleep_space(0.5, 50, 1));
  flipped["study"]["direction"] = "maximize";
  dir_.write("flipped.json", flipped.dump());
  ProcessResult refused = cli({"run", "flipped.json", "--bind", "ipc://" + socket});
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("direction"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(socket, ec)))
      << "a refused run left its socket file";
}

TEST_F(CliTest, SecondSigintQuitsAtOnceAndRerunRecovers) {
  // Two-second trials without reports: the second SIGINT comes while the
  // first one is still winding the run down.
  const int budget = 3;
  dir_.write("space.json", sleep_space(2.0, budget, 1));
  const std::string socket = dir_.file("c.sock");
  auto run = cli_background({"run", "space.json", "--bind", "ipc://" + socket}, "run1");
  ASSERT_TRUE(wait_until([&] {
    Json t = trials_json("slow.db");
    return t.is_array() && count_if(t, is_complete) >= 1;
  }));
  run->send_signal(SIGINT);
  // Signals do not queue: wait until the first one was handled.
  ASSERT_TRUE(wait_until([&] {
    return testsupport::read_file(dir_.file("run1.err")).find("again") != std::string::npos;
  })) << "no message after the first SIGINT";
  run->send_signal(SIGINT);
  ProcessResult r = run->wait();
  EXPECT_EQ(r.exit_code, 130) << r.out << r.err;
  // Its socket file goes too (it was left: the next run replaced it).
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(socket, ec)))
      << "the ipc socket file is left: " << socket;
  // The store is readable. A trial left RUNNING by the immediate exit (if
  // the second signal came before the first was acted on) is failed and
  // queued again by the rerun.
  Json stopped = trials_or_fail("slow.db");
  EXPECT_LT(count_if(stopped, counts_as_finished), budget);
  ProcessResult again = cli({"run", "space.json"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  Json after = trials_or_fail("slow.db");
  expect_consistent(after);
  EXPECT_EQ(count_if(after, counts_as_finished), budget);
  for (const auto& t : stopped) {
    if (t["state"] != "RUNNING") continue;
    const Json& now = after[t["number"].get<std::size_t>()];
    EXPECT_EQ(now["state"], "FAIL");
    EXPECT_TRUE(now["system_attrs"].contains("retried_as")) << now.dump();
  }
}

}  // namespace
}  // namespace hps
