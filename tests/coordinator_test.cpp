// Integration tests of the coordinator with worker processes (the hpsearch
// binary), over loopback TCP and ipc, with short heartbeat settings.
#include "coordinator/coordinator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "algorithms/study_setup.h"
#include "protocol/protocol.h"
#include "protocol/zmq_util.h"
#include "search/storage.h"
#include "search/study.h"
#include "tests/support/log_capture.h"
#include "tests/support/temp_dir.h"
#include "workers/local_pool.h"

extern char** environ;

namespace hps {
namespace {

namespace fs = std::filesystem;
namespace proto = hps::protocol;
using Steady = std::chrono::steady_clock;

using testsupport::TempDir;

// A space.json document with the "sleep" objective over two float params.
Json sleep_study(const std::string& storage, std::int64_t n_trials, double seconds, int steps) {
  return Json{{"study", {{"name", "sleepy"}, {"direction", "minimize"}, {"storage", storage}}},
              {"sampler", {{"type", "random"}, {"seed", 7}}},
              {"pruner", {{"type", "none"}}},
              {"budget", {{"n_trials", n_trials}}},
              {"objective", {{"type", "sleep"}, {"seconds", seconds}, {"steps", steps}}},
              {"space",
               {{"x", {{"type", "float"}, {"low", 0.0}, {"high", 1.0}}},
                {"y", {{"type", "float"}, {"low", -1.0}, {"high", 1.0}}}}}};
}

// Starts a process; its stdout and stderr go to `log`. Returns its pid.
pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  argv.reserve(copy.size() + 1);
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn failed");
  return pid;
}

// Waits up to `seconds` for `pid`; its wait status, or nullopt (then kills it).
std::optional<int> wait_exit(pid_t pid, double seconds) {
  auto until = Steady::now() +
               std::chrono::duration_cast<Steady::duration>(std::chrono::duration<double>(seconds));
  while (Steady::now() < until) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return std::nullopt;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An in-process coordinator with a pool of worker processes.
class Harness {
 public:
  Harness(const fs::path& dir, const Json& doc, CoordinatorOptions co, int workers,
          const std::string& endpoint = "")
      : config_(StudyConfig::from_json(doc)) {
    storage_ = open_storage((dir / "study.db").string());
    study_.emplace(create_study(config_, storage_));
    co.endpoint = endpoint;
    const bool tcp = endpoint.rfind("tcp://", 0) == 0;
    if (tcp && co.keys_dir.empty()) co.insecure = true;  // curve_test covers the keys
    co.n_trials = config_.budget.n_trials;
    coordinator_ = std::make_unique<Coordinator>(*study_, config_.objective, co);
    LocalPoolOptions po;
    po.workers = workers;
    po.executable = HPSEARCH_CLI_PATH;
    po.endpoint = coordinator_->endpoint();
    po.extra_args = {"--log-level", "warn"};
    if (tcp && co.keys_dir.empty()) po.extra_args.push_back("--insecure");
    pool_ = std::make_unique<LocalWorkerPool>(po);
    pool_->start();
  }
  ~Harness() {
    // The workers were told to shut down; give them time to exit.
    if (pool_) pool_->shutdown(5.0);
  }

  // Steps until done (true) or `max_s` seconds passed (false). `each` runs
  // after every step.
  bool run(double max_s, const std::function<void()>& each = {}) {
    auto until = Steady::now() +
                 std::chrono::duration_cast<Steady::duration>(std::chrono::duration<double>(max_s));
    while (Steady::now() < until) {
      bool more = coordinator_->step(20);
      for (const auto& w : pool_->poll()) coordinator_->worker_exited(w.pid);
      if (each) each();
      if (!more) {
        pool_->stop_restarting();
        return true;
      }
    }
    return false;
  }

  Coordinator& coordinator() { return *coordinator_; }
  LocalWorkerPool& pool() { return *pool_; }
  Study& study() { return *study_; }
  std::vector<TrialPtr> trials() { return storage_->get_all_trials(study_->study_id(), {}); }

 private:
  StudyConfig config_;
  std::shared_ptr<Storage> storage_;
  std::optional<Study> study_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<LocalWorkerPool> pool_;
};

CoordinatorOptions fast_heartbeats() {
  CoordinatorOptions co;
  co.heartbeat_interval_ms = 100;
  co.liveness = 5;
  return co;
}

// Numbers 0..n-1, each once.
void expect_contiguous(const std::vector<TrialPtr>& trials) {
  for (std::size_t i = 0; i < trials.size(); ++i)
    EXPECT_EQ(trials[i]->number, static_cast<std::int64_t>(i));
}

std::int64_t count_finished(const std::vector<TrialPtr>& trials) {
  std::int64_t n = 0;
  for (const auto& t : trials) n += t->counts_as_finished() ? 1 : 0;
  return n;
}

TEST(CoordinatorOptions, BindEndpointIsChecked) {
  CoordinatorOptions co;
  co.insecure = true;  // the syntax only (curve_test checks tcp without keys)
  for (const char* ok :
       {"", "tcp://0.0.0.0:5555", "tcp://127.0.0.1:*", "tcp://*:0", "ipc:///tmp/c.sock"}) {
    co.endpoint = ok;
    EXPECT_NO_THROW(co.validate()) << ok;
  }
  for (const char* bad :
       {"bogus", "tcp://127.0.0.1:99999", "tcp://127.0.0.1", "tcp://0.0.0.0:-1"}) {
    co.endpoint = bad;
    try {
      co.validate();
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.path(), "coordinator.endpoint") << bad;
    }
  }
}

// The artifact endpoint (coordinator/artifact_server.h) binds the
// endpoint's next port with no configuration, any free port for "*", the
// ipc path + ".artifacts"; a worker keeps the host it connected to. A next
// port that is taken refuses the start, naming the endpoint and the rule.
TEST(CoordinatorArtifactEndpoint, IsTheNextPortAndATakenOneIsRefused) {
  EXPECT_EQ(zmq_util::artifact_endpoint_for("tcp://0.0.0.0:5555"), "tcp://0.0.0.0:5556");
  EXPECT_EQ(zmq_util::artifact_endpoint_for("tcp://127.0.0.1:*"), "tcp://127.0.0.1:*");
  EXPECT_EQ(zmq_util::artifact_endpoint_for("tcp://[::1]:0"), "tcp://[::1]:*");
  EXPECT_EQ(zmq_util::artifact_endpoint_for("tcp://*:65535"), "");  // no next port
  EXPECT_EQ(zmq_util::artifact_endpoint_for("ipc:///tmp/c.sock"), "ipc:///tmp/c.sock.artifacts");
  EXPECT_EQ(zmq_util::artifact_endpoint_for("ipc://*"), "ipc://*");
  EXPECT_EQ(zmq_util::worker_artifact_endpoint("tcp://head:5555", "tcp://0.0.0.0:5556"),
            "tcp://head:5556");
  EXPECT_EQ(zmq_util::worker_artifact_endpoint("tcp://[::1]:5555", "tcp://[::]:41000"),
            "tcp://[::1]:41000");
  EXPECT_EQ(zmq_util::worker_artifact_endpoint("ipc:///tmp/c.sock", "ipc:///tmp/c.sock.artifacts"),
            "ipc:///tmp/c.sock.artifacts");
  EXPECT_EQ(zmq_util::worker_artifact_endpoint("ipc:///tmp/c.sock", "tcp://0.0.0.0:5556"), "");

  TempDir dir;
  const fs::path db = dir.path() / "study.db";
  StudyConfig config = StudyConfig::from_json(sleep_study(db.string(), 2, 0.0, 1));
  auto storage = open_storage(db.string());
  Study study = create_study(config, storage);
  CoordinatorOptions co;
  co.n_trials = 2;
  co.insecure = true;
  co.checkpoint_root = (dir.path() / "checkpoints").string();
  co.endpoint = "tcp://127.0.0.1:*";
  std::string artifact;
  {
    Coordinator first(study, config.objective, co);
    artifact = first.artifact_endpoint();
    ASSERT_EQ(artifact.rfind("tcp://127.0.0.1:", 0), 0u) << artifact;
    EXPECT_NE(artifact, first.endpoint());
  }
  // Hold a port Q, then bind the coordinator to Q - 1 (when Q - 1 is free).
  zmq::context_t ctx;
  for (int attempt = 0; attempt < 20; ++attempt) {
    zmq::socket_t holder(ctx, zmq::socket_type::router);
    holder.set(zmq::sockopt::linger, 0);
    holder.bind("tcp://127.0.0.1:*");
    const std::string held = holder.get(zmq::sockopt::last_endpoint);
    const int q = std::stoi(held.substr(held.rfind(':') + 1));
    co.endpoint = "tcp://127.0.0.1:" + std::to_string(q - 1);
    try {
      Coordinator second(study, config.objective, co);
      ADD_FAILURE() << "started with its artifact port " << q << " taken";
      return;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.path(), "coordinator.endpoint");
      EXPECT_NE(std::string(e.what()).find("cannot bind the artifact endpoint 'tcp://127.0.0.1:" +
                                           std::to_string(q) + "'"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("the endpoint's port + 1"), std::string::npos)
          << e.what();
      return;
    } catch (const Error& e) {
      // Q - 1 was taken too (the main endpoint's bind failed): try another Q.
      EXPECT_NE(std::string(e.what()).find("cannot bind 'tcp://127.0.0.1:"), std::string::npos)
          << e.what();
    }
  }
  ADD_FAILURE() << "no free port Q - 1 beside a free port Q in 20 tries";
}

class CoordinatorTransport : public ::testing::TestWithParam<std::string> {};

TEST_P(CoordinatorTransport, EightWorkersFinish64TrialsNoneLostNoneRunTwice) {
  TempDir dir;
  std::string endpoint =
      GetParam() == "ipc" ? "ipc://" + (dir.path() / "coord.sock").string() : "tcp://127.0.0.1:*";
  Harness h(dir.path(), sleep_study("unused.db", 64, 0.02, 2), fast_heartbeats(), 8, endpoint);
  EXPECT_EQ(h.coordinator().endpoint().rfind(GetParam() == "ipc" ? "ipc://" : "tcp://", 0), 0u);
  ASSERT_TRUE(h.run(25.0)) << "the study did not finish";
  EXPECT_EQ(h.coordinator().done_reason(), "budget reached");
  auto trials = h.trials();
  ASSERT_EQ(trials.size(), 64u);
  expect_contiguous(trials);
  std::set<std::pair<double, double>> params;
  std::set<std::string> workers;
  for (const auto& t : trials) {
    EXPECT_EQ(t->state, TrialState::kComplete) << "trial " << t->number << ": " << t->fail_reason;
    EXPECT_FALSE(t->system_attrs.contains(kAttrRetryOf)) << "trial " << t->number;
    // Both steps reported once each, through the coordinator.
    EXPECT_EQ(t->intermediate_values.size(), 2u) << "trial " << t->number;
    ASSERT_TRUE(t->value);
    EXPECT_DOUBLE_EQ(*t->value, t->params.at("x").get<double>() + t->params.at("y").get<double>());
    params.insert({t->params.at("x").get<double>(), t->params.at("y").get<double>()});
    workers.insert(t->worker);
  }
  EXPECT_EQ(params.size(), 64u) << "some params were run twice";
  EXPECT_GE(workers.size(), 2u) << "trials were not spread over the workers";
  CoordinatorStats s = h.coordinator().stats();
  EXPECT_EQ(s.finished, 64);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.expired_workers, 0);
  EXPECT_EQ(s.dropped_frames, 0);
}

