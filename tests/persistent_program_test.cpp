// Tests of the "command" objective's persistent mode (objective.mode
// "persistent"; objectives/command.h, objectives/persistent_program.h): real
// /bin/sh and python3 programs that serve several trials, read from stdin.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "objectives/command.h"
#include "objectives/objective.h"
#include "search/errors.h"
#include "search/study.h"
#include "tests/support/command_fixture.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testsupport::PruneFromStep;

SearchSpace space_n() {
  return SearchSpace::from_json(Json::parse(R"({"n": {"type": "int", "low": 1, "high": 1000}})"));
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Whether process `pid` still runs (a zombie or no process counts as not).
bool is_running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z' &&
         text[close + 2] != 'X';
}

// Waits (bounded) until `pid` stops running; true if it did.
bool stops_running(pid_t pid) {
  for (int i = 0; i < 500 && is_running(pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return !is_running(pid);
}

// A /bin/sh body that serves trials: for each trial line on stdin it runs
// `on_trial` with $line (the JSON line), $n (the trial number) and $v (the
// param "n") set. After end of file it runs `at_eof`.
std::string serve(const std::string& on_trial, const std::string& at_eof = "") {
  return "while IFS= read -r line; do\n"
         "  case \"$line\" in *'\"type\":\"trial\"'*) ;; *) continue ;; esac\n"
         "  n=$(printf '%s' \"$line\" | sed 's/.*\"number\":\\([0-9]*\\).*/\\1/')\n"
         "  v=$(printf '%s' \"$line\" | sed 's/.*\"n\":\\([0-9]*\\).*/\\1/')\n" +
         on_trial + "\ndone\n" + at_eof + "\n";
}

// The report line of a final value $v with the program's pid as attr.
const char* kValueWithPid =
    "echo \"hpsearch: {\\\"value\\\": $v, \\\"attrs\\\": {\\\"pid\\\": $$}}\"";

// Shell lines reporting intermediate values 1, 2, 3 at steps 1, 2, 3.
const std::string kStepsOneToThree =
    "  for s in 1 2 3; do echo \"hpsearch: {\\\"step\\\": $s, \\\"value\\\": $s}\"; done\n";

class PersistentProgramTest : public testsupport::CommandFixture {
 protected:
  PersistentProgramTest() : CommandFixture("persistent-test") {}

  Json persistent(const std::string& body) {
    return Json{{"type", "command"}, {"mode", "persistent"}, {"argv", script_argv(body)}};
  }

  // A Python program in the test folder that imports os, sys and the
  // helper module of examples/persistent (`trials`), then runs `body`.
  fs::path helper_program(const std::string& name, const std::string& body) {
    const fs::path helper = fs::path(HPSEARCH_SOURCE_DIR) / "examples" / "persistent";
    const fs::path program = dir_ / name;
    std::ofstream(program) << "import os, sys\n"
                           << "sys.path.insert(0, " << helper << ")\n"
                           << "from hpsearch_trials import trials\n"
                           << body;
    return program;
  }

  // Runs one trial per value of `ns` (param n), in order, through one
  // objective (one program), and returns the trials. The objective is
  // destroyed before this returns (the worker's shutdown).
  std::vector<TrialPtr> run_trials(const Json& objective, const std::vector<int>& ns,
                                   std::shared_ptr<Pruner> pruner = nullptr) {
    StudyOptions options;
    options.space = space_n();
    options.pruner = std::move(pruner);
    Study study =
        Study::create(std::make_shared<InMemoryStorage>(), "s", StudyDirection::kMinimize, options);
    for (int n : ns) study.enqueue_trial({{"n", n}});
    {
      Objective f = make_objective(objective, *options.space, context_);
      study.optimize(f, {.n_trials = static_cast<int>(ns.size()), .catch_exceptions = true});
    }
    return study.trials();
  }

  fs::path log_of(const TrialPtr& t) const {
    return dir_ / "logs" / ("trial-" + std::to_string(t->number) + ".log");
  }
};

pid_t pid_attr(const TrialPtr& t) { return t->user_attrs.value("pid", -1); }

// Prunes the trial whose param n is 1, from step 2 on.
class PruneParamOneFromStepTwo : public Pruner {
 public:
  bool prune(const PruningContext& ctx) override {
    return ctx.trial.params.at("n") == 1 && ctx.step >= 2;
  }
  std::string name() const override { return "test"; }
};

// ---------------------------------------------------------------- serving

TEST_F(PersistentProgramTest, OneProcessServesSeveralTrialsAndExitsAtEndOfFile) {
  const fs::path eof = dir_ / "eof";
  Json objective = persistent(serve(kValueWithPid, "echo eof > " + eof.string()));
  auto trials = run_trials(objective, {1, 2, 3, 4});
  ASSERT_EQ(trials.size(), 4u);
  std::set<pid_t> pids;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    ASSERT_EQ(trials[i]->state, TrialState::kComplete) << trials[i]->fail_reason;
    EXPECT_EQ(*trials[i]->value, static_cast<double>(i + 1));
    pids.insert(pid_attr(trials[i]));
  }
  ASSERT_EQ(pids.size(), 1u);
  // The objective is gone (the worker's shutdown): stdin was closed, the
  // program saw end of file and exited by itself.
  EXPECT_EQ(read_text(eof), "eof\n");
  EXPECT_TRUE(stops_running(*pids.begin()));
  EXPECT_THAT(read_text(log_of(trials[0])), HasSubstr("started the program"));
  EXPECT_THAT(read_text(log_of(trials[2])), HasSubstr("served by the program"));
}

TEST_F(PersistentProgramTest, TrialLineCarriesNumberAndParams) {
  Json objective = persistent(
      serve("printf '%s\\n' \"$line\" >> " + (dir_ / "lines").string() + "\n" + kValueWithPid));
  auto trials = run_trials(objective, {7, 8});
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(read_text(dir_ / "lines"),
            "{\"number\":0,\"params\":{\"n\":7},\"type\":\"trial\"}\n"
            "{\"number\":1,\"params\":{\"n\":8},\"type\":\"trial\"}\n");
}

TEST_F(PersistentProgramTest, ProgramThatExitsBetweenTrialsIsRestarted) {
  // Serves one trial per process, then exits 0.
  Json objective = persistent(
      "IFS= read -r line\n"
      "v=$(printf '%s' \"$line\" | sed 's/.*\"n\":\\([0-9]*\\).*/\\1/')\n" +
      std::string(kValueWithPid) + "\nexit 0");
  auto trials = run_trials(objective, {1, 2, 3});
  ASSERT_EQ(trials.size(), 3u);
  std::set<pid_t> pids;
  for (const TrialPtr& t : trials) {
    ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    EXPECT_EQ(*t->value, static_cast<double>(t->params.at("n").get<int>()));
    pids.insert(pid_attr(t));
  }
  EXPECT_EQ(pids.size(), 3u);
}

TEST_F(PersistentProgramTest, TrialsRunningAtTheSameTimeEachHaveTheirOwnProgram) {
  Json objective = persistent(serve("sleep 0.05\n" + std::string(kValueWithPid)));
  StudyOptions options;
  options.space = space_n();
  Study study =
      Study::create(std::make_shared<InMemoryStorage>(), "p", StudyDirection::kMinimize, options);
  {
    Objective f = make_objective(objective, *options.space, context_);
    study.optimize(f, {.n_trials = 12, .n_jobs = 3, .catch_exceptions = true});
  }
  std::set<pid_t> pids;
  for (const TrialPtr& t : study.trials()) {
    ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    EXPECT_EQ(*t->value, static_cast<double>(t->params.at("n").get<int>()));
    pids.insert(pid_attr(t));
  }
  // At most one program per concurrent trial, kept between trials.
  EXPECT_GE(pids.size(), 1u);
  EXPECT_LE(pids.size(), 3u);
  for (pid_t pid : pids) EXPECT_TRUE(stops_running(pid));
}

// ---------------------------------------------------------------- pruning

TEST_F(PersistentProgramTest, IntermediateValuesAndThePruneNotice) {
  // n = 1: reports steps 1..3, then waits for the prune notice, records it
  // and acknowledges; n = 2: a final value at once.
  const fs::path notice = dir_ / "notice";
  Json objective =
      persistent(serve("if [ \"$v\" = 1 ]; then\n" + kStepsOneToThree +
                       "  IFS= read -r msg; printf '%s\\n' \"$msg\" > " + notice.string() +
                       "\n"
                       "  echo 'hpsearch: {\"status\": \"pruned\", \"attrs\": {\"pid\": '$$'}}'\n"
                       "else\n  " +
                       kValueWithPid + "\nfi"));
  auto trials = run_trials(objective, {1, 2}, std::make_shared<PruneFromStep>(3));
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0]->state, TrialState::kPruned) << trials[0]->fail_reason;
  EXPECT_EQ(trials[0]->intermediate_values,
            (std::map<std::int64_t, double>{{1, 1.0}, {2, 2.0}, {3, 3.0}}));
  EXPECT_EQ(read_text(notice), "{\"number\":0,\"type\":\"prune\"}\n");
  ASSERT_EQ(trials[1]->state, TrialState::kComplete) << trials[1]->fail_reason;
  EXPECT_EQ(*trials[1]->value, 2.0);
  // The same program served both: it stopped the trial itself.
  EXPECT_EQ(pid_attr(trials[0]), pid_attr(trials[1]));
  EXPECT_THAT(read_text(log_of(trials[0])), HasSubstr("sent the prune notice"));
}

