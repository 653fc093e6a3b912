// warm_start: trials to reach a target on a shifted copy of a function,
// for a cold TPE, a TPE warm-started from an earlier study on the original
// function (search/warm_start.h), and the earlier study's best params
// enqueued (Optuna's only way), printed beside Optuna's TPE run the same
// way (bench/warm_start_optuna.py, /usr/bin/python3 with python3-optuna),
// measured in the same run.
//
//   warm_start [--seeds 20] [--old-trials 50] [--max-trials 100] [--shift-scale 1]
//              [--optuna live|none]
//
// For each function f and seed: an old study of --old-trials TPE trials on
// f (seed + 1000), then new studies on g(x) = f(x - shift), same domain,
// run until a trial reaches the target (value <= target) or --max-trials:
//   cold     TPE (seed), nothing known;
//   warm     TPE (seed), warm-started with the old study's COMPLETE trials
//            (prior observations: not counted, never run), modelled as a
//            task of their own weighted by similarity (the default,
//            TpeOptions::warm_start_weighting);
//   warm_none  the same with "warm_start_weighting": "none" (old and new
//            values ranked together);
//   enqueue  TPE (seed), the old best params enqueued as the first trial.
// The count is the 1-based number of the first new trial at or below the
// target. Samplers: our TPE's defaults ({"type": "tpe"}) and Optuna's
// TPESampler defaults. Functions (minimized; params x0..x{d-1}, floats):
//   quadratic4        sum (x_i - c_i)^2, c = (1, -2, 0.5, 1.5), [-5, 5]^4
//   branin            Branin, x0 in [-5, 10], x1 in [0, 15]
//   styblinski_tang4  0.5 sum (x^4 - 16 x^2 + 5 x), [-5, 5]^4
#include "search/warm_start.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/factory.h"
#include "bench/bench_util.h"
#include "search/storage.h"
#include "search/study.h"

