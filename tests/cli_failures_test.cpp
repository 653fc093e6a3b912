// Tests of the failure rules of `hpsearch run` / `resume`
// (coordinator/run_limits.h), run as child processes in a temporary
// directory with a real coordinator and local workers: fail fast stops a
// broken objective, --no-fail-fast runs the budget and exits 1,
// max_failed_trials stops at its count, a success turns fail fast off, and
// resume after a fixed program completes the budget.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <string>
#include <vector>

#include "search/json_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using testsupport::ProcessResult;
using testsupport::TempDir;

// A program that crashes at start, as with a bad flag or an ImportError.
const char* kBrokenProgram =
    "echo \"Traceback (most recent call last):\" >&2\n"
    "echo \"ModuleNotFoundError: No module named 'torchh'\" >&2\n"
    "exit 1\n";
// The same program fixed: reports its param as the value.
const char* kFixedProgram = "echo \"hpsearch: {\\\"value\\\": $1}\"\n";

class CliFailuresTest : public ::testing::Test {
 protected:
  ProcessResult cli(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {HPSEARCH_CLI_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  }
  // space.json of study `name` (in NAME.db): one float param lr in
  // [0.001, 0.1], the objective `/bin/sh train.sh {lr}`, the budget
  // `budget`; train.sh holds `program`.
  void write_study(const std::string& name, const Json& budget, const std::string& program) const {
    const Json space = {
        {"study", {{"name", name}, {"direction", "minimize"}}},
        {"sampler", {{"type", "random"}, {"seed", 7}}},
        {"space", {{"lr", {{"type", "float"}, {"low", 0.001}, {"high", 0.1}}}}},
        {"budget", budget},
        {"objective", {{"type", "command"}, {"argv", {"/bin/sh", "train.sh", "{lr}"}}}}};
    dir_.write("space.json", space.dump());
    dir_.write("train.sh", program);
  }
  // The study's trials (`hpsearch trials --format json`).
  Json trials(const std::string& db) const {
    ProcessResult r = cli({"trials", db, "--format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    Json j = Json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_array()) << r.out;
    return j.is_array() ? j : Json::array();
  }
  static int count_state(const Json& trials, const std::string& state) {
    int n = 0;
    for (const auto& t : trials) n += t["state"] == state ? 1 : 0;
    return n;
  }

  TempDir dir_{"cli_failures"};
};

// The first five trials fail: the run stops there, not after 50, exits 1
// and says why; after the program is fixed, resume runs the rest.
TEST_F(CliFailuresTest, FailFastStopsABrokenObjectiveAndResumeCompletesTheBudget) {
  write_study("broken", {{"n_trials", 50}}, kBrokenProgram);
  ProcessResult run = cli({"run", "space.json", "--workers", "1"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  Json t = trials("broken.db");
  EXPECT_EQ(t.size(), 5u);
  EXPECT_EQ(count_state(t, "FAIL"), 5);
  EXPECT_NE(run.out.find("the first 5 trials all failed; last reason: "), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("the objective looks broken"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("hpsearch resume broken.db"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("--no-fail-fast"), std::string::npos) << run.out;

  dir_.write("train.sh", kFixedProgram);
  ProcessResult resumed = cli({"resume", "broken.db", "--workers", "2"});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  t = trials("broken.db");
  EXPECT_EQ(t.size(), 50u);
  EXPECT_EQ(count_state(t, "FAIL"), 5);
  EXPECT_EQ(count_state(t, "COMPLETE"), 45);
}

// --no-fail-fast runs the whole budget; with no trial succeeding the run
// still exits 1 and says so.
TEST_F(CliFailuresTest, NoFailFastRunsTheBudgetAndExitsOneWhenNothingSucceeded) {
  write_study("nofast", {{"n_trials", 8}}, kBrokenProgram);
  ProcessResult run = cli({"run", "space.json", "--workers", "2", "--no-fail-fast"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  Json t = trials("nofast.db");
  EXPECT_EQ(t.size(), 8u);
  EXPECT_EQ(count_state(t, "FAIL"), 8);
  EXPECT_NE(run.out.find("(budget reached)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("No trial of this run succeeded: 8 FAIL"), std::string::npos) << run.out;
  // budget.fail_fast false in the file does the same, and is kept by resume.
  write_study("nofast2", {{"n_trials", 6}, {"fail_fast", false}}, kBrokenProgram);
  run = cli({"run", "space.json", "--workers", "1"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(trials("nofast2.db").size(), 6u);
  run = cli({"resume", "nofast2.db", "--n-trials", "12"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(trials("nofast2.db").size(), 12u);
}

// max_failed_trials 3 with a program that fails for lr > 0.05 only: the
// run stops at the third FAIL, whatever succeeded in between.
TEST_F(CliFailuresTest, MaxFailedTrialsStopsAtTheThirdFail) {
  const std::string program =
      "if awk -v x=\"$1\" 'BEGIN { exit !(x > 0.05) }'; then echo \"lr too large\" >&2; exit 1; "
      "fi\n"
      "echo \"hpsearch: {\\\"value\\\": $1}\"\n";
  write_study("some", {{"n_trials", 40}, {"max_failed_trials", 3}}, program);
  ProcessResult run = cli({"run", "space.json", "--workers", "1"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  Json t = trials("some.db");
  ASSERT_FALSE(t.empty());
  EXPECT_LT(t.size(), 40u);
  EXPECT_EQ(count_state(t, "FAIL"), 3);
  EXPECT_EQ(t.back()["state"], "FAIL");  // the third FAIL was the last trial
  for (const auto& trial : t)
    EXPECT_EQ(trial["state"] == "FAIL", trial["params"]["lr"].get<double>() > 0.05) << trial.dump();
  EXPECT_NE(run.out.find("3 trials failed (budget.max_failed_trials)"), std::string::npos)
      << run.out;
  // The flag overrides the file: 4 FAILs now.
  ProcessResult more = cli({"resume", "some.db", "--max-failed-trials", "4"});
  EXPECT_EQ(more.exit_code, 1) << more.out << more.err;
  EXPECT_NE(more.out.find("4 trials failed (budget.max_failed_trials)"), std::string::npos)
      << more.out;
  EXPECT_EQ(count_state(trials("some.db"), "FAIL"), 7);
}

// The first trial succeeds and the rest fail: fail fast does not stop the
// run (the objective works), and a run with a success exits 0.
TEST_F(CliFailuresTest, AFirstSuccessKeepsFailFastOff) {
  write_study("flaky", {{"n_trials", 8}},
              "if [ -e ran-once ]; then echo \"out of memory\" >&2; exit 1; fi\n"
              "touch ran-once\n"
              "echo \"hpsearch: {\\\"value\\\": $1}\"\n");
  ProcessResult run = cli({"run", "space.json", "--workers", "1"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  Json t = trials("flaky.db");
  EXPECT_EQ(t.size(), 8u);
  EXPECT_EQ(count_state(t, "COMPLETE"), 1);
  EXPECT_EQ(count_state(t, "FAIL"), 7);
  EXPECT_NE(run.out.find("(budget reached)"), std::string::npos) << run.out;
}

// Bad limits are refused before anything runs (exit 2, naming the field).
TEST_F(CliFailuresTest, BadFailureLimitsAreRefused) {
  for (const Json& bad : {Json(0), Json("x"), Json(-1)}) {
    write_study("bad", {{"n_trials", 5}, {"max_failed_trials", bad}}, kFixedProgram);
    ProcessResult run = cli({"run", "space.json"});
    EXPECT_EQ(run.exit_code, 2) << bad.dump() << run.out << run.err;
    EXPECT_NE(run.err.find("budget.max_failed_trials"), std::string::npos) << run.err;
  }
  write_study("bad", {{"n_trials", 5}}, kFixedProgram);
  ProcessResult run = cli({"run", "space.json", "--max-failed-trials", "0"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.err.find("--max-failed-trials: must be >= 1"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("bad.db")));
  // The text of an integer flag: an empty value is not "no limit", a number
  // out of range is not clamped, and '+' or spaces are not digits; a
  // negative number is said to be one (it was called "not digits only").
  for (const auto& [flag, value, rule] : std::vector<std::array<std::string, 3>>{
           {"--max-failed-trials", "", "must be a whole number (digits only), got ''"},
           {"--max-failed-trials", "99999999999999999999", "is out of range (at most "},
           {"--n-trials", "", "must be a whole number"},
           {"--n-trials", "+5", "must be a whole number (digits only), got '+5'"},
           {"--workers", " 2", "must be a whole number"},
           {"--seed", "-1", "must be 0 or a positive integer, got '-1'"},
           {"--workers", "-1", "must be 0 or a positive integer, got '-1'"},
           {"--n-trials", "-99999999999999999999",
            "must be a positive integer, got '-99999999999999999999'"},
           {"--liveness", "-3", "must be a positive integer, got '-3'"},
           {"--heartbeat-ms", "-1000", "must be a positive integer, got '-1000'"},
           {"--max-workers", "-2", "must be a positive integer, got '-2'"},
           {"--prefetch", "-1", "must be 0 or a positive integer, got '-1'"},
           {"--liveness", "-x", "must be a whole number (digits only), got '-x'"},
           {"--timeout", "", "must be a finite number of seconds, got ''"},
           {"--timeout", "inf", "must be a finite number of seconds, got 'inf'"},
           {"--timeout", "1e400", "must be a finite number of seconds"},
           {"--timeout", "abc", "must be a finite number of seconds, got 'abc'"}}) {
    ProcessResult flagged = cli({"run", "space.json", flag, value});
    EXPECT_EQ(flagged.exit_code, 2) << flag << " '" << value << "'" << flagged.out;
    EXPECT_NE(flagged.err.find(flag + ": " + rule), std::string::npos) << flagged.err;
    EXPECT_FALSE(std::filesystem::exists(dir_.file("bad.db"))) << flag << " '" << value << "'";
  }
  // The worker's integer flags follow the same rule.
  ProcessResult worker =
      cli({"worker", "--connect", "ipc://" + dir_.file("none.sock"), "--liveness", "-3"});
  EXPECT_EQ(worker.exit_code, 2) << worker.err;
  EXPECT_NE(worker.err.find("--liveness: must be a positive integer, got '-3'"), std::string::npos)
      << worker.err;
}

}  // namespace
}  // namespace hps
