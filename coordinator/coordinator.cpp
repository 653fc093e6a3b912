#include "coordinator/coordinator.h"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <set>
#include <unordered_map>
#include <zmq.hpp>

#include "coordinator/descriptor_watch.h"
#include "coordinator/zap_authenticator.h"
#include "protocol/curve_keys.h"
#include "protocol/protocol.h"
#include "protocol/zmq_util.h"
#include "search/printable.h"
#include "search/trial_lifecycle.h"
#include "search/util/hash.h"
#include "search/util/host.h"
#include "search/writer_lock.h"

namespace hps {

namespace proto = hps::protocol;
using Steady = std::chrono::steady_clock;

void CoordinatorOptions::validate() const {
  proto::check_heartbeat_settings(heartbeat_interval_ms, "coordinator.heartbeat_interval_ms",
                                  liveness, "coordinator.liveness");
  if (max_retries < 0) throw ConfigError("coordinator.max_retries", "must be >= 0");
  if (n_trials && *n_trials < 0) throw ConfigError("coordinator.n_trials", "must be >= 0");
  if (timeout_s && !(*timeout_s >= 0))
    throw ConfigError("coordinator.timeout_s", "must be >= 0 (seconds)");
  if (max_batch < 1) throw ConfigError("coordinator.max_batch", "must be >= 1");
  if (min_workers < 0) throw ConfigError("coordinator.min_workers", "must be >= 0");
  if (!(min_workers_wait_s >= 0))
    throw ConfigError("coordinator.min_workers_wait_s", "must be >= 0 (seconds)");
  if (!(status_interval_s > 0))
    throw ConfigError("coordinator.status_interval_s", "must be > 0 (seconds)");
  if (!endpoint.empty()) zmq_util::check_endpoint(endpoint, "coordinator.endpoint", true);
  if (max_workers < 1) throw ConfigError("coordinator.max_workers", "must be >= 1");
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

// The study system attr where the running coordinator describes itself.
constexpr const char* kAttrCoordinator = "coordinator";
// Bound on remembered expired sessions (for "rejected late result" logs).
constexpr std::size_t kMaxExpiredRemembered = 4096;

double unix_now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// A routing id as text: printable as is, else hex. (Worker names and
// other text from peers go through printable(), search/printable.h.)
std::string printable_id(const std::string& id) {
  bool ok = !id.empty() &&
            std::all_of(id.begin(), id.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (ok) return id;
  static const char* kHex = "0123456789abcdef";
  std::string out = "0x";
  for (unsigned char c : id) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// At most `burst` log lines per second; counts what it suppressed.
class LogLimiter {
 public:
  explicit LogLimiter(int burst) : burst_(burst) {}
  bool allow(Steady::time_point now) {
    if (now - window_ >= std::chrono::seconds(1)) {
      if (suppressed_ > 0)
        spdlog::warn("coordinator: {} more similar messages not shown", suppressed_);
      window_ = now;
      count_ = 0;
      suppressed_ = 0;
    }
    if (count_ < burst_) {
      ++count_;
      return true;
    }
    ++suppressed_;
    return false;
  }

 private:
  int burst_;
  int count_ = 0;
  std::int64_t suppressed_ = 0;
  Steady::time_point window_{};
};

// A fresh 0700 folder for the private ipc endpoint, removed with everything
// in it by the destructor.
class PrivateDir {
 public:
  PrivateDir() {
    std::string base = "/tmp";
    // An ipc path must fit sockaddr_un (107 bytes): a long $TMPDIR is skipped.
    if (const char* t = std::getenv("TMPDIR"); t && *t && std::strlen(t) < 60) base = t;
    std::string tmpl = base + "/hpsearch-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      tmpl = "/tmp/hpsearch-XXXXXX";
      if (!mkdtemp(tmpl.data()))
        throw Error(std::string("coordinator: cannot create a private folder in /tmp: ") +
                    std::strerror(errno));
    }
    path_ = tmpl;  // mkdtemp makes it 0700
  }
  ~PrivateDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

struct Coordinator::Impl {
  struct Session {
    std::string routing_id;
    std::string name;
    std::string hostname;
    std::int64_t pid = 0;
    std::string device;
    int threads = 1;
    Steady::time_point last_seen;
    Steady::time_point last_sent;
    Steady::time_point connected;
    bool wants_trial = false;           // sent RequestTrial, not yet answered
    std::optional<std::int64_t> trial;  // number of the RUNNING trial it owns
    bool config_sent = false;
    std::string key_name;  // the CURVE key's name (ZAP User-Id); "" over plain ZMTP
  };

  // ---- single writer: taken first, released last (search/writer_lock.h)
  WriterLock writer_lock;

  // ---- configuration
  Study study;
  Storage& storage;
  std::int64_t study_id;
  StudyDirection direction;
  SearchSpace space;
  CoordinatorOptions options;
  bool prune_filters_trials;  // the pruner may show samplers a subset of trials
  bool nop_pruner;            // NopPruner: no decisions, no bookkeeping
  std::string config_json;
  std::uint64_t config_id;
  std::string hostname = util::host_name();

  // ---- socket
  PrivateDir private_dir;  // holds the local ipc endpoint; outlives the socket
  zmq::context_t context{1};
  std::unique_ptr<ZapAuthenticator> zap;  // with CURVE keys; outlives the socket
  zmq::socket_t socket{context, zmq::socket_type::router};
  int socket_fd = -1;  // the socket's ZMQ_FD, polled while the socket is empty
  std::string endpoint;
  std::string local_endpoint;
  bool curve_on = false;        // endpoint is a CURVE server: messages carry a User-Id
  DescriptorWatch descriptors;  // says when connections exhaust the descriptors

  // ---- workers
  std::unordered_map<std::string, Session> sessions;     // by routing id
  std::deque<std::string> idle;                          // routing ids, in request order
  std::unordered_map<std::string, std::string> expired;  // routing id -> worker name
  std::deque<std::string> expired_order;

  // ---- trials (a copy of the store, by number)
  std::vector<TrialPtr> trials;
  std::set<std::int64_t> waiting;                         // WAITING numbers
  std::unordered_map<std::int64_t, std::string> running;  // number -> routing id
  std::int64_t finished = 0;
  TrialPtr best;      // the best trial so far (lifecycle::ranks_before)
  int n_workers = 1;  // connected workers (at least 1), for SamplingContext

  // ---- run state
  Steady::time_point start = Steady::now();
  bool exhausted = false;
  bool gate_open = false;  // min_workers reached (or waited for long enough)
  bool stopping = false;
  bool is_done = false;
  std::string reason_done;
  std::vector<std::pair<std::string, std::string>> outbox;  // (routing id, frame)
  std::vector<TrialPtr> ended;                              // for the callback, after commit
  std::function<void(const FrozenTrial&)> callback;
  Steady::time_point last_status{};
  bool status_dirty = true;
  CoordinatorStats counters;
  LogLimiter bad_frame_log{5};
  LogLimiter late_log{20};

  Impl(Study s, Json objective_config, CoordinatorOptions o)
      : writer_lock(lock_study_for_writing(s)),  // before anything binds or writes
        study(std::move(s)),
        storage(study.storage()),
        study_id(study.study_id()),
        direction(study.direction()),
        space(study.space() ? *study.space() : SearchSpace()),
        options(std::move(o)) {
    options.validate();
    nop_pruner = !study.pruner().prunes();
    prune_filters_trials = !nop_pruner;
    Json config{{"study", study.name()},
                {"direction", to_string(study.direction())},
                {"objective", std::move(objective_config)},
                {"space", space.to_json()}};
    config_json = config.dump();
    config_id = util::fnv1a64(config_json);

    socket.set(zmq::sockopt::linger, 1000);
    socket.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(proto::kMaxFrameBytes));
    socket.set(zmq::sockopt::router_handover, true);
    socket.set(zmq::sockopt::sndhwm, 100000);
    socket.set(zmq::sockopt::rcvhwm, 100000);
    bind_endpoints();
    socket_fd = socket.get(zmq::sockopt::fd);
    writer_lock.set_endpoint(endpoint);

    take_over();
    int stale = study.fail_stale_trials("coordinator restarted", true);
    if (stale > 0)
      spdlog::info(
          "study '{}': {} trials left RUNNING by an earlier coordinator were failed and "
          "queued again",
          study.name(), stale);
    load_trials();
    write_status(true);
  }

  // Binds the private ipc endpoint (plain ZMTP), then options.endpoint: a
  // CURVE server with a ZAP handler when there are keys (libzmq applies the
  // socket's options as they are at each bind).
  void bind_endpoints() {
    auto bind = [&](const std::string& where) {
      try {
        socket.bind(where);
      } catch (const zmq::error_t& e) {
        throw Error("coordinator: cannot bind '" + where + "': " + e.what());
      }
      return socket.get(zmq::sockopt::last_endpoint);
    };
    local_endpoint = bind("ipc://" + private_dir.path() + "/coordinator.sock");
    if (options.endpoint.empty()) {
      endpoint = local_endpoint;
      return;
    }
    if (!options.keys_dir.empty()) {
      curve::CoordinatorKeys keys = curve::load_coordinator_keys(options.keys_dir);
      options.curve_secret_key = keys.keys.secret_key;
      options.authorized_keys = std::move(keys.authorized);
    }
    if (!options.curve_secret_key.empty()) {
      curve::require("coordinator: CURVE keys");
      if (options.authorized_keys.empty())
        throw ConfigError("coordinator.authorized_keys", "lists no worker key");
      zap = std::make_unique<ZapAuthenticator>(context, options.authorized_keys);
      socket.set(zmq::sockopt::curve_server, true);
      socket.set(zmq::sockopt::curve_secretkey, options.curve_secret_key);
      socket.set(zmq::sockopt::zap_domain, curve::kZapDomain);
      curve_on = true;
    }
    endpoint = bind(options.endpoint);
    if (curve_on)
      spdlog::info("coordinator: CURVE on {} (key {}); {} authorized worker keys", endpoint,
                   curve::fingerprint(curve::public_key_of(options.curve_secret_key,
                                                           "coordinator.curve_secret_key")),
                   options.authorized_keys.size());
    else if (endpoint.rfind("tcp://", 0) == 0)
      spdlog::warn(
          "coordinator: {} is INSECURE (no CURVE keys): anyone who can reach it can join as a "
          "worker, read every trial's objective config and store made-up results",
          endpoint);
  }

  // Refuses to run a study that a live coordinator process runs; else
  // records this process as its coordinator.
  void take_over() {
    // With the writer lock held no other coordinator runs the study: an
    // attr that says "running" was left by one that was killed.
    if (writer_lock.held()) return;
    StudyInfo info = storage.get_study(study_id);
    auto it = info.system_attrs.find(kAttrCoordinator);
    if (it != info.system_attrs.end() && it->is_object() && it->value("running", false)) {
      std::string host = it->value("host", "");
      long pid = static_cast<long>(it->value("pid", 0.0));
      double updated = it->value("updated", 0.0);
      double stale_after =
          std::max(30.0, 3.0 * options.heartbeat_interval_ms * options.liveness / 1000.0);
      bool alive = host == hostname ? (pid != static_cast<long>(getpid()) && process_alive(pid))
                                    : unix_now() - updated < stale_after;
      if (alive)
        throw Error("study '" + study.name() + "' is being run by another coordinator (" + host +
                    ":" + std::to_string(pid) + ", " + it->value("endpoint", std::string("?")) +
                    "); stop it first, or connect workers to it");
    }
  }

  void load_trials() {
    trials = storage.get_all_trials(study_id, {});
    waiting.clear();
    finished = 0;
    best.reset();
    for (std::size_t i = 0; i < trials.size(); ++i) {
      if (trials[i]->number != static_cast<std::int64_t>(i))
        throw StorageError("study '" + study.name() + "': trial numbers are not contiguous at " +
                           std::to_string(i));
      note_trial(trials[i]);
    }
  }

  // Bookkeeping for a trial read from the store (load or refresh).
  void note_trial(const TrialPtr& t) {
    if (t->state == TrialState::kWaiting) waiting.insert(t->number);
    if (t->counts_as_finished()) ++finished;
    if (lifecycle::is_best_candidate(*t) &&
        (!best || lifecycle::ranks_before(direction, *t, *best)))
      best = t;
  }

  // Replaces the copy of one trial with the store's snapshot, keeping the
  // finished count right.
  TrialPtr refresh(std::int64_t number) {
    TrialPtr old = trials.at(static_cast<std::size_t>(number));
    TrialPtr now = storage.get_trial(old->trial_id);
    if (old->counts_as_finished()) --finished;
    if (old->state == TrialState::kWaiting) waiting.erase(number);
    trials[static_cast<std::size_t>(number)] = now;
    note_trial(now);
    return now;
  }

  // Appends a trial the store just created.
  void append(const TrialPtr& t) {
    if (t->number != static_cast<std::int64_t>(trials.size())) {
      // Another writer created trials meanwhile; read everything again.
      spdlog::warn("study '{}': another process added trials; reloading", study.name());
      load_trials();
      return;
    }
    trials.push_back(t);
    note_trial(t);
  }

  // ---------------------------------------------------------------- sending

  void send(Session& s, const proto::Message& m) {
    outbox.emplace_back(s.routing_id, proto::encode(m));
    s.last_sent = Steady::now();
  }
  void send_to(const std::string& rid, const proto::Message& m) {
    outbox.emplace_back(rid, proto::encode(m));
  }

  void flush_outbox() {
    for (auto& [rid, frame] : outbox) {
      try {
        zmq_util::no_eintr([&] {
          return socket.send(zmq::buffer(rid),
                             zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        });
        zmq_util::no_eintr(
            [&] { return socket.send(zmq::buffer(frame), zmq::send_flags::dontwait); });
      } catch (const zmq::error_t& e) {
        spdlog::debug("coordinator: cannot send to {}: {}", printable_id(rid), e.what());
      }
    }
    outbox.clear();
  }

  // ---------------------------------------------------------------- receiving

  struct Incoming {
    std::string rid;
    std::string frame;
    bool valid = true;    // exactly [routing id][one frame]
    std::string user_id;  // the ZAP User-Id (the CURVE key's name), if any
  };

  // Reads up to max_batch messages without blocking. Sets `drained` if the
  // socket had no more.
  std::vector<Incoming> drain(bool& drained) {
    std::vector<Incoming> batch;
    drained = false;
    while (static_cast<int>(batch.size()) < options.max_batch) {
      zmq::message_t part;
      auto got = zmq_util::no_eintr([&] { return socket.recv(part, zmq::recv_flags::dontwait); });
      if (!got) {
        drained = true;
        break;
      }
      Incoming in;
      in.rid.assign(static_cast<const char*>(part.data()), part.size());
      int parts = 0;
      while (part.more()) {
        zmq::message_t next;
        (void)zmq_util::no_eintr([&] { return socket.recv(next, zmq::recv_flags::none); });
        ++parts;
        if (parts == 1) {
          in.frame.assign(static_cast<const char*>(next.data()), next.size());
          if (curve_on)
            if (const char* user = zmq_msg_gets(next.handle(), "User-Id")) in.user_id = user;
        }
        part = std::move(next);
      }
      in.valid = parts == 1;
      batch.push_back(std::move(in));
    }
    return batch;
  }

  void bad_frame(const std::string& rid, const std::string& why) {
    ++counters.dropped_frames;
    if (bad_frame_log.allow(Steady::now()))
      spdlog::warn("coordinator: dropped a bad frame from {}: {}", printable_id(rid), why);
  }

  void handle(const Incoming& in, Steady::time_point now) {
    if (!in.valid) {
      bad_frame(in.rid, "expected one frame per message");
      return;
    }
    proto::Message message;
    try {
      message = proto::decode(in.frame);
    } catch (const proto::VersionMismatch& e) {
      ++counters.dropped_frames;
      if (bad_frame_log.allow(now))
        spdlog::warn("coordinator: refused {} from {}: {}", proto::to_string(e.type()),
                     printable_id(in.rid), e.what());
      proto::Disconnect d;
      d.code = proto::Disconnect::Code::kRefused;
      d.reason = "protocol version mismatch: the coordinator speaks version " +
                 std::to_string(proto::kProtocolVersion) + ", the worker sent version " +
                 std::to_string(e.version()) + "; run the same hpsearch version on both sides";
      send_to(in.rid, d);
      return;
    } catch (const std::exception& e) {
      bad_frame(in.rid, e.what());
      return;
    }

    auto it = sessions.find(in.rid);
    if (auto* hello = std::get_if<proto::Hello>(&message)) {
      on_hello(in.rid, *hello, in.user_id, now);
      return;
    }
    if (it == sessions.end()) {
      on_unknown_session(in.rid, message);
      return;
    }
    Session& s = it->second;
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
          } else {
            bad_frame(in.rid,
                      proto::to_string(proto::type_of(message)) + " is not a worker message");
          }
        },
        message);
  }

  void on_unknown_session(const std::string& rid, const proto::Message& message) {
    auto ex = expired.find(rid);
    std::string who = ex != expired.end() ? "expired worker " + ex->second
                                          : "unknown worker " + printable_id(rid);
    std::optional<std::int64_t> number;
    if (auto* c = std::get_if<proto::Complete>(&message)) number = c->number;
    if (auto* f = std::get_if<proto::Fail>(&message)) number = f->number;
    if (auto* r = std::get_if<proto::Report>(&message)) number = r->number;
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
    d.reason = ex != expired.end() ? "the session expired (no heartbeat within the timeout)"
                                   : "unknown session (the coordinator may have restarted)";
    send_to(rid, d);
  }

  void on_hello(const std::string& rid, const proto::Hello& h, const std::string& key_name,
                Steady::time_point now) {
    auto refuse = [&](const std::string& why) {
      ++counters.dropped_frames;
      spdlog::warn("coordinator: refused Hello from {}: {}", printable_id(rid), why);
      proto::Disconnect d;
      d.code = proto::Disconnect::Code::kRefused;
      d.reason = why;
      send_to(rid, d);
    };
    if (h.protocol_version != proto::kProtocolVersion) {
      refuse("protocol version mismatch: the coordinator speaks version " +
             std::to_string(proto::kProtocolVersion) + ", the worker " +
             std::to_string(h.protocol_version));
      return;
    }
    if (h.worker_id.empty() || h.worker_id.size() > 256) {
      refuse("Hello.worker_id must have 1 to 256 bytes");
      return;
    }
    if (h.hostname.size() > 256 || h.device.size() > 64 || h.visible_devices.size() > 256) {
      refuse("Hello: hostname, device or visible_devices too long");
      return;
    }
    if (auto old = sessions.find(rid); old != sessions.end()) {
      expire(old->second, "worker said Hello again");
    } else if (static_cast<int>(sessions.size()) >= options.max_workers) {
      ++counters.refused_workers;
      if (late_log.allow(now))
        spdlog::warn("coordinator: refused worker {} from {}: {} workers connected (max_workers)",
                     printable(h.worker_id), printable_id(rid), sessions.size());
      proto::Disconnect d;
      d.code = proto::Disconnect::Code::kRefused;
      d.reason = "the coordinator has its maximum of " + std::to_string(options.max_workers) +
                 " workers connected";
      send_to(rid, d);
      return;
    }
    // Text from the peer is stored and printed escaped (no control characters).
    Session s;
    s.routing_id = rid;
    s.name = printable(h.worker_id);
    s.hostname = printable(h.hostname);
    s.pid = h.pid;
    s.device = h.device.empty() ? "cpu" : printable(h.device);
    if (!h.visible_devices.empty())
      s.device += " (CUDA_VISIBLE_DEVICES=" + printable(h.visible_devices) + ")";
    s.threads = std::max(1, h.threads);
    s.last_seen = now;
    s.connected = now;
    s.key_name = key_name;
    if (!key_name.empty())
      spdlog::info("coordinator: worker {} joined from {} with key '{}' ({}, {} threads)", s.name,
                   s.hostname, printable(key_name), s.device, s.threads);
    else
      spdlog::debug("coordinator: worker {} joined ({}, {} threads)", s.name, s.device, s.threads);
    auto& stored = sessions[rid] = std::move(s);
    status_dirty = true;
    note_worker_count();
    if (is_done) {
      send(stored, proto::Shutdown{reason_done, false});
      return;
    }
    proto::Welcome w;
    w.study_name = study.name();
    w.heartbeat_interval_ms = options.heartbeat_interval_ms;
    w.liveness = options.liveness;
    send(stored, w);
  }

  void on_request(Session& s) {
    if (s.trial) {
      // The worker moved on without ending its trial: treat it as lost.
      end_lost_trial(*s.trial, "worker lost (asked for a new trial without ending this one)");
      s.trial.reset();
    }
    if (is_done) {
      send(s, proto::Shutdown{reason_done, stopping});
      return;
    }
    if (!s.wants_trial) {
      s.wants_trial = true;
      idle.push_back(s.routing_id);
    }
    status_dirty = true;
  }

  // Checks that `s` owns trial `number`; logs a rejected result otherwise.
  bool owns(Session& s, std::int64_t number, const char* what) {
    if (s.trial && *s.trial == number) return true;
    ++counters.rejected_results;
    if (late_log.allow(Steady::now()))
      spdlog::warn(
          "coordinator: rejected late result ({}) for trial {} from worker {}: not its "
          "running trial",
          what, number, s.name);
    return false;
  }

  const FrozenTrial& trial_of(std::int64_t number) const {
    return *trials.at(static_cast<std::size_t>(number));
  }

  // The trials a sampler sees for `t` (all of them unless the pruner
  // narrows them, as Hyperband does).
  template <class F>
  void with_sampler_trials(const FrozenTrial& t, F&& f) {
    if (!prune_filters_trials) {
      f(trials);
    } else {
      auto subset = study.pruner().trials_for_sampler(t, trials);
      f(subset);
    }
  }

  void on_suggest(Session& s, const proto::Suggest& m) {
    proto::SuggestReply reply;
    reply.number = m.number;
    reply.name = m.name;
    if (!owns(s, m.number, "Suggest")) {
      reply.error = "trial " + std::to_string(m.number) + " is not running on this worker";
      send(s, reply);
      return;
    }
    try {
      Json dj = parse_json_text(m.distribution_json, "distribution");
      Distribution d = Distribution::from_json(dj, m.name);
      const FrozenTrial& t = trial_of(m.number);
      auto suggested = lifecycle::suggest_param(
          t.params, t.distributions, lifecycle::fixed_params_of(t), m.name, d, [&] {
            Json value;
            with_sampler_trials(t, [&](const std::vector<TrialPtr>& ts) {
              SamplingContext ctx{direction, ts, t, n_workers};
              value = d.to_external(study.sampler().sample_independent(ctx, m.name, d));
            });
            return value;
          });
      if (suggested.is_new) {
        storage.set_trial_param(t.trial_id, m.name, suggested.value, d);
        refresh(m.number);
      }
      reply.ok = true;
      reply.value = proto::Value::from_json(suggested.value);
    } catch (const Error& e) {
      reply.ok = false;
      reply.error = e.what();
    }
    send(s, reply);
  }

  void on_report(Session& s, const proto::Report& m) {
    proto::Decision d;
    d.number = m.number;
    d.step = m.step;
    if (!owns(s, m.number, "Report")) {
      d.stored = false;
      d.prune = true;  // end it soon; its result will be rejected
      send(s, d);
      return;
    }
    const FrozenTrial& t = trial_of(m.number);
    d.stored = storage.set_trial_intermediate_value(t.trial_id, m.step, m.value);
    TrialPtr now = refresh(m.number);
    try {
      PruningContext ctx{direction, trials, *now, m.step, &storage};
      d.prune = study.pruner().prune(ctx);
    } catch (const Error& e) {
      spdlog::warn("coordinator: pruner failed on trial {} step {}: {}; continuing the trial",
                   m.number, m.step, e.what());
      d.prune = false;
    }
    if (!nop_pruner) refresh(m.number);  // the pruner may have written bookkeeping attrs
    send(s, d);
  }

  void set_user_attrs(const FrozenTrial& t, const std::string& text) {
    if (text.empty()) return;
    try {
      Json attrs = parse_json_text(text, "user_attrs");
      if (!attrs.is_object()) throw Error("user_attrs must be a JSON object");
      for (const auto& [k, v] : attrs.items()) storage.set_trial_user_attr(t.trial_id, k, v);
    } catch (const Error& e) {
      spdlog::warn("coordinator: trial {}: user attrs dropped: {}", t.number, e.what());
    }
  }

  void on_complete(Session& s, const proto::Complete& m) {
    if (!owns(s, m.number, "Complete")) return;
    const FrozenTrial& t = trial_of(m.number);
    set_user_attrs(t, m.user_attrs_json);
    std::optional<double> value = m.value;
    if (!m.pruned && !value) value = std::numeric_limits<double>::quiet_NaN();  // as NaN: FAIL
    lifecycle::TrialEnd end =
        lifecycle::resolve_end(m.pruned ? TrialState::kPruned : TrialState::kComplete, value, "",
                               [&]() -> std::optional<double> {
                                 auto last = t.last_intermediate();
                                 if (!last) return std::nullopt;
                                 return last->second;
                               });
    storage.set_trial_state(t.trial_id, end.state, end.value, end.fail_reason);
    end_trial(s, m.number);
  }

  void on_fail(Session& s, const proto::Fail& m) {
    if (!owns(s, m.number, "Fail")) return;
    const FrozenTrial& t = trial_of(m.number);
    set_user_attrs(t, m.user_attrs_json);
    if (m.reason == proto::Fail::Reason::kInterrupted) {
      std::string reason = "worker stopped";
      if (!m.message.empty()) reason += ": " + m.message;
      s.trial.reset();
      end_lost_trial(m.number, reason, lifecycle::RetryCause::kWorkerStopped);
      return;
    }
    std::string message = m.message.empty() ? "objective raised an exception" : m.message;
    storage.set_trial_state(t.trial_id, TrialState::kFail, std::nullopt, message);
    end_trial(s, m.number);
  }

  // After the store marked the trial finished: bookkeeping.
  void end_trial(Session& s, std::int64_t number) {
    s.trial.reset();
    running.erase(number);
    ended.push_back(refresh(number));
    status_dirty = true;
  }

  // Queues a WAITING trial with the params of `number` (which must be FAIL).
  void queue_retry(std::int64_t number, lifecycle::RetryCause cause) {
    append(lifecycle::queue_retry(storage, study_id, trial_of(number), cause));
    refresh(number);
  }

  // A running trial whose worker is gone (or stopped, or the run was
  // interrupted: `cause`): FAIL(reason) and, while retries remain (or
  // always), queued again.
  void end_lost_trial(std::int64_t number, const std::string& reason,
                      lifecycle::RetryCause cause = lifecycle::RetryCause::kWorkerLost,
                      bool always_retry = false) {
    running.erase(number);
    const FrozenTrial& t = trial_of(number);
    if (!storage.set_trial_state(t.trial_id, TrialState::kFail, std::nullopt, reason)) return;
    refresh(number);
    int depth = lifecycle::retry_depth(trials, number);
    bool retry = always_retry || depth < options.max_retries;
    if (retry) queue_retry(number, cause);
    spdlog::warn("coordinator: trial {} FAIL ({}){}", number, reason,
                 retry ? "; queued again with the same params" : "; no retries left");
    ended.push_back(trials[static_cast<std::size_t>(number)]);
    status_dirty = true;
  }

  // Keeps the number of connected workers that sampling contexts carry
  // (SamplingContext::n_workers: TPE turns its constant liar on above 1).
  void note_worker_count() { n_workers = std::max(1, static_cast<int>(sessions.size())); }

  void remember_expired(const Session& s) {
    expired[s.routing_id] = s.name;
    expired_order.push_back(s.routing_id);
    while (expired_order.size() > kMaxExpiredRemembered) {
      expired.erase(expired_order.front());
      expired_order.pop_front();
    }
  }

  void expire(Session& s, const std::string& why) {
    if (!is_done || s.trial) ++counters.expired_workers;
    if (is_done && !s.trial)
      spdlog::debug("coordinator: worker {} left: {}", s.name, why);
    else
      spdlog::warn("coordinator: worker {} ({}) lost: {}", s.name, s.device, why);
    if (s.trial) end_lost_trial(*s.trial, "worker lost");
    remember_expired(s);
    std::string rid = s.routing_id;
    sessions.erase(rid);  // `s` is gone from here on
    status_dirty = true;
    note_worker_count();
  }

  // ---------------------------------------------------------------- dispatch

  bool timed_out(Steady::time_point now) const {
    return options.timeout_s &&
           std::chrono::duration<double>(now - start).count() >= *options.timeout_s;
  }

  bool budget_left() const {
    return !options.n_trials ||
           finished + static_cast<std::int64_t>(running.size()) < *options.n_trials;
  }

  bool can_dispatch(Steady::time_point now) {
    if (!gate_open) {
      gate_open = static_cast<int>(sessions.size()) >= options.min_workers ||
                  std::chrono::duration<double>(now - start).count() >= options.min_workers_wait_s;
      if (!gate_open) return false;
    }
    return !stopping && budget_left() && !timed_out(now) && (!waiting.empty() || !exhausted);
  }

  // Creates (or claims) a trial for worker `s` and sends the assignment.
  // Returns false if there is no trial to give (search space exhausted).
  bool assign(Session& s) {
    TrialPtr t;
    Params fixed;
    if (!waiting.empty()) {
      t = storage.claim_waiting_trial(study_id, s.name);
      if (!t) {  // the store disagrees: read it again
        load_trials();
        return assign_new(s);
      }
      waiting.erase(t->number);
      trials.at(static_cast<std::size_t>(t->number)) = t;
      fixed = lifecycle::fixed_params_of(*t);
      Params chosen = t->params;
      lifecycle::apply_fixed_params(space, fixed, chosen);
      try {
        with_sampler_trials(*t, [&](const std::vector<TrialPtr>& ts) {
          SamplingContext ctx{direction, ts, *t, n_workers};
          study.sampler().sample(ctx, space, chosen);
        });
      } catch (const SearchSpaceExhausted& e) {
        exhausted = true;
        storage.set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, e.what());
        ended.push_back(refresh(t->number));
        return false;
      }
      lifecycle::store_new_params(storage, t->trial_id, space, t->params, chosen);
      t = refresh(t->number);
    } else {
      return assign_new(s);
    }
    send_assignment(s, t, fixed);
    return true;
  }