TEST_F(PersistentProgramTest, FinalValueBeforeThePruneNoticeCountsComplete) {
  // n = 1 prints steps 1..3 and its final value without waiting for the
  // prune notice (which the pruner sends after step 1): the trial returned a
  // value, so it is COMPLETE with all its intermediate values, as in Optuna.
  Json objective = persistent(serve("if [ \"$v\" = 1 ]; then\n" + kStepsOneToThree +
                                    "  echo 'hpsearch: {\"value\": 7}'\n"
                                    "else\n  " +
                                    std::string(kValueWithPid) + "\nfi"));
  auto trials = run_trials(objective, {1, 2}, std::make_shared<PruneFromStep>(1));
  ASSERT_EQ(trials.size(), 2u);
  ASSERT_EQ(trials[0]->state, TrialState::kComplete) << trials[0]->fail_reason;
  EXPECT_EQ(*trials[0]->value, 7.0);
  EXPECT_EQ(trials[0]->intermediate_values,
            (std::map<std::int64_t, double>{{1, 1.0}, {2, 2.0}, {3, 3.0}}));
  EXPECT_THAT(read_text(log_of(trials[0])), HasSubstr("counts COMPLETE; pruned after step 1"));
  // The notice, if it was sent, is not taken for the next trial.
  ASSERT_EQ(trials[1]->state, TrialState::kComplete) << trials[1]->fail_reason;
  EXPECT_EQ(*trials[1]->value, 2.0);
}

