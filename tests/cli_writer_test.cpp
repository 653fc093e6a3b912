// Tests of the single-writer rules of the hpsearch executable, run as child
// processes in a temporary directory: one coordinator per study (N
// simultaneous resumes, one runs), `hpsearch status` asking the writer lock,
// owner-only files, a store deleted under a run, no trial program outliving
// a killed worker, and a coordinator out of file descriptors.
//
// HPSEARCH_TEST_CLI=/path/to/hpsearch runs them against another build (to
// check that they fail without these rules).
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "protocol/protocol.h"
#include "search/json_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
namespace proto = hps::protocol;
using testsupport::BackgroundProcess;
using testsupport::processes_in_group;
using testsupport::ProcessResult;
using testsupport::TempDir;
using testsupport::wait_until;

std::string cli_path() {
  const char* other = std::getenv("HPSEARCH_TEST_CLI");
  return other && *other ? other : HPSEARCH_CLI_PATH;
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 0777;
}

// A space whose objective sleeps `seconds` per trial in `steps` steps.
std::string sleep_space(double seconds, int n_trials, int steps = 1) {
  return fmt::format(R"({{
    "study": {{"name": "slow", "direction": "minimize", "storage": "slow.db"}},
    "sampler": {{"type": "random", "seed": 3}},
    "budget": {{"n_trials": {}}},
    "objective": {{"type": "sleep", "seconds": {}, "steps": {}}},
    "space": {{"x": {{"type": "float", "low": 0, "high": 1}}}}
  }})",
                     n_trials, seconds, steps);
}

// A space whose objective is `sh -c script` ("{{" and "}}" for braces).
std::string command_space(const std::string& script, int n_trials) {
  Json doc = {{"study", {{"name", "cmd"}, {"direction", "minimize"}, {"storage", "cmd.db"}}},
              {"sampler", {{"type", "random"}, {"seed", 1}}},
              {"budget", {{"n_trials", n_trials}}},
              {"objective", {{"type", "command"}, {"argv", {"/bin/sh", "-c", script}}}},
              {"space", {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}}}}}};
  return doc.dump();
}

int count_state(const Json& trials, const std::string& state) {
  int n = 0;
  for (const auto& t : trials) n += t["state"] == state ? 1 : 0;
  return n;
}

// The parent of `pid` from the process table (-1 if gone).
pid_t parent_of(pid_t pid) {
  std::string text = testsupport::read_file("/proc/" + std::to_string(pid) + "/stat");
  std::size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  char state = 0;
  long ppid = -1;
  rest >> state >> ppid;
  return static_cast<pid_t>(ppid);
}

