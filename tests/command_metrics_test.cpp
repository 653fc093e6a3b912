// Tests of the "metrics" of the command objective (objectives/command.h,
// objectives/command_metrics.h): unmodified programs (small /bin/sh and
// Python scripts) whose own output or metrics file gives the trial's
// values, run through a Study as real child processes.
#include "objectives/command_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "objectives/command.h"
#include "objectives/objective.h"
#include "search/errors.h"
#include "search/study.h"
#include "tests/support/command_fixture.h"
#include "tests/support/log_capture.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using Steps = std::map<std::int64_t, double>;

using testsupport::PruneFromStep;

SearchSpace test_space() {
  return SearchSpace::from_json(Json::parse(R"({
    "x": {"type": "float", "low": -10, "high": 10},
    "n": {"type": "int", "low": 1, "high": 1000}
  })"));
}

using testsupport::read_file;

class CommandMetricsTest : public testsupport::CommandFixture {
 protected:
  CommandMetricsTest() : CommandFixture("metrics_test") {}

  // An objective running a /bin/sh script with `args`, reading `metrics`.
  Json command(const std::string& body, const Json& metrics,
               const std::vector<std::string>& args = {}) {
    return Json{{"type", "command"},
                {"argv", script_argv(body, args)},
                {"metrics", metrics},
                {"grace_s", 5}};
  }

  TrialPtr run_one(const Json& objective, std::shared_ptr<Pruner> pruner = nullptr,
                   StudyDirection direction = StudyDirection::kMinimize) {
    return run_trial(objective, test_space(), {{"x", 1.5}, {"n", 7}}, std::move(pruner), direction);
  }

  std::string log_text(const TrialPtr& t) const { return read_file(log_of(t).string()); }
};

// ---------------------------------------------------------------- output