TEST_F(PersistentProgramTest, ValuesAfterThePruneStepAreNotStoredForAPrunedTrial) {
  // n = 1 reports steps 1..3, then acknowledges the notice sent after step 1:
  // PRUNED, with the values up to step 1 only (its value is step 1's).
  Json objective = persistent(serve("if [ \"$v\" = 1 ]; then\n" + kStepsOneToThree +
                                    "  IFS= read -r msg\n"
                                    "  echo 'hpsearch: {\"status\": \"pruned\"}'\n"
                                    "else\n  " +
                                    std::string(kValueWithPid) + "\nfi"));
  auto trials = run_trials(objective, {1, 2}, std::make_shared<PruneFromStep>(1));
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0]->state, TrialState::kPruned) << trials[0]->fail_reason;
  EXPECT_EQ(trials[0]->intermediate_values, (std::map<std::int64_t, double>{{1, 1.0}}));
  ASSERT_EQ(trials[1]->state, TrialState::kComplete) << trials[1]->fail_reason;
}

TEST_F(PersistentProgramTest, AReportForAnotherTrialIsIgnored) {
  // Trial 1 first gets a line meant for trial 0 (printed late, after trial
  // 0 ended): with its "number" it is not taken for trial 1's value.
  Json objective =
      persistent(serve("if [ \"$n\" = 1 ]; then\n"
                       "  echo 'hpsearch: {\"number\": 0, \"value\": -99}'\n"
                       "fi\n"
                       "echo \"hpsearch: {\\\"number\\\": $n, \\\"value\\\": $v}\""));
  auto trials = run_trials(objective, {1, 2});
  ASSERT_EQ(trials.size(), 2u);
  ASSERT_EQ(trials[0]->state, TrialState::kComplete) << trials[0]->fail_reason;
  EXPECT_EQ(*trials[0]->value, 1.0);
  ASSERT_EQ(trials[1]->state, TrialState::kComplete) << trials[1]->fail_reason;
  EXPECT_EQ(*trials[1]->value, 2.0);
  EXPECT_THAT(read_text(log_of(trials[1])),
              HasSubstr("ignored a report line for trial 0 (this is trial 1)"));
}