  bool assign_new(Session& s) {
    auto provisional = std::make_shared<FrozenTrial>();
    provisional->number = static_cast<std::int64_t>(trials.size());
    provisional->state = TrialState::kRunning;
    provisional->worker = s.name;
    provisional->datetime_start = Clock::now();
    Params chosen;
    trials.push_back(provisional);  // visible to the sampler as RUNNING
    try {
      with_sampler_trials(*provisional, [&](const std::vector<TrialPtr>& ts) {
        SamplingContext ctx{direction, ts, *provisional, n_workers};
        study.sampler().sample(ctx, space, chosen);
      });
    } catch (const SearchSpaceExhausted& e) {
      trials.pop_back();
      exhausted = true;
      spdlog::info("coordinator: {}", e.what());
      return false;
    } catch (...) {
      trials.pop_back();
      throw;
    }
    trials.pop_back();
    NewTrial init;
    init.state = TrialState::kRunning;
    init.worker = s.name;
    for (auto it = chosen.begin(); it != chosen.end();) {
      if (const ParamSpec* spec = space.find(it->first)) {
        init.distributions.emplace_hint(init.distributions.end(), it->first, spec->distribution);
        ++it;
      } else {
        it = chosen.erase(it);  // not a param of the space: not stored
      }
    }
    init.params = std::move(chosen);
    TrialPtr t = storage.create_trial(study_id, init);
    append(t);
    send_assignment(s, t, {});
    return true;
  }

