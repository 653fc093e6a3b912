// The coordinator's step loop and public API; its parts are listed in
// coordinator/coordinator_impl.h.
#include "coordinator/coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <variant>

#include "coordinator/coordinator_impl.h"
#include "coordinator/coordinator_record.h"
#include "protocol/curve_keys.h"
#include "protocol/zmq_util.h"
#include "search/json_util.h"
#include "search/printable.h"
#include "search/util/hash.h"

namespace hps {

void CoordinatorOptions::validate() const {
  protocol::check_heartbeat_settings(heartbeat_interval_ms, "coordinator.heartbeat_interval_ms",
                                     liveness, "coordinator.liveness");
  require_at_least("coordinator.max_retries", max_retries, 0);
  artifacts.validate();
  resources.validate();
  if (n_trials && *n_trials < 0) throw ConfigError("coordinator.n_trials", "must be >= 0");
  if (timeout_s && !(*timeout_s >= 0))
    throw ConfigError("coordinator.timeout_s", "must be >= 0 (seconds)");
  if (max_failed_trials && *max_failed_trials < 1)
    throw ConfigError("coordinator.max_failed_trials",
                      "must be >= 1, got " + std::to_string(*max_failed_trials));
  require_at_least("coordinator.max_batch", max_batch, 1);
  require_at_least("coordinator.min_workers", min_workers, 0);
  if (!(min_workers_wait_s >= 0))
    throw ConfigError("coordinator.min_workers_wait_s", "must be >= 0 (seconds)");
  if (!(status_interval_s > 0))
    throw ConfigError("coordinator.status_interval_s", "must be > 0 (seconds)");
  if (!endpoint.empty()) zmq_util::check_endpoint(endpoint, "coordinator.endpoint", true);
  require_at_least("coordinator.max_workers", max_workers, 1);
  if (!curve_secret_key.empty() && !curve::is_key(curve_secret_key))
    throw ConfigError("coordinator.curve_secret_key", "is not a Z85 CURVE key (40 characters)");
  for (const auto& [key, name] : authorized_keys)
    if (!curve::is_key(key))
      throw ConfigError("coordinator.authorized_keys",
                        "'" + printable(key) + "' is not a Z85 CURVE public key (40 characters)");
  if (endpoint.rfind("tcp://", 0) == 0 && keys_dir.empty() && curve_secret_key.empty() && !insecure)
    throw ConfigError("coordinator.endpoint",
                      "a tcp endpoint needs CURVE keys (keys_dir, or curve_secret_key and "
                      "authorized_keys; make them with `hpsearch keys init DIR`), or insecure = "
                      "true to let anyone who reaches it join");
}

namespace {

CoordinatorOptions validated(CoordinatorOptions o) {
  o.validate();
  return o;
}

std::string config_text(const Study& study, Json objective_config, const SearchSpace& space,
                        const checkpoints::ArtifactOptions& artifacts) {
  Json config{{"study", study.name()},
              {"direction", to_string(study.direction())},
              {"objective", std::move(objective_config)},
              {"space", space.to_json()}};
  // What a worker needs of "artifacts" (search/checkpoints.h).
  config["artifacts"] = Json{{"max_snapshot_bytes", artifacts.max_snapshot_bytes},
                             {"max_artifact_bytes", artifacts.max_artifact_bytes}};
  if (!artifacts.path.empty()) config["artifacts"]["path"] = artifacts.path;
  return config.dump();
}

}  // namespace

Coordinator::Impl::Impl(Study s, Json objective_config, CoordinatorOptions o)
    : writer_lock(lock_study_for_writing(s)),  // before anything binds or writes
      study(std::move(s)),
      storage(study.storage()),
      study_id(study.study_id()),
      direction(study.direction()),
      space(study.space() ? *study.space() : SearchSpace()),
      options(validated(std::move(o))),
      nop_pruner(!study.pruner().prunes()),
      config_json(config_text(study, std::move(objective_config), space, options.artifacts)),
      config_id(util::fnv1a64(config_json)),
      transport(options),
      mirror(storage, study_id, direction, study.name()),
      source(study, mirror, space),
      limits(options, Steady::now()) {
  if (!options.resources.processes_param.empty() && !space.find(options.resources.processes_param))
    throw ConfigError("resources.processes.param",
                      "names no param of the study's space, got '" +
                          printable_excerpt(options.resources.processes_param) + "'");
  max_trial_size = options.resources.max_size(space);
  gang_mode = max_trial_size > 1;
  writer_lock.set_endpoint(transport.endpoint());
  take_over();
  int stale = study.fail_stale_trials("coordinator restarted", true);
  if (stale > 0)
    spdlog::info(
        "study '{}': {} trials left RUNNING by an earlier coordinator were failed and "
        "queued again",
        study.name(), stale);
  if (!options.exclude_earlier_failures.empty()) exclude_earlier_failures();
  mirror.load();
  pbt_setup();
  open_artifact_store();
  write_status(true);
}

// CoordinatorOptions::exclude_earlier_failures: the study's FAIL trials
// that count against the budget stop counting, in one transaction.
void Coordinator::Impl::exclude_earlier_failures() {
  storage.run_in_transaction([&] {
    for (const TrialPtr& t : storage.get_all_trials(study_id, {TrialState::kFail}))
      if (t->counts_as_finished())
        storage.set_trial_system_attr(t->trial_id, kAttrBudgetExcluded,
                                      options.exclude_earlier_failures);
  });
}

// Refuses to run a study that a live coordinator process runs.
void Coordinator::Impl::take_over() {
  // With the writer lock held no other coordinator runs the study: a
  // record that says "running" was left by one that was killed.
  if (writer_lock.held()) return;
  double stale_after =
      std::max(30.0, 3.0 * options.heartbeat_interval_ms * options.liveness / 1000.0);
  refuse_if_run_elsewhere(storage.get_study(study_id), study.name(), hostname, stale_after);
}

RunProgress Coordinator::Impl::progress() const {
  RunProgress p;
  p.finished = mirror.finished();
  p.running = static_cast<std::int64_t>(running.size());
  p.any_waiting = !mirror.waiting().empty();
  p.exhausted = source.exhausted();
  p.schedule_done = pbt_done();
  p.stopping = stopping;
  return p;
}

// Whether a step without messages has anything to write: a worker to
// expire, a trial to dispatch, the end of the study, the status attr.
bool Coordinator::Impl::writes_due(Steady::time_point now, bool may_expire) {
  const auto timeout = std::chrono::milliseconds(options.heartbeat_interval_ms) * options.liveness;
  if (may_expire && sessions.any_silent(now, timeout)) return true;
  if (!is_done) {
    const RunProgress p = progress();
    if (sessions.has_waiters() && limits.can_dispatch(now, sessions.waiter_count(), p)) return true;
    if (rendezvous_open()) return true;  // a rendezvous may time out
    if (!limits.done_reason(now, p).empty()) return true;
  }
  return status_dirty &&
         now - last_status >= std::chrono::duration<double>(options.status_interval_s);
}

bool Coordinator::Impl::step(int timeout_ms) {
  int wait = std::max(0, std::min(timeout_ms, std::max(1, options.heartbeat_interval_ms / 2)));
  // Read what is there first; sleep only if nothing is. The socket's
  // ZMQ_FD wakes on an edge, and reading the socket until it is empty
  // (which also follows the last step's sends) leaves no edge unseen;
  // cheaper than zmq::poll, which costs several system calls per call.
  bool drained = false;
  std::vector<Transport::Incoming> batch = transport.drain(options.max_batch, drained);
  if (batch.empty() && wait > 0 && !(artifacts && artifacts->has_results())) {
    transport.wait(wait, artifacts ? artifacts->fd() : -1);
    batch = transport.drain(options.max_batch, drained);
  }
  auto now = Steady::now();
  descriptors.poll(now);  // at most once a second: a warning when out of descriptors
  // The counts of the lines a flood held back, once their second passed,
  // also when no later line of the kind comes.
  bad_frame_log.flush(now);
  late_log.flush(now);
  const bool artifact_results = artifacts && artifacts->has_results();
  if (batch.empty() && !artifact_results && !writes_due(now, drained)) {
    heartbeats_and_expiry(now, false);  // heartbeats only: nothing to store
    transport.flush();
    return !is_done;
  }
  commit_then_reply([&] {
    if (artifact_results) on_artifact_results();
    handle_group(batch, now);
    heartbeats_and_expiry(now, drained);
    if (!is_done) {
      dispatch(now);
      check_done(now);
    }
    // The status attr: periodically, and always a last time when done.
    write_status(is_done && status_dirty);
  });
  return !is_done;
}

void Coordinator::Impl::commit_then_reply(const std::function<void()>& fn) {
  try {
    storage.run_in_transaction(fn);
  } catch (...) {
    // Rolled back: nothing of it may reach a worker or a callback.
    transport.discard();
    ended.clear();
    throw;
  }
  ++counters.commits;
  transport.flush();
  run_callbacks();
}

void Coordinator::Impl::handle_group(const std::vector<Transport::Incoming>& batch,
                                     Steady::time_point now) {
  for (const auto& in : batch) handle(in, now);
  counters.messages += static_cast<std::int64_t>(batch.size());
}

void Coordinator::Impl::handle(const Transport::Incoming& in, Steady::time_point now) {
  namespace proto = protocol;
  if (!in.valid) {
    bad_frame(in.rid, "expected one frame per message");
    return;
  }
  proto::Message message;
  try {
    message = proto::decode(in.frame);
  } catch (const proto::VersionMismatch& e) {
    refuse_version(in.rid, e, now);
    return;
  } catch (const std::exception& e) {
    bad_frame(in.rid, e.what());
    return;
  }
  if (auto* hello = std::get_if<proto::Hello>(&message)) {
    on_hello(in.rid, *hello, in.user_id, now);
    return;
  }
  Session* found = sessions.find(in.rid);
  if (!found) {
    on_unknown_session(in.rid, message);
    return;
  }
  Session& s = *found;
  s.last_seen = now;
  std::visit(
      [&](auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, proto::Heartbeat>) {
        } else if constexpr (std::is_same_v<T, proto::RequestTrial>) {
          on_request(s);
        } else if constexpr (std::is_same_v<T, proto::Suggest>) {
          on_suggest(s, m);
        } else if constexpr (std::is_same_v<T, proto::Report>) {
          on_report(s, m);
        } else if constexpr (std::is_same_v<T, proto::Complete>) {
          on_complete(s, m);
        } else if constexpr (std::is_same_v<T, proto::Fail>) {
          on_fail(s, m);
        } else if constexpr (std::is_same_v<T, proto::Disconnect>) {
          on_leaving(s, m);
        } else if constexpr (std::is_same_v<T, proto::ArtifactPut>) {
          on_artifact_put(s, m);
        } else if constexpr (std::is_same_v<T, proto::ArtifactGet>) {
          on_artifact_get(s, m);
        } else if constexpr (std::is_same_v<T, proto::Restored>) {
          on_restored(s, m);
        } else if constexpr (std::is_same_v<T, proto::RankReady>) {
          on_rank_ready(s, m);
        } else {
          bad_frame(in.rid, proto::to_string(proto::type_of(message)) + " is not a worker message");
        }
      },
      message);
}

