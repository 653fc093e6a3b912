// Tests of workers/local_pool: GPU lists, device and thread assignment,
// restarts, giving up, and reaping. The "workers" here are small shell
// scripts standing in for hpsearch.
#include "workers/local_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "search/errors.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Steady = std::chrono::steady_clock;

// Writes an executable shell script.
std::string script(const fs::path& dir, const std::string& name, const std::string& body) {
  fs::path p = dir / name;
  std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
  fs::permissions(p, fs::perms::owner_all);
  return p.string();
}

// Restores an environment variable when it goes out of scope.
class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
  }
  ~EnvGuard() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

template <class F>
bool wait_until(F&& done, double seconds) {
  auto until = Steady::now() +
               std::chrono::duration_cast<Steady::duration>(std::chrono::duration<double>(seconds));
  while (Steady::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

TEST(LocalPool, ParsesGpuLists) {
  EXPECT_EQ(parse_gpu_list("0, 1,3"), (std::vector<std::string>{"0", "1", "3"}));
  EXPECT_EQ(parse_gpu_list("GPU-8a3f-11"), (std::vector<std::string>{"GPU-8a3f-11"}));
  EXPECT_TRUE(parse_gpu_list("").empty());
  EXPECT_THROW(parse_gpu_list("0,,1"), ConfigError);
  EXPECT_THROW(parse_gpu_list("0,"), ConfigError);
  EXPECT_THROW(parse_gpu_list("0;rm"), ConfigError);
  // Neither an index nor a UUID as CUDA_VISIBLE_DEVICES takes it.
  EXPECT_THROW(parse_gpu_list("abc"), ConfigError);
  EXPECT_THROW(parse_gpu_list("0,gpu1"), ConfigError);
  EXPECT_THROW(parse_gpu_list("GPU-"), ConfigError);
  EXPECT_EQ(parse_gpu_list("MIG-GPU-8a3f/1/0,MIG-5c1d-22"),
            (std::vector<std::string>{"MIG-GPU-8a3f/1/0", "MIG-5c1d-22"}));
}

TEST(LocalPool, DetectsGpusFromCudaVisibleDevices) {
  EnvGuard guard("CUDA_VISIBLE_DEVICES");
  setenv("CUDA_VISIBLE_DEVICES", "2,5", 1);
  EXPECT_EQ(detect_gpus(), (std::vector<std::string>{"2", "5"}));
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_TRUE(detect_gpus().empty());
  setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  EXPECT_TRUE(detect_gpus().empty());
}

TEST(LocalPool, AssignsGpusRoundRobinAndCpuThreads) {
  testsupport::TempDir dir("pool");
  EnvGuard omp("OMP_NUM_THREADS");
  unsetenv("OMP_NUM_THREADS");
  // Each "worker" records its arguments and environment, then exits.
  std::string exe = script(
      dir.path(), "worker.sh",
      "echo \"$CUDA_VISIBLE_DEVICES|$OMP_NUM_THREADS|$*\" > " + dir.path().string() + "/out.$$");
  LocalPoolOptions o;
  o.workers = 3;
  o.executable = exe;
  o.endpoint = "tcp://127.0.0.1:1";
  o.gpus = {"4", "7"};
  o.threads_per_worker = 3;
  o.extra_args = {"--log-level", "warn"};
  LocalWorkerPool pool(o);
  EXPECT_EQ(pool.visible_devices_of(0), "4");
  EXPECT_EQ(pool.visible_devices_of(1), "7");
  EXPECT_EQ(pool.visible_devices_of(2), "4");
  EXPECT_EQ(pool.device_of(2), "cuda:0");
  pool.start();
  auto pids = pool.pids();
  pool.stop_restarting();
  ASSERT_TRUE(wait_until(
      [&] {
        pool.poll();
        return pool.running() == 0;
      },
      10.0));
  for (int slot = 0; slot < 3; ++slot) {
    std::ifstream in(dir.path() / ("out." + std::to_string(pids[static_cast<std::size_t>(slot)])));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(
        line,
        std::string(slot == 1 ? "7" : "4") +
            "|3|worker --connect tcp://127.0.0.1:1 --device cuda:0 --threads 3 --log-level warn")
        << "slot " << slot;
  }
}

TEST(LocalPool, CpuWorkersShareTheCores) {
  LocalPoolOptions o;
  o.workers = 2;
  o.executable = "/bin/true";
  o.endpoint = "tcp://127.0.0.1:1";
  LocalWorkerPool pool(o);
  int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(pool.threads_per_worker(), std::max(1, cores / 2));
  EXPECT_EQ(pool.device_of(0), "cpu");
  EXPECT_EQ(pool.visible_devices_of(0), "");
  o.workers = 4 * cores;
  EXPECT_EQ(LocalWorkerPool(o).threads_per_worker(), 1);
}

TEST(LocalPool, RestartsAKilledWorkerAndReapsAllAtTheEnd) {
  testsupport::TempDir dir("pool");
  std::string exe = script(dir.path(), "worker.sh", "exec sleep 30");
  LocalPoolOptions o;
  o.workers = 2;
  o.executable = exe;
  o.endpoint = "tcp://127.0.0.1:1";
  o.restart_delay_s = 0.01;
  LocalWorkerPool pool(o);
  pool.start();
  ASSERT_EQ(pool.running(), 2);
  pid_t victim = pool.pids()[0];
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  std::vector<ExitedWorker> exited;
  ASSERT_TRUE(wait_until(
      [&] {
        for (const auto& w : pool.poll()) exited.push_back(w);
        return pool.running() == 2 && pool.pids()[0] != victim && pool.pids()[0] > 0;
      },
      10.0));
  ASSERT_EQ(exited.size(), 1u);
  EXPECT_EQ(exited[0].pid, victim);
  EXPECT_EQ(exited[0].slot, 0);
  EXPECT_EQ(exited[0].how, "killed by signal 9");
  auto pids = pool.pids();
  pool.shutdown(0.0);  // they never exit on their own: SIGTERM
  EXPECT_EQ(pool.running(), 0);
  for (pid_t pid : pids) EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " still exists";
}

TEST(LocalPool, GivesUpOnAWorkerThatKeepsExitingAtOnce) {
  testsupport::TempDir dir("pool");
  std::string exe = script(dir.path(), "worker.sh", "exit 3");
  LocalPoolOptions o;
  o.workers = 1;
  o.executable = exe;
  o.endpoint = "tcp://127.0.0.1:1";
  o.max_quick_exits = 3;
  o.restart_delay_s = 0.001;
  LocalWorkerPool pool(o);
  pool.start();
  int exits = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        for (const auto& w : pool.poll()) {
          EXPECT_EQ(w.how, "exited with status 3");
          ++exits;
        }
        return pool.all_given_up();
      },
      20.0));
  EXPECT_EQ(exits, 3);
  EXPECT_EQ(pool.running(), 0);
}

