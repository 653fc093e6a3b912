// hpsearch run space.json / hpsearch resume STORAGE: a coordinator in this
// process and N local worker processes (hpsearch worker) of this binary.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "algorithms/factory.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/table.h"
#include "coordinator/coordinator.h"
#include "objectives/objective.h"
#include "protocol/curve_keys.h"
#include "protocol/protocol.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/util/storage_url.h"
#include "workers/local_pool.h"
#include "workers/worker.h"

namespace hps::cli {

namespace {

using Steady = std::chrono::steady_clock;

// Applies the command line's study name, storage and budget to `config`,
// checking them and the run's other numbers.
void apply_command_line(StudyConfig& config, const RunOptions& o) {
  if (o.study) {
    if (o.study->empty()) throw ConfigError("--study", "must not be empty");
    config.name = *o.study;
  }
  if (o.storage) config.storage = *o.storage;
  if (o.n_trials) {
    if (*o.n_trials <= 0) throw ConfigError("--n-trials", "must be > 0");
    config.budget.n_trials = o.n_trials;
  }
  if (o.timeout_s) {
    if (!(*o.timeout_s > 0)) throw ConfigError("--timeout", "must be > 0 (seconds)");
    config.budget.timeout_s = o.timeout_s;
  }
  if (o.workers < 0) throw ConfigError("--workers", "must be >= 0 (0: remote workers only)");
  protocol::check_heartbeat_settings(o.heartbeat_ms, "--heartbeat-ms", o.liveness, "--liveness");
  if (o.max_retries < 0) throw ConfigError("--max-retries", "must be >= 0");
}

// The coordinator's options, checked (endpoint, keys) before the store is
// touched.
CoordinatorOptions coordinator_options(const StudyConfig& config, const RunOptions& o) {
  CoordinatorOptions co;
  co.endpoint = o.bind.value_or("");
  co.heartbeat_interval_ms = o.heartbeat_ms;
  co.liveness = o.liveness;
  co.max_retries = o.max_retries;
  co.n_trials = config.budget.n_trials;
  co.timeout_s = config.budget.timeout_s;
  co.max_workers = o.max_workers;
  // Trust: a tcp --bind needs keys (--keys or $HPSEARCH_KEYS_DIR) or --insecure.
  const bool tcp = o.bind && o.bind->rfind("tcp://", 0) == 0;
  if (o.keys_dir) {
    co.keys_dir = *o.keys_dir;
  } else if (const char* env = std::getenv(kKeysDirEnv); env && *env && tcp && !o.insecure) {
    co.keys_dir = env;
  }
  co.insecure = o.insecure;
  if (tcp && co.keys_dir.empty() && !o.insecure)
    throw ConfigError("--bind",
                      "a tcp endpoint needs CURVE keys, or anyone who reaches it joins as a "
                      "worker: make them once with `hpsearch keys init KEYS --workers N`, then "
                      "pass --keys KEYS (or set " +
                          std::string(kKeysDirEnv) +
                          "); --insecure binds without keys (trusted networks only)");
  if (!o.bind && o.keys_dir)
    spdlog::warn("--keys has no effect without --bind (local workers use a private ipc socket)");
  co.validate();  // a bad --bind is refused before the store is touched
  // Bad keys (missing folder, a secret readable by others, not Z85) too.
  if (o.bind && !co.keys_dir.empty()) (void)curve::load_coordinator_keys(co.keys_dir);
  return co;
}

// Opens the study (continues it if it exists).
Study open_study(const StudyConfig& config, const std::shared_ptr<Storage>& storage,
                 std::shared_ptr<Sampler> sampler, std::shared_ptr<Pruner> pruner) {
  StudyOptions so;
  so.sampler = std::move(sampler);
  so.pruner = std::move(pruner);
  so.space = config.space;
  Study study = Study::load_if_exists(storage, config.name, config.direction, so, config.source);
  StudyInfo info = storage->get_study(study.study_id());
  if (!info.config.is_null() && info.config.contains("space") &&
      info.config["space"] != config.source["space"])
    spdlog::warn(
        "study '{}': the search space differs from the one stored with the study; "
        "continuing with the new one",
        config.name);
  return study;
}

// Stores the run's settings with the study: the file's, with the command
// line's budget, so that hpsearch resume continues with them.
void store_settings(Storage& storage, std::int64_t study_id, const StudyConfig& config,
                    const RunOptions& o) {
  Json stored = config.source;
  if (stored.is_object()) {
    if (o.n_trials) stored["budget"]["n_trials"] = *o.n_trials;
    if (o.timeout_s) stored["budget"]["timeout_s"] = *o.timeout_s;
  }
  storage.set_study_config(study_id, stored);
}

// Tells the user where remote workers connect.
void print_endpoints(const Coordinator& coordinator, const CoordinatorOptions& co,
                     const RunOptions& o) {
  if (o.bind || o.workers == 0)
    std::cout << "Coordinator listening on " << coordinator.endpoint()
              << (o.workers == 0 ? " (waiting for workers: hpsearch worker --connect ENDPOINT)"
                                 : "")
              << "\n";
  if (o.bind && !co.keys_dir.empty())
    std::cout << "Workers with keys from " << co.keys_dir << " connect with: hpsearch worker "
              << "--connect " << coordinator.endpoint() << " --keys " << co.keys_dir
              << "/worker-N\n";
}

// The local workers' options.
LocalPoolOptions pool_options(const StudyConfig& config, const RunOptions& o,
                              const Coordinator& coordinator, std::vector<std::string> gpus) {
  LocalPoolOptions po;
  po.workers = o.workers;
  po.endpoint = coordinator.local_endpoint();
  po.gpus = std::move(gpus);
  // Per-trial logs (the "command" objective) go next to the storage file.
  std::string parent = ".";
  if (util::StorageUrl url = util::parse_storage_url(config.storage); !url.in_memory)
    parent = std::filesystem::path(url.path).parent_path().string();
  po.extra_args = {"--log-level", o.log_level, "--log-dir", study_log_dir(config.name, parent),
                   "--allow-command"};  // the study's own objective, on this machine
  return po;
}

// The progress line: the coordinator's figures, and each ended trial.
class ProgressLine {
 public:
  ProgressLine(Coordinator& coordinator, const StudyConfig& config)
      : coordinator_(coordinator), progress_(stdout, isatty(STDOUT_FILENO) == 1) {
    ps_.n_trials = config.budget.n_trials;
    ps_.timeout_s = config.budget.timeout_s;
    draw(true);
    coordinator_.set_trial_callback([this](const FrozenTrial& t) { trial_ended(t); });
  }