  void send_assignment(Session& s, const TrialPtr& t, const Params& fixed) {
    proto::Assignment a;
    a.trial_id = t->trial_id;
    a.number = t->number;
    a.params = proto::to_wire(t->params);
    a.fixed = proto::to_wire(lifecycle::pending_fixed_params(fixed, t->params));
    a.config_id = config_id;
    if (!s.config_sent) {
      a.config_json = config_json;
      s.config_sent = true;
    }
    s.wants_trial = false;
    s.trial = t->number;
    running[t->number] = s.routing_id;
    status_dirty = true;
    send(s, a);
  }

  void dispatch(Steady::time_point now) {
    while (!idle.empty() && can_dispatch(now)) {
      std::string rid = idle.front();
      auto it = sessions.find(rid);
      if (it == sessions.end() || !it->second.wants_trial || it->second.trial) {
        idle.pop_front();
        continue;
      }
      if (!assign(it->second)) {
        if (!can_dispatch(now)) break;
        continue;  // a waiting trial failed to sample; try the next one
      }
      idle.pop_front();
    }
  }

  // Ends the study when nothing can be dispatched and nothing runs.
  void check_done(Steady::time_point now) {
    if (is_done || !running.empty()) return;
    std::string why;
    if (stopping)
      why = "interrupted";
    else if (options.n_trials && finished >= *options.n_trials)
      why = "budget reached";
    else if (timed_out(now))
      why = "timeout";
    else if (exhausted && waiting.empty())
      why = "search space exhausted";
    if (why.empty()) return;
    finish(why, false);
  }

