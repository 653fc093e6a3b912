// Coordinator::Impl: the end of a lease. A trial ends when its worker
// reports it (end_trial) or is lost (end_lost_trial: FAIL, then queued
// again while retries remain, search/trial_lifecycle.h); a worker is lost
// when it is silent for liveness heartbeat intervals (the ZeroMQ guide's
// Paranoid Pirate pattern, zguide chapter 4), says Hello again, or its
// process exits.
#include <spdlog/spdlog.h>

#include "coordinator/coordinator_impl.h"

namespace hps {

// After the store marked the trial finished: bookkeeping.
void Coordinator::Impl::end_transfers(std::int64_t number) {
  if (artifact_server) artifact_server->revoke_trial(number);
  // An upload the trial's worker left unfinished (lost, stopped) holds no
  // bytes of max_study_bytes any more: the next trials' uploads count only
  // what is stored.
  user_pending_bytes.erase(number);
  if (number >= 0 && mirror.trials().size() > static_cast<std::size_t>(number))
    pending_bytes.erase(checkpoints::lineage_of(mirror.at(number)));
}

void Coordinator::Impl::end_trial(Session* s, std::int64_t number) {
  if (s) s->release(number);
  release_gang(number, "the trial ended");  // a multi-process trial's other ranks
  if (s) sessions.resume_request(*s);
  running.erase(number);
  ended.push_back(mirror.refresh(number));
  limits.trial_ended(*ended.back());
  end_transfers(number);
  apply_retention(number);
  status_dirty = true;
}

// Checkpoint retention once trial `number` ended (search/checkpoints.h):
// removes the lineage folders it no longer keeps, then marks each such
// trial's checkpoint attr deleted, so the store never names a folder that
// is gone.
void Coordinator::Impl::apply_retention(std::int64_t number) {
  if (options.checkpoint_root.empty()) return;
  const FrozenTrial& t = mirror.at(number);
  for (const FrozenTrial* v :
       checkpoints::retention_victims(mirror.trials(), t, direction, options.artifacts)) {
    const std::int64_t lineage = checkpoints::lineage_of(*v);
    stored_bytes.erase(lineage);
    if (artifacts) {
      // On the I/O thread, after any upload of the lineage queued before.
      ArtifactStore::Job job;
      job.kind = ArtifactStore::Job::Kind::kRemove;
      job.lineage = lineage;
      artifacts->submit(std::move(job));
    } else {
      checkpoints::remove_lineage(options.checkpoint_root, lineage);
    }
    mark_checkpoint_deleted(*v);
  }
}

// Sets {"deleted": true} in trial `t`'s checkpoint attr.
void Coordinator::Impl::mark_checkpoint_deleted(const FrozenTrial& t) {
  const std::int64_t n = t.number;
  storage.set_trial_system_attr(t.trial_id, checkpoints::kAttrCheckpoint,
                                checkpoints::deleted_checkpoint_attr(t));
  mirror.refresh(n);
}

// Trial `number` has a snapshot of `step` (taken in place, or uploaded and
// verified): the store names it, and the earlier trials of its lineage,
// whose snapshots the worker removed once this one was recorded
// (LineageFolder::keep_only), no longer name theirs.
void Coordinator::Impl::record_checkpoint(std::int64_t number, std::int64_t step) {
  const FrozenTrial& t = mirror.at(number);
  storage.set_trial_system_attr(t.trial_id, checkpoints::kAttrCheckpoint,
                                checkpoints::checkpoint_attr(step));
  mirror.refresh(number);
  for (const FrozenTrial* v : checkpoints::superseded_by(mirror.trials(), mirror.at(number)))
    mark_checkpoint_deleted(*v);
}

// A running trial whose worker is gone (or stopped, or the run was
// interrupted: `cause`): FAIL(reason) and, while retries remain (or
// always), queued again with the same params.
void Coordinator::Impl::end_lost_trial(std::int64_t number, const std::string& reason,
                                       lifecycle::RetryCause cause, bool always_retry) {
  running.erase(number);
  forget_pending(number);
  end_transfers(number);
  release_gang(number, reason);  // a multi-process trial ends on every rank
  const FrozenTrial& t = mirror.at(number);
  if (!storage.set_trial_state(t.trial_id, TrialState::kFail, std::nullopt, reason)) return;
  mirror.refresh(number);
  int depth = lifecycle::retry_depth(mirror.trials(), number);
  // A stop from outside (a worker stopped by a signal) is always queued
  // again: only a lost worker uses up max_retries (trial_lifecycle.h).
  bool retry =
      always_retry || !lifecycle::counts_against_retry_limit(cause) || depth < options.max_retries;
  if (retry) {
    mirror.append(lifecycle::queue_retry(storage, study_id, mirror.at(number), cause));
    mirror.refresh(number);
  }
  spdlog::warn("coordinator: trial {} FAIL ({}){}", number, reason,
               retry ? "; queued again with the same params" : "; no retries left");
  ended.push_back(mirror.ptr(number));
  limits.trial_ended(*ended.back());  // a retried FAIL does not count
  if (!retry) apply_retention(number);
  status_dirty = true;
}

// Keeps the number of connected workers that sampling contexts carry
// (SamplingContext::n_workers: TPE turns its constant liar on above 1).
void Coordinator::Impl::note_worker_count() {
  n_workers = std::max(1, static_cast<int>(sessions.size()));
}

void Coordinator::Impl::expire(Session& s, const std::string& why) {
  if (!is_done || s.busy()) ++counters.expired_workers;
  if (is_done && !s.busy())
    spdlog::debug("coordinator: worker {} left: {}", s.name, why);
  else
    spdlog::warn("coordinator: worker {} ({}) lost: {}", s.name, s.device_text(), why);
  for (const std::int64_t number : s.take_trials())
    end_lost_trial(number, "worker lost" + rank_note(number, s.routing_id));
  std::string rid = s.routing_id;
  sessions.expire(rid);  // `s` is gone from here on
  status_dirty = true;
  note_worker_count();
}

void Coordinator::Impl::heartbeats_and_expiry(Steady::time_point now, bool may_expire) {
  if (may_expire && !gangs.empty()) check_rendezvous(now);
  const auto interval = std::chrono::milliseconds(options.heartbeat_interval_ms);
  const auto timeout = interval * options.liveness;
  std::vector<std::string> dead;
  if (may_expire) dead = sessions.silent(now, timeout);
  for (auto& [rid, s] : sessions) {
    if (may_expire && now - s.last_seen > timeout) continue;
    if (now - s.last_sent >= interval) send(s, protocol::Heartbeat{});
  }
  for (const auto& rid : dead)
    if (Session* s = sessions.find(rid))
      expire(*s, "no heartbeat for " + std::to_string(options.liveness) + " intervals");
}

}  // namespace hps
