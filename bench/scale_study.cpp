// Read commands on large studies: builds studies of 100,000 and 1,000,000
// trials through the storage API and times each read command of the real
// `hpsearch` binary on them (wall time and the child's peak RSS, from
// wait4), beside Optuna 3.1 at 100,000 trials in the same run
// (bench/scale_study_optuna.py: optuna.load_study, study.best_trial,
// study.trials_dataframe() on an Optuna SQLite file of the same shape).
//
// A study: 6 float params, about 5% PRUNED and 2% FAIL trials, every 10th
// trial with 3 intermediate values, minimize. Built with
// Storage::create_trial (copied, finished trials) in transactions of
// 10,000 trials (SqliteStorage, synchronous OFF).
//
// After the read commands, a coordinator resume: `hpsearch run` of a
// space.json naming the same study with a budget of 10 more trials (the
// sleep objective with 0 s over the 6 params, random sampler, 1 local
// worker): opening the store, loading the history, the 10 trials, the
// summary (the goal at 1,000,000 trials: <= 5 s, <= 1 GB).
//
// Usage: scale_study [--trials 100000,1000000] [--optuna-trials 100000]
//                    [--skip-optuna] [--dir DIR] [--keep]
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "search/sqlite_storage.h"

namespace {

using hps::Json;
using Seconds = std::chrono::duration<double>;

// Builds a study of `n` trials in a new file `path`; returns seconds.
double build_study(const std::string& path, std::int64_t n) {
  auto start = std::chrono::steady_clock::now();
  hps::SqliteOptions options;
  options.synchronous = "OFF";
  hps::SqliteStorage storage(path, options);
  auto id = storage.create_study("scale", hps::StudyDirection::kMinimize, Json());
  std::map<std::string, hps::Distribution> dists;
  for (int p = 0; p < 6; ++p)
    dists.emplace("p" + std::to_string(p), hps::Distribution::make_float(0.0, 1.0));
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  constexpr std::int64_t kBatch = 10000;
  for (std::int64_t done = 0; done < n;) {
    std::int64_t end = std::min(n, done + kBatch);
    storage.run_in_transaction([&] {
      for (; done < end; ++done) {
        hps::NewTrial t;
        double r = u(rng);
        t.state = r < 0.05   ? hps::TrialState::kPruned
                  : r < 0.07 ? hps::TrialState::kFail
                             : hps::TrialState::kComplete;
        for (const auto& [name, d] : dists) t.params[name] = Json(u(rng));
        t.distributions = dists;
        if (t.state != hps::TrialState::kFail) t.value = u(rng);
        if (done % 10 == 0)
          for (std::int64_t step = 0; step < 3; ++step) t.intermediate_values[step] = u(rng);
        t.worker = "bench:1";
        storage.create_trial(id, t);
      }
    });
  }
  return Seconds(std::chrono::steady_clock::now() - start).count();
}

struct Run {
  double wall_s = 0;
  double peak_rss_mb = 0;
};

// Runs `hpsearch args...` with stdout to /dev/null; its wall time and peak
// RSS (wait4's rusage of the child). Throws if it fails.
Run run_cli(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {HPSEARCH_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid) throw std::runtime_error("wait4 failed");
  Run r;
  r.wall_s = Seconds(std::chrono::steady_clock::now() - start).count();
  r.peak_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("hpsearch " + args.front() + " failed (status " +
                             std::to_string(status) + ")");
  return r;
}

const std::vector<std::pair<std::string, std::vector<std::string>>> kCommands = {
    {"status", {"status"}},
    {"best", {"best"}},
    {"studies", {"studies"}},
    {"trials --format json", {"trials", "--format", "json"}},
    {"trials --format csv", {"trials", "--format", "csv"}},
    {"trials (table)", {"trials"}},
    {"trials --state COMPLETE --sort value --limit 10",
     {"trials", "--state", "COMPLETE", "--sort", "value", "--limit", "10"}},
};

// A space.json that continues the study in `db` for 10 more trials.
std::string write_resume_space(const std::filesystem::path& dir, const std::string& db,
                               std::int64_t n) {
  Json space = Json::object();
  for (int p = 0; p < 6; ++p)
    space["p" + std::to_string(p)] = {{"type", "float"}, {"low", 0.0}, {"high", 1.0}};
  Json doc = {{"study", {{"name", "scale"}, {"direction", "minimize"}, {"storage", db}}},
              {"sampler", {{"type", "random"}, {"seed", 1}}},
              {"budget", {{"n_trials", n + 10}}},
              {"objective", {{"type", "sleep"}, {"seconds", 0.0}}},
              {"space", space}};
  std::string path = (dir / ("resume" + std::to_string(n) + ".json")).string();
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error("cannot write " + path);
  std::string text = doc.dump(2);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return path;
}

const std::string kResume = "run: resume + 10 trials (1 worker)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpsearch read commands on large studies, beside Optuna"};
  std::vector<std::int64_t> sizes = {100000, 1000000};
  std::int64_t optuna_trials = 100000;
  bool skip_optuna = false, keep = false;
  std::string dir;
  app.add_option("--trials", sizes, "study sizes (trials)")->delimiter(',');
  app.add_option("--optuna-trials", optuna_trials, "trials of Optuna's study");
  app.add_flag("--skip-optuna", skip_optuna, "do not run Optuna");
  app.add_option("--dir", dir, "where the study files go (default: a new temporary folder)");
  app.add_flag("--keep", keep, "keep the study files");
  CLI11_PARSE(app, argc, argv);
  try {
    namespace fs = std::filesystem;
    fs::path d = dir.empty()
                     ? fs::temp_directory_path() / ("scale_study." + std::to_string(getpid()))
                     : fs::path(dir);
    fs::create_directories(d);
    std::printf("%s, %s\n", hps::bench::today().c_str(), hps::bench::machine_description().c_str());
    std::map<std::int64_t, std::map<std::string, Run>> results;
    for (auto n : sizes) {
      std::string db = (d / ("scale" + std::to_string(n) + ".db")).string();
      fs::remove(db);
      double build_s = build_study(db, n);
      std::printf("built %lld trials in %.1f s (%.0f trials/s; %.0f MB file)\n",
                  static_cast<long long>(n), build_s, static_cast<double>(n) / build_s,
                  static_cast<double>(fs::file_size(db)) / 1e6);
      std::fflush(stdout);
      for (const auto& [label, args] : kCommands) {
        std::vector<std::string> a = args;
        a.insert(a.begin() + 1, db);
        results[n][label] = run_cli(a);
      }
      results[n][kResume] = run_cli({"run", write_resume_space(d, db, n), "--workers", "1"});
      if (!keep) fs::remove(db);
    }
    std::printf("\n%-48s", "hpsearch command");
    for (auto n : sizes) std::printf(" %10lld trials   ", static_cast<long long>(n));
    std::printf("\n");
    std::vector<std::string> labels;
    for (const auto& [label, args] : kCommands) labels.push_back(label);
    labels.push_back(kResume);
    for (const auto& label : labels) {
      std::printf("%-48s", label.c_str());
      for (auto n : sizes)
        std::printf(" %9.3f s %7.1f MB", results[n][label].wall_s, results[n][label].peak_rss_mb);
      std::printf("\n");
    }
    if (!skip_optuna) {
      std::string odb = (d / "optuna.db").string();
      fs::remove(odb);
      auto lines = hps::bench::run_json_lines(
          "/usr/bin/python3 " + std::string(HPSEARCH_SOURCE_DIR) + "/bench/scale_study_optuna.py " +
          odb + " " + std::to_string(optuna_trials));
      if (!keep) fs::remove(odb);
      if (lines.empty()) throw std::runtime_error("scale_study_optuna.py printed nothing");
      const Json& o = lines.back();
      std::printf("\noptuna %s, %lld trials (built in %.1f s by executemany; peak RSS %.0f MB)\n",
                  o["optuna"].get<std::string>().c_str(), static_cast<long long>(optuna_trials),
                  o["build_s"].get<double>(), o["peak_rss_mb"].get<double>());
      double load = o["load_study_s"].get<double>();
      double best = o["best_trial_s"].get<double>();
      double df = o["trials_dataframe_s"].get<double>();
      auto it = results.find(optuna_trials);
      std::printf("%-52s %10s %10s %8s\n", "", "hpsearch", "optuna", "ratio");
      auto row = [&](const char* what, const std::string& ours, double theirs) {
        if (it == results.end()) {
          std::printf("%-52s %10s %9.3fs\n", what, "-", theirs);
          return;
        }
        double us = it->second[ours].wall_s;
        std::printf("%-52s %9.3fs %9.3fs %7.1fx\n", what, us, theirs, theirs / us);
      };
      row("best (process) vs load_study + best_trial", "best", load + best);
      row("status (process) vs load_study + best_trial", "status", load + best);
      row("trials --format csv vs load_study + trials_dataframe", "trials --format csv", load + df);
      row("trials --format json vs load_study + trials_dataframe", "trials --format json",
          load + df);
      std::printf(
          "(hpsearch: a whole process, start to exit; optuna: the calls inside one "
          "Python process, import excluded; ratio = optuna / hpsearch)\n");
    }
    if (!keep && dir.empty()) fs::remove_all(d);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scale_study: %s\n", e.what());
    return 1;
  }
  return 0;
}