// The slot -> GPU rule of --gpus-per-worker K (disjoint blocks of K) and
// --workers-per-gpu K (K consecutive workers on each GPU, then around).
TEST(LocalPool, AssignedGpusFollowTheDocumentedRule) {
  const std::vector<std::string> four = {"0", "1", "2", "3"};
  using List = std::vector<std::string>;
  // Default (both 1): round robin.
  EXPECT_EQ(assigned_gpus(four, 0, 1, 1), (List{"0"}));
  EXPECT_EQ(assigned_gpus(four, 5, 1, 1), (List{"1"}));
  // Two GPUs per worker: {0,1}, {2,3}.
  EXPECT_EQ(assigned_gpus(four, 0, 2, 1), (List{"0", "1"}));
  EXPECT_EQ(assigned_gpus(four, 1, 2, 1), (List{"2", "3"}));
  EXPECT_EQ(assigned_gpus(four, 0, 4, 1), four);
  // Three workers per GPU: 0,0,0,1,1,1,2,2,2,3,3,3, then GPU 0 again.
  List seen;
  for (int slot = 0; slot < 13; ++slot) seen.push_back(assigned_gpus(four, slot, 1, 3).at(0));
  EXPECT_EQ(seen, (List{"0", "0", "0", "1", "1", "1", "2", "2", "2", "3", "3", "3", "0"}));
  // UUIDs are kept as they are; no GPUs: none.
  EXPECT_EQ(assigned_gpus({"GPU-ab", "GPU-cd"}, 1, 1, 2), (List{"GPU-ab"}));
  EXPECT_TRUE(assigned_gpus({}, 0, 2, 1).empty());
  EXPECT_TRUE(assigned_gpus({}, 3, 1, 2).empty());
}