TEST_F(PersistentProgramTest, ProgramThatIgnoresThePruneNoticeIsKilledAndRestarted) {
  const fs::path pid_file = dir_ / "pid";
  Json objective =
      persistent(serve("if [ \"$v\" = 1 ]; then\n"
                       "  echo $$ > " +
                       pid_file.string() +
                       "\n"
                       "  echo 'hpsearch: {\"step\": 1, \"value\": 5}'\n"
                       "  while true; do sleep 0.05; done\n"
                       "else\n  " +
                       kValueWithPid + "\nfi"));
  objective["grace_s"] = 0.2;
  auto trials = run_trials(objective, {1, 2}, std::make_shared<PruneFromStep>(1));
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0]->state, TrialState::kPruned) << trials[0]->fail_reason;
  EXPECT_THAT(read_text(log_of(trials[0])), HasSubstr("did not end the pruned trial"));
  const pid_t first = static_cast<pid_t>(std::stol(read_text(pid_file)));
  EXPECT_TRUE(stops_running(first));
  ASSERT_EQ(trials[1]->state, TrialState::kComplete) << trials[1]->fail_reason;
  EXPECT_EQ(*trials[1]->value, 2.0);
  EXPECT_NE(pid_attr(trials[1]), first);
}

// ---------------------------------------------------------------- failures

TEST_F(PersistentProgramTest, CrashMidTrialFailsItAndTheNextTrialRunsInANewProcess) {
  const fs::path pid_file = dir_ / "pid";
  Json objective =
      persistent(serve("if [ \"$v\" = 1 ]; then\n"
                       "  echo $$ > " +
                       pid_file.string() +
                       "\n"
                       "  echo 'hpsearch: {\"step\": 1, \"value\": 5}'\n"
                       "  echo 'Traceback: boom' >&2\n"
                       "  exit 3\n"
                       "else\n  " +
                       kValueWithPid + "\nfi"));
  auto trials = run_trials(objective, {1, 2, 3});
  ASSERT_EQ(trials.size(), 3u);
  EXPECT_EQ(trials[0]->state, TrialState::kFail);
  EXPECT_THAT(trials[0]->fail_reason, HasSubstr("exit code 3"));
  EXPECT_THAT(trials[0]->fail_reason, HasSubstr("Traceback: boom"));
  const pid_t crashed = static_cast<pid_t>(std::stol(read_text(pid_file)));
  ASSERT_EQ(trials[1]->state, TrialState::kComplete) << trials[1]->fail_reason;
  ASSERT_EQ(trials[2]->state, TrialState::kComplete) << trials[2]->fail_reason;
  EXPECT_NE(pid_attr(trials[1]), crashed);
  EXPECT_EQ(pid_attr(trials[1]), pid_attr(trials[2]));
  EXPECT_THAT(read_text(log_of(trials[1])), HasSubstr("started the program"));
}

TEST_F(PersistentProgramTest, GarbageInvalidLinesAndStatusLines) {
  Json objective = persistent(
      serve("case \"$v\" in\n"
            "  1) echo 'not a report'; printf '\\377\\376 binary\\n'; echo 'hpsearch: {oops'\n"
            "     echo 'hpsearch: {\"status\": \"maybe\"}'; echo 'hpsearch: {\"value\": 1}' ;;\n"
            "  2) echo 'hpsearch: {\"status\": \"fail\", \"reason\": \"bad data\"}' ;;\n"
            "  3) echo 'hpsearch: {\"status\": \"done\"}' ;;\n"
            "  *) " +
            std::string(kValueWithPid) + " ;;\nesac"));
  auto trials = run_trials(objective, {1, 2, 3, 4});
  ASSERT_EQ(trials.size(), 4u);
  ASSERT_EQ(trials[0]->state, TrialState::kComplete) << trials[0]->fail_reason;
  EXPECT_EQ(*trials[0]->value, 1.0);
  const std::string log = read_text(log_of(trials[0]));
  EXPECT_THAT(log, HasSubstr("ignored a report line: not valid JSON"));
  EXPECT_THAT(log, HasSubstr("\"status\" must be"));
  EXPECT_EQ(trials[1]->state, TrialState::kFail);
  EXPECT_THAT(trials[1]->fail_reason, HasSubstr("the program failed the trial: bad data"));
  EXPECT_EQ(trials[2]->state, TrialState::kFail);
  EXPECT_THAT(trials[2]->fail_reason, HasSubstr("without a final value"));
  ASSERT_EQ(trials[3]->state, TrialState::kComplete) << trials[3]->fail_reason;
  EXPECT_EQ(*trials[3]->value, 4.0);
}