class CliWriterTest : public ::testing::Test {
 protected:
  ProcessResult cli(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {cli_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  }
  std::unique_ptr<BackgroundProcess> background(std::vector<std::string> argv,
                                                const std::string& label) const {
    return std::make_unique<BackgroundProcess>(
        argv, dir_.path().string(), dir_.file(label + ".out"), dir_.file(label + ".err"));
  }
  std::unique_ptr<BackgroundProcess> cli_background(const std::vector<std::string>& args,
                                                    const std::string& label) const {
    std::vector<std::string> argv = {cli_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return background(argv, label);
  }
  Json status_json(const std::string& db) const {
    ProcessResult r = cli({"status", db, "--format", "json"});
    if (r.exit_code != 0) return Json();
    return Json::parse(r.out, nullptr, false);
  }
  Json trials_json(const std::string& db) const {
    ProcessResult r = cli({"trials", db, "--format", "json"});
    if (r.exit_code != 0) return Json();
    Json j = Json::parse(r.out, nullptr, false);
    return j.is_array() ? j : Json();
  }

  TempDir dir_{"cli_writer"};
};

// ------------------------------------------------------------ one writer

TEST_F(CliWriterTest, SimultaneousResumesGiveOneRunnerAndExactlyTheBudget) {
  // A store with the study's settings (one trial done), then 8 resumes of it
  // started at the same moment with a budget of 100.
  dir_.write("space.json", sleep_space(0.005, 1));
  ProcessResult first = cli({"run", "space.json"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  constexpr int kRunners = 8;
  constexpr int kBudget = 100;
  // A start line: each runner waits in open() of a FIFO until all wait
  // there; opening it for writing releases them at the same moment.
  const std::string go = dir_.file("go");
  ASSERT_EQ(::mkfifo(go.c_str(), 0600), 0);
  std::vector<std::unique_ptr<BackgroundProcess>> runs;
  for (int i = 0; i < kRunners; ++i)
    runs.push_back(background({"/bin/sh", "-c",
                               "read x < go; exec \"$0\" resume slow.db --n-trials " +
                                   std::to_string(kBudget) + " --workers 2",
                               cli_path()},
                              "resume" + std::to_string(i)));
  wait_until(
      [&] {
        for (auto& r : runs)
          if (testsupport::read_file("/proc/" + std::to_string(r->pid()) + "/wchan") !=
              "wait_for_partner")
            return false;
        return true;
      },
      std::chrono::seconds(10));
  int release = ::open(go.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(release, 0);
  ::close(release);
  std::vector<ProcessResult> results;
  for (auto& r : runs) results.push_back(r->wait());
  int ran = 0;
  pid_t winner = -1;
  for (int i = 0; i < kRunners; ++i)
    if (results[static_cast<std::size_t>(i)].exit_code == 0) {
      ++ran;
      winner = runs[static_cast<std::size_t>(i)]->pid();
    }
  EXPECT_EQ(ran, 1) << "coordinators that ran the study";
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  for (int i = 0; i < kRunners; ++i) {
    const ProcessResult& r = results[static_cast<std::size_t>(i)];
    if (r.exit_code == 0) continue;
    EXPECT_EQ(r.exit_code, 2) << r.err;  // refused, as bad input is: nothing was run
    EXPECT_NE(r.err.find("being run by another coordinator"), std::string::npos) << r.err;
    // The holder: host, pid, since when.
    EXPECT_NE(r.err.find(std::string(host) + ":" + std::to_string(winner)), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("since "), std::string::npos) << r.err;
  }
  Json trials = trials_json("slow.db");
  ASSERT_TRUE(trials.is_array());
  EXPECT_EQ(count_state(trials, "COMPLETE"), kBudget);
  EXPECT_EQ(count_state(trials, "RUNNING"), 0);
}

TEST_F(CliWriterTest, StatusAsksTheLockNotTheClock) {
  // One trial longer than the old staleness window (10 s with these
  // heartbeat settings), with no trial event meanwhile.
  dir_.write("space.json", sleep_space(14.0, 1));
  auto run = cli_background(
      {"run", "space.json", "--heartbeat-ms", "100", "--liveness", "2", "--workers", "1"}, "run");
  ASSERT_TRUE(wait_until([&] {
    Json t = trials_json("slow.db");
    return t.is_array() && count_state(t, "RUNNING") == 1;
  })) << "the trial did not start";
  std::this_thread::sleep_for(std::chrono::seconds(11));
  ASSERT_TRUE(run->running());
  ProcessResult status = cli({"status", "slow.db"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("Coordinator: running ("), std::string::npos) << status.out;
  EXPECT_NE(status.out.find(":" + std::to_string(run->pid())), std::string::npos) << status.out;
  EXPECT_EQ(status.out.find("may have been killed"), std::string::npos) << status.out;
  Json j = status_json("slow.db");
  EXPECT_EQ(j.value("coordinator_running", Json()), Json(true)) << j.dump();

  run->send_signal(SIGKILL);
  run->wait();
  status = cli({"status", "slow.db"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("Coordinator: not running"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("hpsearch resume"), std::string::npos) << status.out;
  j = status_json("slow.db");
  EXPECT_EQ(j.value("coordinator_running", Json()), Json(false)) << j.dump();
}

// The worker names of `hpsearch status`'s Workers table (first column) and
// of its RUNNING list (second column), from its text.
std::pair<std::set<std::string>, std::set<std::string>> status_worker_names(
    const std::string& out) {
  std::set<std::string> table, list;
  std::set<std::string>* into = nullptr;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) {
      into = nullptr;
      continue;
    }
    if (line.rfind("Workers (", 0) == 0) {
      into = &table;
      continue;
    }
    std::istringstream words(line);
    std::string first, second;
    words >> first >> second;
    if (first == "RUNNING" && second == "trial") {
      into = &list;
      continue;
    }
    if (!into || first == "worker" || line.find_first_not_of("- ") == std::string::npos) continue;
    if (into == &list)
      into->insert(second);
    else
      into->insert(first);
  }
  return {table, list};
}

TEST_F(CliWriterTest, StatusWorkersTableAgreesWithItsRunningList) {
  // Trials much shorter than the coordinator's record interval (1 s): the
  // record's trial numbers are old by the time status reads the store.
  dir_.write("space.json", sleep_space(0.02, 100000));
  auto run = cli_background({"run", "space.json", "--workers", "2"}, "run");
  ASSERT_TRUE(wait_until([&] {
    return cli({"status", "slow.db"}).out.find("Workers (") != std::string::npos;
  })) << "no workers table";
  for (int i = 0; i < 20 && run->running(); ++i) {
    ProcessResult status = cli({"status", "slow.db"});
    ASSERT_EQ(status.exit_code, 0) << status.err;
    auto [table, list] = status_worker_names(status.out);
    for (const std::string& name : list)
      EXPECT_EQ(table.count(name), 0u)
          << name << " is in the Workers table and has a RUNNING trial below it:\n"
          << status.out;
  }
  run->send_signal(SIGTERM);
  run->wait();
}

// The GPUs column of status's Workers table: each local worker's
// CUDA_VISIBLE_DEVICES, as the pool set it and the worker reported it in
// its Hello (--gpus names ids; no GPU is used by the sleep objective).
TEST_F(CliWriterTest, StatusShowsTheGpusOfEachWorker) {
  dir_.write("space.json", sleep_space(30.0, 2));
  auto run =
      cli_background({"run", "space.json", "--gpus", "4,5,6,7", "--gpus-per-worker", "2"}, "run");
  Json workers;
  ASSERT_TRUE(wait_until([&] {
    Json j = status_json("slow.db");
    if (!j.is_object() || !j.contains("coordinator") || !j["coordinator"].is_object()) return false;
    workers = j["coordinator"].value("workers", Json());
    return workers.is_array() && workers.size() == 2;
  })) << "no two workers in the status";
  std::set<std::string> gpus;
  for (const auto& w : workers) {
    gpus.insert(w.value("gpus", std::string("?")));
    EXPECT_EQ(w.value("device", std::string()), "cuda") << w.dump();
  }
  EXPECT_EQ(gpus, (std::set<std::string>{"4,5", "6,7"}));
  ProcessResult status = cli({"status", "slow.db"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  std::istringstream lines(status.out);
  std::vector<std::string> rows;
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Workers (", 0) == 0)
      in_table = true;
    else if (line.empty())
      in_table = false;
    else if (in_table)
      rows.push_back(line);
  }
  ASSERT_GE(rows.size(), 4u) << status.out;  // header, rule, two workers
  std::istringstream header(rows[0]);
  std::vector<std::string> columns{std::istream_iterator<std::string>(header), {}};
  ASSERT_GE(columns.size(), 5u) << rows[0];
  EXPECT_EQ(columns[3], "device") << rows[0];
  EXPECT_EQ(columns[4], "GPUs") << rows[0];
  std::set<std::string> shown;
  for (std::size_t i = 2; i < rows.size(); ++i) {
    std::istringstream row(rows[i]);
    std::vector<std::string> cells{std::istream_iterator<std::string>(row), {}};
    if (cells.size() > 4) shown.insert(cells[4]);
  }
  EXPECT_EQ(shown, (std::set<std::string>{"4,5", "6,7"})) << status.out;
  run->send_signal(SIGTERM);
  run->wait();
}

// ------------------------------------------------------------ files

TEST_F(CliWriterTest, StoreWalLockAndTrialLogsAreOwnerOnly) {
  const mode_t old_mask = ::umask(022);  // a usual umask: new files 0644 without the rule
  dir_.write("space.json",
             command_space("sleep 0.3; echo 'hpsearch: {{\"value\": 1}}'; echo done >&2", 3));
  auto run = cli_background({"run", "space.json", "--workers", "1"}, "run");
  ::umask(old_mask);
  // While it runs: the store, its WAL and shared memory, the lock file.
  // (SQLite makes the -wal file, then the -shm file: wait for both.)
  ASSERT_TRUE(wait_until(
      [&] { return fs::exists(dir_.file("cmd.db-wal")) && fs::exists(dir_.file("cmd.db-shm")); }));
  unsigned wal = mode_of(dir_.file("cmd.db-wal")), shm = mode_of(dir_.file("cmd.db-shm"));
  ProcessResult r = run->wait();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(mode_of(dir_.file("cmd.db")), 0600u);
  EXPECT_EQ(wal, 0600u);
  EXPECT_EQ(shm, 0600u);
  EXPECT_EQ(mode_of(dir_.file("cmd.db.lock")), 0600u);
  EXPECT_EQ(mode_of(dir_.file("cmd.logs")), 0700u);
  int logs = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_.file("cmd.logs"))) {
    // Files 0600 (the trial logs; checkpoints/.store-id), folders 0700
    // (checkpoints/, made for the trials' checkpoint folders).
    EXPECT_EQ(mode_of(e.path().string()), e.is_directory() ? 0700u : 0600u) << e.path();
    logs += e.is_regular_file() && e.path().extension() == ".log" ? 1 : 0;
  }
  EXPECT_EQ(logs, 3);
}

// An attacker who can write the folder of a store not made yet plants a
// symbolic link to a missing file there (in a folder the user's umask
// would then make readable): the run is refused, exit 2 naming --storage
// (or study.storage) and the rule, and nothing is made at the link's
// target, which would have been created with mode 0644.
TEST_F(CliWriterTest, ADanglingLinkPlantedAsTheStoreIsRefusedNotFollowed) {
  const mode_t old_mask = ::umask(022);
  dir_.write("space.json", sleep_space(0, 2));
  const std::string target = dir_.file("made-through-the-link.db");
  fs::create_symlink(target, dir_.file("planted.db"));
  ProcessResult flag = cli({"run", "space.json", "--storage", "planted.db"});
  EXPECT_EQ(flag.exit_code, 2) << flag.err;
  EXPECT_NE(flag.err.find("--storage: is a symbolic link to a missing file (" + target + ")"),
            std::string::npos)
      << flag.err;
  fs::create_symlink(target, dir_.file("slow.db"));
  ProcessResult file = cli({"run", "space.json"});
  ::umask(old_mask);
  EXPECT_EQ(file.exit_code, 2) << file.err;
  EXPECT_NE(file.err.find("study.storage: is a symbolic link to a missing file"), std::string::npos)
      << file.err;
  EXPECT_FALSE(fs::exists(target)) << "made with mode " << std::oct << mode_of(target);
  EXPECT_FALSE(fs::exists(dir_.file("slow.db.lock")));
}

// A <store>.lock planted as a symbolic link (or a folder) is refused before
// anything is written, exit 2 naming the lock file and the rule: no new
// store with an empty study is left behind, an existing study keeps its
// trials, and the link's target is not touched.
TEST_F(CliWriterTest, ALockFilePlantedAsALinkIsRefusedBeforeAnythingIsWritten) {
  dir_.write("space.json", sleep_space(0, 2));
  const std::string victim = dir_.write("victim", "the victim's data");
  fs::create_symlink(victim, dir_.file("slow.db.lock"));
  ProcessResult planted = cli({"run", "space.json"});
  EXPECT_EQ(planted.exit_code, 2) << planted.err;
  EXPECT_NE(planted.err.find("slow.db.lock: the writer lock file is a symbolic link: refused"),
            std::string::npos)
      << planted.err;
  EXPECT_FALSE(fs::exists(dir_.file("slow.db"))) << "a refused run made the store";
  EXPECT_EQ(testsupport::read_file(victim), "the victim's data");

  fs::remove(dir_.file("slow.db.lock"));
  ProcessResult first = cli({"run", "space.json"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  fs::remove(dir_.file("slow.db.lock"));
  fs::create_directory(dir_.file("slow.db.lock"));
  ProcessResult folder = cli({"resume", "slow.db", "--n-trials", "4"});
  EXPECT_EQ(folder.exit_code, 2) << folder.err;
  EXPECT_NE(folder.err.find("slow.db.lock: the writer lock file is not a regular file"),
            std::string::npos)
      << folder.err;
  Json trials = trials_json("slow.db");
  EXPECT_EQ(trials.size(), 2u) << trials.dump();
}

// Files planted beside a store by someone who can write its folder:
// <store>-wal / -shm as a symbolic link are refused before anything is
// made or written (exit 2, naming the file and the rule; no broken empty
// store left behind, the link's target byte-identical), by run, resume and
// the read commands; an empty store or a lock file of another user (uid
// 65534, mode 0666) is refused and keeps its owner and mode; a store of
// this user that its group may write (0664) runs.
TEST_F(CliWriterTest, PlantedWalShmLinksAndFilesOfAnotherUserAreRefusedBeforeAnythingIsWritten) {
  dir_.write("space.json", sleep_space(0, 2));
  const std::string victim = dir_.write("victim", "the victim's data");
  fs::create_symlink(victim, dir_.file("slow.db-shm"));
  ProcessResult shm = cli({"run", "space.json"});
  EXPECT_EQ(shm.exit_code, 2) << shm.err;
  EXPECT_NE(shm.err.find("slow.db-shm: the store's -shm file is a symbolic link: refused"),
            std::string::npos)
      << shm.err;
  EXPECT_FALSE(fs::exists(dir_.file("slow.db"))) << "a refused run made the store";
  EXPECT_FALSE(fs::exists(dir_.file("slow.db.lock")));
  fs::remove(dir_.file("slow.db-shm"));

  ProcessResult first = cli({"run", "space.json"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  fs::create_symlink(victim, dir_.file("slow.db-wal"));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"resume", "slow.db", "--n-trials", "4"},
        std::vector<std::string>{"trials", "slow.db"}}) {
    ProcessResult wal = cli(args);
    EXPECT_EQ(wal.exit_code, 2) << args[0] << ": " << wal.err;
    EXPECT_NE(wal.err.find("slow.db-wal: the store's -wal file is a symbolic link: refused"),
              std::string::npos)
        << wal.err;
  }
  EXPECT_EQ(testsupport::read_file(victim), "the victim's data");
  fs::remove(dir_.file("slow.db-wal"));
  ASSERT_EQ(::chmod(dir_.file("slow.db").c_str(), 0664), 0);  // a shared group folder
  ProcessResult group = cli({"resume", "slow.db", "--n-trials", "3"});
  EXPECT_EQ(group.exit_code, 0) << group.err;
  EXPECT_EQ(trials_json("slow.db").size(), 3u);
  EXPECT_EQ(mode_of(dir_.file("slow.db")), 0664u);

  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot make a file of another uid";
  const std::string planted = dir_.write("planted.db", "");
  ASSERT_EQ(::chmod(planted.c_str(), 0666), 0);
  ASSERT_EQ(::chown(planted.c_str(), 65534, 65534), 0);
  ProcessResult store = cli({"run", "space.json", "--storage", "planted.db"});
  EXPECT_EQ(store.exit_code, 2) << store.err;
  EXPECT_NE(store.err.find("planted.db: the store is owned by uid 65534, not by this user (uid 0): "
                           "refused"),
            std::string::npos)
      << store.err;
  struct stat st {};
  ASSERT_EQ(::stat(planted.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(mode_of(planted), 0666u);
  EXPECT_FALSE(fs::exists(planted + ".lock"));

  const std::string lock = dir_.file("slow.db.lock");
  ASSERT_EQ(::chown(lock.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(lock.c_str(), 0666), 0);
  ProcessResult locked = cli({"resume", "slow.db", "--n-trials", "5"});
  EXPECT_EQ(locked.exit_code, 2) << locked.err;
  EXPECT_NE(locked.err.find("slow.db.lock: the writer lock file is owned by uid 65534"),
            std::string::npos)
      << locked.err;
  EXPECT_EQ(trials_json("slow.db").size(), 3u);
}

TEST_F(CliWriterTest, StoreDeletedDuringARunStopsItWithAnError) {
  dir_.write("space.json", sleep_space(0.05, 400));
  auto run = cli_background({"run", "space.json", "--workers", "2"}, "run");
  ASSERT_TRUE(wait_until([&] {
    Json t = trials_json("slow.db");
    return t.is_array() && count_state(t, "COMPLETE") >= 3;
  }));
  for (const char* suffix : {"", "-wal", "-shm"})
    fs::remove(dir_.file(std::string("slow.db") + suffix));
  ProcessResult r;
  ASSERT_TRUE(wait_until([&] { return !run->running(); }, std::chrono::seconds(60)))
      << "the run went on without its store";
  r = run->wait();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("slow.db: the store file was deleted"), std::string::npos) << r.err;
  // Nothing claimed done: no summary of a finished study.
  EXPECT_EQ(r.out.find("COMPLETE,"), std::string::npos) << r.out;
}

// ------------------------------------------------------------ processes

TEST_F(CliWriterTest, NoTrialProcessSurvivesAWorkerKilledByKill9) {
  // The trial's program leaves a child of its group in the background.
  dir_.write(
      "space.json",
      command_space("echo $$ > leader.$$; sleep 300 & echo $! > bg.$$; echo running-$$; sleep 300",
                    1));
  auto run = cli_background({"run", "space.json", "--workers", "1", "--max-retries", "0"}, "run");
  pid_t leader = -1, bg = -1;
  ASSERT_TRUE(wait_until([&] {
    for (const auto& e : fs::directory_iterator(dir_.path())) {
      std::string name = e.path().filename().string();
      if (name.rfind("bg.", 0) == 0) {
        std::string pid_text = testsupport::read_file(e.path().string());
        if (pid_text.empty()) return false;
        leader = std::stoi(name.substr(3));
        bg = std::stoi(pid_text);
        return true;
      }
    }
    return false;
  })) << "the trial's program did not start";
  // The worker reads the program's output (into the trial log) only once
  // it has started the program and its guard (objectives/group_guard.h):
  // killed before that, it may leave the program unguarded (the pid not yet
  // stored for the guard), which is not what this test is about.
  const std::string marker = "running-" + std::to_string(leader);
  ASSERT_TRUE(wait_until([&] {
    return testsupport::read_file(dir_.file("cmd.logs/trial-0.log")).find(marker) !=
           std::string::npos;
  })) << "the worker did not read the program's output";
  pid_t worker = parent_of(leader);
  ASSERT_GT(worker, 1);
  ASSERT_NE(worker, run->pid());
  ASSERT_GE(processes_in_group(leader).size(), 2u);
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  // The guard (objectives/group_guard.h) reacts as soon as it is scheduled;
  // the bound only ends a failing run (a loaded 2-core CI machine can take
  // seconds to schedule it).
  std::vector<pid_t> left;
  wait_until(
      [&] {
        left = processes_in_group(leader);
        return left.empty();
      },
      std::chrono::seconds(60));
  EXPECT_TRUE(left.empty()) << left.size() << " processes of the trial's group survived; "
                            << "processes now:\n"
                            << testsupport::run_process(
                                   {"/bin/ps", "-eo", "pid,ppid,pgid,stat,etimes,comm"},
                                   dir_.path().string())
                                   .out;
  for (pid_t p : left) ::kill(p, SIGKILL);  // clean up after a failure
  (void)bg;
  run->send_signal(SIGTERM);
  run->wait();
}

// ------------------------------------------------------------ descriptors

// A connection to `endpoint` ("tcp://host:port" or "ipc:///path") that
// never speaks: -1 if it cannot be made.
int idle_connection(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) == 0) {
    std::string rest = endpoint.substr(6);
    auto colon = rest.rfind(':');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(rest.substr(colon + 1))));
    if (::inet_pton(AF_INET, rest.substr(0, colon).c_str(), &addr.sin_addr) != 1) return -1;
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);  // EINPROGRESS
    return fd;
  }
  if (endpoint.rfind("ipc://", 0) == 0) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string path = endpoint.substr(6);
    if (path.size() >= sizeof addr.sun_path) return -1;
    std::copy(path.begin(), path.end(), addr.sun_path);
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    return fd;
  }
  return -1;
}

TEST_F(CliWriterTest, CoordinatorOutOfDescriptorsKeepsRunningItsStudy) {
#if defined(HPSEARCH_TEST_ASAN) || defined(HPSEARCH_TEST_TSAN)
  // UBSan's vptr check probes memory with pipe(2), which fails when the
  // process is out of descriptors, and then reports valid objects as bad:
  // the sanitized coordinator cannot be out of descriptors. The release
  // build runs this test.
  GTEST_SKIP() << "not under the sanitizers (their checks need descriptors)";
#endif
  // This process holds the connections: it needs more than 1,100 descriptors.
  struct rlimit rl {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  const rlim_t saved = rl.rlim_cur;
  rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 8192);
  if (rl.rlim_cur < 2000) GTEST_SKIP() << "hard descriptor limit " << rl.rlim_max << " < 2000";
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &rl), 0);

  // Each trial waits for the file "gate", which the test makes once the
  // coordinator has run out of descriptors: the study has to go on then.
  constexpr int kBudget = 20;
  dir_.write(
      "space.json",
      command_space("while [ ! -e gate ]; do sleep 0.05; done; echo 'hpsearch: {{\"value\": 1}}'",
                    kBudget));
  // The coordinator (and its workers) under `ulimit -n 1024`, with a tcp
  // endpoint for the flood (the local workers use the private ipc socket;
  // libzmq 4.3's ipc listener aborts on EMFILE, its tcp listener retries).
  auto run = background({"/bin/sh", "-c",
                         "ulimit -n 1024 && exec \"$0\" run space.json --workers 2 "
                         "--bind tcp://127.0.0.1:0 --insecure",
                         cli_path()},
                        "run");
  std::string endpoint;
  ASSERT_TRUE(wait_until([&] {
    Json s = status_json("cmd.db");
    if (!s.is_object() || !s["coordinator"].is_object()) return false;
    endpoint = s["coordinator"].value("endpoint", "");
    return !endpoint.empty();
  })) << "no endpoint";
  // The local workers are connected (each runs a trial) before the flood.
  ASSERT_TRUE(wait_until([&] {
    Json t = trials_json("cmd.db");
    return t.is_array() && count_state(t, "RUNNING") >= 2;
  }));
  std::string local = endpoint;
  for (const char* any : {"tcp://0.0.0.0:", "tcp://*:"})
    if (local.rfind(any, 0) == 0)
      local = "tcp://127.0.0.1:" + local.substr(std::string(any).size());

  // 300 protocol peers that say Hello and then stay silent, and 800 idle
  // connections that never speak: 1,100 in all, beyond the 1,024 limit.
  zmq::context_t context;
  context.set(zmq::ctxopt::max_sockets, 4096);
  std::vector<zmq::socket_t> peers;
  for (int i = 0; i < 300; ++i) {
    peers.emplace_back(context, zmq::socket_type::dealer);
    peers.back().set(zmq::sockopt::linger, 0);
    peers.back().connect(local);
    proto::Hello hello{"peer-" + std::to_string(i), "h", 100000 + i, "cpu", "", 1,
                       proto::kProtocolVersion};
    std::string frame = proto::encode(hello);
    peers.back().send(zmq::buffer(frame), zmq::send_flags::dontwait);
  }
  // In batches of 25, each accepted by the coordinator (its descriptors
  // counted in the process table) before the next: its accept queue
  // (ZMQ_BACKLOG, 100) must not overflow, or connections the kernel drops
  // would never reach it. Past its limit the count stops growing.
  const std::string coordinator_fds = "/proc/" + std::to_string(run->pid()) + "/fd";
  auto open_fds = [&] {
    int n = 0;
    std::error_code ec;
    for (fs::directory_iterator it(coordinator_fds, ec), end; !ec && it != end; it.increment(ec))
      ++n;
    return n;
  };
  std::vector<int> idle;
  for (int batch = 0; batch < 32; ++batch) {
    const int before = open_fds();
    int made = 0;
    for (int i = 0; i < 25; ++i) {
      int fd = idle_connection(local);
      if (fd < 0) continue;
      idle.push_back(fd);
      ++made;
    }
    wait_until([&] { return open_fds() >= std::min(before + made, 1020); },
               std::chrono::seconds(3));
  }
  EXPECT_EQ(idle.size(), 800u);
  // The coordinator is out of descriptors now and says so.
  EXPECT_TRUE(wait_until(
      [&] {
        return testsupport::read_file(dir_.file("run.err")).find("out of file descriptors") !=
               std::string::npos;
      },
      std::chrono::seconds(60)))
      << "no report of descriptor exhaustion; the coordinator has " << open_fds()
      << " descriptors open";

  dir_.write("gate", "");
  ASSERT_TRUE(wait_until([&] { return !run->running(); }, std::chrono::seconds(240)))
      << "the run did not end";
  ProcessResult r = run->wait();
  for (int fd : idle) ::close(fd);
  peers.clear();
  context.close();
  rl.rlim_cur = saved;
  ::setrlimit(RLIMIT_NOFILE, &rl);

  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("unable to open database file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("out of file descriptors"), std::string::npos) << r.err;
  Json trials = trials_json("cmd.db");
  ASSERT_TRUE(trials.is_array());
  EXPECT_EQ(count_state(trials, "COMPLETE"), kBudget);
}

}  // namespace
}  // namespace hps
