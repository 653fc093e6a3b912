// tpe_quality: best value after N trials over S seeds on five synthetic
// functions, for the random sampler, TPE and multivariate TPE, printed beside
// Optuna's figures for the same functions and domains.
//
//   tpe_quality [--trials 100] [--seeds 20] [--seed-offset 0] [--func NAME]... [--jobs 1]
//               [--sampler LABEL=JSON]... [--tpe JSON]
//               [--optuna saved|live|none|FILE] [--save-optuna FILE]
//               [--markdown] [--json FILE]
//
// --sampler adds a sampler configuration (the "sampler" section of
// space.json); without it the set is random, tpe (our defaults with
// multivariate false) and tpe_multivariate (our defaults with multivariate
// true). --tpe JSON is merged into both TPE configurations (to try options).
// --optuna: "saved" (default) reads bench/reference/optuna_quality.jsonl,
// "live" runs ../shared/bench/optuna_reference.py with /usr/bin/python3 now
// (several minutes), "none" skips Optuna, anything else is a file to read.
// --seed-offset K runs seeds K..K+S-1 (tune options on other seeds than the
// reported ones; Optuna's figures are for seeds 0..S-1).
// --save-optuna FILE writes the live run's lines (with a "meta" line: date,
// machine, command) for later runs.
// Functions: branin (2-D), hartmann6 (6-D), styblinski_tang (10-D),
// rosenbrock (4-D), ackley (5-D), all minimized over their usual domains
// (objectives/synthetic.h), with params x0..x{N-1} as floats.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/factory.h"
#include "bench/bench_util.h"
#include "objectives/synthetic.h"
#include "search/storage.h"
#include "search/study.h"