TEST_F(PersistentProgramTest, TimeoutIsPerTrial) {
  // Three trials of 0.8 s each run longer than timeout_s together, but each
  // within it; the fourth never ends and times out.
  Json objective =
      persistent(serve("if [ \"$v\" = 9 ]; then while true; do sleep 0.05; done; fi\n"
                       "sleep 0.8\n" +
                       std::string(kValueWithPid)));
  objective["timeout_s"] = 2.0;
  objective["grace_s"] = 0.2;
  auto trials = run_trials(objective, {1, 2, 3, 9, 5});
  ASSERT_EQ(trials.size(), 5u);
  for (int i : {0, 1, 2, 4})
    EXPECT_EQ(trials[static_cast<std::size_t>(i)]->state, TrialState::kComplete)
        << trials[static_cast<std::size_t>(i)]->fail_reason;
  EXPECT_EQ(trials[3]->state, TrialState::kFail);
  EXPECT_THAT(trials[3]->fail_reason, HasSubstr("timeout"));
  EXPECT_EQ(pid_attr(trials[0]), pid_attr(trials[2]));
  EXPECT_NE(pid_attr(trials[2]), pid_attr(trials[4]));
}

TEST_F(PersistentProgramTest, NonPersistentProgramFailsClearly) {
  // Exits 0 without reading stdin: a per-trial program run in this mode.
  Json objective = persistent("exit 0");
  auto trials = run_trials(objective, {1});
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0]->state, TrialState::kFail);
  EXPECT_THAT(trials[0]->fail_reason, HasSubstr("without reading the trial"));
  EXPECT_THAT(trials[0]->fail_reason, HasSubstr("must read its trials on stdin"));
  EXPECT_THAT(trials[0]->fail_reason, HasSubstr("remove \"mode\": \"persistent\""));
}

// A per-trial script left unchanged in persistent mode (issue #44): it
// prints its epochs and exits 0 without reading stdin. Every trial fails
// saying that a persistent program must read its trials on stdin, where the
// docs say so, and how to run it one trial per process.
TEST_F(PersistentProgramTest, PerTrialScriptInPersistentModeIsToldTheContract) {
  Json objective = persistent("echo 'epoch 1 val_loss=0.5'\necho 'epoch 2 val_loss=0.4'\nexit 0");
  objective["metrics"] = {{"name", "val_loss"},
                          {"regex", "^epoch (?<step>\\d+) val_loss=(?<value>\\S+)"}};
  auto trials = run_trials(objective, {1, 2});
  ASSERT_EQ(trials.size(), 2u);
  for (const TrialPtr& t : trials) {
    EXPECT_EQ(t->state, TrialState::kFail);
    EXPECT_THAT(t->fail_reason, HasSubstr("exit code 0"));
    EXPECT_THAT(t->fail_reason, HasSubstr("during its first trial without ending it"));
    EXPECT_THAT(t->fail_reason, HasSubstr("must read its trials on stdin"));
    EXPECT_THAT(t->fail_reason, HasSubstr("tutorials/tune-any-script.md"));
    EXPECT_THAT(t->fail_reason, HasSubstr("remove \"mode\": \"persistent\""));
  }
}