namespace {

using hps::Json;

double quadratic(const std::vector<double>& x) {
  const double centre[] = {1.0, -2.0, 0.5, 1.5};
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += (x[i] - centre[i]) * (x[i] - centre[i]);
  return s;
}

double branin(const std::vector<double>& x) {
  const double pi = std::numbers::pi;
  const double b = 5.1 / (4 * pi * pi), c = 5.0 / pi, t = 1.0 / (8 * pi);
  const double u = x[1] - b * x[0] * x[0] + c * x[0] - 6.0;
  return u * u + 10.0 * (1 - t) * std::cos(x[0]) + 10.0;
}

double styblinski_tang(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v * v * v - 16 * v * v + 5 * v;
  return 0.5 * s;
}

struct Task {
  std::string name;
  double (*f)(const std::vector<double>&);
  std::vector<double> low, high, shift;
  double target;  // of the shifted function
};

// Targets: the shifted minimum plus a margin that a cold TPE reaches in
// a few dozen trials on most seeds, and that the old best point, shifted,
// misses (so enqueueing it alone does not reach it).
std::vector<Task> kTasks = {
    {"quadratic4", quadratic, {-5, -5, -5, -5}, {5, 5, 5, 5}, {0.5, -0.5, 0.5, -0.5}, 0.5},
    {"branin", branin, {-5, 0}, {10, 15}, {0.6, 0.8}, 0.397887 + 0.2},
    {"styblinski_tang4",
     styblinski_tang,
     {-5, -5, -5, -5},
     {5, 5, 5, 5},
     {0.4, 0.4, 0.4, 0.4},
     -156.66 + 12.0},
};

hps::SearchSpace space_of(const Task& task) {
  hps::SearchSpace s;
  for (std::size_t i = 0; i < task.low.size(); ++i) {
    std::string name = "x";
    name += std::to_string(i);
    s.add(name, hps::Distribution::make_float(task.low[i], task.high[i]));
  }
  return s;
}

hps::Objective objective_of(const Task& task, bool shifted) {
  return [&task, shifted](hps::Trial& t) {
    std::vector<double> x(task.low.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::string name = "x";
      name += std::to_string(i);
      x[i] = t.param(name).get<double>() - (shifted ? task.shift[i] : 0.0);
    }
    return task.f(x);
  };
}

hps::Study new_study(const std::shared_ptr<hps::Storage>& storage, const Task& task,
                     const std::string& name, std::uint64_t seed,
                     const char* weighting = "similarity") {
  hps::StudyOptions o;
  o.space = space_of(task);
  o.sampler = hps::make_sampler(Json{{"type", "tpe"}, {"warm_start_weighting", weighting}}, seed);
  return hps::Study::create(storage, name, hps::StudyDirection::kMinimize, o);
}

// Runs `study` on the shifted task until the target; the 1-based number of
// the first new trial at or below it, nullopt if none within max_trials.
std::optional<int> trials_to_target(hps::Study& study, const Task& task, int max_trials) {
  std::atomic<bool> stop{false};
  int ran = 0;
  std::optional<int> reached;
  hps::OptimizeOptions opt;
  opt.n_trials = max_trials;
  opt.stop = &stop;
  opt.callback = [&](const hps::FrozenTrial& t) {
    ++ran;
    if (!reached && t.value && *t.value <= task.target) {
      reached = ran;
      stop = true;
    }
  };
  study.optimize(objective_of(task, true), opt);
  return reached;
}

struct Tally {
  std::vector<double> reached;  // trials, for seeds that reached the target
  int runs = 0;
  void add(std::optional<int> n) {
    ++runs;
    if (n) reached.push_back(*n);
  }
  // Median trials to target, counting a miss as max_trials + 1 (so a
  // method that misses often has a high median).
  double median(int max_trials) const {
    std::vector<double> all = reached;
    all.resize(static_cast<std::size_t>(runs), max_trials + 1.0);
    std::sort(all.begin(), all.end());
    if (all.empty()) return 0;
    const std::size_t n = all.size();
    return n % 2 ? all[n / 2] : 0.5 * (all[n / 2 - 1] + all[n / 2]);
  }
  double success() const { return runs ? static_cast<double>(reached.size()) / runs : 0; }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"warm_start: trials to target on a shifted function, cold vs warm vs enqueue"};
  int seeds = 20, old_trials = 50, max_trials = 100;
  std::string optuna = "live";
  double shift_scale = 1.0;
  app.add_option("--seeds", seeds, "seeds 0..N-1")->capture_default_str();
  app.add_option("--old-trials", old_trials, "trials of the old study")->capture_default_str();
  app.add_option("--max-trials", max_trials, "most trials of a new study")->capture_default_str();
  app.add_option("--shift-scale", shift_scale,
                 "multiplies every shift (0.5: a smaller change of the function)")
      ->capture_default_str();
  app.add_option("--optuna", optuna, "live (run Optuna now) or none")
      ->check(CLI::IsMember({"live", "none"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  for (Task& task : kTasks)
    for (double& s : task.shift) s *= shift_scale;

  std::map<std::string, std::map<std::string, Tally>> tally;  // func -> mode -> tally
  const auto t0 = std::chrono::steady_clock::now();
  for (const Task& task : kTasks) {
    for (int seed = 0; seed < seeds; ++seed) {
      const auto useed = static_cast<std::uint64_t>(seed);
      auto old_store = std::make_shared<hps::InMemoryStorage>();
      hps::Study old = new_study(old_store, task, "old", useed + 1000);
      old.optimize(objective_of(task, false), {.n_trials = old_trials});

      hps::Study cold = new_study(std::make_shared<hps::InMemoryStorage>(), task, "new", useed);
      tally[task.name]["cold"].add(trials_to_target(cold, task, max_trials));

      hps::Study warm = new_study(std::make_shared<hps::InMemoryStorage>(), task, "new", useed);
      (void)hps::copy_warm_start(warm, *old_store, "memory", "old");
      tally[task.name]["warm"].add(trials_to_target(warm, task, max_trials));

      hps::Study none =
          new_study(std::make_shared<hps::InMemoryStorage>(), task, "new", useed, "none");
      (void)hps::copy_warm_start(none, *old_store, "memory", "old");
      tally[task.name]["warm_none"].add(trials_to_target(none, task, max_trials));

      hps::Study enq = new_study(std::make_shared<hps::InMemoryStorage>(), task, "new", useed);
      enq.enqueue_trial(old.best_trial()->params);
      tally[task.name]["enqueue"].add(trials_to_target(enq, task, max_trials));
    }
  }
  const double ours_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  double optuna_s = 0;
  if (optuna == "live") {
    Json spec{{"seeds", Json::array()},
              {"old_trials", old_trials},
              {"max_trials", max_trials},
              {"functions", Json::array()}};
    for (int s = 0; s < seeds; ++s) spec["seeds"].push_back(s);
    for (const Task& task : kTasks)
      spec["functions"].push_back(Json{{"name", task.name},
                                       {"dim", task.low.size()},
                                       {"low", task.low},
                                       {"high", task.high},
                                       {"shift", task.shift},
                                       {"target", task.target}});
    const std::string spec_file = (std::filesystem::temp_directory_path() /
                                   ("warm_start_spec_" + std::to_string(getpid()) + ".json"))
                                      .string();
    std::ofstream(spec_file) << spec.dump();
    const auto t1 = std::chrono::steady_clock::now();
    for (const Json& line :
         hps::bench::run_json_lines("/usr/bin/python3 " + std::string(HPSEARCH_SOURCE_DIR) +
                                    "/bench/warm_start_optuna.py " + spec_file)) {
      const Json& n = line["trials"];
      tally[line["func"].get<std::string>()]["optuna_" + line["mode"].get<std::string>()].add(
          n.is_null() ? std::nullopt : std::optional<int>(n.get<int>()));
    }
    optuna_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::filesystem::remove(spec_file);
  }

  std::printf(
      "warm_start: trials to reach the target on a shifted copy (median over %d seeds, a miss "
      "counted as %d; success = reached within %d)\nold study: %d TPE trials on the original; "
      "shifts x %g; %s\n\n",
      seeds, max_trials + 1, max_trials, old_trials, shift_scale,
      hps::bench::machine_description().c_str());
  std::printf(
      "| function | target | cold TPE | warm-started TPE | warm-started, weighting none "
      "| enqueue old best | Optuna cold | Optuna enqueue old best | cold / warm "
      "| cold / warm (none) | Optuna enqueue / warm |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Task& task : kTasks) {
    auto& m = tally[task.name];
    auto cell = [&](const std::string& mode) {
      if (!m.count(mode)) return std::string("-");
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f (%.0f%%)", m[mode].median(max_trials),
                    100 * m[mode].success());
      return std::string(buf);
    };
    // The median of mode a over that of mode b.
    auto ratio = [&](const std::string& a, const std::string& b) {
      if (!m.count(a) || !m.count(b)) return std::string("-");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", m[a].median(max_trials) / m[b].median(max_trials));
      return std::string(buf);
    };
    std::printf("| %s | %.4g | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", task.name.c_str(),
                task.target, cell("cold").c_str(), cell("warm").c_str(), cell("warm_none").c_str(),
                cell("enqueue").c_str(), cell("optuna_cold").c_str(),
                cell("optuna_enqueue").c_str(), ratio("cold", "warm").c_str(),
                ratio("cold", "warm_none").c_str(), ratio("optuna_enqueue", "warm").c_str());
  }
  std::printf("\nours %.1f s, Optuna %.1f s (wall time of each side)\n", ours_s, optuna_s);
  return 0;
}