INSTANTIATE_TEST_SUITE_P(TcpAndIpc, CoordinatorTransport, ::testing::Values("tcp", "ipc"),
                         [](const auto& param_info) { return param_info.param; });

TEST(Coordinator, KilledWorkerMidTrialIsFailedAndRetried) {
  TempDir dir;
  std::string endpoint = "ipc://" + (dir.path() / "coord.sock").string();
  // One pool worker, plus a worker the test starts (so that only the
  // heartbeat timeout can tell the coordinator it died).
  Harness h(dir.path(), sleep_study("unused.db", 4, 1.2, 6), fast_heartbeats(), 1, endpoint);
  pid_t victim = spawn({HPSEARCH_CLI_PATH, "worker", "--connect", h.coordinator().endpoint(),
                        "--id", "victim", "--log-level", "warn"},
                       dir.path() / "victim.log");
  std::optional<std::int64_t> killed_trial;
  bool finished = h.run(25.0, [&] {
    if (killed_trial) return;
    for (const auto& w : h.coordinator().workers()) {
      if (w.name != "victim" || !w.trial) continue;
      auto t = h.study().storage().get_trial_by_number(h.study().study_id(), *w.trial);
      if (t->intermediate_values.empty()) continue;  // not yet mid-trial
      kill(victim, SIGKILL);
      killed_trial = *w.trial;
    }
  });
  waitpid(victim, nullptr, 0);
  ASSERT_TRUE(killed_trial) << "the victim never ran a trial";
  ASSERT_TRUE(finished) << "the study did not finish";
  auto trials = h.trials();
  expect_contiguous(trials);
  const FrozenTrial& lost = *trials.at(static_cast<std::size_t>(*killed_trial));
  EXPECT_EQ(lost.state, TrialState::kFail);
  EXPECT_EQ(lost.fail_reason, "worker lost");
  ASSERT_TRUE(lost.system_attrs.contains(kAttrRetriedAs));
  auto retry_number = lost.system_attrs[kAttrRetriedAs].get<std::int64_t>();
  const FrozenTrial& retry = *trials.at(static_cast<std::size_t>(retry_number));
  EXPECT_EQ(retry.state, TrialState::kComplete);
  EXPECT_EQ(retry.system_attrs.value(kAttrRetryOf, std::int64_t{-1}), *killed_trial);
  EXPECT_EQ(retry.params, lost.params);
  EXPECT_NE(retry.worker, "victim");
  EXPECT_EQ(count_finished(trials), 4);
  EXPECT_EQ(trials.size(), 5u);
  EXPECT_GE(h.coordinator().stats().expired_workers, 1);
}

