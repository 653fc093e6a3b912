// Tests of the "command" objective (objectives/command.h) and of
// ChildProcess (objectives/child_process.h): programs are small /bin/sh
// scripts written into a scratch directory, run through a Study.
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "objectives/child_process.h"
#include "objectives/command.h"
#include "objectives/objective.h"
#include "search/errors.h"
#include "search/study.h"
#include "tests/support/command_fixture.h"
#include "tests/support/log_capture.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using testsupport::processes_in_group;

using testsupport::PruneFromStep;

SearchSpace test_space() {
  return SearchSpace::from_json(Json::parse(R"({
    "x":   {"type": "float", "low": -10, "high": 10},
    "n":   {"type": "int", "low": 1, "high": 1000},
    "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
    "m":   {"type": "float", "low": 0, "high": 1, "when": {"opt": "sgd"}}
  })"));
}

// Whether process `pid` still runs (absent or a zombie counts as not running).
bool is_running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

// Waits (bounded) until `pid` stops running; true if it did.
bool stops_running(pid_t pid) {
  for (int i = 0; i < 500 && is_running(pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return !is_running(pid);
}

int count_open_fds() {
  int n = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  while (dirent* e = ::readdir(dir))
    if (e->d_name[0] != '.') ++n;
  ::closedir(dir);
  return n - 1;  // the directory stream itself
}

using testsupport::read_file;

pid_t read_pid(const fs::path& path) {
  std::string text = read_file(path);
  return text.empty() ? -1 : static_cast<pid_t>(std::stol(text));
}

class CommandObjectiveTest : public testsupport::CommandFixture {
 protected:
  CommandObjectiveTest() : CommandFixture("command-test") {}

  // An objective config that runs a /bin/sh script of `body` with `args`
  // (templates).
  Json command(const std::string& body, const std::vector<std::string>& args = {}) {
    return Json{{"type", "command"}, {"argv", script_argv(body, args)}};
  }

  // Runs one trial with `params` and returns it.
  TrialPtr run_one(const Json& objective, const Params& params,
                   std::shared_ptr<Pruner> pruner = nullptr) {
    return run_trial(objective, test_space(), params, std::move(pruner));
  }
};

const Params kAdam = {{"x", 1.5}, {"n", 7}, {"opt", "adam"}};
const Params kSgd = {{"x", 1.5}, {"n", 7}, {"opt", "sgd"}, {"m", 0.25}};

// ---------------------------------------------------------------- values

TEST_F(CommandObjectiveTest, FinalValueIsTheTrialValueAndParamsReadBackExactly) {
  // The program returns x read from its command line: the value must be
  // bit-identical to the param.
  const double x = 0.1 + 0.2;  // 0.30000000000000004
  Json objective = command(
      "echo starting\n"
      "echo \"hpsearch: {\\\"value\\\": $2}\"",
      {"--x", "{x}"});
  TrialPtr t = run_one(objective, {{"x", x}, {"n", 7}, {"opt", "adam"}});
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  ASSERT_TRUE(t->value);
  EXPECT_EQ(*t->value, x);
}

TEST_F(CommandObjectiveTest, DoubledBracesAreLiteralBracesSoJsonFitsInAnArgument) {
  // '{{' and '}}' are literal braces (as in Python's str.format and fmt),
  // next to a placeholder: the program prints the protocol line itself.
  Json objective = {{"type", "command"},
                    {"argv", {"/bin/sh", "-c", R"(echo 'hpsearch: {{"value": {x}}}')"}}};
  TrialPtr t = run_one(objective, kAdam);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  ASSERT_TRUE(t->value);
  EXPECT_EQ(*t->value, 1.5);
}

TEST(CommandConfigBracesTest, SingleBracesOfJsonAreAnUnknownPlaceholderNamingTheArgument) {
  Json objective = {{"type", "command"},
                    {"argv", {"/bin/sh", "-c", R"(echo 'hpsearch: {"value": 1}')"}}};
  try {
    validate_objective(objective, test_space());
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "objective.argv[2]");
    EXPECT_THAT(e.what(), HasSubstr(R"(placeholder {"value": 1} names no param in space)"));
    EXPECT_THAT(e.what(), HasSubstr("write '{{' and '}}'"));
  }
}

TEST_F(CommandObjectiveTest, IntermediateValuesAndAttrsAreRecorded) {
  Json objective = command(
      "echo 'hpsearch: {\"step\": 1, \"value\": 3.5}'\n"
      "echo 'hpsearch: {\"step\": 2, \"value\": 2.5}'\n"
      "echo 'hpsearch: {\"value\": 2.0, \"attrs\": {\"epochs\": 2, \"note\": \"ok\"}}'");
  TrialPtr t = run_one(objective, kAdam);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 2.0);
  EXPECT_EQ(t->intermediate_values, (std::map<std::int64_t, double>{{1, 3.5}, {2, 2.5}}));
  EXPECT_EQ(t->user_attrs.value("epochs", 0), 2);
  EXPECT_EQ(t->user_attrs.value("note", ""), "ok");
}

