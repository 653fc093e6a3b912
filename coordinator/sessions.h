// SessionTable: the workers connected to the coordinator (a session per
// routing id, from Hello until it expires or leaves), the queue of those
// waiting for a trial, and a bounded memory of expired sessions (so that a
// late message can be logged as a rejected late result). A session is the
// lease on the one trial its worker runs (Session::trial). Private to the
// coordinator (not installed).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
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
  std::string device;
  int threads = 1;
  Clock::time_point last_seen;
  Clock::time_point last_sent;
  Clock::time_point connected;
  bool wants_trial = false;           // sent RequestTrial, not yet answered
  std::optional<std::int64_t> trial;  // number of the RUNNING trial it owns (its lease)
  bool config_sent = false;
  std::string key_name;  // the CURVE key's name (ZAP User-Id); "" over plain ZMTP
};

class SessionTable {
 public:
  using Clock = Session::Clock;
  // Expired sessions remembered (for "rejected late result" logs).
  static constexpr std::size_t kMaxExpiredRemembered = 4096;

  std::size_t size() const { return sessions_.size(); }
  // The session of `rid`, or nullptr.
  Session* find(const std::string& rid);
  // Adds (or replaces) the session of s.routing_id.
  Session& add(Session s);
  // Forgets the session of `rid` and remembers it as expired.
  void expire(const std::string& rid);
  // The worker name of an expired session of `rid`, if remembered.
  const std::string* expired_name(const std::string& rid) const;

  // Queues `s` for a trial (once).
  void want_trial(Session& s);
  // The next session waiting for a trial that still wants one, or nullptr;
  // pop_waiter() removes it from the queue.
  Session* next_waiter();
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
  // device, threads, connected_s (seconds), trial (number or null).
  Json to_json(Clock::time_point now) const;
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