// A program that served a trial and exits with status 0 in the middle of
// the next one is a persistent program that stopped: told so, not told the
// contract.
TEST_F(PersistentProgramTest, ServingProgramThatExitsMidTrialIsNotToldTheContract) {
  Json objective =
      persistent(serve("if [ \"$v\" = 2 ]; then\n"
                       "  echo 'hpsearch: {\"step\": 1, \"value\": 5}'\n"
                       "  exit 0\n"
                       "fi\n" +
                       std::string(kValueWithPid)));
  auto trials = run_trials(objective, {1, 2});
  ASSERT_EQ(trials.size(), 2u);
  ASSERT_EQ(trials[0]->state, TrialState::kComplete) << trials[0]->fail_reason;
  EXPECT_EQ(trials[1]->state, TrialState::kFail);
  EXPECT_THAT(trials[1]->fail_reason,
              HasSubstr("the program exited during the trial (exit code 0)"));
  EXPECT_THAT(trials[1]->fail_reason, ::testing::Not(HasSubstr("must read its trials")));
}

TEST_F(PersistentProgramTest, StatusLinesAreIgnoredInPerTrialMode) {
  Json objective = {{"type", "command"},
                    {"argv", script_argv("echo 'hpsearch: {\"status\": \"pruned\"}'\n"
                                         "echo 'hpsearch: {\"value\": 4}'")}};
  auto trials = run_trials(objective, {1});
  ASSERT_EQ(trials.size(), 1u);
  ASSERT_EQ(trials[0]->state, TrialState::kComplete) << trials[0]->fail_reason;
  EXPECT_EQ(*trials[0]->value, 4.0);
  EXPECT_THAT(read_text(log_of(trials[0])), HasSubstr("read in persistent mode only"));
}

// ---------------------------------------------------------------- config