TEST_F(CommandObjectiveTest, EnvironmentCarriesTrialAndParams) {
  context_.device = "cpu";
  context_.threads = 3;
  Json objective = command(
      "echo \"hpsearch: {\\\"value\\\": 0, \\\"attrs\\\": {"
      "\\\"number\\\": $HPSEARCH_TRIAL_NUMBER, \\\"params\\\": $HPSEARCH_PARAMS, "
      "\\\"study\\\": \\\"$HPSEARCH_STUDY\\\", \\\"threads\\\": \\\"$HPSEARCH_THREADS\\\", "
      "\\\"omp\\\": \\\"$OMP_NUM_THREADS\\\", \\\"cuda\\\": \\\"${CUDA_VISIBLE_DEVICES-unset}\\\", "
      "\\\"mine\\\": \\\"$MY_VAR\\\"}}\"");
  objective["env"] = {{"MY_VAR", "n={n}"}};
  TrialPtr t = run_one(objective, kSgd);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(t->user_attrs["number"], t->number);
  EXPECT_EQ(t->user_attrs["params"], Json(kSgd));
  EXPECT_EQ(t->user_attrs["study"], "command-test");
  EXPECT_EQ(t->user_attrs["threads"], "3");
  EXPECT_EQ(t->user_attrs["cuda"], "");  // "cpu": no GPU visible
  EXPECT_EQ(t->user_attrs["mine"], "n=7");
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    EXPECT_EQ(t->user_attrs["omp"], "3");
  }
}

TEST_F(CommandObjectiveTest, CudaDeviceIsMappedThroughTheWorkersVisibleDevices) {
  Json objective = command(
      "echo \"hpsearch: {\\\"value\\\": 0, \\\"attrs\\\": {\\\"cuda\\\": "
      "\\\"$CUDA_VISIBLE_DEVICES\\\"}}\"");
  const char* saved = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string saved_value = saved ? saved : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "4,6", 1);
  context_.device = "cuda:1";
  TrialPtr t = run_one(objective, kAdam);
  context_.device = "cuda:2";  // the worker sees only two GPUs
  TrialPtr bad = run_one(objective, kAdam);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  context_.device = "cuda:3";
  TrialPtr plain = run_one(objective, kAdam);
  // "cuda" (a worker with several GPUs, --gpus-per-worker): all of them.
  ::setenv("CUDA_VISIBLE_DEVICES", "2,3", 1);
  context_.device = "cuda";
  TrialPtr all = run_one(objective, kAdam);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  Json objective_unset = command(
      "echo \"hpsearch: {\\\"value\\\": 0, \\\"attrs\\\": {\\\"cuda\\\": "
      "\\\"${CUDA_VISIBLE_DEVICES-unset}\\\"}}\"");
  TrialPtr unset = run_one(objective_unset, kAdam);  // stays unset: every GPU
  if (saved) ::setenv("CUDA_VISIBLE_DEVICES", saved_value.c_str(), 1);

  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(t->user_attrs["cuda"], "6");
  EXPECT_EQ(bad->state, TrialState::kFail);
  EXPECT_THAT(bad->fail_reason, HasSubstr("cuda:2"));
  ASSERT_EQ(plain->state, TrialState::kComplete) << plain->fail_reason;
  EXPECT_EQ(plain->user_attrs["cuda"], "3");
  ASSERT_EQ(all->state, TrialState::kComplete) << all->fail_reason;
  EXPECT_EQ(all->user_attrs["cuda"], "2,3");
  ASSERT_EQ(unset->state, TrialState::kComplete) << unset->fail_reason;
  EXPECT_EQ(unset->user_attrs["cuda"], "unset");
}

TEST_F(CommandObjectiveTest, StdinIsDevNull) {
  Json objective = command(
      "if read line; then v=1; else v=0; fi\n"
      "echo \"hpsearch: {\\\"value\\\": $v}\"");
  TrialPtr t = run_one(objective, kAdam);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.0);
}

// ---------------------------------------------------------------- pruning

TEST_F(CommandObjectiveTest, PruneTerminatesTheProcessGroup) {
  // The script starts a helper in its group, then reports forever; SIGTERM
  // is recorded by the trap.
  Json objective =
      command("trap 'echo term > " + (dir_ / "term").string() + "; exit 1' TERM\n" +
              "sleep 1000 &\n"
              "echo $! > " +
              (dir_ / "helper").string() + "\n" + "echo $$ > " + (dir_ / "leader").string() + "\n" +
              "i=0\n"
              "while true; do\n"
              "  i=$((i+1))\n"
              "  echo \"hpsearch: {\\\"step\\\": $i, \\\"value\\\": $i}\"\n"
              "  sleep 0.02\n"
              "done");
  TrialPtr t = run_one(objective, kAdam, std::make_shared<PruneFromStep>(3));
  EXPECT_EQ(t->state, TrialState::kPruned) << t->fail_reason;
  EXPECT_EQ(t->intermediate_values.rbegin()->first, 3);
  pid_t leader = read_pid(dir_ / "leader");
  pid_t helper = read_pid(dir_ / "helper");
  ASSERT_GT(leader, 0);
  ASSERT_GT(helper, 0);
  // The leader was reaped by us (no zombie of ours), the helper is dead.
  errno = 0;
  EXPECT_EQ(::waitpid(leader, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  EXPECT_FALSE(is_running(leader));
  EXPECT_TRUE(stops_running(helper));
  EXPECT_EQ(read_file(dir_ / "term"), "term\n");
  EXPECT_THAT(read_file(log_of(t)), HasSubstr("pruned after step 3"));
}

TEST_F(CommandObjectiveTest, FinalValuePrintedBeforeThePruneTookEffectCountsComplete) {
  // The pruner decides at step 1, but the program (which ignores SIGTERM)
  // has printed steps 1..3 and its final value and exits 0: it returned a
  // value, so the trial is COMPLETE with every value, as in Optuna.
  Json objective = command(
      "trap '' TERM\n"
      "for s in 1 2 3; do echo \"hpsearch: {\\\"step\\\": $s, \\\"value\\\": $s}\"; done\n"
      "echo 'hpsearch: {\"value\": 9}'\n"
      "exit 0");
  objective["grace_s"] = 5.0;
  TrialPtr t = run_one(objective, kAdam, std::make_shared<PruneFromStep>(1));
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 9.0);
  EXPECT_EQ(t->intermediate_values, (std::map<std::int64_t, double>{{1, 1.0}, {2, 2.0}, {3, 3.0}}));
  EXPECT_THAT(read_file(log_of(t)), HasSubstr("counts COMPLETE; pruned after step 1"));
}

TEST_F(CommandObjectiveTest, TextInsideALineLongerThanTheLimitIsNotAReport) {
  // A program echoing untrusted text: a line of 1 MiB of 'a' whose tail,
  // past the reader's 1 MiB cut, looks like a report line (and a later
  // final value would replace the first). Only lines that really start with
  // 'hpsearch: ' count.
  Json objective = command(
      "echo 'hpsearch: {\"value\": 5}'\n"
      "head -c 1048576 /dev/zero | tr '\\000' 'a'\n"
      "echo 'hpsearch: {\"value\": -1000}'");
  TrialPtr t = run_one(objective, kAdam);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 5.0);
}