  void finish(const std::string& why, bool stop_trials) {
    is_done = true;
    reason_done = why;
    for (auto& [rid, s] : sessions) send(s, proto::Shutdown{why, stop_trials});
    idle.clear();
    status_dirty = true;
    spdlog::debug("coordinator: study '{}' done: {}", study.name(), why);
  }

  // ---------------------------------------------------------------- timers

  void heartbeats_and_expiry(Steady::time_point now, bool may_expire) {
    const auto interval = std::chrono::milliseconds(options.heartbeat_interval_ms);
    const auto timeout = interval * options.liveness;
    std::vector<std::string> dead;
    for (auto& [rid, s] : sessions) {
      if (may_expire && now - s.last_seen > timeout) {
        dead.push_back(rid);
        continue;
      }
      if (now - s.last_sent >= interval) send(s, proto::Heartbeat{});
    }
    for (const auto& rid : dead) {
      auto it = sessions.find(rid);
      if (it != sessions.end())
        expire(it->second, "no heartbeat for " + std::to_string(options.liveness) + " intervals");
    }
  }

  Json workers_json() const {
    Json arr = Json::array();
    auto now = Steady::now();
    for (const auto& [rid, s] : sessions) {
      Json w{{"name", s.name},
             {"host", s.hostname},
             {"pid", s.pid},
             {"device", s.device},
             {"threads", s.threads},
             {"connected_s", std::chrono::duration<double>(now - s.connected).count()}};
      w["trial"] = s.trial ? Json(*s.trial) : Json();
      arr.push_back(std::move(w));
    }
    return arr;
  }