TEST(Coordinator, KilledCoordinatorThenResumeLosesAndRepeatsNothing) {
  TempDir dir;
  const std::string db = (dir.path() / "resume.db").string();
  { std::ofstream(dir.path() / "space.json") << sleep_study(db, 30, 0.15, 3).dump(2); }
  pid_t coord = spawn({HPSEARCH_CLI_PATH, "run", (dir.path() / "space.json").string(), "--workers",
                       "4", "--heartbeat-ms", "100", "--log-level", "warn"},
                      dir.path() / "run1.log");
  // Wait until some trials are COMPLETE, then kill -9 the coordinator.
  std::map<std::int64_t, TrialPtr> complete_before;
  std::set<std::int64_t> running_before;
  auto until = Steady::now() + std::chrono::seconds(20);
  while (Steady::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!fs::exists(db)) continue;
    try {
      auto storage = open_storage(db);
      auto id = storage->find_study("sleepy");
      if (!id) continue;
      auto trials = storage->get_all_trials(*id, {});
      std::int64_t complete = 0;
      for (const auto& t : trials) complete += t->state == TrialState::kComplete;
      if (complete >= 8) break;
    } catch (const StorageError&) {
    }
  }
  ASSERT_EQ(kill(coord, SIGKILL), 0);
  int status = 0;
  waitpid(coord, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << read_file(dir.path() / "run1.log");
  {
    auto storage = open_storage(db);
    auto id = storage->find_study("sleepy");
    ASSERT_TRUE(id);
    for (const auto& t : storage->get_all_trials(*id, {})) {
      if (t->state == TrialState::kComplete) complete_before[t->number] = t;
      if (t->state == TrialState::kRunning) running_before.insert(t->number);
    }
  }
  ASSERT_GE(complete_before.size(), 8u) << read_file(dir.path() / "run1.log");
  ASSERT_LT(complete_before.size(), 30u) << "the first run finished before the kill";

  pid_t resume = spawn({HPSEARCH_CLI_PATH, "resume", db, "--workers", "4", "--heartbeat-ms", "100",
                        "--log-level", "warn"},
                       dir.path() / "run2.log");
  auto done = wait_exit(resume, 25.0);
  ASSERT_TRUE(done) << "resume did not finish\n" << read_file(dir.path() / "run2.log");
  ASSERT_TRUE(WIFEXITED(*done) && WEXITSTATUS(*done) == 0) << read_file(dir.path() / "run2.log");

  auto storage = open_storage(db);
  auto trials = storage->get_all_trials(*storage->find_study("sleepy"), {});
  expect_contiguous(trials);
  EXPECT_EQ(count_finished(trials), 30);
  for (const auto& [number, before] : complete_before) {
    const FrozenTrial& now = *trials.at(static_cast<std::size_t>(number));
    EXPECT_EQ(now.state, TrialState::kComplete) << "trial " << number;
    EXPECT_EQ(now.value, before->value) << "trial " << number;
    EXPECT_EQ(now.params, before->params) << "trial " << number;
    EXPECT_EQ(now.datetime_complete, before->datetime_complete)
        << "trial " << number << " ran again";
  }
  for (std::int64_t number : running_before) {
    const FrozenTrial& t = *trials.at(static_cast<std::size_t>(number));
    EXPECT_EQ(t.state, TrialState::kFail) << "trial " << number;
    EXPECT_EQ(t.fail_reason, "coordinator restarted") << "trial " << number;
    ASSERT_TRUE(t.system_attrs.contains(kAttrRetriedAs)) << "trial " << number;
    const FrozenTrial& retry = *trials.at(t.system_attrs[kAttrRetriedAs].get<std::size_t>());
    EXPECT_EQ(retry.params, t.params) << "trial " << number;
    EXPECT_EQ(retry.state, TrialState::kComplete) << "trial " << number;
  }
  for (const auto& t : trials) {
    EXPECT_NE(t->state, TrialState::kRunning) << "trial " << t->number;
    EXPECT_NE(t->state, TrialState::kWaiting) << "trial " << t->number;
  }
}