// Each worker of a --gpus-per-worker 2 pool sees its own two GPUs in
// CUDA_VISIBLE_DEVICES and is told device "cuda" (all it sees).
TEST(LocalPool, GivesEachWorkerItsOwnGpusWithGpusPerWorker) {
  testsupport::TempDir dir("pool");
  std::string exe =
      script(dir.path(), "worker.sh",
             "echo \"$CUDA_VISIBLE_DEVICES|$*\" > " + dir.path().string() + "/out.$$");
  LocalPoolOptions o;
  o.workers = 3;
  o.executable = exe;
  o.endpoint = "tcp://127.0.0.1:1";
  o.gpus = {"0", "1", "2", "3", "4", "5", "6"};
  o.gpus_per_worker = 2;
  o.threads_per_worker = 1;
  LocalWorkerPool pool(o);
  EXPECT_EQ(pool.gpus_of(2), (std::vector<std::string>{"4", "5"}));
  EXPECT_EQ(pool.device_of(0), "cuda");
  pool.start();
  auto pids = pool.pids();
  pool.stop_restarting();
  ASSERT_TRUE(wait_until(
      [&] {
        pool.poll();
        return pool.running() == 0;
      },
      10.0));
  const char* expected[] = {"0,1", "2,3", "4,5"};
  for (int slot = 0; slot < 3; ++slot) {
    std::ifstream in(dir.path() / ("out." + std::to_string(pids[static_cast<std::size_t>(slot)])));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, std::string(expected[slot]) +
                        "|worker --connect tcp://127.0.0.1:1 --device cuda --threads 1")
        << "slot " << slot;
  }
}

TEST(LocalPool, SharesEachGpuWithWorkersPerGpu) {
  LocalPoolOptions o;
  o.workers = 5;
  o.executable = "/bin/true";
  o.endpoint = "tcp://127.0.0.1:1";
  o.gpus = {"3", "7"};
  o.workers_per_gpu = 2;
  LocalWorkerPool pool(o);
  std::vector<std::string> seen;
  for (int slot = 0; slot < 5; ++slot) {
    seen.push_back(pool.visible_devices_of(slot));
    EXPECT_EQ(pool.device_of(slot), "cuda:0");
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"3", "3", "7", "7", "3"}));
}

// Without GPUs both options leave CPU workers, with the cores divided.
TEST(LocalPool, GpuOptionsWithoutGpusGiveCpuWorkers) {
  LocalPoolOptions o;
  o.workers = 2;
  o.executable = "/bin/true";
  o.endpoint = "tcp://127.0.0.1:1";
  for (auto [per_worker, per_gpu] : {std::pair{4, 1}, std::pair{1, 3}}) {
    o.gpus_per_worker = per_worker;
    o.workers_per_gpu = per_gpu;
    LocalWorkerPool pool(o);
    EXPECT_EQ(pool.device_of(1), "cpu");
    EXPECT_EQ(pool.visible_devices_of(1), "");
    EXPECT_EQ(pool.threads_per_worker(), default_threads_per_worker(2));
  }
  int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(default_threads_per_worker(2), std::max(1, cores / 2));
  EXPECT_EQ(default_threads_per_worker(4 * cores), 1);
}

// The message of the ConfigError that `o` makes the pool throw ("" if none).
std::string pool_error(const LocalPoolOptions& o) {
  try {
    LocalWorkerPool pool(o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LocalPool, RejectsGpuLayoutsThatDoNotFit) {
  LocalPoolOptions o;
  o.workers = 2;
  o.executable = "/bin/true";
  o.endpoint = "tcp://127.0.0.1:1";
  o.gpus = {"0", "1", "2"};
  o.gpus_per_worker = 0;
  EXPECT_THAT(pool_error(o), HasSubstr("--gpus-per-worker: must be >= 1, got 0"));
  o.gpus_per_worker = 1;
  o.workers_per_gpu = -1;
  EXPECT_THAT(pool_error(o), HasSubstr("--workers-per-gpu: must be >= 1, got -1"));
  o.gpus_per_worker = 2;
  o.workers_per_gpu = 2;
  EXPECT_THAT(pool_error(o), HasSubstr("--gpus-per-worker: cannot be combined with "
                                       "--workers-per-gpu"));
  o.workers_per_gpu = 1;
  o.gpus_per_worker = 4;
  o.workers = 1;
  EXPECT_THAT(pool_error(o), HasSubstr("--gpus-per-worker: is 4 but only 3 GPUs are available "
                                       "(0,1,2)"));
  o.gpus_per_worker = 2;
  o.workers = 2;
  EXPECT_THAT(pool_error(o), HasSubstr("--workers: 2 workers with 2 GPUs each need 4 GPUs, only 3 "
                                       "are available (0,1,2): give --workers 1 or fewer"));
  o.workers = 1;
  EXPECT_EQ(pool_error(o), "");
  o.gpus_per_worker = 1;
  o.workers_per_gpu = 5;
  o.workers = 20;  // more than 3 x 5: wraps around (the CLI warns)
  EXPECT_EQ(pool_error(o), "");
}

TEST(LocalPool, RejectsBadOptions) {
  LocalPoolOptions o;
  o.workers = -1;
  EXPECT_THROW(LocalWorkerPool{o}, ConfigError);
  o.workers = 2;
  o.endpoint = "";
  EXPECT_THROW(LocalWorkerPool{o}, ConfigError);
}

}  // namespace
}  // namespace hps