  void write_status(bool force) {
    auto now = Steady::now();
    if (!force && (!status_dirty ||
                   now - last_status < std::chrono::duration<double>(options.status_interval_s)))
      return;
    Json attr{{"running", !is_done},
              {"host", hostname},
              {"pid", static_cast<std::int64_t>(getpid())},
              {"endpoint", endpoint},
              {"updated", unix_now()},
              {"heartbeat_interval_ms", options.heartbeat_interval_ms},
              {"liveness", options.liveness},
              {"workers", workers_json()}};
    if (is_done) attr["done_reason"] = reason_done;
    storage.set_study_system_attr(study_id, kAttrCoordinator, attr);
    last_status = now;
    status_dirty = false;
  }

  // ---------------------------------------------------------------- the loop

  // Whether a step without messages has anything to write: a worker to
  // expire, a trial to dispatch, the end of the study, the status attr.
  bool writes_due(Steady::time_point now, bool may_expire) {
    const auto timeout =
        std::chrono::milliseconds(options.heartbeat_interval_ms) * options.liveness;
    if (may_expire)
      for (const auto& [rid, s] : sessions)
        if (now - s.last_seen > timeout) return true;
    if (!is_done) {
      if (!idle.empty() && can_dispatch(now)) return true;
      if (running.empty() && (stopping || (options.n_trials && finished >= *options.n_trials) ||
                              timed_out(now) || (exhausted && waiting.empty())))
        return true;
    }
    return status_dirty &&
           now - last_status >= std::chrono::duration<double>(options.status_interval_s);
  }