TEST(Coordinator, WorkerBlockedLongerThanTheHeartbeatTimeoutIsNotExpired) {
  TempDir dir;
  std::string endpoint = "ipc://" + (dir.path() / "coord.sock").string();
  CoordinatorOptions co;
  co.heartbeat_interval_ms = 100;
  co.liveness = 3;  // expired after 0.3 s of silence
  // One step: the objective blocks for 1.5 s without reporting.
  Harness h(dir.path(), sleep_study("unused.db", 4, 1.5, 1), co, 2, endpoint);
  ASSERT_TRUE(h.run(25.0));
  auto trials = h.trials();
  ASSERT_EQ(trials.size(), 4u);
  for (const auto& t : trials)
    EXPECT_EQ(t->state, TrialState::kComplete) << "trial " << t->number << ": " << t->fail_reason;
  EXPECT_EQ(h.coordinator().stats().expired_workers, 0);
}

// Receives whatever `socket` has; decoded messages are appended to `out`.
void collect(zmq::socket_t& socket, std::vector<proto::Message>& out) {
  while (true) {
    zmq::message_t m;
    if (!socket.recv(m, zmq::recv_flags::dontwait)) return;
    try {
      out.push_back(proto::decode(std::string_view(static_cast<const char*>(m.data()), m.size())));
    } catch (const proto::ProtocolError&) {
    }
  }
}