TEST_F(CommandObjectiveTest, PruneKillsAProgramThatIgnoresSigterm) {
  Json objective = command(
      "trap '' TERM\n"
      "sleep 1000 &\n"
      "echo $! > " +
      (dir_ / "helper").string() + "\n" +
      "echo 'hpsearch: {\"step\": 0, \"value\": 1}'\n"
      "while true; do sleep 0.02; done");
  objective["grace_s"] = 0.1;
  TrialPtr t = run_one(objective, kAdam, std::make_shared<PruneFromStep>(0));
  EXPECT_EQ(t->state, TrialState::kPruned) << t->fail_reason;
  pid_t helper = read_pid(dir_ / "helper");
  ASSERT_GT(helper, 0);
  EXPECT_TRUE(stops_running(helper));
  EXPECT_THAT(read_file(log_of(t)), HasSubstr("signal 9"));
}

// ---------------------------------------------------------------- failures

TEST_F(CommandObjectiveTest, CrashFailsWithTheEndOfStderr) {
  Json objective = command(
      "echo 'hpsearch: {\"value\": 1}'\n"
      "echo 'Traceback (most recent call last):' >&2\n"
      "echo 'ZeroDivisionError: division by zero' >&2\n"
      "printf 'bytes \\377\\300\\200 caf\\303\\251\\n' >&2\n"
      "exit 3");
  TrialPtr t = run_one(objective, kAdam);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("exit code 3"));
  EXPECT_THAT(t->fail_reason, HasSubstr("ZeroDivisionError: division by zero"));
  // Binary output is made valid UTF-8 (the reason goes into JSON), text kept.
  EXPECT_THAT(t->fail_reason, HasSubstr("bytes \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD caf\xC3\xA9"));
  EXPECT_NO_THROW(Json(t->fail_reason).dump());
}

TEST_F(CommandObjectiveTest, ANulByteInStderrIsEscapedAndTheRestOfTheReasonKept) {
  // The reason travels as an exception's what() (a C string): a raw NUL
  // would cut it there.
  Json objective = command("printf 'before\\000after\\n' >&2\nexit 3");
  TrialPtr t = run_one(objective, kAdam);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("exit code 3"));
  EXPECT_THAT(t->fail_reason, HasSubstr("before\\0after")) << t->fail_reason;
}

TEST_F(CommandObjectiveTest, DeathBySignalFails) {
  Json objective = command("echo oops >&2\nkill -SEGV $$");
  TrialPtr t = run_one(objective, kAdam);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("signal 11"));
  EXPECT_THAT(t->fail_reason, HasSubstr("oops"));
}

// SIGTERM from outside while the worker is not being stopped (no interrupt):
// a failure of the trial, not an interruption (an interrupted run's program
// killed with its worker is covered by tests/slurm_cluster_test.sh, (c)).
TEST_F(CommandObjectiveTest, DeathBySigtermWithoutAStopFails) {
  Json objective = command("echo terminated >&2\nkill -TERM $$");
  TrialPtr t = run_one(objective, kAdam);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("signal 15"));
  EXPECT_THAT(t->fail_reason, HasSubstr("terminated"));
}

TEST_F(CommandObjectiveTest, LongStderrKeepsOnlyItsLastLines) {
  Json objective = command(
      "i=0; while [ $i -lt 1000 ]; do echo \"line $i\" >&2; i=$((i+1)); done\n"
      "exit 1");
  TrialPtr t = run_one(objective, kAdam);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("line 999"));
  EXPECT_THAT(t->fail_reason, Not(HasSubstr("line 100\n")));
  // The log has all of it.
  EXPECT_THAT(read_file(log_of(t)), HasSubstr("line 0\n"));
}

TEST_F(CommandObjectiveTest, NoFinalValueFails) {
  Json objective = command("echo 'hpsearch: {\"step\": 1, \"value\": 1}'\necho bye >&2");
  TrialPtr t = run_one(objective, kAdam);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("without reporting a final value"));
  EXPECT_THAT(t->fail_reason, HasSubstr("bye"));
}

TEST_F(CommandObjectiveTest, TimeoutFails) {
  Json objective = command("echo $$ > " + (dir_ / "leader").string() + "\nexec sleep 1000");
  objective["timeout_s"] = 0.2;
  objective["grace_s"] = 5;
  TrialPtr t = run_one(objective, kAdam);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, StartsWith("timeout"));
  pid_t leader = read_pid(dir_ / "leader");
  ASSERT_GT(leader, 0);
  EXPECT_FALSE(is_running(leader));
}