  bool step(int timeout_ms) {
    int wait = std::max(0, std::min(timeout_ms, std::max(1, options.heartbeat_interval_ms / 2)));
    // Read what is there first; sleep only if nothing is. The socket's
    // ZMQ_FD wakes on an edge, and reading the socket until it is empty
    // (which also follows the last step's sends) leaves no edge unseen;
    // cheaper than zmq::poll, which costs several system calls per call.
    bool drained = false;
    std::vector<Incoming> batch = drain(drained);
    if (batch.empty() && wait > 0) {
      pollfd fd{socket_fd, POLLIN, 0};
      (void)::poll(&fd, 1, wait);  // EINTR (a signal): handled after this step
      batch = drain(drained);
    }
    auto now = Steady::now();
    descriptors.poll(now);  // at most once a second: a warning when out of descriptors
    if (batch.empty() && !writes_due(now, drained)) {
      heartbeats_and_expiry(now, false);  // heartbeats only: nothing to store
    } else {
      storage.run_in_transaction([&] {
        for (const auto& in : batch) handle(in, now);
        heartbeats_and_expiry(now, drained);
        if (!is_done) {
          dispatch(now);
          check_done(now);
        }
        // The status attr: periodically, and always a last time when done.
        write_status(is_done && status_dirty);
      });
    }
    flush_outbox();
    run_callbacks();
    return !is_done;
  }

