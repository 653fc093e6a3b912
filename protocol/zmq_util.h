// Small helpers for ZeroMQ calls shared by the coordinator and the workers.
// Internal: includes zmq.hpp, so only .cpp files include it.
#pragma once

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <zmq.hpp>

#include "search/errors.h"

namespace hps::zmq_util {

// Calls f() again while it fails with EINTR (a signal arrived during a
// blocking ZeroMQ call: Ctrl-C handlers must not turn into errors).
// Other zmq::error_t exceptions propagate.
template <class F>
auto no_eintr(F&& f) -> decltype(f()) {
  while (true) {
    try {
      return f();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

// The host of a "tcp://HOST:PORT" endpoint ("" for another scheme or no
// ':'); an IPv6 address keeps its brackets ("[::1]").
inline std::string tcp_host(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) != 0) return "";
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) return "";
  return endpoint.substr(6, colon - 6);
}

// The artifact endpoint (coordinator/artifact_server.h) of a coordinator
// that binds `endpoint`: for "tcp://HOST:PORT" the next port,
// "tcp://HOST:PORT+1" ("tcp://HOST:*" when PORT is * or 0: any free port,
// told to workers in the Welcome); for "ipc://PATH" "ipc://PATH.artifacts"
// ("ipc://*" for "ipc://*"); "" for another scheme.
inline std::string artifact_endpoint_for(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0)
    return endpoint.rfind("ipc://*", 0) == 0 ? "ipc://*" : endpoint + ".artifacts";
  if (endpoint.rfind("tcp://", 0) != 0) return "";
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) return "";
  const std::string port = endpoint.substr(colon + 1);
  const std::string head = endpoint.substr(0, colon + 1);
  if (port == "*" || port == "0" || port.empty()) return head + "*";
  try {
    const long p = std::stol(port);
    if (p < 1 || p >= 65535) return "";
    return head + std::to_string(p + 1);
  } catch (const std::exception&) {
    return "";
  }
}

// Where a worker connected to `connect` reaches the artifact endpoint a
// coordinator announced (Welcome.artifact_endpoint, as bound): for tcp, the
// host the worker connected to with the announced port; otherwise the
// announced endpoint. "" when there is none or it cannot be combined.
inline std::string worker_artifact_endpoint(const std::string& connect,
                                            const std::string& announced) {
  if (announced.rfind("tcp://", 0) != 0) return announced;
  if (connect.rfind("tcp://", 0) != 0) return "";
  const auto c = connect.rfind(':');
  const auto a = announced.rfind(':');
  if (c == std::string::npos || c < 6 || a == std::string::npos || a < 6) return "";
  return connect.substr(0, c) + announced.substr(a);
}

// Whether the endpoint names an IPv6 address ("tcp://[::1]:5555"), which
// a socket binds or connects to only with ZMQ_IPV6 set.
inline bool ipv6_endpoint(const std::string& endpoint) {
  const std::string host = tcp_host(endpoint);
  return !host.empty() && host[0] == '[';
}

// Checks a ZeroMQ endpoint before it is bound (`bind`) or connected:
// "tcp://HOST:PORT" with PORT in [1, 65535] (for bind: [0, 65535] or "*",
// where 0 and * take any free port), "ipc://PATH" or "inproc://NAME". Throws
// ConfigError(field, ...) naming the rule, so that a typo is not silently
// accepted (ZeroMQ takes port 99999 modulo 65536). A bind to a host name
// ("localhost") is refused: ZeroMQ binds addresses and interface names and
// would say only "No such device".
inline void check_endpoint(const std::string& endpoint, const std::string& field, bool bind) {
  const std::string example = bind ? "tcp://0.0.0.0:5555" : "tcp://host:5555";
  auto fail = [&](const std::string& rule) {
    throw ConfigError(field, rule + ", got '" + endpoint + "' (e.g. " + example + ")");
  };
  auto starts = [&](const std::string& scheme) { return endpoint.rfind(scheme, 0) == 0; };
  if (starts("ipc://") || starts("inproc://")) {
    if (endpoint.back() == '/') fail("ipc:// needs a path, inproc:// a name");
    return;
  }
  if (!starts("tcp://")) fail("must be tcp://HOST:PORT, ipc://PATH or inproc://NAME");
  const std::string r = endpoint.substr(6);
  const auto colon = r.rfind(':');
  if (colon == std::string::npos || colon == 0) fail("tcp:// needs HOST:PORT");
  if (bind && r.substr(0, colon) == "localhost")
    fail(
        "HOST must be an IP address or a network interface name, which ZeroMQ binds; it does "
        "not look up host names such as localhost: use tcp://127.0.0.1:PORT (or "
        "tcp://[::1]:PORT) for this machine only");
  const std::string port = r.substr(colon + 1);
  if (bind && port == "*") return;
  const std::string range = bind ? "the port must be a number in [0, 65535] or * (0 and *: any "
                                   "free port)"
                                 : "the port must be a number in [1, 65535]";
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    fail(range);
  const long n = std::stol(port);
  if (n > 65535 || (n == 0 && !bind)) fail(range);
}

