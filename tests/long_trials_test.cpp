// Tests of long trials through the hpsearch executable (search/checkpoints.h;
// docs "Long trials"): a Python program that checkpoints each epoch into
// HPSEARCH_CHECKPOINT_DIR is lost mid-trial (kill -9 of its worker, kill -9
// of the coordinator then resume, Ctrl-C then resume) and its retry
// continues from the last reported epoch with the whole learning curve; a
// program that lingers after its final value keeps it; retention keeps the
// folders it documents.
//
// HPSEARCH_TEST_CLI=/path/to/hpsearch runs them against another build.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "search/checkpoints.h"
#include "search/json_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using testsupport::BackgroundProcess;
using testsupport::ProcessResult;
using testsupport::read_file;
using testsupport::TempDir;
using testsupport::wait_until;

std::string cli_path() {
  const char* other = std::getenv("HPSEARCH_TEST_CLI");
  return other && *other ? other : HPSEARCH_CLI_PATH;
}

// The training program: `epochs` epochs of `delay` seconds; its state
// (epoch, loss) saved to the checkpoint folder before each report, as the
// docs ask. Appends "<trial> <epoch>" to epochs.log when an epoch's training
// is done (an epoch cut short by a kill is not counted)
// and "<worker pid> <resume step>" to starts.log at its start. The loss is
// x * 0.9^epoch, so an interrupted and resumed trial ends with the same
// value bit for bit.
constexpr const char* kTrainPy = R"(import json, os, sys, time
ck = os.environ["HPSEARCH_CHECKPOINT_DIR"]
assert sys.argv[1] == ck, (sys.argv[1], ck)
epochs, delay = int(sys.argv[2]), float(sys.argv[3])
x = json.loads(os.environ["HPSEARCH_PARAMS"])["x"]
trial = os.environ["HPSEARCH_TRIAL_NUMBER"]
resume = os.environ.get("HPSEARCH_RESUME_STEP")
with open("starts.log", "a") as f:
    f.write("%d %s %s\n" % (os.getppid(), trial, resume))
start, loss = 1, x
if resume is not None:
    with open(os.path.join(ck, "state.json")) as f:
        st = json.load(f)
    assert st["epoch"] == int(resume), (st, resume)
    start, loss = st["epoch"] + 1, st["loss"]
for epoch in range(start, epochs + 1):
    time.sleep(delay)
    loss = loss * 0.9
    with open("epochs.log", "a") as f:
        f.write("%s %d\n" % (trial, epoch))
    tmp = os.path.join(ck, "state.tmp")
    with open(tmp, "w") as f:
        json.dump({"epoch": epoch, "loss": loss}, f)
    os.replace(tmp, os.path.join(ck, "state.json"))
    print("hpsearch: " + json.dumps({"step": epoch, "value": loss}), flush=True)
print("hpsearch: " + json.dumps({"value": loss}), flush=True)
)";

std::string train_space(int n_trials, int epochs, double delay, const Json& artifacts = Json()) {
  Json doc = {{"study", {{"name", "long"}, {"direction", "minimize"}, {"storage", "long.db"}}},
              {"sampler", {{"type", "random"}, {"seed", 5}}},
              {"budget", {{"n_trials", n_trials}}},
              {"objective",
               {{"type", "command"},
                {"argv",
                 {"/usr/bin/python3", "train.py", "{checkpoint_dir}", std::to_string(epochs),
                  std::to_string(delay)}},
                {"grace_s", 2}}},
              {"space", {{"x", {{"type", "float"}, {"low", 1}, {"high", 2}}}}}};
  if (!artifacts.is_null()) doc["artifacts"] = artifacts;
  return doc.dump();
}

std::vector<std::vector<std::string>> lines_of(const std::string& path) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<std::string> w;
    std::string s;
    while (words >> s) w.push_back(s);
    if (!w.empty()) out.push_back(w);
  }
  return out;
}

class LongTrialsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_.write("train.py", kTrainPy); }
  ProcessResult cli(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {cli_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  }
  std::unique_ptr<BackgroundProcess> cli_background(const std::vector<std::string>& args,
                                                    const std::string& label) const {
    std::vector<std::string> argv = {cli_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<BackgroundProcess>(
        argv, dir_.path().string(), dir_.file(label + ".out"), dir_.file(label + ".err"));
  }
  Json trials() const {
    ProcessResult r = cli({"trials", "long.db", "--format", "json"});
    if (r.exit_code != 0) return Json();
    Json j = Json::parse(r.out, nullptr, false);
    return j.is_array() ? j : Json();
  }
  // Epochs trained so far (lines of epochs.log).
  std::size_t epochs_trained() const { return lines_of(dir_.file("epochs.log")).size(); }
  // Waits until `n` epochs were trained; then the test interrupts the run.
  void wait_for_epochs(std::size_t n) const {
    ASSERT_TRUE(wait_until([&] { return epochs_trained() >= n; })) << "no progress";
  }

  // The checks after one trial of `epochs` epochs was interrupted once and
  // continued: trial 0 FAIL, its retry COMPLETE resumed from trial 0 with
  // the value of an uninterrupted run, steps 1..epochs whole, and at most
  // epochs + 1 epochs trained in all.
  void expect_resumed_once(int epochs) const { expect_resumed_once(epochs, dir_.path()); }
  // The same, with the program's epochs.log and starts.log in `logs` (the
  // workers' folder).
  void expect_resumed_once(int epochs, const fs::path& logs) const {
    Json t = trials();
    ASSERT_TRUE(t.is_array());
    ASSERT_EQ(t.size(), 2u) << t.dump(1);
    EXPECT_EQ(t[0]["state"], "FAIL");
    EXPECT_EQ(t[0]["system_attrs"]["retried_as"], 1);
    // Its snapshot was replaced by its retry's: the store says so.
    EXPECT_EQ(t[0]["system_attrs"]["checkpoint"].value("deleted", false), true) << t[0].dump(1);
    const Json& r = t[1];
    ASSERT_EQ(r["state"], "COMPLETE") << r.dump(1);
    const Json& from = r["system_attrs"]["resumed_from"];
    ASSERT_TRUE(from.is_object()) << r.dump(1);
    EXPECT_EQ(from["trial"], 0);
    EXPECT_EQ(from["restored"], true) << r.dump(1);
    const std::int64_t k = from["step"].get<std::int64_t>();
    EXPECT_GE(k, 1);
    EXPECT_LT(k, epochs);
    EXPECT_EQ(r["system_attrs"]["lineage"], 0);
    // The value of an uninterrupted run, bit for bit.
    double expected = r["params"]["x"].get<double>();
    for (int e = 0; e < epochs; ++e) expected *= 0.9;
    EXPECT_EQ(r["value"].get<double>(), expected);
    // One whole curve: steps 1..epochs, each the uninterrupted run's value.
    const Json& iv = r["intermediate_values"];
    ASSERT_EQ(iv.size(), static_cast<std::size_t>(epochs)) << iv.dump();
    double v = r["params"]["x"].get<double>();
    for (int e = 1; e <= epochs; ++e) {
      v *= 0.9;
      EXPECT_EQ(iv[std::to_string(e)].get<double>(), v) << "step " << e;
    }
    // The retry trained only the epochs after k; at most one epoch was
    // trained twice: the one after k, when the run was lost after it was
    // reported but before its snapshot was recorded (a remote worker's
    // upload in progress).
    std::map<std::string, int> per_trial;
    for (const auto& l : lines_of((logs / "epochs.log").string())) ++per_trial[l.at(0)];
    EXPECT_EQ(per_trial["1"], epochs - k);
    EXPECT_LE(per_trial["0"] + per_trial["1"], epochs + 1)
        << read_file((logs / "epochs.log").string());
    // The retry started from HPSEARCH_RESUME_STEP=k; the first run had none.
    auto starts = lines_of((logs / "starts.log").string());
    ASSERT_GE(starts.size(), 2u);
    EXPECT_EQ(starts.front().at(2), "None");
    EXPECT_EQ(starts.back().at(1), "1");
    EXPECT_EQ(starts.back().at(2), std::to_string(k));
  }

  TempDir dir_{"long_trials"};
};

TEST_F(LongTrialsTest, AWorkerKilledMidTrialIsContinuedFromItsCheckpoint) {
  dir_.write("space.json", train_space(1, 10, 0.4));
  auto run = cli_background({"run", "space.json", "--workers", "1"}, "run");
  wait_for_epochs(5);
  auto starts = lines_of(dir_.file("starts.log"));
  ASSERT_FALSE(starts.empty());
  const pid_t worker = static_cast<pid_t>(std::stol(starts.front().at(0)));
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  ProcessResult r = run->wait();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_resumed_once(10);
}

TEST_F(LongTrialsTest, ACoordinatorKilledThenResumedContinuesTheTrial) {
  dir_.write("space.json", train_space(1, 10, 0.4));
  {
    auto run = cli_background({"run", "space.json", "--workers", "1"}, "run1");
    wait_for_epochs(5);
    run->send_signal(SIGKILL);
    run->wait();
  }
  // Its worker and program end with it (PR_SET_PDEATHSIG); wait for them.
  ASSERT_TRUE(wait_until([&] {
    auto n = epochs_trained();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return epochs_trained() == n;
  }));
  ProcessResult again = cli({"resume", "long.db"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  expect_resumed_once(10);
}

TEST_F(LongTrialsTest, CtrlCThenResumeContinuesTheTrial) {
  dir_.write("space.json", train_space(1, 10, 0.4));
  {
    auto run = cli_background({"run", "space.json", "--workers", "1"}, "run1");
    wait_for_epochs(5);
    run->send_signal(SIGINT);
    ProcessResult r = run->wait();
    EXPECT_NE(r.exit_code, 0);
  }
  ProcessResult again = cli({"run", "space.json", "--workers", "1"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  expect_resumed_once(10);
}

// A snapshot damaged while the study was stopped: the retry trains from
// step 0, its curve is its own run's (nothing carried from the first run),
// and the store says the restore failed and why.
TEST_F(LongTrialsTest, ADamagedSnapshotMakesTheRetryStartFromScratchWithItsOwnCurve) {
  dir_.write("space.json", train_space(1, 6, 0.4));
  {
    auto run = cli_background({"run", "space.json", "--workers", "1"}, "run1");
    wait_for_epochs(3);
    run->send_signal(SIGINT);
    run->wait();
  }
  const fs::path lineage = dir_.path() / "long.logs" / "checkpoints" / "lineage-0";
  std::vector<fs::path> snapshots;
  for (const auto& e : fs::directory_iterator(lineage))
    if (e.is_directory() && e.path().filename().string().rfind("snapshot-", 0) == 0)
      snapshots.push_back(e.path());
  // Usually one; two when the interrupt came between taking step S's
  // snapshot and removing step S-1's. Damage each, so whichever step the
  // store names cannot be restored.
  ASSERT_FALSE(snapshots.empty());
  for (const auto& s : snapshots) fs::resize_file(s / "state.json", 3);  // truncated
  ProcessResult again = cli({"run", "space.json", "--workers", "1"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  Json t = trials();
  ASSERT_EQ(t.size(), 2u) << t.dump(1);
  const Json& r = t[1];
  ASSERT_EQ(r["state"], "COMPLETE") << r.dump(1);
  const Json& from = r["system_attrs"]["resumed_from"];
  EXPECT_EQ(from["restored"], false) << r.dump(1);
  EXPECT_NE(from["warning"].get<std::string>().find("state.json"), std::string::npos)
      << from.dump();
  EXPECT_NE(r["user_attrs"].value("checkpoint_warning", "").find("state.json"), std::string::npos)
      << r.dump(1);
  // Its own run from epoch 1: 6 epochs trained by trial 1, each step its own.
  std::map<std::string, int> per_trial;
  for (const auto& l : lines_of(dir_.file("epochs.log"))) ++per_trial[l.at(0)];
  EXPECT_EQ(per_trial["1"], 6);
  EXPECT_EQ(lines_of(dir_.file("starts.log")).back().at(2), "None");
  ASSERT_EQ(r["intermediate_values"].size(), 6u) << r.dump(1);
  double v = r["params"]["x"].get<double>();
  for (int e = 1; e <= 6; ++e) {
    v *= 0.9;
    EXPECT_EQ(r["intermediate_values"][std::to_string(e)].get<double>(), v) << "step " << e;
  }
}

TEST_F(LongTrialsTest, AProgramThatLingersAfterItsFinalValueKeepsIt) {
  // Prints its final value, then never exits (a data loader's workers, a
  // logging thread, a hung distributed shutdown).
  Json doc = Json::parse(train_space(1, 1, 0.0));
  doc["objective"]["argv"] = {"/bin/sh", "-c",
                              "echo 'hpsearch: {{\"value\": 0.25}}'; exec sleep 600"};
  doc["objective"]["grace_s"] = 1;
  dir_.write("space.json", doc.dump());
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = cli({"run", "space.json", "--workers", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(300));
  Json t = trials();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0]["state"], "COMPLETE") << t.dump(1);
  EXPECT_EQ(t[0]["value"], 0.25);
  EXPECT_NE(read_file(dir_.file("long.logs/trial-0.log")).find("still runs"), std::string::npos);
}

// The same program's worker stopped (SIGTERM: a preempted Slurm task, a
// pool that stops) while the program lingers: the value printed is kept,
// the trial is COMPLETE and not run again.
TEST_F(LongTrialsTest, AWorkerStoppedWhileItsProgramLingersKeepsTheValue) {
  Json doc = Json::parse(train_space(1, 1, 0.0));
  const std::string pid_file = dir_.file("worker.pid");
  doc["objective"]["argv"] = {
      "/bin/sh", "-c",
      "echo 'hpsearch: {{\"value\": 0.25}}'; echo $PPID > " + pid_file + "; exec sleep 600"};
  doc["objective"]["grace_s"] = 60;  // it would linger a minute
  dir_.write("space.json", doc.dump());
  auto run = cli_background({"run", "space.json", "--workers", "1"}, "run");
  ASSERT_TRUE(wait_until([&] { return !lines_of(pid_file).empty(); })) << "program never started";
  const pid_t worker = static_cast<pid_t>(std::stol(lines_of(pid_file).front().at(0)));
  ASSERT_EQ(::kill(worker, SIGTERM), 0);
  ProcessResult r = run->wait();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  Json t = trials();
  ASSERT_EQ(t.size(), 1u) << t.dump(1);
  EXPECT_EQ(t[0]["state"], "COMPLETE") << t.dump(1);
  EXPECT_EQ(t[0]["value"], 0.25);
  EXPECT_NE(read_file(dir_.file("long.logs/trial-0.log")).find("keeps its value"),
            std::string::npos);
}

TEST_F(LongTrialsTest, RetentionKeepsTheBestKAndTheStoreNamesNoRemovedFolder) {
  dir_.write("space.json", train_space(4, 2, 0.0, Json{{"keep_best", 2}}));
  ProcessResult r = cli({"run", "space.json", "--workers", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  Json t = trials();
  ASSERT_EQ(t.size(), 4u);
  std::vector<std::pair<double, int>> by_value;
  for (const auto& trial : t) {
    ASSERT_EQ(trial["state"], "COMPLETE");
    by_value.emplace_back(trial["value"].get<double>(), trial["number"].get<int>());
  }
  std::sort(by_value.begin(), by_value.end());
  const std::string root = dir_.file("long.logs/checkpoints");
  for (std::size_t i = 0; i < by_value.size(); ++i) {
    const int n = by_value[i].second;
    const Json& attr = t[static_cast<std::size_t>(n)]["system_attrs"]["checkpoint"];
    ASSERT_TRUE(attr.is_object()) << t.dump(1);
    EXPECT_EQ(attr["step"], 2);
    const bool kept = i < 2;
    EXPECT_EQ(fs::exists(checkpoints::lineage_path(root, n)), kept) << "trial " << n;
    EXPECT_EQ(attr.value("deleted", false), !kept) << "trial " << n;
    if (kept) {
      const std::string state =
          read_file(checkpoints::lineage_path(root, n) + "/snapshot-2/state.json");
      EXPECT_NE(state.find("\"epoch\": 2"), std::string::npos) << state;
    }
  }
}

// Snapshots that travel: a coordinator and two `hpsearch worker` processes
// in different folders (different checkpoint roots, so no shared folder:
// neither root holds the coordinator's .store-id token). Worker A runs the
// trial and uploads each epoch's snapshot; it is killed mid-trial; worker B
// gets the retry, downloads the snapshot from the coordinator and continues.
// Then `hpsearch artifacts` lists the kept snapshot and `artifacts get`
// copies it.
TEST_F(LongTrialsTest, ARemoteWorkerRetryDownloadsTheSnapshotAndContinues) {
  dir_.write("space.json", train_space(1, 10, 0.4));
  const std::string endpoint = "ipc://" + dir_.file("sock");
  auto run = cli_background({"run", "space.json", "--workers", "0", "--bind", endpoint}, "run");
  auto worker_a = cli_background(
      {"worker", "--connect", endpoint, "--log-dir", dir_.file("A"), "--allow-command"}, "a");
  wait_for_epochs(5);
  // The store names a snapshot that the coordinator holds (uploaded).
  ASSERT_TRUE(wait_until([&] {
    Json t = trials();
    return t.is_array() && !t.empty() && t[0]["system_attrs"].contains("checkpoint");
  }));
  const std::string root = dir_.file("long.logs/checkpoints");
  const std::string token = checkpoints::read_store_id(root);
  ASSERT_EQ(token.size(), 32u);
  EXPECT_NE(checkpoints::read_store_id(dir_.file("A/checkpoints")), token);
  worker_a->send_signal(SIGKILL);
  worker_a->wait();
  auto worker_b = cli_background(
      {"worker", "--connect", endpoint, "--log-dir", dir_.file("B"), "--allow-command"}, "b");
  ProcessResult r = run->wait();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << read_file(dir_.file("b.err"));
  worker_b->wait();
  expect_resumed_once(10);
  // The two runs were the two workers' (the program's parent).
  auto starts = lines_of(dir_.file("starts.log"));
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0].at(0), std::to_string(worker_a->pid()));
  EXPECT_EQ(starts[1].at(0), std::to_string(worker_b->pid()));
  // B restored the snapshot it downloaded into its own root and, the trial
  // over, removed its copy (the coordinator keeps what retention keeps:
  // the last one B uploaded, the retry's step 10). A, killed mid-trial,
  // kept its own.
  const Json t = trials();
  EXPECT_FALSE(fs::exists(dir_.file("B/checkpoints/lineage-0")));
  EXPECT_TRUE(fs::exists(dir_.file("A/checkpoints/lineage-0")));
  EXPECT_EQ(t[1]["system_attrs"]["checkpoint"], Json({{"step", 10}}));
  EXPECT_FALSE(t[1]["user_attrs"].contains("checkpoint_warning")) << t[1].dump(1);
  const std::string state = read_file(root + "/lineage-0/snapshot-10/state.json");
  EXPECT_NE(state.find("\"epoch\": 10"), std::string::npos) << state;

  // hpsearch artifacts: each trial's lineage, step, folder and size.
  ProcessResult list = cli({"artifacts", "long.db", "--format", "json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  Json rows = Json::parse(list.out);
  ASSERT_EQ(rows.size(), 2u) << list.out;
  EXPECT_EQ(rows[1]["trial"], 1);
  EXPECT_EQ(rows[1]["lineage"], 0);
  EXPECT_EQ(rows[1]["checkpoint_step"], 10);
  EXPECT_EQ(rows[1]["folder_exists"], true);
  EXPECT_EQ(rows[1]["snapshot_exists"], true);
  EXPECT_GT(rows[1]["bytes"].get<std::uint64_t>(), 0u);
  ProcessResult table = cli({"artifacts", "long.db", "--trial", "1"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("lineage"), std::string::npos) << table.out;
  // hpsearch artifacts get: the newest snapshot, copied.
  ProcessResult get = cli({"artifacts", "get", "long.db", "--trial", "1", "-o", "out"});
  ASSERT_EQ(get.exit_code, 0) << get.out << get.err;
  EXPECT_EQ(read_file(dir_.file("out/state.json")), state);
  ProcessResult again = cli({"artifacts", "get", "long.db", "--trial", "1", "-o", "out"});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("not an empty folder"), std::string::npos) << again.err;
  // The killed trial's snapshot was replaced by its retry's: named.
  ProcessResult first = cli({"artifacts", "get", "long.db", "--trial", "0", "-o", "out0"});
  EXPECT_NE(first.exit_code, 0);
  EXPECT_NE(first.err.find("trial 0 has no snapshot of its own: a retry continued its lineage 0 "
                           "and replaced it; trial 1 holds the lineage's newest snapshot (step "
                           "10): --trial 1"),
            std::string::npos)
      << first.err;
  ProcessResult absent = cli({"artifacts", "get", "long.db", "--trial", "7", "-o", "out7"});
  EXPECT_NE(absent.err.find("--trial: no trial 7 in the study (trials are numbered 0 to 1)"),
            std::string::npos)
      << absent.err;
  // Never into the study's own folders (it would change the snapshot it
  // copies), nor through a link.
  ProcessResult inside = cli(
      {"artifacts", "get", "long.db", "--trial", "1", "-o", root + "/lineage-0/snapshot-10/copy"});
  EXPECT_NE(inside.exit_code, 0);
  EXPECT_NE(inside.err.find("lies inside the study's folder"), std::string::npos) << inside.err;
  EXPECT_FALSE(fs::exists(root + "/lineage-0/snapshot-10/copy"));
  fs::create_directory_symlink(root, dir_.file("link"));
  ProcessResult linked = cli({"artifacts", "get", "long.db", "--trial", "1", "-o", "link"});
  EXPECT_NE(linked.err.find("-o: link is a symbolic link: refused"), std::string::npos)
      << linked.err;
  EXPECT_EQ(read_file(root + "/lineage-0/snapshot-10/state.json"), state);
}

// The strictest remote worker: workers that run as another user (nobody)
// and join over tcp with CURVE keys (hpsearch keys), each with its own
// --log-dir. They cannot even read the coordinator's folders (owner-only,
// root's), so every snapshot travels over the authenticated connection.
// Worker A is killed mid-trial; worker B's retry downloads the snapshot and
// continues; the coordinator's copy is root's and owner-only.
// A remote worker's own root holding a valid-looking snapshot of the same
// lineage and step (left by an earlier run, another study or store) never
// stands in for the coordinator's: the retry downloads the snapshot the
// store names and ends with the value of an uninterrupted run.
TEST_F(LongTrialsTest, AStaleCopyInARemoteWorkersOwnRootIsNeverUsed) {
  dir_.write("space.json", train_space(1, 10, 0.4));
  const std::string endpoint = "ipc://" + dir_.file("sock");
  auto run = cli_background({"run", "space.json", "--workers", "0", "--bind", endpoint}, "run");
  auto worker_a = cli_background(
      {"worker", "--connect", endpoint, "--log-dir", dir_.file("A"), "--allow-command"}, "a");
  wait_for_epochs(5);
  ASSERT_TRUE(wait_until([&] {
    Json t = trials();
    return t.is_array() && !t.empty() && t[0]["system_attrs"].contains("checkpoint");
  }));
  worker_a->send_signal(SIGKILL);
  worker_a->wait();
  // A's copy of lineage 0, replaced by a consistent snapshot of the step
  // the store names, holding another state (as another study's would).
  const std::int64_t step = trials()[0]["system_attrs"]["checkpoint"]["step"].get<std::int64_t>();
  fs::remove_all(dir_.file("A/checkpoints/lineage-0"));
  {
    checkpoints::LineageFolder stale(dir_.file("A/checkpoints"), 0);
    stale.prepare(std::nullopt);
    std::ofstream(fs::path(stale.work_dir()) / "state.json")
        << "{\"epoch\": " << step << ", \"loss\": 12345.0}";
    ASSERT_TRUE(stale.snapshot(step).taken);
  }
  auto worker_again = cli_background(
      {"worker", "--connect", endpoint, "--log-dir", dir_.file("A"), "--allow-command"}, "a2");
  ProcessResult r = run->wait();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << read_file(dir_.file("a2.err"));
  worker_again->wait();
  expect_resumed_once(10);
  EXPECT_NE(read_file(dir_.file("a2.err")).find("downloading the snapshot"), std::string::npos);
}

TEST_F(LongTrialsTest, AWorkerOfAnotherUserOverTcpWithKeysDownloadsTheSnapshot) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot start a worker as another user";
  const struct passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  dir_.write("space.json", train_space(1, 8, 0.4));
  ProcessResult keys = cli({"keys", "init", "keys", "--workers", "2"});
  ASSERT_EQ(keys.exit_code, 0) << keys.err;
  // The workers' folder, nobody's: the program, the workers' keys, logs.
  const fs::path home = dir_.path() / "nobody";
  fs::create_directories(home);
  fs::copy_file(dir_.path() / "train.py", home / "train.py");
  for (const char* w : {"worker-1", "worker-2"})
    fs::copy(dir_.path() / "keys" / w, home / w, fs::copy_options::recursive);
  for (const auto& e : fs::recursive_directory_iterator(home))
    ASSERT_EQ(::lchown(e.path().c_str(), nobody->pw_uid, nobody->pw_gid), 0) << e.path();
  ASSERT_EQ(::chown(home.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);  // nobody may pass, not list or read

  auto run = cli_background(
      {"run", "space.json", "--workers", "0", "--bind", "tcp://127.0.0.1:*", "--keys", "keys"},
      "run");
  std::string endpoint;
  ASSERT_TRUE(wait_until([&] {
    const std::string err = read_file(dir_.file("run.err"));
    const std::size_t at = err.find("CURVE on tcp://127.0.0.1:");
    if (at == std::string::npos) return false;
    endpoint = err.substr(at + 9, err.find_first_of(" \n", at + 9) - (at + 9));
    return true;
  })) << read_file(dir_.file("run.err"));
  auto worker_as_nobody = [&](const std::string& name) {
    std::vector<std::string> argv = {"/usr/bin/setpriv",
                                     "--reuid=" + std::to_string(nobody->pw_uid),
                                     "--regid=" + std::to_string(nobody->pw_gid),
                                     "--clear-groups",
                                     "--",
                                     cli_path(),
                                     "worker",
                                     "--connect",
                                     endpoint,
                                     "--keys",
                                     name,
                                     "--log-dir",
                                     (home / ("logs-" + name)).string(),
                                     "--allow-command"};
    return std::make_unique<BackgroundProcess>(argv, home.string(), dir_.file(name + ".out"),
                                               dir_.file(name + ".err"));
  };
  auto worker_a = worker_as_nobody("worker-1");
  ASSERT_TRUE(wait_until([&] { return lines_of((home / "epochs.log").string()).size() >= 4; }))
      << read_file(dir_.file("worker-1.err"));
  ASSERT_TRUE(wait_until([&] {
    Json t = trials();
    return t.is_array() && !t.empty() && t[0]["system_attrs"].contains("checkpoint");
  }));
  worker_a->send_signal(SIGKILL);
  worker_a->wait();
  auto worker_b = worker_as_nobody("worker-2");
  ProcessResult r = run->wait();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << read_file(dir_.file("worker-2.err"));
  worker_b->wait();
  expect_resumed_once(8, home);
  const std::string b_log = read_file(dir_.file("worker-2.err"));
  EXPECT_NE(b_log.find("downloading the snapshot"), std::string::npos) << b_log;
  // The coordinator's copy of the lineage is root's and owner-only.
  struct stat st {};
  ASSERT_EQ(::stat(dir_.file("long.logs/checkpoints/lineage-0").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 077, 0u);
}

// "artifacts": {"path": ...}: a folder both workers reach (here, beside the
// store) holds the lineages, though their --log-dir differ: A's snapshots
// are written there in place, B continues from them, nothing is uploaded
// or downloaded, and `hpsearch artifacts` looks there.
TEST_F(LongTrialsTest, ASharedArtifactsPathIsUsedInPlaceByEveryWorker) {
  dir_.write("space.json", train_space(1, 10, 0.4, Json{{"path", "shared"}}));
  const std::string endpoint = "ipc://" + dir_.file("sock");
  auto run = cli_background({"run", "space.json", "--workers", "0", "--bind", endpoint}, "run");
  auto worker_a = cli_background(
      {"worker", "--connect", endpoint, "--log-dir", dir_.file("A"), "--allow-command"}, "a");
  wait_for_epochs(5);
  ASSERT_TRUE(wait_until([&] {
    Json t = trials();
    return t.is_array() && !t.empty() && t[0]["system_attrs"].contains("checkpoint");
  }));
  worker_a->send_signal(SIGKILL);
  worker_a->wait();
  auto worker_b = cli_background(
      {"worker", "--connect", endpoint, "--log-dir", dir_.file("B"), "--allow-command"}, "b");
  ProcessResult r = run->wait();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << read_file(dir_.file("b.err"));
  worker_b->wait();
  expect_resumed_once(10);
  EXPECT_EQ(checkpoints::read_store_id(dir_.file("shared")).size(), 32u);
  EXPECT_TRUE(fs::exists(dir_.file("shared/lineage-0/snapshot-10/state.json")));
  // Neither worker kept a copy of its own, and none travelled.
  EXPECT_FALSE(fs::exists(dir_.file("A/checkpoints/lineage-0")));
  EXPECT_FALSE(fs::exists(dir_.file("B/checkpoints/lineage-0")));
  EXPECT_EQ(read_file(dir_.file("b.err")).find("downloading"), std::string::npos);
  ProcessResult get = cli({"artifacts", "get", "long.db", "--trial", "1", "-o", "out"});
  ASSERT_EQ(get.exit_code, 0) << get.out << get.err;
  EXPECT_NE(read_file(dir_.file("out/state.json")).find("\"epoch\": 10"), std::string::npos);
}

}  // namespace
}  // namespace hps
