// workers/slurm_launcher.h without a cluster: argument splitting, the
// worker's view of its Slurm task, and the clear refusal where Slurm is
// missing. tests/slurm_cluster_test.sh runs the launcher on a real
// one-node Slurm cluster.
#include "workers/slurm_launcher.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "protocol/curve_keys.h"
#include "search/errors.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace hps {
namespace {

// Sets an environment variable for one scope, and restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(SlurmLauncher, SplitsSlurmArgsAsAShellDoes) {
  EXPECT_EQ(split_shell_words("--partition=gpu  --gpus-per-task=1", "--slurm-args"),
            (std::vector<std::string>{"--partition=gpu", "--gpus-per-task=1"}));
  EXPECT_EQ(split_shell_words("--comment 'two words' --x=\"a b\"", "--slurm-args"),
            (std::vector<std::string>{"--comment", "two words", "--x=a b"}));
  EXPECT_TRUE(split_shell_words("", "--slurm-args").empty());
}

TEST(SlurmLauncher, RefusesCommandSubstitutionAndBadQuotesNamingTheOption) {
  for (const char* bad :
       {"--comment=$(rm -rf x)", "--comment=`id`", "--x='unterminated", "--x=a;b"}) {
    try {
      (void)split_shell_words(bad, "--slurm-args");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--slurm-args"), std::string::npos) << e.what();
    }
  }
}

TEST(SlurmLauncher, TaskNamesItselfFromSlurmsEnvironment) {
  ScopedEnv procid("SLURM_PROCID", "2");
  ScopedEnv node("SLURMD_NODENAME", "gpu07");
  ScopedEnv job("SLURM_JOB_ID", "4711");
  ScopedEnv step("SLURM_STEP_ID", "0");
  ScopedEnv cpus("SLURM_CPUS_PER_TASK", "8");
  SlurmTask t = slurm_task_from_env();
  EXPECT_EQ(t.procid, 2);
  EXPECT_EQ(t.cpus_per_task, 8);
  EXPECT_EQ(slurm_task_worker_id(t), "gpu07:job4711.0:task2");
}

TEST(SlurmLauncher, OutsideATaskThereIsNoProcid) {
  ScopedEnv procid("SLURM_PROCID", nullptr);
  EXPECT_EQ(slurm_task_from_env().procid, -1);
  ScopedEnv bad("SLURM_PROCID", "x1");
  EXPECT_EQ(slurm_task_from_env().procid, -1);
}

TEST(SlurmLauncher, AutoDeviceFollowsCudaVisibleDevices) {
  {
    ScopedEnv v("CUDA_VISIBLE_DEVICES", "3");
    EXPECT_EQ(auto_device(), "cuda:0");
  }
  {
    ScopedEnv v("CUDA_VISIBLE_DEVICES", "2,5");  // --gpus-per-task=2: both GPUs
    EXPECT_EQ(auto_device(), "cuda");
  }
  {
    ScopedEnv v("CUDA_VISIBLE_DEVICES", "");
    EXPECT_EQ(auto_device(), "cpu");
  }
  {
    ScopedEnv v("CUDA_VISIBLE_DEVICES", nullptr);
    EXPECT_EQ(auto_device(), "cpu");
  }
}

TEST(SlurmLauncher, WithoutSrunInPathTheLauncherSaysSo) {
  testsupport::TempDir dir("slurm-path");
  ScopedEnv path("PATH", dir.path().c_str());
  EXPECT_EQ(find_in_path("srun"), "");
  SlurmLauncherOptions o;
  o.workers = 2;
  o.endpoint = "tcp://host:5555";
  try {
    SlurmLauncher launcher(o);
    ADD_FAILURE() << "a launcher without srun";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("srun not found"), std::string::npos) << e.what();
  }
}

