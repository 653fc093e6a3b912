// Coordinator::Impl: multi-process trials (search/resources.h; docs
// "Multi-process trials"), gang scheduled.
//
// Policy. Trials start in the order they were taken (a claimed WAITING
// trial, else a newly sampled one). A trial of size N starts only when N
// workers are idle, all at once (all ranks or none). The oldest trial that
// does not fit reserves every idle worker until enough are idle for it: no
// other trial starts meanwhile, so small trials never starve a big one;
// trials behind it start on idle workers beyond its reservation, which, as
// its reservation is every idle worker until it fits, means once it has
// started. Only one trial is taken ahead of the workers (sampled, then
// waiting for them), so the sampler sees every result that came before.
// Of the idle workers the ranks prefer one host: the host with the fewest
// idle workers that still holds all N, else the hosts with the most idle
// workers first; ranks are numbered host by host, rank 0's host first.
//
// Rendezvous. Rank 0 is assigned first (master_port 0): its worker picks a
// free TCP port on its host and says RankReady with it; the other ranks are
// then assigned with MASTER_ADDR (127.0.0.1 on rank 0's host, its host
// name elsewhere) and MASTER_PORT, and each says RankReady as it starts.
// Ranks that have not all said RankReady within rendezvous_timeout_s of
// rank 0's assignment fail the trial, naming the first missing rank and
// its host.
//
// End. Rank 0's results are the trial's; the other ranks' reports are not
// sent and their Complete is dropped (a Fail is remembered and added to the
// trial's fail reason if rank 0 fails too). When the trial ends for any
// reason (rank 0's result, a lost or stopped rank, a rendezvous timeout,
// Ctrl-C) every other rank still running it gets StopTrial; a lost rank
// fails the whole trial, retried as a whole within the retry limit.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "coordinator/coordinator_impl.h"
#include "search/printable.h"

