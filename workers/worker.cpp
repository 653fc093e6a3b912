#include "workers/worker.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "objectives/objective.h"
#include "protocol/curve_keys.h"
#include "protocol/protocol.h"
#include "protocol/zmq_util.h"
#include "search/checkpoints.h"
#include "search/json_util.h"
#include "search/printable.h"
#include "search/private_files.h"
#include "search/trial_lifecycle.h"
#include "search/util/fd_io.h"
#include "search/util/hash.h"
#include "search/util/host.h"

namespace hps {

namespace proto = hps::protocol;
using Steady = std::chrono::steady_clock;

void WorkerOptions::validate() const {
  if (connect.empty()) throw ConfigError("worker.connect", "is required (e.g. tcp://host:5555)");
  zmq_util::check_endpoint(connect, "worker.connect", false);
  if (device != "cpu" && device.rfind("cuda", 0) != 0)
    throw ConfigError("worker.device", "must be 'cpu', 'cuda' or 'cuda:N', got '" + device + "'");
  if (threads < 0) throw ConfigError("worker.threads", "must be >= 0 (0 = all hardware threads)");
  proto::check_heartbeat_settings(heartbeat_interval_ms, "worker.heartbeat_interval_ms", liveness,
                                  "worker.liveness");
  if (reconnect_attempts < 0) throw ConfigError("worker.reconnect_attempts", "must be >= 0");
  if (reconnect_initial_ms < 0) throw ConfigError("worker.reconnect_initial_ms", "must be >= 0");
  if (reconnect_max_ms < reconnect_initial_ms)
    throw ConfigError("worker.reconnect_max_ms", "must be >= reconnect_initial_ms");
  proto::check_prefetch(prefetch, "worker.prefetch");
  if (!curve_secret_key.empty() && curve_server_key.empty() && keys_dir.empty())
    throw ConfigError("worker.curve_server_key",
                      "is required with curve_secret_key (the coordinator's public key)");
  if (!curve_server_key.empty() && curve_secret_key.empty() && keys_dir.empty())
    throw ConfigError("worker.curve_secret_key",
                      "is required with curve_server_key (this worker's secret key)");
  for (const auto& [field, key] : {std::pair{"worker.curve_server_key", &curve_server_key},
                                   std::pair{"worker.curve_secret_key", &curve_secret_key}})
    if (!key->empty() && !curve::is_key(*key))
      throw ConfigError(field, "is not a Z85 CURVE key (40 characters)");
  if (connect.rfind("tcp://", 0) == 0 && keys_dir.empty() && curve_secret_key.empty() && !insecure)
    throw ConfigError("worker.connect",
                      "a tcp endpoint needs CURVE keys (keys_dir: a worker folder made by "
                      "`hpsearch keys init DIR`, such as DIR/worker-1), or insecure = true to "
                      "serve whatever process answers at that address");
  for (const auto& program : allowed_programs)
    if (program.empty() || program[0] != '/')
      throw ConfigError("worker.allowed_programs",
                        "'" + printable(program) + "' is not an absolute path");
}

namespace {

// The socket file an ipc:// endpoint names; "" for other endpoints and the
// abstract namespace (ipc://@name: no file to look at).
std::string ipc_socket_path(const std::string& endpoint) {
  constexpr std::string_view kIpc = "ipc://";
  if (endpoint.rfind(kIpc, 0) != 0) return "";
  std::string path = endpoint.substr(kIpc.size());
  return !path.empty() && path[0] == '@' ? "" : path;
}

// Why a worker gets no answer from an ipc:// endpoint, when the socket
// file says it (missing, not a socket, no write permission); "" otherwise
// (and for tcp:// endpoints). Phrased to follow "no answer from ...".
std::string ipc_problem(const std::string& endpoint) {
  const std::string path = ipc_socket_path(endpoint);
  if (path.empty()) return "";
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st))
    return " (there is no socket file " + printable(path) + ": is the coordinator running?)";
  if (!std::filesystem::is_socket(st)) return " (" + printable(path) + " is not a socket)";
  if (access(path.c_str(), W_OK) != 0)
    return " (permission denied on " + printable(path) +
           ": only the user who started the coordinator may connect to its socket)";
  return "";
}

// Why a worker without CURVE keys must not connect to an ipc:// endpoint:
// its socket file belongs to another user, whose coordinator could make
// this worker run its commands as this worker's user; "" when the file is
// this user's, absent (the coordinator may not be up yet), or not ipc.
// A worker with keys pins the coordinator's key instead.
std::string foreign_ipc_owner(const std::string& endpoint) {
  const std::string path = ipc_socket_path(endpoint);
  struct stat st {};
  if (path.empty() || ::lstat(path.c_str(), &st) != 0) return "";
  if (st.st_uid == ::geteuid()) return "";
  return "the socket " + printable(path) + " belongs to another user (uid " +
         std::to_string(st.st_uid) + ", this worker runs as uid " + std::to_string(::geteuid()) +
         "): a coordinator of another user could make this worker run its programs; refused "
         "(to serve another user's coordinator, connect over tcp with --keys, which pin its key)";
}

// Events between the objective thread ("main") and the socket thread
// ("link"), through an EventQueue (below): kind, epoch and payload.
enum class Ev : std::uint8_t {
  kQuit = 2,      // main -> link: close and end
  kLook = 3,      // main -> link: the socket has messages to read (seen by a send of main's)
  kReady = 10,    // link -> main: session `epoch` is open
  kMessage = 11,  // link -> main: a message of session `epoch`
  kLost = 12,     // link -> main: session `epoch` is gone (payload: why)
  kFatal = 13,    // link -> main: give up (payload: why)
  kStop = 14,     // link -> main: the stop flag was set
};

struct Event {
  Ev kind{};
  std::uint64_t epoch = 0;
  std::string payload;
};

// Events from one thread of a worker to the other: a mutex-guarded queue.
// The receiving thread blocks in receive(), or (the link thread, which also
// waits for its socket) polls fd(): an eventfd that is readable while
// events are queued. Cheaper than a ZeroMQ pipe: no socket machinery, and
// a system call only when the queue becomes non-empty or empty.
class EventQueue {
 public:
  // pollable: keep fd() (for a receiver that polls); else it is -1.
  explicit EventQueue(bool pollable) : fd_(pollable ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1) {
    if (pollable && fd_ < 0)
      throw Error(std::string("worker: eventfd failed: ") + std::strerror(errno));
  }
  ~EventQueue() {
    if (fd_ >= 0) close(fd_);
  }
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  void post(Ev kind, std::uint64_t epoch, std::string_view payload) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(Event{kind, epoch, std::string(payload)});
      if (queue_.size() == 1 && fd_ >= 0) {
        std::uint64_t one = 1;
        (void)!write(fd_, &one, sizeof one);
      }
    }
    ready_.notify_one();
  }

  // Waits for the next event.
  Event receive() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !queue_.empty(); });
    return pop();
  }

  // The next event, if one is queued.
  std::optional<Event> try_receive() {
    std::lock_guard lock(mutex_);
    if (queue_.empty()) return std::nullopt;
    return pop();
  }

  // Readable (POLLIN) while events are queued.
  int fd() const { return fd_; }

 private:
  Event pop() {
    Event e = std::move(queue_.front());
    queue_.pop_front();
    if (queue_.empty() && fd_ >= 0) {
      std::uint64_t count = 0;
      (void)!read(fd_, &count, sizeof count);  // not readable until the next post
    }
    return e;
  }

  int fd_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> queue_;
};

// Why a "command" objective may not run on this worker ("" if it may).
std::string command_refusal(const Json& objective, const WorkerOptions& o) {
  if (!objective.is_object() || objective.value("type", std::string()) != "command" ||
      o.allow_command)
    return "";
  std::string program;
  if (objective.contains("argv") && objective["argv"].is_array() && !objective["argv"].empty() &&
      objective["argv"][0].is_string())
    program = objective["argv"][0].get<std::string>();
  const std::string shown = "'" + printable(program) + "'";
  const std::string fix =
      "start the worker with --allow-command (or --allow-program PATH for this program)";
  if (o.allowed_programs.empty())
    return "this worker does not run \"command\" objectives (the coordinator asked for " + shown +
           "): " + fix;
  std::error_code ec;
  bool listed = false;
  if (!program.empty() && program[0] == '/' && program.find('{') == std::string::npos) {
    auto real = std::filesystem::weakly_canonical(program, ec);
    for (const auto& allowed : o.allowed_programs) {
      std::error_code ec2;
      if (allowed == program || (!ec && std::filesystem::weakly_canonical(allowed, ec2) == real))
        listed = true;
    }
  }
  if (!listed)
    return "program " + shown + " is not in this worker's allow-list (--allow-program, absolute " +
           "paths): " + fix;
  if (objective.contains("env") && objective["env"].is_object())
    for (const auto& [name, value] : objective["env"].items())
      if (std::find(o.allowed_env.begin(), o.allowed_env.end(), name) == o.allowed_env.end())
        return "the objective's env sets " + printable(name) +
               ", which is not in this worker's env allow-list: start the worker with "
               "--allow-env " +
               printable(name) + " if the coordinator may set it (or --allow-command)";
  return "";
}

