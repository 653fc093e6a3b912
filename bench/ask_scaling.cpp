// ask_scaling: time of Study::ask + Study::tell per block of trials as the
// history grows, through the embedding API, beside Optuna 3.1's ask/tell
// (bench/ask_scaling_optuna.py, in-memory storage) in the same run.
//
//   ask_scaling [--trials 10000] [--block 1000] [--samplers random,tpe]
//               [--storages memory,sqlite] [--optuna-trials 10000]
//               [--optuna-tpe-trials 2000] [--no-optuna]
//
// A declared space of 6 float params on [0, 1], value sum((x_i - 0.5)^2),
// one thread. Samplers: random (RandomSampler, seed 1) and tpe (TpeSampler,
// seed 1, n_startup_trials = trials + 1: every trial is a startup trial, so
// what grows is the cost of the history around the sampler, not TPE's
// model). Storages: "memory" (open_storage(":memory:")) and "sqlite" (a new
// file in a temporary folder, open_storage(path)).
//
// Prints, per sampler and storage, the seconds of each block and the ratio
// last block / first block (1.0 = constant cost per trial), then Optuna's
// blocks and the ratio of ours to Optuna's per block. Optuna's TPE in
// startup mode costs O(n) per trial with a large constant (about 28 s for
// its first 1,000 trials here), so it runs --optuna-tpe-trials only.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "algorithms/random_sampler.h"
#include "algorithms/tpe_sampler.h"
#include "bench/bench_util.h"
#include "search/storage.h"
#include "search/study.h"

namespace {

constexpr int kParams = 6;

hps::SearchSpace make_space() {
  hps::Json doc = hps::Json::object();
  for (int i = 0; i < kParams; ++i)
    doc["x" + std::to_string(i)] = {{"type", "float"}, {"low", 0.0}, {"high", 1.0}};
  return hps::SearchSpace::from_json(doc);
}

std::shared_ptr<hps::Sampler> make_sampler(const std::string& name, std::int64_t n_trials) {
  if (name == "random") return std::make_shared<hps::RandomSampler>(1);
  if (name == "tpe") {
    hps::TpeOptions o;
    o.seed = 1;
    o.n_startup_trials = static_cast<std::size_t>(n_trials) + 1;
    return std::make_shared<hps::TpeSampler>(o);
  }
  throw std::runtime_error("unknown sampler: " + name);
}

// Seconds of each block of `block` ask+tell pairs.
std::vector<double> run_ours(const std::string& sampler, const std::string& storage_url,
                             std::int64_t n_trials, std::int64_t block) {
  hps::StudyOptions opt;
  opt.sampler = make_sampler(sampler, n_trials);
  opt.space = make_space();
  auto study = hps::Study::create(hps::open_storage(storage_url), "ask-scaling",
                                  hps::StudyDirection::kMinimize, opt);
  std::vector<double> blocks;
  auto start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < n_trials; ++i) {
    hps::Trial trial = study.ask();
    double value = 0;
    for (const auto& [name, v] : trial.params())
      value += (v.get<double>() - 0.5) * (v.get<double>() - 0.5);
    study.tell(trial, value);
    if ((i + 1) % block == 0) {
      auto now = std::chrono::steady_clock::now();
      blocks.push_back(std::chrono::duration<double>(now - start).count());
      start = now;
    }
  }
  return blocks;
}

void print_blocks(const std::string& label, const std::vector<double>& blocks, std::int64_t block) {
  std::printf("%-22s", label.c_str());
  for (double b : blocks) std::printf(" %8.1f", b / static_cast<double>(block) * 1e6);
  if (!blocks.empty() && blocks.front() > 0)
    std::printf("   last/first %.2f", blocks.back() / blocks.front());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Study::ask + tell time per block of trials, beside Optuna"};
  std::int64_t n_trials = 10000;
  std::int64_t block = 1000;
  std::int64_t optuna_trials = 10000;
  std::int64_t optuna_tpe_trials = 2000;
  std::string samplers = "random,tpe";
  std::string storages = "memory,sqlite";
  bool no_optuna = false;
  app.add_option("--trials", n_trials, "trials per run")->check(CLI::PositiveNumber);
  app.add_option("--block", block, "trials per timed block")->check(CLI::PositiveNumber);
  app.add_option("--samplers", samplers, "comma-separated: random, tpe");
  app.add_option("--storages", storages, "comma-separated: memory, sqlite");
  app.add_option("--optuna-trials", optuna_trials, "Optuna random: trials")
      ->check(CLI::PositiveNumber);
  app.add_option("--optuna-tpe-trials", optuna_tpe_trials, "Optuna TPE (startup): trials")
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-optuna", no_optuna, "do not run Optuna");
  CLI11_PARSE(app, argc, argv);
  if (n_trials < block) {
    std::fprintf(stderr, "--trials must be >= --block\n");
    return 2;
  }

  std::vector<std::string> sampler_list;
  std::vector<std::string> storage_list;
  {
    std::stringstream ss(samplers);
    for (std::string s; std::getline(ss, s, ',');) sampler_list.push_back(s);
    std::stringstream st(storages);
    for (std::string s; std::getline(st, s, ',');) storage_list.push_back(s);
  }
  auto dir = std::filesystem::temp_directory_path() / ("ask_scaling_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);

  std::printf("ask_scaling: %s, %s; %lld trials, microseconds per ask+tell per block of %lld\n",
              hps::bench::today().c_str(), hps::bench::machine_description().c_str(),
              static_cast<long long>(n_trials), static_cast<long long>(block));
  std::map<std::string, std::vector<double>> ours;  // "sampler/storage"
  for (const auto& sampler : sampler_list) {
    for (const auto& storage : storage_list) {
      std::string url = ":memory:";
      if (storage == "sqlite")
        url = (dir / (sampler + ".db")).string();
      else if (storage != "memory")
        throw std::runtime_error("unknown storage: " + storage);
      auto blocks = run_ours(sampler, url, n_trials, block);
      print_blocks("hpsearch " + sampler + "/" + storage, blocks, block);
      ours[sampler + "/" + storage] = blocks;
    }
  }
  std::filesystem::remove_all(dir);
  if (no_optuna) return 0;

  for (const auto& sampler : sampler_list) {
    const std::int64_t n = sampler == "tpe" ? std::min(optuna_tpe_trials, n_trials)
                                            : std::min(optuna_trials, n_trials);
    std::string cmd = "/usr/bin/python3 " + std::string(HPSEARCH_SOURCE_DIR) +
                      "/bench/ask_scaling_optuna.py " + std::to_string(n) + " " +
                      std::to_string(block) + " " + sampler;
    auto lines = hps::bench::run_json_lines(cmd);
    if (lines.empty()) throw std::runtime_error("no output from: " + cmd);
    auto blocks = lines.front().at("block_s").get<std::vector<double>>();
    print_blocks("optuna " + lines.front().at("optuna").get<std::string>() + " " + sampler, blocks,
                 block);
    const auto& mine =
        ours.count(sampler + "/memory") ? ours[sampler + "/memory"] : ours.begin()->second;
    std::printf("%-22s", ("optuna/ours " + sampler).c_str());
    for (std::size_t i = 0; i < blocks.size() && i < mine.size(); ++i)
      std::printf(" %8.1f", blocks[i] / mine[i]);
    std::printf("   (Optuna's time / ours, in-memory, per block)\n");
  }
  return 0;
}
