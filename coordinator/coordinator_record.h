// The coordinator's record in its study: the study system attr
// "coordinator", where the running coordinator describes itself (host,
// pid, endpoint, heartbeat settings, workers; `running` false and a
// done_reason once it has ended). `hpsearch status` reads it, and a second
// coordinator reads it to refuse a study that a live one runs. Private to
// the coordinator (not installed).
#pragma once

#include <string>

#include "search/json_util.h"
#include "search/storage.h"

namespace hps {

// The name of the study system attr.
inline constexpr const char* kAttrCoordinator = "coordinator";

// Seconds since the Unix epoch (the record's "updated").
double unix_now();

// Throws WriterLockBusy naming the other coordinator if `info`'s record says that a
// live coordinator runs the study: a live process on this host (not this
// one), or on another host a record updated less than stale_after_s
// seconds ago.
void refuse_if_run_elsewhere(const StudyInfo& info, const std::string& study_name,
                             const std::string& this_host, double stale_after_s);

// What the record holds, besides the time of writing.
struct CoordinatorRecord {
  bool running = true;
  std::string host;
  std::string endpoint;
  int heartbeat_interval_ms = 0;
  int liveness = 0;
  Json workers = Json::array();  // SessionTable::to_json()
  // Multi-process trials taken from the sampler that wait for enough idle
  // workers: [{"trial": N, "processes": P}] (RUNNING in the store, on no
  // worker yet).
  Json waiting_for_workers = Json::array();
  std::string done_reason;  // written when !running
};

// The attr's JSON (with this process's pid and "updated": unix_now()).
Json to_json(const CoordinatorRecord& record);

}  // namespace hps