TEST_F(CommandObjectiveTest, NanValueFails) {
  for (const char* nan : {"NaN", "\"nan\""}) {
    Json objective = command(std::string("echo 'hpsearch: {\"value\": ") + nan + "}'");
    TrialPtr t = run_one(objective, kAdam);
    EXPECT_EQ(t->state, TrialState::kFail) << nan;
    EXPECT_THAT(t->fail_reason, HasSubstr("NaN")) << nan;
  }
}

TEST_F(CommandObjectiveTest, InfinityIsAValue) {
  Json objective = command("echo 'hpsearch: {\"value\": -Infinity}'");
  TrialPtr t = run_one(objective, kAdam);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, -std::numeric_limits<double>::infinity());
}

TEST_F(CommandObjectiveTest, GarbageOnStdoutIsIgnoredAndLogged) {
  Json objective = command(
      "echo 'epoch 1: loss 0.5'\n"
      "printf '\\001\\002\\377 binary\\n'\n"
      "echo 'hpsearch: this is not json'\n"
      "echo 'hpsearch: {\"vlaue\": 1}'\n"
      "echo 'hpsearch: [1, 2]'\n"
      "echo '   hpsearch: {\"value\": 99}'\n"
      "echo 'xhpsearch: {\"value\": 98}'\n"
      "head -c 3000000 /dev/zero | tr '\\0' 'a'\n"
      "echo\n"
      "echo 'hpsearch: {\"value\": 0.75}'\n"
      "printf 'no newline at the end'");
  TrialPtr t = run_one(objective, kAdam);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.75);
  std::string log = read_file(log_of(t));
  EXPECT_THAT(log, HasSubstr("epoch 1: loss 0.5\n"));
  EXPECT_THAT(log, HasSubstr("unknown key 'vlaue'"));
  EXPECT_THAT(log, HasSubstr("no newline at the end\n"));
}

// objective.log_max_bytes: a program that prints far more than the cap
// leaves a log of about the cap, saying where it was cut; its reports past
// the cap are still read, and the exit status is still noted.
TEST_F(CommandObjectiveTest, TrialLogIsCutAtLogMaxBytes) {
  Json objective = command(
      "echo 'first line'\n"
      "i=0; while [ $i -lt 2000 ]; do echo \"line $i of a chatty program, padded to be long\"; "
      "i=$((i+1)); done\n"
      "echo 'hpsearch: {\"value\": 0.5}'");
  objective["log_max_bytes"] = 8192;
  TrialPtr t = run_one(objective, kAdam);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.5);
  std::string log = read_file(log_of(t));
  EXPECT_THAT(log, HasSubstr("first line\n"));
  EXPECT_THAT(log, HasSubstr("output cut: the log reached 8192 bytes (objective.log_max_bytes)"));
  EXPECT_THAT(log, Not(HasSubstr("line 1999 of")));
  EXPECT_THAT(log, HasSubstr("program ended"));
  EXPECT_LE(log.size(), 8192u + 64u * 1024u);
  // Filled up to the cap (the line that did not fit is cut), then nothing
  // more of the program's output: a 12 KB line cuts the log at once.
  const std::size_t cut = log.find("[hpsearch] output cut");
  ASSERT_NE(cut, std::string::npos);
  EXPECT_EQ(cut, 8192u) << log.substr(0, 300);
  EXPECT_THAT(log.substr(cut), Not(HasSubstr("line ")));

  // Without the field the default (64 MiB) keeps all of it.
  objective.erase("log_max_bytes");
  TrialPtr all = run_one(objective, kAdam);
  ASSERT_EQ(all->state, TrialState::kComplete) << all->fail_reason;
  EXPECT_THAT(read_file(log_of(all)), HasSubstr("line 1999 of"));
}

// The trial log holds the program's output (the env it prints): a log
// folder made beforehand by someone else (mode 0777) gets no log, and a link
// planted at trial-N.log in the user's own folder is not followed.
TEST_F(CommandObjectiveTest, TrialLogIsNotWrittenThroughAPlantedLinkOrIntoAFolderOthersCanWrite) {
  Json objective = command("echo 'token=s3cr3t'\necho 'hpsearch: {\"value\": 0.5}'");
  const std::string victim = (dir_ / "victim").string();
  { std::ofstream(victim) << "the victim's data"; }
  std::filesystem::create_directory(dir_ / "logs");
  std::filesystem::permissions(dir_ / "logs", std::filesystem::perms::owner_all);
  for (int n = 0; n < 2; ++n)
    std::filesystem::create_symlink(victim,
                                    dir_ / "logs" / ("trial-" + std::to_string(n) + ".log"));
  TrialPtr t;
  {
    testsupport::CapturedLog log(spdlog::level::warn);
    t = run_one(objective, kAdam);
    // The warning names the file and the rule, not only the errno.
    EXPECT_THAT(log.text(),
                HasSubstr(log_of(t).string() + ": the trial log is a symbolic link: refused"))
        << log.text();
  }
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(read_file(victim), "the victim's data");
  EXPECT_TRUE(std::filesystem::is_symlink(log_of(t)));

  std::filesystem::remove_all(dir_ / "logs");
  std::filesystem::create_directory(dir_ / "logs");
  std::filesystem::permissions(dir_ / "logs", std::filesystem::perms::all);
  TrialPtr shared = run_one(objective, kAdam);
  ASSERT_EQ(shared->state, TrialState::kComplete) << shared->fail_reason;
  EXPECT_FALSE(std::filesystem::exists(log_of(shared)));
}