template <class T>
std::optional<T> find_message(const std::vector<proto::Message>& messages) {
  for (const auto& m : messages)
    if (auto* t = std::get_if<T>(&m)) return *t;
  return std::nullopt;
}

// Never acknowledge before commit: when the transaction that holds a
// worker's report, result and next request fails to commit (here: the store
// was moved away under the coordinator, so every commit fails), the worker
// is told nothing of them, not by that step and not by any later one (a
// reply of a rolled-back group left queued would go out with the next
// flush); the file still holds the trial as it was before the group.
TEST(Coordinator, AFailedCommitTellsTheWorkerNothingOfItsGroup) {
  TempDir dir;
  const fs::path db = dir.path() / "study.db";
  StudyConfig config = StudyConfig::from_json(sleep_study(db.string(), 10, 0.0, 1));
  auto storage = open_storage(db.string());
  Study study = create_study(config, storage);
  CoordinatorOptions co;
  co.n_trials = 10;
  Coordinator coordinator(study, config.objective, co);

  zmq::context_t ctx;
  zmq::socket_t worker(ctx, zmq::socket_type::dealer);
  worker.set(zmq::sockopt::linger, 0);
  worker.connect(coordinator.endpoint());
  auto send = [&](const proto::Message& m) {
    worker.send(zmq::buffer(proto::encode(m)), zmq::send_flags::dontwait);
  };
  std::vector<proto::Message> got;
  // Steps until a message of type T arrives (at most 5 s).
  auto await = [&](auto type_tag) {
    using T = decltype(type_tag);
    auto until = Steady::now() + std::chrono::seconds(5);
    while (Steady::now() < until) {
      coordinator.step(10);
      collect(worker, got);
      for (const auto& m : got)
        if (auto* t = std::get_if<T>(&m)) {
          T out = *t;
          got.clear();
          return out;
        }
    }
    throw std::runtime_error("no reply from the coordinator");
  };
  send(proto::Hello{"w", "h", 1, "cpu", "", 1, proto::kProtocolVersion});
  await(proto::Welcome{});
  send(proto::RequestTrial{});
  const proto::Assignment a = await(proto::Assignment{});
  send(proto::Report{a.number, 1, 0.5});
  ASSERT_TRUE(await(proto::Decision{}).stored);

  fs::rename(db, dir.path() / "moved.db");  // every commit fails from here on
  send(proto::Report{a.number, 2, 0.25});
  send(proto::Complete{a.number, false, 0.25, ""});
  send(proto::RequestTrial{});
  int failed = 0;
  auto until = Steady::now() + std::chrono::milliseconds(1500);
  while (Steady::now() < until) {
    try {
      coordinator.step(10);
    } catch (const StorageError&) {
      ++failed;
    }
    collect(worker, got);
  }
  EXPECT_GE(failed, 1) << "no commit failed";
  for (const auto& m : got) {
    EXPECT_FALSE(std::holds_alternative<proto::Decision>(m)) << "a report was acknowledged";
    EXPECT_FALSE(std::holds_alternative<proto::Assignment>(m))
        << "a trial was handed out after a failed commit";
  }
  // What the file holds (moved back, read by a new connection, WAL
  // included): the trial RUNNING with its first report only.
  fs::rename(dir.path() / "moved.db", db);
  auto fresh = open_storage(db.string());
  auto t = fresh->get_trial_by_number(*fresh->find_study("sleepy"), a.number);
  EXPECT_EQ(t->state, TrialState::kRunning);
  EXPECT_EQ(t->intermediate_values.size(), 1u);
  EXPECT_EQ(fresh->count_trials(*fresh->find_study("sleepy")), 1);
}

