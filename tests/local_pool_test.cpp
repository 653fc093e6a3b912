// Tests of workers/local_pool: GPU lists, device and thread assignment,
// restarts, giving up, and reaping. The "workers" here are small shell
// scripts standing in for hpsearch.
#include "workers/local_pool.h"

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