// A trial log planted in the user's own 0700 log folder as a hard link
// (another name for a file elsewhere, which could be any file of the
// user's) or as a FIFO is not written, nor waited on: a warning names the
// file and the rule (written_file_refusal, the rule of the store's files),
// the file keeps its bytes, and the trial runs.
TEST_F(CommandObjectiveTest, TrialLogPlantedAsAHardLinkOrAFifoIsNotWritten) {
  Json objective = command("echo 'token=s3cr3t'\necho 'hpsearch: {\"value\": 0.5}'");
  const std::string victim = (dir_ / "victim").string();
  { std::ofstream(victim) << "the victim's data"; }
  const auto fresh_logs = [&] {
    std::filesystem::remove_all(dir_ / "logs");
    std::filesystem::create_directory(dir_ / "logs");
    std::filesystem::permissions(dir_ / "logs", std::filesystem::perms::owner_all);
  };
  const auto log_name = [&](int n) {
    return dir_ / "logs" / ("trial-" + std::to_string(n) + ".log");
  };
  fresh_logs();
  for (int n = 0; n < 2; ++n) std::filesystem::create_hard_link(victim, log_name(n));
  TrialPtr t;
  {
    testsupport::CapturedLog log(spdlog::level::warn);
    t = run_one(objective, kAdam);
    EXPECT_THAT(log.text(), HasSubstr(log_of(t).string() +
                                      ": the trial log has 3 hard links: refused (another name "
                                      "for a file the program's output would be appended to); "
                                      "remove it"))
        << log.text();
  }
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(read_file(victim), "the victim's data");

  fresh_logs();
  for (int n = 0; n < 2; ++n) ASSERT_EQ(::mkfifo(log_name(n).c_str(), 0600), 0);
  {
    testsupport::CapturedLog log(spdlog::level::warn);
    t = run_one(objective, kAdam);  // returns: the FIFO has no reader, and is not waited on
    EXPECT_THAT(log.text(), HasSubstr(log_of(t).string() + ": the trial log is not a regular file"))
        << log.text();
  }
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
}

// {trial_dir} under the study's log folder: a trial folder made beforehand
// writable by others, or a link planted in its place, is not used: the
// trial FAILs naming the folder and the rule, and the program writes nothing
// through the link.
TEST_F(CommandObjectiveTest, TrialDirPlantedAsALinkOrWritableByOthersIsRefused) {
  namespace fs = std::filesystem;
  Json objective = command("echo x > \"$D/out\"\necho 'hpsearch: {\"value\": 0.5}'");
  objective["env"] = {{"D", "{trial_dir}"}};
  const fs::path logs = dir_ / "logs";
  fs::create_directory(logs);
  fs::permissions(logs, fs::perms::owner_all);
  TrialPtr fine = run_one(objective, kAdam);
  ASSERT_EQ(fine->state, TrialState::kComplete) << fine->fail_reason;
  EXPECT_TRUE(fs::exists(logs / "trial-0" / "out"));

  fs::remove_all(logs / "trial-0");
  const fs::path elsewhere = dir_ / "elsewhere";
  fs::create_directory(elsewhere);
  fs::create_directory_symlink(elsewhere, logs / "trial-0");
  TrialPtr linked = run_one(objective, kAdam);
  EXPECT_EQ(linked->state, TrialState::kFail);
  EXPECT_THAT(linked->fail_reason, HasSubstr("symbolic link"));
  EXPECT_FALSE(fs::exists(elsewhere / "out"));

  fs::remove(logs / "trial-0");
  fs::create_directory(logs / "trial-0");
  fs::permissions(logs / "trial-0", fs::perms::all);
  TrialPtr shared = run_one(objective, kAdam);
  EXPECT_EQ(shared->state, TrialState::kFail);
  EXPECT_THAT(shared->fail_reason, HasSubstr("writable by group or others"));
  EXPECT_FALSE(fs::exists(logs / "trial-0" / "out"));
}

// The parent <study>.logs of {trial_dir} is checked as the trial folder is:
// one planted as a link, writable by others or owned by another user FAILs
// the trial naming it and the rule, and no trial folder is made through it.
TEST_F(CommandObjectiveTest, TrialDirsParentPlantedAsALinkWritableByOthersOrTheirsIsRefused) {
  namespace fs = std::filesystem;
  Json objective = command("echo x > \"$D/out\"\necho 'hpsearch: {\"value\": 0.5}'");
  objective["env"] = {{"D", "{trial_dir}"}};
  const fs::path logs = dir_ / "logs";
  const auto expect_refused = [&](const std::string& rule) {
    TrialPtr t = run_one(objective, kAdam);
    EXPECT_EQ(t->state, TrialState::kFail);
    EXPECT_THAT(t->fail_reason, HasSubstr(logs.string() + ": " + rule)) << t->fail_reason;
    // The hint fits a folder hpsearch makes, not a folder the user named.
    EXPECT_THAT(t->fail_reason, HasSubstr("hpsearch makes this folder itself: remove the one"));
    EXPECT_THAT(t->fail_reason, Not(HasSubstr("name the folder it points to")));
  };

  // A link to a folder of the attacker's choosing: nothing is made there.
  const fs::path elsewhere = dir_ / "elsewhere";
  fs::create_directory(elsewhere);
  fs::permissions(elsewhere, fs::perms::owner_all);
  fs::remove_all(logs);
  fs::create_directory_symlink(elsewhere, logs);
  expect_refused("is a symbolic link");
  EXPECT_TRUE(fs::is_empty(elsewhere));

  // Writable by others.
  fs::remove(logs);
  fs::create_directory(logs);
  fs::permissions(logs, fs::perms::all);
  expect_refused("writable by group or others (mode 0777)");
  EXPECT_FALSE(fs::exists(logs / "trial-0"));

  // Owned by another user (only root can give a folder away).
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot make a folder of another uid";
  fs::permissions(logs, fs::perms::owner_all);
  ASSERT_EQ(::chown(logs.c_str(), 4242, 4242), 0);
  expect_refused("owned by uid 4242, not by this user");
  EXPECT_FALSE(fs::exists(logs / "trial-0"));
}