TEST(PersistentConfigTest, PlaceholdersAndFileMetricsAreRefused) {
  SearchSpace space = SearchSpace::from_json(
      Json::parse(R"({"lr": {"type": "float", "low": 0.001, "high": 1, "log": true}})"));
  auto error_of = [&](const Json& config) -> std::string {
    try {
      validate_objective(config, space);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  Json base = {{"type", "command"}, {"mode", "persistent"}, {"argv", {"python3", "train.py"}}};
  EXPECT_EQ(error_of(base), "");

  Json argv = base;
  argv["argv"] = {"python3", "train.py", "--lr={lr}"};
  EXPECT_THAT(error_of(argv), HasSubstr("objective.argv[2]"));
  EXPECT_THAT(error_of(argv), HasSubstr("{lr}"));
  EXPECT_THAT(error_of(argv), HasSubstr("params from stdin"));
  // The usual cause: a per-trial script put in persistent mode. Say the fix.
  EXPECT_THAT(error_of(argv), HasSubstr("remove \"mode\": \"persistent\""));

  Json env = base;
  env["env"] = {{"LR", "{lr}"}};
  EXPECT_THAT(error_of(env), HasSubstr("objective.env.LR"));

  Json mode = base;
  mode["mode"] = "forever";
  EXPECT_THAT(error_of(mode), HasSubstr("objective.mode"));

  // A metrics file shared by every trial the program serves is refused; the
  // trial's own ({trial_dir}) is fine.
  Json file = base;
  file["metrics"] = {{"name", "loss"}, {"source", {{"file", "metrics.csv"}}}};
  EXPECT_THAT(error_of(file), HasSubstr("objective.metrics.source.file: in persistent mode the "
                                        "metrics file must be the trial's own"));
  file["metrics"]["source"]["file"] = "{trial_dir}/metrics.csv";
  EXPECT_EQ(error_of(file), "");
  // The folder itself is not a metrics file (in either mode).
  for (const char* folder : {"{trial_dir}", "{trial_dir}/", "{trial_dir}/sub/"}) {
    file["metrics"]["source"]["file"] = folder;
    file["metrics"]["source"]["format"] = "csv";
    EXPECT_THAT(error_of(file), HasSubstr("objective.metrics.source.file: names a folder, not a "
                                          "file"))
        << folder;
  }

  Json per_trial = argv;
  per_trial["mode"] = "per_trial";
  EXPECT_EQ(error_of(per_trial), "");
}

// ---------------------------------------------------------------- python helper

TEST_F(PersistentProgramTest, PythonHelperModuleServesReportsAndPrunes) {
  if (std::system("python3 -c 'import json' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 is not installed";
  const fs::path program = helper_program("serve.py",
                                          "import time\n"
                                          "for trial in trials():\n"
                                          "    n = trial.params['n']\n"
                                          "    if n != 1:\n"
                                          "        trial.finish(n, pid=os.getpid())\n"
                                          "        continue\n"
                                          "    for step in range(1, 1000):\n"
                                          "        trial.report(step, 10.0 - step)\n"
                                          "        if trial.should_prune():\n"
                                          "            trial.set_attrs(pid=os.getpid())\n"
                                          "            trial.prune()\n"
                                          "            break\n"
                                          "        time.sleep(0.01)\n"
                                          "    else:\n"
                                          "        trial.finish(0)\n");
  Json objective = {{"type", "command"},
                    {"mode", "persistent"},
                    {"argv", {"python3", program.string()}},
                    {"grace_s", 30}};
  auto trials = run_trials(objective, {2, 1, 3}, std::make_shared<PruneFromStep>(3));
  ASSERT_EQ(trials.size(), 3u);
  ASSERT_EQ(trials[0]->state, TrialState::kComplete) << trials[0]->fail_reason;
  EXPECT_EQ(*trials[0]->value, 2.0);
  EXPECT_EQ(trials[1]->state, TrialState::kPruned) << trials[1]->fail_reason;
  EXPECT_GE(trials[1]->intermediate_values.rbegin()->first, 3);
  ASSERT_EQ(trials[2]->state, TrialState::kComplete) << trials[2]->fail_reason;
  EXPECT_EQ(*trials[2]->value, 3.0);
  EXPECT_EQ(pid_attr(trials[0]), pid_attr(trials[1]));
  EXPECT_EQ(pid_attr(trials[0]), pid_attr(trials[2]));
}

// A persistent program that writes each trial's metrics to a CSV file in
// the trial's folder (trial.trial_dir, from the trial line), as a
// PyTorch Lightning CSVLogger would, and ends each trial with done(): the
// file is followed while the trial runs (the pruner acts on its rows), the
// value is its last "loss", "acc" becomes a user attr, and one program
// serves every trial.
TEST_F(PersistentProgramTest, PythonHelperWritesAMetricsFilePerTrial) {
  if (std::system("python3 -c 'import json' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 is not installed";
  const fs::path program =
      helper_program("csvlog.py",
                     "import time\n"
                     "for trial in trials():\n"
                     "    n = trial.params['n']\n"
                     "    with open(os.path.join(trial.trial_dir, 'metrics.csv'), 'w') as f:\n"
                     "        f.write('epoch,loss,acc\\n'); f.flush()\n"
                     "        for epoch in range(1, 6):\n"
                     "            f.write('%d,%g,%g\\n' % (epoch, n * 10 - epoch, epoch / 10))\n"
                     "            f.flush()\n"
                     "            deadline = time.time() + (5 if n == 1 else 0.15)\n"
                     "            while time.time() < deadline and not trial.should_prune():\n"
                     "                time.sleep(0.01)\n"
                     "            if trial.should_prune():\n"
                     "                trial.set_attrs(pid=os.getpid())\n"
                     "                trial.prune()\n"
                     "                break\n"
                     "        else:\n"
                     "            trial.set_attrs(pid=os.getpid())\n"
                     "            trial.done()\n");
  Json objective = {{"type", "command"},
                    {"mode", "persistent"},
                    {"argv", {"python3", program.string()}},
                    {"grace_s", 30},
                    {"metrics",
                     {{"name", "loss"},
                      {"source", {{"file", "{trial_dir}/metrics.csv"}, {"step", "epoch"}}},
                      {"attrs", {"acc"}}}}};
  auto trials = run_trials(objective, {2, 1, 3}, std::make_shared<PruneParamOneFromStepTwo>());
  ASSERT_EQ(trials.size(), 3u);
  ASSERT_EQ(trials[0]->state, TrialState::kComplete) << trials[0]->fail_reason;
  EXPECT_EQ(*trials[0]->value, 15.0);  // 2 * 10 - epoch 5
  EXPECT_EQ(trials[0]->intermediate_values,
            (std::map<std::int64_t, double>{{1, 19}, {2, 18}, {3, 17}, {4, 16}, {5, 15}}));
  EXPECT_EQ(trials[0]->user_attrs.value("acc", -1.0), 0.5);
  // n = 1 waits at each epoch for the notice: pruned at epoch 2, with the
  // attr seen so far.
  EXPECT_EQ(trials[1]->state, TrialState::kPruned) << trials[1]->fail_reason;
  EXPECT_EQ(trials[1]->intermediate_values, (std::map<std::int64_t, double>{{1, 9}, {2, 8}}));
  EXPECT_EQ(trials[1]->user_attrs.value("acc", -1.0), 0.2);
  ASSERT_EQ(trials[2]->state, TrialState::kComplete) << trials[2]->fail_reason;
  EXPECT_EQ(*trials[2]->value, 25.0);
  EXPECT_EQ(pid_attr(trials[0]), pid_attr(trials[1]));
  EXPECT_EQ(pid_attr(trials[0]), pid_attr(trials[2]));
  // Each trial wrote its own file, in its own folder under the log folder.
  for (const auto& t : trials)
    EXPECT_TRUE(fs::exists(dir_ / "logs" / ("trial-" + std::to_string(t->number)) / "metrics.csv"))
        << t->number;
}

TEST_F(PersistentProgramTest, PythonHelperRunsInPerTrialModeToo) {
  if (std::system("python3 -c 'import json' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 is not installed";
  const fs::path program =
      helper_program("once.py",
                     "for trial in trials():\n"
                     "    trial.report(1, 2.5)\n"
                     "    trial.finish(trial.params['n'] * 2, number=trial.number)\n");
  Json objective = {{"type", "command"}, {"argv", {"python3", program.string()}}};
  auto trials = run_trials(objective, {21});
  ASSERT_EQ(trials.size(), 1u);
  ASSERT_EQ(trials[0]->state, TrialState::kComplete) << trials[0]->fail_reason;
  EXPECT_EQ(*trials[0]->value, 42.0);
  EXPECT_EQ(trials[0]->intermediate_values, (std::map<std::int64_t, double>{{1, 2.5}}));
  EXPECT_EQ(trials[0]->user_attrs.value("number", -1), 0);
}

TEST(PersistentExampleTest, ExampleConfigIsValid) {
  const fs::path example = fs::path(HPSEARCH_SOURCE_DIR) / "examples" / "persistent";
  StudyConfig config = StudyConfig::from_file((example / "space.json").string());
  EXPECT_NO_THROW(validate_objective(config.objective, config.space));
  EXPECT_EQ(config.objective.value("mode", ""), "persistent");
}

// ---------------------------------------------------------------- CLI

TEST_F(PersistentProgramTest, TwoWorkersEachKeepOneProgramThroughTheCli) {
  Json config = {{"study", {{"name", "persistent-cli"}, {"direction", "minimize"}}},
                 {"sampler", {{"type", "random"}, {"seed", 1}}},
                 {"budget", {{"n_trials", 12}}},
                 {"objective", persistent(serve("sleep 0.3\n" + std::string(kValueWithPid),
                                                "echo eof >> " + (dir_ / "eofs").string()))},
                 {"space", {{"n", {{"type", "int"}, {"low", 1}, {"high", 1000}}}}}};
  const fs::path file = dir_ / "space.json";
  std::ofstream(file) << config.dump(2);
  const fs::path db = dir_ / "cli.db";
  std::string cmd = std::string("'") + HPSEARCH_CLI_PATH + "' run '" + file.string() +
                    "' --workers 2 --storage '" + db.string() + "' > '" + (dir_ / "out").string() +
                    "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(dir_ / "out");
  Study study = Study::load(open_storage(db.string()), "persistent-cli");
  auto trials = study.trials();
  ASSERT_EQ(trials.size(), 12u);
  std::map<pid_t, int> served;
  for (const TrialPtr& t : trials) {
    ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    EXPECT_EQ(*t->value, static_cast<double>(t->params.at("n").get<int>()));
    ++served[pid_attr(t)];
  }
  // Two workers, one program each, each serving several trials; both ended
  // with their workers, at the end of file on their stdin.
  ASSERT_EQ(served.size(), 2u);
  EXPECT_EQ(read_text(dir_ / "eofs"), "eof\neof\n");
  for (const auto& [pid, count] : served) {
    EXPECT_GE(count, 2) << "pid " << pid;
    EXPECT_TRUE(stops_running(pid));
  }
}

}  // namespace
}  // namespace hps
