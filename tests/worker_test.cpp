// Tests of hps::Worker (workers/worker.h) embedded in this test program,
// serving a coordinator that runs in another process: `hpsearch run
// --workers 0 --bind ipc://...`, or a forked process running a Coordinator
// with a test pruner.
#include "workers/worker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/coordinator.h"
#include "objectives/child_process.h"
#include "search/errors.h"
#include "search/storage.h"
#include "search/study.h"

extern char** environ;

namespace hps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Prunes a trial once it reports step >= 3 with a value above 10.
class PruneHighValues : public Pruner {
 public:
  bool prune(const PruningContext& ctx) override {
    auto last = ctx.trial.last_intermediate();
    return ctx.step >= 3 && last && last->second > 10.0;
  }
  std::string name() const override { return "test"; }
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z' &&
         text[close + 2] != 'X';
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hps_worker_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    endpoint_ = "ipc://" + (dir_ / "coordinator.sock").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  WorkerOptions worker_options() const {
    WorkerOptions o;
    o.connect = endpoint_;
    o.heartbeat_interval_ms = 100;
    o.reconnect_attempts = 3;
    o.reconnect_initial_ms = 100;
    o.reconnect_max_ms = 400;
    return o;
  }

  // Forks a process that runs a Coordinator for a new study in `db` with
  // `space`, the test pruner and `objective`, until its budget is met.
  pid_t fork_coordinator(const std::string& db, const Json& space, const Json& objective,
                         std::int64_t n_trials) {
    pid_t pid = ::fork();
    if (pid != 0) return pid;
    int rc = 0;
    try {
      StudyOptions so;
      so.space = SearchSpace::from_json(space);
      so.pruner = std::make_shared<PruneHighValues>();
      Study study = Study::create(open_storage(db), "forked", StudyDirection::kMinimize, so);
      CoordinatorOptions co;
      co.endpoint = endpoint_;
      co.heartbeat_interval_ms = 100;
      co.n_trials = n_trials;
      Coordinator coordinator(study, objective, co);
      while (coordinator.step(50)) {
      }
      // Keep answering, so the worker hears Shutdown before the socket goes
      // (3 s: a late worker under TSan on a loaded machine took 0.72 s to be
      // told).
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (std::chrono::steady_clock::now() < until) coordinator.step(20);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "forked coordinator: %s\n", e.what());
      rc = 1;
    }
    ::_exit(rc);
  }

  fs::path dir_;
  std::string endpoint_;
};

std::vector<std::string> environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

// ------------------------------------------------------------ CLI coordinator

TEST_F(WorkerTest, ServesACoordinatorStartedByTheCli) {
  fs::path space = dir_ / "space.json";
  fs::path db = dir_ / "embed.db";
  std::ofstream(space) << R"({
    "study": {"name": "embed", "direction": "minimize"},
    "sampler": {"type": "random", "seed": 3},
    "budget": {"n_trials": 5},
    "objective": {"type": "external"},
    "space": {
      "x": {"type": "float", "low": -3, "high": 3},
      "n": {"type": "int", "low": 1, "high": 4}
    }
  })";
  ChildProcess coordinator({{HPSEARCH_CLI_PATH, "run", space.string(), "--workers", "0", "--bind",
                             endpoint_, "--storage", db.string(), "--heartbeat-ms", "100"},
                            dir_.string(),
                            environment()});
  std::string coordinator_output;
  auto collect = [&](ChildProcess::Stream, std::string_view line) {
    coordinator_output.append(line).append("\n");
  };
  // The worker gives up after 3 quick reconnects: start it once the
  // coordinator listens (a loaded machine or a sanitizer build can take
  // seconds to get there).
  const auto listen_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (coordinator_output.find("Coordinator listening on") == std::string::npos &&
         std::chrono::steady_clock::now() < listen_deadline &&
         !coordinator.wait_for_output(std::chrono::milliseconds(100), collect)) {
  }
  ASSERT_NE(coordinator_output.find("Coordinator listening on"), std::string::npos)
      << coordinator_output;

  std::atomic<int> calls{0};
  Worker worker(worker_options());
  int rc = worker.run([&](Trial& t) {
    ++calls;
    double x = t.suggest_float("x", -3, 3);  // declared: the sampler's value
    std::int64_t n = t.suggest_int("n", 1, 4);
    double y = t.suggest_float("y", 0, 1);  // undeclared: define-by-run
    for (int step = 1; step <= 3; ++step) {
      t.report(step, x * x + step);
      if (t.should_prune()) throw TrialPruned();
    }
    t.set_user_attr("pid", static_cast<std::int64_t>(::getpid()));
    if (t.number() == 2) throw Error("trial two fails on purpose");
    return x * x + static_cast<double>(n) + y;
  });
  EXPECT_EQ(rc, 0) << "the worker should end at the coordinator's Shutdown";
  EXPECT_EQ(worker.trials_run(), 5);
  EXPECT_EQ(calls.load(), 5);

  // Bounded: a coordinator still waiting for work is a failure, not a hang.
  const auto exit_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!coordinator.wait_for_output(std::chrono::milliseconds(1000), collect) &&
         std::chrono::steady_clock::now() < exit_deadline) {
  }
  if (!coordinator.finished()) coordinator.terminate(std::chrono::seconds(5), collect);
  ASSERT_EQ(coordinator.exit_code(), 0) << coordinator_output;

  Study study = Study::load(open_storage(db.string()), "embed");
  auto trials = study.trials();
  ASSERT_EQ(trials.size(), 5u);
  for (const TrialPtr& t : trials) {
    ASSERT_TRUE(t->params.count("x") && t->params.count("n") && t->params.count("y"));
    double x = t->params.at("x").get<double>();
    double y = t->params.at("y").get<double>();
    EXPECT_GE(y, 0.0);
    EXPECT_LE(y, 1.0);
    EXPECT_EQ(t->intermediate_values,
              (std::map<std::int64_t, double>{{1, x * x + 1}, {2, x * x + 2}, {3, x * x + 3}}));
    EXPECT_EQ(t->user_attrs.value("pid", std::int64_t{0}), ::getpid());
    if (t->number == 2) {
      EXPECT_EQ(t->state, TrialState::kFail);
      EXPECT_THAT(t->fail_reason, HasSubstr("trial two fails on purpose"));
      continue;
    }
    ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    EXPECT_EQ(*t->value, x * x + t->params.at("n").get<double>() + y);
  }
}