// {trial_dir} is an absolute path: with a relative log folder (the CLI's
// "./<study>.logs") and the program run in another folder (objective.cwd),
// the program still finds its trial folder (it got "./x.logs/trial-0",
// relative to the worker's folder, and failed).
TEST_F(CommandObjectiveTest, TrialDirIsAbsoluteSoAProgramInAnotherFolderFindsIt) {
  namespace fs = std::filesystem;
  const fs::path before = fs::current_path();
  fs::current_path(dir_);
  fs::create_directory(dir_ / "work");
  context_.log_dir = "./logs";
  Json objective = command("echo x > \"$D/out\"\necho 'hpsearch: {\"value\": 0.5}'");
  objective["env"] = {{"D", "{trial_dir}"}};
  objective["cwd"] = "work";
  TrialPtr t = run_one(objective, kAdam);
  fs::current_path(before);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_TRUE(fs::exists(dir_ / "logs" / "trial-0" / "out"));
  EXPECT_FALSE(fs::exists(dir_ / "work" / "logs"));
}

TEST_F(CommandObjectiveTest, UnreadableReportIsNamedWhenNoValueFollows) {
  Json objective = command("echo 'hpsearch: {\"value\": \"fast\"}'");
  TrialPtr t = run_one(objective, kAdam);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("\"value\" must be a number"));
}

TEST_F(CommandObjectiveTest, MissingProgramFails) {
  Json objective = {{"type", "command"}, {"argv", {(dir_ / "no_such_program").string()}}};
  TrialPtr t = run_one(objective, kAdam);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_THAT(t->fail_reason, HasSubstr("cannot run"));
  EXPECT_THAT(t->fail_reason, HasSubstr("No such file or directory"));
}

TEST_F(CommandObjectiveTest, CwdIsTheProgramsWorkingDirectory) {
  fs::create_directories(dir_ / "work");
  std::ofstream(dir_ / "work" / "value.txt") << "4.25\n";
  Json objective = command("echo \"hpsearch: {\\\"value\\\": $(cat value.txt)}\"");
  objective["cwd"] = (dir_ / "work").string();
  TrialPtr t = run_one(objective, kAdam);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 4.25);

  objective["cwd"] = (dir_ / "missing").string();
  TrialPtr bad = run_one(objective, kAdam);
  EXPECT_EQ(bad->state, TrialState::kFail);
  EXPECT_THAT(bad->fail_reason, HasSubstr("objective.cwd"));
}

// ---------------------------------------------------------------- descriptors

TEST_F(CommandObjectiveTest, NoDescriptorLeaksIntoTheProgramOrTheWorker) {
  // A descriptor opened without O_CLOEXEC must not reach the program.
  int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::dup2(fd, 200), 200);
  ::close(fd);
  Json leak = command(
      "if [ -e /proc/$$/fd/200 ]; then v=1; else v=0; fi\n"
      "echo \"hpsearch: {\\\"value\\\": $v}\"");
  TrialPtr t = run_one(leak, kAdam);
  ::close(200);
  ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
  EXPECT_EQ(*t->value, 0.0);

  // Many trials of every outcome leave the worker's descriptors as they were.
  Json ok = command("echo 'hpsearch: {\"value\": 1}'; echo err >&2");
  Json crash = command("exit 2");
  Json pruned =
      command("while true; do echo 'hpsearch: {\"step\": 1, \"value\": 1}'; sleep 1; done");
  Json timeout = command("exec sleep 1000");
  timeout["timeout_s"] = 0.05;
  Json missing = {{"type", "command"}, {"argv", {(dir_ / "no_such_program").string()}}};
  run_one(ok, kAdam);  // first use: logging, registry, ...
  int before = count_open_fds();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(run_one(ok, kAdam)->state, TrialState::kComplete);
    EXPECT_EQ(run_one(crash, kAdam)->state, TrialState::kFail);
    EXPECT_EQ(run_one(pruned, kAdam, std::make_shared<PruneFromStep>(0))->state,
              TrialState::kPruned);
    EXPECT_EQ(run_one(timeout, kAdam)->state, TrialState::kFail);
    EXPECT_EQ(run_one(missing, kAdam)->state, TrialState::kFail);
  }
  EXPECT_EQ(count_open_fds(), before);
}

TEST_F(CommandObjectiveTest, ParallelTrialsEachGetTheirOwnValue) {
  Json objective = command("sleep 0.05\necho \"hpsearch: {\\\"value\\\": $2}\"", {"--n", "{n}"});
  StudyOptions options;
  options.space = test_space();
  Study study =
      Study::create(std::make_shared<InMemoryStorage>(), "p", StudyDirection::kMinimize, options);
  Objective f = make_objective(objective, *options.space, context_);
  study.optimize(f, {.n_trials = 12, .n_jobs = 4, .catch_exceptions = true});
  auto trials = study.trials();
  ASSERT_EQ(trials.size(), 12u);
  for (const TrialPtr& t : trials) {
    ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    EXPECT_EQ(*t->value, t->params.at("n").get<double>());
  }
}

// ---------------------------------------------------------------- examples/python

