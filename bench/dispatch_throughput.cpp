// dispatch_throughput: how many trials a second the coordinator finishes with
// 8 local worker processes, a no-op objective, the random sampler and a
// SQLite store, beside Optuna with SQLite storage measured in the same run.
// One row per transport between the coordinator and its workers: ipc (the
// private socket local pools use), tcp over loopback without keys
// (--insecure), and tcp with CURVE (keys from protocol/curve_keys.h; the
// cost of encryption and authentication is printed beside plain tcp).
//
//   dispatch_throughput [--trials N] [--workers W] [--optuna-trials M]
//                       [--optuna-script PATH] [--no-optuna] [--exe HPSEARCH]
//                       [--transport all|ipc|tcp|curve] [--prefetch P]
//
// --prefetch P: each worker holds P trials besides the one it runs
// (WorkerOptions::prefetch; default 0).
//
// hpsearch's figure is trials / (last trial's end - first trial's start); the
// workers' start-up is reported beside it. At the end the SQLite file is
// opened again by a new connection and every trial must be COMPLETE there.
// Optuna runs ../shared/bench/optuna_reference.py storage M /tmp/o.db (one
// process, RandomSampler, 10 float params).
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "algorithms/study_setup.h"
#include "bench/bench_util.h"
#include "bench/local_run.h"
#include "coordinator/coordinator.h"
#include "protocol/curve_keys.h"
#include "search/storage.h"
#include "search/study.h"
#include "workers/local_pool.h"

using namespace hps;
using Steady = std::chrono::steady_clock;

namespace {

// One measured run of the coordinator with a pool of workers.
struct Row {
  std::string transport;  // "ipc", "tcp", "tcp+CURVE"
  double ready_s = 0, wall_s = 0, span = 0, coordinator_cpu_us = 0;
  double workers_cpu_us = 0;  // all worker processes' CPU per trial, after they joined
  std::string thread_split;   // "main 120, ZMQbg/IO/0 60, ..." us per trial
  std::int64_t durable = 0;
  std::int64_t commits = 0;  // the coordinator's transactions (CoordinatorStats::commits)
  double rate() const;
  std::int64_t n_trials = 0;
};
double Row::rate() const { return span > 0 ? static_cast<double>(n_trials) / span : 0; }

}  // namespace