  void run_callbacks() {
    std::vector<TrialPtr> list;
    list.swap(ended);
    if (!callback) return;
    for (const auto& t : list) callback(*t);
  }

  void stop(const std::string& why) {
    if (is_done) return;
    stopping = true;
    storage.run_in_transaction([&] {
      std::vector<std::int64_t> numbers;
      for (const auto& [number, rid] : running) numbers.push_back(number);
      for (auto number : numbers)
        end_lost_trial(number, why, lifecycle::RetryCause::kInterrupted, /*always_retry=*/true);
      for (auto& [rid, s] : sessions) s.trial.reset();
      finish(why, true);
      write_status(true);
    });
    flush_outbox();
    run_callbacks();
  }

  void worker_exited(std::int64_t pid) {
    storage.run_in_transaction([&] {
      std::vector<std::string> gone;
      for (auto& [rid, s] : sessions)
        if (s.pid == pid && s.hostname == hostname) gone.push_back(rid);
      for (const auto& rid : gone) {
        auto it = sessions.find(rid);
        if (it != sessions.end()) expire(it->second, "process " + std::to_string(pid) + " exited");
      }
      if (!is_done) {
        dispatch(Steady::now());
        check_done(Steady::now());
      }
    });
    flush_outbox();
    run_callbacks();
  }
};

