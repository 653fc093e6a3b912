// Coordinator::Impl: one handler per worker message (protocol/protocol.h),
// called inside the step's storage transaction; replies are queued and
// sent after the commit.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator_impl.h"
#include "search/checkpoints.h"
#include "search/json_util.h"
#include "search/printable.h"

namespace hps {

namespace proto = hps::protocol;

void Coordinator::Impl::send(Session& s, const proto::Message& m) {
  transport.queue(s.routing_id, proto::encode(m));
  s.last_sent = Steady::now();
}

void Coordinator::Impl::send_to(const std::string& rid, const proto::Message& m) {
  transport.queue(rid, proto::encode(m));
}

void Coordinator::Impl::bad_frame(const std::string& rid, const std::string& why) {
  ++counters.dropped_frames;
  if (!bad_frame_log.allow(Steady::now())) return;
  // Name the worker when the frame came from one (else the connection).
  if (const Session* s = sessions.find(rid))
    spdlog::warn("coordinator: dropped a bad frame from worker {} ({}): {}", s->name,
                 printable_id(rid), why);
  else
    spdlog::warn("coordinator: dropped a bad frame from {}: {}", printable_id(rid), why);
}

void Coordinator::Impl::refuse_version(const std::string& rid, const proto::VersionMismatch& e,
                                       Steady::time_point now) {
  ++counters.dropped_frames;
  if (bad_frame_log.allow(now))
    spdlog::warn("coordinator: refused {} from {}: {}", proto::to_string(e.type()),
                 printable_id(rid), e.what());
  proto::Disconnect d;
  d.code = proto::Disconnect::Code::kRefused;
  d.reason = "protocol version mismatch: the coordinator speaks version " +
             std::to_string(proto::kProtocolVersion) + ", the worker sent version " +
             std::to_string(e.version()) + "; run the same hpsearch version on both sides";
  send_to(rid, d);
}

void Coordinator::Impl::on_unknown_session(const std::string& rid, const proto::Message& message) {
  const std::string* expired_name = sessions.expired_name(rid);
  std::string who =
      expired_name ? "expired worker " + *expired_name : "unknown worker " + printable_id(rid);
  std::optional<std::int64_t> number;
  if (auto* c = std::get_if<proto::Complete>(&message)) number = c->number;
  if (auto* f = std::get_if<proto::Fail>(&message)) number = f->number;
  if (auto* r = std::get_if<proto::Report>(&message)) number = r->number;
  if (auto* r = std::get_if<proto::Restored>(&message)) number = r->number;
  if (auto* r = std::get_if<proto::RankReady>(&message)) number = r->number;
  if (number) {
    ++counters.rejected_results;
    if (late_log.allow(Steady::now()))
      spdlog::warn("coordinator: rejected late result ({}) for trial {} from {}",
                   proto::to_string(proto::type_of(message)), *number, who);
  } else if (late_log.allow(Steady::now())) {
    spdlog::info("coordinator: {} from {}: told to disconnect",
                 proto::to_string(proto::type_of(message)), who);
  }
  proto::Disconnect d;
  d.code = proto::Disconnect::Code::kExpired;
  d.reason = expired_name ? "the session expired (no heartbeat within the timeout)"
                          : "unknown session (the coordinator may have restarted)";
  send_to(rid, d);
}

namespace {

// Why a Hello cannot open a session, or "" if it can.
std::string hello_refusal(const proto::Hello& h) {
  if (h.protocol_version != proto::kProtocolVersion)
    return "protocol version mismatch: the coordinator speaks version " +
           std::to_string(proto::kProtocolVersion) + ", the worker " +
           std::to_string(h.protocol_version);
  if (h.worker_id.empty() || h.worker_id.size() > 256)
    return "Hello.worker_id must have 1 to 256 bytes";
  if (h.hostname.size() > 256 || h.device.size() > 64 || h.visible_devices.size() > 256)
    return "Hello: hostname, device or visible_devices too long";
  try {
    proto::check_prefetch(h.prefetch, "Hello.prefetch");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The session a Hello opens. Text from the peer is stored and printed
// escaped (no control characters).
Session session_of(const std::string& rid, const proto::Hello& h, const std::string& key_name,
                   Session::Clock::time_point now) {
  Session s;
  s.routing_id = rid;
  s.name = printable(h.worker_id);
  s.hostname = printable(h.hostname);
  s.pid = h.pid;
  s.device = h.device.empty() ? "cpu" : printable(h.device);
  s.gpus = printable(h.visible_devices);
  s.threads = std::max(1, h.threads);
  s.prefetch = h.prefetch;
  s.last_seen = now;
  s.connected = now;
  s.key_name = key_name;
  return s;
}

// The link number in an hpsearch worker's routing id, "<id>/<link>/<hex>"
// (workers/worker.cpp: a worker process counts its connections 1, 2, ...),
// or nullopt for any other routing id.
std::optional<std::uint64_t> link_number(const std::string& rid) {
  const std::size_t last = rid.rfind('/');
  if (last == std::string::npos || last == 0) return std::nullopt;
  const std::size_t before = rid.rfind('/', last - 1);
  if (before == std::string::npos || before + 1 == last || last - before > 20) return std::nullopt;
  std::uint64_t n = 0;
  for (std::size_t i = before + 1; i < last; ++i) {
    if (rid[i] < '0' || rid[i] > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(rid[i] - '0');
  }
  return n;
}

}  // namespace

// A worker process keeps one link (connection) at a time: it opens another
// only after giving the last one up (its Hello unanswered within liveness x
// heartbeat, e.g. a handshake slowed by load). The Hello of the link it gave
// up can still arrive, before or after the new link's: it then opened a
// session that nobody reads, which was given trials and held them until it
// expired (CurveCoordinator.TwoWorkersWithKeysFinishAStudyOverTcp under
// TSan: 14 trials for 12). Of two sessions of the same worker process (id,
// host, pid and key) the one of the older link goes: a late Hello of an
// older link is dropped, and an older link's session ends at once, its
// trials queued again. Returns whether `rid`'s Hello is such a late one.
bool Coordinator::Impl::supersede_older_link(const std::string& rid, const proto::Hello& h,
                                             const std::string& key_name) {
  const std::optional<std::uint64_t> link = link_number(rid);
  if (!link) return false;
  const std::string name = printable(h.worker_id);
  const std::string host = printable(h.hostname);
  std::vector<std::string> older;
  for (const auto& [other_rid, s] : sessions) {
    if (other_rid == rid || s.name != name || s.hostname != host || s.pid != h.pid ||
        s.key_name != key_name)
      continue;
    const std::optional<std::uint64_t> other = link_number(other_rid);
    if (!other) continue;
    if (*other > *link) {
      spdlog::debug(
          "coordinator: dropped the late Hello of worker {}'s given-up link {} (it "
          "has link {})",
          name, *link, *other);
      return true;
    }
    older.push_back(other_rid);
  }
  for (const auto& other_rid : older)
    if (Session* s = sessions.find(other_rid))
      expire(*s, "it connected again (link " + std::to_string(*link) + ")");
  return false;
}

// Refuses a new worker when max_workers are connected; returns whether it did.
bool Coordinator::Impl::refuse_full(const std::string& rid, const proto::Hello& h,
                                    Steady::time_point now) {
  if (static_cast<int>(sessions.size()) < options.max_workers) return false;
  ++counters.refused_workers;
  if (late_log.allow(now))
    spdlog::warn("coordinator: refused worker {} from {}: {} workers connected (max_workers)",
                 printable(h.worker_id), printable_id(rid), sessions.size());
  proto::Disconnect d;
  d.code = proto::Disconnect::Code::kRefused;
  d.reason = "the coordinator has its maximum of " + std::to_string(options.max_workers) +
             " workers connected";
  send_to(rid, d);
  return true;
}

void Coordinator::Impl::on_hello(const std::string& rid, const proto::Hello& h,
                                 const std::string& key_name, Steady::time_point now) {
  if (std::string why = hello_refusal(h); !why.empty()) {
    ++counters.dropped_frames;
    spdlog::warn("coordinator: refused Hello from {}: {}", printable_id(rid), why);
    proto::Disconnect d;
    d.code = proto::Disconnect::Code::kRefused;
    d.reason = why;
    send_to(rid, d);
    return;
  }
  if (supersede_older_link(rid, h, key_name)) return;
  // A name is one worker's: a worker of another key that takes the name of
  // a connected one would have its results credited to it.
  const std::string name = printable(h.worker_id);
  for (const auto& [other_rid, other] : sessions) {
    if (other_rid == rid || other.name != name || other.key_name == key_name) continue;
    ++counters.dropped_frames;
    const std::string why = "the worker id '" + name +
                            "' is in use by a connected worker with another key ('" +
                            printable(other.key_name) + "'): give this worker another --id";
    spdlog::warn("coordinator: refused Hello from {} with key '{}': {}", printable_id(rid),
                 printable(key_name), why);
    proto::Disconnect d;
    d.code = proto::Disconnect::Code::kRefused;
    d.reason = why;
    send_to(rid, d);
    return;
  }
  if (Session* old = sessions.find(rid)) {
    expire(*old, "worker said Hello again");
  } else if (refuse_full(rid, h, now)) {
    return;
  }
  Session& s = sessions.add(session_of(rid, h, key_name, now));
  if (!key_name.empty())
    spdlog::info("coordinator: worker {} joined from {} with key '{}' ({}, {} threads)", s.name,
                 s.hostname, printable(key_name), s.device_text(), s.threads);
  else
    spdlog::debug("coordinator: worker {} joined ({}, {} threads)", s.name, s.device_text(),
                  s.threads);
  status_dirty = true;
  note_worker_count();
  if (is_done) {
    send(s, proto::Shutdown{reason_done, false});
    return;
  }
  proto::Welcome w;
  w.study_name = study.name();
  w.heartbeat_interval_ms = options.heartbeat_interval_ms;
  w.liveness = options.liveness;
  if (artifact_server) w.artifact_endpoint = artifact_server->endpoint();
  send(s, w);
}

void Coordinator::Impl::on_request(Session& s) {
  if (!s.has_room()) {
    // The worker moved on without ending its (oldest) trial: treat it as
    // lost.
    const std::int64_t number = s.trials.front();
    s.release(number);
    end_lost_trial(number, "worker lost (asked for a new trial without ending this one)");
    sessions.resume_request(s);
  }
  if (is_done) {
    send(s, proto::Shutdown{reason_done, stopping});
    return;
  }
  sessions.want_trial(s);
  status_dirty = true;
}

// Checks that `s` owns trial `number`; logs a rejected result otherwise.
bool Coordinator::Impl::owns(Session& s, std::int64_t number, const char* what) {
  if (s.holds(number)) return true;
  ++counters.rejected_results;
  if (late_log.allow(Steady::now())) {
    // A trial the study never had is no late result: say which it is.
    if (number < 0 || static_cast<std::size_t>(number) >= mirror.trials().size())
      spdlog::warn(
          "coordinator: rejected {} for trial {} from worker {}: the study has no such trial", what,
          number, s.name);
    else
      spdlog::warn(
          "coordinator: rejected late result ({}) for trial {} from worker {}: not a trial "
          "it holds",
          what, number, s.name);
  }
  return false;
}

void Coordinator::Impl::on_suggest(Session& s, const proto::Suggest& m) {
  proto::SuggestReply reply;
  reply.number = m.number;
  reply.name = m.name;
  if (!owns(s, m.number, "Suggest")) {
    reply.error = "trial " + std::to_string(m.number) + " is not held by this worker";
    send(s, reply);
    return;
  }
  try {
    Json dj = parse_json_text(m.distribution_json, "distribution");
    Distribution d = Distribution::from_json(dj, m.name);
    reply.value = proto::Value::from_json(source.suggest(m.number, m.name, d, n_workers));
    reply.ok = true;
  } catch (const Error& e) {
    reply.ok = false;
    reply.error = e.what();
  }
  send(s, reply);
}

void Coordinator::Impl::on_report(Session& s, const proto::Report& m) {
  proto::Decision d;
  d.number = m.number;
  d.step = m.step;
  if (is_other_rank(s, m.number)) {  // only rank 0 reports for a multi-process trial
    d.stored = false;
    send(s, d);
    return;
  }
  if (!owns(s, m.number, "Report")) {
    d.stored = false;
    d.prune = true;  // end it soon; its result will be rejected
    send(s, d);
    return;
  }
  if (pbt_stopped(m.number)) {  // ended by the scheduler: its later steps are not kept
    d.stored = false;
    d.prune = true;
    send(s, d);
    return;
  }
  const FrozenTrial& t = mirror.at(m.number);
  d.stored = storage.set_trial_intermediate_value(t.trial_id, m.step, m.value);
  // The worker snapshot the lineage's folder at this step: a retry starts there.
  if (m.checkpoint) record_checkpoint(m.number, m.step);
  TrialPtr now = mirror.refresh(m.number);
  if (options.pbt) {  // PBT takes no pruner (pbt_options_of)
    d.prune = pbt_on_report(m.number, m.step);
    send(s, d);
    return;
  }
  try {
    PruningContext ctx{direction, mirror.trials(), *now, m.step, &storage};
    d.prune = study.pruner().prune(ctx);
  } catch (const Error& e) {
    spdlog::warn("coordinator: pruner failed on trial {} step {}: {}; continuing the trial",
                 m.number, m.step, e.what());
    d.prune = false;
  }
  if (!nop_pruner) mirror.refresh(m.number);  // the pruner may have written bookkeeping attrs
  send(s, d);
}

// A retry's worker prepared its checkpoint folder: its curve continues
// (values up to the step copied) or, when the snapshot could not be used,
// resumed_from says so and nothing is copied (lifecycle::start_resumed_trial).
void Coordinator::Impl::on_restored(Session& s, const proto::Restored& m) {
  if (!owns(s, m.number, "Restored")) return;
  const FrozenTrial& t = mirror.at(m.number);
  const std::optional<std::int64_t> resume = checkpoints::resume_step_of(t);
  if (!resume || *resume != m.step || checkpoints::continued_trial(t)) {
    spdlog::warn(
        "coordinator: worker {}: Restored for trial {} step {} does not match its "
        "resume step; ignored",
        s.name, m.number, m.step);
    return;
  }
  if (!m.restored)
    spdlog::warn("coordinator: trial {} starts from step 0, not from its checkpoint of step {}: {}",
                 m.number, m.step, printable(m.warning));
  lifecycle::start_resumed_trial(storage, study.study_id(), mirror.ptr(m.number), m.restored,
                                 printable(m.warning));
  mirror.refresh(m.number);
}

void Coordinator::Impl::set_user_attrs(const FrozenTrial& t, const std::string& text) {
  if (text.empty()) return;
  try {
    // Written by dump_json_nonfinite: NaN and +-inf attrs come as Python's
    // literals and are read back as floats.
    if (json_too_deep_at(text) != std::string_view::npos) throw Error("nested too deeply");
    Json attrs;
    try {
      attrs = parse_json_nonfinite(text);
    } catch (const Json::exception& e) {
      throw Error(std::string("not valid JSON: ") + e.what());
    }
    if (!attrs.is_object()) throw Error("user_attrs must be a JSON object");
    for (const auto& [k, v] : attrs.items()) storage.set_trial_user_attr(t.trial_id, k, v);
  } catch (const Error& e) {
    spdlog::warn("coordinator: trial {}: user attrs dropped: {}", t.number, e.what());
  }
}

void Coordinator::Impl::on_complete(Session& s, const proto::Complete& m) {
  if (other_rank_ended(s, m.number, nullptr)) return;  // not rank 0's: not the trial's result
  if (!owns(s, m.number, "Complete")) return;
  if (m.artifacts) record_artifacts_in_place(m.number);
  const FrozenTrial& t = mirror.at(m.number);
  set_user_attrs(t, m.user_attrs_json);
  std::optional<double> value = m.value;
  bool pruned = m.pruned;
  // Stopped by PBT at max_steps or budget_steps: COMPLETE with its last value.
  if (pruned && options.pbt && t.system_attrs.contains(kAttrPbt) &&
      t.system_attrs[kAttrPbt].is_object() && t.system_attrs[kAttrPbt].contains("stopped")) {
    pruned = false;
    if (auto last = t.last_intermediate()) value = last->second;
  }
  if (!pruned && !value) value = std::numeric_limits<double>::quiet_NaN();  // as NaN: FAIL
  lifecycle::TrialEnd end =
      lifecycle::resolve_end(pruned ? TrialState::kPruned : TrialState::kComplete, value, "",
                             [&]() -> std::optional<double> {
                               auto last = t.last_intermediate();
                               if (!last) return std::nullopt;
                               return last->second;
                             });
  storage.set_trial_state(t.trial_id, end.state, end.value, end.fail_reason);
  end_trial(&s, m.number);
}

void Coordinator::Impl::on_leaving(Session& s, const proto::Disconnect& m) {
  const std::string why = m.reason.empty() ? std::string("stopping") : printable(m.reason);
  spdlog::info("coordinator: worker {} left: {}", s.name, why);
  for (const std::int64_t number : s.take_trials())
    end_lost_trial(number, "worker stopped" + rank_note(number, s.routing_id) + ": " + why,
                   lifecycle::RetryCause::kWorkerStopped);
  std::string rid = s.routing_id;
  sessions.expire(rid);  // `s` is gone from here on
  status_dirty = true;
  note_worker_count();
}

void Coordinator::Impl::on_fail(Session& s, const proto::Fail& m) {
  // The worker's text: bytes that are not UTF-8 could not be stored (the
  // store refuses them, and that would stop the run).
  const std::string text = valid_utf8(m.message);
  // Another rank's program failed: the trial fails (other_rank_ended). A
  // rank whose worker is stopping is lost (below: the trial ends).
  if (m.reason == proto::Fail::Reason::kException && other_rank_ended(s, m.number, &text)) return;
  if (!owns(s, m.number, "Fail")) return;
  if (m.artifacts && !is_other_rank(s, m.number)) record_artifacts_in_place(m.number);
  const FrozenTrial& t = mirror.at(m.number);
  if (!is_other_rank(s, m.number)) set_user_attrs(t, m.user_attrs_json);
  if (m.reason == proto::Fail::Reason::kInterrupted) {
    std::string reason = "worker stopped" + rank_note(m.number, s.routing_id);
    if (!text.empty()) reason += ": " + text;
    // The worker is leaving (its Disconnect follows): the trial queued
    // again here, and any other, goes to another worker.
    s.stopping = true;
    s.wants_trial = false;
    s.request_deferred = false;
    s.release(m.number);
    end_lost_trial(m.number, reason, lifecycle::RetryCause::kWorkerStopped);
    return;
  }
  const std::string message = text.empty() ? "objective raised an exception" : text;
  storage.set_trial_state(t.trial_id, TrialState::kFail, std::nullopt, message);
  end_trial(&s, m.number);
}

}  // namespace hps
