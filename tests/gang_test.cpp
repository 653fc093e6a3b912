// Multi-process trials (search/resources.h, coordinator/gangs.cpp): gang
// scheduling on local workers through the hpsearch executable, the
// torchrun environment contract with an unchanged torch.distributed (gloo,
// env://) script run by Debian's python3-torch, a killed rank's worker,
// mixed trial sizes, and the refusal of a trial bigger than the pool.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "algorithms/random_sampler.h"
#include "coordinator/coordinator.h"
#include "protocol/protocol.h"
#include "search/json_util.h"
#include "search/storage.h"
#include "search/study.h"
#include "tests/support/log_capture.h"
#include "tests/support/raw_worker.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using testsupport::ProcessResult;
using testsupport::TempDir;

// A torchrun-style script: init_process_group from the environment (gloo,
// env://), one all_reduce, a line per rank in the record file (argv[1]):
// trial rank world RANK-env LOCAL_RANK all_reduce start end. The first run
// of trial 0's rank 1 writes argv[2] with its worker's pid when argv[2] is
// given, then waits in a barrier that rank 0 never joins (rank 0 sleeps):
// the test kills that worker.
const char* kDdpScript = R"(import os, sys, time
start = time.time()
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
kill_file = sys.argv[2] if len(sys.argv) > 2 else ""
if kill_file and os.environ["HPSEARCH_TRIAL_NUMBER"] == "0":
    if rank == 1:
        with open(kill_file + ".tmp", "w") as f:
            f.write(str(os.getppid()))
        os.rename(kill_file + ".tmp", kill_file)
    time.sleep(600)
time.sleep(1.0)
with open(sys.argv[1], "a") as f:
    f.write("%s %d %d %s %s %s %.6f %.6f\n" % (os.environ["HPSEARCH_TRIAL_NUMBER"], rank, world,
            os.environ["RANK"], os.environ["LOCAL_RANK"], x.item(), start, time.time()))
dist.barrier()
dist.destroy_process_group()
print('hpsearch: {"value": %s}' % x.item())
)";

struct RankLine {
  int trial = -1, rank = -1, world = -1, env_rank = -1, local_rank = -1;
  double reduced = 0, start = 0, end = 0;
};

std::vector<RankLine> read_record(const std::string& path) {
  std::vector<RankLine> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    RankLine r;
    if (s >> r.trial >> r.rank >> r.world >> r.env_rank >> r.local_rank >> r.reduced >> r.start >>
        r.end)
      out.push_back(r);
  }
  return out;
}

bool torch_available() {
  ProcessResult r =
      testsupport::run_process({"/usr/bin/python3", "-c", "import torch.distributed"}, "/");
  return r.exit_code == 0;
}