void Coordinator::Impl::write_status(bool force) {
  auto now = Steady::now();
  if (!force && (!status_dirty ||
                 now - last_status < std::chrono::duration<double>(options.status_interval_s)))
    return;
  CoordinatorRecord record;
  record.running = !is_done;
  record.host = hostname;
  record.endpoint = transport.endpoint();
  record.heartbeat_interval_ms = options.heartbeat_interval_ms;
  record.liveness = options.liveness;
  std::map<std::string, int> ranks;
  for (const auto& [number, g] : gangs)
    for (std::size_t r = 0; r < g.rids.size(); ++r) ranks[g.rids[r]] = static_cast<int>(r);
  record.workers = sessions.to_json(now, gangs.empty() ? nullptr : &ranks);
  for (const PendingTrial& p : pending)
    if (p.size > 1)
      record.waiting_for_workers.push_back({{"trial", p.d.trial->number}, {"processes", p.size}});
  record.done_reason = reason_done;
  storage.set_study_system_attr(study_id, kAttrCoordinator, to_json(record));
  last_status = now;
  status_dirty = false;
}

void Coordinator::Impl::run_callbacks() {
  std::vector<TrialPtr> list;
  list.swap(ended);
  if (!callback) return;
  for (const auto& t : list) callback(*t);
}