  // Redraws (at most every 500 ms unless `force`).
  void draw(bool force = false) {
    if (!force && Steady::now() - last_draw_ <= std::chrono::milliseconds(500)) return;
    fill();
    progress_.update(ps_, "", force);
    last_draw_ = Steady::now();
  }
  void finish() { progress_.finish(); }
  double elapsed_s() const { return progress_.elapsed_s(); }

 private:
  void fill() {
    CoordinatorStats s = coordinator_.stats();
    ps_.finished = s.finished;
    ps_.best_value = s.best_value;
    ps_.best_number = s.best_number;
    ps_.extra = fmt::format("workers {} busy / {} idle", s.workers_busy, s.workers_idle);
  }
  void trial_ended(const FrozenTrial& t) {
    fill();
    std::string last = fmt::format("trial {} {}", t.number, to_string(t.state));
    if (t.value) last += " " + format_value(*t.value);
    if (t.state == TrialState::kFail) last += " (" + t.fail_reason + ")";
    progress_.update(ps_, last, t.state == TrialState::kFail);
  }

  Coordinator& coordinator_;
  Progress progress_;
  ProgressState ps_;
  Steady::time_point last_draw_ = Steady::now();
};

// Steps the coordinator until the study is done (stop() on the first stop
// signal), telling it of exited local workers. Returns false if every
// local worker failed to start.
bool run_until_done(Coordinator& coordinator, LocalWorkerPool& pool, ProgressLine& progress,
                    const RunOptions& o) {
  std::atomic<bool>* stop = install_stop_handlers();
  bool stopped = false;
  while (true) {
    if (stop->load() && !stopped) {
      stopped = true;
      coordinator.stop("interrupted");
    }
    bool more = coordinator.step(50);
    for (const auto& w : pool.poll()) {
      if (coordinator.done())
        spdlog::debug("worker {} (pid {}) {}", w.slot, w.pid, w.how);
      else
        spdlog::warn("worker {} (pid {}) {}", w.slot, w.pid, w.how);
      coordinator.worker_exited(w.pid);
    }
    if (!more) return true;
    CoordinatorStats stats = coordinator.stats();
    if (o.workers > 0 && pool.all_given_up() && stats.workers_busy + stats.workers_idle == 0)
      return false;
    progress.draw();
  }
}

// Lets the local workers exit (they were told to), answering them for a
// grace period, then ends the pool.
void let_workers_exit(Coordinator& coordinator, LocalWorkerPool& pool, int heartbeat_ms) {
  pool.stop_restarting();
  auto grace = std::chrono::milliseconds(std::max(2000, 2 * heartbeat_ms));
  auto until = Steady::now() + grace;
  while (pool.running() > 0 && Steady::now() < until) {
    coordinator.step(20);
    for (const auto& w : pool.poll()) coordinator.worker_exited(w.pid);
  }
  pool.shutdown(0.0);
}

// The objective type's post-study step (torch.fashion_mnist: the best
// trial scored on the test set, with the trials' threads, in this process);
// its errors are reported as warnings (objectives/objective.h).
void after_study(const StudyConfig& config, Study& study) {
  if (stop_signal()) return;
  ObjectiveContext octx;
  octx.study_name = config.name;
  octx.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  octx.direction = config.direction;
  (void)run_after_study(config.objective, config.space, study, octx, std::cout);
}

int run_study(StudyConfig config, const RunOptions& o) {
  if (needs_torch(config.objective)) exec_torch_sibling("LibTorch objective");
  // 1. Check everything before touching the store.
  apply_command_line(config, o);
  std::vector<std::string> gpus = o.gpus ? parse_gpu_list(*o.gpus) : detect_gpus();
  auto sampler = make_sampler(config.sampler, o.seed);
  auto pruner = make_pruner(config.pruner);
  validate_objective(config.objective, config.space);
  if (o.workers > LocalPoolOptions::kMaxWorkers)
    throw ConfigError("--workers", "must be <= " + std::to_string(LocalPoolOptions::kMaxWorkers));
  if (!config.budget.n_trials && !config.budget.timeout_s)
    spdlog::warn("no budget (n_trials or timeout_s): running until interrupted");
  const CoordinatorOptions co = coordinator_options(config, o);

  // 2. Open the study (continue it if it exists).
  auto storage = open_storage(config.storage);
  Study study = open_study(config, storage, sampler, pruner);
  Coordinator coordinator(study, config.objective, co);
  // Once the coordinator runs (its endpoint bound, the study taken over),
  // the settings stored with the study become this run's.
  store_settings(*storage, study.study_id(), config, o);
  CoordinatorStats start = coordinator.stats();
  if (start.finished > 0 || start.waiting > 0)
    spdlog::info("continuing study '{}': {} finished trials, {} queued", config.name,
                 start.finished, start.waiting);
  if (config.budget.n_trials && start.finished >= *config.budget.n_trials) {
    std::cout << "Budget of " << *config.budget.n_trials << " trials already reached.\n\n"
              << summary(study, 0.0);
    return kExitOk;
  }
  print_endpoints(coordinator, co, o);

  // 3. Local workers.
  LocalWorkerPool pool(pool_options(config, o, coordinator, gpus));
  if (o.workers > 0)
    spdlog::info("starting {} workers ({}, {} CPU threads each)", o.workers,
                 gpus.empty() ? std::string("cpu") : fmt::format("GPUs {}", fmt::join(gpus, ",")),
                 pool.threads_per_worker());
  pool.start();

  // 4. Run.
  ProgressLine progress(coordinator, config);
  if (!run_until_done(coordinator, pool, progress, o)) {
    pool.shutdown(0.0);
    progress.finish();
    std::cerr << "hpsearch: error: every local worker failed to start; see the messages above\n";
    return kExitFailure;
  }

  // 5. Let the workers exit (they were told to); keep answering them.
  let_workers_exit(coordinator, pool, o.heartbeat_ms);
  progress.draw(true);
  progress.finish();
  after_study(config, study);
  std::cout << "\n" << summary(study, progress.elapsed_s());
  std::cout << "Storage: " << config.storage << "\n";
  if (int sig = stop_signal()) {
    std::cout << "Interrupted; run the same command again (or hpsearch resume " << config.storage
              << ") to continue.\n";
    return 128 + sig;
  }
  return kExitOk;
}

}  // namespace

int run_command(const RunOptions& o) { return run_study(StudyConfig::from_file(o.space_file), o); }

int resume_command(const RunOptions& o) {
  if (!o.storage) throw ConfigError("STORAGE", "is required");
  const std::string& path = *o.storage;
  if (util::StorageUrl url = util::parse_storage_url(path);
      !url.in_memory && !std::filesystem::exists(url.path))
    throw ConfigError(path, "no such storage file");
  auto storage = open_storage(path);
  std::vector<StudyInfo> studies = storage->list_studies();
  const StudyInfo* chosen = nullptr;
  if (o.study) {
    for (const auto& s : studies)
      if (s.name == *o.study) chosen = &s;
    if (!chosen) throw ConfigError("--study", "no study named '" + *o.study + "' in " + path);
  } else {
    if (studies.empty()) throw ConfigError(path, "the storage holds no study");
    if (studies.size() > 1) {
      std::string names;
      for (const auto& s : studies) names += (names.empty() ? "" : ", ") + ("'" + s.name + "'");
      throw ConfigError("--study", "the storage holds several studies (" + names + "); name one");
    }
    chosen = &studies[0];
  }
  if (chosen->config.is_null() || !chosen->config.is_object())
    throw ConfigError(path, "study '" + chosen->name +
                                "' has no stored settings (it was not created by hpsearch run); "
                                "use hpsearch run space.json");
  StudyConfig config = StudyConfig::from_json(chosen->config);
  RunOptions ro = o;
  ro.study = chosen->name;
  ro.storage = path;
  storage.reset();
  return run_study(std::move(config), ro);
}

}  // namespace hps::cli
