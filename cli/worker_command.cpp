// hpsearch worker --connect ENDPOINT: serves trials for a coordinator.
#include <cstdlib>

#include "cli/commands.h"
#include "workers/worker.h"

namespace hps::cli {

int worker_command(const WorkerCommandOptions& o) {
  // A worker does not know its objective before the first trial: one started
  // by hand becomes `hpsearch-torch` when that exists, so it can serve any
  // study. Local pools set HPSEARCH_NO_HANDOVER: their executable already is
  // the right one (`hpsearch run` handed over before starting them).
  if (std::getenv("HPSEARCH_NO_HANDOVER") == nullptr) exec_torch_sibling("hpsearch worker");
  WorkerOptions wo;
  wo.connect = o.connect;
  if (o.log_dir) wo.log_dir = *o.log_dir;
  wo.device = o.device;
  wo.threads = o.threads;
  if (o.id) wo.worker_id = *o.id;
  wo.heartbeat_interval_ms = o.heartbeat_ms;
  wo.liveness = o.liveness;
  wo.reconnect_attempts = o.reconnect_attempts;
  wo.reconnect_initial_ms = o.reconnect_initial_ms;
  wo.reconnect_max_ms = std::max(wo.reconnect_max_ms, o.reconnect_initial_ms);
  wo.stop = install_stop_handlers(/*announce=*/false);
  Worker worker(std::move(wo));
  int rc = worker.run();
  if (rc == Worker::kStopped) return 128 + (stop_signal() ? stop_signal() : 2);
  return rc;
}

}  // namespace hps::cli
