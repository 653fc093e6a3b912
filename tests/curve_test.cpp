// Tests of the trusted network mode (README "Security"): CURVE keys
// (protocol/curve_keys.h, `hpsearch keys`), the coordinator's CURVE server
// and ZAP handler (coordinator/zap_authenticator.h), workers that pin the
// coordinator's key, the refusals of tcp without keys, the cap on workers,
// escaped worker ids and the "command" objective allow-list. Real sockets
// over 127.0.0.1 and ipc, real worker processes (the hpsearch binary).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "algorithms/factory.h"
#include "coordinator/coordinator.h"
#include "protocol/curve_keys.h"
#include "protocol/protocol.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/util/hash.h"
#include "tests/support/log_capture.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "workers/worker.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
namespace proto = hps::protocol;
using testsupport::BackgroundProcess;
using testsupport::ProcessResult;
using testsupport::TempDir;
using Steady = std::chrono::steady_clock;

using testsupport::CapturedLog;

// A study over one float param x with `objective`.
Json study_doc(std::int64_t n_trials, const Json& objective) {
  return Json{{"study", {{"name", "trusted"}, {"direction", "minimize"}, {"storage", "x.db"}}},
              {"sampler", {{"type", "random"}, {"seed", 5}}},
              {"pruner", {{"type", "none"}}},
              {"budget", {{"n_trials", n_trials}}},
              {"objective", objective},
              {"space", {{"x", {{"type", "float"}, {"low", 0.0}, {"high", 1.0}}}}}};
}

Json sleep_objective() { return Json{{"type", "sleep"}, {"seconds", 0.01}, {"steps", 1}}; }

// A command objective that creates `marker` (and reports 1.0).
Json marker_objective(const fs::path& marker) {
  return Json{
      {"type", "command"},
      {"argv",
       {"/bin/sh", "-c", "touch '" + marker.string() + "'; echo 'hpsearch: {{\"value\": 1.0}}'"}}};
}

// Missed heartbeats (of 100 ms) before a worker or the coordinator counts
// the other lost. Under TSan, libzmq's CURVE traffic between the test
// process and its TSan-built workers stalled for 500 ms at a time (both
// workers' heartbeats arrived in one burst after it), so the workers were
// lost and their trials run again (CI, 2026-12-04); the TSan build allows 3 s.
#ifdef HPSEARCH_TEST_TSAN
constexpr int kLiveness = 30;
#else
constexpr int kLiveness = 5;
#endif

// An in-process coordinator of a new study in dir/<db>.
class StudyRun {
 public:
  StudyRun(const fs::path& db, const Json& doc, CoordinatorOptions co) {
    StudyConfig config = StudyConfig::from_json(doc);
    storage_ = open_storage(db.string());
    StudyOptions so;
    so.sampler = make_sampler(config.sampler);
    so.pruner = make_pruner(config.pruner);
    so.space = config.space;
    study_.emplace(Study::create(storage_, config.name, config.direction, so, config.source));
    co.n_trials = config.budget.n_trials;
    co.heartbeat_interval_ms = 100;
    co.liveness = kLiveness;
    co.status_interval_s = 0.05;
    coordinator_ = std::make_unique<Coordinator>(*study_, config.objective, co);
  }
  // Steps until `done()` (or the study ended, with no predicate) or max_s.
  bool step_until(double max_s, const std::function<bool()>& done = {}) {
    auto until = Steady::now() + std::chrono::milliseconds(static_cast<int>(max_s * 1000));
    while (Steady::now() < until) {
      bool more = coordinator_->step(20);
      if (done ? done() : !more) return true;
    }
    return false;
  }
  Coordinator& coordinator() { return *coordinator_; }
  std::vector<TrialPtr> trials() { return storage_->get_all_trials(study_->study_id(), {}); }

 private:
  std::shared_ptr<Storage> storage_;
  std::optional<Study> study_;
  std::unique_ptr<Coordinator> coordinator_;
};

