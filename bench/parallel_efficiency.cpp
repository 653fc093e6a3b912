// parallel_efficiency: a 250 ms sleep objective with 1 to 256 local worker
// processes, over the private ipc socket (what `hpsearch run --workers N`
// uses) or tcp over loopback (what remote workers use; --transport tcp).
//
//   parallel_efficiency [--trials N] [--trials-per-worker K] [--seconds S]
//                       [--workers 1,2,4,8,16,64,128,256] [--transport ipc|tcp]
//                       [--max-batch B] [--prefetch P] [--exe HPSEARCH]
//
// --prefetch P: each worker holds P trials besides the one it runs
// (WorkerOptions::prefetch; default 0). A held trial's stored start is its
// dispatch, so with P > 0 "lease" would also count its wait on the worker:
// lease and gap are printed as one figure, "(both)".
//
// Each row runs max(N, K x workers) trials (defaults 128 and 32: at least
// 32 trials per worker from 8 workers up, so that a row measures the steady
// state and not the first and last waves alone).
//
// efficiency = ideal time (trials x S / workers) / measured time from the
// first trial's start to the last trial's end. The workers' start-up (from
// starting the processes to the last one's Hello) is reported beside it;
// the coordinator holds the first dispatch until every worker is there
// (CoordinatorOptions::min_workers), so start-up is not counted twice.
//
// Where the rest of the time goes (percent of workers x measured time, from
// the trials' start and end times as the coordinator stored them, per
// worker): "start" = a worker's first trial starting after the first trial
// of all (the first wave's dispatch), "lease" = a trial's time beyond S
// (sending it, the worker's wake-up, its result's way back), "gap" = between
// a worker's result and its next trial's start, "tail" = a worker idle after
// its last trial while others finish theirs.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <sstream>

#include "algorithms/study_setup.h"
#include "bench/bench_util.h"
#include "bench/local_run.h"
#include "coordinator/coordinator.h"
#include "search/storage.h"
#include "search/study.h"
#include "workers/local_pool.h"

using namespace hps;
using Steady = std::chrono::steady_clock;

