// SessionTable: the workers connected to the coordinator (a session per
// routing id, from Hello until it expires or leaves), the queue of those
// waiting for a trial, and a bounded memory of expired sessions (so that a
// late message can be logged as a rejected late result). A session is the
// lease on the trials its worker holds (Session::trials: the one it runs
// and, with prefetch, those waiting there). Private to the coordinator (not
// installed).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "coordinator/coordinator.h"
#include "search/json_util.h"

namespace hps {

struct Session {
  using Clock = std::chrono::steady_clock;

  std::string routing_id;
  std::string name;
  std::string hostname;
  std::int64_t pid = 0;
  std::string device;  // Hello.device: "cpu", "cuda:0", "cuda"
  // Hello.visible_devices: the worker's CUDA_VISIBLE_DEVICES, its GPUs
  // ("0,1"; "" when unset), escaped.
  std::string gpus;
  int threads = 1;
  Clock::time_point last_seen;
  Clock::time_point last_sent;
  Clock::time_point connected;
  bool wants_trial = false;  // sent RequestTrial, not yet answered
  // Its worker was stopped (a Fail "interrupted": a signal): it is leaving,
  // so it gets no more trials, whatever it asked for before.
  bool stopping = false;
  // The request waits for the worker's running trial to end: near the end
  // of the budget a trial is not prefetched (RunLimits::may_prefetch).
  bool request_deferred = false;
  // Numbers of the RUNNING trials it holds (its leases), in the order they
  // were assigned: the first runs, the others wait on the worker
  // (prefetch). At most 1 + prefetch.
  std::vector<std::int64_t> trials;
  int prefetch = 0;  // Hello.prefetch
  bool config_sent = false;
  std::string key_name;  // the CURVE key's name (ZAP User-Id); "" over plain ZMTP

  // The device and GPUs for log lines: "cuda (CUDA_VISIBLE_DEVICES=0,1)".
  std::string device_text() const {
    return gpus.empty() ? device : device + " (CUDA_VISIBLE_DEVICES=" + gpus + ")";
  }

  bool busy() const { return !trials.empty(); }
  bool holds(std::int64_t number) const {
    return std::find(trials.begin(), trials.end(), number) != trials.end();
  }
  // Whether it may be given another trial (it holds fewer than 1 + prefetch).
  bool has_room() const { return trials.size() <= static_cast<std::size_t>(prefetch); }
  // The trial `number` no longer held (ended, or lost).
  void release(std::int64_t number) { std::erase(trials, number); }
  // Every trial it holds, no longer held (its worker is gone).
  std::vector<std::int64_t> take_trials() { return std::exchange(trials, {}); }
};

class SessionTable {
 public:
  using Clock = Session::Clock;
  // Expired sessions remembered (for "rejected late result" logs).
  static constexpr std::size_t kMaxExpiredRemembered = 4096;

  std::size_t size() const { return sessions_.size(); }
  // The session of `rid`, or nullptr.
  Session* find(const std::string& rid);
  const Session* find(const std::string& rid) const;
  // Adds (or replaces) the session of s.routing_id.
  Session& add(Session s);
  // Forgets the session of `rid` and remembers it as expired.
  void expire(const std::string& rid);
  // The worker name of an expired session of `rid`, if remembered.
  const std::string* expired_name(const std::string& rid) const;

  // Queues `s` for a trial (once).
  void want_trial(Session& s);
  // Queues again the deferred request of `s` (Session::request_deferred),
  // if any, once its running trial ended.
  void resume_request(Session& s);
  // The next session waiting for a trial that still wants one and has
  // room for it, or nullptr; pop_waiter() removes it from the queue.
  Session* next_waiter();
  // The sessions waiting for a trial that run none (not busy: a worker
  // that prefetches is left out while it runs one), in request order, each
  // once; the queue is trimmed of sessions that no longer want one. For
  // gang scheduling (multi-process trials), which takes several at once.
  std::vector<Session*> idle_sessions();
  void pop_waiter() { idle_.pop_front(); }
  void clear_waiters() { idle_.clear(); }
  bool has_waiters() const { return !idle_.empty(); }
  // Sessions queued for a trial (an expired one may still be counted until
  // next_waiter() passes it).
  std::size_t waiter_count() const { return idle_.size(); }

  // Routing ids of the sessions silent for longer than `timeout`.
  std::vector<std::string> silent(Clock::time_point now, Clock::duration timeout) const;
  // Whether any session is silent for longer than `timeout`.
  bool any_silent(Clock::time_point now, Clock::duration timeout) const;

  // The sessions for the coordinator's status attr: name, host, pid,
  // device, gpus (CUDA_VISIBLE_DEVICES, "" if unset), threads, connected_s
  // (seconds), trial (number or null).
  // `ranks`: routing id -> its rank in the multi-process trial it holds
  // (written as "rank"); null when no trial has several ranks.
  Json to_json(Clock::time_point now, const std::map<std::string, int>* ranks = nullptr) const;
  // The same as WorkerStatus, sorted by name.
  std::vector<WorkerStatus> statuses(Clock::time_point now) const;

  // Iteration over the sessions (by routing id).
  auto begin() { return sessions_.begin(); }
  auto end() { return sessions_.end(); }
  auto begin() const { return sessions_.begin(); }
  auto end() const { return sessions_.end(); }

 private:
  std::unordered_map<std::string, Session> sessions_;     // by routing id
  std::deque<std::string> idle_;                          // routing ids, in request order
  std::unordered_map<std::string, std::string> expired_;  // routing id -> worker name
  std::deque<std::string> expired_order_;
};

}  // namespace hps