TEST_F(CommandObjectiveTest, PythonExampleRunsThroughTheCli) {
  if (std::system("python3 -c 'import json' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 is not installed";
  const fs::path example = fs::path(HPSEARCH_SOURCE_DIR) / "examples" / "python";
  // Both example configs are valid.
  for (const char* file : {"space.json", "space_torch.json"}) {
    StudyConfig config = StudyConfig::from_file((example / file).string());
    EXPECT_NO_THROW(validate_objective(config.objective, config.space)) << file;
  }
  const fs::path db = dir_ / "example.db";
  std::string cmd = "cd '" + example.string() + "' && '" + HPSEARCH_CLI_PATH +
                    "' run space.json --n-trials 3 --storage '" + db.string() + "' > '" +
                    (dir_ / "out").string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(dir_ / "out");
  Study study = Study::load(open_storage(db.string()), "python-logreg");
  auto trials = study.trials();
  ASSERT_EQ(trials.size(), 3u);
  for (const TrialPtr& t : trials) {
    ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    EXPECT_TRUE(std::isfinite(*t->value));
    EXPECT_GT(*t->value, 0.0);  // a log loss
    EXPECT_EQ(t->intermediate_values.size(), 8u);
    EXPECT_TRUE(t->user_attrs.contains("best_epoch"));
    // The program's own output is in the trial's log, next to the storage.
    EXPECT_THAT(
        read_file(dir_ / "python-logreg.logs" / ("trial-" + std::to_string(t->number) + ".log")),
        HasSubstr("epoch 8: validation loss"));
  }
}

// ---------------------------------------------------------------- placeholders

TEST(CommandArgvTest, FormatsValuesSoTheyReadBack) {
  EXPECT_EQ(format_param_value(Json(0.001)), "0.001");
  EXPECT_EQ(format_param_value(Json(1e-5)), "1e-05");
  EXPECT_EQ(format_param_value(Json(0.1 + 0.2)), "0.30000000000000004");
  EXPECT_EQ(format_param_value(Json(std::int64_t{-42})), "-42");
  EXPECT_EQ(format_param_value(Json(std::uint64_t{18446744073709551615u})), "18446744073709551615");
  EXPECT_EQ(format_param_value(Json(true)), "true");
  EXPECT_EQ(format_param_value(Json(false)), "false");
  EXPECT_EQ(format_param_value(Json("a b {c}")), "a b {c}");
  EXPECT_EQ(format_param_value(Json(nullptr)), "null");
  for (double v : {1.0 / 3.0, 6.02214076e23, 5e-324, -0.0, 123456789.0}) {
    EXPECT_EQ(std::strtod(format_param_value(Json(v)).c_str(), nullptr), v);
  }
}

TEST(CommandArgvTest, FillsPlaceholdersAndDropsInactiveOptionalOnes) {
  Json config = {{"type", "command"},
                 {"argv",
                  {"python3", "train.py", "--lr={x}", "--n", "{n}", "--opt", "{opt}", "--m", "{m?}",
                   "--m2={m?}", "{m?}", "--braces={{{n}}}", "--tail"}}};
  EXPECT_THAT(command_argv(config, kSgd),
              ElementsAre("python3", "train.py", "--lr=1.5", "--n", "7", "--opt", "sgd", "--m",
                          "0.25", "--m2=0.25", "0.25", "--braces={7}", "--tail"));
  EXPECT_THAT(command_argv(config, kAdam),
              ElementsAre("python3", "train.py", "--lr=1.5", "--n", "7", "--opt", "adam",
                          "--braces={7}", "--tail"));
}

TEST(CommandArgvTest, InactiveRequiredPlaceholderIsAnErrorNamingTheArgument) {
  Json config = {{"type", "command"}, {"argv", {"prog", "--m", "{m}"}}};
  try {
    command_argv(config, kAdam);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("objective.argv[2]"));
    EXPECT_THAT(e.what(), HasSubstr("{m?}"));
  }
}

// Returns the ConfigError that validating `objective` throws.
ConfigError validation_error(const Json& objective) {
  try {
    validate_objective(objective, test_space());
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no ConfigError for " << objective.dump();
  return ConfigError("", "");
}

TEST(CommandConfigTest, ValidConfigPasses) {
  EXPECT_NO_THROW(validate_objective(
      Json::parse(R"({"type": "command", "argv": ["python3", "train.py", "--lr", "{x}",
                  "--m", "{m?}"], "cwd": ".", "env": {"A": "{n}", "B": "{m?}"},
                  "timeout_s": 600, "grace_s": 0})"),
      test_space()));
}

TEST(CommandConfigTest, ErrorsNameTheField) {
  struct Case {
    const char* json;
    const char* path;
    const char* rule;
  };
  const Case cases[] = {
      {R"({"type": "command"})", "objective.argv", "required"},
      {R"({"type": "command", "argv": []})", "objective.argv", "must not be empty"},
      {R"({"type": "command", "argv": "python3 train.py"})", "objective.argv", "array"},
      {R"({"type": "command", "argv": ["p", 3]})", "objective.argv[1]", "must be a string"},
      {R"({"type": "command", "argv": ["p", "--lr", "{lr}"]})", "objective.argv[2]",
       "names no param"},
      {R"({"type": "command", "argv": ["p", "{xx}"]})", "objective.argv[1]", "did you mean 'x'"},
      {R"({"type": "command", "argv": ["p", "--m", "{m}"]})", "objective.argv[2]", "{m?}"},
      {R"({"type": "command", "argv": ["p", "{x"]})", "objective.argv[1]", "no closing '}'"},
      {R"({"type": "command", "argv": ["p", "a}b"]})", "objective.argv[1]", "'}}'"},
      {R"({"type": "command", "argv": ["p", "{}"]})", "objective.argv[1]", "empty placeholder"},
      {R"({"type": "command", "argv": ["{opt?}"]})", "objective.argv[0]", "cannot be optional"},
      {R"({"type": "command", "argv": [""]})", "objective.argv[0]", "must name the program"},
      {R"({"type": "command", "argv": ["p"], "cwd": 3})", "objective.cwd", "string"},
      {R"({"type": "command", "argv": ["p"], "env": {"A": 1}})", "objective.env.A", "string"},
      {R"({"type": "command", "argv": ["p"], "env": {"CUDA_VISIBLE_DEVICES": "0"}})",
       "objective.env.CUDA_VISIBLE_DEVICES", "set by hpsearch"},
      {R"({"type": "command", "argv": ["p"], "env": {"A=B": "1"}})", R"(objective.env["A=B"])",
       "variable name"},
      {R"({"type": "command", "argv": ["p"], "env": {"A": "{q}"}})", "objective.env.A",
       "names no param"},
      {R"({"type": "command", "argv": ["p"], "timeout_s": 0})", "objective.timeout_s", "(0, 1e9]"},
      {R"({"type": "command", "argv": ["p"], "grace_s": -1})", "objective.grace_s", "[0, 3600]"},
      {R"({"type": "command", "argv": ["p"], "log_max_bytes": 100})", "objective.log_max_bytes",
       "[4096, 2^50]"},
      {R"({"type": "command", "argv": ["p"], "log_max_bytes": 5000.5})", "objective.log_max_bytes",
       "integer"},
      {R"({"type": "command", "argv": ["p"], "log_max_bytes": "1M"})", "objective.log_max_bytes",
       "integer"},
      {R"({"type": "command", "argv": ["p"], "timeout": 5})", "objective.timeout", "unknown key"},
  };
  for (const Case& c : cases) {
    ConfigError e = validation_error(Json::parse(c.json));
    EXPECT_EQ(e.path(), c.path) << c.json << " -> " << e.what();
    EXPECT_THAT(e.what(), HasSubstr(c.rule)) << c.json;
  }
}