// The srun line: --gpus-per-worker K becomes --gpus-per-task=K, before
// --slurm-args (which come last, so that they win) and the worker command.
TEST(SlurmLauncher, GpusPerTaskGoesIntoTheSrunLine) {
  testsupport::TempDir dir("slurm-line");
  for (const char* tool : {"srun", "scancel", "squeue"}) {
    dir.write(tool, "#!/bin/sh\nexit 1\n");
    std::filesystem::permissions(dir.file(tool), std::filesystem::perms::owner_all);
  }
  ScopedEnv path("PATH", dir.path().c_str());
  SlurmLauncherOptions o;
  o.workers = 4;
  o.endpoint = "tcp://login1:5555";
  o.executable = "/opt/hpsearch";
  o.job_name = "hps-test";
  o.gpus_per_task = 2;
  o.slurm_args = {"--partition=gpu", "--time=1:00:00"};
  SlurmLauncher launcher(o);
  const std::vector<std::string> expected = {dir.file("srun"),
                                             "--ntasks=4",
                                             "--job-name=hps-test",
                                             "--kill-on-bad-exit=0",
                                             "--gpus-per-task=2",
                                             "--partition=gpu",
                                             "--time=1:00:00",
                                             "/opt/hpsearch",
                                             "worker",
                                             "--connect",
                                             "tcp://login1:5555",
                                             "--insecure",
                                             "--device",
                                             "auto"};
  EXPECT_EQ(launcher.command(), expected);
  // Not given: no --gpus-per-task of the launcher's own.
  o.gpus_per_task = 0;
  const SlurmLauncher plain(o);
  for (const auto& arg : plain.command())
    EXPECT_EQ(arg.rfind("--gpus-per-task", 0), std::string::npos) << arg;
  o.gpus_per_task = -1;
  EXPECT_THROW(SlurmLauncher{o}, ConfigError);
}

TEST(SlurmLauncher, RunWithoutSlurmFailsClearlyAndWritesNothing) {
  testsupport::TempDir dir("slurm-cli");
  dir.write("space.json", R"({
    "study": {"name": "s", "direction": "minimize", "storage": "s.db"},
    "budget": {"n_trials": 4},
    "objective": {"type": "branin"},
    "space": {"x0": {"type": "float", "low": -5, "high": 10},
              "x1": {"type": "float", "low": 0, "high": 15}}})");
  // No Slurm commands in PATH (an empty folder), as on a machine without Slurm.
  const std::string empty_path = dir.path().string() + "/bin";
  std::filesystem::create_directory(empty_path);
  auto r = testsupport::run_process({"/usr/bin/env", "PATH=" + empty_path, HPSEARCH_CLI_PATH, "run",
                                     "space.json", "--launcher", "slurm", "--workers", "2"},
                                    dir.path().string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("srun not found"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("s.db")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("s.keys")));

  // --slurm-args belongs to the slurm launcher; local stays the default.
  r = testsupport::run_process(
      {HPSEARCH_CLI_PATH, "run", "space.json", "--slurm-args", "--partition=gpu"},
      dir.path().string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--slurm-args: needs --launcher slurm"), std::string::npos) << r.err;
  r = testsupport::run_process({HPSEARCH_CLI_PATH, "run", "space.json", "--launcher", "pbs"},
                               dir.path().string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--launcher"), std::string::npos) << r.err;
}

// `hpsearch run --launcher slurm` refusals that come before srun starts, with
// stand-in Slurm commands (srun leaves a marker if it is ever run).
class SlurmRunChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!curve::available()) GTEST_SKIP() << "libzmq without CURVE";
    dir_.write("space.json", R"({
      "study": {"name": "s", "direction": "minimize", "storage": "s.db"},
      "budget": {"n_trials": 4},
      "objective": {"type": "branin"},
      "space": {"x0": {"type": "float", "low": -5, "high": 10},
                "x1": {"type": "float", "low": 0, "high": 15}}})");
    std::filesystem::create_directory(dir_.file("bin"));
    for (const char* tool : {"srun", "scancel", "squeue"}) {
      const std::string path = dir_.file(std::string("bin/") + tool);
      dir_.write(std::string("bin/") + tool,
                 std::string("#!/bin/sh\ntouch '") + dir_.file("srun.ran") + "'\nexit 1\n");
      std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    }
  }
  testsupport::ProcessResult run(std::vector<std::string> args, const std::string& env = "") {
    std::vector<std::string> argv = {"/usr/bin/env", "PATH=" + dir_.file("bin") + ":/usr/bin:/bin"};
    if (!env.empty()) argv.push_back(env);
    argv.insert(argv.end(), {HPSEARCH_CLI_PATH, "run", "space.json", "--launcher", "slurm"});
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  }
  void expect_nothing_started() {
    EXPECT_FALSE(std::filesystem::exists(dir_.file("srun.ran"))) << "srun was started";
    EXPECT_FALSE(std::filesystem::exists(dir_.file("s.db"))) << "the store was written";
  }
  testsupport::TempDir dir_{"slurm-run-checks"};
};

