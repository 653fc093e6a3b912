// A coordinator and a pool of local worker processes over one transport,
// run to the end of the study's budget: the set-up that
// bench/dispatch_throughput and bench/parallel_efficiency share (header
// only; benchmark programs, not installed).
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/coordinator.h"
#include "protocol/curve_keys.h"
#include "search/study.h"
#include "workers/local_pool.h"

namespace hps::bench {

// Sets `co` (endpoint, insecure) for a transport and returns the worker
// arguments that go with it: "ipc" (the coordinator's private socket, the
// default), "tcp" (loopback, no keys) or "curve" (loopback with one
// authorized key pair made in `keys_dir` if missing, shared by the pool's
// workers). Throws std::invalid_argument for another name.
inline std::vector<std::string> use_transport(const std::string& kind, CoordinatorOptions& co,
                                              const std::filesystem::path& keys_dir) {
  std::vector<std::string> args = {"--log-level", "warn"};
  if (kind == "ipc") return args;
  co.endpoint = "tcp://127.0.0.1:*";
  if (kind == "tcp") {
    co.insecure = true;
    return {"--log-level", "error", "--insecure"};  // no warning per worker
  }
  if (kind != "curve") throw std::invalid_argument("unknown transport '" + kind + "'");
  if (!std::filesystem::exists(keys_dir)) curve::make_keys(keys_dir.string(), 1, false);
  co.keys_dir = keys_dir.string();
  args.insert(args.end(), {"--keys", (keys_dir / "worker-1").string()});
  return args;
}

// One run: the coordinator of `study` with `co` and `workers` local worker
// processes of `exe` (the hpsearch executable) with `worker_args`.
class LocalRun {
 public:
  LocalRun(Study study, Json objective, CoordinatorOptions co, int workers, const std::string& exe,
           const std::vector<std::string>& worker_args)
      : workers_(workers), coordinator_(std::move(study), std::move(objective), std::move(co)) {
    LocalPoolOptions po;
    po.workers = workers;
    po.executable = exe;
    po.endpoint = coordinator_.endpoint();
    po.extra_args = worker_args;
    pool_ = std::make_unique<LocalWorkerPool>(po);
  }

  // Starts the workers and runs the coordinator until the study's budget is
  // reached. Returns the wall seconds from the start of the workers;
  // ready_s() is when all of them had joined (-1 if they never did).
  double run() {
    const auto t0 = std::chrono::steady_clock::now();
    auto since = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    pool_->start();
    while (coordinator_.step(5)) {
      for (const auto& w : pool_->poll()) coordinator_.worker_exited(w.pid);
      if (ready_s_ < 0 && static_cast<int>(coordinator_.workers().size()) >= workers_) {
        ready_s_ = since();
        workers_cpu_s_ = -children_cpu_s();
      }
    }
    if (ready_s_ >= 0) workers_cpu_s_ += children_cpu_s();
    return since();
  }

  // CPU seconds (user + system, all threads) the worker processes used
  // from when all had joined to the end of run(): their start-up left out.
  double workers_cpu_s() const { return workers_cpu_s_; }

  // After run(): lets the workers leave (at most grace_s seconds) and ends
  // the pool.
  void finish(double grace_s) {
    pool_->stop_restarting();
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (pool_->running() > 0 && std::chrono::steady_clock::now() < until) {
      coordinator_.step(10);
      pool_->poll();
    }
    pool_->shutdown(0.0);
  }

  double ready_s() const { return ready_s_; }
  Coordinator& coordinator() { return coordinator_; }

 private:
  int workers_;
  Coordinator coordinator_;
  std::unique_ptr<LocalWorkerPool> pool_;
  double ready_s_ = -1;
  double workers_cpu_s_ = 0;

  // CPU seconds so far of this process's running child processes (the
  // workers): utime + stime of /proc/PID/stat for each process whose
  // parent is this one.
  static double children_cpu_s() {
    const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    const std::string self = std::to_string(getpid());
    double total = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream f(e.path() / "stat");
      std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const auto close = text.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(text.substr(close + 2));
      std::string field, ppid;
      double utime = 0, stime = 0;
      for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 4) ppid = field;
        if (i == 14) utime = std::stod(field);
        if (i == 15) stime = std::stod(field);
      }
      if (ppid == self) total += (utime + stime) / tick;
    }
    return total;
  }
};

}  // namespace hps::bench
