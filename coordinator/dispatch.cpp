// Coordinator::Impl: trials to the workers that asked for one, in request
// order, while RunLimits allow; and the end of the study (RunLimits decides
// when, finish() tells every worker).
#include <spdlog/spdlog.h>

#include "coordinator/coordinator_impl.h"

namespace hps {

namespace proto = hps::protocol;

void Coordinator::Impl::dispatch(Steady::time_point now) {
  if (gang_mode) {
    dispatch_gangs(now);  // gangs.cpp
    return;
  }
  while (sessions.has_waiters() && limits.can_dispatch(now, sessions.waiter_count(), progress())) {
    Session* s = sessions.next_waiter();
    if (!s) break;
    // PBT: never prefetched, so a member's successor goes to an idle worker
    // (the busy ones train the other members to the end).
    if (s->busy() && (options.pbt || !limits.may_prefetch(progress(), sessions.size()))) {
      // Near the end of the budget a trial waiting on a busy worker could
      // finish after idle workers ran out of trials: the request waits for
      // the worker's running trial to end (SessionTable::resume_request).
      s->request_deferred = true;
      sessions.pop_waiter();
      continue;
    }
    const std::size_t n_ended = ended.size();
    std::optional<TrialSource::Dispatch> d = source.next(s->name, n_workers, ended);
    // A waiting trial that failed to sample ended FAIL.
    for (std::size_t i = n_ended; i < ended.size(); ++i) limits.trial_ended(*ended[i]);
    if (!d) {
      if (!limits.can_dispatch(now, sessions.waiter_count(), progress())) break;
      continue;  // a waiting trial failed to sample; try the next one
    }
    if (options.pbt) {
      pbt_tag(d->trial);
      d->trial = mirror.ptr(d->trial->number);
    }
    send_assignment(*s, *d);
    sessions.pop_waiter();
  }
}

void Coordinator::Impl::send_assignment(Session& s, const TrialSource::Dispatch& d,
                                        const RankPlace* place) {
  const TrialPtr& t = d.trial;
  proto::Assignment a;
  a.trial_id = t->trial_id;
  a.number = t->number;
  a.params = proto::to_wire(t->params);
  a.fixed = proto::to_wire(lifecycle::pending_fixed_params(d.fixed, t->params));
  a.config_id = config_id;
  if (options.artifacts.checkpoints) {
    a.lineage = checkpoints::lineage_of(*t);
    a.resume_step = checkpoints::resume_step_of(*t).value_or(-1);
    a.store_id = store_id;
    if (options.checkpoint_root.size() <= proto::kMaxStoreRootBytes)
      a.store_root = options.checkpoint_root;
  }
  if (place) {
    a.rank = place->rank;
    a.world_size = place->world_size;
    a.local_rank = place->local_rank;
    a.local_world_size = place->local_world_size;
    a.group_rank = place->group_rank;
    a.master_addr = place->master_addr;
    a.master_port = place->master_port;
    if (place->rank != 0) {  // only rank 0's checkpoint folder is the trial's
      a.lineage = -1;
      a.resume_step = -1;
    }
  }
  if (!s.config_sent) {
    a.config_json = config_json;
    s.config_sent = true;
  }
  s.wants_trial = false;
  if (!s.holds(t->number)) s.trials.push_back(t->number);
  if (!place || place->rank == 0) running[t->number] = s.routing_id;
  status_dirty = true;
  send(s, a);
}

// Ends the study when RunLimits say it is done.
void Coordinator::Impl::check_done(Steady::time_point now) {
  if (is_done) return;
  std::string why = limits.done_reason(now, progress());
  if (!why.empty()) finish(why, false);
}

void Coordinator::Impl::finish(const std::string& why, bool stop_trials) {
  is_done = true;
  reason_done = why;
  for (auto& [rid, s] : sessions) send(s, proto::Shutdown{why, stop_trials});
  sessions.clear_waiters();
  status_dirty = true;
  spdlog::debug("coordinator: study '{}' done: {}", study.name(), why);
}

}  // namespace hps
