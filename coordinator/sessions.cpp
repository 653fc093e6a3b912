#include "coordinator/sessions.h"

#include <algorithm>

namespace hps {

Session* SessionTable::find(const std::string& rid) {
  auto it = sessions_.find(rid);
  return it == sessions_.end() ? nullptr : &it->second;
}

const Session* SessionTable::find(const std::string& rid) const {
  auto it = sessions_.find(rid);
  return it == sessions_.end() ? nullptr : &it->second;
}

Session& SessionTable::add(Session s) {
  std::string rid = s.routing_id;
  return sessions_[rid] = std::move(s);
}

void SessionTable::expire(const std::string& rid) {
  auto it = sessions_.find(rid);
  if (it == sessions_.end()) return;
  expired_[rid] = it->second.name;
  expired_order_.push_back(rid);
  while (expired_order_.size() > kMaxExpiredRemembered) {
    expired_.erase(expired_order_.front());
    expired_order_.pop_front();
  }
  sessions_.erase(it);
}

const std::string* SessionTable::expired_name(const std::string& rid) const {
  auto it = expired_.find(rid);
  return it == expired_.end() ? nullptr : &it->second;
}

void SessionTable::want_trial(Session& s) {
  if (s.wants_trial || s.stopping) return;
  s.wants_trial = true;
  idle_.push_back(s.routing_id);
}

void SessionTable::resume_request(Session& s) {
  if (!s.request_deferred) return;
  s.request_deferred = false;
  if (s.wants_trial) idle_.push_back(s.routing_id);
}

Session* SessionTable::next_waiter() {
  while (!idle_.empty()) {
    Session* s = find(idle_.front());
    if (s && s->wants_trial && !s->request_deferred && !s->stopping && s->has_room()) return s;
    idle_.pop_front();
  }
  return nullptr;
}

std::vector<Session*> SessionTable::idle_sessions() {
  std::vector<Session*> out;
  std::deque<std::string> kept;
  for (const std::string& rid : idle_) {
    Session* s = find(rid);
    if (!s || !s->wants_trial || s->stopping) continue;
    if (std::find(kept.begin(), kept.end(), rid) != kept.end()) continue;
    kept.push_back(rid);
    if (!s->request_deferred && !s->busy()) out.push_back(s);
  }
  idle_ = std::move(kept);
  return out;
}

std::vector<std::string> SessionTable::silent(Clock::time_point now,
                                              Clock::duration timeout) const {
  std::vector<std::string> out;
  for (const auto& [rid, s] : sessions_)
    if (now - s.last_seen > timeout) out.push_back(rid);
  return out;
}

bool SessionTable::any_silent(Clock::time_point now, Clock::duration timeout) const {
  return std::any_of(sessions_.begin(), sessions_.end(),
                     [&](const auto& entry) { return now - entry.second.last_seen > timeout; });
}

Json SessionTable::to_json(Clock::time_point now, const std::map<std::string, int>* ranks) const {
  Json arr = Json::array();
  for (const auto& [rid, s] : sessions_) {
    Json w{{"name", s.name},
           {"host", s.hostname},
           {"pid", s.pid},
           {"device", s.device},
           {"gpus", s.gpus},
           {"threads", s.threads},
           {"connected_s", std::chrono::duration<double>(now - s.connected).count()}};
    w["trial"] = s.busy() ? Json(s.trials.front()) : Json();
    if (ranks)
      if (auto r = ranks->find(rid); r != ranks->end() && s.busy()) w["rank"] = r->second;
    if (s.trials.size() > 1)
      w["prefetched"] = Json(std::vector<std::int64_t>(s.trials.begin() + 1, s.trials.end()));
    arr.push_back(std::move(w));
  }
  return arr;
}

std::vector<WorkerStatus> SessionTable::statuses(Clock::time_point now) const {
  std::vector<WorkerStatus> out;
  for (const auto& [rid, s] : sessions_) {
    WorkerStatus w;
    w.name = s.name;
    w.hostname = s.hostname;
    w.pid = s.pid;
    w.device = s.device;
    w.gpus = s.gpus;
    w.threads = s.threads;
    if (s.busy()) w.trial = s.trials.front();
    w.prefetched.assign(s.trials.begin() + (s.busy() ? 1 : 0), s.trials.end());
    w.connected_s = std::chrono::duration<double>(now - s.connected).count();
    out.push_back(std::move(w));
  }
  std::sort(out.begin(), out.end(),
            [](const WorkerStatus& a, const WorkerStatus& b) { return a.name < b.name; });
  return out;
}

}  // namespace hps