// A worker that gave up its link (its Hello unanswered in time) connects
// again; the Hello of the given-up link may still arrive, before or after
// the new one's. The older link's session must not hold trials until it
// expires: it ends when the newer link says Hello (its trial queued again
// at once), and an older link's late Hello opens no session. Before, each
// Hello opened a session and the given-up one was handed trials
// (CurveCoordinator.TwoWorkersWithKeysFinishAStudyOverTcp under TSan).
TEST(Coordinator, AWorkersGivenUpLinkIsReplacedByItsNewerOne) {
  TempDir dir;
  const fs::path db = dir.path() / "study.db";
  StudyConfig config = StudyConfig::from_json(sleep_study(db.string(), 10, 60.0, 1));
  auto storage = open_storage(db.string());
  Study study = create_study(config, storage);
  CoordinatorOptions co;
  co.n_trials = 10;
  Coordinator coordinator(study, config.objective, co);
  zmq::context_t ctx;
  auto link = [&](const std::string& rid) {
    auto sock = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    sock->set(zmq::sockopt::linger, 0);
    sock->set(zmq::sockopt::routing_id, rid);
    sock->connect(coordinator.endpoint());
    return sock;
  };
  const proto::Hello hello{"w", "h", 77, "cpu", "", 1, proto::kProtocolVersion};
  auto send = [&](zmq::socket_t& sock, const proto::Message& m) {
    sock.send(zmq::buffer(proto::encode(m)), zmq::send_flags::dontwait);
  };
  auto step_until = [&](const std::function<bool()>& done, int max_ms = 10000) {
    auto until = Steady::now() + std::chrono::milliseconds(max_ms);
    while (Steady::now() < until) {
      coordinator.step(10);
      if (done()) return true;
    }
    return false;
  };
  auto first = link("w/1/aa");
  send(*first, hello);
  send(*first, proto::RequestTrial{});
  ASSERT_TRUE(step_until([&] {
    auto w = coordinator.workers();
    return w.size() == 1 && w[0].trial.has_value();
  }));
  const std::int64_t held = *coordinator.workers()[0].trial;

  // The newer link: the older one's session ends, its trial queued again.
  auto second = link("w/2/bb");
  send(*second, hello);
  ASSERT_TRUE(step_until([&] {
    auto t = storage->get_trial_by_number(study.study_id(), held);
    return t && t->state == TrialState::kFail;
  })) << "the trial of the given-up link is still RUNNING";
  EXPECT_NE(storage->get_trial_by_number(study.study_id(), held)->fail_reason.find("worker lost"),
            std::string::npos);
  std::vector<WorkerStatus> workers = coordinator.workers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_FALSE(workers[0].trial.has_value());
  // It is the newer link that runs the trial queued again.
  send(*second, proto::RequestTrial{});
  ASSERT_TRUE(step_until([&] {
    auto w = coordinator.workers();
    return w.size() == 1 && w[0].trial.has_value();
  }));
  std::vector<proto::Message> got;
  ASSERT_TRUE(step_until([&] {
    collect(*second, got);
    return std::any_of(got.begin(), got.end(), [](const proto::Message& m) {
      return std::holds_alternative<proto::Assignment>(m);
    });
  }));

  // A late Hello of a link older than the newest: no session, no answer.
  auto late = link("w/0/cc");
  send(*late, hello);
  std::vector<proto::Message> late_got;
  step_until(
      [&] {
        collect(*late, late_got);
        return false;
      },
      500);
  EXPECT_TRUE(late_got.empty()) << "the given-up link was answered";
  EXPECT_EQ(coordinator.workers().size(), 1u);
  // Another worker process (another pid) on the same host keeps its own.
  proto::Hello other = hello;
  other.pid = 78;
  auto third = link("w/1/dd");
  send(*third, other);
  EXPECT_TRUE(step_until([&] { return coordinator.workers().size() == 2; }));
}