// `hpsearch worker` in the background with short heartbeats (100 ms, lost
// after kLiveness missed) and `retries` reconnects, the first after 100 ms, then
// doubling. The default, 8 (25 s in all), is for workers that must join:
// under TSan on a loaded 2-core machine a CURVE handshake and hello took
// over 500 ms, so with 1 retry both workers of a study gave up before the
// coordinator's answers reached them (CI, 2026-12-04).
std::unique_ptr<BackgroundProcess> start_worker(const TempDir& dir, const std::string& name,
                                                const std::string& endpoint,
                                                std::vector<std::string> extra, int retries = 8) {
  std::vector<std::string> argv = {HPSEARCH_CLI_PATH,
                                   "worker",
                                   "--connect",
                                   endpoint,
                                   "--id",
                                   name,
                                   "--heartbeat-ms",
                                   "100",
                                   "--liveness",
                                   std::to_string(kLiveness),
                                   "--reconnect-attempts",
                                   std::to_string(retries),
                                   "--reconnect-initial-ms",
                                   "100",
                                   "--log-dir",
                                   dir.file(name + ".logs")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<BackgroundProcess>(argv, dir.path().string(), dir.file(name + ".out"),
                                             dir.file(name + ".err"));
}

// Waits up to max_s for `p` to exit while `step` keeps a coordinator going.
std::optional<ProcessResult> wait_stepping(BackgroundProcess& p, double max_s,
                                           const std::function<void()>& step) {
  auto until = Steady::now() + std::chrono::milliseconds(static_cast<int>(max_s * 1000));
  while (Steady::now() < until) {
    if (!p.running()) return p.wait();
    step();
  }
  return std::nullopt;
}

ProcessResult cli(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {HPSEARCH_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return testsupport::run_process(argv, dir.path().string());
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

// A DEALER socket; with `keys`, a CURVE client pinning `server_key`.
std::unique_ptr<zmq::socket_t> dealer(zmq::context_t& ctx, const std::string& endpoint,
                                      const std::optional<curve::KeyPair>& keys = std::nullopt,
                                      const std::string& server_key = "") {
  auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
  s->set(zmq::sockopt::linger, 0);
  if (keys) {
    s->set(zmq::sockopt::curve_serverkey, server_key);
    s->set(zmq::sockopt::curve_publickey, keys->public_key);
    s->set(zmq::sockopt::curve_secretkey, keys->secret_key);
  }
  s->connect(endpoint);
  return s;
}

void say_hello(zmq::socket_t& s, const std::string& id) {
  s.send(zmq::buffer(proto::encode(
             proto::Hello{id, "host\x1b[31m", 1, "cpu", "", 1, proto::kProtocolVersion})),
         zmq::send_flags::dontwait);
  s.send(zmq::buffer(proto::encode(proto::RequestTrial{})), zmq::send_flags::dontwait);
}

std::vector<proto::Message> received(zmq::socket_t& s) {
  std::vector<proto::Message> out;
  while (true) {
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::dontwait)) return out;
    try {
      out.push_back(proto::decode(std::string_view(static_cast<const char*>(m.data()), m.size())));
    } catch (const proto::ProtocolError&) {
    }
  }
}

// Connects to `endpoint` (tcp://127.0.0.1:PORT) with a plain TCP socket,
// sends `bytes` and closes: a peer that speaks no ZeroMQ.
void send_raw(const std::string& endpoint, const std::string& bytes) {
  const auto colon = endpoint.rfind(':');
  ASSERT_NE(colon, std::string::npos) << endpoint;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << endpoint;
  EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

// How many times `needle` occurs in `text`.
std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// ------------------------------------------------------------------ keys

TEST(CurveKeys, InitMakesOwnerOnlyKeysPrintsTheCommandsAndNeverOverwrites) {
  if (!curve::available()) GTEST_SKIP() << "libzmq without CURVE";
  TempDir dir("curve_keys");
  ProcessResult made = cli(dir, {"keys", "init", "keys", "--workers", "2"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const fs::path keys = dir.path() / "keys";
  EXPECT_EQ(mode_of(keys), 0700u);
  EXPECT_EQ(mode_of(keys / "coordinator.secret"), 0600u);
  EXPECT_EQ(mode_of(keys / "authorized_workers"), 0600u);
  for (const char* w : {"worker-1", "worker-2"}) {
    EXPECT_EQ(mode_of(keys / w), 0700u);
    EXPECT_EQ(mode_of(keys / w / "worker.secret"), 0600u);
    EXPECT_EQ(curve::read_public_key((keys / w / "coordinator.public").string()),
              curve::read_public_key((keys / "coordinator.public").string()));
  }
  // The three commands.
  // The coordinator's command as the README's Security section gives it:
  // coordinator only (--workers 0), the workers remote.
  EXPECT_NE(made.out.find("hpsearch run space.json --workers 0 --bind tcp://0.0.0.0:5555 --keys "
                          "keys\n"),
            std::string::npos)
      << made.out;
  EXPECT_NE(made.out.find("scp -rp keys/worker-1"), std::string::npos) << made.out;
  EXPECT_NE(made.out.find("hpsearch worker --connect tcp://"), std::string::npos) << made.out;
  auto loaded = curve::load_coordinator_keys(keys.string());
  ASSERT_EQ(loaded.authorized.size(), 2u);
  auto w1 = curve::load_worker_keys((keys / "worker-1").string());
  EXPECT_EQ(loaded.authorized.at(w1.keys.public_key), "worker-1");
  EXPECT_EQ(w1.server_key, loaded.keys.public_key);

  // init again: refused, nothing changed.
  const std::string secret = testsupport::read_file((keys / "coordinator.secret").string());
  ProcessResult again = cli(dir, {"keys", "init", "keys", "--workers", "1"});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("never overwritten"), std::string::npos) << again.err;
  EXPECT_EQ(testsupport::read_file((keys / "coordinator.secret").string()), secret);
  EXPECT_FALSE(fs::exists(keys / "worker-3"));
  // add: a third worker, listed.
  ProcessResult added = cli(dir, {"keys", "add", "keys"});
  ASSERT_EQ(added.exit_code, 0) << added.err;
  EXPECT_EQ(testsupport::read_file((keys / "coordinator.secret").string()), secret);
  EXPECT_EQ(curve::load_coordinator_keys(keys.string()).authorized.size(), 3u);
  EXPECT_EQ(curve::load_worker_keys((keys / "worker-3").string()).server_key,
            loaded.keys.public_key);
}

TEST(CurveKeys, WrongPermissionsOrBadZ85AreClearErrors) {
  if (!curve::available()) GTEST_SKIP() << "libzmq without CURVE";
  TempDir dir("curve_badkeys");
  curve::make_keys(dir.file("keys"), 1, false);
  const std::string secret = dir.file("keys/worker-1/worker.secret");
  ASSERT_EQ(::chmod(secret.c_str(), 0644), 0);
  try {
    curve::load_worker_keys(dir.file("keys/worker-1"));
    ADD_FAILURE() << "a 0644 secret key was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), secret);
    EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
  }
  // Through the CLI: exit 2, the file and the fix named, nothing run.
  ProcessResult r = cli(dir, {"worker", "--connect", "tcp://127.0.0.1:1", "--keys",
                              dir.file("keys/worker-1"), "--reconnect-attempts", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("mode 0644"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chmod 600"), std::string::npos) << r.err;

  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  { std::ofstream(secret, std::ios::trunc) << "not-a-z85-key-at-all\n"; }
  r = cli(dir, {"worker", "--connect", "tcp://127.0.0.1:1", "--keys", dir.file("keys/worker-1"),
                "--reconnect-attempts", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("not a Z85 CURVE secret key"), std::string::npos) << r.err;
  // The coordinator's folder given to a worker, and the other way round.
  r = cli(dir, {"worker", "--connect", "tcp://127.0.0.1:1", "--keys", dir.file("keys"),
                "--reconnect-attempts", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("worker-1"), std::string::npos) << r.err;
  { std::ofstream(dir.file("keys/authorized_workers"), std::ios::app) << "garbage line\n"; }
  EXPECT_THROW(curve::load_coordinator_keys(dir.file("keys")), ConfigError);
}

// A file given where a keys folder goes (--keys FILE) is said to be no
// folder, with the folder to name when it is a key file (it was "no such
// keys folder (make one with `hpsearch keys init FILE`)"); exit 2, nothing
// written.
TEST(CurveKeys, AFileGivenAsTheKeysFolderIsSaidToBeNoFolder) {
  if (!curve::available()) GTEST_SKIP() << "libzmq without CURVE";
  TempDir dir("curve_keys_file");
  curve::make_keys(dir.file("keys"), 1, false);
  dir.write("notes.txt", "not keys\n");
  dir.write("space.json", study_doc(3, sleep_objective()).dump());
  const std::string notes = dir.file("notes.txt");
  ProcessResult r = cli(
      dir, {"run", "space.json", "--workers", "0", "--bind", "tcp://127.0.0.1:0", "--keys", notes});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("hpsearch: error: " + notes +
                       ": is a file, not a folder: keys are given as a folder (a keys folder, as "
                       "`hpsearch keys init DIR` makes: it holds coordinator.secret, "
                       "authorized_workers and the worker-N folders)\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("keys init " + notes), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("x.db"))) << "a run refused for its keys wrote the store";
  // A key file of the folder: the folder to name instead.
  const std::string secret = dir.file("keys/coordinator.secret");
  r = cli(dir,
          {"run", "space.json", "--workers", "0", "--bind", "tcp://127.0.0.1:0", "--keys", secret});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(secret + ": is a file, not a folder: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; it is a key file: name the folder that holds it, " + dir.file("keys")),
            std::string::npos)
      << r.err;
  // A worker's --keys.
  r = cli(dir, {"worker", "--connect", "tcp://127.0.0.1:1", "--keys", notes, "--reconnect-attempts",
                "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(notes + ": is a file, not a folder: keys are given as a folder (a worker "
                               "folder of a keys folder, such as KEYS/worker-1: it holds "
                               "worker.secret and coordinator.public)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("keys init"), std::string::npos) << r.err;
}

// The keys rule (check_key_path): refused with the path and the rule named,
// exit 2 through the CLI, and nothing chmodded.
TEST(CurveKeys, AKeysFolderOtherUsersCouldChangeIsRefusedAndNeverChmodded) {
  if (!curve::available()) GTEST_SKIP() << "libzmq without CURVE";
  TempDir dir("curve_keyrule");
  const fs::path keys = dir.path() / "keys";
  curve::make_keys(keys.string(), 1, false);
  auto refused = [](const std::function<void()>& load, const fs::path& path,
                    const std::string& rule) {
    try {
      load();
      ADD_FAILURE() << path << " was accepted (expected: " << rule << ")";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.path(), path.string()) << e.what();
      EXPECT_NE(std::string(e.what()).find(rule), std::string::npos) << e.what();
    }
  };
  auto load_coordinator = [&] { (void)curve::load_coordinator_keys(keys.string()); };
  auto load_worker = [&] { (void)curve::load_worker_keys((keys / "worker-1").string()); };

  // A group-writable authorized_workers, keys folder or worker folder.
  const fs::path authorized = keys / "authorized_workers";
  ASSERT_EQ(::chmod(authorized.c_str(), 0620), 0);
  refused(load_coordinator, authorized, "writable by group or others");
  EXPECT_EQ(mode_of(authorized), 0620u);  // not chmodded
  ASSERT_EQ(::chmod(authorized.c_str(), 0600), 0);
  ASSERT_EQ(::chmod(keys.c_str(), 0770), 0);
  refused(load_coordinator, keys, "writable by group or others");
  EXPECT_EQ(mode_of(keys), 0770u);
  ASSERT_EQ(::chmod(keys.c_str(), 0700), 0);
  ASSERT_EQ(::chmod((keys / "worker-1").c_str(), 0707), 0);
  refused(load_worker, keys / "worker-1", "writable by group or others");
  ASSERT_EQ(::chmod((keys / "worker-1").c_str(), 0700), 0);
  // A worker's pinned coordinator key writable by others.
  ASSERT_EQ(::chmod((keys / "worker-1" / "coordinator.public").c_str(), 0666), 0);
  refused(load_worker, keys / "worker-1" / "coordinator.public", "writable by group or others");
  ASSERT_EQ(::chmod((keys / "worker-1" / "coordinator.public").c_str(), 0644), 0);
  EXPECT_NO_THROW(load_coordinator());
  EXPECT_NO_THROW(load_worker());

  // A symlinked keys folder (the attack: <study>.keys -> a folder another
  // user owns): refused for loading and for making keys; the target keeps
  // its mode and stays empty.
  const fs::path elsewhere = dir.path() / "elsewhere";
  fs::create_directory(elsewhere);
  ASSERT_EQ(::chmod(elsewhere.c_str(), 0755), 0);
  const fs::path link = dir.path() / "study.keys";
  fs::create_directory_symlink(elsewhere, link);
  refused([&] { curve::make_keys(link.string(), 1, false); }, link, "symbolic link");
  refused([&] { curve::make_keys(link.string() + "/", 1, false); }, link, "symbolic link");
  EXPECT_EQ(mode_of(elsewhere), 0755u);
  EXPECT_TRUE(fs::is_empty(elsewhere));
  ProcessResult r = cli(dir, {"keys", "init", link.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_empty(elsewhere));
  const fs::path keys_link = dir.path() / "keys.link";
  fs::create_directory_symlink(keys, keys_link);
  refused([&] { (void)curve::load_coordinator_keys(keys_link.string()); }, keys_link,
          "symbolic link");
  // A symlinked authorized_workers.
  const fs::path planted = dir.path() / "planted_workers";
  fs::copy_file(authorized, planted);
  fs::rename(authorized, dir.path() / "authorized.orig");
  fs::create_symlink(planted, authorized);
  refused(load_coordinator, authorized, "symbolic link");
  refused([&] { curve::make_keys(keys.string(), 1, true); }, authorized, "symbolic link");
  EXPECT_FALSE(fs::exists(keys / "worker-2"));
  fs::remove(authorized);
  fs::rename(dir.path() / "authorized.orig", authorized);

  // A folder that holds other files: no keys made in it, nothing chmodded.
  const fs::path other = dir.path() / "other";
  fs::create_directory(other);
  { std::ofstream(other / "notes.txt") << "mine\n"; }
  ASSERT_EQ(::chmod(other.c_str(), 0755), 0);
  refused([&] { curve::make_keys(other.string(), 1, false); }, other,
          "holds other files; name an empty or new folder");
  EXPECT_EQ(mode_of(other), 0755u);
  EXPECT_FALSE(fs::exists(other / "coordinator.secret"));
  r = cli(dir, {"keys", "init", other.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("holds other files"), std::string::npos) << r.err;
  // An empty folder of ours is used as it is (its mode kept).
  const fs::path empty = dir.path() / "empty";
  fs::create_directory(empty);
  ASSERT_EQ(::chmod(empty.c_str(), 0750), 0);
  curve::make_keys(empty.string(), 1, false);
  EXPECT_EQ(mode_of(empty), 0750u);
  EXPECT_NO_THROW((void)curve::load_coordinator_keys(empty.string()));

  // Another owner (the reported case: chowned to another user, with
  // authorized_workers 0666): needs root to chown.
  if (::geteuid() != 0) {
    std::cout << "[  SKIPPED ] the other-owner assertions need root (chown)\n";
    return;
  }
  const uid_t nobody = 65534;
  ASSERT_EQ(::chown(authorized.c_str(), nobody, nobody), 0);
  refused(load_coordinator, authorized, "owned by uid 65534");
  ASSERT_EQ(::chmod(authorized.c_str(), 0666), 0);
  ASSERT_EQ(::chown(keys.c_str(), nobody, nobody), 0);
  refused(load_coordinator, keys, "owned by uid 65534");
  refused([&] { curve::make_keys(keys.string(), 1, true); }, keys, "owned by uid 65534");
  EXPECT_EQ(mode_of(keys), 0700u);
  EXPECT_EQ(mode_of(authorized), 0666u);
  dir.write("space.json", study_doc(3, sleep_objective()).dump());
  r = cli(dir, {"run", "space.json", "--workers", "0", "--bind", "tcp://127.0.0.1:0", "--keys",
                keys.string(), "--timeout", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("owned by uid 65534"), std::string::npos) << r.err;
  const fs::path worker = keys / "worker-1";
  ASSERT_EQ(::chown(worker.c_str(), nobody, nobody), 0);
  refused(load_worker, worker, "owned by uid 65534");
}

// A dangling symbolic link given as --keys was "no such keys folder": it is
// said to be a dangling link, naming its target (exit 2, nothing written).
TEST(CurveKeys, ADanglingLinkGivenAsTheKeysFolderIsNamedWithItsTarget) {
  if (!curve::available()) GTEST_SKIP() << "libzmq without CURVE";
  TempDir dir("curve_keys_dangling");
  dir.write("space.json", study_doc(3, sleep_objective()).dump());
  const std::string target = dir.file("moved-away");
  fs::create_directory_symlink(target, dir.file("keys"));
  const std::string said =
      ": is a dangling symbolic link (to '" + target + "', which does not exist)";
  ProcessResult r = cli(dir, {"run", "space.json", "--workers", "0", "--bind", "tcp://127.0.0.1:0",
                              "--keys", dir.file("keys")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("hpsearch: error: " + dir.file("keys") + said), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("x.db")));
  r = cli(dir, {"worker", "--connect", "tcp://127.0.0.1:1", "--keys", dir.file("keys"),
                "--reconnect-attempts", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("hpsearch: error: " + dir.file("keys") + said), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("no such keys folder"), std::string::npos) << r.err;
}

// ------------------------------------------------------------------ refusals

TEST(CurveCli, WorkerConnectTcpWithoutKeysRefusesUnlessInsecure) {
  TempDir dir("curve_worker_cli");
  ProcessResult r = cli(dir, {"worker", "--connect", "tcp://127.0.0.1:1", "--reconnect-attempts",
                              "0", "--reconnect-initial-ms", "10"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--keys"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hpsearch keys init"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--insecure"), std::string::npos) << r.err;
  // --insecure: it tries (nobody there) and gives up, after a warning.
  r = cli(dir, {"worker", "--connect", "tcp://127.0.0.1:1", "--insecure", "--reconnect-attempts",
                "0", "--heartbeat-ms", "50", "--liveness", "2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("without CURVE keys"), std::string::npos) << r.err;
}

// A worker that gets no answer over ipc:// says what the socket file
// shows: none there, or a file that is no socket. A worker without keys
// never connects to a socket of another user (whose coordinator could make
// it run programs as the worker's user): nobody's worker to root's socket,
// and root's worker to nobody's (issue #47, finding 4).
TEST(CurveCli, AWorkerSaysWhyAnIpcEndpointDoesNotAnswer) {
  TempDir dir("curve_worker_ipc");
  const std::vector<std::string> quick = {"--reconnect-attempts", "0", "--heartbeat-ms", "50",
                                          "--liveness",           "2"};
  std::vector<std::string> args = {"worker", "--connect", "ipc://" + dir.file("none.sock")};
  args.insert(args.end(), quick.begin(), quick.end());
  ProcessResult r = cli(dir, args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("there is no socket file " + dir.file("none.sock") +
                       ": is the coordinator running?"),
            std::string::npos)
      << r.err;
  std::ofstream(dir.file("plain")) << "x";
  args[2] = "ipc://" + dir.file("plain");
  r = cli(dir, args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(dir.file("plain") + " is not a socket"), std::string::npos) << r.err;

  if (::geteuid() != 0) return;  // another user's worker needs root to start
  const struct passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  const std::string sock = dir.file("owner-only.sock");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::copy(sock.begin(), sock.end(), addr.sun_path);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::chmod(sock.c_str(), 0600), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);  // nobody may pass, not list
  std::vector<std::string> as_nobody = {"/usr/bin/setpriv",
                                        "--reuid=" + std::to_string(nobody->pw_uid),
                                        "--regid=" + std::to_string(nobody->pw_gid),
                                        "--clear-groups",
                                        "--",
                                        HPSEARCH_CLI_PATH,
                                        "worker",
                                        "--connect",
                                        "ipc://" + sock,
                                        "--log-dir",
                                        "/tmp"};
  as_nobody.insert(as_nobody.end(), quick.begin(), quick.end());
  r = testsupport::run_process(as_nobody, "/");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the socket " + sock + " belongs to another user (uid 0"), std::string::npos)
      << r.err;
  // A rogue coordinator's socket, nobody's, and root's worker that may run
  // programs: refused before it connects.
  ASSERT_EQ(::chown(sock.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  args = {"worker", "--connect", "ipc://" + sock, "--allow-command"};
  args.insert(args.end(), quick.begin(), quick.end());
  r = cli(dir, args);
  ::close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the socket " + sock + " belongs to another user (uid " +
                       std::to_string(nobody->pw_uid) + ", this worker runs as uid 0)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("connect over tcp with --keys"), std::string::npos) << r.err;
}

TEST(CurveCli, RunBindTcpWithoutKeysIsRefusedAndNamesTheFix) {
  TempDir dir("curve_run_cli");
  Json doc = study_doc(100, sleep_objective());
  dir.write("space.json", doc.dump());
  ProcessResult r = cli(dir, {"run", "space.json", "--workers", "0", "--bind", "tcp://127.0.0.1:0",
                              "--timeout", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("hpsearch keys init"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--keys"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("x.db"))) << "a refused run wrote the store";
  // Keys that cannot be used are refused before the store is made too.
  r = cli(dir, {"run", "space.json", "--workers", "0", "--bind", "tcp://127.0.0.1:0", "--keys",
                dir.file("no-such-keys"), "--timeout", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no-such-keys"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("x.db"))) << "a run refused for its keys wrote the store";
  // --insecure: runs, with a warning.
  r = cli(dir, {"run", "space.json", "--workers", "1", "--bind", "tcp://127.0.0.1:0", "--insecure",
                "--n-trials", "3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("INSECURE"), std::string::npos) << r.err;
  // Local pools need no set-up: a private ipc socket.
  r = cli(dir, {"run", "space.json", "--workers", "2", "--n-trials", "6"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("INSECURE"), std::string::npos) << r.err;
}

// hpsearch resume listens where the last run did (--bind) with its keys
// (--keys), so its remote workers can reach it again; it said "0 workers
// (local)" and listened on a private ipc socket no remote worker could
// reach, waiting for ever. A last run that was --insecure is refused
// without --insecure again, saying so; a last run's keys folder that is
// gone is refused saying it is the last run's.
// Makes keys/ (one worker) and runs a study of n_trials in `dir` with one
// local worker, bound on tcp with those keys (--keys relative to `dir`).
ProcessResult run_bound_with_keys(TempDir& dir, int n_trials) {
  EXPECT_EQ(cli(dir, {"keys", "init", "keys", "--workers", "1"}).exit_code, 0);
  dir.write("space.json", study_doc(n_trials, sleep_objective()).dump());
  return cli(dir, {"run", "space.json", "--workers", "1", "--bind", "tcp://127.0.0.1:0", "--keys",
                   "keys"});
}

TEST(CurveCli, ResumeKeepsTheLastRunsBindAndKeys) {
  TempDir dir("curve_resume_bind");
  // --keys relative to the run's folder; the resume runs from another one.
  ProcessResult r = run_bound_with_keys(dir, 3);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testsupport::run_process({HPSEARCH_CLI_PATH, "resume", dir.file("x.db"), "--n-trials", "5"},
                               "/");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resume: listening on tcp://127.0.0.1:0 with the keys in " +
                       dir.file("keys") + ", as the last run (--bind changes it)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("Coordinator listening on tcp://127.0.0.1:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--keys " + dir.file("keys") + "/worker-N"), std::string::npos) << r.out;
  // The last run --insecure: resume needs --insecure again.
  Json doc = study_doc(3, sleep_objective());
  doc["study"]["storage"] = "open.db";
  dir.write("open.json", doc.dump());
  r = cli(dir, {"run", "open.json", "--workers", "1", "--bind", "tcp://127.0.0.1:0", "--insecure"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = cli(dir, {"resume", "open.db", "--n-trials", "5"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // The refusal says the last run was --insecure and how to go on (it was
  // the refusal of a tcp --bind without keys, as if the user had typed it).
  EXPECT_NE(r.err.find("hpsearch: error: --insecure: is needed again: the last run of study "
                       "'trusted' was --insecure (it listened on tcp://127.0.0.1:0 without CURVE "
                       "keys) and resume listens there again; give --insecure to resume it so "
                       "(anyone who reaches that endpoint can join as a worker), --keys KEYS to "
                       "admit only workers with keys"),
            std::string::npos)
      << r.err;
  r = cli(dir, {"resume", "open.db", "--n-trials", "5", "--insecure"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // And the other way round: the last run's keys folder gone, the refusal
  // says it is the last run's and how to go on; an explicit --insecure
  // resumes without the keys, with a warning.
  fs::rename(dir.file("keys"), dir.file("moved-keys"));
  r = cli(dir, {"resume", "x.db", "--n-trials", "6"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("hpsearch: error: " + dir.file("keys") + ": no such keys folder"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("(the keys folder of the last run, " + dir.file("keys") +
                       ", stored with the study: resume uses it for the last run's --bind; make "
                       "it usable again, give --keys DIR for another keys folder, or --insecure "
                       "to resume without keys)"),
            std::string::npos)
      << r.err;
  r = cli(dir, {"resume", "x.db", "--n-trials", "6", "--keys", dir.file("moved-keys")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = cli(dir, {"resume", "x.db", "--n-trials", "7", "--insecure"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resume: --insecure: listening on tcp://127.0.0.1:0 without the keys of "
                       "the last run (" +
                       dir.file("moved-keys") + "): workers started with --keys cannot join"),
            std::string::npos)
      << r.err;
}

// What `--bind` takes, as the new-user pass found it: the line for remote
// workers named a literal ENDPOINT; localhost said "No such device", and
// [::1] too; the port rule said [1, 65535] where 0 (any free port) works;
// a user's ipc socket file stayed after the run, and a file at the ipc
// path was deleted by the bind.
TEST(CurveCli, BindTakesWhatItSaysAndLeavesNoSocketFile) {
  TempDir dir("curve_bind_forms");
  dir.write("space.json", study_doc(2, sleep_objective()).dump());
  ProcessResult r = cli(dir, {"run", "space.json", "--workers", "0", "--bind", "tcp://127.0.0.1:0",
                              "--insecure", "--timeout", "0.5"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("ENDPOINT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(waiting for workers: hpsearch worker --connect tcp://127.0.0.1:"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" --insecure)"), std::string::npos) << r.out;
  // localhost: refused naming --bind and what it takes.
  r = cli(dir, {"run", "space.json", "--bind", "tcp://localhost:0", "--insecure"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("hpsearch: error: --bind: HOST must be an IP address or a network "
                       "interface name, which ZeroMQ binds; it does not look up host names such "
                       "as localhost: use tcp://127.0.0.1:PORT"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("No such device"), std::string::npos) << r.err;
  // The port rule says what works.
  r = cli(dir, {"run", "space.json", "--bind", "tcp://127.0.0.1:65536", "--insecure"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--bind: the port must be a number in [0, 65535] or * (0 and *: any free "
                       "port), got 'tcp://127.0.0.1:65536'"),
            std::string::npos)
      << r.err;
  // IPv6 loopback, where this machine has it.
  if (fs::exists("/proc/net/if_inet6") &&
      testsupport::read_file("/proc/net/if_inet6").find(" lo\n") != std::string::npos) {
    r = cli(dir, {"run", "space.json", "--workers", "1", "--bind", "tcp://[::1]:0", "--insecure",
                  "--storage", "v6.db"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Coordinator listening on tcp://[::1]:"), std::string::npos) << r.out;
  }
  // A user's ipc endpoint: its socket file is removed at the end.
  const std::string sock = dir.file("coordinator.sock");
  r = cli(dir, {"run", "space.json", "--workers", "1", "--bind", "ipc://" + sock, "--storage",
                "ipc.db"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(fs::symlink_status(sock))) << "the ipc socket file was left behind";
  // A file that is no socket at that path is not deleted by the bind.
  dir.write("notes.txt", "keep me\n");
  r = cli(dir, {"run", "space.json", "--workers", "1", "--bind", "ipc://" + dir.file("notes.txt"),
                "--storage", "notes.db"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--bind: '" + dir.file("notes.txt") + "' exists and is not a socket"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(testsupport::read_file(dir.file("notes.txt")), "keep me\n");
  EXPECT_FALSE(fs::exists(dir.file("notes.db")));
}

// resume --help showed the run's defaults for --workers and --prefetch,
// which resume replaces with the last run's.
TEST(CurveCli, ResumeHelpSaysItsDefaultsAreTheLastRuns) {
  TempDir dir("curve_resume_help");
  const ProcessResult r = cli(dir, {"resume", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* option : {"--workers", "--prefetch", "--bind"}) {
    const auto at = r.out.find("\n  " + std::string(option) + " ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const auto next = r.out.find("\n  -", at + 1);
    const std::string entry = r.out.substr(at, next == std::string::npos ? next : next - at);
    EXPECT_NE(entry.find("the last run's"), std::string::npos) << entry;
  }
  const ProcessResult run_help = cli(dir, {"run", "--help"});
  EXPECT_EQ(run_help.out.find("the last run's"), std::string::npos) << run_help.out;
}

// hpsearch resume with a new --bind dropped the last run's keys without a
// word (a tcp --bind was then refused for want of keys): a new tcp --bind
// keeps them, saying so; one that leaves them (ipc, or --insecure) warns,
// naming them.
TEST(CurveCli, ResumeWithANewBindKeepsOrNamesTheLastRunsKeys) {
  TempDir dir("curve_resume_new_bind");
  ProcessResult r = run_bound_with_keys(dir, 2);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = cli(dir, {"resume", "x.db", "--n-trials", "3", "--bind", "tcp://127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Its local workers (the private ipc socket) are no refusals.
  EXPECT_EQ(r.err.find("failed the CURVE handshake"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resume: --bind tcp://127.0.0.1:0: with the keys in " + dir.file("keys") +
                       ", as the last run (--keys changes them)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("--keys " + dir.file("keys") + "/worker-N"), std::string::npos) << r.out;
  r = cli(dir, {"resume", "x.db", "--n-trials", "4", "--bind", "ipc://" + dir.file("c.sock")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resume: --bind: listening on ipc://" + dir.file("c.sock") +
                       " without the keys of the last run (" + dir.file("keys") +
                       "): workers started with --keys cannot join; give --keys " +
                       dir.file("keys") + " to keep them"),
            std::string::npos)
      << r.err;
}

TEST(CurveCoordinatorOptions, TcpWithoutKeysIsRefusedByTheLibrary) {
  CoordinatorOptions co;
  co.endpoint = "tcp://127.0.0.1:*";
  try {
    co.validate();
    ADD_FAILURE() << "a tcp endpoint without keys was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "coordinator.endpoint");
    EXPECT_NE(std::string(e.what()).find("hpsearch keys init"), std::string::npos);
  }
  co.insecure = true;
  EXPECT_NO_THROW(co.validate());
  co.endpoint = "";  // the default: the private ipc socket only
  co.insecure = false;
  EXPECT_NO_THROW(co.validate());
  WorkerOptions wo;
  wo.connect = "tcp://127.0.0.1:5555";
  EXPECT_THROW(wo.validate(), ConfigError);
  wo.insecure = true;
  EXPECT_NO_THROW(wo.validate());
}

// ------------------------------------------------------------------ CURVE + ZAP

class CurveCoordinator : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!curve::available()) GTEST_SKIP() << "libzmq without CURVE";
    curve::make_keys(dir_.file("keys"), 2, false);
  }
  CoordinatorOptions with_keys() const {
    CoordinatorOptions co;
    co.endpoint = "tcp://127.0.0.1:*";
    co.keys_dir = dir_.file("keys");
    return co;
  }
  TempDir dir_{"curve_coord"};
};

TEST_F(CurveCoordinator, UnknownKeyGetsNoTrialAndTheRefusalIsLoggedAndCounted) {
  CapturedLog log;
  StudyRun run(dir_.path() / "s.db", study_doc(3, sleep_objective()), with_keys());
  const std::string server_key = curve::load_worker_keys(dir_.file("keys/worker-1")).server_key;
  zmq::context_t ctx;
  // A peer that knows the coordinator's public key but has a key of its own.
  auto stranger = dealer(ctx, run.coordinator().endpoint(), curve::generate(), server_key);
  say_hello(*stranger, "stranger");
  std::vector<proto::Message> got;
  run.step_until(2.0, [&] {
    auto more = received(*stranger);
    got.insert(got.end(), more.begin(), more.end());
    return false;
  });
  EXPECT_TRUE(got.empty()) << "the stranger was answered";
  EXPECT_TRUE(run.trials().empty()) << "a trial was dispatched";
  EXPECT_TRUE(run.coordinator().workers().empty());
  CoordinatorStats s = run.coordinator().stats();
  EXPECT_GE(s.refused_keys, 1);
  std::string text = log.text();
  EXPECT_NE(text.find("refused a connection from 127.0.0.1"), std::string::npos) << text;
  EXPECT_NE(text.find("not in the authorized workers list"), std::string::npos) << text;

  // A real worker whose key is not listed (a worker folder of other keys,
  // pinning this coordinator's public key): refused, it gives up at once
  // saying its key was refused (it said the coordinator "did not answer",
  // after retrying the refusal: 8 retries from 100 ms would take 25 s).
  curve::make_keys(dir_.file("other"), 1, false);
  fs::copy_file(dir_.file("keys/coordinator.public"),
                dir_.file("other/worker-1/coordinator.public"),
                fs::copy_options::overwrite_existing);
  const auto started = Steady::now();
  auto w = start_worker(dir_, "outsider", run.coordinator().endpoint(),
                        {"--keys", dir_.file("other/worker-1"), "--allow-command"}, 8);
  auto done = wait_stepping(*w, 60.0, [&] { run.coordinator().step(20); });
  ASSERT_TRUE(done) << "the refused worker did not give up";
  EXPECT_LT(Steady::now() - started, std::chrono::seconds(12)) << done->err;
  EXPECT_EQ(done->exit_code, 1) << done->err;
  const std::string outsider_key =
      curve::fingerprint(curve::load_worker_keys(dir_.file("other/worker-1")).keys.public_key);
  EXPECT_NE(done->err.find("worker: the coordinator at " + run.coordinator().endpoint() +
                           " refused this worker's CURVE key (" + outsider_key + ", from " +
                           dir_.file("other/worker-1") +
                           "): it is not in the coordinator's authorized_workers; giving up"),
            std::string::npos)
      << done->err;
  EXPECT_EQ(done->err.find("retrying"), std::string::npos) << done->err;
  EXPECT_EQ(done->err.find("did not answer"), std::string::npos) << done->err;
  EXPECT_TRUE(run.trials().empty());
}

// The artifact endpoint (the pieces of snapshots after the first travel
// there, coordinator/artifact_server.h) admits the keys the main endpoint
// admits and no other: an impostor key (a peer that knows the
// coordinator's public key but whose own key is not listed) is refused by
// its ZAP handler, counted and logged, and gets no answer; a listed key
// without a token granted by the coordinator's loop is answered with a
// refusal and nothing is written.
TEST_F(CurveCoordinator, ArtifactEndpointRefusesAnImpostorKeyAndPiecesWithoutAToken) {
  CapturedLog log;
  CoordinatorOptions co = with_keys();
  co.checkpoint_root = dir_.file("checkpoints");
  StudyRun run(dir_.path() / "s.db", study_doc(3, sleep_objective()), co);
  const std::string artifact = run.coordinator().artifact_endpoint();
  ASSERT_EQ(artifact.rfind("tcp://127.0.0.1:", 0), 0u) << artifact;
  ASSERT_NE(artifact, run.coordinator().endpoint());
  const std::string server_key = curve::load_worker_keys(dir_.file("keys/worker-1")).server_key;
  proto::ArtifactPut piece;
  piece.number = 0;
  piece.step = 1;
  piece.offset = 1;
  piece.total = 2;
  piece.data = "x";
  piece.checksum = util::xxh3_64(piece.data);
  piece.token = "00112233445566778899aabbccddeeff";
  const std::string frame = proto::encode(piece);

  zmq::context_t ctx;
  auto impostor = dealer(ctx, artifact, curve::generate(), server_key);
  impostor->send(zmq::buffer(frame), zmq::send_flags::dontwait);
  std::vector<proto::Message> got;
  run.step_until(2.0, [&] {
    auto more = received(*impostor);
    got.insert(got.end(), more.begin(), more.end());
    return run.coordinator().stats().refused_keys >= 1;
  });
  EXPECT_GE(run.coordinator().stats().refused_keys, 1);
  EXPECT_TRUE(got.empty()) << "the impostor was answered on the artifact endpoint";
  std::string text = log.text();
  EXPECT_NE(text.find("refused a connection from 127.0.0.1"), std::string::npos) << text;
  EXPECT_NE(text.find("not in the authorized workers list"), std::string::npos) << text;

  // A listed worker key, but a token the coordinator never granted.
  auto member =
      dealer(ctx, artifact, curve::load_worker_keys(dir_.file("keys/worker-1")).keys, server_key);
  member->send(zmq::buffer(frame), zmq::send_flags::dontwait);
  got.clear();
  run.step_until(10.0, [&] {
    auto more = received(*member);
    got.insert(got.end(), more.begin(), more.end());
    return !got.empty();
  });
  ASSERT_EQ(got.size(), 1u);
  const auto* reply = std::get_if<proto::ArtifactPutReply>(&got[0]);
  ASSERT_NE(reply, nullptr);
  EXPECT_FALSE(reply->ok);
  EXPECT_NE(reply->error.find("unknown or expired token"), std::string::npos) << reply->error;
  EXPECT_FALSE(fs::exists(dir_.file("checkpoints/lineage-0")));
  // The impostor still has no answer.
  EXPECT_TRUE(received(*impostor).empty());
}

// A peer that fails before the key check (the ZAP handler, which logs the
// refusals of unknown keys) was refused without a word: garbage bytes, a
// peer without CURVE keys (a worker started --insecure), a peer that pins
// another coordinator key. Each is now logged (naming the endpoint it
// reached: libzmq gives no peer address for them) and counted; a flood of
// them is rate limited and does not keep a worker with keys from finishing
// the study.
TEST_F(CurveCoordinator, PeersThatFailTheHandshakeAreLoggedRateLimitedAndCounted) {
  CapturedLog log;
  StudyRun run(dir_.path() / "s.db", study_doc(3, sleep_objective()), with_keys());
  const std::string endpoint = run.coordinator().endpoint();
  const std::string line = "refused a peer on " + endpoint + " that failed the CURVE handshake (";
  // One at a time, each seen in the log before the next.
  auto logged = [&](const std::string& why) {
    return run.step_until(30.0, [&] { return log.text().find(line + why) != std::string::npos; });
  };
  send_raw(endpoint, "GET / HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(logged("it sent no ZeroMQ 3 greeting")) << log.text();
  // A ZMTP 3.0 greeting offering the NULL mechanism (a worker without
  // keys), whole before the connection closes.
  std::string null_greeting(64, '\0');
  null_greeting[0] = '\xff';
  null_greeting[9] = '\x7f';
  null_greeting[10] = 3;
  null_greeting.replace(12, 4, "NULL");
  send_raw(endpoint, null_greeting);
  EXPECT_TRUE(
      logged("protocol error: it offered no CURVE keys, e.g. a worker started with "
             "--insecure or without --keys"))
      << log.text();
  zmq::context_t ctx;
  auto other_key = dealer(ctx, endpoint, curve::generate(), curve::generate().public_key);
  EXPECT_TRUE(logged("cryptographic error: it pins another coordinator public key")) << log.text();
  other_key.reset();
  EXPECT_NE(log.text().find("libzmq tells the endpoint it reached, not the peer's address"),
            std::string::npos);
  EXPECT_GE(run.coordinator().stats().failed_handshakes, 3);
  EXPECT_EQ(run.coordinator().stats().refused_keys, 0);
  EXPECT_TRUE(run.trials().empty());

  // A flood of garbage while a worker with keys runs the study. The log
  // holds back what is over its rate and says how many it held back,
  // naming what it counts.
  const std::string kind = "refused peers that failed the CURVE handshake";
  auto w = start_worker(dir_, "w1", endpoint, {"--keys", dir_.file("keys/worker-1")});
  EXPECT_TRUE(run.step_until(60.0, [&] {
    for (int i = 0; i < 10; ++i) send_raw(endpoint, "\x16\x03\x01 garbage");
    return testsupport::held_back_count(log.text(), kind) > 0 && run.coordinator().done();
  })) << log.text();
  EXPECT_EQ(run.coordinator().done_reason(), "budget reached");
  const std::int64_t failed = run.coordinator().stats().failed_handshakes;
  EXPECT_LT(static_cast<std::int64_t>(occurrences(log.text(), line)), failed);
  auto r = wait_stepping(*w, 20.0, [&] { run.coordinator().step(20); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 0) << r->err;

  // A last burst, then nothing: the count of the lines it held back is
  // logged once their second has passed, with no later line of the kind
  // to carry it (it was not, before: 10 lines of a burst of 300 were
  // logged, the other 290 never counted). Every refused peer is then a
  // line or in a count.
  const std::size_t burst_from = log.text().size();
  for (int i = 0; i < 40; ++i) send_raw(endpoint, "\x16\x03\x01 garbage");
  EXPECT_TRUE(run.step_until(60.0,
                             [&] {
                               const std::string text = log.text();
                               return testsupport::held_back_count(text.substr(burst_from), kind) >
                                          0 &&
                                      static_cast<std::int64_t>(occurrences(text, line)) +
                                              testsupport::held_back_count(text, kind) ==
                                          run.coordinator().stats().failed_handshakes;
                             }))
      << "shown " << occurrences(log.text(), line) << ", counted "
      << testsupport::held_back_count(log.text(), kind) << ", refused "
      << run.coordinator().stats().failed_handshakes << "\n"
      << log.text().substr(burst_from);
}

// A worker started --insecure against a coordinator with keys retried for
// about 100 s and then said the coordinator "did not answer": it gives up
// at once, saying the coordinator requires keys and how to get them. A
// worker pinning another coordinator key gives up after a few failed
// handshakes in a row, saying the key does not match and which file pins
// it. A coordinator that is not there is still retried.
TEST_F(CurveCoordinator, AWorkerThatCannotPassTheHandshakeGivesUpSayingWhy) {
  StudyRun run(dir_.path() / "s.db", study_doc(3, sleep_objective()), with_keys());
  const std::string endpoint = run.coordinator().endpoint();
  auto step = [&] { run.coordinator().step(20); };
  auto w = start_worker(dir_, "no-keys", endpoint, {"--insecure"}, 8);
  auto done = wait_stepping(*w, 120.0, step);
  ASSERT_TRUE(done) << "the worker without keys did not give up";
  EXPECT_EQ(done->exit_code, 1) << done->err;
  // (Which side sees the mechanism mismatch first varies: the worker, or
  // the coordinator, which then closes the connection.)
  EXPECT_NE(done->err.find("worker: the coordinator at " + endpoint +
                           " requires CURVE keys, which this worker does not have (--insecure): "),
            std::string::npos)
      << done->err;
  EXPECT_NE(done->err.find("; giving up (trying again fails again): start the worker with --keys "
                           "DIR"),
            std::string::npos)
      << done->err;
  EXPECT_NE(done->err.find("hpsearch keys init KEYS"), std::string::npos) << done->err;
  EXPECT_EQ(done->err.find("retrying"), std::string::npos) << done->err;
  EXPECT_EQ(done->err.find("did not answer"), std::string::npos) << done->err;

  // A worker folder of other keys: it pins their coordinator's key.
  curve::make_keys(dir_.file("other"), 1, false);
  w = start_worker(dir_, "other-keys", endpoint, {"--keys", dir_.file("other/worker-1")}, 8);
  done = wait_stepping(*w, 120.0, step);
  ASSERT_TRUE(done) << "the worker pinning another key did not give up";
  EXPECT_EQ(done->exit_code, 1) << done->err;
  const std::string pinned =
      curve::fingerprint(curve::load_worker_keys(dir_.file("other/worker-1")).server_key);
  EXPECT_NE(done->err.find("worker: the CURVE handshake failed 3 times in a row: the coordinator "
                           "at " +
                           endpoint +
                           " does not match the coordinator public key this worker "
                           "pins (" +
                           pinned + ", --keys " + dir_.file("other/worker-1") + ": " +
                           dir_.file("other/worker-1/coordinator.public") +
                           "): the process there holds another secret key, so this may be the "
                           "wrong keys folder"),
            std::string::npos)
      << done->err;
  EXPECT_NE(done->err.find("or it is not our coordinator; giving up"), std::string::npos)
      << done->err;
  EXPECT_EQ(done->err.find("retrying"), std::string::npos) << done->err;
  EXPECT_EQ(done->err.find("did not answer"), std::string::npos) << done->err;
  EXPECT_TRUE(run.trials().empty());

  // Nobody at the address: retried, then "did not answer".
  const ProcessResult r =
      cli(dir_, {"worker", "--connect", "tcp://127.0.0.1:1", "--keys", dir_.file("keys/worker-1"),
                 "--reconnect-attempts", "1", "--reconnect-initial-ms", "10", "--heartbeat-ms",
                 "50", "--liveness", "2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("retrying"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did not answer"), std::string::npos) << r.err;
}

TEST_F(CurveCoordinator, PlainPeerGetsNothing) {
  StudyRun run(dir_.path() / "s.db", study_doc(3, sleep_objective()), with_keys());
  zmq::context_t ctx;
  auto plain = dealer(ctx, run.coordinator().endpoint());
  say_hello(*plain, "plain");
  std::vector<proto::Message> got;
  run.step_until(1.5, [&] {
    auto more = received(*plain);
    got.insert(got.end(), more.begin(), more.end());
    return false;
  });
  EXPECT_TRUE(got.empty()) << "a plain ZMTP peer was answered";
  EXPECT_TRUE(run.trials().empty());
  EXPECT_TRUE(run.coordinator().workers().empty());
}

TEST_F(CurveCoordinator, TwoWorkersWithKeysFinishAStudyOverTcp) {
  CapturedLog log;
  // Dispatch waits for both workers, so a loaded machine that starts one
  // late does not let the other finish the study alone.
  CoordinatorOptions co = with_keys();
  co.min_workers = 2;
  co.min_workers_wait_s = 60.0;
  StudyRun run(dir_.path() / "s.db", study_doc(12, sleep_objective()), co);
  auto w1 = start_worker(dir_, "w1", run.coordinator().endpoint(),
                         {"--keys", dir_.file("keys/worker-1")});
  auto w2 = start_worker(dir_, "w2", run.coordinator().endpoint(),
                         {"--keys", dir_.file("keys/worker-2")});
  ASSERT_TRUE(run.step_until(30.0)) << testsupport::read_file(dir_.file("w1.err"));
  EXPECT_EQ(run.coordinator().done_reason(), "budget reached");
  std::set<std::string> workers;
  auto trials = run.trials();
  ASSERT_EQ(trials.size(), 12u);
  for (const auto& t : trials) {
    EXPECT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    workers.insert(t->worker);
  }
  EXPECT_EQ(workers, (std::set<std::string>{"w1", "w2"}));
  EXPECT_EQ(run.coordinator().stats().refused_keys, 0);
  std::string text = log.text();
  EXPECT_NE(text.find("with key 'worker-1'"), std::string::npos) << text;
  EXPECT_NE(text.find("with key 'worker-2'"), std::string::npos) << text;
  for (auto* w : {w1.get(), w2.get()}) {
    auto r = wait_stepping(*w, 10.0, [&] { run.coordinator().step(20); });
    ASSERT_TRUE(r);
    EXPECT_EQ(r->exit_code, 0) << r->err;
  }
  // Admitted workers that leave are no refusals (HandshakeMonitor).
  run.step_until(0.3, [] { return false; });
  EXPECT_EQ(run.coordinator().stats().failed_handshakes, 0);
  EXPECT_EQ(log.text().find("failed the CURVE handshake"), std::string::npos) << log.text();
}

// A listed worker that takes the id of a connected worker of another key
// is refused (its results would be credited to the other); the honest
// worker goes on and every trial is credited to it.
TEST_F(CurveCoordinator, AWorkerTakingTheIdOfAConnectedWorkerOfAnotherKeyIsRefused) {
  CapturedLog log;
  // Dispatch waits for two workers: the honest one stays connected, with
  // no trial, while the forger says Hello.
  CoordinatorOptions co = with_keys();
  co.min_workers = 2;
  co.min_workers_wait_s = 120.0;
  StudyRun run(dir_.path() / "s.db", study_doc(6, sleep_objective()), co);
  auto honest = start_worker(dir_, "same", run.coordinator().endpoint(),
                             {"--keys", dir_.file("keys/worker-1")});
  ASSERT_TRUE(run.step_until(30.0, [&] { return !run.coordinator().workers().empty(); }));
  auto forger = std::make_unique<BackgroundProcess>(
      std::vector<std::string>{HPSEARCH_CLI_PATH, "worker", "--connect",
                               run.coordinator().endpoint(), "--id", "same", "--keys",
                               dir_.file("keys/worker-2"), "--reconnect-attempts", "0", "--log-dir",
                               dir_.file("forger.logs")},
      dir_.path().string(), dir_.file("forger.out"), dir_.file("forger.err"));
  auto done = wait_stepping(*forger, 30.0, [&] { run.coordinator().step(20); });
  ASSERT_TRUE(done) << "the forger was not refused";
  EXPECT_NE(done->exit_code, 0);
  EXPECT_NE(done->err.find("the worker id 'same' is in use by a connected worker with another key "
                           "('worker-1')"),
            std::string::npos)
      << done->err;
  EXPECT_TRUE(run.trials().empty());
  // The same key under its own id is welcome.
  auto other = start_worker(dir_, "other", run.coordinator().endpoint(),
                            {"--keys", dir_.file("keys/worker-2")});
  ASSERT_TRUE(run.step_until(60.0)) << testsupport::read_file(dir_.file("same.err"));
  std::set<std::string> workers;
  for (const auto& t : run.trials()) {
    EXPECT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    workers.insert(t->worker);
  }
  EXPECT_TRUE(workers.count("same") + workers.count("other") == workers.size());
  EXPECT_NE(log.text().find("refused Hello from"), std::string::npos) << log.text();
  for (auto* w : {honest.get(), other.get()}) {
    auto r = wait_stepping(*w, 10.0, [&] { run.coordinator().step(20); });
    ASSERT_TRUE(r);
    EXPECT_EQ(r->exit_code, 0) << r->err;
  }
}

TEST_F(CurveCoordinator, ImpostorCoordinatorMakesAWorkerRunNothing) {
  // The impostor has a key pair of its own and admits the worker's public
  // key (public keys are no secret); the worker pins the real coordinator's.
  curve::make_keys(dir_.file("impostor"), 1, false);
  auto worker_keys = curve::load_worker_keys(dir_.file("keys/worker-1"));
  CoordinatorOptions co;
  co.endpoint = "tcp://127.0.0.1:*";
  co.curve_secret_key = curve::load_coordinator_keys(dir_.file("impostor")).keys.secret_key;
  co.authorized_keys = {{worker_keys.keys.public_key, "victim"}};
  const fs::path marker = dir_.path() / "pwned";
  StudyRun impostor(dir_.path() / "i.db", study_doc(1, marker_objective(marker)), co);
  auto w = start_worker(dir_, "victim", impostor.coordinator().endpoint(),
                        {"--keys", dir_.file("keys/worker-1"), "--allow-command"}, 1);
  auto done = wait_stepping(*w, 20.0, [&] { impostor.coordinator().step(20); });
  ASSERT_TRUE(done) << "the worker did not give up";
  EXPECT_EQ(done->exit_code, 1) << done->err;
  EXPECT_NE(done->err.find("CURVE handshake failed"), std::string::npos) << done->err;
  EXPECT_NE(done->err.find("giving up"), std::string::npos) << done->err;
  EXPECT_FALSE(fs::exists(marker)) << "the worker ran the impostor's command";
  EXPECT_TRUE(impostor.trials().empty());
  EXPECT_TRUE(impostor.coordinator().workers().empty());

  // Control: the same worker and objective with the real coordinator run.
  CoordinatorOptions real = with_keys();
  StudyRun genuine(dir_.path() / "g.db", study_doc(1, marker_objective(marker)), real);
  auto w2 = start_worker(dir_, "victim2", genuine.coordinator().endpoint(),
                         {"--keys", dir_.file("keys/worker-1"), "--allow-command"});
  ASSERT_TRUE(genuine.step_until(20.0)) << testsupport::read_file(dir_.file("victim2.err"));
  EXPECT_TRUE(fs::exists(marker));
}

TEST_F(CurveCoordinator, HellosBeyondMaxWorkersAreRefused) {
  CoordinatorOptions co;  // the private ipc endpoint: no keys needed
  co.max_workers = 2;
  StudyRun run(dir_.path() / "s.db", study_doc(1000, sleep_objective()), co);
  zmq::context_t ctx;
  std::vector<std::unique_ptr<zmq::socket_t>> peers;
  std::vector<std::vector<proto::Message>> got(3);
  for (int i = 0; i < 3; ++i) {
    peers.push_back(dealer(ctx, run.coordinator().endpoint()));
    peers.back()->send(
        zmq::buffer(proto::encode(proto::Hello{"peer" + std::to_string(i), "h", 1, "cpu", "", 1,
                                               proto::kProtocolVersion})),
        zmq::send_flags::dontwait);
    // The first two joined before the next Hello is sent: the coordinator's
    // socket queues the peers fairly, so a Hello still unread (under TSan
    // on a loaded machine, after 0.3 s) could be read after a later one.
    if (i < 2) {
      ASSERT_TRUE(
          run.step_until(30.0, [&] { return run.coordinator().workers().size() == peers.size(); }));
    }
  }
  auto beat = Steady::now();
  run.step_until(1.0, [&] {
    for (std::size_t i = 0; i < 3; ++i) {
      auto more = received(*peers[i]);
      got[i].insert(got[i].end(), more.begin(), more.end());
      if (Steady::now() - beat > std::chrono::milliseconds(50))  // stay alive
        peers[i]->send(zmq::buffer(proto::encode(proto::Heartbeat{})), zmq::send_flags::dontwait);
    }
    if (Steady::now() - beat > std::chrono::milliseconds(50)) beat = Steady::now();
    return false;
  });
  auto refusal = [&](std::size_t i) -> std::optional<proto::Disconnect> {
    for (const auto& m : got[i])
      if (auto* d = std::get_if<proto::Disconnect>(&m)) return *d;
    return std::nullopt;
  };
  EXPECT_FALSE(refusal(0));
  EXPECT_FALSE(refusal(1));
  auto third = refusal(2);
  ASSERT_TRUE(third) << "the third Hello was not refused";
  EXPECT_EQ(third->code, proto::Disconnect::Code::kRefused);
  EXPECT_NE(third->reason.find("maximum of 2"), std::string::npos) << third->reason;
  EXPECT_EQ(run.coordinator().stats().refused_workers, 1);
  EXPECT_EQ(run.coordinator().workers().size(), 2u);
}

TEST_F(CurveCoordinator, WorkerIdsWithControlCharactersArePrintedEscaped) {
  CapturedLog log(spdlog::level::debug);
  StudyRun run(dir_.path() / "s.db", study_doc(1000, sleep_objective()), CoordinatorOptions{});
  zmq::context_t ctx;
  auto peer = dealer(ctx, run.coordinator().endpoint());
  const std::string evil = "evil\n[12:00:00] [error] forged line\x1b]0;title\x07\x1b[2J";
  say_hello(*peer, evil);
  ASSERT_TRUE(run.step_until(3.0, [&] { return run.coordinator().stats().running == 1; }));
  auto workers = run.coordinator().workers();
  ASSERT_EQ(workers.size(), 1u);
  const std::string shown = workers[0].name;
  EXPECT_EQ(shown.find('\n'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_NE(shown.find("evil\\n[12:00:00]"), std::string::npos) << shown;
  EXPECT_NE(shown.find("\\x1b[2J"), std::string::npos) << shown;
  EXPECT_EQ(workers[0].hostname.find('\x1b'), std::string::npos);
  run.step_until(0.3, [] { return false; });  // the status attr is written
  for (const auto& args :
       {std::vector<std::string>{"status", "s.db"}, std::vector<std::string>{"trials", "s.db"}}) {
    ProcessResult r = cli(dir_, args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\n[12:00:00]"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("evil\\n"), std::string::npos) << r.out;
  }
  std::string text = log.text();
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find("\n[12:00:00]"), std::string::npos);
}

// ------------------------------------------------------------------ command objectives

TEST_F(CurveCoordinator, HandStartedWorkerRefusesCommandObjectivesUnlessAllowed) {
  const fs::path marker = dir_.path() / "ran";
  StudyRun run(dir_.path() / "s.db", study_doc(1, marker_objective(marker)), CoordinatorOptions{});
  auto w = start_worker(dir_, "by-hand", run.coordinator().endpoint(), {});
  ASSERT_TRUE(run.step_until(20.0));
  auto trials = run.trials();
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0]->state, TrialState::kFail);
  EXPECT_NE(trials[0]->fail_reason.find("--allow-command"), std::string::npos)
      << trials[0]->fail_reason;
  EXPECT_FALSE(fs::exists(marker)) << "the command ran";
  auto r = wait_stepping(*w, 10.0, [&] { run.coordinator().step(20); });
  ASSERT_TRUE(r);
  EXPECT_NE(r->err.find("does not run \"command\" objectives"), std::string::npos) << r->err;

  // --allow-program with another program: refused; with /bin/sh: runs.
  StudyRun other(dir_.path() / "t.db", study_doc(1, marker_objective(marker)),
                 CoordinatorOptions{});
  auto w2 = start_worker(dir_, "listed", other.coordinator().endpoint(),
                         {"--allow-program", "/bin/true"});
  ASSERT_TRUE(other.step_until(20.0));
  EXPECT_NE(other.trials().at(0)->fail_reason.find("allow-list"), std::string::npos);
  EXPECT_FALSE(fs::exists(marker));
  StudyRun third(dir_.path() / "u.db", study_doc(1, marker_objective(marker)),
                 CoordinatorOptions{});
  auto w3 =
      start_worker(dir_, "listed2", third.coordinator().endpoint(), {"--allow-program", "/bin/sh"});
  ASSERT_TRUE(third.step_until(20.0));
  EXPECT_EQ(third.trials().at(0)->state, TrialState::kComplete) << third.trials()[0]->fail_reason;
  EXPECT_TRUE(fs::exists(marker));

  // The objective's env is an allow-list (issue #47, finding 5): PYTHONPATH
  // (like BASH_ENV, NODE_OPTIONS, ...) would run the coordinator's code.
  fs::remove(marker);
  Json with_env = marker_objective(marker);
  with_env["env"] = {{"PYTHONPATH", "/tmp/evil"}};
  StudyRun fourth(dir_.path() / "v.db", study_doc(1, with_env), CoordinatorOptions{});
  auto w4 = start_worker(dir_, "listed3", fourth.coordinator().endpoint(),
                         {"--allow-program", "/bin/sh"});
  ASSERT_TRUE(fourth.step_until(20.0));
  EXPECT_EQ(fourth.trials().at(0)->state, TrialState::kFail);
  EXPECT_NE(fourth.trials().at(0)->fail_reason.find(
                "the objective's env sets PYTHONPATH, which is not in this worker's env "
                "allow-list: start the worker with --allow-env PYTHONPATH"),
            std::string::npos)
      << fourth.trials().at(0)->fail_reason;
  EXPECT_FALSE(fs::exists(marker)) << "the command ran";
  with_env["env"] = {{"RUN_TAG", "a"}};
  StudyRun fifth(dir_.path() / "w.db", study_doc(1, with_env), CoordinatorOptions{});
  auto w5 = start_worker(dir_, "listed4", fifth.coordinator().endpoint(),
                         {"--allow-program", "/bin/sh", "--allow-env", "RUN_TAG"});
  ASSERT_TRUE(fifth.step_until(20.0));
  EXPECT_EQ(fifth.trials().at(0)->state, TrialState::kComplete) << fifth.trials()[0]->fail_reason;
  EXPECT_TRUE(fs::exists(marker));
}

}  // namespace
}  // namespace hps