// ------------------------------------------------------------ forked coordinator

TEST_F(WorkerTest, PruneDecisionsComeOverTheWire) {
  const Json space = Json::parse(R"({"x": {"type": "float", "low": -5, "high": 5}})");
  fs::path db = dir_ / "forked.db";
  pid_t coordinator = fork_coordinator(db.string(), space, Json{{"type", "external"}}, 8);
  ASSERT_GT(coordinator, 0);

  std::vector<std::pair<double, bool>> seen;  // (x, pruned)
  Worker worker(worker_options());
  int rc = worker.run([&](Trial& t) {
    double x = t.param("x").get<double>();
    for (int step = 0; step < 10; ++step) {
      t.report(step, 3.0 * x * x);  // above 10 when |x| > 1.83
      if (t.should_prune()) {
        seen.emplace_back(x, true);
        throw TrialPruned();
      }
    }
    seen.emplace_back(x, false);
    return x * x;
  });
  EXPECT_EQ(rc, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(coordinator, &status, 0), coordinator);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  ASSERT_EQ(seen.size(), 8u);
  for (const auto& [x, pruned] : seen) EXPECT_EQ(pruned, 3.0 * x * x > 10.0) << x;
  Study study = Study::load(open_storage(db.string()), "forked");
  for (const TrialPtr& t : study.trials()) {
    double x = t->params.at("x").get<double>();
    if (3.0 * x * x > 10.0) {
      EXPECT_EQ(t->state, TrialState::kPruned);
      EXPECT_EQ(t->intermediate_values.rbegin()->first, 3);  // stopped at the first chance
    } else {
      EXPECT_EQ(t->state, TrialState::kComplete);
      EXPECT_EQ(t->intermediate_values.size(), 10u);
    }
  }
}