// Coordinators that start together on one ipc path could both pass the
// check for a listening socket and both bind (about 1 start in 10): one
// then held an address no worker reached. The path's lock file decides:
// while another process holds it, the coordinator is refused; the lock
// file goes with the socket file when the coordinator ends.
TEST(Coordinator, AnIpcPathIsBoundByOneCoordinatorAtATime) {
  TempDir dir;
  const fs::path db = dir.path() / "study.db";
  const std::string socket = (dir.path() / "c.sock").string();
  StudyConfig config = StudyConfig::from_json(sleep_study(db.string(), 10, 0.0, 1));
  auto storage = open_storage(db.string());
  Study study = create_study(config, storage);
  CoordinatorOptions co;
  co.endpoint = "ipc://" + socket;
  // Another process holds the lock (a forked child, as flock locks are per
  // open file and a child's is another process's).
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    const int fd = ::open((socket + ".lock").c_str(), O_RDWR | O_CREAT, 0600);
    const bool locked = fd >= 0 && ::flock(fd, LOCK_EX) == 0;
    const char c = locked ? '1' : '0';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, '1');
  try {
    Coordinator refused(study, config.objective, co);
    ADD_FAILURE() << "bound while another process held the path's lock";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "coordinator.endpoint");
    EXPECT_NE(std::string(e.what()).find("is being bound by another process"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(socket));
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  {
    Coordinator bound(study, config.objective, co);  // the holder is gone: its lock too
    EXPECT_TRUE(fs::exists(socket + ".lock"));
    EXPECT_TRUE(zmq_util::unix_socket_listened(socket));
  }
  EXPECT_FALSE(fs::exists(socket));
  EXPECT_FALSE(fs::exists(socket + ".lock"));
  // A link planted at the lock file's path would turn the lock off: the
  // bind is refused, naming it (issue #47, finding 9).
  fs::create_symlink(dir.path() / "elsewhere", socket + ".lock");
  try {
    Coordinator refused(study, config.objective, co);
    ADD_FAILURE() << "bound with a link at the lock file's path";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(socket + ".lock is a symbolic link: refused"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(socket));
  EXPECT_FALSE(fs::exists(dir.path() / "elsewhere"));
}

// An ipc path the user names is owner-only whatever the umask (000 would
// have made it connectable by every local user; 002 by the group).
TEST(Coordinator, ANamedIpcSocketIsOwnerOnlyWhateverTheUmask) {
  TempDir dir;
  const fs::path db = dir.path() / "study.db";
  const std::string socket = (dir.path() / "open.sock").string();
  StudyConfig config = StudyConfig::from_json(sleep_study(db.string(), 10, 0.0, 1));
  auto storage = open_storage(db.string());
  Study study = create_study(config, storage);
  CoordinatorOptions co;
  co.endpoint = "ipc://" + socket;
  co.checkpoint_root = (dir.path() / "checkpoints").string();  // the artifact socket too
  const mode_t before = ::umask(0);
  {
    Coordinator bound(study, config.objective, co);
    // The main socket and the artifact socket beside it.
    for (const std::string& path : {socket, socket + ".artifacts"}) {
      struct stat st {};
      ASSERT_EQ(::lstat(path.c_str(), &st), 0) << path;
      EXPECT_TRUE(S_ISSOCK(st.st_mode)) << path;
      EXPECT_EQ(st.st_mode & 0777, 0600u) << path;
    }
  }
  EXPECT_EQ(::umask(before), 0u);  // the coordinator left the umask as it found it
}

TEST(Coordinator, GarbageFromRawSocketsDoesNotStopOrCorruptTheStudy) {
  testsupport::CapturedLog log;
  TempDir dir;
  Harness h(dir.path(), sleep_study("unused.db", 20, 0.05, 2), fast_heartbeats(), 2,
            "tcp://127.0.0.1:*");
  const std::string endpoint = h.coordinator().endpoint();
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  std::mt19937_64 rng(99);
  auto random_bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };

  zmq::context_t ctx;
  zmq::socket_t junk(ctx, zmq::socket_type::dealer);      // random and malformed frames
  zmq::socket_t old(ctx, zmq::socket_type::dealer);       // another protocol version
  zmq::socket_t stranger(ctx, zmq::socket_type::dealer);  // results without a session
  zmq::socket_t member(ctx, zmq::socket_type::dealer);    // a session sending nonsense
  zmq::socket_t giant(ctx, zmq::socket_type::dealer);     // a frame over the size limit
  for (auto* s : {&junk, &old, &stranger, &member, &giant}) {
    s->set(zmq::sockopt::linger, 0);
    s->connect(endpoint);
  }
  std::vector<proto::Message> from_old, from_stranger, from_member;
  bool sent = false;
  bool finished = h.run(25.0, [&] {
    collect(old, from_old);
    collect(stranger, from_stranger);
    collect(member, from_member);
    if (sent || h.coordinator().stats().finished < 2) return;
    sent = true;
    // Raw TCP: random bytes, then a ZMTP-like greeting followed by junk.
    for (int round = 0; round < 2; ++round) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<std::uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
      std::string bytes = round == 0
                              ? random_bytes(4096)
                              : std::string("\xff\0\0\0\0\0\0\0\x01\x7f", 10) + random_bytes(512);
      ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
      close(fd);
    }
    // Random frames, truncated messages, unknown types, several parts.
    for (int i = 0; i < 50; ++i)
      junk.send(zmq::buffer(random_bytes(rng() % 200)), zmq::send_flags::dontwait);
    std::string complete = proto::encode(proto::Complete{0, false, 1.0, ""});
    for (std::size_t n = 0; n < complete.size(); ++n)
      junk.send(zmq::buffer(complete.data(), n), zmq::send_flags::dontwait);
    std::string unknown = proto::encode(proto::Heartbeat{});
    unknown[6] = 77;
    junk.send(zmq::buffer(unknown), zmq::send_flags::dontwait);
    junk.send(zmq::buffer(complete), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    junk.send(zmq::buffer(complete), zmq::send_flags::dontwait);
    // A Hello of another protocol version: refused.
    std::string hello =
        proto::encode(proto::Hello{"old", "h", 1, "cpu", "", 1, proto::kProtocolVersion});
    hello[4] = static_cast<char>(proto::kProtocolVersion + 1);
    old.send(zmq::buffer(hello), zmq::send_flags::dontwait);
    // Results from a peer without a session: told to disconnect.
    stranger.send(zmq::buffer(complete), zmq::send_flags::dontwait);
    // A session that reports on a trial it does not run.
    member.send(zmq::buffer(proto::encode(
                    proto::Hello{"member", "h", 1, "cpu", "", 1, proto::kProtocolVersion})),
                zmq::send_flags::dontwait);
    member.send(zmq::buffer(proto::encode(proto::Report{1000000, 1, 0.5})),
                zmq::send_flags::dontwait);
    member.send(zmq::buffer(proto::encode(proto::Complete{1, false, -100.0, ""})),
                zmq::send_flags::dontwait);
    // 8 MiB: over the frame limit.
    giant.send(zmq::buffer(std::string(8u << 20, 'x')), zmq::send_flags::dontwait);
  });
  ASSERT_TRUE(sent) << "the garbage was never sent";
  ASSERT_TRUE(finished) << "the study did not finish";
  // The junk came at once and 5 lines a second are shown: the count of the
  // rest, naming what it counts, is logged by the step loop once their
  // second has passed, though no bad frame follows. Every dropped frame is
  // then a line or in a count.
  const std::string kind = "dropped bad frames and protocol version refusals";
  auto shown = [](const std::string& text) {
    std::int64_t n = 0;
    for (const char* line :
         {"coordinator: dropped a bad frame from ", "coordinator: refused Hello from "})
      for (auto at = text.find(line); at != std::string::npos; at = text.find(line, at + 1)) ++n;
    return n;
  };
  bool all_counted = false;
  for (auto until = Steady::now() + std::chrono::seconds(30);
       !all_counted && Steady::now() < until;) {
    h.coordinator().step(20);
    const std::string text = log.text();
    all_counted = testsupport::held_back_count(text, kind) > 0 &&
                  shown(text) + testsupport::held_back_count(text, kind) ==
                      h.coordinator().stats().dropped_frames;
  }
  EXPECT_TRUE(all_counted) << "shown " << shown(log.text()) << ", counted "
                           << testsupport::held_back_count(log.text(), kind) << ", dropped "
                           << h.coordinator().stats().dropped_frames << "\n"
                           << log.text();
  collect(old, from_old);
  collect(stranger, from_stranger);
  collect(member, from_member);

  auto trials = h.trials();
  ASSERT_EQ(trials.size(), 20u);
  expect_contiguous(trials);
  for (const auto& t : trials) {
    EXPECT_EQ(t->state, TrialState::kComplete) << "trial " << t->number;
    ASSERT_TRUE(t->value);
    EXPECT_GT(*t->value, -100.0) << "a forged result was accepted";
    EXPECT_TRUE(t->worker.rfind("member", 0) != 0);
  }
  CoordinatorStats s = h.coordinator().stats();
  EXPECT_GE(s.dropped_frames, 50);
  EXPECT_GE(s.rejected_results, 3);
  auto refused = find_message<proto::Disconnect>(from_old);
  ASSERT_TRUE(refused) << "no refusal for another protocol version";
  EXPECT_EQ(refused->code, proto::Disconnect::Code::kRefused);
  EXPECT_NE(refused->reason.find("version"), std::string::npos) << refused->reason;
  auto told = find_message<proto::Disconnect>(from_stranger);
  ASSERT_TRUE(told);
  EXPECT_EQ(told->code, proto::Disconnect::Code::kExpired);
  auto decision = find_message<proto::Decision>(from_member);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->number, 1000000);
  EXPECT_FALSE(decision->stored);
}

