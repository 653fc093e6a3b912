// parallel_efficiency: 128 trials of a 250 ms sleep objective with 1, 2, 4,
// 8 and 16 local worker processes.
//
//   parallel_efficiency [--trials N] [--seconds S] [--workers 1,2,4,8,16] [--exe HPSEARCH]
//
// efficiency = ideal time (N x S / workers) / measured time from the first
// trial's start to the last trial's end. The workers' start-up (from
// starting the processes to the last one's Hello) is reported beside it;
// the coordinator holds the first dispatch until every worker is there
// (CoordinatorOptions::min_workers), so start-up is not counted twice.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <iostream>
#include <sstream>

#include "algorithms/factory.h"
#include "bench/bench_util.h"
#include "coordinator/coordinator.h"
#include "search/storage.h"
#include "search/study.h"
#include "workers/local_pool.h"

using namespace hps;
using Steady = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::int64_t n_trials = 128;
  double seconds = 0.25;
  std::vector<int> counts = {1, 2, 4, 8, 16};
  std::string exe = HPSEARCH_CLI_PATH;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "usage: parallel_efficiency [--trials N] [--seconds S] [--workers 1,2,4,8,16] "
                   "[--exe HPSEARCH]\n";
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--trials")
      n_trials = std::stoll(v);
    else if (a == "--seconds")
      seconds = std::stod(v);
    else if (a == "--exe")
      exe = v;
    else if (a == "--workers") {
      counts.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) counts.push_back(std::stoi(item));
    } else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);

  fmt::print("parallel_efficiency: {} trials of a {:.0f} ms sleep objective, SQLite store\n",
             n_trials, seconds * 1000);
  fmt::print("  {:>7} {:>10} {:>11} {:>11} {:>17}\n", "workers", "ideal s", "measured s",
             "efficiency", "workers ready s");
  bool ok = true;
  for (int workers : counts) {
    bench::TempDir dir("hps-efficiency");
    const std::string db = (dir.path() / "bench.db").string();
    Json doc{{"study", {{"name", "efficiency"}, {"direction", "minimize"}, {"storage", db}}},
             {"sampler", {{"type", "random"}, {"seed", 0}}},
             {"pruner", {{"type", "none"}}},
             {"budget", {{"n_trials", n_trials}}},
             {"objective", {{"type", "sleep"}, {"seconds", seconds}, {"steps", 1}}},
             {"space", {{"x", {{"type", "float"}, {"low", 0.0}, {"high", 1.0}}}}}};
    StudyConfig config = StudyConfig::from_json(doc);
    auto storage = open_storage(db);
    StudyOptions so;
    so.sampler = make_sampler(config.sampler);
    so.pruner = make_pruner(config.pruner);
    so.space = config.space;
    Study study = Study::create(storage, config.name, config.direction, so, config.source);
    CoordinatorOptions co;
    co.n_trials = n_trials;
    co.min_workers = workers;
    double ready_s = -1;
    std::vector<TrialPtr> trials;
    {
      Coordinator coordinator(study, config.objective, co);
      LocalPoolOptions po;
      po.workers = workers;
      po.executable = exe;
      po.endpoint = coordinator.endpoint();
      po.extra_args = {"--log-level", "warn"};
      LocalWorkerPool pool(po);
      auto t0 = Steady::now();
      pool.start();
      while (coordinator.step(5)) {
        for (const auto& w : pool.poll()) coordinator.worker_exited(w.pid);
        if (ready_s < 0 && static_cast<int>(coordinator.workers().size()) >= workers)
          ready_s = std::chrono::duration<double>(Steady::now() - t0).count();
      }
      pool.stop_restarting();
      auto until = Steady::now() + std::chrono::seconds(5);
      while (pool.running() > 0 && Steady::now() < until) {
        coordinator.step(10);
        pool.poll();
      }
      pool.shutdown(0.0);
      trials = study.trials();
    }
    double ideal = static_cast<double>(n_trials) * seconds / workers;
    double measured = bench::span_s(trials);
    double efficiency = measured > 0 ? ideal / measured : 0;
    fmt::print("  {:>7} {:>10.2f} {:>11.3f} {:>10.1f}% {:>17.3f}\n", workers, ideal, measured,
               100 * efficiency, ready_s);
    if ((workers == 8 || workers == 16) && efficiency < 0.95) ok = false;
    if (workers == 16 && ready_s > 1.0) ok = false;
  }
  fmt::print("  targets (>= 95% at 8 and 16 workers, 16 workers ready within 1 s): {}\n",
             ok ? "met" : "NOT met");
  return 0;
}