void Coordinator::Impl::stop(const std::string& why) {
  if (is_done) return;
  stopping = true;
  commit_then_reply([&] {
    // What workers already sent is taken first: a final value printed just
    // before the interrupt keeps its trial COMPLETE instead of queueing it
    // again. Bounded, so a flooding peer cannot hold the stop.
    const Steady::time_point now = Steady::now();
    for (int round = 0; round < 16; ++round) {
      bool drained = false;
      std::vector<Transport::Incoming> batch = transport.drain(options.max_batch, drained);
      handle_group(batch, now);
      if (drained || batch.empty()) break;
    }
    std::vector<std::int64_t> numbers;
    numbers.reserve(running.size());
    for (const auto& [number, rid] : running) numbers.push_back(number);
    for (auto number : numbers)
      end_lost_trial(number, why, lifecycle::RetryCause::kInterrupted, /*always_retry=*/true);
    for (auto& [rid, s] : sessions) s.trials.clear();
    finish(why, true);
    write_status(true);
  });
}

void Coordinator::Impl::worker_exited(std::int64_t pid) {
  commit_then_reply([&] {
    std::vector<std::string> gone;
    for (auto& [rid, s] : sessions)
      if (s.pid == pid && s.hostname == hostname) gone.push_back(rid);
    for (const auto& rid : gone)
      if (Session* s = sessions.find(rid)) expire(*s, "process " + std::to_string(pid) + " exited");
    if (!is_done) {
      dispatch(Steady::now());
      check_done(Steady::now());
    }
  });
}