// A free TCP port on this host for a multi-process trial's rendezvous
// (MASTER_PORT): the kernel's choice for a socket bound to port 0 on every
// address, released at once for the program (torch's TCPStore) to bind.
// Throws Error if no socket can be bound.
std::uint16_t pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(std::string("rendezvous: cannot open a socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(std::string("rendezvous: cannot pick a free TCP port: ") + std::strerror(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string random_hex() {
  std::random_device rd;
  std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

struct Worker::Impl : TrialBackend {
  WorkerOptions options;
  std::string hostname = util::host_name();
  zmq::context_t context{1};
  EventQueue to_link{true};   // main thread -> link thread (which polls it with its socket)
  EventQueue to_main{false};  // link thread -> main thread
  std::thread link;
  // A session's DEALER socket is used by both threads: the link thread
  // opens it, reads it and sends heartbeats; the main thread sends its own
  // messages on it directly once the session is open (a trial's result
  // then costs no wake-up of the link thread). Every call on an open
  // session's socket holds socket_mutex: a ZeroMQ socket may be used by
  // one thread after another with a full memory barrier between.
  struct Link;
  std::mutex socket_mutex;
  Link* open_session = nullptr;        // the open session (socket_mutex); null between sessions
  std::atomic<bool> interrupt{false};  // the running trial must stop
  std::atomic<std::int64_t> ended{0};
  // Multi-process trials: the number of the trial that runs (-1: none),
  // read by the link thread when a StopTrial comes; the StopTrial numbers
  // received for trials not running yet (held, or about to start), guarded
  // by stop_mutex; and the rank the running trial runs (0 otherwise).
  std::atomic<std::int64_t> running_number{-1};
  std::mutex stop_mutex;
  std::set<std::int64_t> stop_requests;
  static constexpr std::size_t kMaxStopRequests = 1024;
  int current_rank = 0;

  // ---- main thread state
  std::uint64_t epoch = 0;  // the open session, 0 if none
  bool shutdown = false;    // the coordinator said Shutdown
  bool stopped = false;     // the stop flag was seen
  std::string fatal;        // a reason to give up
  struct Built {
    SearchSpace space;
    Objective objective;
    std::string study;
    // The study's artifacts.max_snapshot_bytes (search/checkpoints.h).
    std::uint64_t max_snapshot_bytes = checkpoints::ArtifactOptions{}.max_snapshot_bytes;
    // The study's artifacts.max_artifact_bytes.
    std::uint64_t max_artifact_bytes = checkpoints::ArtifactOptions{}.max_artifact_bytes;
    // The study's artifacts.path, made absolute by the coordinator ("":
    // <log_dir>/checkpoints).
    std::string checkpoint_path;
  };
  std::map<std::uint64_t, Built> objectives;
  std::map<std::uint64_t, std::string> refused;  // config id -> why its objective may not run
  // The running trial.
  std::int64_t number = -1;
  std::uint64_t trial_epoch = 0;
  // The ended trial's Complete or Fail (encoded), not yet sent: it goes
  // out together with the next RequestTrial (post_result).
  std::optional<std::string> result;
  // Trials assigned and not yet started (prefetch), with their session's
  // epoch; and whether a RequestTrial is unanswered.
  std::deque<std::pair<std::uint64_t, proto::Assignment>> held;
  bool asked = false;
  bool last_prune = false;
  Json user_attrs = Json::object();
  // The running trial's lineage folder when it does not share the
  // coordinator's checkpoint root (its .store-id differs from the
  // assignment's): each snapshot is uploaded after its report. Null
  // otherwise (the folder is used in place, nothing travels).
  std::shared_ptr<checkpoints::LineageFolder> remote_folder;
  // Whether the running trial's user artifact folder is this worker's own
  // (not the coordinator's artifact store): uploaded when the trial ends.
  bool remote_artifacts = false;
  // The most pieces of an upload sent ahead of the coordinator's replies.
  static constexpr int kUploadWindow = 4;
  // The coordinator's artifact endpoint (protocol Welcome.artifact_endpoint,
  // coordinator/artifact_server.h): what the last Welcome announced
  // (socket_mutex), and the main thread's DEALER socket to it, made for
  // session artifact_epoch. artifact_unreachable: it did not answer
  // (kArtifactSilence), so the pieces travel on the main socket until the
  // next session.
  std::string artifact_announced;
  zmq::socket_t artifact_socket;
  std::uint64_t artifact_epoch = 0;
  bool artifact_unreachable = false;
  static constexpr std::chrono::seconds kArtifactSilence{60};

  std::string curve_public_key;  // this worker's, derived from curve_secret_key
  std::string handshake_error;   // link thread: why the last handshake failed
  // Link thread: why the worker gives up, for a handshake failure that
  // trying again cannot mend (a refused key, another security mechanism, a
  // coordinator key that does not match the pinned one).
  std::string give_up;
  // Link thread: handshakes the peer closed in a row, none succeeded since.
  int closed_handshakes = 0;
  // A peer that closes this many handshakes in a row (and completes none)
  // is not the coordinator whose key the worker pins (or, without keys, it
  // requires keys): given up, as retrying cannot mend it. Not 1: a
  // coordinator killed during one handshake closes it too.
  static constexpr int kClosedHandshakesToGiveUp = 3;

  explicit Impl(WorkerOptions o) : options(std::move(o)) {
    options.validate();
    if (!options.keys_dir.empty()) {
      curve::WorkerKeys keys = curve::load_worker_keys(options.keys_dir);
      options.curve_secret_key = keys.keys.secret_key;
      options.curve_server_key = keys.server_key;
    }
    if (!options.curve_secret_key.empty()) {
      curve::require("worker: CURVE keys");
      curve_public_key = curve::public_key_of(options.curve_secret_key, "worker.curve_secret_key");
    } else if (options.connect.rfind("tcp://", 0) == 0) {
      spdlog::warn(
          "worker: connecting to {} without CURVE keys (--insecure): whatever process answers "
          "there can hand this worker trials",
          options.connect);
    }
    if (options.worker_id.empty()) options.worker_id = default_worker_name();
    if (options.threads == 0)
      options.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }

  // ================================================================ link thread

  enum class End { kSilent, kExpired, kQuit, kFatal };

  void link_main() {
    int attempts = 0;
    int backoff = options.reconnect_initial_ms;
    std::uint64_t session = 0;
    int interval = options.heartbeat_interval_ms;
    int liveness = options.liveness;
    bool stop_posted = false;
    try {
      while (true) {
        if (options.curve_secret_key.empty())
          if (std::string why = foreign_ipc_owner(options.connect); !why.empty()) {
            to_main.post(Ev::kFatal, 0, why);
            wait_for_quit();
            return;
          }
        ++session;
        bool was_ready = false;
        End end = run_session(session, interval, liveness, was_ready, stop_posted);
        if (end == End::kQuit || end == End::kFatal) return;
        if (was_ready) {
          attempts = 0;
          backoff = options.reconnect_initial_ms;
        }
        if (end == End::kExpired) continue;  // the coordinator is there: say Hello again now
        ++attempts;
        std::string why = handshake_error.empty() ? "" : ": " + handshake_error;
        if (why.empty() && options.curve_secret_key.empty() &&
            options.connect.rfind("tcp://", 0) == 0)
          why = " (a coordinator with CURVE keys answers only workers started with --keys)";
        if (why.empty()) why = ipc_problem(options.connect);
        if (attempts > options.reconnect_attempts) {
          to_main.post(
              Ev::kFatal, 0,
              "the coordinator at " + options.connect + " did not answer (the first try and " +
                  std::to_string(options.reconnect_attempts) + " retries); giving up" + why);
          wait_for_quit();
          return;
        }
        if (handshake_error.empty() && why.empty())
          spdlog::info(
              "worker: no answer from the coordinator at {}; retrying in {} ms (retry {} of {})",
              options.connect, backoff, attempts, options.reconnect_attempts);
        else
          spdlog::warn(
              "worker: no session with the coordinator at {}{}; retrying in {} ms (retry "
              "{} of {})",
              options.connect, why, backoff, attempts, options.reconnect_attempts);
        if (!pause(backoff, stop_posted)) return;
        backoff = std::min(options.reconnect_max_ms, std::max(1, backoff * 2));
      }
    } catch (const std::exception& e) {
      try {
        to_main.post(Ev::kFatal, 0, std::string("worker connection thread failed: ") + e.what());
      } catch (...) {
      }
      wait_for_quit();
    }
  }

  // Sleeps `ms` while still answering the main thread. False on kQuit.
  bool pause(int ms, bool& stop_posted) {
    auto until = Steady::now() + std::chrono::milliseconds(ms);
    while (Steady::now() < until) {
      check_stop(stop_posted);
      zmq::pollitem_t item{nullptr, to_link.fd(), ZMQ_POLLIN, 0};
      zmq_util::no_eintr([&] { return zmq::poll(&item, 1, std::chrono::milliseconds(50)); });
      while (auto e = to_link.try_receive()) {
        if (e->kind == Ev::kQuit) return false;
        // kSend for a lost session: dropped.
      }
    }
    return true;
  }

  void wait_for_quit() {
    while (true) {
      Event e = to_link.receive();
      if (e.kind == Ev::kQuit) return;
    }
  }

  void check_stop(bool& stop_posted) {
    if (!stop_posted && options.stop && options.stop->load()) {
      stop_posted = true;
      interrupt = true;
      to_main.post(Ev::kStop, 0, "");
    }
  }

  // One session's link: the DEALER socket, its handshake monitor, and the
  // timing of heartbeats. `interval`, `liveness` and `was_ready` are the
  // caller's (the Welcome's settings outlive the session).
  struct Link {
    std::uint64_t session;
    zmq::socket_t dealer;
    zmq::socket_t monitor;
    int& interval;
    int& liveness;
    bool& was_ready;
    bool ready = false;
    Steady::time_point last_recv = Steady::now();
    Steady::time_point next_beat = last_recv;
  };

  // A DEALER socket for session `session`, with CURVE keys if any, and a
  // monitor of its handshake failures (only visible as socket events;
  // watched until the session is open); connected, Hello sent.
  void open_link(Link& ln) {
    zmq::socket_t& dealer = ln.dealer;
    std::string rid =
        options.worker_id.substr(0, 200) + "/" + std::to_string(ln.session) + "/" + random_hex();
    dealer.set(zmq::sockopt::routing_id, rid);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(proto::kMaxFrameBytes));
    dealer.set(zmq::sockopt::ipv6, zmq_util::ipv6_endpoint(options.connect));
    if (!options.curve_secret_key.empty()) {
      dealer.set(zmq::sockopt::curve_serverkey, options.curve_server_key);
      dealer.set(zmq::sockopt::curve_publickey, curve_public_key);
      dealer.set(zmq::sockopt::curve_secretkey, options.curve_secret_key);
    }
    const std::string monitor_endpoint =
        "inproc://hps-worker-monitor-" + std::to_string(ln.session) + "-" + random_hex();
    // No handshake timeout: a handshake failure is then always an answer
    // (the peer closed the connection, or said why), never a slow peer
    // (a coordinator out of descriptors leaves the connection in its
    // backlog); a session that stays silent ends by liveness.
    dealer.set(zmq::sockopt::handshake_ivl, 0);
    if (zmq_socket_monitor(dealer.handle(), monitor_endpoint.c_str(),
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
      throw Error(std::string("worker: zmq_socket_monitor failed: ") + zmq_strerror(zmq_errno()));
    ln.monitor = zmq::socket_t(context, zmq::socket_type::pair);
    ln.monitor.set(zmq::sockopt::linger, 0);
    ln.monitor.connect(monitor_endpoint);
    handshake_error.clear();
    dealer.connect(options.connect);

    proto::Hello hello;
    hello.worker_id = options.worker_id;
    hello.hostname = hostname;
    hello.pid = static_cast<std::int64_t>(getpid());
    hello.device = options.device;
    if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) hello.visible_devices = cvd;
    hello.threads = options.threads;
    hello.prefetch = options.prefetch;
    std::string hello_frame = proto::encode(hello);
    zmq_util::no_eintr(
        [&] { return dealer.send(zmq::buffer(hello_frame), zmq::send_flags::none); });
  }

  // The session is lost: the main thread is told (and its objective asked
  // to stop).
  void lose(const Link& ln, const std::string& why) {
    interrupt = true;
    to_main.post(Ev::kLost, ln.session, why);
  }

  // Takes what the main thread posted: false on kQuit (a kLook only wakes
  // this thread to read the socket, which the caller does next).
  bool take_posted(Link& ln) {
    while (auto e = to_link.try_receive()) {
      if (e->kind == Ev::kQuit) {
        std::lock_guard lock(socket_mutex);
        ln.dealer.set(zmq::sockopt::linger, 1000);  // let a last Fail get out
        return false;
      }
    }
    return true;
  }

  // The coordinator's Welcome: the session is open.
  void on_welcome(Link& ln, const proto::Welcome& w) {
    if (ln.ready) return;
    ln.ready = true;
    ln.was_ready = true;
    {
      std::lock_guard lock(socket_mutex);
      // The handshake is done: no more monitoring (a monitored socket was
      // seen to stall its session under load).
      (void)zmq_socket_monitor(ln.dealer.handle(), nullptr, 0);
      open_session = &ln;  // the main thread may send from now on (after kReady)
    }
    ln.monitor.close();
    {
      std::lock_guard lock(socket_mutex);
      artifact_announced = w.artifact_endpoint;
    }
    ln.interval = w.heartbeat_interval_ms;
    ln.liveness = w.liveness;
    ln.next_beat = Steady::now();
    spdlog::debug("worker: connected to {} (study '{}')", options.connect, w.study_name);
    to_main.post(Ev::kReady, ln.session, "");
  }

  // Handles one frame from the coordinator; returns how the session ends,
  // if it does.
  std::optional<End> on_frame(Link& ln, std::string_view frame) {
    proto::Message m;
    try {
      m = proto::decode(frame);
    } catch (const proto::VersionMismatch& e) {
      std::string why =
          "the coordinator speaks another protocol version (" + std::string(e.what()) + ")";
      if (auto d = proto::decode_disconnect_any_version(frame)) why = d->reason;
      to_main.post(Ev::kFatal, ln.session, "refused by the coordinator: " + why);
      wait_for_quit();
      return End::kFatal;
    } catch (const std::exception& e) {
      spdlog::warn("worker: dropped a bad frame from the coordinator: {}", e.what());
      return std::nullopt;
    }
    if (auto* w = std::get_if<proto::Welcome>(&m)) {
      on_welcome(ln, *w);
    } else if (std::holds_alternative<proto::Heartbeat>(m)) {
    } else if (auto* d = std::get_if<proto::Disconnect>(&m)) {
      if (d->code == proto::Disconnect::Code::kRefused) {
        to_main.post(Ev::kFatal, ln.session, "refused by the coordinator: " + d->reason);
        wait_for_quit();
        return End::kFatal;
      }
      spdlog::info("worker: the coordinator ended the session: {}", d->reason);
      lose(ln, d->reason);
      return End::kExpired;
    } else {
      if (auto* sd = std::get_if<proto::Shutdown>(&m); sd && sd->stop_trial) interrupt = true;
      if (auto* st = std::get_if<proto::StopTrial>(&m)) {
        // Another rank of a multi-process trial ended it: its program stops
        // now (or it never starts); the coordinator expects no result.
        spdlog::debug("worker: stop trial {}: {}", st->number, printable(st->reason));
        if (running_number.load() == st->number) {
          interrupt = true;
        } else {
          std::lock_guard lock(stop_mutex);
          if (stop_requests.size() >= kMaxStopRequests) stop_requests.erase(stop_requests.begin());
          stop_requests.insert(st->number);
        }
        return std::nullopt;
      }
      to_main.post(Ev::kMessage, ln.session, frame);
    }
    return std::nullopt;
  }

  // Reads every message the socket has; returns how the session ends, if
  // it does.
  std::optional<End> read_socket(Link& ln) {
    while (true) {
      zmq::message_t msg;
      {
        std::lock_guard lock(socket_mutex);
        if (!zmq_util::no_eintr([&] { return ln.dealer.recv(msg, zmq::recv_flags::dontwait); }))
          return std::nullopt;
        if (msg.more()) {  // never sent by a coordinator: drain and drop
          while (msg.more()) {
            zmq::message_t rest;
            if (!zmq_util::no_eintr(
                    [&] { return ln.dealer.recv(rest, zmq::recv_flags::dontwait); }))
              break;
            msg = std::move(rest);
          }
          continue;
        }
      }
      ln.last_recv = Steady::now();
      std::string_view frame(static_cast<const char*>(msg.data()), msg.size());
      if (auto end = on_frame(ln, frame)) return end;
    }
  }

  // Sends a heartbeat when due (returns true then: the socket needs another
  // look); sets `silent` when the coordinator has been silent for liveness
  // intervals.
  bool beat(Link& ln, bool& silent) {
    auto now = Steady::now();
    bool sent = false;
    if (ln.ready && now >= ln.next_beat) {
      std::string frame = proto::encode(proto::Heartbeat{});
      std::lock_guard lock(socket_mutex);
      zmq_util::no_eintr(
          [&] { return ln.dealer.send(zmq::buffer(frame), zmq::send_flags::dontwait); });
      ln.next_beat = now + std::chrono::milliseconds(ln.interval);
      sent = true;
    }
    if (!ln.ready) ln.next_beat = now + std::chrono::milliseconds(100);
    silent = now - ln.last_recv > std::chrono::milliseconds(ln.interval) * ln.liveness;
    return sent;
  }

  End run_session(std::uint64_t session, int& interval, int& liveness, bool& was_ready,
                  bool& stop_posted) {
    Link ln{session,         zmq::socket_t(context, zmq::socket_type::dealer),
            zmq::socket_t(), interval,
            liveness,        was_ready};
    open_link(ln);
    // The session ends with this call: the main thread's sends stop first.
    struct Close {
      Impl& impl;
      ~Close() {
        std::lock_guard lock(impl.socket_mutex);
        impl.open_session = nullptr;
      }
    } close_session{*this};
    // Waiting: poll(2) on the main thread's eventfd and the socket's ZMQ_FD
    // (zmq::poll costs several system calls per call, this one). ZMQ_FD
    // wakes on an edge ("the socket's state may have changed"): each round
    // reads the socket until it has nothing, which leaves no edge unseen; a
    // send after that can take an edge: a heartbeat's round is followed by
    // another look, and the main thread, after each of its sends, posts a
    // kLook when the socket has messages (send_now).
    const int socket_fd = ln.dealer.get(zmq::sockopt::fd);
    bool busy = true;
    while (true) {
      check_stop(stop_posted);
      auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(ln.next_beat - Steady::now());
      wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(100));
      if (!busy) {
        pollfd fds[2] = {{to_link.fd(), POLLIN, 0}, {socket_fd, POLLIN, 0}};
        (void)::poll(fds, 2, static_cast<int>(wait.count()));  // EINTR: look and wait again
      }
      // Every event the main thread posted, then every message the socket has.
      if (!take_posted(ln)) return End::kQuit;
      if (auto end = read_socket(ln)) return *end;
      if (!ln.ready) note_handshake_failures(ln.monitor);
      if (!give_up.empty()) {  // an answer, not silence: trying again fails again
        to_main.post(Ev::kFatal, ln.session, give_up);
        wait_for_quit();
        return End::kFatal;
      }
      bool silent = false;
      busy = beat(ln, silent);
      if (silent) {
        if (ln.ready) {
          spdlog::warn("worker: the coordinator at {} is silent; reconnecting", options.connect);
          lose(ln, "the coordinator is silent");
        }
        return End::kSilent;
      }
    }
  }

  // Reads the monitor's events (link thread); keeps the last failure's
  // meaning in handshake_error, and sets give_up for one that trying again
  // cannot mend.
  void note_handshake_failures(zmq::socket_t& monitor) {
    zmq_util::MonitorEvent e;
    while (zmq_util::next_monitor_event(monitor, e)) {
      if (e.event == 0) continue;
      if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        closed_handshakes = 0;
        continue;
      }
      const std::string why = handshake_failure(e.event, e.value);
      if (!give_up.empty()) return;
      if (why != handshake_error) spdlog::warn("worker: {}", why);
      handshake_error = why;
    }
  }

  // What a failed handshake (monitor event `event` with `value`) means;
  // sets give_up instead when trying again cannot mend it.
  std::string handshake_failure(std::uint16_t event, std::uint32_t value) {
    const bool keys = !options.curve_secret_key.empty();
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && value == 400) {
      // The coordinator's ZAP handler said no (400: not admitted, for
      // good; 300 and 500 would be temporary): given up at once.
      give_up = "the coordinator at " + options.connect + " refused this worker's CURVE key (" +
                curve::fingerprint(curve_public_key) + (options.keys_dir.empty() ? "" : ", from ") +
                options.keys_dir +
                "): it is not in the coordinator's authorized_workers; giving up (a refused key is "
                "refused again): add this worker's worker.public line to KEYS/authorized_workers "
                "on the coordinator's machine (or use a worker folder made there by `hpsearch keys "
                "init`/`keys add`), then start the worker again";
      return "";
    }
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      return "the coordinator refused this worker's CURVE key (ZAP status " +
             std::to_string(value) + "): it is not in the coordinator's authorized_workers";
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
        value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
      give_up = keys ? coordinator_without_keys() : coordinator_requires_keys(false);
      return "";
    }
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
      return "the handshake with " + options.connect + " failed (protocol error " +
             std::to_string(value) + "): the process there is not an hpsearch coordinator";
    // The peer closed the connection during the handshake.
    if (++closed_handshakes >= kClosedHandshakesToGiveUp) {
      give_up = keys ? pinned_key_mismatch() : coordinator_requires_keys(true);
      return "";
    }
    if (keys)
      return "the CURVE handshake failed: the process at " + options.connect +
             " closed the connection (it does not hold the secret key of the pinned "
             "coordinator public key, or it was stopped)";
    return "the handshake with " + options.connect +
           " failed: the connection was closed (a coordinator with CURVE keys answers only "
           "workers started with --keys)";
  }

  // Where the pinned coordinator key comes from, for messages.
  std::string pinned_key_source() const {
    if (options.keys_dir.empty()) return "worker.curve_server_key";
    return "--keys " + options.keys_dir + ": " +
           (std::filesystem::path(options.keys_dir) / curve::kCoordinatorPublicFile).string();
  }

  // Why a worker with keys gives up on a coordinator whose handshakes fail
  // for another key than the pinned one.
  std::string pinned_key_mismatch() const {
    return "the CURVE handshake failed " + std::to_string(kClosedHandshakesToGiveUp) +
           " times in a row: the coordinator at " + options.connect +
           " does not match the coordinator public key this worker pins (" +
           curve::fingerprint(options.curve_server_key) + ", " + pinned_key_source() +
           "): the process there holds another secret key, so this may be the wrong keys "
           "folder (a worker folder of other keys), or it is not our coordinator; giving up: "
           "use a worker folder made on the coordinator's machine (KEYS/worker-N, with its "
           "coordinator.public; copy it with scp -rp), or check --connect";
  }

  // Why a worker without keys gives up on a coordinator that requires them
  // (`closed`: it closed the handshakes, else it said it offers CURVE).
  std::string coordinator_requires_keys(bool closed) const {
    const std::string seen =
        closed ? "it closed the connection during the handshake " +
                     std::to_string(kClosedHandshakesToGiveUp) +
                     " times in a row (or it is not an hpsearch coordinator)"
               : "the handshake failed, it offers CURVE and this worker no security mechanism";
    return "the coordinator at " + options.connect +
           " requires CURVE keys, which this worker does not have (--insecure): " + seen +
           "; giving up (trying again fails again): start the worker with --keys DIR, a worker "
           "folder made on the coordinator's machine by `hpsearch keys init KEYS --workers N` "
           "(or `hpsearch keys add KEYS`), such as KEYS/worker-1, copied here (scp -rp)";
  }

  // Why a worker with keys gives up on a coordinator without CURVE.
  std::string coordinator_without_keys() const {
    return "the coordinator at " + options.connect +
           " does not use CURVE keys (the handshake failed: it offers another security "
           "mechanism, so it runs with --insecure or is not an hpsearch coordinator), and this "
           "worker serves only the coordinator whose public key it pins (" +
           pinned_key_source() +
           "); giving up: start the coordinator with --keys KEYS (the folder this worker's keys "
           "come from)";
  }

  // ================================================================ main thread

  void send(const proto::Message& m, std::uint64_t e) { send_now({proto::encode(m)}, e); }

  // Sends `frames` (encoded messages, in order) on session `session`'s
  // socket from this thread; dropped if that session is not open (it is
  // gone: the coordinator has already ended what they were about). A send
  // may take the socket's ZMQ_FD edge, which the link thread waits for:
  // when messages are waiting, it is told to read them (kLook).
  void send_now(std::initializer_list<std::string_view> frames, std::uint64_t session) {
    bool look = false;
    {
      std::lock_guard lock(socket_mutex);
      if (!open_session || open_session->session != session) return;
      zmq::socket_t& dealer = open_session->dealer;
      for (std::string_view frame : frames)
        zmq_util::no_eintr(
            [&] { return dealer.send(zmq::buffer(frame), zmq::send_flags::dontwait); });
      look = (dealer.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
    }
    if (look) to_link.post(Ev::kLook, session, "");
  }

  // Handles an event that is not the awaited reply. Returns true if the
  // running trial must end now (lost session, stop, fatal, Shutdown with
  // stop_trial).
  bool note(const Event& e) {
    switch (e.kind) {
      case Ev::kReady:
        epoch = e.epoch;
        return false;
      case Ev::kLost:
        if (e.epoch == epoch) epoch = 0;
        drop_held();  // the coordinator counts them lost
        return true;
      case Ev::kFatal:
        fatal = e.payload;
        return true;
      case Ev::kStop:
        stopped = true;
        return true;
      case Ev::kMessage: {
        // A Shutdown may also answer this worker's Hello, before any
        // Welcome opened a session (epoch 0): the study was done when the
        // worker joined. It ends the worker then too (ignored, the worker
        // stayed until its pool's grace period ran out).
        if (e.epoch != epoch && epoch != 0) return false;
        try {
          auto m = proto::decode(e.payload);
          if (auto* s = std::get_if<proto::Shutdown>(&m)) {
            shutdown = true;
            drop_held();  // the coordinator ends a study when no trial runs
            spdlog::debug("worker: shutdown: {}", s->reason);
            return s->stop_trial;
          }
          if (auto* a = std::get_if<proto::Assignment>(&m); a && e.epoch == epoch) {
            // The answer to a RequestTrial sent while a trial runs
            // (prefetch): it waits here for that trial to end.
            held.emplace_back(epoch, std::move(*a));
            asked = false;
          }
        } catch (const std::exception&) {
        }
        return false;
      }
      default:
        return false;
    }
  }

  // Waits for the reply of type T to the running trial's request.
  template <class T>
  T await(std::int64_t trial) {
    while (true) {
      Event e = to_main.receive();
      if (e.kind == Ev::kMessage && e.epoch == epoch && epoch == trial_epoch) {
        proto::Message m;
        try {
          m = proto::decode(e.payload);
        } catch (const std::exception&) {
          continue;
        }
        if (auto* r = std::get_if<T>(&m); r && r->number == trial) return *r;
      }
      if (note(e)) throw Interrupted();
    }
  }

  // ---- TrialBackend (the running trial's calls)

  Json suggest(Trial& trial, const std::string& name, const Distribution& d) override {
    proto::Suggest s;
    s.number = trial.number();
    s.name = name;
    s.distribution_json = d.to_json().dump();
    send(s, trial_epoch);
    auto reply = await<proto::SuggestReply>(trial.number());
    if (!reply.ok) throw Error("suggest '" + name + "': " + reply.error);
    return reply.value.to_json();
  }

  bool report(Trial& trial, std::int64_t step, double value) override {
    // A multi-process trial's other ranks: rank 0's reports are the trial's.
    if (current_rank != 0) return true;
    const bool snapshot = trial.snapshot_step() == step;
    // A remote worker's snapshot is recorded by the coordinator once it
    // arrived whole (ArtifactPutReply.done), not by the report.
    send(proto::Report{trial.number(), step, value, snapshot && !remote_folder}, trial_epoch);
    bool stored = false;
    for (;;) {
      auto d = await<proto::Decision>(trial.number());
      if (d.step != step) continue;
      last_prune = d.prune;
      stored = d.stored;
      break;
    }
    if (snapshot && remote_folder) {
      std::string why = upload_snapshot(trial.number(), step);
      if (!why.empty())
        spdlog::warn(
            "worker: trial {}: the snapshot of step {} was not kept by the coordinator: {}",
            trial.number(), step, why);
    }
    return stored;
  }

  // Where this worker reaches the coordinator's artifact endpoint (""
  // when it has none, or it did not answer in this session).
  std::string artifact_target() {
    std::string announced;
    {
      std::lock_guard lock(socket_mutex);
      announced = artifact_announced;
    }
    if (artifact_epoch != trial_epoch) {
      artifact_unreachable = false;  // a new session: try it again
      artifact_socket.close();
      artifact_epoch = 0;
    }
    if (artifact_unreachable) return "";
    return zmq_util::worker_artifact_endpoint(options.connect, announced);
  }

  // The DEALER socket to the artifact endpoint for the running trial's
  // session (made and connected on first use, with this worker's CURVE
  // keys); null when there is none.
  zmq::socket_t* artifact_channel() {
    const std::string target = artifact_target();
    if (target.empty()) return nullptr;
    if (artifact_epoch == trial_epoch && artifact_socket) return &artifact_socket;
    try {
      zmq::socket_t s(context, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(proto::kMaxFrameBytes));
      s.set(zmq::sockopt::ipv6, zmq_util::ipv6_endpoint(target));
      if (!options.curve_secret_key.empty()) {
        s.set(zmq::sockopt::curve_serverkey, options.curve_server_key);
        s.set(zmq::sockopt::curve_publickey, curve_public_key);
        s.set(zmq::sockopt::curve_secretkey, options.curve_secret_key);
      }
      s.connect(target);
      artifact_socket = std::move(s);
      artifact_epoch = trial_epoch;
      spdlog::debug("worker: artifact endpoint {}", target);
      return &artifact_socket;
    } catch (const zmq::error_t& e) {
      spdlog::warn("worker: cannot connect to the coordinator's artifact endpoint {}: {}", target,
                   e.what());
      artifact_unreachable = true;
      return nullptr;
    }
  }

  // Sends `m` on the artifact endpoint's socket (without waiting: a piece
  // that cannot go now is answered by nobody, which await_piece notices).
  void send_piece(zmq::socket_t& s, const proto::Message& m) {
    const std::string frame = proto::encode(m);
    try {
      (void)zmq_util::no_eintr(
          [&] { return s.send(zmq::buffer(frame), zmq::send_flags::dontwait); });
    } catch (const zmq::error_t& e) {
      spdlog::debug("worker: cannot send on the artifact endpoint: {}", e.what());
    }
  }

  // Waits for the reply of type T about trial `trial`, from the artifact
  // endpoint's socket `s` or from the main socket (the last reply of an
  // upload comes there). nullopt after kArtifactSilence without either
  // (the endpoint is then marked unreachable for this session). Throws
  // Interrupted as await().
  template <class T>
  std::optional<T> await_piece(std::int64_t trial, zmq::socket_t& s) {
    auto deadline = Steady::now() + kArtifactSilence;
    for (;;) {
      while (auto e = to_main.try_receive()) {
        if (e->kind == Ev::kMessage && e->epoch == epoch && epoch == trial_epoch) {
          try {
            auto m = proto::decode(e->payload);
            if (auto* r = std::get_if<T>(&m); r && r->number == trial) return *r;
          } catch (const std::exception&) {
          }
        }
        if (note(*e)) throw Interrupted();
      }
      zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
      int n = 0;
      try {
        n = zmq::poll(&item, 1, std::chrono::milliseconds(10));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
      if (n > 0) {
        zmq::message_t msg;
        if (zmq_util::no_eintr([&] { return s.recv(msg, zmq::recv_flags::dontwait); })) {
          deadline = Steady::now() + kArtifactSilence;
          try {
            auto m =
                proto::decode(std::string_view(static_cast<const char*>(msg.data()), msg.size()));
            if (auto* r = std::get_if<T>(&m); r && r->number == trial) return *r;
          } catch (const std::exception& e) {
            spdlog::warn("worker: dropped a bad frame from the artifact endpoint: {}", e.what());
          }
        }
      }
      if (Steady::now() >= deadline) {
        artifact_unreachable = true;
        return std::nullopt;
      }
    }
  }

  // Why a transfer ended when the artifact endpoint stayed silent.
  std::string artifact_silence() {
    std::string announced;
    {
      std::lock_guard lock(socket_mutex);
      announced = artifact_announced;
    }
    return "no answer from the coordinator's artifact endpoint (" +
           zmq_util::worker_artifact_endpoint(options.connect, announced) + ") for " +
           std::to_string(kArtifactSilence.count()) +
           " s: is that port (the coordinator's port + 1) reachable from this machine? The next "
           "transfers of this session use the main connection";
  }

  // Uploads snapshot-<step> of remote_folder (protocol ArtifactPut), at most
  // kUploadWindow pieces ahead of the replies. Returns "" once the
  // coordinator verified and recorded it, else why not. Throws Interrupted
  // when the session ends meanwhile.
  std::string upload_snapshot(std::int64_t trial, std::int64_t step) {
    std::unique_ptr<checkpoints::SnapshotReader> reader;
    try {
      reader = std::make_unique<checkpoints::SnapshotReader>(remote_folder->path(), step);
    } catch (const std::exception& e) {
      return e.what();
    }
    return upload_stream(trial, step, *reader, proto::ArtifactKind::kSnapshot);
  }

  // Sends `p` on the artifact endpoint's socket `channel`, or on the main
  // socket when it is null.
  void send_on(zmq::socket_t* channel, const proto::Message& p) {
    if (channel)
      send_piece(*channel, p);
    else
      send(p, trial_epoch);
  }

  // The next reply of type T about trial `trial`: from `channel` (and the
  // main socket) when there is one, else from the main socket; nullopt
  // when the artifact endpoint stayed silent (await_piece).
  template <class T>
  std::optional<T> next_reply(std::int64_t trial, zmq::socket_t* channel) {
    if (channel) return await_piece<T>(trial, *channel);
    return await<T>(trial);
  }

  // Uploads the stream of `reader` (a snapshot of `step`, or the trial's
  // user artifacts with step 0) as ArtifactPut pieces of `kind`; returns "
  // once the coordinator verified and recorded it, else why not. Throws
  // Interrupted when the session ends meanwhile.
  std::string upload_stream(std::int64_t trial, std::int64_t step,
                            const checkpoints::SnapshotReader& stream, proto::ArtifactKind kind) {
    const checkpoints::SnapshotReader* reader = &stream;
    const std::uint64_t total = reader->total();
    std::uint64_t sent = 0;
    int in_flight = 0;
    // With an artifact endpoint, the first piece goes alone on the main
    // socket; its reply's token sends the next ones to that endpoint.
    const bool may_use_channel = !artifact_target().empty();
    bool first_answered = false;
    std::string token;
    zmq::socket_t* channel = nullptr;
    for (;;) {
      const int window = may_use_channel && !first_answered ? 1 : kUploadWindow;
      while (in_flight < window && sent < total) {
        proto::ArtifactPut p;
        p.number = trial;
        p.step = step;
        p.offset = sent;
        p.total = total;
        p.manifest_bytes = reader->manifest_bytes();
        p.kind = kind;
        try {
          p.data = reader->read(sent, proto::kMaxArtifactChunkBytes);
        } catch (const std::exception& e) {
          return e.what();
        }
        if (p.data.empty()) return "the snapshot's files are shorter than its manifest says";
        p.checksum = util::xxh3_64(p.data);
        p.token = token;
        sent += p.data.size();
        send_on(channel, p);
        ++in_flight;
      }
      auto got = next_reply<proto::ArtifactPutReply>(trial, channel);
      if (!got) return artifact_silence();
      const proto::ArtifactPutReply& r = *got;
      if (r.step != step || r.kind != kind) continue;  // a late reply to an earlier upload
      --in_flight;
      if (!r.ok) return r.error;
      if (r.done) return "";
      if (!first_answered) {
        first_answered = true;
        if (!r.token.empty() && may_use_channel) {
          channel = artifact_channel();
          if (channel) token = r.token;
        }
      }
      if (in_flight == 0 && sent >= total)
        return "the coordinator acknowledged every piece but did not record them";
    }
  }

  // Writes `data` at `offset` of the file `fd` (`path`, for the message);
  // returns "" or why not.
  static std::string write_piece(int fd, const std::string& data, std::uint64_t offset,
                                 const std::string& path) {
    if (int err = util::write_all(fd, data.data(), data.size(), offset); err != 0)
      return path + ": " + std::strerror(err);
    return "";
  }

  // Why the downloaded piece `r` cannot be written at `offset` ("" when it
  // can).
  static std::string piece_refusal(const proto::ArtifactGetReply& r, std::uint64_t offset) {
    if (!r.ok) return "the coordinator cannot send it: " + printable(r.error);
    if (r.offset != offset)
      return "the piece at offset " + std::to_string(r.offset) + " came while " +
             std::to_string(offset) + " was expected";
    if (util::xxh3_64(r.data) != r.checksum)
      return "the piece at offset " + std::to_string(offset) + " arrived damaged (checksum)";
    return "";
  }

  // Downloads the snapshot of `step` of the assignment's trial (protocol
  // ArtifactGet) and installs it in `folder` as snapshot-<step> with its
  // manifest (checked: search/checkpoints.h install_snapshot). Returns ""
  // when installed, else why not. Throws Interrupted when the session ends.
  std::string download_snapshot(const proto::Assignment& a, std::int64_t step,
                                const checkpoints::LineageFolder& folder,
                                std::uint64_t max_snapshot_bytes) {
    const std::string path = checkpoints::stream_path(folder.path(), "download", step);
    ::unlink(path.c_str());
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                    kPrivateFileMode);
    if (fd < 0) return path + ": " + std::strerror(errno);
    std::string error;
    std::uint64_t offset = 0, total = 0, manifest_bytes = 0;
    // The first piece tells the length; then up to kUploadWindow requests
    // are in flight (the coordinator answers them in order), as uploads.
    std::uint64_t requested = 0;  // the offset the next request asks for
    int in_flight = 0;
    // The first reply's token (with an artifact endpoint): the next pieces
    // are asked for there.
    std::string token;
    zmq::socket_t* channel = nullptr;
    try {
      for (bool first = true;; first = false) {
        while (in_flight == 0 || (!first && in_flight < kUploadWindow && requested < total)) {
          send_on(channel, proto::ArtifactGet{a.number, step, requested, token});
          ++in_flight;
          requested += proto::kMaxArtifactChunkBytes;
          if (first) break;
        }
        std::optional<proto::ArtifactGetReply> got;
        do {
          got = next_reply<proto::ArtifactGetReply>(a.number, channel);
        } while (got && got->step != step);
        if (!got) {
          error = artifact_silence();
          break;
        }
        const proto::ArtifactGetReply& r = *got;
        if (first && r.ok && !r.token.empty()) {
          channel = artifact_channel();
          if (channel) token = r.token;
        }
        --in_flight;
        error = piece_refusal(r, offset);
        if (!error.empty()) break;
        if (first) {
          total = r.total;
          manifest_bytes = r.manifest_bytes;
          requested = r.data.size();  // the coordinator's piece size
          if (total - manifest_bytes > max_snapshot_bytes) {
            error = "it holds " + std::to_string(total - manifest_bytes) + " bytes, over " +
                    std::to_string(max_snapshot_bytes) + " (artifacts.max_snapshot_bytes)";
            break;
          }
        } else if (r.total != total || r.manifest_bytes != manifest_bytes) {
          error = "its length changed during the download";
          break;
        }
        error = write_piece(fd, r.data, offset, path);
        offset += r.data.size();
        if (!error.empty() || offset >= total) break;
        if (r.data.empty()) {
          error = "the coordinator sent an empty piece before the end";
          break;
        }
      }
    } catch (...) {
      ::close(fd);
      ::unlink(path.c_str());
      throw;
    }
    ::close(fd);
    if (error.empty()) {
      try {
        checkpoints::install_snapshot(folder.path(), step, path, manifest_bytes,
                                      max_snapshot_bytes);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    ::unlink(path.c_str());
    return error;
  }

  bool should_prune(Trial&) override { return last_prune; }

  void set_user_attr(Trial&, const std::string& key, const Json& value) override {
    user_attrs[key] = value;
  }

  // ---- running trials

  const Built* objective_for(const proto::Assignment& a, std::string& error) {
    auto it = objectives.find(a.config_id);
    if (it != objectives.end()) return &it->second;
    if (auto r = refused.find(a.config_id); r != refused.end()) {
      error = r->second;
      return nullptr;
    }
    if (a.config_json.empty()) {
      error = "the worker has no objective configuration " + std::to_string(a.config_id);
      return nullptr;
    }
    try {
      Json config = parse_json_text(a.config_json, "assignment config");
      Built b;
      b.space = SearchSpace::from_json(config.at("space"));
      b.study = config.value("study", std::string());
      if (config.contains("artifacts")) {
        const auto artifacts = checkpoints::ArtifactOptions::from_json(config["artifacts"]);
        b.max_snapshot_bytes = artifacts.max_snapshot_bytes;
        b.max_artifact_bytes = artifacts.max_artifact_bytes;
        b.checkpoint_path = artifacts.path;
      }
      if (!options.objective) {
        std::string refusal = command_refusal(config.at("objective"), options);
        if (!refusal.empty()) {
          error = refused[a.config_id] = refusal;
          return nullptr;
        }
      }
      if (options.objective) {
        b.objective = options.objective;
      } else {
        ObjectiveContext ctx;
        ctx.threads = options.threads;
        ctx.device = options.device;
        ctx.study_name = b.study;
        if (config.contains("direction") && config["direction"].is_string())
          ctx.direction = parse_direction(config["direction"].get<std::string>(), "direction");
        ctx.log_dir = options.log_dir.empty() ? study_log_dir(b.study, ".") : options.log_dir;
        b.objective = make_objective(config.at("objective"), b.space, ctx);
      }
      return &objectives.emplace(a.config_id, std::move(b)).first->second;
    } catch (const std::exception& e) {
      error = std::string("cannot build the objective: ") + e.what();
      return nullptr;
    }
  }

  // The lineage's checkpoint folder under <log_dir>/checkpoints
  // (search/checkpoints.h), restored to the assignment's resume step. A
  // folder that cannot be used (refused, a disk error) or a snapshot that
  // cannot: the trial runs from scratch; the warning is logged and kept as
  // the trial's user attr checkpoint_warning.
  // The checkpoint root a trial of `built` uses here: the study's
  // artifacts.path when this worker reaches it (the folder holds the
  // coordinator's token: a coordinator cannot make a worker write where it
  // has not set up the folder itself), else <log_dir>/checkpoints. `shared`:
  // whether it is the artifacts.path.
  std::string checkpoint_root_of(const proto::Assignment& a, const Built& built, bool& shared) {
    const std::string log_dir =
        options.log_dir.empty() ? study_log_dir(built.study, ".") : options.log_dir;
    shared = !built.checkpoint_path.empty() && !a.store_id.empty() &&
             checkpoints::read_store_id(built.checkpoint_path) == a.store_id;
    return shared ? built.checkpoint_path
                  : (std::filesystem::path(log_dir) / "checkpoints").string();
  }

  // The trial's user artifact folder (search/checkpoints.h ArtifactFolder):
  // in the coordinator's artifact store when this worker shares it (the
  // same .store-id token in the checkpoint root beside it), else this
  // worker's own, uploaded when the trial ends. None when the coordinator
  // gives trials no lineage (artifacts.checkpoints false). A folder that
  // cannot be made: the trial runs without one (user attr artifact_warning).
  void attach_artifacts(Trial& trial, const proto::Assignment& a, const Built& built) {
    remote_artifacts = false;
    if (a.lineage < 0) return;
    try {
      bool shared = false;
      const std::string root = checkpoint_root_of(a, built, shared);
      const std::string artifact_root = checkpoints::artifact_root_for(root, shared);
      if (!a.store_id.empty() && checkpoints::read_store_id(root) != a.store_id)
        remote_artifacts = true;
      trial.set_artifact_folder(std::make_shared<checkpoints::ArtifactFolder>(
          artifact_root, a.number, built.max_artifact_bytes));
    } catch (const std::exception& e) {
      spdlog::warn("worker: trial {} runs without an artifact folder: {}", a.number, e.what());
      user_attrs[checkpoints::kAttrArtifactWarning] = e.what();
    }
  }

  // Once the objective ended: the trial's user artifacts listed in their
  // manifest and, from a worker that does not share the coordinator's
  // store, uploaded (then this worker's copy removed). Returns whether
  // they are complete in place in the coordinator's store
  // (Complete.artifacts). Failures become user attr artifact_warning: the
  // trial keeps its value.
  bool finish_artifacts(Trial& trial, lifecycle::OutcomeKind outcome) {
    const auto& folder = trial.artifact_folder();
    if (!folder || outcome == lifecycle::OutcomeKind::kInterrupted) return false;
    checkpoints::ArtifactSummary kept;
    try {
      kept = folder->finish();
    } catch (const std::exception& e) {
      spdlog::warn("worker: trial {}: its artifacts are not kept: {}", trial.number(), e.what());
      user_attrs[checkpoints::kAttrArtifactWarning] = e.what();
      return false;
    }
    if (kept.files == 0) return false;
    if (!remote_artifacts) return true;
    std::string why;
    try {
      const auto reader =
          checkpoints::SnapshotReader::user_artifacts(folder->root(), trial.number());
      spdlog::info(
          "worker: trial {}: uploading its artifacts ({} files, {} bytes) to the "
          "coordinator",
          trial.number(), kept.files, kept.bytes);
      why = upload_stream(trial.number(), 0, reader, proto::ArtifactKind::kUser);
    } catch (const Interrupted&) {
      why = "the session ended during the upload";
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) {
      spdlog::warn("worker: trial {}: its artifacts were not kept by the coordinator: {}",
                   trial.number(), why);
      user_attrs[checkpoints::kAttrArtifactWarning] = "not kept by the coordinator: " + why;
    }
    // This worker's copy: the coordinator keeps them now (or refused them).
    std::error_code ec;
    std::filesystem::remove_all(folder->path(), ec);
    std::filesystem::remove(folder->path() + ".manifest", ec);
    return false;
  }

  void attach_checkpoint(Trial& trial, const proto::Assignment& a, const Built& built) {
    remote_folder.reset();
    if (a.lineage < 0) return;
    // A retry tells the coordinator whether its folder holds the snapshot
    // (before its first Report): only then does its curve continue.
    std::int64_t restored = -1;  // the step the folder holds (-1: none)
    std::string warning;
    std::optional<std::int64_t> resume;
    if (a.resume_step >= 0) resume = a.resume_step;
    try {
      // The study's artifacts.path, when this worker reaches it; else this
      // worker's own folder, and snapshots travel through the coordinator.
      bool shared = false;
      const std::string root = checkpoint_root_of(a, built, shared);
      // The coordinator's checkpoint root is this worker's own (the same
      // .store-id token): the folder is used in place. Otherwise snapshots
      // travel through the coordinator, and what this worker's root holds
      // for the lineage number is never used: it may be from another study
      // or store, or an older run of this one (a worker killed mid-trial
      // leaves its copy). It is removed; a retry downloads its snapshot.
      const bool remote = !a.store_id.empty() && checkpoints::read_store_id(root) != a.store_id;
      if (remote) checkpoints::remove_lineage(root, a.lineage);
      auto folder =
          std::make_shared<checkpoints::LineageFolder>(root, a.lineage, built.max_snapshot_bytes);
      std::string download_error;
      if (remote && resume) {
        spdlog::info(
            "worker: trial {}: downloading the snapshot of step {} (lineage {}) from "
            "the coordinator (its checkpoint root {} is not this worker's {})",
            a.number, *resume, a.lineage, printable(a.store_root), root);
        try {
          download_error = download_snapshot(a, *resume, *folder, built.max_snapshot_bytes);
        } catch (const Interrupted&) {
          interrupt = true;  // the session ended: the trial stops at once
          download_error = "the session ended during the download";
        }
      }
      checkpoints::Prepared p = folder->prepare(resume);
      if (!p.warning.empty()) {
        if (!download_error.empty())
          p.warning = "download from the coordinator failed: " + download_error + "; " + p.warning;
        spdlog::warn("worker: trial {} starts from scratch, not from step {}: {}", a.number,
                     a.resume_step, p.warning);
        user_attrs["checkpoint_warning"] = p.warning;
      }
      if (remote) remote_folder = folder;
      restored = p.resume_step.value_or(-1);
      warning = p.warning;
      trial.set_checkpoint(std::move(folder), p.resume_step);
    } catch (const std::exception& e) {
      spdlog::warn("worker: trial {} runs without a checkpoint folder: {}", a.number, e.what());
      user_attrs["checkpoint_warning"] = e.what();
      restored = -1;
      warning = std::string("no checkpoint folder: ") + e.what();
    }
    if (a.resume_step >= 0) {
      proto::Restored r;
      r.number = a.number;
      r.step = a.resume_step;
      r.restored = restored == a.resume_step;
      if (!r.restored) r.warning = warning.substr(0, proto::kMaxRestoreWarningBytes);
      send(r, trial_epoch);
    }
  }

  // A rank of a multi-process trial is starting: rank 0 picks the
  // rendezvous port and names it in its RankReady (the coordinator then
  // assigns the other ranks); the others say they are ready. Returns the
  // trial's Ranks (the torchrun environment of a command's program).
  Trial::Ranks rendezvous(const proto::Assignment& a) {
    Trial::Ranks r;
    r.rank = a.rank;
    r.world_size = a.world_size;
    r.local_rank = a.local_rank;
    r.local_world_size = a.local_world_size;
    r.group_rank = a.group_rank;
    proto::RankReady ready;
    ready.number = a.number;
    ready.rank = a.rank;
    if (a.rank == 0) {
      r.master_addr = "127.0.0.1";
      r.master_port = pick_free_port();
      ready.addr = hostname.substr(0, proto::kMaxHostBytes);
      ready.port = static_cast<std::uint16_t>(r.master_port);
    } else {
      r.master_addr = a.master_addr;
      r.master_port = a.master_port;
    }
    send(ready, epoch);
    return r;
  }

  void run_trial(const proto::Assignment& a) {
    number = a.number;
    trial_epoch = epoch;
    last_prune = false;
    user_attrs = Json::object();
    interrupt = false;
    if (epoch == 0 || stopped) interrupt = true;
    running_number = a.number;
    current_rank = a.rank;
    {
      std::lock_guard lock(stop_mutex);
      if (stop_requests.erase(a.number) > 0) interrupt = true;  // ended before it started
    }
    struct EndRun {
      Impl& impl;
      ~EndRun() {
        impl.running_number = -1;
        impl.current_rank = 0;
      }
    } end_run{*this};

    bool artifacts_in_place = false;
    auto fail = [&](proto::Fail::Reason reason, const std::string& message) {
      proto::Fail f;
      f.number = a.number;
      f.reason = reason;
      f.message = message;
      f.artifacts = artifacts_in_place;
      if (!user_attrs.empty()) f.user_attrs_json = dump_json_nonfinite(user_attrs);
      result = proto::encode(f);
    };

    std::string error;
    const Built* built = objective_for(a, error);
    if (!built) {
      spdlog::warn("worker: trial {}: {}", a.number, error);
      fail(proto::Fail::Reason::kException, error);
      ++ended;
      return;
    }
    Params params = proto::from_wire(a.params);
    std::map<std::string, Distribution> dists;
    for (const auto& [name, value] : params)
      if (const ParamSpec* spec = built->space.find(name))
        dists.insert_or_assign(name, spec->distribution);
    Trial trial(this, a.trial_id, a.number, params, dists, proto::from_wire(a.fixed), &built->space,
                &interrupt);
    if (a.world_size > 1 && !interrupt) {  // a stopped rank does not rendezvous
      try {
        trial.set_ranks(rendezvous(a));
      } catch (const Error& e) {
        spdlog::warn("worker: trial {}: {}", a.number, e.what());
        fail(proto::Fail::Reason::kException, e.what());
        ++ended;
        return;
      }
    }
    attach_checkpoint(trial, a, *built);
    attach_artifacts(trial, a, *built);
    // The coordinator applies the tell rules (lifecycle::resolve_end) to
    // what is sent here.
    const lifecycle::Outcome outcome = lifecycle::run_objective(built->objective, trial);
    trial.drop_unused_checkpoint();
    // The user artifacts are complete (uploaded, or in place) before the
    // trial's end is sent: the coordinator records them, then ends it.
    artifacts_in_place = finish_artifacts(trial, outcome.kind);
    // A remote worker's copy of the lineage: the coordinator keeps what
    // retention keeps, and a retry downloads it again; the copy goes.
    if (remote_folder) {
      std::error_code ec;
      std::filesystem::remove_all(remote_folder->path(), ec);
    }
    switch (outcome.kind) {
      case lifecycle::OutcomeKind::kValue:
      case lifecycle::OutcomeKind::kPruned: {
        proto::Complete c;
        c.number = a.number;
        c.pruned = outcome.kind == lifecycle::OutcomeKind::kPruned;
        c.value = c.pruned ? trial.last_value() : std::optional<double>(outcome.value);
        c.artifacts = artifacts_in_place;
        if (!user_attrs.empty()) c.user_attrs_json = dump_json_nonfinite(user_attrs);
        result = proto::encode(c);
        break;
      }
      case lifecycle::OutcomeKind::kInterrupted:
        if (options.stop && options.stop->load()) stopped = true;
        if (stopped) fail(proto::Fail::Reason::kInterrupted, "stopped by a signal");
        // Otherwise the session is gone or the coordinator stopped the trial:
        // it has already recorded the trial's end.
        break;
      case lifecycle::OutcomeKind::kException:
        spdlog::warn("worker: trial {} failed: {}", a.number, outcome.message);
        fail(proto::Fail::Reason::kException, outcome.message);
        break;
    }
    ++ended;
    number = -1;
  }

  // Whether the stop flag (a signal) is set: read here, between trials,
  // and not only when the link thread's kStop is handled, so that a
  // stopped worker starts no held trial and asks for none.
  bool stop_seen() {
    if (!stopped && options.stop && options.stop->load()) stopped = true;
    return stopped;
  }

  // Whether the worker should ask for another trial now: it may (its
  // session is open, nothing ends it) and it holds fewer than 1 + prefetch
  // trials (`running`: whether one runs) with no request unanswered.
  bool should_ask(bool running) {
    if (asked || epoch == 0 || shutdown || stop_seen() || !fatal.empty()) return false;
    return held.size() + (running ? 1u : 0u) < 1u + static_cast<std::size_t>(options.prefetch);
  }

  void ask() {
    send(proto::RequestTrial{}, epoch);
    asked = true;
  }

  // Forgets the held trials and the unanswered request (the session that
  // gave them is over).
  void drop_held() {
    held.clear();
    asked = false;
  }

  // Runs the held trials in order; after each, posts its result with a
  // RequestTrial when should_ask (one wake-up of the link thread).
  void run_held() {
    while (!held.empty()) {
      if (!fatal.empty() || stop_seen() || shutdown) return;
      auto [trial_session, a] = std::move(held.front());
      held.pop_front();
      if (trial_session != epoch) continue;  // its session is gone: the coordinator ended it
      if (should_ask(true)) ask();           // prefetch: the next is asked for as this starts
      run_trial(a);
      post_result(epoch == trial_epoch && should_ask(false));
    }
  }

  // Sends the ended trial's result and, if `ask`, a RequestTrial after it.
  void post_result(bool ask) {
    std::optional<std::string> r;
    r.swap(result);
    if (ask) asked = true;
    if (r && ask) {
      send_now({*r, proto::encode(proto::RequestTrial{})}, trial_epoch);
      return;
    }
    if (r) send_now({*r}, trial_epoch);
    if (ask) send(proto::RequestTrial{}, epoch);
  }

  // Tells the coordinator this worker is leaving (a Disconnect from the
  // worker), so that a trial assigned after its last request, still in
  // flight, is queued again as stopped instead of waiting for the lease to
  // expire and counting as lost.
  void leave(const std::string& why) {
    if (epoch == 0) return;
    proto::Disconnect d;
    d.code = proto::Disconnect::Code::kExpired;
    d.reason = why;
    send(d, epoch);
  }

  int main_loop() {
    while (true) {
      if (!fatal.empty()) {
        spdlog::error("worker: {}", fatal);
        return 1;
      }
      if (stopped) {
        leave("stopped by a signal");
        return kStopped;
      }
      if (shutdown) return 0;
      Event e = to_main.receive();
      if (e.kind == Ev::kReady) {
        epoch = e.epoch;
        drop_held();
        ask();
        continue;
      }
      note(e);  // an Assignment joins `held`
      run_held();
    }
  }

  int run() {
    link = std::thread([this] { link_main(); });
    int rc = 1;
    try {
      rc = main_loop();
    } catch (const std::exception& e) {
      spdlog::error("worker: {}", e.what());
      rc = 1;
    }
    to_link.post(Ev::kQuit, 0, "");
    link.join();
    return rc;
  }
};

Worker::Worker(WorkerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Worker::~Worker() = default;
int Worker::run() { return impl_->run(); }
int Worker::run(Objective objective) {
  impl_->options.objective = std::move(objective);
  return impl_->run();
}

std::string study_log_dir(const std::string& study_name, const std::string& parent) {
  std::string name;
  for (char c : study_name) {
    bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-';
    name += keep ? c : '_';
  }
  if (name.find_first_not_of('.') == std::string::npos) name = "study";
  return (std::filesystem::path(parent.empty() ? "." : parent) / (name + ".logs")).string();
}
std::int64_t Worker::trials_run() const { return impl_->ended.load(); }

}  // namespace hps