Coordinator::Coordinator(Study study, Json objective_config, CoordinatorOptions options)
    : impl_(std::make_unique<Impl>(std::move(study), std::move(objective_config),
                                   std::move(options))) {}

Coordinator::~Coordinator() {
  if (!impl_) return;
  try {
    if (!impl_->is_done) {
      impl_->is_done = true;
      impl_->reason_done = "coordinator exited";
    }
    impl_->status_dirty = true;
    impl_->write_status(true);
  } catch (const std::exception& e) {
    spdlog::warn("coordinator: could not record the end of the run: {}", e.what());
  }
}

const std::string& Coordinator::endpoint() const { return impl_->endpoint; }
const std::string& Coordinator::local_endpoint() const { return impl_->local_endpoint; }
bool Coordinator::step(int timeout_ms) { return impl_->step(timeout_ms); }
void Coordinator::stop(const std::string& reason) { impl_->stop(reason); }
void Coordinator::worker_exited(std::int64_t pid) { impl_->worker_exited(pid); }
bool Coordinator::done() const { return impl_->is_done; }
const std::string& Coordinator::done_reason() const { return impl_->reason_done; }

CoordinatorStats Coordinator::stats() const {
  const Impl& s = *impl_;
  CoordinatorStats out = s.counters;
  out.finished = s.finished;
  out.running = static_cast<std::int64_t>(s.running.size());
  out.waiting = static_cast<std::int64_t>(s.waiting.size());
  for (const auto& [rid, w] : s.sessions) (w.trial ? out.workers_busy : out.workers_idle) += 1;
  if (s.best) {
    out.best_value = s.best->value;
    out.best_number = s.best->number;
  }
  if (s.zap) out.refused_keys = s.zap->refused();
  return out;
}

std::vector<WorkerStatus> Coordinator::workers() const {
  std::vector<WorkerStatus> out;
  auto now = Steady::now();
  for (const auto& [rid, s] : impl_->sessions) {
    WorkerStatus w;
    w.name = s.name;
    w.hostname = s.hostname;
    w.pid = s.pid;
    w.device = s.device;
    w.threads = s.threads;
    w.trial = s.trial;
    w.connected_s = std::chrono::duration<double>(now - s.connected).count();
    out.push_back(std::move(w));
  }
  std::sort(out.begin(), out.end(),
            [](const WorkerStatus& a, const WorkerStatus& b) { return a.name < b.name; });
  return out;
}

void Coordinator::set_trial_callback(std::function<void(const FrozenTrial&)> callback) {
  impl_->callback = std::move(callback);
}

}  // namespace hps
