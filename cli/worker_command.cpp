// hpsearch worker --connect ENDPOINT: serves trials for a coordinator.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "protocol/protocol.h"
#include "workers/slurm_launcher.h"
#include "workers/worker.h"

namespace hps::cli {

namespace {

// --allow-program PROGRAM as an absolute path: a bare name is looked up in
// PATH now, by the user who starts the worker; a relative path is made
// absolute.
std::string allowed_program_path(const std::string& program) {
  std::string path = program;
  if (program.find('/') == std::string::npos) {
    const char* env_path = std::getenv("PATH");
    std::string dirs = env_path ? env_path : "";
    for (std::size_t start = 0; start <= dirs.size();) {
      std::size_t end = dirs.find(':', start);
      if (end == std::string::npos) end = dirs.size();
      std::string candidate = dirs.substr(start, end - start) + "/" + program;
      if (end > start && access(candidate.c_str(), X_OK) == 0) {
        path = candidate;
        break;
      }
      start = end + 1;
    }
  }
  if (path.empty() || path[0] != '/') path = std::filesystem::absolute(path).string();
  return path;
}

}  // namespace

int worker_command(const WorkerCommandOptions& o) {
  // The options by their names on the command line (WorkerOptions::validate
  // names its own fields, for the embedding API).
  protocol::check_heartbeat_settings(o.heartbeat_ms, "--heartbeat-ms", o.liveness, "--liveness");
  protocol::check_prefetch(o.prefetch, "--prefetch");
  // A worker does not know its objective before the first trial: one started
  // by hand becomes `hpsearch-torch` when that exists, so it can serve any
  // study. Local pools set HPSEARCH_NO_HANDOVER: their executable already is
  // the right one (`hpsearch run` handed over before starting them).
  if (std::getenv("HPSEARCH_NO_HANDOVER") == nullptr) exec_torch_sibling("hpsearch worker");
  WorkerOptions wo;
  wo.connect = o.connect;
  if (o.log_dir) wo.log_dir = *o.log_dir;
  wo.device = o.device == "auto" ? auto_device() : o.device;
  wo.threads = o.threads;
  if (o.id) wo.worker_id = *o.id;
  // A Slurm task (srun) names itself after its task and uses the CPUs Slurm
  // gave it (one per task unless --cpus-per-task).
  if (SlurmTask task = slurm_task_from_env(); task.procid >= 0) {
    if (!o.id) wo.worker_id = slurm_task_worker_id(task);
    if (o.threads == 0) wo.threads = task.cpus_per_task > 0 ? task.cpus_per_task : 1;
  }
  wo.heartbeat_interval_ms = o.heartbeat_ms;
  wo.liveness = o.liveness;
  wo.reconnect_attempts = o.reconnect_attempts;
  wo.reconnect_initial_ms = o.reconnect_initial_ms;
  wo.reconnect_max_ms = std::max(wo.reconnect_max_ms, o.reconnect_initial_ms);
  wo.prefetch = o.prefetch;
  // Keys: --keys, else $HPSEARCH_KEYS_DIR for a tcp endpoint (an ipc
  // endpoint, as local pools use, is guarded by its folder's permissions).
  if (o.keys_dir) {
    wo.keys_dir = *o.keys_dir;
  } else if (const char* env = std::getenv(kKeysDirEnv);
             env && *env && o.connect.rfind("tcp://", 0) == 0 && !o.insecure) {
    wo.keys_dir = env;
  }
  wo.insecure = o.insecure;
  if (o.connect.rfind("tcp://", 0) == 0 && wo.keys_dir.empty() && !o.insecure)
    throw ConfigError("--connect",
                      "a tcp endpoint needs CURVE keys: give --keys DIR (a worker folder made by "
                      "`hpsearch keys init KEYS --workers N` on the coordinator's machine, such "
                      "as KEYS/worker-1, copied here) or set " +
                          std::string(kKeysDirEnv) +
                          "; --insecure connects without them (whatever process answers at that "
                          "address can then hand this worker trials)");
  wo.allow_command = o.allow_command;
  wo.allowed_env = o.allow_env;
  for (const auto& program : o.allow_programs)
    wo.allowed_programs.push_back(allowed_program_path(program));
  wo.stop = install_stop_handlers(/*announce=*/false);
  ignore_sigpipe();  // its output gone (a closed pipe) does not kill it mid-trial
  Worker worker(std::move(wo));
  int rc = worker.run();
  if (rc == Worker::kStopped) return 128 + (stop_signal() ? stop_signal() : 2);
  return rc;
}

}  // namespace hps::cli