// A worker that joins once the budget is reached is answered Shutdown
// instead of Welcome; it exits at once (exit 0, no trial), not when the
// coordinator is gone (a local pool waited for it until its grace period
// ran out: about 2 s at the end of every run whose last worker started
// late).
TEST_F(WorkerTest, AWorkerJoiningAfterTheBudgetIsReachedExitsAtOnce) {
  const Json space = Json::parse(R"({"x": {"type": "float", "low": -5, "high": 5}})");
  fs::path db = dir_ / "late.db";
  pid_t coordinator = fork_coordinator(db.string(), space, Json{{"type", "external"}}, 1);
  ASSERT_GT(coordinator, 0);
  const auto objective = [](Trial& t) { return t.param("x").get<double>(); };
  Worker first(worker_options());
  EXPECT_EQ(first.run(objective), 0);
  EXPECT_EQ(first.trials_run(), 1);
  // The coordinator is done and answers for 3 more seconds, then exits.
  // The late worker is told to shut down and has exited while the
  // coordinator still runs; waiting for it to go silent would outlast it.
  // (No timing threshold: a bound of 0.5 s failed under TSan on a loaded
  // machine, 0.72 s.)
  Worker late(worker_options());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(late.run(objective), 0);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(late.trials_run(), 0);
  int status = 0;
  EXPECT_EQ(::waitpid(coordinator, &status, WNOHANG), 0)
      << "the late worker stayed until the coordinator had exited (" << took << " s)";
  ASSERT_EQ(::waitpid(coordinator, &status, 0), coordinator);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(WorkerTest, StopInterruptsACommandTrialAndKillsItsProgram) {
  // A worker without its own objective builds the study's "command"
  // objective; stopping the worker must stop the program.
  fs::path pid_file = dir_ / "program.pid";
  fs::path script = dir_ / "train.sh";
  std::ofstream(script) << "echo $$ > " << pid_file.string() << "\nexec sleep 1000\n";
  const Json space = Json::parse(R"({"x": {"type": "float", "low": 0, "high": 1}})");
  Json objective = {
      {"type", "command"}, {"argv", {"/bin/sh", script.string(), "{x}"}}, {"grace_s", 5}};
  pid_t coordinator = fork_coordinator((dir_ / "stop.db").string(), space, objective, 1);
  ASSERT_GT(coordinator, 0);

  std::atomic<bool> stop{false};
  WorkerOptions o = worker_options();
  o.stop = &stop;
  o.log_dir = (dir_ / "logs").string();
  o.allow_command = true;
  std::thread stopper([&] {
    for (int i = 0; i < 3000 && !fs::exists(pid_file); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stop = true;
  });
  Worker worker(o);
  int rc = worker.run();
  stopper.join();
  EXPECT_EQ(rc, Worker::kStopped);

  std::string pid_text = read_file(pid_file);
  ASSERT_FALSE(pid_text.empty());
  pid_t program = static_cast<pid_t>(std::stol(pid_text));
  EXPECT_FALSE(is_running(program));
  EXPECT_THAT(read_file(dir_ / "logs" / "trial-0.log"), HasSubstr("interrupted"));

  ::kill(coordinator, SIGKILL);  // its study never ends: the trial is queued again
  ::waitpid(coordinator, nullptr, 0);
}

// ------------------------------------------------------------ options

TEST(WorkerOptionsTest, ValidateNamesTheField) {
  WorkerOptions o;
  try {
    o.validate();
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "worker.connect");
  }
  o.connect = "tcp://127.0.0.1:5555";
  o.liveness = 0;
  try {
    o.validate();
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "worker.liveness");
  }
}

TEST(WorkerOptionsTest, EndpointsAreChecked) {
  auto path_of = [](const std::string& endpoint) -> std::string {
    WorkerOptions o;
    o.connect = endpoint;
    o.insecure = true;  // tcp without keys (curve_test checks the refusal)
    try {
      o.validate();
      return "";
    } catch (const ConfigError& e) {
      return e.path();
    }
  };
  for (const char* ok : {"tcp://127.0.0.1:5555", "tcp://head-node:1", "tcp://[::1]:65535",
                         "ipc:///tmp/x.sock", "inproc://w"}) {
    EXPECT_EQ(path_of(ok), "") << ok;
  }
  for (const char* bad : {"bogus", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:0", "tcp://host",
                          "tcp://:5555", "tcp://host:*", "tcp://host:5x", "ipc://", "udp://h:1"}) {
    EXPECT_EQ(path_of(bad), "worker.connect") << bad;
  }
}

TEST(WorkerOptionsTest, DesignatedInitializersBuildAWorker) {
  // The embedding API of the docs: no connection is made before run().
  Worker worker({.connect = "tcp://127.0.0.1:1", .device = "cpu", .threads = 2, .insecure = true});
  EXPECT_EQ(worker.trials_run(), 0);
  EXPECT_THROW(Worker({.connect = ""}), ConfigError);
}

TEST(StudyLogDirTest, SanitizesTheStudyName) {
  EXPECT_EQ(study_log_dir("fmnist-mlp", "runs"), "runs/fmnist-mlp.logs");
  EXPECT_EQ(study_log_dir("a/b c", "."), "./a_b_c.logs");
  EXPECT_EQ(study_log_dir("..", ""), "./study.logs");
  EXPECT_EQ(study_log_dir("", "x"), "x/study.logs");
}

}  // namespace
}  // namespace hps