namespace {

// "x<i>" (built by appending: GCC 12 at -O3 warns falsely, -Wrestrict, on
// "literal" + std::to_string(i)).
std::string x_name(std::size_t i) {
  std::string s = "x";
  s += std::to_string(i);
  return s;
}

using hps::Json;

struct Problem {
  std::string name;         // ours
  std::string optuna_name;  // the reference script's
  std::size_t dim;
};

const std::vector<Problem> kProblems = {
    {"branin", "branin", 2},
    {"hartmann6", "hartmann6", 6},
    {"styblinski_tang", "styblinski10", 10},
    {"rosenbrock", "rosenbrock4", 4},
    {"ackley", "ackley5", 5},
};

struct SamplerConfig {
  std::string label;
  Json config;
  std::string optuna_label;  // the reference script's sampler name, if comparable
};

double run_once(const Problem& p, const Json& sampler_config, int seed, int n_trials) {
  const hps::SyntheticFunction* f = hps::find_synthetic_function(p.name);
  if (!f) throw std::runtime_error("unknown function " + p.name);
  hps::SearchSpace space;
  for (std::size_t i = 0; i < p.dim; ++i)
    space.add(x_name(i), hps::Distribution::make_float(f->low_at(i), f->high_at(i)));
  hps::StudyOptions opt;
  opt.sampler = hps::make_sampler(sampler_config, static_cast<std::uint64_t>(seed));
  opt.space = space;
  auto storage = std::make_shared<hps::InMemoryStorage>();
  auto study = hps::Study::create(storage, "q", hps::StudyDirection::kMinimize, opt);
  std::vector<double> x(p.dim);
  for (int t = 0; t < n_trials; ++t) {
    hps::Trial trial = study.ask();
    for (std::size_t i = 0; i < p.dim; ++i) x[i] = trial.param(x_name(i)).get<double>();
    study.tell(trial, f->function(x));
  }
  return study.best_value();
}

struct Result {
  std::vector<double> bests;
  double mean = 0, median = 0;
};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

int usage(const char* msg) {
  if (msg) std::cerr << "tpe_quality: " << msg << "\n";
  std::cerr << "usage: tpe_quality [--trials N] [--seeds S] [--seed-offset K] [--func NAME]... "
               "[--jobs J]\n"
               "                   [--sampler LABEL=JSON]... [--tpe JSON]\n"
               "                   [--optuna saved|live|none|FILE] [--save-optuna FILE]\n"
               "                   [--markdown] [--json FILE]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int n_trials = 100, n_seeds = 20, jobs = 1, seed_offset = 0;
  std::vector<std::string> funcs;
  std::vector<SamplerConfig> samplers;
  Json tpe_extra = Json::object();
  std::string optuna = "saved", save_optuna, json_out;
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--trials")
        n_trials = std::stoi(next());
      else if (a == "--seeds")
        n_seeds = std::stoi(next());
      else if (a == "--seed-offset")
        seed_offset = std::stoi(next());
      else if (a == "--jobs")
        jobs = std::max(1, std::stoi(next()));
      else if (a == "--func")
        funcs.push_back(next());
      else if (a == "--sampler") {
        std::string v = next();
        auto eq = v.find('=');
        if (eq == std::string::npos) return usage("--sampler needs LABEL=JSON");
        samplers.push_back({v.substr(0, eq), Json::parse(v.substr(eq + 1)), ""});
      } else if (a == "--tpe")
        tpe_extra = Json::parse(next());
      else if (a == "--optuna")
        optuna = next();
      else if (a == "--save-optuna")
        save_optuna = next();
      else if (a == "--markdown")
        markdown = true;
      else if (a == "--json")
        json_out = next();
      else
        return usage(("unknown argument " + a).c_str());
    } catch (const std::exception& e) {
      return usage(e.what());
    }
  }
  if (samplers.empty()) {
    Json uni = {{"type", "tpe"}, {"multivariate", false}};
    Json multi = {{"type", "tpe"}, {"multivariate", true}};
    uni.update(tpe_extra);
    multi.update(tpe_extra);
    samplers = {{"random", {{"type", "random"}}, "random"},
                {"tpe", uni, "tpe"},
                {"tpe_multivariate", multi, "tpe_multivariate"}};
  }
  std::vector<Problem> problems;
  for (const auto& p : kProblems)
    if (funcs.empty() || std::find(funcs.begin(), funcs.end(), p.name) != funcs.end())
      problems.push_back(p);
  if (problems.empty()) return usage("no known --func given");

  // Optuna's figures.
  std::map<std::pair<std::string, std::string>, Json> ref;  // (optuna func, sampler) -> line
  std::string ref_note = "none";
  try {
    std::vector<Json> lines;
    if (optuna == "live") {
      std::string cmd = "/usr/bin/python3 ";
      cmd += hps::bench::default_optuna_script();
      cmd += " quality ";
      cmd += std::to_string(n_trials);
      cmd += " ";
      cmd += std::to_string(n_seeds);
      for (const auto& p : problems) cmd += " " + p.optuna_name;
      std::cerr << "running Optuna: " << cmd << "\n";
      auto t0 = std::chrono::steady_clock::now();
      lines = hps::bench::run_json_lines(cmd);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ref_note = "measured live in this run (" + fmt(s) + " s)";
      if (!save_optuna.empty()) {
        std::ofstream out(save_optuna);
        out << Json({{"kind", "meta"},
                     {"date", hps::bench::today()},
                     {"machine", hps::bench::machine_description()},
                     {"command", cmd}})
                   .dump()
            << "\n";
        for (const auto& l : lines) out << l.dump() << "\n";
      }
    } else if (optuna != "none") {
      std::string file = optuna == "saved" ? std::string(HPSEARCH_SOURCE_DIR) +
                                                 "/bench/reference/optuna_quality.jsonl"
                                           : optuna;
      lines = hps::bench::read_json_lines(file);
      ref_note = "read from " + file;
    }
    for (const auto& l : lines) {
      if (l.value("kind", "") == "meta") {
        ref_note += " (measured " + l.value("date", "?") + " on " + l.value("machine", "?") + ")";
      }
      if (l.value("kind", "") != "quality") continue;
      if (l.value("n_trials", 0) != n_trials || l.value("seeds", 0) != n_seeds || seed_offset != 0)
        continue;
      ref[{l.value("func", ""), l.value("sampler", "")}] = l;
    }
  } catch (const std::exception& e) {
    std::cerr << "tpe_quality: no Optuna figures: " << e.what() << "\n";
    ref_note = std::string("unavailable (") + e.what() + ")";
  }

  // Our runs: every (problem, sampler, seed), spread over `jobs` threads.
  struct Task {
    std::size_t p, s;
    int seed;
  };
  std::vector<Task> tasks;
  for (std::size_t p = 0; p < problems.size(); ++p)
    for (std::size_t s = 0; s < samplers.size(); ++s)
      for (int seed = 0; seed < n_seeds; ++seed) tasks.push_back({p, s, seed});
  std::vector<std::vector<std::vector<double>>> bests(
      problems.size(),
      std::vector<std::vector<double>>(samplers.size(),
                                       std::vector<double>(static_cast<std::size_t>(n_seeds))));
  std::atomic<std::size_t> next_task{0};
  std::mutex err_mu;
  std::string error;
  auto t0 = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (std::size_t k; (k = next_task++) < tasks.size();) {
      const Task& t = tasks[k];
      try {
        bests[t.p][t.s][static_cast<std::size_t>(t.seed)] =
            run_once(problems[t.p], samplers[t.s].config, seed_offset + t.seed, n_trials);
      } catch (const std::exception& e) {
        std::lock_guard lock(err_mu);
        error = e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < jobs; ++j) threads.emplace_back(worker);
  for (auto& th : threads) th.join();
  if (!error.empty()) {
    std::cerr << "tpe_quality: " << error << "\n";
    return 1;
  }
  double ours_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::cout << "# tpe_quality: best value after " << n_trials << " trials, seeds " << seed_offset
            << ".." << seed_offset + n_seeds - 1 << " (lower is better)\n"
            << "# date " << hps::bench::today() << ", machine " << hps::bench::machine_description()
            << "\n# ours took " << fmt(ours_s) << " s; Optuna figures " << ref_note << "\n";
  for (const auto& s : samplers) std::cout << "# " << s.label << ": " << s.config.dump() << "\n";
  if (markdown) {
    std::cout
        << "\n| function | sampler | mean best | median best | Optuna mean | Optuna median |\n"
           "|---|---|---:|---:|---:|---:|\n";
  } else {
    std::printf("\n%-16s %-18s %12s %12s %12s %12s\n", "function", "sampler", "mean", "median",
                "optuna_mean", "optuna_med");
  }
  Json out = Json::array();
  for (std::size_t p = 0; p < problems.size(); ++p) {
    for (std::size_t s = 0; s < samplers.size(); ++s) {
      const auto& b = bests[p][s];
      double m = hps::bench::mean(b), md = hps::bench::median(b);
      std::string om = "-", omd = "-";
      auto it = ref.find({problems[p].optuna_name, samplers[s].optuna_label.empty()
                                                       ? samplers[s].label
                                                       : samplers[s].optuna_label});
      if (it != ref.end()) {
        om = fmt(it->second.value("mean_best", 0.0));
        omd = fmt(it->second.value("median_best", 0.0));
      }
      std::string fname = problems[p].name;
      fname += " ";
      fname += std::to_string(problems[p].dim);
      fname += "-D";
      if (markdown)
        std::cout << "| " << fname << " | " << samplers[s].label << " | " << fmt(m) << " | "
                  << fmt(md) << " | " << om << " | " << omd << " |\n";
      else
        std::printf("%-16s %-18s %12s %12s %12s %12s\n", fname.c_str(), samplers[s].label.c_str(),
                    fmt(m).c_str(), fmt(md).c_str(), om.c_str(), omd.c_str());
      out.push_back({{"func", problems[p].name},
                     {"sampler", samplers[s].label},
                     {"config", samplers[s].config},
                     {"mean_best", m},
                     {"median_best", md},
                     {"bests", b}});
    }
  }
  if (!json_out.empty()) {
    std::ofstream f(json_out);
    f << out.dump(1) << "\n";
  }
  return 0;
}