TEST(Coordinator, RemoteWorkerFromAnotherProcessJoinsOverTcp) {
  TempDir dir;
  Harness h(dir.path(), sleep_study("unused.db", 16, 0.2, 2), fast_heartbeats(), 1,
            "tcp://127.0.0.1:*");
  std::optional<pid_t> remote;
  bool finished = h.run(25.0, [&] {
    if (!remote && h.coordinator().stats().finished >= 1)
      remote = spawn({HPSEARCH_CLI_PATH, "worker", "--connect", h.coordinator().endpoint(), "--id",
                      "remote-worker", "--log-level", "warn", "--insecure"},
                     dir.path() / "remote.log");
  });
  ASSERT_TRUE(remote);
  auto status = wait_exit(*remote, 10.0);
  ASSERT_TRUE(finished);
  ASSERT_TRUE(status) << "the remote worker did not exit after Shutdown";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << read_file(dir.path() / "remote.log");
  std::map<std::string, int> by_worker;
  auto trials = h.trials();
  for (const auto& t : trials) {
    EXPECT_EQ(t->state, TrialState::kComplete) << "trial " << t->number;
    by_worker[t->worker == "remote-worker" ? "remote" : "local"]++;
  }
  EXPECT_EQ(trials.size(), 16u);
  EXPECT_GE(by_worker["remote"], 1) << "the remote worker ran no trial";
  EXPECT_GE(by_worker["local"], 1);
}

}  // namespace
}  // namespace hps