int main(int argc, char** argv) {
  std::int64_t n_trials = 20000;
  int workers = 8;
  int optuna_trials = 500;
  std::string optuna_script =
      std::string(HPSEARCH_SOURCE_DIR) + "/../shared/bench/optuna_reference.py";
  bool optuna = true;
  std::string exe = HPSEARCH_CLI_PATH;
  std::string transport = "all";
  int prefetch = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--trials")
      n_trials = std::stoll(next());
    else if (a == "--workers")
      workers = std::stoi(next());
    else if (a == "--optuna-trials")
      optuna_trials = std::stoi(next());
    else if (a == "--optuna-script")
      optuna_script = next();
    else if (a == "--no-optuna")
      optuna = false;
    else if (a == "--exe")
      exe = next();
    else if (a == "--transport")
      transport = next();
    else if (a == "--prefetch")
      prefetch = std::stoi(next());
    else {
      std::cerr << "usage: dispatch_throughput [--trials N] [--workers W] [--optuna-trials M] "
                   "[--optuna-script PATH] [--no-optuna] [--exe HPSEARCH] "
                   "[--transport all|ipc|tcp|curve] [--prefetch P]\n";
      return 2;
    }
  }
  std::vector<std::string> transports;
  for (const char* t : {"ipc", "tcp", "curve"})
    if (transport == "all" || transport == t) transports.push_back(t);
  if (transports.empty()) {
    std::cerr << "--transport must be all, ipc, tcp or curve\n";
    return 2;
  }
  if (!curve::available() && transport == "all") transports.pop_back();
  spdlog::set_level(spdlog::level::warn);

  bench::TempDir dir("hps-dispatch");
  Json space = Json::object();
  for (int i = 0; i < 10; ++i)
    space["x" + std::to_string(i)] = Json{{"type", "float"}, {"low", -5.0}, {"high", 5.0}};
  Json doc{{"study", {{"name", "dispatch"}, {"direction", "minimize"}, {"storage", "bench.db"}}},
           {"sampler", {{"type", "random"}, {"seed", 0}}},
           {"pruner", {{"type", "none"}}},
           {"budget", {{"n_trials", n_trials}}},
           {"objective", {{"type", "sleep"}, {"seconds", 0}, {"steps", 1}}},
           {"space", space}};
  StudyConfig config = StudyConfig::from_json(doc);
  auto measure = [&](const std::string& kind) {
    Row row;
    row.transport = kind == "curve" ? "tcp+CURVE" : kind;
    row.n_trials = n_trials;
    const std::string db = (dir.path() / ("bench-" + kind + ".db")).string();
    double& ready_s = row.ready_s;
    double& wall_s = row.wall_s;
    double& coordinator_cpu_us = row.coordinator_cpu_us;
    std::string& thread_split = row.thread_split;
    {
      auto storage = open_storage(db);
      Study study = create_study(config, storage);
      CoordinatorOptions co;
      co.n_trials = n_trials;
      co.min_workers = workers;  // start all workers' first trials together
      auto worker_args = bench::use_transport(kind, co, dir.path() / "keys");
      if (prefetch > 0)
        worker_args.insert(worker_args.end(), {"--prefetch", std::to_string(prefetch)});
      bench::LocalRun run(study, config.objective, co, workers, exe, worker_args);
      // CPU seconds of each thread of this process, by thread name
      // (/proc/self/task/*/stat: utime and stime in clock ticks).
      auto thread_cpu = [] {
        std::map<std::string, double> out;
        const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
        for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
          std::ifstream f(e.path() / "stat");
          std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
          auto open = text.find('('), close = text.rfind(')');
          if (open == std::string::npos || close == std::string::npos) continue;
          std::string name = text.substr(open + 1, close - open - 1);
          std::istringstream rest(text.substr(close + 2));
          std::string field;
          double utime = 0, stime = 0;
          for (int i = 3; i <= 15 && rest >> field; ++i) {
            if (i == 14) utime = std::stod(field);
            if (i == 15) stime = std::stod(field);
          }
          out[e.path().filename() == std::to_string(getpid()) ? std::string("main") : name] +=
              (utime + stime) / tick;
        }
        return out;
      };
      auto threads0 = thread_cpu();
      auto cpu = [] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
               static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
      };
      double cpu0 = cpu();
      wall_s = run.run();
      ready_s = run.ready_s();
      row.commits = run.coordinator().stats().commits;
      row.workers_cpu_us = run.workers_cpu_s() * 1e6 / static_cast<double>(n_trials);
      coordinator_cpu_us = (cpu() - cpu0) * 1e6 / static_cast<double>(n_trials);
      for (const auto& [name, seconds] : thread_cpu()) {
        double us = (seconds - threads0[name]) * 1e6 / static_cast<double>(n_trials);
        if (us >= 1)
          thread_split += fmt::format("{}{} {:.0f}", thread_split.empty() ? "" : ", ", name, us);
      }
      run.finish(5);
    }
    {
      // A new connection to the file: what is durable.
      auto storage = open_storage(db);
      auto trials = storage->get_all_trials(*storage->find_study("dispatch"), {});
      for (const auto& t : trials) row.durable += t->state == TrialState::kComplete;
      row.span = bench::span_s(trials);
    }
    return row;
  };
  std::vector<Row> rows;
  for (const auto& t : transports) rows.push_back(measure(t));

  std::optional<double> optuna_rate, optuna_memory;
  if (optuna && std::filesystem::exists(optuna_script)) {
    for (const auto& j :
         bench::run_json_lines(fmt::format("/usr/bin/python3 {} storage {} /tmp/o.db 2>/dev/null",
                                           optuna_script, optuna_trials))) {
      if (j.value("storage", "") == "sqlite") optuna_rate = j.value("trials_per_s", 0.0);
      if (j.value("storage", "") == "memory") optuna_memory = j.value("trials_per_s", 0.0);
    }
  }

  fmt::print(
      "dispatch_throughput: no-op objective, random sampler, 10 float params, SQLite (WAL), "
      "prefetch {}\n",
      prefetch);
  fmt::print("  {:<34} {:>10} {:>14}   {}\n", "", "trials", "trials/s", "notes");
  for (const auto& r : rows)
    fmt::print(
        "  {:<34} {:>10} {:>14.0f}   {} workers ready in {:.2f} s; {:.2f} s wall incl. start-up; "
        "{}/{} COMPLETE in the file; {:.1f} trials per commit; coordinator CPU {:.0f} us/trial "
        "({}); workers CPU {:.0f} us/trial\n",
        fmt::format("hpsearch {} ({} workers)", r.transport, workers), n_trials, r.rate(), workers,
        r.ready_s, r.wall_s, r.durable, n_trials,
        r.commits > 0 ? static_cast<double>(n_trials) / static_cast<double>(r.commits) : 0.0,
        r.coordinator_cpu_us, r.thread_split, r.workers_cpu_us);
  const Row* tcp_row = nullptr;
  const Row* curve_row = nullptr;
  for (const auto& r : rows) {
    if (r.transport == "tcp") tcp_row = &r;
    if (r.transport == "tcp+CURVE") curve_row = &r;
  }
  if (tcp_row && curve_row && tcp_row->rate() > 0) {
    double cost = 100.0 * (1.0 - curve_row->rate() / tcp_row->rate());
    fmt::print("  CURVE costs {:.1f}% of tcp's trials/s (goal <= 10%): {}\n", cost,
               cost <= 10.0 ? "met" : "NOT met");
  }
  // The headline figure: the first row (ipc, what `hpsearch run --workers N` uses).
  const double rate = rows.front().rate();
  std::int64_t durable = n_trials;
  for (const auto& r : rows) durable = std::min(durable, r.durable);
  if (optuna_rate) {
    fmt::print(
        "  {:<34} {:>10} {:>14.1f}   optuna_reference.py storage {} /tmp/o.db (in-memory: "
        "{:.0f}/s)\n",
        "Optuna (SQLite, 1 process)", optuna_trials, *optuna_rate, optuna_trials,
        optuna_memory.value_or(0.0));
    fmt::print("  ratio hpsearch / Optuna: {:.0f}x\n",
               *optuna_rate > 0 ? rate / *optuna_rate : 0.0);
  } else if (!optuna) {
    fmt::print("  Optuna: not measured (--no-optuna)\n");
  } else {
    fmt::print("  Optuna: not measured ({} not found or python3-optuna missing)\n", optuna_script);
  }
  // The first goal (5,000) and issue #16's (10,000 durable trials/s with 8 local workers).
  for (double goal : {5000.0, 10000.0})
    fmt::print("  target >= {:.0f} trials/s, every trial durable: {}\n", goal,
               rate >= goal && durable == n_trials ? "met" : "NOT met");
  return durable == n_trials ? 0 : 1;
}