namespace hps {

namespace proto = hps::protocol;

namespace {

// The most trials whose released ranks are remembered.
constexpr std::size_t kMaxReleasedRemembered = 1024;

}  // namespace

void Coordinator::Impl::dispatch_gangs(Steady::time_point now) {
  while (true) {
    // No new trial starts once the run stops dispatching for good: a trial
    // waiting for workers is queued again for a later run.
    if (!pending.empty() &&
        (stopping || limits.timed_out(now) || !limits.failure_reason().empty())) {
      while (!pending.empty()) {
        const std::int64_t number = pending.front().d.trial->number;
        end_lost_trial(number, "not started: no new trial is dispatched",
                       lifecycle::RetryCause::kInterrupted, /*always_retry=*/true);
      }
      return;
    }
    std::vector<Session*> idle = sessions.idle_sessions();
    if (idle.empty()) return;
    if (pending.empty()) {
      if (!limits.can_dispatch(now, idle.size(), progress())) return;
      const std::size_t n_ended = ended.size();
      std::optional<TrialSource::Dispatch> d = source.next(idle.front()->name, n_workers, ended);
      for (std::size_t i = n_ended; i < ended.size(); ++i) limits.trial_ended(*ended[i]);
      if (!d) {
        if (!limits.can_dispatch(now, idle.size(), progress())) return;
        continue;  // a waiting trial failed to sample; try the next one
      }
      PendingTrial p;
      p.size = options.resources.size_of(d->trial->params);
      p.d = std::move(*d);
      running[p.d.trial->number] = "";  // counted as running: it holds budget
      pending.push_back(std::move(p));
      status_dirty = true;
    }
    PendingTrial& head = pending.front();
    if (head.size > static_cast<int>(idle.size())) {
      // Not while the launcher's workers are still connecting.
      const bool pool_started = static_cast<int>(sessions.size()) >= options.expected_workers ||
                                limits.start_wait_over(now);
      if (!head.wait_logged && head.size > static_cast<int>(sessions.size()) && pool_started) {
        head.wait_logged = true;
        spdlog::warn(
            "coordinator: trial {} needs {} processes (resources.processes) and {} connected: it "
            "waits for more workers to join",
            head.d.trial->number, head.size,
            sessions.size() == 1 ? std::string("1 worker is")
                                 : std::to_string(sessions.size()) + " workers are");
      }
      return;  // the idle workers are reserved for it
    }
    std::vector<Session*> ranks = choose_ranks(idle, head.size);
    PendingTrial p = std::move(pending.front());
    pending.pop_front();
    start_gang(std::move(p), ranks, now);
  }
}

std::vector<Session*> Coordinator::Impl::choose_ranks(const std::vector<Session*>& idle,
                                                      int size) const {
  // Idle workers by host, hosts in the order their first worker asked.
  std::vector<std::pair<std::string, std::vector<Session*>>> hosts;
  for (Session* s : idle) {
    auto it = std::find_if(hosts.begin(), hosts.end(),
                           [&](const auto& h) { return h.first == s->hostname; });
    if (it == hosts.end()) {
      hosts.emplace_back(s->hostname, std::vector<Session*>{});
      it = std::prev(hosts.end());
    }
    it->second.push_back(s);
  }
  const auto n = static_cast<std::size_t>(size);
  // One host that holds them all: the one with the fewest idle workers
  // (the others stay free for bigger trials).
  const std::vector<Session*>* best = nullptr;
  for (const auto& [host, list] : hosts)
    if (list.size() >= n && (!best || list.size() < best->size())) best = &list;
  if (best) return {best->begin(), best->begin() + static_cast<std::ptrdiff_t>(n)};
  // Else the fewest hosts: those with the most idle workers first.
  std::stable_sort(hosts.begin(), hosts.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::vector<Session*> out;
  for (const auto& [host, list] : hosts)
    for (Session* s : list)
      if (out.size() < n) out.push_back(s);
  return out;
}

void Coordinator::Impl::start_gang(PendingTrial p, const std::vector<Session*>& ranks,
                                   Steady::time_point now) {
  const std::int64_t number = p.d.trial->number;
  if (p.size == 1) {
    send_assignment(*ranks.front(), p.d);
    return;
  }
  Gang g;
  g.d = std::move(p.d);
  g.started = now;
  const auto size = ranks.size();
  g.rids.reserve(size);
  g.places.resize(size);
  g.assigned.assign(size, false);
  g.ready.assign(size, false);
  std::vector<std::string> hosts;  // in rank order
  std::map<std::string, int> per_host;
  for (Session* s : ranks) {
    if (std::find(hosts.begin(), hosts.end(), s->hostname) == hosts.end())
      hosts.push_back(s->hostname);
    ++per_host[s->hostname];
  }
  std::map<std::string, int> seen;
  for (std::size_t r = 0; r < size; ++r) {
    Session& s = *ranks[r];
    RankPlace& place = g.places[r];
    place.rank = static_cast<int>(r);
    place.world_size = static_cast<int>(size);
    place.local_rank = seen[s.hostname]++;
    place.local_world_size = per_host[s.hostname];
    place.group_rank =
        static_cast<int>(std::find(hosts.begin(), hosts.end(), s.hostname) - hosts.begin());
    g.rids.push_back(s.routing_id);
    // Reserved: it holds the trial (its lease) from now on, assigned once
    // rank 0 has said where to meet.
    s.wants_trial = false;
    if (r > 0) s.trials.push_back(number);
  }
  send_assignment(*ranks.front(), g.d, &g.places[0]);
  g.assigned[0] = true;
  spdlog::debug("coordinator: trial {} starts as {} ranks on {} hosts", number, size, hosts.size());
  gangs[number] = std::move(g);
  status_dirty = true;
}

void Coordinator::Impl::on_rank_ready(Session& s, const proto::RankReady& m) {
  auto it = gangs.find(m.number);
  const auto rank = static_cast<std::size_t>(m.rank);
  const bool holds_rank = it != gangs.end() && rank < it->second.rids.size() &&
                          it->second.rids[rank] == s.routing_id && it->second.assigned[rank] &&
                          s.holds(m.number);
  if (!holds_rank || (rank == 0 && m.port == 0)) {
    ++counters.rejected_results;
    if (late_log.allow(Steady::now()))
      spdlog::warn("coordinator: rejected RankReady for trial {} rank {} from worker {}: {}",
                   m.number, m.rank, s.name,
                   holds_rank ? "rank 0 must name its rendezvous port (port 0 given)"
                              : "not a rank it holds");
    return;
  }
  Gang& g = it->second;
  if (g.ready[rank]) return;  // said twice
  g.ready[rank] = true;
  if (rank == 0) {
    const std::string master = m.addr.empty() ? s.hostname : printable(m.addr);
    for (std::size_t r = 1; r < g.rids.size(); ++r) {
      Session* other = sessions.find(g.rids[r]);
      if (!other || !other->holds(m.number)) continue;
      RankPlace place = g.places[r];
      place.master_addr = other->hostname == s.hostname ? "127.0.0.1" : master;
      place.master_port = m.port;
      send_assignment(*other, g.d, &place);
      g.assigned[r] = true;
    }
  }
  if (std::all_of(g.ready.begin(), g.ready.end(), [](bool b) { return b; })) {
    const double seconds = std::chrono::duration<double>(Steady::now() - g.started).count();
    spdlog::debug("coordinator: trial {}: all {} ranks started in {:.3f} s", m.number,
                  g.rids.size(), seconds);
    storage.set_trial_system_attr(g.d.trial->trial_id, "rendezvous_s", seconds);
    mirror.refresh(m.number);
  }
}

bool Coordinator::Impl::is_other_rank(const Session& s, std::int64_t number) const {
  auto it = gangs.find(number);
  return it != gangs.end() && !it->second.rids.empty() && it->second.rids.front() != s.routing_id;
}

bool Coordinator::Impl::other_rank_ended(Session& s, std::int64_t number,
                                         const std::string* fail_message) {
  if (auto r = released_ranks.find(number); r != released_ranks.end() && !s.holds(number)) {
    auto& rids = r->second;
    if (auto at = std::find(rids.begin(), rids.end(), s.routing_id); at != rids.end()) {
      rids.erase(at);  // its result, after the trial ended: dropped
      if (rids.empty()) released_ranks.erase(r);
      return true;
    }
  }
  if (!s.holds(number) || !is_other_rank(s, number)) return false;
  Gang& g = gangs.at(number);
  const auto rank = static_cast<std::size_t>(std::find(g.rids.begin(), g.rids.end(), s.routing_id) -
                                             g.rids.begin());
  if (rank < g.assigned.size()) g.assigned[rank] = false;  // nothing left to stop there
  s.release(number);
  sessions.resume_request(s);
  status_dirty = true;
  if (fail_message) {
    // Its program failed: the trial fails, as torchrun's group does; the
    // other ranks (rank 0 too) are stopped rather than left waiting in a
    // collective for the rank that is gone.
    const std::string text = "rank " + std::to_string(rank) + " on host " + s.hostname + ": " +
                             (fail_message->empty() ? "failed" : *fail_message);
    spdlog::warn("coordinator: trial {}: {}; stopping its other ranks", number, text);
    storage.set_trial_state(mirror.at(number).trial_id, TrialState::kFail, std::nullopt, text);
    end_trial(nullptr, number);
  }
  return true;
}

void Coordinator::Impl::release_gang(std::int64_t number, const std::string& reason) {
  auto it = gangs.find(number);
  if (it == gangs.end()) return;
  Gang g = std::move(it->second);
  gangs.erase(it);
  std::vector<std::string> stopped;
  for (std::size_t r = 0; r < g.rids.size(); ++r) {
    Session* s = sessions.find(g.rids[r]);
    if (!s || !s->holds(number)) continue;
    s->release(number);
    if (g.assigned[r]) {
      send(*s, proto::StopTrial{number, reason});
      stopped.push_back(s->routing_id);
      sessions.resume_request(*s);
    } else {
      sessions.want_trial(*s);  // reserved, never assigned: still waits for a trial
    }
  }
  if (!stopped.empty()) {
    released_ranks[number] = std::move(stopped);
    while (released_ranks.size() > kMaxReleasedRemembered)
      released_ranks.erase(released_ranks.begin());
  }
  status_dirty = true;
}

std::string Coordinator::Impl::rank_note(std::int64_t number, const std::string& rid) const {
  auto it = gangs.find(number);
  if (it == gangs.end()) return "";
  const auto& rids = it->second.rids;
  auto at = std::find(rids.begin(), rids.end(), rid);
  if (at == rids.end()) return "";
  std::string host;
  if (const Session* s = sessions.find(rid)) host = " on host " + s->hostname;
  return " (rank " + std::to_string(at - rids.begin()) + " of " + std::to_string(rids.size()) +
         host + ")";
}

bool Coordinator::Impl::rendezvous_open() const {
  return std::any_of(gangs.begin(), gangs.end(), [](const auto& entry) {
    const auto& ready = entry.second.ready;
    return !std::all_of(ready.begin(), ready.end(), [](bool b) { return b; });
  });
}

void Coordinator::Impl::check_rendezvous(Steady::time_point now) {
  const auto timeout = std::chrono::duration<double>(options.resources.rendezvous_timeout_s);
  std::vector<std::pair<std::int64_t, std::string>> late;
  for (const auto& [number, g] : gangs) {
    if (now - g.started <= timeout) continue;
    auto missing = std::find(g.ready.begin(), g.ready.end(), false);
    if (missing == g.ready.end()) continue;
    const auto rank = static_cast<std::size_t>(missing - g.ready.begin());
    std::string host = "unknown";
    if (Session* s = sessions.find(g.rids[rank])) host = s->hostname;
    late.emplace_back(number, "rank " + std::to_string(rank) + " on host " + host +
                                  " did not start within " +
                                  fmt::format("{:g}", options.resources.rendezvous_timeout_s) +
                                  " s (resources.rendezvous_timeout_s)");
  }
  for (const auto& [number, why] : late) {
    // Every rank's lease ends here; end_lost_trial stops those that run.
    end_lost_trial(number, why);
  }
}

void Coordinator::Impl::forget_pending(std::int64_t number) {
  std::erase_if(pending, [&](const PendingTrial& p) { return p.d.trial->number == number; });
}

}  // namespace hps