TEST(CommandConfigTest, IsRegistered) {
  auto names = objective_type_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "command"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "sleep"), names.end());
}

// ---------------------------------------------------------------- ChildProcess

TEST(ChildProcessTest, KillChildProcessGroupsStopsRunningChildren) {
  ChildProcess child({{"sleep", "1000"}, "", {"PATH=/usr/bin:/bin"}});
  kill_child_process_groups();
  while (!child.wait_for_output(std::chrono::milliseconds(1000), {})) {
  }
  EXPECT_EQ(child.term_signal(), SIGKILL);
  EXPECT_FALSE(is_running(child.pid()));
}

TEST(ChildProcessTest, GroupIsKilledWhenTheOwnerExits) {
  char tmpl[] = "/tmp/hps_child_exit_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path dir = tmpl;
  fs::path pid_file = dir / "pid";
  pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    // The owner starts a program, waits until it runs, then exits without
    // destroying the ChildProcess: the atexit handler must kill it.
    auto* child = new ChildProcess(
        {{"/bin/sh", "-c", "echo $$ > " + pid_file.string() + "; exec sleep 1000"}, "", {}});
    // Until the pid is written (the shell creates the file before its one
    // write of "PID\n": an empty file is not enough).
    std::error_code ec;
    for (int i = 0; i < 500 && !(fs::file_size(pid_file, ec) > 0 && !ec); ++i)
      child->wait_for_output(std::chrono::milliseconds(10), {});
    std::exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(owner, &status, 0), owner);
  EXPECT_TRUE(WIFEXITED(status));
  pid_t pid = read_pid(pid_file);
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(stops_running(pid));
  fs::remove_all(dir);
}

TEST(ChildProcessTest, GroupDiesWithAnOwnerKilledByKill9) {
  // The owner (a worker) starts a program that leaves a process of its
  // group in the background, then is killed with SIGKILL: no clean-up code
  // of its own runs, yet neither the program nor its background child may
  // survive it.
  char tmpl[] = "/tmp/hps_child_kill9_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path dir = tmpl;
  fs::path leader_file = dir / "leader", bg_file = dir / "bg";
  pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    auto* child = new ChildProcess({{"/bin/sh", "-c",
                                     "sleep 300 & echo $! > " + bg_file.string() + "; echo $$ > " +
                                         leader_file.string() + "; sleep 300"},
                                    "",
                                    {"PATH=/usr/bin:/bin"}});
    (void)child;
    // The constructor has returned: the guard was started before the
    // program (a guard forked after it once let this test, slowed by ASan,
    // kill the owner first).
    std::ofstream(dir / "ready") << "1";
    while (true) ::pause();
  }
  pid_t leader = -1, bg = -1;
  for (int i = 0; i < 1000 && (leader <= 0 || bg <= 0 || !fs::exists(dir / "ready")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    leader = read_pid(leader_file);
    bg = read_pid(bg_file);
  }
  ASSERT_TRUE(fs::exists(dir / "ready"));
  ASSERT_GT(leader, 0);
  ASSERT_GT(bg, 0);
  EXPECT_GE(processes_in_group(leader).size(), 2u);
  ASSERT_EQ(::kill(owner, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(owner, &status, 0), owner);
  ASSERT_TRUE(WIFSIGNALED(status));
  // Within a short bound (a guard reacts in microseconds; 5 s for a loaded
  // machine), nothing of the group is left.
  std::vector<pid_t> left;
  for (int i = 0; i < 500; ++i) {
    left = processes_in_group(leader);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(left.empty()) << left.size() << " processes of group " << leader << " survived";
  EXPECT_FALSE(is_running(leader));
  EXPECT_FALSE(is_running(bg));
  for (pid_t p : left) ::kill(p, SIGKILL);  // clean up after a failure
  fs::remove_all(dir);
}

TEST(ChildProcessTest, StartFailureNamesTheProgram) {
  try {
    ChildProcess child({{"/nonexistent/program"}, "", {}});
    FAIL() << "started";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot run '/nonexistent/program'"));
  }
}

}  // namespace
}  // namespace hps