// ---------------------------------------------------------------- public API

Coordinator::Coordinator(Study study, Json objective_config, CoordinatorOptions options)
    : impl_(std::make_unique<Impl>(std::move(study), std::move(objective_config),
                                   std::move(options))) {}

Coordinator::~Coordinator() {
  if (!impl_) return;
  try {
    if (!impl_->is_done) {
      // A run with nothing left to do (a re-run of a study whose budget was
      // reached) ends for the reason a run that got there would give.
      impl_->is_done = true;
      const std::string why = impl_->limits.done_reason(Impl::Steady::now(), impl_->progress());
      impl_->reason_done = why.empty() ? "coordinator exited" : why;
    }
    impl_->status_dirty = true;
    impl_->write_status(true);
  } catch (const std::exception& e) {
    spdlog::warn("coordinator: could not record the end of the run: {}", e.what());
  }
  // The last counts of held-back lines (the transport's threads flush their
  // own when they stop).
  impl_->bad_frame_log.flush_at_exit();
  impl_->late_log.flush_at_exit();
}

const std::string& Coordinator::endpoint() const { return impl_->transport.endpoint(); }
const std::string& Coordinator::local_endpoint() const { return impl_->transport.local_endpoint(); }
const std::string& Coordinator::artifact_endpoint() const {
  static const std::string kNone;
  return impl_->artifact_server ? impl_->artifact_server->endpoint() : kNone;
}
bool Coordinator::step(int timeout_ms) { return impl_->step(timeout_ms); }
void Coordinator::stop(const std::string& reason) { impl_->stop(reason); }
void Coordinator::worker_exited(std::int64_t pid) { impl_->worker_exited(pid); }
bool Coordinator::done() const { return impl_->is_done; }
const std::string& Coordinator::done_reason() const { return impl_->reason_done; }
bool Coordinator::stopped_for_failures() const { return !impl_->limits.failure_reason().empty(); }

CoordinatorStats Coordinator::stats() const {
  const Impl& s = *impl_;
  CoordinatorStats out = s.counters;
  out.finished = s.mirror.finished();
  out.running = static_cast<std::int64_t>(s.running.size());
  out.waiting = static_cast<std::int64_t>(s.mirror.waiting().size());
  for (const auto& [rid, w] : s.sessions) (w.busy() ? out.workers_busy : out.workers_idle) += 1;
  if (const TrialPtr& best = s.mirror.best()) {
    out.best_value = best->value;
    out.best_number = best->number;
  }
  out.refused_keys =
      s.transport.refused_keys() + (s.artifact_server ? s.artifact_server->refused_keys() : 0);
  out.failed_handshakes = s.transport.failed_handshakes() +
                          (s.artifact_server ? s.artifact_server->failed_handshakes() : 0);
  out.run_succeeded = s.limits.outcomes().succeeded;
  out.run_failed = s.limits.outcomes().failed;
  return out;
}

std::vector<WorkerStatus> Coordinator::workers() const {
  return impl_->sessions.statuses(std::chrono::steady_clock::now());
}

void Coordinator::set_trial_callback(std::function<void(const FrozenTrial&)> callback) {
  impl_->callback = std::move(callback);
}

}  // namespace hps