// Pids of the processes whose command line mentions `needle`.
std::vector<pid_t> processes_running(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ifstream stat(e.path() / "stat");
    std::string st((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = st.rfind(')');
    if (paren != std::string::npos && paren + 2 < st.size() && st[paren + 2] == 'Z') continue;
    if (cmd.find(needle) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

class GangTest : public ::testing::Test {
 protected:
  ProcessResult cli(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {HPSEARCH_CLI_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  }
  Json trials(const std::string& db) const {
    ProcessResult r = cli({"trials", db, "--format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    Json j = Json::parse(r.out, nullptr, false);
    return j.is_array() ? j : Json::array();
  }
  // A study of the DDP script, `processes` ranks per trial.
  void write_ddp_space(const std::string& name, int n_trials, int processes,
                       const std::vector<std::string>& extra_args = {}) const {
    const std::string script = dir_.write("ddp_train.py", kDdpScript);
    Json argv = {"/usr/bin/python3", script, dir_.file("ranks.txt")};
    for (const auto& a : extra_args) argv.push_back(a);
    const Json space = {{"study", {{"name", name}, {"direction", "minimize"}}},
                        {"sampler", {{"type", "random"}, {"seed", 1}}},
                        {"budget", {{"n_trials", n_trials}}},
                        {"resources", {{"processes", processes}}},
                        {"objective", {{"type", "command"}, {"argv", argv}, {"timeout_s", 300}}},
                        {"space", {{"lr", {{"type", "float"}, {"low", 0.001}, {"high", 0.1}}}}}};
    dir_.write("space.json", space.dump());
  }
  TempDir dir_{"gang"};
};

// 6 trials of 2 ranks on 4 workers: each trial's ranks are {0, 1} of a
// world of 2 with the torchrun environment, the all_reduce sums 1 + 2, two
// trials run at the same time, and each trial's value is rank 0's.
TEST_F(GangTest, TorchDistributedScriptRunsUnchangedAsTwoRanks) {
  if (!torch_available()) GTEST_SKIP() << "python3-torch is not installed";
  write_ddp_space("ddp", 6, 2);
  ProcessResult run = cli({"run", "space.json", "--workers", "4"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  // Rank 1 prints no value (rank 0's is the trial's): no failure is said;
  // nor is a wait while the local pool is still connecting.
  EXPECT_EQ(run.err.find("without reporting a final value"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("failed"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("waits for more workers"), std::string::npos) << run.err;
  const Json ts = trials("ddp.db");
  ASSERT_EQ(ts.size(), 6u) << ts.dump();
  for (const auto& t : ts) {
    EXPECT_EQ(t["state"], "COMPLETE") << t.dump();
    EXPECT_DOUBLE_EQ(t["value"].get<double>(), 3.0) << t.dump();
  }
  std::map<int, std::vector<RankLine>> by_trial;
  for (const RankLine& r : read_record(dir_.file("ranks.txt"))) by_trial[r.trial].push_back(r);
  ASSERT_EQ(by_trial.size(), 6u);
  for (const auto& [trial, ranks] : by_trial) {
    ASSERT_EQ(ranks.size(), 2u) << "trial " << trial;
    std::set<int> seen;
    for (const RankLine& r : ranks) {
      seen.insert(r.rank);
      EXPECT_EQ(r.world, 2);
      EXPECT_EQ(r.env_rank, r.rank);
      EXPECT_EQ(r.local_rank, r.rank);  // one host: local ranks are the ranks
      EXPECT_DOUBLE_EQ(r.reduced, 3.0);
    }
    EXPECT_EQ(seen, (std::set<int>{0, 1})) << "trial " << trial;
  }
  // Two trials overlapped: some trial started a rank before another ended.
  bool overlap = false;
  for (const auto& [a, ra] : by_trial)
    for (const auto& [b, rb] : by_trial) {
      if (a >= b) continue;
      for (const RankLine& x : ra)
        for (const RankLine& y : rb) overlap = overlap || (x.start < y.end && y.start < x.end);
    }
  EXPECT_TRUE(overlap) << "no two trials ran at the same time on 4 workers";
}

// Killing the worker of trial 0's rank 1 fails the trial (naming the
// rank), retries it as a whole, and leaves no process of the script.
TEST_F(GangTest, KilledRankWorkerFailsAndRetriesTheWholeTrial) {
  if (!torch_available()) GTEST_SKIP() << "python3-torch is not installed";
  const std::string kill_file = dir_.file("kill-me");
  write_ddp_space("ddpkill", 1, 2, {kill_file});
  std::vector<std::string> argv = {HPSEARCH_CLI_PATH, "run", "space.json", "--workers", "2"};
  testsupport::BackgroundProcess run(argv, dir_.path().string(), dir_.file("run.out"),
                                     dir_.file("run.err"));
  ASSERT_TRUE(testsupport::wait_until([&] { return std::filesystem::exists(kill_file); }))
      << "rank 1 of trial 0 never started";
  std::ifstream in(kill_file);
  pid_t worker = 0;
  in >> worker;
  ASSERT_GT(worker, 1);
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  ProcessResult done = run.wait();
  ASSERT_EQ(done.exit_code, 0) << done.out << done.err;
  const Json ts = trials("ddpkill.db");
  ASSERT_EQ(ts.size(), 2u) << ts.dump();
  EXPECT_EQ(ts[0]["state"], "FAIL");
  EXPECT_NE(ts[0].dump().find("rank 1 of 2"), std::string::npos) << ts[0].dump();
  EXPECT_EQ(ts[1]["state"], "COMPLETE") << ts[1].dump();
  EXPECT_DOUBLE_EQ(ts[1]["value"].get<double>(), 3.0);
  // No process of the script is left (the guard of a killed worker's
  // program and the StopTrial of rank 0 end them).
  std::vector<pid_t> left;
  testsupport::wait_until(
      [&] {
        left = processes_running(dir_.file("ddp_train.py"));
        return left.empty();
      },
      std::chrono::seconds(30));
  EXPECT_TRUE(left.empty()) << left.size() << " processes of the script are left";
  for (pid_t p : left) ::kill(p, SIGKILL);
}

// Sizes 1, 2 and 4 from a param on 4 workers: every trial finishes, each
// rank sees its trial's world size (a single-process trial: no RANK).
TEST_F(GangTest, MixedSizesFromAParamAllFinish) {
  const std::string record = dir_.file("ranks.txt");
  const std::string script = dir_.write(
      "rank.sh",
      "echo \"$HPSEARCH_TRIAL_NUMBER ${RANK:--} ${WORLD_SIZE:--} ${MASTER_PORT:--} $1\" >> " +
          record + "\nsleep 0.3\necho 'hpsearch: {\"value\": 1}'\n");
  const Json space = {
      {"study", {{"name", "mixed"}, {"direction", "minimize"}}},
      {"sampler", {{"type", "grid"}}},
      {"budget", {{"n_trials", 6}}},
      {"resources", {{"processes", {{"param", "nproc"}}}}},
      {"objective", {{"type", "command"}, {"argv", {"/bin/sh", script, "{nproc}"}}}},
      {"space",
       {{"nproc", {{"type", "ordinal"}, {"values", {1, 2, 4}}}},
        {"rep", {{"type", "int"}, {"low", 0}, {"high", 1}}}}}};
  dir_.write("space.json", space.dump());
  ProcessResult run = cli({"run", "space.json", "--workers", "4"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json ts = trials("mixed.db");
  ASSERT_EQ(ts.size(), 6u) << ts.dump();
  std::map<int, int> size_of;
  for (const auto& t : ts) {
    EXPECT_EQ(t["state"], "COMPLETE") << t.dump();
    size_of[t["number"].get<int>()] = t["params"]["nproc"].get<int>();
  }
  std::map<int, std::set<std::string>> ranks;
  std::map<int, int> lines;
  std::ifstream in(record);
  std::string trial, rank, world, port, nproc;
  while (in >> trial >> rank >> world >> port >> nproc) {
    const int n = std::stoi(trial);
    ++lines[n];
    ranks[n].insert(rank);
    if (size_of[n] == 1) {
      EXPECT_EQ(world, "-") << "trial " << n;
    } else {
      EXPECT_EQ(world, std::to_string(size_of[n])) << "trial " << n;
      EXPECT_NE(port, "0");
    }
  }
  std::multiset<int> sizes;
  for (const auto& [n, size] : size_of) {
    sizes.insert(size);
    EXPECT_EQ(lines[n], size) << "trial " << n;
    if (size > 1) {
      EXPECT_EQ(ranks[n].size(), static_cast<std::size_t>(size)) << "trial " << n;
    }
  }
  EXPECT_EQ(sizes, (std::multiset<int>{1, 1, 2, 2, 4, 4}));
}

// A trial bigger than the pool could never start: refused before anything
// runs, naming the field and the option.
TEST_F(GangTest, MoreProcessesThanWorkersIsRefusedAtStart) {
  const Json space = {{"study", {{"name", "big"}, {"direction", "minimize"}}},
                      {"budget", {{"n_trials", 1}}},
                      {"resources", {{"processes", 4}}},
                      {"objective", {{"type", "command"}, {"argv", {"/bin/true"}}}},
                      {"space", {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}}}}}};
  dir_.write("space.json", space.dump());
  ProcessResult run = cli({"run", "space.json", "--workers", "2"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.err.find("resources.processes"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("--workers 2"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("big.db")));
  // validate checks the file alone (it takes no --workers) and says what
  // a run needs.
  ProcessResult valid = cli({"validate", "space.json"});
  EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;
  EXPECT_NE(valid.out.find("Processes per trial: up to 4 (each on its own worker: run with "
                           "--workers 4 or more"),
            std::string::npos)
      << valid.out;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("big.db")));
  // A persistent program cannot get each trial's rank environment.
  Json persistent = space;
  persistent["resources"]["processes"] = 2;
  persistent["objective"]["mode"] = "persistent";
  dir_.write("space.json", persistent.dump());
  ProcessResult refused = cli({"run", "space.json", "--workers", "2"});
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("resources.processes: multi-process trials need a program per trial"),
            std::string::npos)
      << refused.err;
}

// ---- the coordinator's side, with workers that speak the protocol by hand

namespace proto = hps::protocol;
using testsupport::RawWorker;

class GangCoordinator : public ::testing::Test {
 protected:
  Study open_study() {
    StudyOptions o;
    o.sampler = std::make_shared<RandomSampler>(3);
    o.space =
        SearchSpace::from_json(Json::parse(R"({"x": {"type": "float", "low": 0, "high": 1}})"));
    return Study::load_if_exists(open_storage(dir_.file("gang.db")), "gang",
                                 StudyDirection::kMinimize, std::move(o));
  }
  CoordinatorOptions options(int processes) const {
    CoordinatorOptions co;
    co.resources.processes = processes;
    co.n_trials = 1;
    return co;
  }
  // w1 asks alone (a trial of 2 does not start on one worker), then w2:
  // w1 gets rank 0 (the older request). Returns rank 0's assignment.
  proto::Assignment start_two(Coordinator& c, RawWorker& w1, RawWorker& w2) {
    w1.send(proto::RequestTrial{});
    EXPECT_FALSE(w1.await<proto::Assignment>(c, 0.5)) << "a rank started alone";
    w2.send(proto::RequestTrial{});
    auto a0 = w1.await<proto::Assignment>(c);
    EXPECT_TRUE(a0);
    return a0.value_or(proto::Assignment{});
  }
  testsupport::TempDir dir_{"gangc"};
  zmq::context_t ctx_;
};

// Rank 0 is assigned first with no port; a RankReady that is not rank 0's
// (another rank, a rank out of range, a trial not held) is refused; rank
// 0's port reaches rank 1; rank 1's reports and result are not the trial's.
TEST_F(GangCoordinator, RanksRendezvousThroughRankZeroAndOnlyItsResultCounts) {
  Study study = open_study();
  Coordinator c(study, Json{{"type", "external"}}, options(2));
  RawWorker w1(ctx_, c.endpoint(), "w1");
  RawWorker w2(ctx_, c.endpoint(), "w2");
  proto::Assignment a0 = start_two(c, w1, w2);
  EXPECT_EQ(a0.rank, 0);
  EXPECT_EQ(a0.world_size, 2);
  EXPECT_EQ(a0.local_world_size, 2);
  EXPECT_EQ(a0.master_port, 0);
  EXPECT_EQ(a0.lineage, 0);
  const std::int64_t n = a0.number;
  // Not rank 0's: refused, and rank 1 is not assigned.
  w2.send(proto::RankReady{n, 0, "evil", 1});
  w2.send(proto::RankReady{n, 7, "", 0});
  w2.send(proto::RankReady{n + 99, 0, "evil", 1});
  w1.send(proto::RankReady{n, 1, "", 0});
  EXPECT_FALSE(w2.await<proto::Assignment>(c, 0.5));
  EXPECT_EQ(c.stats().rejected_results, 4);
  // Rank 0's port.
  w1.send(proto::RankReady{n, 0, "host", 23456});
  auto a1 = w2.await<proto::Assignment>(c);
  ASSERT_TRUE(a1);
  EXPECT_EQ(a1->number, n);
  EXPECT_EQ(a1->rank, 1);
  EXPECT_EQ(a1->world_size, 2);
  EXPECT_EQ(a1->local_rank, 1);
  EXPECT_EQ(a1->master_addr, "127.0.0.1");  // rank 0 runs on its host
  EXPECT_EQ(a1->master_port, 23456);
  EXPECT_EQ(a1->lineage, -1);  // only rank 0's checkpoint folder is the trial's
  w2.send(proto::RankReady{n, 1, "", 0});
  w2.send(proto::Report{n, 0, 100.0});
  auto d = w2.await<proto::Decision>(c);
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->stored);
  w2.send(proto::Complete{n, false, 100.0, ""});
  w1.send(proto::Report{n, 0, 2.0});
  ASSERT_TRUE(w1.await<proto::Decision>(c));
  w1.send(proto::Complete{n, false, 3.0, ""});
  for (int i = 0; i < 20; ++i) c.step(10);
  auto t = study.storage().get_trial_by_number(study.study_id(), n);
  EXPECT_EQ(t->state, TrialState::kComplete);
  EXPECT_DOUBLE_EQ(t->value.value_or(0), 3.0);
  EXPECT_EQ(t->intermediate_values.size(), 1u);
  EXPECT_DOUBLE_EQ(t->intermediate_values.begin()->second, 2.0);
  EXPECT_TRUE(t->system_attrs.contains("rendezvous_s")) << t->system_attrs.dump();
  EXPECT_EQ(c.stats().rejected_results, 4);  // rank 1's late Complete was not a rejection
}

// A rank whose worker leaves ends the trial on every rank: FAIL naming the
// rank, queued again, and rank 0 is told to stop.
TEST_F(GangCoordinator, ALostRankStopsTheOtherRanksAndTheTrialIsRetried) {
  Study study = open_study();
  Coordinator c(study, Json{{"type", "external"}}, options(2));
  RawWorker w1(ctx_, c.endpoint(), "w1");
  RawWorker w2(ctx_, c.endpoint(), "w2");
  proto::Assignment a0 = start_two(c, w1, w2);
  w1.send(proto::RankReady{a0.number, 0, "host", 23456});
  ASSERT_TRUE(w2.await<proto::Assignment>(c));
  w2.send(proto::Disconnect{proto::Disconnect::Code::kExpired, proto::kProtocolVersion, "killed"});
  auto stop = w1.await<proto::StopTrial>(c);
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->number, a0.number);
  auto t = study.storage().get_trial_by_number(study.study_id(), a0.number);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_NE(t->fail_reason.find("rank 1 of 2"), std::string::npos) << t->fail_reason;
  EXPECT_EQ(study.storage().get_all_trials(study.study_id(), {TrialState::kWaiting}).size(), 1u);
}

// Ranks that do not all start within rendezvous_timeout_s fail the trial,
// naming the rank and its host; the rank that runs is told to stop.
TEST_F(GangCoordinator, ARankThatDoesNotRendezvousFailsTheTrialNamingIt) {
  Study study = open_study();
  CoordinatorOptions co = options(2);
  co.resources.rendezvous_timeout_s = 0.2;
  co.max_retries = 0;
  Coordinator c(study, Json{{"type", "external"}}, co);
  RawWorker w1(ctx_, c.endpoint(), "w1");
  RawWorker w2(ctx_, c.endpoint(), "w2");
  proto::Assignment a0 = start_two(c, w1, w2);
  auto stop = w1.await<proto::StopTrial>(c);  // rank 0 never said RankReady
  ASSERT_TRUE(stop);
  auto t = study.storage().get_trial_by_number(study.study_id(), a0.number);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_NE(t->fail_reason.find("rank 0 on host host did not start within 0.2 s"),
            std::string::npos)
      << t->fail_reason;
}

// A trial bigger than the workers connected waits (all ranks or none),
// saying so once, until enough workers join.
TEST_F(GangCoordinator, ATrialBiggerThanTheConnectedWorkersWaitsForMoreToJoin) {
  Study study = open_study();
  testsupport::CapturedLog log(spdlog::level::warn);
  CoordinatorOptions co = options(2);
  co.status_interval_s = 0.001;  // the status attr at (nearly) every step
  Coordinator c(study, Json{{"type", "external"}}, co);
  RawWorker w1(ctx_, c.endpoint(), "w1");
  w1.send(proto::RequestTrial{});
  EXPECT_FALSE(w1.await<proto::Assignment>(c, 0.5));
  EXPECT_NE(log.text().find("trial 0 needs 2 processes (resources.processes) and 1 worker is "
                            "connected: it waits for more workers to join"),
            std::string::npos)
      << log.text();
  // hpsearch status reads the waiting trial from the coordinator's attr
  // (RUNNING in the store, on no worker yet).
  auto attr = [&] {
    return study.storage().get_study(study.study_id()).system_attrs.at("coordinator");
  };
  EXPECT_EQ(attr()["waiting_for_workers"], Json::parse(R"([{"trial": 0, "processes": 2}])"))
      << attr().dump();
  RawWorker w2(ctx_, c.endpoint(), "w2");
  w2.send(proto::RequestTrial{});
  auto a0 = w1.await<proto::Assignment>(c);
  ASSERT_TRUE(a0);
  EXPECT_EQ(a0->rank, 0);
  EXPECT_EQ(a0->world_size, 2);
  c.step(50);
  // Each worker's rank in the attr; nothing waits any more.
  const Json now = attr();
  EXPECT_FALSE(now.contains("waiting_for_workers")) << now.dump();
  std::map<std::string, Json> ranks;
  for (const Json& w : now["workers"])
    ranks[w["name"].get<std::string>()] = w.value("rank", Json());
  EXPECT_EQ(ranks["w1"], 0) << now.dump();
  EXPECT_EQ(ranks["w2"], 1) << now.dump();
}

// Sizes from a param: the oldest trial that does not fit reserves the
// idle workers; a smaller trial behind it does not take them (no
// starvation), and the big one starts once enough are idle.
TEST_F(GangCoordinator, TheOldestTrialThatDoesNotFitReservesTheIdleWorkers) {
  StudyOptions o;
  o.sampler = std::make_shared<RandomSampler>(3);
  o.space =
      SearchSpace::from_json(Json::parse(R"({"nproc": {"type": "int", "low": 1, "high": 2}})"));
  Study study = Study::load_if_exists(open_storage(dir_.file("sizes.db")), "sizes",
                                      StudyDirection::kMinimize, std::move(o));
  study.enqueue_trial(Params{{"nproc", Json(1)}});  // trial 0
  study.enqueue_trial(Params{{"nproc", Json(2)}});  // trial 1
  study.enqueue_trial(Params{{"nproc", Json(1)}});  // trial 2
  CoordinatorOptions co;
  co.resources.processes_param = "nproc";
  co.n_trials = 3;
  Coordinator c(study, Json{{"type", "external"}}, co);
  RawWorker w1(ctx_, c.endpoint(), "w1");
  RawWorker w2(ctx_, c.endpoint(), "w2");
  auto t0 = w1.request(c);
  ASSERT_TRUE(t0);
  EXPECT_EQ(t0->number, 0);
  EXPECT_EQ(t0->world_size, 1);
  // w2 is idle, but trial 1 (2 ranks) is the oldest waiting: trial 2 (1
  // rank) does not start on w2.
  EXPECT_FALSE(w2.request(c, 0.5));
  w1.send(proto::Complete{0, false, 1.0, ""});
  w1.send(proto::RequestTrial{});
  auto t1 = w2.await<proto::Assignment>(c);  // w2 asked first: rank 0
  ASSERT_TRUE(t1);
  EXPECT_EQ(t1->number, 1);
  EXPECT_EQ(t1->rank, 0);
  EXPECT_EQ(t1->world_size, 2);
  w2.send(proto::RankReady{1, 0, "host", 23456});
  auto r1 = w1.await<proto::Assignment>(c);
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->number, 1);
  EXPECT_EQ(r1->rank, 1);
}

// Rank 0 pruned (or done) first: the other rank is told to stop, and its
// result that crossed the StopTrial is dropped quietly.
TEST_F(GangCoordinator, RankZeroEndingFirstStopsTheOtherRanks) {
  Study study = open_study();
  Coordinator c(study, Json{{"type", "external"}}, options(2));
  RawWorker w1(ctx_, c.endpoint(), "w1");
  RawWorker w2(ctx_, c.endpoint(), "w2");
  proto::Assignment a0 = start_two(c, w1, w2);
  w1.send(proto::RankReady{a0.number, 0, "host", 23456});
  ASSERT_TRUE(w2.await<proto::Assignment>(c));
  w1.send(proto::Report{a0.number, 0, 5.0});
  ASSERT_TRUE(w1.await<proto::Decision>(c));
  w1.send(proto::Complete{a0.number, true, std::nullopt, ""});
  auto stop = w2.await<proto::StopTrial>(c);
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->number, a0.number);
  w2.send(proto::Complete{a0.number, false, 1.0, ""});
  for (int i = 0; i < 20; ++i) c.step(10);
  auto t = study.storage().get_trial_by_number(study.study_id(), a0.number);
  EXPECT_EQ(t->state, TrialState::kPruned);
  EXPECT_EQ(c.stats().rejected_results, 0);
}

// A rank other than 0 whose program fails fails the trial, as torchrun's
// group does: rank 0 is stopped (not left waiting in a collective for the
// rank that is gone), and the FAIL names the rank, its host and its error.
TEST_F(GangCoordinator, AnotherRanksFailureFailsTheTrialAndStopsRankZero) {
  Study study = open_study();
  Coordinator c(study, Json{{"type", "external"}}, options(2));
  RawWorker w1(ctx_, c.endpoint(), "w1");
  RawWorker w2(ctx_, c.endpoint(), "w2");
  proto::Assignment a0 = start_two(c, w1, w2);
  w1.send(proto::RankReady{a0.number, 0, "host", 23456});
  ASSERT_TRUE(w2.await<proto::Assignment>(c));
  w2.send(proto::RankReady{a0.number, 1, "", 0});
  w2.send(proto::Fail{a0.number, proto::Fail::Reason::kException, "CUDA out of memory", ""});
  auto stop = w1.await<proto::StopTrial>(c);
  ASSERT_TRUE(stop) << "rank 0 was left running";
  EXPECT_EQ(stop->number, a0.number);
  // Rank 0's end, after the stop (a program that exited meanwhile), is
  // dropped quietly.
  w1.send(proto::Complete{a0.number, false, 1.0, ""});
  for (int i = 0; i < 20; ++i) c.step(10);
  auto t = study.storage().get_trial_by_number(study.study_id(), a0.number);
  EXPECT_EQ(t->state, TrialState::kFail);
  EXPECT_NE(t->fail_reason.find("rank 1 on host"), std::string::npos) << t->fail_reason;
  EXPECT_NE(t->fail_reason.find("CUDA out of memory"), std::string::npos) << t->fail_reason;
  EXPECT_EQ(c.stats().rejected_results, 0);
  // Not retried: a program's failure is no lost worker.
  EXPECT_EQ(study.storage().count_trials(study.study_id(), {TrialState::kWaiting}), 0);
}

}  // namespace
}  // namespace hps
