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
// and says why; after the program is fixed, resume runs the whole budget
// (the FAIL trials of a run that fail fast stopped do not count).
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
  EXPECT_EQ(t.size(), 55u);
  EXPECT_EQ(count_state(t, "FAIL"), 5);
  EXPECT_EQ(count_state(t, "COMPLETE"), 50);
}

// The hint after fail fast says what works (issue #44): fix space.json and
// run it again. The run reads the file; the study has no COMPLETE or PRUNED
// trial, so the changed objective is taken without --allow-objective-change
// and without the warning about mixed values (an info line names the
// change); the failed trials do not count: the full n_trials of the new
// objective run.
TEST_F(CliFailuresTest, FailFastFixedInSpaceJsonRerunRunsTheWholeBudget) {
  write_study("fixme", {{"n_trials", 8}}, kBrokenProgram);
  ProcessResult run = cli({"run", "space.json", "--workers", "1"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(count_state(trials("fixme.db"), "FAIL"), 5);
  EXPECT_NE(run.out.find("(they do not count against n_trials)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("fix the program or the objective in space.json, then run `hpsearch run "
                         "space.json` again (it reads the file"),
            std::string::npos)
      << run.out;
  ProcessResult status = cli({"status", "fixme.db"});
  EXPECT_NE(status.out.find("5 FAIL, 0 RUNNING, 0 WAITING); finished 0 of 8"), std::string::npos)
      << status.out;

  Json space = Json::parse(testsupport::read_file(dir_.file("space.json")));
  space["objective"]["argv"] = {"/bin/sh", "fixed.sh", "{lr}"};
  dir_.write("space.json", space.dump());
  dir_.write("fixed.sh", kFixedProgram);
  ProcessResult fixed = cli({"run", "space.json", "--workers", "1"});
  EXPECT_EQ(fixed.exit_code, 0) << fixed.out << fixed.err;
  EXPECT_NE(fixed.err.find("the objective changed (objective.argv[1]: "), std::string::npos)
      << fixed.err;
  EXPECT_NE(fixed.err.find("no values mix"), std::string::npos) << fixed.err;
  EXPECT_EQ(fixed.err.find("mix two objectives"), std::string::npos) << fixed.err;
  EXPECT_EQ(fixed.err.find("[warning]"), std::string::npos) << fixed.err;
  const Json t = trials("fixme.db");
  EXPECT_EQ(t.size(), 13u);
  EXPECT_EQ(count_state(t, "COMPLETE"), 8);
  for (const auto& trial : t) {
    if (trial["state"] == "FAIL") {
      EXPECT_EQ(trial["system_attrs"].value("budget_excluded", ""), "run stopped for failures")
          << trial.dump();
    }
  }
  // The same from resume: the hint names the file of the last run.
  write_study("again", {{"n_trials", 3}}, kBrokenProgram);
  ASSERT_EQ(cli({"run", "space.json"}).exit_code, 1);
  ProcessResult resumed = cli({"resume", "again.db"});
  EXPECT_EQ(resumed.exit_code, 1) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("then run `hpsearch run " + dir_.file("space.json")),
            std::string::npos)
      << resumed.out;
}

// Trials that failed under an objective that a later run changed leave the
// budget, which is for the current objective (here they counted before:
// --no-fail-fast ran the budget). Once the study has results, a changed
// objective is refused without --allow-objective-change.
TEST_F(CliFailuresTest, FailedTrialsOfAChangedObjectiveLeaveTheBudget) {
  write_study("changed", {{"n_trials", 4}, {"fail_fast", false}}, kBrokenProgram);
  ProcessResult run = cli({"run", "space.json", "--workers", "1"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(count_state(trials("changed.db"), "FAIL"), 4);
  EXPECT_NE(cli({"status", "changed.db"}).out.find("finished 4 of 4"), std::string::npos);

  Json space = Json::parse(testsupport::read_file(dir_.file("space.json")));
  space["objective"]["argv"] = {"/bin/sh", "fixed.sh", "{lr}"};
  dir_.write("space.json", space.dump());
  dir_.write("fixed.sh", kFixedProgram);
  ProcessResult fixed = cli({"run", "space.json", "--workers", "1"});
  EXPECT_EQ(fixed.exit_code, 0) << fixed.out << fixed.err;
  Json t = trials("changed.db");
  EXPECT_EQ(t.size(), 8u);
  EXPECT_EQ(count_state(t, "COMPLETE"), 4);
  for (const auto& trial : t) {
    if (trial["state"] == "FAIL") {
      EXPECT_EQ(trial["system_attrs"].value("budget_excluded", ""), "objective changed")
          << trial.dump();
    }
  }

  space["objective"]["argv"] = {"/bin/sh", "train.sh", "{lr}"};
  dir_.write("space.json", space.dump());
  ProcessResult refused = cli({"run", "space.json"});
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("--allow-objective-change"), std::string::npos) << refused.err;
}

// A multi-line fail reason (a Python traceback) shows as lines on the
// console and in `hpsearch trials`, indented under the trial, not with
// literal "\n"; CSV keeps the breaks inside a quoted field (RFC 4180) and
// JSON escapes them; an escape sequence stays escaped everywhere.
TEST_F(CliFailuresTest, MultiLineFailReasonsShowAsLines) {
  write_study("tb", {{"n_trials", 1}},
              "echo 'Traceback (most recent call last):' >&2\n"
              "echo '  File \"train.py\", line 3, in <module>' >&2\n"
              "printf '\\033[31mValueError: boom\\n' >&2\n"
              "exit 1\n");
  ProcessResult run = cli({"run", "space.json"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_NE(run.err.find("last lines of stderr:\n    Traceback (most recent call last):\n      "
                         "File \"train.py\", line 3, in <module>\n    \\x1b[31mValueError: boom"),
            std::string::npos)
      << run.err;
  EXPECT_EQ((run.out + run.err).find("\\nTraceback"), std::string::npos) << run.out << run.err;
  EXPECT_EQ((run.out + run.err).find('\x1b'), std::string::npos);

  ProcessResult table = cli({"trials", "tb.db"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.out.find("\\n"), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find('\x1b'), std::string::npos);
  // The row holds the first line; the next lines start under its
  // fail_reason column.
  const std::size_t header_end = table.out.find('\n');
  const std::size_t column = table.out.find("fail_reason");
  ASSERT_LT(column, header_end) << table.out;
  EXPECT_NE(table.out.find("last lines of stderr:\n" + std::string(column, ' ') +
                           "Traceback (most recent call last):\n" + std::string(column, ' ') +
                           "  File \"train.py\", line 3, in <module>\n" + std::string(column, ' ') +
                           "\\x1b[31mValueError: boom\n"),
            std::string::npos)
      << table.out;

  ProcessResult csv = cli({"trials", "tb.db", "--format", "csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_NE(csv.out.find(",\"the program failed (exit code 1); last lines of stderr:\nTraceback "
                         "(most recent call last):\n  File \"\"train.py\"\", line 3, in "
                         "<module>\n\\x1b[31mValueError: boom\"\r\n"),
            std::string::npos)
      << csv.out;
  const Json t = trials("tb.db");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_NE(t[0]["fail_reason"].get<std::string>().find(
                "stderr:\nTraceback (most recent call last):\n  File"),
            std::string::npos)
      << t.dump();
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
