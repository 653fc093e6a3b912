// hpsearch run space.json / hpsearch resume STORAGE: a coordinator in this
// process and N local worker processes (hpsearch worker) of this binary.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "algorithms/factory.h"
#include "algorithms/study_setup.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/table.h"
#include "coordinator/coordinator.h"
#include "objectives/objective.h"
#include "protocol/curve_keys.h"
#include "protocol/protocol.h"
#include "protocol/zmq_util.h"
#include "search/printable.h"
#include "search/private_files.h"
#include "search/resources.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/study_diff.h"
#include "search/study_name.h"
#include "search/util/host.h"
#include "search/util/storage_url.h"
#include "search/warm_start.h"
#include "search/writer_lock.h"
#include "workers/local_pool.h"
#include "workers/slurm_launcher.h"
#include "workers/worker.h"

namespace hps::cli {

namespace {

using Steady = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Where the workers start: this machine's local pool, or Slurm tasks.
struct LaunchPlan {
  bool slurm = false;                   // --launcher slurm
  std::vector<std::string> slurm_args;  // --slurm-args, split as a shell would
  std::optional<std::string> bind;      // --bind, or a tcp wildcard for Slurm
  std::string slurm_worker_keys;        // the worker key folder the tasks read
  int gpus_per_task = 0;                // --gpus-per-worker under Slurm (0: not given)
};

// The folder next to the storage file: per-trial logs and the keys of
// --launcher slurm go there ("." for an in-memory storage).
std::string storage_parent(const StudyConfig& config) {
  std::string parent = ".";
  if (util::StorageUrl url = util::parse_storage_url(config.storage); !url.in_memory)
    parent = fs::path(url.path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// The endpoint as workers on other nodes reach it: a wildcard host
// (0.0.0.0, *, [::]) becomes this machine's host name.
std::string reachable_endpoint(const std::string& bound) {
  const std::string scheme = "tcp://";
  if (bound.rfind(scheme, 0) != 0) return bound;
  const auto colon = bound.rfind(':');
  const std::string host = bound.substr(scheme.size(), colon - scheme.size());
  if (host == "0.0.0.0" || host == "*" || host == "[::]" || host == "::")
    return scheme + util::host_name() + bound.substr(colon);
  return bound;
}

// The keys of --launcher slurm: DIR (--keys, else $HPSEARCH_KEYS_DIR, else
// <storage folder>/<study>.keys) holds the coordinator's keys; made (a new
// or empty folder, 0700, one worker key pair that every task uses) when it
// holds none. Returns the worker folder the tasks read, after loading it as
// a task will (curve::load_worker_keys: the keys rule, Z85) and checking
// that it pins this coordinator's key and is admitted by it, so that a bad
// worker key fails here (ConfigError, exit 2), before srun starts.
std::string slurm_worker_keys(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / curve::kCoordinatorSecretFile)) {
    curve::make_keys(dir, 1, false);
    spdlog::info("slurm: made CURVE keys for the workers in {} (owner-only; kept for resuming)",
                 dir);
  }
  const curve::CoordinatorKeys coordinator = curve::load_coordinator_keys(dir);
  std::vector<std::string> folders;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory() && entry.path().filename().string().rfind("worker-", 0) == 0)
      folders.push_back(entry.path().string());
  if (folders.empty())
    throw ConfigError(dir, "holds no worker folder (worker-N); add one with `hpsearch keys add " +
                               dir + " --workers 1`");
  std::sort(folders.begin(), folders.end());
  const std::string first = (fs::path(dir) / "worker-1").string();
  std::string chosen =
      std::find(folders.begin(), folders.end(), first) != folders.end() ? first : folders[0];
  const curve::WorkerKeys worker = curve::load_worker_keys(chosen);
  if (worker.server_key != coordinator.keys.public_key)
    throw ConfigError((fs::path(chosen) / curve::kCoordinatorPublicFile).string(),
                      "pins another coordinator key than " + dir + "/" +
                          curve::kCoordinatorSecretFile +
                          " (the tasks would refuse this coordinator); copy " + dir + "/" +
                          curve::kCoordinatorPublicFile + " there");
  if (!coordinator.authorized.count(worker.keys.public_key))
    throw ConfigError((fs::path(chosen) / curve::kWorkerSecretFile).string(),
                      "its key is not listed in " + dir + "/" + curve::kAuthorizedWorkersFile +
                          " (the coordinator would refuse the tasks); add its worker.public "
                          "line there");
  return chosen;
}

// True if the tcp endpoint's host is a loopback address (is_loopback_host:
// 127.0.0.0/8, localhost, ::1): only this machine reaches it.
bool loopback_endpoint(const std::string& endpoint) {
  const std::string scheme = "tcp://";
  if (endpoint.rfind(scheme, 0) != 0) return false;
  const auto colon = endpoint.rfind(':');
  return is_loopback_host(endpoint.substr(
      scheme.size(), colon == std::string::npos ? std::string::npos : colon - scheme.size()));
}

// --workers-per-gpu and --gpus-per-worker under --launcher slurm: Slurm
// hands GPUs to the tasks of a step whole (--gpus-per-task takes a whole
// number), so tasks share a GPU only through GPU sharding or MPS, which the
// cluster's administrators set up (GresTypes=shard or mps) and which are
// asked for by count of shards, not of workers: refused, with what to do.
// --gpus-per-worker becomes --gpus-per-task, which --slurm-args must not
// give as well. Throws ConfigError.
void check_slurm_gpu_options(const RunOptions& o, const LaunchPlan& plan) {
  if (o.workers_per_gpu)
    throw ConfigError("--workers-per-gpu",
                      "is for local workers only: Slurm gives GPUs to tasks whole "
                      "(--gpus-per-task takes a whole number), so Slurm tasks share a GPU only "
                      "through GPU sharding or MPS, which the cluster must offer; ask for it in "
                      "--slurm-args (e.g. \"--gres=shard:1\" or \"--gres=mps:25\"), or run "
                      "`hpsearch run --workers-per-gpu K` (local workers) inside an allocation");
  if (!o.gpus_per_worker) return;
  for (const auto& arg : plan.slurm_args)
    if (arg.rfind("--gpus-per-task", 0) == 0)
      throw ConfigError("--gpus-per-worker",
                        "asks for srun --gpus-per-task=" + std::to_string(*o.gpus_per_worker) +
                            ", which --slurm-args gives as well ('" + printable(arg) +
                            "'): give one of them");
}

// Checks --launcher, --slurm-args and what Slurm rules out ("srun not
// found" before anything else).
LaunchPlan launch_plan(const RunOptions& o) {
  if (o.launcher != "local" && o.launcher != "slurm")
    throw ConfigError("--launcher", "must be local or slurm, got '" + o.launcher + "'");
  LaunchPlan plan;
  plan.slurm = o.launcher == "slurm";
  plan.bind = o.bind;
  if (o.gpus_per_worker && *o.gpus_per_worker < 1)
    throw ConfigError("--gpus-per-worker", "must be >= 1 (the GPUs of each worker), got " +
                                               std::to_string(*o.gpus_per_worker));
  if (o.workers_per_gpu && *o.workers_per_gpu < 1)
    throw ConfigError("--workers-per-gpu", "must be >= 1 (the workers on each GPU), got " +
                                               std::to_string(*o.workers_per_gpu));
  if (o.gpus_per_worker && o.workers_per_gpu)
    throw ConfigError("--gpus-per-worker",
                      "cannot be combined with --workers-per-gpu: a worker either has several "
                      "GPUs of its own or shares one; give one of them");
  if (o.slurm_args) {
    if (!plan.slurm) throw ConfigError("--slurm-args", "needs --launcher slurm");
    plan.slurm_args = split_shell_words(*o.slurm_args, "--slurm-args");
  }
  // Without --bind the coordinator listens only on a private ipc socket
  // for the local workers: with none, no worker could ever join.
  if (!plan.slurm && o.workers == 0 && !o.bind)
    throw ConfigError("--workers",
                      "0 (remote workers only) needs --bind, so that remote workers can join "
                      "(e.g. --bind tcp://0.0.0.0:5555 --keys KEYS, then `hpsearch worker "
                      "--connect tcp://HOST:5555 --keys KEYS/worker-N` on each worker's "
                      "machine); without --bind the coordinator listens only on a private ipc "
                      "socket for the workers it starts itself");
  if (!plan.slurm) return plan;
  require_slurm_commands();
  if (o.workers < 1)
    throw ConfigError("--workers", "must be >= 1 with --launcher slurm (the tasks to start)");
  if (o.gpus)
    throw ConfigError("--gpus",
                      "has no effect with --launcher slurm: Slurm gives each task its GPU; ask "
                      "for them in --slurm-args (e.g. \"--gpus-per-task=1\")");
  check_slurm_gpu_options(o, plan);
  if (o.gpus_per_worker) plan.gpus_per_task = *o.gpus_per_worker;
  if (o.bind && o.bind->rfind("tcp://", 0) != 0)
    throw ConfigError("--bind",
                      "must be a tcp endpoint with --launcher slurm (workers run on "
                      "other nodes), got '" +
                          *o.bind + "'");
  if (o.bind && loopback_endpoint(*o.bind))
    spdlog::warn(
        "--bind {}: a loopback address; Slurm tasks on other nodes cannot reach it (only tasks "
        "on this node can): bind a wildcard (tcp://0.0.0.0:PORT, the default) or this node's "
        "name",
        *o.bind);
  if (o.insecure && o.keys_dir)
    throw ConfigError("--keys",
                      "cannot be combined with --insecure under --launcher slurm: the "
                      "coordinator would require keys that the tasks, started --insecure, do not "
                      "have; drop --insecure (keys are made for the tasks) or drop --keys");
  // Slurm workers connect over tcp, to a port the system picks by default.
  if (!plan.bind) plan.bind = "tcp://0.0.0.0:*";
  return plan;
}

// --gpus-per-worker and --workers-per-gpu for local workers, with the
// GPUs found (`gpus`: --gpus, CUDA_VISIBLE_DEVICES or the CUDA driver):
// --workers, when not given, becomes GPUs / K (--gpus-per-worker) or
// GPUs * K (--workers-per-gpu); the layout is checked (LocalWorkerPool
// checks it again). Without GPUs the workers run on the CPU, with a
// warning: the CPU counts as one device (--workers-per-gpu K: K workers),
// and its cores are divided among the workers. Throws ConfigError.
// The workers of a GPU layout on `g` GPUs: --workers when given, else GPUs
// / K (--gpus-per-worker) or GPUs * K (--workers-per-gpu; K with no GPU:
// the CPU counts as one device). Throws ConfigError naming the option when
// that is more than a run takes.
int layout_workers(const RunOptions& o, std::int64_t g) {
  std::int64_t workers = o.workers;
  if (!o.workers_given && g == 0 && o.workers_per_gpu) workers = *o.workers_per_gpu;
  if (!o.workers_given && g > 0)
    workers = o.gpus_per_worker ? g / *o.gpus_per_worker : g * *o.workers_per_gpu;
  const std::int64_t limit = std::min(o.max_workers, LocalPoolOptions::kMaxWorkers);
  if (workers <= limit) return static_cast<int>(workers);
  throw ConfigError(o.gpus_per_worker ? "--gpus-per-worker" : "--workers-per-gpu",
                    fmt::format("is {}: on {} that makes {} workers, more than the {} a run takes "
                                "(--max-workers, at most {}); give a smaller value, or --workers",
                                o.gpus_per_worker ? *o.gpus_per_worker : *o.workers_per_gpu,
                                g == 0 ? std::string("the CPU (no GPU found)")
                                       : fmt::format("{} GPU{}", g, g == 1 ? "" : "s"),
                                workers, limit, LocalPoolOptions::kMaxWorkers));
}

// --gpus-per-worker K with `workers` workers on `gpus` (at least one):
// refused when K or workers * K is more than the GPUs; the GPUs left over
// are named. Throws ConfigError.
void check_gpus_per_worker(std::int64_t workers, std::int64_t k,
                           const std::vector<std::string>& gpus) {
  const auto g = static_cast<std::int64_t>(gpus.size());
  const std::string list = fmt::format("{}", fmt::join(gpus, ","));
  if (k > g)
    throw ConfigError("--gpus-per-worker",
                      fmt::format("is {} but only {} GPU{} {} available ({}): give at most {}, "
                                  "or name more GPUs with --gpus",
                                  k, g, g == 1 ? "" : "s", g == 1 ? "is" : "are", list, g));
  if (workers * k > g)
    throw ConfigError("--workers", fmt::format("{} workers with --gpus-per-worker {} need {} GPUs, "
                                               "only {} are available ({}): give --workers {} or "
                                               "fewer, or --workers-per-gpu to share GPUs",
                                               workers, k, workers * k, g, list, g / k));
  if (workers * k == g) return;
  const std::vector<std::string> unused(gpus.begin() + workers * k, gpus.end());
  spdlog::info("--gpus-per-worker {}: GPU{} {} of {} {} left unused ({} worker{} with {} each)", k,
               unused.size() == 1 ? "" : "s", fmt::join(unused, ","), list,
               unused.size() == 1 ? "is" : "are", workers, workers == 1 ? "" : "s", k);
}

void apply_gpu_layout(RunOptions& o, const std::vector<std::string>& gpus, const LaunchPlan& plan) {
  if (plan.slurm || (!o.gpus_per_worker && !o.workers_per_gpu)) return;
  const std::string option = o.gpus_per_worker
                                 ? fmt::format("--gpus-per-worker {}", *o.gpus_per_worker)
                                 : fmt::format("--workers-per-gpu {}", *o.workers_per_gpu);
  const auto g = static_cast<std::int64_t>(gpus.size());
  o.workers = layout_workers(o, g);
  if (g == 0) {
    spdlog::warn(
        "{}: no GPU found (CUDA_VISIBLE_DEVICES is unset or empty and the CUDA driver reports "
        "none; --gpus names GPUs); running {} worker{} on the CPU, {} CPU thread{} each",
        option, o.workers, o.workers == 1 ? "" : "s", default_threads_per_worker(o.workers),
        default_threads_per_worker(o.workers) == 1 ? "" : "s");
  } else if (o.gpus_per_worker) {
    check_gpus_per_worker(o.workers, *o.gpus_per_worker, gpus);
  } else if (o.workers > g * *o.workers_per_gpu) {
    spdlog::warn("--workers {} with {} on {} GPUs ({}): some GPUs get more than {} workers",
                 o.workers, option, g, fmt::join(gpus, ","), *o.workers_per_gpu);
  }
}

// ", 2 GPUs per worker", ", 4 workers per GPU" or "" (neither option).
std::string gpu_layout_text(const RunOptions& o) {
  if (o.gpus_per_worker) return fmt::format(", {} per worker", *o.gpus_per_worker);
  if (o.workers_per_gpu) return fmt::format(", {} workers per GPU", *o.workers_per_gpu);
  return "";
}

// --warm-start STORAGE[:STUDY]: split at the last ':' when what follows it
// holds no '/' (so "sqlite:///a.db" and "dir/a.db" are a whole STORAGE).
WarmStartConfig parse_warm_start_flag(const std::string& text) {
  WarmStartConfig w;
  w.storage = text;
  if (const auto colon = text.rfind(':');
      colon != std::string::npos && text.find('/', colon) == std::string::npos) {
    w.storage = text.substr(0, colon);
    w.study = text.substr(colon + 1);
    if (w.study.empty())
      throw ConfigError("--warm-start", "STUDY after ':' must not be empty, got '" + text + "'");
  }
  if (w.storage.empty())
    throw ConfigError("--warm-start", "must be STORAGE[:STUDY], got '" + text + "'");
  return w;
}

// Applies the command line's study name, storage, budget and warm start to
// `config`, checking them and the run's other numbers.
void apply_command_line(StudyConfig& config, const RunOptions& o) {
  if (o.warm_start) config.warm_start = parse_warm_start_flag(*o.warm_start);
  if (o.study) {
    check_study_name(*o.study, "--study");
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
  if (o.max_failed_trials) {
    if (*o.max_failed_trials < 1)
      throw ConfigError("--max-failed-trials",
                        "must be >= 1, got " + std::to_string(*o.max_failed_trials));
    config.budget.max_failed_trials = o.max_failed_trials;
  }
  if (o.no_fail_fast) config.budget.fail_fast = false;
  if (o.workers < 0) throw ConfigError("--workers", "must be >= 0 (0: remote workers only)");
  protocol::check_heartbeat_settings(o.heartbeat_ms, "--heartbeat-ms", o.liveness, "--liveness");
  protocol::check_prefetch(o.prefetch, "--prefetch");
  if (o.max_retries < 0) throw ConfigError("--max-retries", "must be >= 0");
  if (o.max_workers < 1)
    throw ConfigError("--max-workers", "must be >= 1 (the most workers connected at once), got " +
                                           std::to_string(o.max_workers));
  if (o.workers > o.max_workers)
    throw ConfigError("--workers", "must be <= --max-workers (" + std::to_string(o.max_workers) +
                                       ", the most workers connected at once), got " +
                                       std::to_string(o.workers) +
                                       ": the workers over it would be refused; raise "
                                       "--max-workers or start fewer workers");
}

// Binds `endpoint` (--bind) once on a socket of its own and closes it, so
// that an address this machine cannot bind (a host that is none of its
// interfaces, a port in use) is refused as bad input before the study is
// created, not after, leaving an empty study in the store. Throws
// ConfigError("--bind", ...) with ZeroMQ's reason.
void probe_bind(const std::string& endpoint) {
  try {
    zmq::context_t context(1);
    zmq::socket_t socket(context, zmq::socket_type::router);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::ipv6, zmq_util::ipv6_endpoint(endpoint));
    socket.bind(endpoint);
    // libzmq leaves the socket file of an ipc://PATH it bound (it removes
    // only those of ipc://*): the probe's own file goes with it, so that a
    // run refused or stopped before its coordinator binds leaves none.
    struct stat probed {};
    const bool ipc = endpoint.rfind("ipc://", 0) == 0 &&
                     ::lstat(endpoint.c_str() + 6, &probed) == 0 && S_ISSOCK(probed.st_mode);
    socket.close();
    context.close();  // the listener is closed when this returns
    if (ipc)
      (void)zmq_util::unlink_if_same_file(endpoint.c_str() + 6, probed.st_dev, probed.st_ino);
  } catch (const zmq::error_t& e) {
    // ENODEV: a HOST that is no address or interface name (ZeroMQ looks up
    // no host names for bind).
    throw ConfigError("--bind", "cannot bind '" + endpoint + "': " + e.what() +
                                    (e.num() == ENODEV ? " (HOST is no IP address or network "
                                                         "interface of this machine; host names "
                                                         "are not looked up)"
                                                       : "") +
                                    (endpoint.rfind("ipc://", 0) == 0
                                         ? " (name a path in a folder that exists and that "
                                           "this user may write, under 107 bytes)"
                                         : " (name an address or interface of this machine, "
                                           "e.g. tcp://0.0.0.0:5555, and a free port)"));
  }
}

// --bind as the user typed it: tcp://HOST:PORT or ipc://PATH, a port in
// range (ConfigError naming --bind and the forms; CoordinatorOptions'
// own check would name coordinator.endpoint).
void check_bind(const std::string& bind) {
  if (bind.rfind("tcp://", 0) != 0 && bind.rfind("ipc://", 0) != 0)
    throw ConfigError("--bind",
                      "must be tcp://HOST:PORT (for workers on other machines, e.g. "
                      "tcp://0.0.0.0:5555; PORT 0 or *: any free port) or ipc://PATH (for "
                      "workers on this machine), got '" +
                          printable(bind) + "'");
  zmq_util::check_endpoint(bind, "--bind", true);
  if (const std::string rule = zmq_util::ipc_path_refusal(bind); !rule.empty())
    throw ConfigError("--bind", rule);
}

// Population Based Training's settings (nullopt: no scheduler); --n-trials
// is refused with it, as budget.n_trials. Without a seed of its own it takes
// the sampler's.
std::optional<PbtOptions> pbt_settings(const StudyConfig& config,
                                       const checkpoints::ArtifactOptions& artifacts, bool bind) {
  std::optional<PbtOptions> pbt =
      pbt_options_of(scheduler_section(config.source), config.space, config.pruner,
                     config.artifacts, config.budget.n_trials.has_value());
  if (!pbt) return pbt;
  if (bind && artifacts.path.empty())
    throw ConfigError("scheduler",
                      "PBT runs on local workers, or on workers that share artifacts.path (an "
                      "exploit copies the donor's snapshot in the folder they use); --bind "
                      "without artifacts.path is not supported yet");
  if (!pbt->seed && config.sampler.is_object())
    pbt->seed = optional_seed(config.sampler, "sampler");
  return pbt;
}

// The coordinator's options, checked (endpoint, keys) before the store is
// touched. With --launcher slurm (not --insecure) the keys are made if
// missing and `plan.slurm_worker_keys` is set.
CoordinatorOptions coordinator_options(const StudyConfig& config, const RunOptions& o,
                                       LaunchPlan& plan) {
  const std::optional<std::string>& bind = plan.bind;
  CoordinatorOptions co;
  co.endpoint = bind.value_or("");
  co.heartbeat_interval_ms = o.heartbeat_ms;
  co.liveness = o.liveness;
  co.max_retries = o.max_retries;
  co.n_trials = config.budget.n_trials;
  co.timeout_s = config.budget.timeout_s;
  co.max_failed_trials = config.budget.max_failed_trials;
  co.fail_fast = config.budget.fail_fast;
  co.max_workers = o.max_workers;
  co.expected_workers = o.workers;
  // The local workers' (and a shared-folder Slurm step's) checkpoint folders.
  co.artifacts = checkpoints::ArtifactOptions::from_json(config.artifacts);
  co.pbt = pbt_settings(config, co.artifacts, bind.has_value());
  // Multi-process trials: a trial bigger than the pool could never start.
  co.resources = TrialResources::from_json(config.resources, config.space);
  if (const int most = co.resources.max_size(config.space);
      most > o.workers && o.workers > 0 && !bind && !o.validate_only)
    throw ConfigError("resources.processes",
                      "a trial may need " + std::to_string(most) +
                          " processes, each on its own worker, but --workers " +
                          std::to_string(o.workers) + " starts only " + std::to_string(o.workers) +
                          " and no other worker can join (no --bind)" + ": use --workers " +
                          std::to_string(most) + " or more, or fewer processes");
  // A persistent program starts before any trial: it cannot get a rank's
  // environment (RANK, MASTER_PORT, ...), which differs per trial.
  if (co.resources.max_size(config.space) > 1 && config.objective.is_object() &&
      config.objective.value("mode", Json()) == Json("persistent"))
    throw ConfigError("resources.processes",
                      "multi-process trials need a program per trial: remove \"mode\": "
                      "\"persistent\" from the objective (its program starts before the "
                      "trials and cannot get each rank's RANK and MASTER_PORT)");
  // artifacts.path (a folder every worker reaches), relative to the store's
  // folder; else <study>.logs/checkpoints beside the store.
  if (!co.artifacts.path.empty()) {
    co.artifacts.path =
        fs::absolute(fs::path(storage_parent(config)) / co.artifacts.path).lexically_normal();
    // Only the last level is made: a typo, or a share that is not mounted,
    // must not send every checkpoint to a new folder on the local disk.
    std::error_code ec;
    const fs::path folder(co.artifacts.path);
    if (!fs::exists(folder, ec) && !fs::is_directory(folder.parent_path(), ec))
      throw ConfigError("artifacts.path",
                        "'" + printable_excerpt(co.artifacts.path) +
                            "': neither it nor its folder '" +
                            printable_excerpt(folder.parent_path().string()) +
                            "' exists: mount or create the shared folder first (hpsearch makes "
                            "only the last level)");
  }
  co.checkpoint_root =
      !co.artifacts.path.empty()
          ? co.artifacts.path
          : (fs::absolute(study_log_dir(config.name, storage_parent(config))) / "checkpoints")
                .string();
  if (bind) check_bind(*bind);
  // Trust: a tcp --bind needs keys (--keys or $HPSEARCH_KEYS_DIR) or --insecure.
  const bool tcp = bind && bind->rfind("tcp://", 0) == 0;
  const char* env_keys = std::getenv(kKeysDirEnv);
  if (env_keys && !*env_keys) env_keys = nullptr;
  if (plan.slurm && !o.insecure) {
    co.keys_dir = o.keys_dir ? *o.keys_dir
                  : env_keys
                      ? std::string(env_keys)
                      : (fs::path(storage_parent(config)) / (config.name + ".keys")).string();
    // A dry run makes no keys: they are checked when they exist.
    if (!o.dry_run || fs::exists(fs::path(co.keys_dir) / curve::kCoordinatorSecretFile))
      plan.slurm_worker_keys = slurm_worker_keys(co.keys_dir);
  } else if (plan.slurm) {
    // --insecure: plain tcp on both sides (the tasks get --insecure and
    // ignore the variable too), as with --bind --insecure.
    if (env_keys)
      spdlog::warn(
          "{} is ignored with --insecure: the coordinator and the Slurm tasks use plain "
          "tcp",
          kKeysDirEnv);
  } else if (o.keys_dir) {
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
  if (!bind && o.keys_dir)
    spdlog::warn("--keys has no effect without --bind (local workers use a private ipc socket)");
  co.validate();  // a bad --bind is refused before the store is touched
  if (bind) probe_bind(*bind);
  // Bad keys (missing folder, a secret readable by others, not Z85) too.
  if (bind && !co.keys_dir.empty()) (void)curve::load_coordinator_keys(co.keys_dir);
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
  if (!info.config.is_null() && info.config.contains("space"))
    if (const auto changes = space_changes(info.config, config.source); !changes.empty())
      spdlog::warn(
          "study '{}': the search space differs from the one stored with the study ({}); "
          "continuing with the new one (hpsearch validate shows every difference)",
          printable_excerpt(config.name), changes_text(changes));
  return study;
}

// The fields of objective section `now` that differ from `stored` (added,
// removed or changed, an argv element by its index: settings_changes),
// "objective.KEY: X -> Y" each, "; "-joined; values cut short. A section
// that is not an object is one change ("objective: X -> Y").
std::string objective_changes(const Json& stored, const Json& now) {
  return changes_text(settings_changes(Json{{"objective", stored}}, Json{{"objective", now}}));
}

// An existing study of the run's name must be the same problem, checked
// before anything is written to the store. Its direction must be the one
// stored with it (ConfigError naming study.direction). Its objective (the
// "objective" section stored with the study by its last run) must be the
// file's: otherwise the study's values would mix two objectives (the best
// trial, the sampler's history and the pruner's comparisons would set them
// against each other). A changed objective is refused (ConfigError naming
// objective and each changed field) unless --allow-objective-change, which
// continues with the new one after a warning naming the changes. A study
// stored without settings (made by hps::Study, or imported) has no
// objective to compare. A study with no COMPLETE or PRUNED trial yet (its
// trials all failed, e.g. a run that fail-fast stopped) has no values to
// mix: a changed objective is taken without --allow-objective-change, with
// an info line naming the changes. Returns whether the objective changed
// (the run then takes the study's FAIL trials out of its budget:
// CoordinatorOptions::exclude_earlier_failures).
bool check_existing_study(Storage& storage, const StudyConfig& config, const RunOptions& o) {
  const std::optional<std::int64_t> id = storage.find_study(config.name);
  if (!id) return false;
  const StudyInfo info = storage.get_study(*id);
  const std::string study = "study '" + printable_excerpt(config.name) + "' in " + config.storage;
  if (info.direction != config.direction)
    throw ConfigError("study.direction",
                      study + " was created to " + to_string(info.direction) + ", the file says " +
                          to_string(config.direction) +
                          ": a study keeps its direction; run the other direction as a new "
                          "study (--study NAME, or another study.name)");
  if (std::string why = stored_settings_error(info); !why.empty()) {
    // Settings that are not valid (a store edited by hand: they do not
    // parse, or break a rule of space.json) cannot be checked against the
    // file's: replaced by the file's only when told to, as a changed
    // objective is.
    if (!o.allow_objective_change)
      throw StoreRefused(
          study + ": its stored settings are not valid (" + why +
          "), so the file's settings cannot be checked against the study's (its objective); "
          "nothing was changed. Pass --allow-objective-change to continue the study with the "
          "file's settings (they replace the stored ones), or run it as a new study (--study "
          "NAME, or another study.name)");
    spdlog::warn(
        "{}: its stored settings are not valid ({}); continuing with the file's "
        "(--allow-objective-change), which replace them",
        study, printable(why));
    return false;
  }
  if (!info.config.is_object() || !config.source.is_object()) return false;
  const auto stored = info.config.find("objective");
  const auto now = config.source.find("objective");
  if (stored == info.config.end() || now == config.source.end() || *stored == *now) return false;
  const std::string changes = objective_changes(*stored, *now);
  const TrialCounts counts = storage.count_trials_by_state(*id);
  if (counts.count(TrialState::kComplete) + counts.count(TrialState::kPruned) == 0) {
    spdlog::info(
        "{}: the objective changed ({}); the study has no COMPLETE or PRUNED trial, so no values "
        "mix: continuing with the new objective (its FAIL trials no longer count against "
        "n_trials)",
        study, changes);
    return true;
  }
  if (o.allow_objective_change) {
    spdlog::warn(
        "{}: the objective differs from the one stored with the study ({}); continuing with the "
        "new one (--allow-objective-change): the study's values now mix two objectives",
        study, changes);
    return true;
  }
  throw ConfigError("objective",
                    "differs from the objective stored with " + study + " (" + changes +
                        "): the study's values would mix two objectives; run it as a new study "
                        "(--study NAME, or another study.name), or pass "
                        "--allow-objective-change to continue this study with the new objective");
}

// The study system attrs where a run records how its workers were started
// (hpsearch resume starts as many, the same way, unless told otherwise).
constexpr const char* kRunWorkersAttr = "run.workers";
constexpr const char* kRunLauncherAttr = "run.launcher";
// Its --bind and --keys (null when not given): a resume listens where its
// remote workers connect, with the same keys.
constexpr const char* kRunBindAttr = "run.bind";
constexpr const char* kRunKeysAttr = "run.keys";
// Whether it was --insecure (a tcp --bind without keys).
constexpr const char* kRunInsecureAttr = "run.insecure";
// Its --prefetch: the trials each worker it starts holds besides the one it
// runs (a resume passes the same to the workers it starts).
constexpr const char* kRunPrefetchAttr = "run.prefetch";
// Its --gpus-per-worker and --workers-per-gpu (null when not given).
constexpr const char* kRunGpusPerWorkerAttr = "run.gpus_per_worker";
constexpr const char* kRunWorkersPerGpuAttr = "run.workers_per_gpu";
// The space.json file of the last `hpsearch run` (absolute), which the hint
// after a run stopped for failures names (resume does not read it).
constexpr const char* kRunSpaceFileAttr = "run.space_file";

// Stores the run's settings with the study: the file's, with the command
// line's budget (failure rules included), the number of workers and their
// launcher, --bind, --keys and --prefetch, so that hpsearch resume continues
// with them.
void store_settings(Storage& storage, std::int64_t study_id, const StudyConfig& config,
                    const RunOptions& o) {
  Json stored = config.source;
  if (stored.is_object()) {
    if (o.n_trials) stored["budget"]["n_trials"] = *o.n_trials;
    if (o.timeout_s) stored["budget"]["timeout_s"] = *o.timeout_s;
    if (o.max_failed_trials) stored["budget"]["max_failed_trials"] = *o.max_failed_trials;
    if (o.no_fail_fast) stored["budget"]["fail_fast"] = false;
  }
  storage.set_study_config(study_id, stored);
  storage.set_study_system_attr(study_id, kRunWorkersAttr, o.workers);
  storage.set_study_system_attr(study_id, kRunLauncherAttr, o.launcher);
  storage.set_study_system_attr(study_id, kRunPrefetchAttr, o.prefetch);
  storage.set_study_system_attr(study_id, kRunGpusPerWorkerAttr,
                                o.gpus_per_worker ? Json(*o.gpus_per_worker) : Json());
  storage.set_study_system_attr(study_id, kRunWorkersPerGpuAttr,
                                o.workers_per_gpu ? Json(*o.workers_per_gpu) : Json());
  if (!o.space_file.empty())
    storage.set_study_system_attr(study_id, kRunSpaceFileAttr,
                                  fs::absolute(o.space_file).lexically_normal().string());
  storage.set_study_system_attr(study_id, kRunBindAttr, o.bind ? Json(*o.bind) : Json());
  storage.set_study_system_attr(study_id, kRunInsecureAttr, o.insecure);
  // Absolute: a resume may run from another folder.
  storage.set_study_system_attr(study_id, kRunKeysAttr,
                                o.keys_dir ? Json(fs::absolute(*o.keys_dir).string()) : Json());
}

// The string attr `name` of `attrs`; nullopt when missing, not a string or
// empty.
std::optional<std::string> string_attr(const Json& attrs, const char* name) {
  auto it = attrs.find(name);
  if (it == attrs.end() || !it->is_string() || it->get<std::string>().empty()) return std::nullopt;
  return it->get<std::string>();
}

// A resume on the tcp endpoint of a last run that was --insecure, with
// neither --insecure nor keys (--keys, $HPSEARCH_KEYS_DIR): refused naming
// the last run's --insecure and the ways on (ConfigError "--insecure"), not
// as a run's tcp --bind without keys.
void refuse_insecure_again_missing(const StudyInfo& study, const RunOptions& o) {
  const Json& attrs = study.system_attrs;
  auto insecure = attrs.find(kRunInsecureAttr);
  if (o.insecure || o.keys_dir || insecure == attrs.end() || !insecure->is_boolean() ||
      !insecure->get<bool>() || o.bind->rfind("tcp://", 0) != 0)
    return;
  if (const char* env = std::getenv(kKeysDirEnv); env && *env) return;
  throw ConfigError(
      "--insecure",
      "is needed again: the last run of study '" + printable_excerpt(study.name) +
          "' was --insecure (it listened on " + printable(*o.bind) +
          " without CURVE keys) and resume listens there again; give --insecure to resume it "
          "so (anyone who reaches that endpoint can join as a worker), --keys KEYS to admit "
          "only workers with keys (make them with `hpsearch keys init KEYS --workers N`; start "
          "the workers with --keys KEYS/worker-N), or --bind ENDPOINT to listen elsewhere");
}

// The last run's keys folder `dir`, which a local resume uses: a folder
// that cannot be used (moved, removed, its keys changed) is refused saying
// that it is the last run's and how to go on.
// `bind`: the --bind it is for, as the message names it ("the last run's
// --bind", "--bind").
void check_stored_keys(const std::string& dir, const std::string& bind) {
  try {
    (void)curve::load_coordinator_keys(dir);
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    const std::string rule =
        e.path().empty() ? what : what.substr(std::min(what.size(), e.path().size() + 2));
    throw ConfigError(e.path(), rule + " (the keys folder of the last run, " + dir +
                                    ", stored with the study: resume uses it for " + bind +
                                    "; make it usable again, give --keys DIR for another "
                                    "keys folder, or --insecure to resume without keys)");
  }
}

// hpsearch resume with --bind: the last run's keys go on with a tcp --bind
// given without --keys, --insecure or $HPSEARCH_KEYS_DIR; a --bind that
// leaves them (--insecure, an ipc endpoint) warns, naming them.
void keys_for_new_bind(const std::optional<std::string>& last_keys, RunOptions& o) {
  if (!last_keys || o.keys_dir) return;
  const bool tcp = o.bind->rfind("tcp://", 0) == 0;
  const char* env = std::getenv(kKeysDirEnv);
  if (tcp && !o.insecure && env && *env) return;  // the variable's keys: as a run
  if (tcp && !o.insecure) {
    o.keys_dir = *last_keys;
    if (o.launcher == "local") check_stored_keys(*last_keys, "--bind");
    spdlog::info("resume: --bind {}: with the keys in {}, as the last run (--keys changes them)",
                 *o.bind, *last_keys);
    return;
  }
  spdlog::warn(
      "resume: {}: listening on {} without the keys of the last run ({}): workers started "
      "with --keys cannot join; give --keys {} to keep them",
      o.insecure ? "--insecure" : "--bind", *o.bind, *last_keys, *last_keys);
}

// hpsearch resume without --bind: the last run's --bind, and its --keys
// unless --keys or --insecure is given (an explicit --insecure resumes
// without the last run's keys, with a warning). A last run that was
// --insecure needs --insecure again (refuse_insecure_again_missing). With
// --bind: keys_for_new_bind.
void keep_stored_bind(const StudyInfo& study, RunOptions& o) {
  const Json& attrs = study.system_attrs;
  const std::optional<std::string> last_keys = string_attr(attrs, kRunKeysAttr);
  if (o.bind) {
    keys_for_new_bind(last_keys, o);
    return;
  }
  const std::optional<std::string> bind = string_attr(attrs, kRunBindAttr);
  if (!bind) return;
  o.bind = *bind;
  const bool stored_keys = !o.keys_dir && !o.insecure && last_keys;
  if (stored_keys) {
    o.keys_dir = *last_keys;
    if (o.launcher == "local" && o.bind->rfind("tcp://", 0) == 0)
      check_stored_keys(*last_keys, "the last run's --bind");
  } else if (!o.keys_dir && o.insecure && last_keys) {
    spdlog::warn(
        "resume: --insecure: listening on {} without the keys of the last run ({}): workers "
        "started with --keys cannot join; resume without --insecure to keep the keys",
        *o.bind, *last_keys);
  }
  refuse_insecure_again_missing(study, o);
  spdlog::info("resume: listening on {}{}, as the last run (--bind changes it)", *o.bind,
               stored_keys ? " with the keys in " + *o.keys_dir : std::string());
}

// hpsearch resume without --workers: the last run's number of workers, when
// it used the same launcher (a Slurm run's task count is not turned into
// local processes), unless --gpus-per-worker or --workers-per-gpu is given
// (the GPUs then set it, as for a run).
void keep_stored_workers(const StudyInfo& study, RunOptions& o) {
  if (o.workers_given || o.gpus_per_worker || o.workers_per_gpu) return;
  const Json& attrs = study.system_attrs;
  auto workers = attrs.find(kRunWorkersAttr);
  auto launcher = attrs.find(kRunLauncherAttr);
  if (workers == attrs.end() || !workers->is_number_integer() || launcher == attrs.end() ||
      !launcher->is_string() || launcher->get<std::string>() != o.launcher)
    return;
  const auto n = workers->get<std::int64_t>();
  if (n < 0 || n > LocalPoolOptions::kMaxWorkers) return;  // not ours: the default stays
  o.workers = static_cast<int>(n);
  o.workers_given = true;  // not to be derived from the GPUs again
  spdlog::info("resume: {} worker{} ({}), as the last run (--workers changes it)", o.workers,
               o.workers == 1 ? "" : "s", o.launcher);
}

// hpsearch resume with neither --gpus-per-worker nor --workers-per-gpu: the
// last run's, when it gave one (with the same launcher).
void keep_stored_gpu_layout(const StudyInfo& study, RunOptions& o) {
  if (o.gpus_per_worker || o.workers_per_gpu) return;
  const Json& attrs = study.system_attrs;
  auto launcher = attrs.find(kRunLauncherAttr);
  if (launcher == attrs.end() || !launcher->is_string() ||
      launcher->get<std::string>() != o.launcher)
    return;
  const auto stored = [&](const char* name) -> std::optional<int> {
    auto it = attrs.find(name);
    if (it == attrs.end() || !it->is_number_integer()) return std::nullopt;
    const auto k = it->get<std::int64_t>();
    if (k < 1 || k > LocalPoolOptions::kMaxWorkers) return std::nullopt;  // not ours
    return static_cast<int>(k);
  };
  o.gpus_per_worker = stored(kRunGpusPerWorkerAttr);
  o.workers_per_gpu = o.gpus_per_worker ? std::nullopt : stored(kRunWorkersPerGpuAttr);
  if (o.gpus_per_worker)
    spdlog::info("resume: --gpus-per-worker {}, as the last run", *o.gpus_per_worker);
  if (o.workers_per_gpu)
    spdlog::info("resume: --workers-per-gpu {}, as the last run", *o.workers_per_gpu);
}

// hpsearch resume without --prefetch: the last run's, when it is one a run
// takes (checked again with the other options).
void keep_stored_prefetch(const StudyInfo& study, RunOptions& o) {
  if (o.prefetch_given) return;
  const Json& attrs = study.system_attrs;
  auto prefetch = attrs.find(kRunPrefetchAttr);
  if (prefetch == attrs.end() || !prefetch->is_number_integer()) return;
  const auto n = prefetch->get<std::int64_t>();
  if (n < 0 || n > protocol::kMaxPrefetch) return;  // not ours: the default stays
  o.prefetch = static_cast<int>(n);
  if (o.prefetch > 0)
    spdlog::info("resume: --prefetch {}, as the last run (--prefetch changes it)", o.prefetch);
}

// Tells the user where remote workers connect (Slurm tasks: see
// start_slurm_tasks).
void print_endpoints(const Coordinator& coordinator, const CoordinatorOptions& co,
                     const RunOptions& o, const LaunchPlan& plan, const StudyConfig& config) {
  if (plan.slurm) return;
  // A worker runs a "command" objective (a program the coordinator names)
  // only when told it may: say so in the hint, or each trial it takes FAILs.
  const std::string allow =
      config.objective.value("type", std::string()) == "command" ? " --allow-command" : "";
  // The command a worker runs, with the endpoint it reaches (with keys the
  // next line gives it, naming the keys folder).
  const std::string reachable = reachable_endpoint(coordinator.endpoint());
  std::string waiting;
  if (o.workers == 0 && co.keys_dir.empty())
    waiting = " (waiting for workers: hpsearch worker --connect " + reachable +
              (reachable.rfind("tcp://", 0) == 0 ? " --insecure" : "") + allow + ")";
  else if (o.workers == 0)
    waiting = " (waiting for workers)";
  if (o.bind || o.workers == 0)
    std::cout << "Coordinator listening on " << coordinator.endpoint() << waiting << "\n";
  // The hint names the host workers reach (not a wildcard such as 0.0.0.0).
  if (o.bind && !co.keys_dir.empty())
    std::cout << "Workers with keys from " << co.keys_dir << " connect with: hpsearch worker "
              << "--connect " << reachable << " --keys " << co.keys_dir << "/worker-N" << allow
              << "\n";
  // At once, also into a pipe (`| tee`, a script waiting for the endpoint).
  std::cout.flush();
}

// The local workers' options (none with --launcher slurm).
LocalPoolOptions pool_options(const StudyConfig& config, const RunOptions& o,
                              const Coordinator& coordinator, std::vector<std::string> gpus,
                              const LaunchPlan& plan) {
  LocalPoolOptions po;
  po.workers = plan.slurm ? 0 : o.workers;
  po.endpoint = coordinator.local_endpoint();
  po.gpus = std::move(gpus);
  po.gpus_per_worker = o.gpus_per_worker.value_or(1);
  po.workers_per_gpu = o.workers_per_gpu.value_or(1);
  // Per-trial logs (the "command" objective) go next to the storage file.
  po.extra_args = {"--log-level", o.log_level, "--log-dir",
                   study_log_dir(config.name, storage_parent(config)),
                   "--allow-command"};  // the study's own objective, on this machine
  if (o.prefetch > 0)
    po.extra_args.insert(po.extra_args.end(), {"--prefetch", std::to_string(o.prefetch)});
  return po;
}

// Starts the Slurm tasks (one srun step), connecting back over tcp (CURVE
// unless --insecure); nullptr with --launcher local.
std::unique_ptr<SlurmLauncher> start_slurm_tasks(const StudyConfig& config, const RunOptions& o,
                                                 const Coordinator& coordinator,
                                                 const LaunchPlan& plan) {
  if (!plan.slurm) return nullptr;
  SlurmLauncherOptions lo;
  lo.workers = o.workers;
  lo.endpoint = reachable_endpoint(coordinator.endpoint());
  lo.keys_dir = plan.slurm_worker_keys;
  lo.gpus_per_task = plan.gpus_per_task;
  lo.slurm_args = plan.slurm_args;
  lo.worker_args = {"--log-level", o.log_level, "--log-dir",
                    fs::absolute(study_log_dir(config.name, storage_parent(config))).string(),
                    "--allow-command"};  // the study's own objective
  if (o.prefetch > 0)
    lo.worker_args.insert(lo.worker_args.end(), {"--prefetch", std::to_string(o.prefetch)});
  const std::string& keys = plan.slurm_worker_keys;
  std::cout << "Coordinator listening on " << coordinator.endpoint() << "; " << o.workers
            << " Slurm task" << (o.workers == 1 ? "" : "s") << " connect to " << lo.endpoint
            << (keys.empty() ? " (--insecure)" : " with the keys in " + keys) << "\n";
  auto launcher = std::make_unique<SlurmLauncher>(std::move(lo));
  launcher->start();
  return launcher;
}

// The progress line: the coordinator's figures, and each ended trial.
class ProgressLine {
 public:
  ProgressLine(Coordinator& coordinator, const StudyConfig& config)
      : coordinator_(coordinator), progress_(stdout, isatty(STDOUT_FILENO) == 1) {
    ps_.n_trials = config.budget.n_trials;
    ps_.timeout_s = config.budget.timeout_s;
    ps_.finished_before = coordinator_.stats().finished;
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
  // The ids of the trials of this run that ended FAIL, in the order they
  // ended.
  const std::vector<std::int64_t>& failed_trial_ids() const { return failed_; }

 private:
  void fill() {
    CoordinatorStats s = coordinator_.stats();
    ps_.finished = s.finished;
    // The first dispatch of this run (seen within a draw, 500 ms): the rate
    // of its trials is counted from it, not from the wait for a worker.
    if (!ps_.work_started_s && (s.running > 0 || s.finished > ps_.finished_before))
      ps_.work_started_s = progress_.elapsed_s();
    ps_.best_value = s.best_value;
    ps_.best_number = s.best_number;
    ps_.extra = fmt::format("workers {} busy / {} idle", s.workers_busy, s.workers_idle);
  }
  void trial_ended(const FrozenTrial& t) {
    if (t.state == TrialState::kFail) failed_.push_back(t.trial_id);
    fill();
    std::string last = fmt::format("trial {} {}", t.number, to_string(t.state));
    if (t.value) last += " " + format_value(*t.value);
    // One line: the log showed the whole reason (its lines) just before.
    if (t.state == TrialState::kFail) last += " (" + one_line_reason(t.fail_reason) + ")";
    progress_.update(ps_, last, t.state == TrialState::kFail);
  }

  Coordinator& coordinator_;
  Progress progress_;
  ProgressState ps_;
  std::vector<std::int64_t> failed_;  // failed_trial_ids()
  Steady::time_point last_draw_ = Steady::now();
};

// Polls the Slurm step: an ended step's workers are expired by their lease
// (heartbeats) and the launcher starts the step again. Returns an error
// once it gave up and no worker is left.
std::optional<std::string> poll_slurm(Coordinator& coordinator, SlurmLauncher& launcher) {
  if (auto how = launcher.poll(); how && !coordinator.done()) spdlog::warn("slurm: srun {}", *how);
  CoordinatorStats stats = coordinator.stats();
  if (!launcher.given_up() || stats.workers_busy + stats.workers_idle > 0) return std::nullopt;
  return fmt::format("the Slurm worker step keeps failing (srun: {}); see the messages above",
                     fmt::join(launcher.command(), " "));
}

// Steps the coordinator until the study is done (stop() on the first stop
// signal), telling it of exited local workers and watching the Slurm step
// (`launcher` may be null). Returns an error if every local worker failed to
// start or the Slurm step keeps failing.
std::optional<std::string> run_until_done(Coordinator& coordinator, LocalWorkerPool& pool,
                                          SlurmLauncher* launcher, ProgressLine& progress,
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
    if (launcher)
      if (auto error = poll_slurm(coordinator, *launcher)) return error;
    if (!more) return std::nullopt;
    CoordinatorStats stats = coordinator.stats();
    if (!launcher && o.workers > 0 && pool.all_given_up() &&
        stats.workers_busy + stats.workers_idle == 0)
      return "every local worker failed to start; see the messages above";
    progress.draw();
  }
}

// Lets the workers exit (they were told to), answering them for a grace
// period, then ends the pool and cancels what still runs of the Slurm step
// (scancel; `launcher` may be null).
void let_workers_exit(Coordinator& coordinator, LocalWorkerPool& pool, SlurmLauncher* launcher,
                      int heartbeat_ms) {
  pool.stop_restarting();
  if (launcher) launcher->stop_restarting();
  auto grace = std::chrono::milliseconds(std::max(2000, 2 * heartbeat_ms));
  auto until = Steady::now() + grace;
  auto tasks_running = [&] { return launcher && launcher->running(); };
  while ((pool.running() > 0 || tasks_running()) && Steady::now() < until) {
    coordinator.step(20);
    for (const auto& w : pool.poll()) coordinator.worker_exited(w.pid);
    if (launcher) (void)launcher->poll();
  }
  pool.shutdown(0.0);
  if (launcher) launcher->shutdown(0.0);
}

// The objective type's post-study step (torch.fashion_mnist: the best
// trial's checkpoint scored on the test set in this process; without a
// usable checkpoint the trial is retrained here, with every core of this
// machine, since the workers have exited: faster than the trial's own
// threads, and the model may differ from the trial's in the last bits; see
// evaluate_on_test_set); its errors are reported as warnings
// (objectives/objective.h).
void after_study(const StudyConfig& config, Study& study) {
  if (stop_signal()) return;
  ObjectiveContext octx;
  octx.study_name = config.name;
  octx.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  octx.direction = config.direction;
  (void)run_after_study(config.objective, config.space, study, octx, std::cout);
}

// Copies the trials of the warm start checked before the study was opened
// (`source`), or says that the study was warm-started before (a study is
// warm-started once: another warm_start given later is not read); then the
// sampler's budget (Sampler::plan_budget), counting the copies as the COMPLETE
// history they are. Returns plan_budget's warning ("" for none), which the
// caller prints once the run is sure to go ahead.
std::string apply_warm_start(const StudyConfig& config,
                             const std::optional<WarmStartSource>& source, Study& study,
                             Sampler& sampler) {
  if (source) {  // before the coordinator reads the history
    spdlog::info("{}",
                 copy_warm_start(study, *source->storage, source->label, source->study).message());
  } else {
    const WarmStartSummary done = warm_start(study, *config.warm_start, config.storage);
    if (done.storage != config.warm_start->storage ||
        (!config.warm_start->study.empty() && done.study != config.warm_start->study))
      spdlog::warn(
          "{}; the warm_start given now ({} of {}) is not read: a study is warm-started "
          "once",
          done.message(),
          config.warm_start->study.empty() ? std::string("its only study")
                                           : "study '" + config.warm_start->study + "'",
          config.warm_start->storage);
    else
      spdlog::info("{}", done.message());
  }
  if (!config.budget.n_trials) return "";
  const std::int64_t warm = warm_start_copies(study.storage().get_study(study.study_id()));
  return sampler.plan_budget(*config.budget.n_trials + warm);
}

// A command objective's "cwd" must be a folder where local workers run (the
// current directory: a relative cwd is resolved against it). Checked
// before the store is touched: otherwise every trial would FAIL at run time
// and use up the budget (e.g. `hpsearch resume` from another folder).
void check_local_cwd(const StudyConfig& config, const RunOptions& o, const LaunchPlan& plan) {
  if (plan.slurm || o.workers == 0 || !config.objective.is_object()) return;
  if (config.objective.value("type", "") != "command") return;
  auto cwd = config.objective.find("cwd");
  if (cwd == config.objective.end() || !cwd->is_string()) return;
  const std::string dir = cwd->get<std::string>();
  std::error_code ec;
  if (dir.empty() || fs::is_directory(dir, ec)) return;
  const std::string here = fs::current_path(ec).string();
  throw ConfigError("objective.cwd", "'" + printable(dir) + "' is not a directory" +
                                         (fs::path(dir).is_relative()
                                              ? " under the current one (" + printable(here) +
                                                    "), which the local workers run in; "
                                                    "start hpsearch in the folder it is "
                                                    "relative to, or make it absolute"
                                              : ""));
}

// The space.json file a hint names: the run's (as given), else the one
// the last `hpsearch run` of the study stored (a resume), else "space.json".
std::string space_file_to_name(const RunOptions& o, Storage& storage, std::int64_t study_id) {
  if (!o.space_file.empty()) return o.space_file;
  const Json attrs = storage.get_study(study_id).system_attrs;
  if (std::optional<std::string> file = string_attr(attrs, kRunSpaceFileAttr)) return *file;
  return "space.json";
}

// A run that its failure rules stopped before any of its trials succeeded
// (COMPLETE or PRUNED): the objective is broken, not the params, so its FAIL
// trials (`failed`, the trial ids; those not retried) do not count against
// n_trials (system attr budget_excluded). Returns how many were excluded.
std::size_t exclude_stopped_run_failures(Storage& storage,
                                         const std::vector<std::int64_t>& failed) {
  std::size_t n = 0;
  storage.run_in_transaction([&] {
    for (const std::int64_t trial_id : failed) {
      const TrialPtr t = storage.get_trial(trial_id);
      if (t->state != TrialState::kFail || !t->counts_as_finished()) continue;
      storage.set_trial_system_attr(trial_id, kAttrBudgetExcluded, "run stopped for failures");
      ++n;
    }
  });
  return n;
}

// The exit status of a run that was not interrupted: kExitFailure, with a
// line saying why and what to do, when a failure rule stopped it
// (RunLimits) or when none of its trials succeeded (COMPLETE or PRUNED)
// while some failed; kExitOk otherwise. A run its failure rules stopped
// before any success first takes its FAIL trials (`failed`, ids) out of
// the budget (exclude_stopped_run_failures); the hint names the space.json
// file to fix and run (space_file_to_name).
int failure_exit(const Coordinator& coordinator, const StudyConfig& config, const RunOptions& o,
                 Storage& storage, std::int64_t study_id, const std::vector<std::int64_t>& failed) {
  if (coordinator.stopped_for_failures()) {
    const std::size_t excluded =
        coordinator.stats().run_succeeded == 0 ? exclude_stopped_run_failures(storage, failed) : 0;
    const std::string space_file = space_file_to_name(o, storage, study_id);
    // The reason is on the summary's first line. resume runs the settings
    // stored with the study: a fix in space.json needs run, which reads it.
    std::cout << "Stopped early for failed trials"
              << (excluded > 0 ? " (they do not count against n_trials)" : "")
              << ": fix the program or the objective in " << printable(space_file)
              << ", then run `hpsearch run " << printable(space_file)
              << "` again (it reads the file; `hpsearch resume " << printable(config.storage)
              << "` reruns the settings stored with the study). --no-fail-fast and "
                 "--max-failed-trials N change the rules.\n";
    return kExitFailure;
  }
  const CoordinatorStats stats = coordinator.stats();
  if (stats.run_succeeded == 0 && stats.run_failed > 0) {
    std::cout << "No trial of this run succeeded: " << stats.run_failed
              << " FAIL, none COMPLETE or PRUNED.\n";
    return kExitFailure;
  }
  return kExitOk;
}

// The store file `path` (named by `field`) before a run writes to it: a
// folder or a file that is not SQLite, a store with several names, a store
// this user may not write, and a writer lock file planted as a link (or a
// folder) are bad input (ConfigError, exit 2), refused before the study is
// made, not by the coordinator after.
void check_store_to_write(const std::string& path, const std::string& field) {
  util::check_store_file_if_present(path, field);
  if (std::string why = WriterLock::store_refusal(path); !why.empty())
    throw ConfigError(field, why + ": " + path);
  if (std::string why = read_only_store_refusal(path); !why.empty())
    throw ConfigError(field, why + ": " + path);
  if (std::string why = WriterLock::lock_file_refusal(path); !why.empty())
    throw ConfigError(WriterLock::lock_path(path), why);
}

// run --dry-run and hpsearch validate, once the run's checks before the
// store passed: the checks that read the store (the warm start's earlier
// study; an existing study of the run's name: check_existing_study), done
// read-only (no store is created), then the plan (print_plan).
int dry_run(const StudyConfig& config, const RunOptions& o, const CoordinatorOptions& co) {
  PlanStudy existing;
  const util::StorageUrl url = util::parse_storage_url(config.storage);
  existing.storage_exists = !url.in_memory && fs::exists(url.path);
  std::shared_ptr<Storage> storage;
  if (existing.storage_exists) storage = open_existing(config.storage);
  if (config.warm_start && (!storage || !warm_started(*storage, config.name)))
    (void)open_warm_start_source(*config.warm_start, config.name, config.direction, config.storage);
  if (storage) {
    if (const auto id = storage->find_study(config.name)) {
      existing.info = storage->get_study(*id);
      const TrialCounts counts = storage->count_trials_by_state(*id);
      existing.trials = counts.total();
      existing.finished = counts.finished;
      if (const auto holder = WriterLock::query(url.path, *id))
        existing.running = holder->describe();
      try {
        check_existing_study(*storage, config, o);
      } catch (const ConfigError& e) {
        existing.refusal = e.what();
      } catch (const StoreRefused& e) {
        existing.refusal = e.what();
      }
    }
  }
  return print_plan(config, o, resolved_sampler_section(config.sampler, o.seed),
                    resolved_pruner_section(config.pruner), co.checkpoint_root,
                    study_log_dir(config.name, storage_parent(config)), existing);
}

// The checks of run_study's step 1 after the sampler's and pruner's: the
// objective against the space, the local folder, --workers, the budget
// (a warning when there is none) and the store file. Throws ConfigError.
void check_objective_workers_and_store(const StudyConfig& config, const RunOptions& o,
                                       const LaunchPlan& plan) {
  validate_objective(config.objective, config.space);
  check_local_cwd(config, o, plan);
  if (o.workers > LocalPoolOptions::kMaxWorkers)
    throw ConfigError("--workers", "must be <= " + std::to_string(LocalPoolOptions::kMaxWorkers));
  // (A PBT scheduler bounds the run itself: max_steps per member.)
  if (!config.budget.n_trials && !config.budget.timeout_s &&
      scheduler_section(config.source).is_null())
    spdlog::warn("no budget (n_trials or timeout_s): running until interrupted");
  // What the store file cannot be is bad input (exit 2), as for the read
  // commands, not a failure of the run.
  if (const util::StorageUrl store = util::parse_storage_url(config.storage); !store.in_memory)
    check_store_to_write(store.path, o.storage ? o.storage_field : "study.storage");
}

int run_study(StudyConfig config, const RunOptions& given) {
  RunOptions o = given;  // --workers may follow from the GPUs (apply_gpu_layout)
  if (needs_torch(config.objective)) exec_torch_sibling("LibTorch objective");
  // Before anything is bound or written: stdout or stderr a pipe whose
  // reader is gone (`| head -2`) must not kill the coordinator at its next
  // progress line, leaving its end unrecorded and its ipc socket file.
  ignore_sigpipe();
  // A stop signal from here on is a stop, not a kill: one that came while
  // the coordinator was bound but not yet stepping (workers starting) left
  // the ipc socket file and the run's end unrecorded.
  install_stop_handlers();
  // 1. Check everything before touching the store.
  apply_command_line(config, o);
  LaunchPlan plan = launch_plan(o);
  std::vector<std::string> gpus;
  if (!plan.slurm) gpus = o.gpus ? parse_gpu_list(*o.gpus) : detect_gpus();
  apply_gpu_layout(o, gpus, plan);
  auto sampler = make_sampler(config.sampler, o.seed);
  sampler->check_space(config.space);
  auto pruner = make_pruner(config.pruner);
  check_objective_workers_and_store(config, o, plan);
  CoordinatorOptions co = coordinator_options(config, o, plan);
  if (o.dry_run) return dry_run(config, o, co);

  // 2. Open the study (continue it if it exists).
  // The earlier study of a warm start is checked before the new study (or
  // its store) is created; a study warm-started before (a resumed run)
  // copies nothing and needs the earlier store no more.
  std::optional<WarmStartSource> warm_source;
  const util::StorageUrl url = util::parse_storage_url(config.storage);
  const auto check_warm_start = [&] {
    warm_source =
        open_warm_start_source(*config.warm_start, config.name, config.direction, config.storage);
  };
  if (config.warm_start && (url.in_memory || !fs::exists(url.path))) check_warm_start();
  // A stop signal before anything is written ends the run here; one that
  // comes later stops the coordinator as soon as it exists (below), so its
  // end is recorded.
  if (int sig = stop_signal()) {
    std::cout << "Interrupted before the run started; nothing ran.\n";
    return 128 + sig;
  }
  auto storage = open_storage(config.storage);
  // A changed objective: the FAIL trials of the old one leave the budget,
  // which is for the current objective.
  if (check_existing_study(*storage, config, o)) co.exclude_earlier_failures = "objective changed";
  // The budget counts the study's finished trials, so at most this many are
  // COMPLETE (with a warm start: planned once the copies are made). Its
  // warning is printed once the coordinator holds the study: a warning
  // about a run that is then refused would mislead.
  std::string budget_warning;
  if (config.budget.n_trials && !config.warm_start)
    budget_warning = sampler->plan_budget(*config.budget.n_trials);
  if (config.warm_start && !warm_source && !warm_started(*storage, config.name)) check_warm_start();
  Study study = open_study(config, storage, sampler, pruner);
  if (config.warm_start) budget_warning = apply_warm_start(config, warm_source, study, *sampler);

  Coordinator coordinator(study, config.objective, co);
  if (!budget_warning.empty()) spdlog::warn("{}", budget_warning);
  // A second stop signal exits at once: the socket files go too (the
  // private one with its folder).
  remove_on_quit(coordinator.local_endpoint(), true);
  if (coordinator.endpoint() != coordinator.local_endpoint())
    remove_on_quit(coordinator.endpoint());
  // Once the coordinator runs (its endpoint bound, the study taken over),
  // the settings stored with the study become this run's.
  store_settings(*storage, study.study_id(), config, o);
  CoordinatorStats start = coordinator.stats();
  if (start.finished > 0 || start.waiting > 0)
    spdlog::info("continuing study '{}': {} finished trials, {} queued", printable(config.name),
                 start.finished, start.waiting);
  if (config.budget.n_trials && start.finished >= *config.budget.n_trials) {
    std::cout << "Budget of " << *config.budget.n_trials << " trials already reached.\n\n"
              << summary(study, 0.0);
    return kExitOk;
  }
  print_endpoints(coordinator, co, o, plan, config);

  // 3. Local workers, or Slurm tasks; none once a stop signal came (the
  // coordinator then records the end at its first step).
  if (stop_signal()) coordinator.stop("interrupted");
  LocalWorkerPool pool(pool_options(config, o, coordinator, gpus, plan));
  if (o.workers > 0 && !plan.slurm && !stop_signal())
    spdlog::info("starting {} worker{} ({}, {} CPU thread{} each)", o.workers,
                 o.workers == 1 ? "" : "s",
                 gpus.empty() ? std::string("cpu")
                              : fmt::format("GPUs {}{}", fmt::join(gpus, ","), gpu_layout_text(o)),
                 pool.threads_per_worker(), pool.threads_per_worker() == 1 ? "" : "s");
  if (!stop_signal()) pool.start();
  std::unique_ptr<SlurmLauncher> launcher =
      stop_signal() ? nullptr : start_slurm_tasks(config, o, coordinator, plan);

  // 4. Run.
  ProgressLine progress(coordinator, config);
  if (auto error = run_until_done(coordinator, pool, launcher.get(), progress, o)) {
    pool.shutdown(0.0);
    if (launcher) launcher->shutdown(0.0);
    progress.finish();
    print_error(*error);
    return kExitFailure;
  }

  // 5. Let the workers exit (they were told to); keep answering them.
  let_workers_exit(coordinator, pool, launcher.get(), o.heartbeat_ms);
  progress.draw(true);
  progress.finish();
  // The post-study step is for a run that reached its end, not one its
  // failures stopped.
  if (!coordinator.stopped_for_failures()) after_study(config, study);
  std::cout << "\n" << summary(study, progress.elapsed_s(), coordinator.done_reason());
  std::cout << "Storage: " << printable(config.storage) << "\n";
  if (int sig = stop_signal()) {
    std::cout << "Interrupted; run the same command again (or hpsearch resume "
              << printable(config.storage) << ") to continue.\n";
    return 128 + sig;
  }
  return failure_exit(coordinator, config, o, *storage, study.study_id(),
                      progress.failed_trial_ids());
}

}  // namespace

int run_command(const RunOptions& o) { return run_study(StudyConfig::from_file(o.space_file), o); }

int resume_command(const RunOptions& o) {
  if (!o.storage) throw ConfigError("STORAGE", "is required");
  const std::string& path = *o.storage;
  // An existing store and one of its studies, as the read commands take
  // them (the same rules and messages: "STORAGE: no such storage file"),
  // that this user may write: checked before it is opened, as reading it
  // already writes its folder (SQLite makes the -shm file there).
  if (const util::StorageUrl url = util::parse_storage_url(path); !url.in_memory) {
    util::check_existing_store_file(url.path, "STORAGE");
    check_store_to_write(url.path, "STORAGE");
  }
  auto storage = open_existing(path);
  const StudyInfo chosen = storage->get_study(pick_study(*storage, o.study, path));
  const std::string study = "study '" + printable_excerpt(chosen.name) + "'";
  // Settings that are not valid (a store edited by hand: a document that
  // does not parse, is not an object, or breaks a rule of space.json such
  // as a bad sampler or pruner setting or a negative budget): the state of
  // the store refuses the command, naming the row and column, before
  // anything is said, started or written.
  if (std::string why = stored_settings_error(chosen); !why.empty())
    throw StoreRefused(path + ": " + study + ": its stored settings are not valid (" + why +
                       "), so it cannot be resumed; nothing was changed. Run it from its "
                       "space.json with hpsearch run SPACE --allow-objective-change (the file's "
                       "settings replace the stored ones), or as a new study");
  // A name edited by hand into the store breaks the rule of study names
  // (it would be refused as a new study's name): named as the store's.
  try {
    check_study_name(chosen.name, stored_column(chosen, "name"));
  } catch (const ConfigError& e) {
    throw StoreRefused(path + ": " + study + ": its stored name is not valid (" + e.what() +
                       "), so it cannot be resumed; nothing was changed. Run it from its "
                       "space.json as a new study");
  }
  if (chosen.config.is_null())
    throw ConfigError(path, study +
                                " has no stored settings (it was not created by hpsearch run); "
                                "use hpsearch run space.json");
  StudyConfig config = StudyConfig::from_json(chosen.config);
  RunOptions ro = o;
  keep_stored_workers(chosen, ro);
  keep_stored_gpu_layout(chosen, ro);
  keep_stored_bind(chosen, ro);
  keep_stored_prefetch(chosen, ro);
  ro.study = chosen.name;
  ro.storage = path;
  ro.storage_field = "STORAGE";
  storage.reset();
  return run_study(std::move(config), ro);
}

}  // namespace hps::cli