// Removes the file at `path` if it is still the file of device `dev` and
// inode `ino` (the socket this process bound there), not one put there
// since; returns whether it did. Async-signal-safe (lstat, unlink): a
// signal handler may call it.
inline bool unlink_if_same_file(const char* path, dev_t dev, ino_t ino) {
  struct stat st {};
  if (::lstat(path, &st) != 0 || st.st_dev != dev || st.st_ino != ino) return false;
  return ::unlink(path) == 0;
}

// The socket file an ipc:// bind made (libzmq removes only those of
// ipc://* endpoints): remembered by its identity, so that remove() takes
// only that file, not one put at the path since (another coordinator's).
struct IpcSocketFile {
  std::string path;  // absolute; empty: nothing to remove
  dev_t dev = 0;
  ino_t ino = 0;

  // The file of `bound` (a last_endpoint) when it is an ipc:// socket file
  // (not ipc://*); an empty one otherwise.
  static IpcSocketFile of(const std::string& bound) {
    IpcSocketFile f;
    if (bound.rfind("ipc://", 0) != 0 || bound.rfind("ipc://*", 0) == 0) return f;
    std::error_code ec;
    const std::string path = std::filesystem::absolute(bound.substr(6), ec).string();
    struct stat st {};
    if (!ec && ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      f.path = path;
      f.dev = st.st_dev;
      f.ino = st.st_ino;
    }
    return f;
  }
  // Removes the file if it is still the one bound; never throws.
  void remove() const {
    if (!path.empty()) (void)unlink_if_same_file(path.c_str(), dev, ino);
  }
};

// Whether a process accepts connections on the unix socket at `path` (a
// connect() succeeds); false for a socket file nobody listens on any more
// (ECONNREFUSED: one a killed run left) and for a path too long to try.
inline bool unix_socket_listened(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int rc = -1;
  do {
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  } while (rc != 0 && errno == EINTR);
  ::close(fd);
  return rc == 0;
}

// Why an "ipc://PATH" endpoint may not be bound ("" if it may): PATH holds
// a file that is no socket (a folder, a regular file, a link), which libzmq
// would delete to bind there; or a socket that a live process listens on
// (another coordinator), which libzmq would take over, leaving that process
// unreachable by its workers. A socket nobody listens on (one an earlier
// run left) is replaced, as libzmq does.
inline std::string ipc_path_refusal(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) != 0) return "";
  const std::string path = endpoint.substr(6);
  struct stat st {};
  if (path.empty() || path[0] == '*' || ::lstat(path.c_str(), &st) != 0) return "";
  if (S_ISSOCK(st.st_mode)) {
    if (!unix_socket_listened(path)) return "";
    return "'" + path +
           "' is the socket of a running process (another coordinator?): binding there would "
           "take its address from it; name another path, or stop that process first";
  }
  return "'" + path +
         "' exists and is not a socket: binding ipc://PATH deletes the file at PATH; name a new "
         "path (or the socket an earlier run left there)";
}

// Binds `socket` to `where`; an ipc:// socket file (not ipc://*) is made
// owner-only whatever the umask, so that only this user may connect: bound
// under umask 077 (which covers the moment before the chmod; a stricter
// umask for that moment only makes other threads' new files stricter),
// then chmodded 0600. Returns the endpoint bound (last_endpoint). Throws
// zmq::error_t from bind, Error when the chmod fails.
inline std::string bind_owner_only(zmq::socket_t& socket, const std::string& where) {
  const bool ipc_file = where.rfind("ipc://", 0) == 0 && where.rfind("ipc://*", 0) != 0;
  if (!ipc_file) {
    socket.bind(where);
    return socket.get(zmq::sockopt::last_endpoint);
  }
  const mode_t before = ::umask(077);
  try {
    socket.bind(where);
  } catch (...) {
    ::umask(before);
    throw;
  }
  ::umask(before);
  std::string bound = socket.get(zmq::sockopt::last_endpoint);
  if (::chmod(bound.substr(6).c_str(), 0600) != 0)
    throw Error("cannot make '" + bound.substr(6) + "' owner-only: " + std::strerror(errno));
  return bound;
}

// One event of a zmq_socket_monitor: ZMQ_EVENT_*, its value (a file
// descriptor, an errno, a ZMQ_PROTOCOL_ERROR_* or a ZAP status) and the
// endpoint it names.
struct MonitorEvent {
  std::uint16_t event = 0;
  std::uint32_t value = 0;
  std::string address;
};

// Reads the next event from `monitor` (the PAIR socket connected to a
// zmq_socket_monitor endpoint) without waiting: false when none is queued.
// A malformed event (a first frame under 6 bytes) reads as event 0.
// Retries EINTR; throws zmq::error_t otherwise.
inline bool next_monitor_event(zmq::socket_t& monitor, MonitorEvent& out) {
  zmq::message_t head;
  if (!no_eintr([&] { return monitor.recv(head, zmq::recv_flags::dontwait); })) return false;
  zmq::message_t address;
  if (head.more()) (void)no_eintr([&] { return monitor.recv(address); });
  out = MonitorEvent{};
  if (head.size() >= 6) {
    std::memcpy(&out.event, head.data(), sizeof out.event);
    std::memcpy(&out.value, static_cast<const char*>(head.data()) + 2, sizeof out.value);
  }
  out.address = address.to_string();
  return true;
}

}  // namespace hps::zmq_util