TEST_F(CommandMetricsTest, NameValueLinesGiveStepsValuesAndAttrs) {
  // stdout and stderr are two pipes: the pause orders the stderr line after
  // the stdout lines before it.
  Json objective = command(
      "echo 'loading data'\n"
      "echo 'epoch 1 train_loss=0.9 val_loss=0.8 val_acc=0.61'\n"
      "echo 'train_val_loss=99'\n"                    // another metric whose name ends the same
      "echo 'train-val_loss: 98 eval/val_loss=97'\n"  // the same, joined by - or / (Katib #1551)
      "echo \"{'val_loss': 0.55, 'step': 7}\"\n"      // a printed Python dict
      "echo 'val_loss = 0.5'\n"                       // no step: the count (3)
      "sleep 0.3\n"
      "echo 'Epoch [9/9] val_loss: 0.45, val_acc: 71%' >&2\n",  // stderr counts too
      {{"name", "val_loss"}, {"attrs", {"val_acc"}}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.45);
  EXPECT_EQ(t->intermediate_values, (Steps{{1, 0.8}, {7, 0.55}, {3, 0.5}, {9, 0.45}}));
  EXPECT_EQ(t->user_attrs.value("val_acc", 0.0), 71.0);
}

TEST_F(CommandMetricsTest, RegexWithNamedStepAndBestFinalValue) {
  Json objective = command(
      "echo 'it 10: loss 0.7 (lr 0.1)'\n"
      "echo 'it 20: loss 0.3 (lr 0.05)'\n"
      "echo 'it 30: loss 0.4 (lr 0.01)'\n",
      {{"name", "loss"},
       {"regex", R"(it (?<step>\d+): loss (?<value>\S+))"},
       {"final", "best"},
       {"attrs", {{{"name", "lr"}, {"regex", R"(\(lr ([0-9.]+)\))"}}}}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.3);  // the lowest: the study minimizes
  EXPECT_EQ(t->intermediate_values, (Steps{{10, 0.7}, {20, 0.3}, {30, 0.4}}));
  EXPECT_EQ(t->user_attrs.value("lr", 0.0), 0.01);

  TrialPtr up = run_one(objective, nullptr, StudyDirection::kMaximize);
  ASSERT_EQ(up->state, TrialState::kComplete) << up->fail_reason;
  EXPECT_EQ(*up->value, 0.7);
}

TEST_F(CommandMetricsTest, RegexWithOneGroupCountsSteps) {
  Json objective = command(
      "echo 'Test set: Average loss: 0.4, Accuracy: 8841/10000 (88%)'\n"
      "echo 'Test set: Average loss: 0.3312, Accuracy: 9000/10000 (90%)'\n",
      {{"name", "test_loss"}, {"regex", R"(Average loss: ([0-9.]+))"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.3312);
  EXPECT_EQ(t->intermediate_values, (Steps{{1, 0.4}, {2, 0.3312}}));
}

TEST_F(CommandMetricsTest, PrunedProgramThatOnlyPrintsItsOwnLinesGetsSigterm) {
  std::string term = (dir_ / "term").string();
  Json objective = command("trap 'echo term > " + term +
                               "; exit 1' TERM\n"
                               "i=0\n"
                               "while true; do\n"
                               "  i=$((i+1))\n"
                               "  echo \"epoch $i val_loss=$i acc=0.$i\"\n"
                               "  sleep 0.02\n"
                               "done",
                           {{"name", "val_loss"}, {"attrs", {"acc"}}});
  TrialPtr t = run_one(objective, std::make_shared<PruneFromStep>(3));
  EXPECT_EQ(t->state, TrialState::kPruned) << t->fail_reason;
  EXPECT_EQ(t->intermediate_values.rbegin()->first, 3);
  EXPECT_EQ(read_file(term), "term\n");
  EXPECT_TRUE(t->user_attrs.contains("acc"));  // attrs are stored when pruned too
  EXPECT_THAT(log_text(t), HasSubstr("pruned after step 3"));
}

TEST_F(CommandMetricsTest, SourceStdoutIgnoresStderr) {
  Json objective = command("echo 'val_loss=0.5' >&2\necho 'other=1'",
                           {{"name", "val_loss"}, {"source", "stdout"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("metric 'val_loss'"));
  EXPECT_THAT(t->fail_reason, HasSubstr("never seen on stdout"));
}

// A report line whose step is not an integer (a trainer that writes every
// step as a string) is said once per trial on the console and kept as the
// trial's report_warning, not only in its log (issue #47, Optuna #5471).
TEST_F(CommandMetricsTest, AReportWithAStepThatIsNotAnIntegerIsSaidOncePerTrial) {
  Json objective{{"type", "command"},
                 {"argv", script_argv("echo 'hpsearch: {\"step\": \"1\", \"value\": 2}'\n"
                                      "echo 'hpsearch: {\"step\": 2.5, \"value\": 3}'\n"
                                      "echo 'hpsearch: {\"value\": 1}'\n")}};
  testsupport::CapturedLog log(spdlog::level::warn);
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_TRUE(t->intermediate_values.empty());
  const std::string warning = t->user_attrs.value("report_warning", std::string());
  EXPECT_THAT(warning, HasSubstr("ignored a report line (\"step\" must be an integer)"));
  EXPECT_THAT(warning, HasSubstr("\"step\": \"1\""));
  const std::string text = log.text();
  EXPECT_THAT(text, HasSubstr("trial 0: ignored a report line (\"step\" must be an integer)"));
  EXPECT_EQ(text.find("2.5"), std::string::npos) << "said twice: " << text;
  // Both are noted in the trial log.
  const std::string trial_log = log_text(t);
  const std::size_t first = trial_log.find("ignored a report line");
  ASSERT_NE(first, std::string::npos) << trial_log;
  EXPECT_NE(trial_log.find("ignored a report line", first + 1), std::string::npos) << trial_log;
}

TEST_F(CommandMetricsTest, ProtocolWinsWhenPresent) {
  Json objective = command(
      "echo 'val_loss=5'\n"
      "echo 'hpsearch: {\"step\": 1, \"value\": 2}'\n"
      "echo 'val_loss=6'\n"
      "echo 'hpsearch: {\"value\": 1}'\n",
      {{"name", "val_loss"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 1.0);
  // val_loss=5 came first (step 1 by count); the protocol's step 1 then
  // keeps that first value; val_loss=6 is not read any more.
  EXPECT_EQ(t->intermediate_values, (Steps{{1, 5.0}}));
  EXPECT_THAT(log_text(t), HasSubstr("objective.metrics is not read from here on"));
}

TEST_F(CommandMetricsTest, MetricNeverSeenFailsNamingItAndTheLastLines) {
  Json objective =
      command("echo 'starting'\necho 'val_los=0.3'\necho 'done'", {{"name", "val_loss"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason,
              HasSubstr("metric 'val_loss' (objective.metrics.name) was never seen"));
  EXPECT_THAT(t->fail_reason, HasSubstr("last lines of output:\nstarting\nval_los=0.3\ndone"));
  // The names the output showed with a number, and the nearest one.
  EXPECT_THAT(t->fail_reason,
              HasSubstr("names seen with a number: 'val_los' (did you mean 'val_los'?)"));
}

// A typo in metrics.name ("val_los"): the trial's FAIL reason lists the
// names printed with a number and says which one was likely meant; names
// printed with text that is no number are not listed.
TEST_F(CommandMetricsTest, MetricNameTypoSaysDidYouMean) {
  Json objective = command(
      "echo 'loss=0.9 val_loss=0.5 acc=88%'\n"
      "echo 'model: resnet18'\n"
      "echo 'loss=0.7 val_loss=0.4 acc=90%'",
      {{"name", "val_los"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("metric 'val_los' (objective.metrics.name) was never seen "
                                        "on stdout or stderr (lines such as 'val_los=0.5' or "
                                        "'val_los: 0.5'); names seen with a number: 'loss', "
                                        "'val_loss', 'acc' (did you mean 'val_loss'?)"));
  EXPECT_THAT(t->fail_reason, Not(HasSubstr("'model'")));
}

// The same typo, seen at the program's first report line (a step word and
// names with numbers, a near miss of the metric among them): the trial
// fails there, the program is stopped, not after its whole training.
TEST_F(CommandMetricsTest, MetricNameTypoFailsAtTheFirstReportLine) {
  const std::string after = (dir_ / "after").string();
  Json objective = command(
      "echo 'loading, lr=0.01'\n"
      "echo 'epoch 1 loss=0.9 val_loss=0.5'\n"
      "sleep 30\n"
      "echo > " +
          after +
          "\n"
          "echo 'epoch 2 loss=0.7 val_loss=0.4'",
      {{"name", "val_los"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason,
              HasSubstr("metric 'val_los' (objective.metrics.name) is not in the program's first "
                        "report line 'epoch 1 loss=0.9 val_loss=0.5', which shows 'loss', "
                        "'val_loss' (did you mean 'val_loss'?); the trial was stopped there"));
  EXPECT_FALSE(fs::exists(after));

  // Not a near miss ("lr" is 2 edits from "err"): read to the end as before.
  Json other = command("echo 'epoch 1 lr=0.1'\necho 'epoch 1 err=0.3'", {{"name", "err"}});
  t = run_one(other);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.3);
}

TEST_F(CommandMetricsTest, ValueThatIsNotANumberIsLoggedAndIgnored) {
  Json objective = command(
      "echo 'val_loss=tensor(0.2)'\n"
      "echo 'val_loss=0.3'\n",
      {{"name", "val_loss"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.3);
  EXPECT_EQ(t->intermediate_values, (Steps{{1, 0.3}}));
  EXPECT_THAT(log_text(t), HasSubstr("metric 'val_loss': 'tensor(0.2' is not a number; this value "
                                     "is ignored (line: val_loss=tensor(0.2))"));
}

// An extra metric read but never as a number ("2101/10000") is not set; the
// trial log says so once, naming the field and what was read.
TEST_F(CommandMetricsTest, AnAttrNeverReadAsANumberIsNamedInTheLog) {
  Json objective =
      command("echo 'loss=0.3 Accuracy: 2101/10000'\necho 'loss=0.2 Accuracy: 2301/10000'",
              {{"name", "loss"}, {"attrs", {"Accuracy"}}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.2);
  EXPECT_FALSE(t->user_attrs.contains("Accuracy"));
  EXPECT_THAT(log_text(t), HasSubstr("user attr 'Accuracy': '2101/10000' is not a number; this "
                                     "value is ignored"));
  EXPECT_THAT(log_text(t), HasSubstr("user attr 'Accuracy' (objective.metrics.attrs) was not set: "
                                     "it was matched 2 times, never as a number (last: "
                                     "'2301/10000')"));
}

TEST_F(CommandMetricsTest, NonNumericOnlyFails) {
  Json objective = command("echo 'val_loss=nope'", {{"name", "val_loss"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("never seen"));
  EXPECT_THAT(t->fail_reason, HasSubstr("it was matched 1 time, never as a number (last: 'nope')"));
  // A regex whose value group takes the comma too: the reason says what it read.
  Json comma = command("echo 'Test set: Average loss: 2.2863, Accuracy: 1/10'",
                       {{"name", "test_loss"}, {"regex", "Average loss: (?<value>\\S+)"}});
  t = run_one(comma);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason,
              HasSubstr("it was matched 1 time, never as a number (last: '2.2863,'); make the "
                        "regex's value group hold only the number"));
}

TEST_F(CommandMetricsTest, ProgramFailureStillFailsAsBefore) {
  Json objective = command("echo 'val_loss=0.3'\necho boom >&2\nexit 3", {{"name", "val_loss"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("exit code 3"));
  EXPECT_THAT(t->fail_reason, HasSubstr("boom"));
}

// The extra metrics seen before a trial failed, or timed out, are kept as
// user attrs (what the program got to is worth seeing beside the reason).
TEST_F(CommandMetricsTest, AttrsSeenBeforeAFailureOrATimeoutAreKept) {
  Json failing = command("echo 'val_loss=0.3 val_acc=0.7'\nexit 3",
                         {{"name", "val_loss"}, {"attrs", {"val_acc"}}});
  TrialPtr t = run_one(failing);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_EQ(t->user_attrs.value("val_acc", 0.0), 0.7);

  Json slow = command("echo 'val_loss=0.3 val_acc=0.6'\nexec sleep 1000",
                      {{"name", "val_loss"}, {"attrs", {"val_acc"}}});
  slow["timeout_s"] = 0.5;
  t = run_one(slow);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("timeout"));
  EXPECT_EQ(t->user_attrs.value("val_acc", 0.0), 0.6);
}

TEST_F(CommandMetricsTest, LongLineAndBinaryGarbageDoNotBreakCollection) {
  // A 1 MB line with the metric at its very end (split by the reader into
  // a 1 MiB piece and the rest), then binary noise, NULs, invalid UTF-8
  // and a carriage return, then the values.
  Json objective = command(
      "head -c 1000000 /dev/zero | tr '\\000' 'a'\n"
      "echo ' val_loss=0.9'\n"
      "head -c 1048576 /dev/zero | tr '\\000' 'b'\n"
      "echo 'x val_loss=0.8'\n"
      "head -c 20000 /dev/urandom\n"
      "printf '\\000\\377\\376val_loss=\\377\\n'\n"
      "printf 'epoch 5 val_loss=0.25 r=9\\r\\n'\n",
      {{"name", "val_loss"}, {"attrs", {{{"name", "r"}, {"regex", "r=(\\d+)$"}}}}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.25);
  EXPECT_EQ(t->intermediate_values, (Steps{{1, 0.9}, {2, 0.8}, {5, 0.25}}));
  EXPECT_EQ(t->user_attrs.value("r", 0.0), 9.0);
}

TEST_F(CommandMetricsTest, ProgressBarRedrawsWithCarriageReturnAreLinesOfTheirOwn) {
  // tqdm and Keras redraw one line with '\r' and end it with '\n' at the end:
  // sys.stderr.write(f"\repoch {e} val_loss={1.0/e:.3f}") for e = 1..3.
  Json objective = command(
      "printf '\\repoch 1 val_loss=1.000' >&2\n"
      "printf '\\repoch 2 val_loss=0.500' >&2\n"
      "printf '\\repoch 3 val_loss=0.333' >&2\n"
      "printf '\\n' >&2\n",
      {{"name", "val_loss"}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.333);
  EXPECT_EQ(t->intermediate_values, (Steps{{1, 1.0}, {2, 0.5}, {3, 0.333}}));
}

TEST_F(CommandMetricsTest, CarriageReturnSegmentsWithARegexAndCrLfLineEnds) {
  // A regex running to the end of the line sees each segment alone; "\r\n"
  // still ends one line (no empty segment, no value lost).
  Json objective = command(
      "printf 'it 1 loss 0.9\\r\\n'\n"
      "printf '\\rit 2 loss 0.8 lr=0.1\\rit 3 loss 0.7 lr=0.05\\r\\n'\n"
      "printf 'it 4 loss 0.6\\r\\n'\n",
      {{"name", "loss"},
       {"regex", R"(^it (?<step>\d+) loss (?<value>[0-9.]+))"},
       {"attrs", {{{"name", "lr"}, {"regex", "lr=(.+)$"}}}}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.6);
  EXPECT_EQ(t->intermediate_values, (Steps{{1, 0.9}, {2, 0.8}, {3, 0.7}, {4, 0.6}}));
  EXPECT_EQ(t->user_attrs.value("lr", 0.0), 0.05);
}

TEST_F(CommandMetricsTest, PythonOutputArrivesAsPrintedSoPruningWorks) {
  if (std::system("python3 -c 'import sys' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 is not installed";
  // print() without flush to a pipe: only PYTHONUNBUFFERED=1 (set by
  // default) makes the values arrive before the program ends; it never
  // ends by itself, so the timeout is the only way out otherwise.
  fs::path script = dir_ / "train.py";
  std::ofstream(script) << "import time\n"
                           "epoch = 0\n"
                           "while True:\n"
                           "    epoch += 1\n"
                           "    print(f'epoch {epoch} val_loss={1.0 / epoch}')\n"
                           "    time.sleep(0.02)\n";
  Json objective = {{"type", "command"},
                    {"argv", {"python3", script.string()}},
                    {"metrics", {{"name", "val_loss"}}},
                    {"timeout_s", 60}};
  TrialPtr t = run_one(objective, std::make_shared<PruneFromStep>(3));
  EXPECT_EQ(t->state, TrialState::kPruned) << t->fail_reason;
  EXPECT_EQ(t->intermediate_values.at(2), 0.5);
}

TEST_F(CommandMetricsTest, PythonUnbufferedIsSetUnlessTheUserSetsIt) {
  Json metrics = {{"name", "v"}};
  TrialPtr t = run_one(command("echo \"v=$PYTHONUNBUFFERED\"", metrics));
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 1.0);
  Json mine = command("echo \"v=$PYTHONUNBUFFERED\"", metrics);
  mine["env"] = {{"PYTHONUNBUFFERED", "0"}};
  t = run_one(mine);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.0);
}

// ---------------------------------------------------------------- files

TEST_F(CommandMetricsTest, CsvFileAppearingLateWithAPartialLastLineIsFollowed) {
  // The file appears after a while; a row is written in two halves with
  // pauses in between (several polls see the half row); a training row
  // leaves val_loss empty (as Lightning's CSVLogger does).
  Json objective = command(
      "f=\"$1/metrics.csv\"\n"
      "sleep 0.3\n"
      "printf 'epoch,step,train_loss,val_loss\\n0,10,1.5,0.9\\n' > \"$f\"\n"
      "sleep 0.25\n"
      "printf '1,20,1.1,' >> \"$f\"\n"
      "sleep 0.25\n"
      "printf '0.7' >> \"$f\"\n"
      "sleep 0.25\n"
      "printf '\\n1,25,1.0,\\n2,30,0.9,0.6' >> \"$f\"\n",  // the last row has no '\n'
      {{"name", "val_loss"},
       {"attrs", {"train_loss"}},
       {"source", {{"file", "{trial_dir}/metrics.csv"}, {"step", "epoch"}}}},
      {"{trial_dir}"});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(t->intermediate_values, (Steps{{0, 0.9}, {1, 0.7}, {2, 0.6}}));
  EXPECT_EQ(*t->value, 0.6);
  EXPECT_EQ(t->user_attrs.value("train_loss", 0.0), 0.9);
  // The folder is the trial's own, under the study's log folder.
  EXPECT_TRUE(fs::exists(dir_ / "logs" / ("trial-" + std::to_string(t->number)) / "metrics.csv"));
}

TEST_F(CommandMetricsTest, CsvFileRewrittenFromTheStartIsNotReadTwice) {
  // Older Lightning CSVLoggers rewrite the whole file on each save, and a
  // new column changes the header.
  Json objective = command(
      "f=\"$1/m.csv\"\n"
      "printf 'epoch,val_loss\\n0,0.9\\n' > \"$f\"\n"
      "sleep 0.3\n"
      "printf 'epoch,val_loss,lr\\n0,0.9,\\n1,0.8,0.1\\n' > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"\n"
      "sleep 0.3\n"
      "printf 'epoch,val_loss,lr,x\\n0,0.9,,\\n1,0.8,0.1,\\n2,0.7,0.1,\\n' > \"$f\"\n",
      {{"name", "val_loss"}, {"source", {{"file", "{trial_dir}/m.csv"}}}}, {"{trial_dir}"});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(t->intermediate_values, (Steps{{1, 0.9}, {2, 0.8}, {3, 0.7}}));
  EXPECT_EQ(*t->value, 0.7);
}

TEST_F(CommandMetricsTest, JsonLinesFileDrivesPruning) {
  std::string term = (dir_ / "term").string();
  Json objective =
      command("trap 'echo term > " + term +
                  "; exit 1' TERM\n"
                  "i=0\n"
                  "while true; do\n"
                  "  i=$((i+1))\n"
                  "  echo \"{\\\"it\\\": $i, \\\"loss\\\": $i}\" >> \"$HPS_DIR/log.jsonl\"\n"
                  "  sleep 0.05\n"
                  "done",
              {{"name", "loss"}, {"source", {{"file", "{trial_dir}/log.jsonl"}, {"step", "it"}}}});
  objective["env"] = {{"HPS_DIR", "{trial_dir}"}};
  TrialPtr t = run_one(objective, std::make_shared<PruneFromStep>(3));
  EXPECT_EQ(t->state, TrialState::kPruned) << t->fail_reason;
  EXPECT_EQ(t->intermediate_values.rbegin()->first, 3);
  EXPECT_EQ(read_file(term), "term\n");
}

TEST_F(CommandMetricsTest, FileNeverCreatedOrWithoutTheColumnFails) {
  Json none = command("echo val_loss=1",
                      {{"name", "val_loss"}, {"source", {{"file", "{trial_dir}/metrics.csv"}}}});
  TrialPtr t = run_one(none);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("metrics.csv: the file was never created"));
  EXPECT_THAT(t->fail_reason, HasSubstr("last lines of output:\nval_loss=1"));

  Json no_column = command(
      "printf 'epoch,loss\\n1,0.5\\n' > \"$1/metrics.csv\"",
      {{"name", "val_loss"}, {"source", {{"file", "{trial_dir}/metrics.csv"}}}}, {"{trial_dir}"});
  t = run_one(no_column);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("no column 'val_loss' in its header (epoch, loss)"));
  EXPECT_THAT(t->fail_reason, Not(HasSubstr("did you mean")));  // no column is near

  Json typo = command("printf 'epoch,val_loss\\n1,0.5\\n' > \"$1/metrics.csv\"",
                      {{"name", "val_los"}, {"source", {{"file", "{trial_dir}/metrics.csv"}}}},
                      {"{trial_dir}"});
  t = run_one(typo);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("no column 'val_los' in its header (epoch, val_loss) "
                                        "(did you mean 'val_loss'?)"));
}

// A fixed path (no {trial_dir}) holding an earlier run's file, last
// modified an hour ago.
fs::path stale_metrics_file(const fs::path& dir, const std::string& text) {
  fs::path f = dir / "fixed.csv";
  std::ofstream(f) << text;
  fs::last_write_time(f, fs::file_time_type::clock::now() - std::chrono::hours(1));
  return f;
}

TEST_F(CommandMetricsTest, StaleMetricsFileOfAnEarlierRunIsNotRead) {
  fs::path f = stale_metrics_file(dir_, "epoch,val_loss\n1,0.123\n2,0.1\n");
  Json objective = command("echo 'training (writes no metrics)'",
                           {{"name", "val_loss"}, {"source", {{"file", f.string()}}}});
  TrialPtr t = run_one(objective);
  ASSERT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("was never seen in " + f.string() +
                                        ": the file was not written during the trial"));
  EXPECT_TRUE(t->intermediate_values.empty());
  EXPECT_THAT(log_text(t), HasSubstr("predates the trial's start"));
}

TEST_F(CommandMetricsTest, StaleMetricsFileRewrittenOrAppendedGivesOnlyThisTrialsRows) {
  const std::string old_rows = "epoch,val_loss\n1,0.123\n";
  Json metrics = {{"name", "val_loss"},
                  {"source", {{"file", (dir_ / "fixed.csv").string()}, {"step", "epoch"}}}};
  // Rewritten in place (the same inode, longer than before): all its rows.
  fs::path f = stale_metrics_file(dir_, old_rows);
  TrialPtr t = run_one(command("sleep 0.3\nprintf 'epoch,val_loss\\n1,0.5\\n2,0.4\\n' > \"$1\"",
                               metrics, {f.string()}));
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(t->intermediate_values, (Steps{{1, 0.5}, {2, 0.4}}));
  EXPECT_EQ(*t->value, 0.4);
  // Appended to (as open(path, "a") does): the earlier run's row is skipped.
  stale_metrics_file(dir_, old_rows);
  t = run_one(command("printf '2,0.4\\n3,0.3\\n' >> \"$1\"", metrics, {f.string()}));
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(t->intermediate_values, (Steps{{2, 0.4}, {3, 0.3}}));
  EXPECT_EQ(*t->value, 0.3);
  EXPECT_THAT(log_text(t), HasSubstr("skipping its 1 row(s) from before the trial"));
}

TEST_F(CommandMetricsTest, ParallelTrialsGetDistinctTrialDirs) {
  // Every trial writes its n into a file of the same name in {trial_dir}.
  Json objective = command(
      "echo \"n=$2\" > \"$1/out.txt\"\nsleep 0.1\n"
      "printf 'step,value\\n1,%s\\n' \"$(cut -d= -f2 \"$1/out.txt\")\" > \"$1/m.csv\"",
      {{"name", "value"}, {"source", {{"file", "{trial_dir}/m.csv"}}}}, {"{trial_dir}", "{n}"});
  StudyOptions options;
  options.space = test_space();
  Study study =
      Study::create(std::make_shared<InMemoryStorage>(), "p", StudyDirection::kMinimize, options);
  Objective f = make_objective(objective, *options.space, context_);
  study.optimize(f, {.n_trials = 8, .n_jobs = 4, .catch_exceptions = true});
  std::set<std::string> dirs;
  for (const TrialPtr& t : study.trials()) {
    ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    EXPECT_EQ(*t->value, t->params.at("n").get<double>());
    fs::path d = dir_ / "logs" / ("trial-" + std::to_string(t->number));
    EXPECT_EQ(read_file(d / "out.txt"), "n=" + std::to_string(t->params.at("n").get<int>()) + "\n");
    dirs.insert(d.string());
  }
  EXPECT_EQ(dirs.size(), 8u);
}

// ---------------------------------------------------------------- config errors

std::string config_error(const Json& metrics, const Json& argv = {"prog"}) {
  Json config = {{"type", "command"}, {"argv", argv}, {"metrics", metrics}};
  try {
    validate_objective(config, test_space());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CommandMetricsConfigTest, ErrorsNameTheFieldAndTheRule) {
  EXPECT_THAT(config_error({{"name", "l"}, {"regex", "loss=(\\d"}}),
              HasSubstr("objective.metrics.regex: does not compile: missing )"));
  EXPECT_THAT(config_error({{"name", "l"}, {"regex", "loss=\\d+"}}),
              HasSubstr("objective.metrics.regex: has no capture group"));
  EXPECT_THAT(config_error({{"name", "l"}, {"regex", "(a)=(b)"}}),
              HasSubstr("objective.metrics.regex: has 2 capture groups: name the value's"));
  EXPECT_THAT(config_error({{"name", "l"}, {"regex", "(?<val>\\S+)"}}),
              HasSubstr("names a group 'val'; only (?<value>...) and (?<step>...)"));
  EXPECT_THAT(config_error({{"name", "l"}, {"regx", "(x)"}}),
              HasSubstr("objective.metrics.regx: unknown key"));
  EXPECT_THAT(config_error({{"regex", "(x)"}}), HasSubstr("objective.metrics.name: required"));
  EXPECT_THAT(config_error({{"name", "l"}, {"final", "min"}}),
              HasSubstr("objective.metrics.final: must be \"last\" or \"best\""));
  EXPECT_THAT(config_error({{"name", "l"}, {"source", "stdio"}}),
              HasSubstr("objective.metrics.source: unknown source 'stdio'"));
  EXPECT_THAT(config_error({{"name", "l"}, {"source", {{"file", "m.csv"}, {"fromat", "csv"}}}}),
              HasSubstr("objective.metrics.source.fromat: unknown key"));
  EXPECT_THAT(config_error({{"name", "l"}, {"source", {{"file", "m.txt"}}}}),
              HasSubstr("objective.metrics.source.format: required when"));
  EXPECT_THAT(config_error({{"name", "l"}, {"regex", "(x)"}, {"source", {{"file", "m.csv"}}}}),
              HasSubstr("objective.metrics.regex: applies to output lines only"));
  EXPECT_THAT(config_error({{"name", "l"}, {"source", {{"file", "{x}/m.csv"}}}}),
              HasSubstr("objective.metrics.source.file: only the placeholder {trial_dir}"));
  EXPECT_THAT(config_error({{"name", "l"}, {"attrs", {{{"name", "a"}, {"regex", "a"}}}}}),
              HasSubstr("objective.metrics.attrs[0].regex: has no capture group"));
  EXPECT_THAT(config_error({{"name", "l"}, {"attrs", {"l"}}}),
              HasSubstr("objective.metrics.attrs[0]: 'l' is the objective's metric"));
  EXPECT_THAT(config_error("val_loss"), HasSubstr("objective.metrics: must be an object"));
  EXPECT_THAT(config_error({{"name", "l"}}, {"prog", "{trial_dir?}"}),
              HasSubstr("objective.argv[1]: {trial_dir?}"));
  // Valid: (?<name>) and (?P<name>) spellings, a '(' in a class.
  EXPECT_EQ(config_error({{"name", "l"}, {"regex", R"([(]it (?<step>\d+)\) (?P<value>\S+))"}}), "");
  EXPECT_EQ(config_error({{"name", "l"}, {"source", {{"file", "{trial_dir}/m.jsonl"}}}},
                         {"prog", "--out={trial_dir}"}),
            "");
}

TEST(CommandMetricsConfigTest, BestNeedsTheStudysDirection) {
  Json config = {
      {"type", "command"}, {"argv", {"prog"}}, {"metrics", {{"name", "l"}, {"final", "best"}}}};
  EXPECT_THROW(make_objective(config, test_space(), ObjectiveContext{}), ConfigError);
  ObjectiveContext with;
  with.direction = StudyDirection::kMaximize;
  EXPECT_NO_THROW(make_objective(config, test_space(), with));
}

TEST_F(CommandMetricsTest, BadMetricsAreRefusedBeforeTheStoreIsTouched) {
  fs::path space = dir_ / "space.json";
  std::ofstream(space) << R"({"study": {"name": "bad", "direction": "minimize"},
    "budget": {"n_trials": 1},
    "space": {"x": {"type": "float", "low": 0, "high": 1}},
    "objective": {"type": "command", "argv": ["true"],
                  "metrics": {"name": "loss", "regex": "loss=\\d+"}}})";
  fs::path db = dir_ / "study.db";
  std::string cmd = std::string("'") + HPSEARCH_CLI_PATH + "' run '" + space.string() +
                    "' --storage '" + db.string() + "' > '" + (dir_ / "out").string() + "' 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_THAT(read_file(dir_ / "out"), HasSubstr("objective.metrics.regex: has no capture group"));
  EXPECT_FALSE(fs::exists(db));
}

TEST(CommandMetricsConfigTest, UnmodifiedExampleConfigsAreValid) {
  const fs::path example = fs::path(HPSEARCH_SOURCE_DIR) / "examples" / "unmodified";
  for (const char* file : {"space_regex.json", "space_csv.json"}) {
    StudyConfig config = StudyConfig::from_file((example / file).string());
    EXPECT_NO_THROW(validate_objective(config.objective, config.space)) << file;
    EXPECT_TRUE(config.objective.contains("metrics")) << file;
  }
}

// ---------------------------------------------------------------- the collector

TEST(MetricNumberTest, ReadsNumbersAndNonFiniteSpellingsOnly) {
  EXPECT_EQ(parse_metric_number("0.41"), 0.41);
  EXPECT_EQ(parse_metric_number(" -1e-3 "), -1e-3);
  EXPECT_EQ(parse_metric_number("+2"), 2.0);
  EXPECT_EQ(parse_metric_number("-Infinity"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(*parse_metric_number("NaN")));
  for (const char* bad : {"", "abc", "0x10", "1,5", "--1", "+-1", "1e", "nan(0)", "8841/10000"})
    EXPECT_FALSE(parse_metric_number(bad)) << bad;
}

// Fuzz-style: random bytes, random lines with metric-like text, and lines
// of random length never throw, and the valid lines among them are all
// collected, in order.
TEST(MetricsCollectorTest, RandomLinesNeverBreakCollection) {
  MetricsConfig config = parse_metrics_config(Json{
      {"name", "loss"}, {"attrs", {{{"name", "s"}, {"regex", "s(?<value>[^ ]*) (?<step>x*)"}}}}});
  std::vector<double> seen;
  std::vector<std::string> notes;
  MetricsCollector c(
      config, "", StudyDirection::kMinimize, [&](std::int64_t, double v) { seen.push_back(v); },
      [&](const std::string& n) { notes.push_back(n); });
  std::mt19937_64 rng(12345);
  const std::string alphabet = "loss=:e.-+0123456789 nainf[]epochstep\t'\"\r\xff\xfe";
  for (int i = 0; i < 20000; ++i) {
    std::string line;
    std::size_t len = rng() % (i % 100 == 0 ? 5000 : 60);
    bool bytes = rng() % 2;
    for (std::size_t k = 0; k < len; ++k)
      line += bytes ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
    // Random lines may hold valid metrics too; the plain ones below must
    // each give exactly their value.
    EXPECT_NO_THROW(c.output_line(rng() % 2, line));
    if (i % 7 == 0) {
      double v = static_cast<double>(i) / 7.0;
      std::size_t n = seen.size();
      c.output_line(false, "loss=" + std::to_string(v));
      ASSERT_EQ(seen.size(), n + 1);
      EXPECT_EQ(seen.back(), std::stod(std::to_string(v)));
    }
  }
  EXPECT_LE(notes.size(), 101u);  // not-a-number notes are capped
}

TEST(MetricsCollectorTest, CarriageReturnSegmentsAreReadAndReportSegmentsSkipped) {
  MetricsConfig config = parse_metrics_config(Json{{"name", "loss"}});
  Steps seen;
  MetricsCollector c(
      config, "", StudyDirection::kMinimize, [&](std::int64_t step, double v) { seen[step] = v; },
      [](const std::string&) {});
  c.output_line(true, "\rstep 1 loss=0.5\r\rstep 2 loss=0.4\rhpsearch: loss=9\r");
  c.output_line(false, "step 3 loss=0.3\r");
  EXPECT_EQ(seen, (Steps{{1, 0.5}, {2, 0.4}, {3, 0.3}}));
  EXPECT_EQ(c.final_value(), 0.3);
}

}  // namespace
}  // namespace hps
