#include "coordinator/coordinator_record.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>

#include "search/printable.h"
#include "search/writer_lock.h"

namespace hps {

namespace {

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

double unix_now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

void refuse_if_run_elsewhere(const StudyInfo& info, const std::string& study_name,
                             const std::string& this_host, double stale_after_s) {
  auto it = info.system_attrs.find(kAttrCoordinator);
  if (it == info.system_attrs.end() || !it->is_object() || !it->value("running", false)) return;
  std::string host = it->value("host", "");
  long pid = static_cast<long>(it->value("pid", 0.0));
  double updated = it->value("updated", 0.0);
  bool alive = host == this_host ? (pid != static_cast<long>(getpid()) && process_alive(pid))
                                 : unix_now() - updated < stale_after_s;
  if (alive)
    throw WriterLockBusy("study '" + printable_excerpt(study_name) +
                             "' is being run by another coordinator (" + host + ":" +
                             std::to_string(pid) + ", " + it->value("endpoint", std::string("?")) +
                             "); stop it first, or connect workers to it",
                         std::nullopt);
}

Json to_json(const CoordinatorRecord& record) {
  Json attr{{"running", record.running},
            {"host", record.host},
            {"pid", static_cast<std::int64_t>(getpid())},
            {"endpoint", record.endpoint},
            {"updated", unix_now()},
            {"heartbeat_interval_ms", record.heartbeat_interval_ms},
            {"liveness", record.liveness},
            {"workers", record.workers}};
  if (!record.waiting_for_workers.empty()) attr["waiting_for_workers"] = record.waiting_for_workers;
  if (!record.running) attr["done_reason"] = record.done_reason;
  return attr;
}

}  // namespace hps