TEST_F(SlurmRunChecks, InsecureWithKeysIsRefusedAndLoopbackBindWarns) {
  curve::make_keys(dir_.file("k"), 1, false);
  auto r = run({"--workers", "2", "--insecure", "--keys", "k", "--bind", "tcp://127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--keys: cannot be combined with --insecure"), std::string::npos) << r.err;
  // The loopback warning (item checked before the refusal).
  EXPECT_NE(r.err.find("cannot reach it"), std::string::npos) << r.err;
  for (const char* host : {"tcp://localhost:0", "tcp://[::1]:0"}) {
    r = run({"--workers", "2", "--insecure", "--keys", "k", "--bind", host});
    EXPECT_NE(r.err.find("cannot reach it"), std::string::npos) << host << ": " << r.err;
  }
  r = run({"--workers", "2", "--insecure", "--keys", "k", "--bind", "tcp://0.0.0.0:0"});
  EXPECT_EQ(r.err.find("cannot reach it"), std::string::npos) << r.err;
  expect_nothing_started();
}

// --workers-per-gpu has no srun form (Slurm gives GPUs to tasks whole);
// --gpus-per-worker and a --gpus-per-task of --slurm-args contradict.
TEST_F(SlurmRunChecks, GpuOptionsThatSlurmCannotHonourAreRefused) {
  auto r = run({"--workers", "4", "--workers-per-gpu", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--workers-per-gpu: is for local workers only: Slurm gives GPUs to tasks "
                       "whole"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--gres=shard:1"), std::string::npos) << r.err;
  expect_nothing_started();
  r = run({"--workers", "4", "--gpus-per-worker", "2", "--slurm-args", "--gpus-per-task=1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--gpus-per-worker: asks for srun --gpus-per-task=2, which --slurm-args "
                       "gives as well ('--gpus-per-task=1')"),
            std::string::npos)
      << r.err;
  expect_nothing_started();
  r = run({"--workers", "4", "--gpus-per-worker", "2", "--workers-per-gpu", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--gpus-per-worker: cannot be combined with --workers-per-gpu"),
            std::string::npos)
      << r.err;
  expect_nothing_started();
}

TEST_F(SlurmRunChecks, ABadWorkerKeyFailsBeforeSrunStarts) {
  // The keys folder of the study (made by an earlier run), its worker key
  // broken: exit 2 naming the file, srun never started.
  curve::make_keys(dir_.file("s.keys"), 1, false);
  dir_.write("s.keys/worker-1/worker.secret", "not-a-key\n");
  auto r = run({"--workers", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("s.keys/worker-1/worker.secret"), std::string::npos) << r.err;
  expect_nothing_started();
  // A worker folder that pins another coordinator.
  std::filesystem::remove_all(dir_.file("s.keys"));
  curve::make_keys(dir_.file("s.keys"), 1, false);
  curve::make_keys(dir_.file("other"), 1, false);
  std::filesystem::copy_file(dir_.file("other/coordinator.public"),
                             dir_.file("s.keys/worker-1/coordinator.public"),
                             std::filesystem::copy_options::overwrite_existing);
  r = run({"--workers", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("pins another coordinator key"), std::string::npos) << r.err;
  expect_nothing_started();
  // The same through $HPSEARCH_KEYS_DIR (used as --keys is, unless --insecure).
  r = run({"--workers", "2"}, "HPSEARCH_KEYS_DIR=" + dir_.file("s.keys"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("pins another coordinator key"), std::string::npos) << r.err;
  expect_nothing_started();
}

TEST_F(SlurmRunChecks, ASymlinkedStudyKeysFolderIsRefusedAndLeftAlone) {
  // The attack: <study>.keys planted as a link to a folder another user owns.
  std::filesystem::create_directory(dir_.file("planted"));
  std::filesystem::permissions(dir_.file("planted"), std::filesystem::perms(0755));
  std::filesystem::create_directory_symlink(dir_.file("planted"), dir_.file("s.keys"));
  auto r = run({"--workers", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::is_empty(dir_.file("planted")));
  EXPECT_EQ(std::filesystem::status(dir_.file("planted")).permissions(),
            std::filesystem::perms(0755));
  expect_nothing_started();
}

}  // namespace
}  // namespace hps