namespace {

// Where the time of workers x span went, in worker-seconds.
struct Split {
  double start = 0, lease = 0, gap = 0, tail = 0;
  double chain = 0;  // lease + gap: a worker's first start to last end, beyond its trials x S
};

double seconds_between(TimePoint a, TimePoint b) {
  return std::chrono::duration<double>(b - a).count();
}

Split split_of(const std::vector<TrialPtr>& trials, double seconds) {
  std::map<std::string, std::vector<const FrozenTrial*>> by_worker;
  std::optional<TimePoint> first, last;
  for (const auto& t : trials) {
    if (!t->datetime_start || !t->datetime_complete) continue;
    by_worker[t->worker].push_back(t.get());
    if (!first || *t->datetime_start < *first) first = t->datetime_start;
    if (!last || *t->datetime_complete > *last) last = t->datetime_complete;
  }
  Split s;
  for (auto& [worker, list] : by_worker) {
    std::sort(list.begin(), list.end(), [](const FrozenTrial* a, const FrozenTrial* b) {
      return *a->datetime_start < *b->datetime_start;
    });
    s.start += seconds_between(*first, *list.front()->datetime_start);
    s.tail += seconds_between(*list.back()->datetime_complete, *last);
    s.chain += seconds_between(*list.front()->datetime_start, *list.back()->datetime_complete) -
               seconds * static_cast<double>(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      s.lease += seconds_between(*list[i]->datetime_start, *list[i]->datetime_complete) - seconds;
      if (i + 1 < list.size())
        s.gap += seconds_between(*list[i]->datetime_complete, *list[i + 1]->datetime_start);
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t min_trials = 128;
  std::int64_t per_worker = 32;
  double seconds = 0.25;
  std::vector<int> counts = {1, 2, 4, 8, 16, 64, 128, 256};
  std::string exe = HPSEARCH_CLI_PATH;
  std::string transport = "ipc";
  int max_batch = CoordinatorOptions{}.max_batch;
  int prefetch = 0;
  const char* usage =
      "usage: parallel_efficiency [--trials N] [--trials-per-worker K] [--seconds S] "
      "[--workers 1,2,4,8,16,64,128,256] [--transport ipc|tcp] [--max-batch B] [--prefetch P] "
      "[--exe HPSEARCH]\n";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << usage;
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--trials")
      min_trials = std::stoll(v);
    else if (a == "--trials-per-worker")
      per_worker = std::stoll(v);
    else if (a == "--seconds")
      seconds = std::stod(v);
    else if (a == "--exe")
      exe = v;
    else if (a == "--transport")
      transport = v;
    else if (a == "--max-batch")
      max_batch = std::stoi(v);
    else if (a == "--prefetch")
      prefetch = std::stoi(v);
    else if (a == "--workers") {
      counts.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) counts.push_back(std::stoi(item));
    } else {
      std::cerr << "unknown option " << a << "\n" << usage;
      return 2;
    }
  }
  if (transport != "ipc" && transport != "tcp") {
    std::cerr << "--transport must be ipc or tcp\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);

  fmt::print(
      "parallel_efficiency: a {:.0f} ms sleep objective, max({}, {} x workers) trials, SQLite "
      "store, {}, prefetch {}\n",
      seconds * 1000, min_trials, per_worker,
      transport == "tcp" ? "tcp over loopback" : "ipc (the local pool's socket)", prefetch);
  fmt::print("  {:>7} {:>7} {:>9} {:>11} {:>11} {:>9}   {:>6} {:>6} {:>6} {:>6}\n", "workers",
             "trials", "ideal s", "measured s", "efficiency", "ready s", "start", "lease", "gap",
             "tail");
  bool ok = true;
  for (int workers : counts) {
    const std::int64_t n_trials = std::max(min_trials, per_worker * workers);
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
    Study study = create_study(config, storage);
    CoordinatorOptions co;
    co.n_trials = n_trials;
    co.min_workers = workers;
    co.min_workers_wait_s = 60;
    co.max_batch = max_batch;
    auto worker_args = bench::use_transport(transport, co, dir.path() / "keys");
    if (prefetch > 0)
      worker_args.insert(worker_args.end(), {"--prefetch", std::to_string(prefetch)});
    double ready_s = -1;
    std::vector<TrialPtr> trials;
    {
      bench::LocalRun run(study, config.objective, co, workers, exe, worker_args);
      run.run();
      ready_s = run.ready_s();
      run.finish(10);
      trials = study.trials();
    }
    double ideal = static_cast<double>(n_trials) * seconds / workers;
    double measured = bench::span_s(trials);
    double efficiency = measured > 0 ? ideal / measured : 0;
    Split s = split_of(trials, seconds);
    const double total = measured * workers;
    auto pct = [&](double x) { return total > 0 ? 100.0 * x / total : 0.0; };
    fmt::print("  {:>7} {:>7} {:>9.2f} {:>11.3f} {:>10.2f}% {:>9.3f}", workers, n_trials, ideal,
               measured, 100 * efficiency, ready_s);
    if (prefetch == 0)
      fmt::print("   {:>5.2f}% {:>5.2f}% {:>5.2f}% {:>5.2f}%\n", pct(s.start), pct(s.lease),
                 pct(s.gap), pct(s.tail));
    else  // a held trial's stored start is its dispatch: lease and gap as one
      fmt::print("   {:>5.2f}% {:>13} {:>5.2f}%\n", pct(s.start),
                 fmt::format("{:.2f}% (both)", pct(s.chain)), pct(s.tail));
    if ((workers == 8 || workers == 16) && efficiency < 0.95) ok = false;
    if (workers == 16 && ready_s > 1.0) ok = false;
    if (workers == 256 && efficiency < 0.99) ok = false;
  }
  fmt::print(
      "  targets (>= 95% at 8 and 16 workers, 16 workers ready within 1 s, >= 99% at 256 "
      "workers): {}\n",
      ok ? "met" : "NOT met");
  return 0;
}
