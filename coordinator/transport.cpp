#include "coordinator/transport.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "protocol/curve_keys.h"
#include "protocol/protocol.h"
#include "protocol/zmq_util.h"

namespace hps {

std::string printable_id(const std::string& id) {
  bool ok = !id.empty() &&
            std::all_of(id.begin(), id.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (ok) return id;
  static const char* kHex = "0123456789abcdef";
  std::string out = "0x";
  for (char ch : id) {
    const auto c = static_cast<unsigned char>(ch);
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

PrivateDir::PrivateDir() {
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

PrivateDir::~PrivateDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Transport::Transport(CoordinatorOptions& options) {
  socket_.set(zmq::sockopt::linger, 1000);
  socket_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(protocol::kMaxFrameBytes));
  socket_.set(zmq::sockopt::router_handover, true);
  socket_.set(zmq::sockopt::sndhwm, 100000);
  socket_.set(zmq::sockopt::rcvhwm, 100000);
  try {
    bind_endpoints(options);
  } catch (...) {
    release_ipc_lock();  // no destructor runs for a constructor that throws
    throw;
  }
  socket_fd_ = socket_.get(zmq::sockopt::fd);
}

void Transport::release_ipc_lock() {
  if (ipc_lock_fd_ < 0) return;
  // Removed while held: a process that opened it before cannot keep it
  // (lock_ipc_path checks that the file it locked is still the path's).
  (void)::unlink(ipc_lock_file_.c_str());
  ::close(ipc_lock_fd_);
  ipc_lock_fd_ = -1;
}

Transport::~Transport() {
  // Only the socket this coordinator bound: a file put there since
  // (another coordinator's socket, anything else) is left alone.
  ipc_file_.remove();
  release_ipc_lock();
}

namespace {

// Locks "<path>.lock" (flock, exclusive, not waiting): the fd, -1 when
// another process holds it (`busy`), or -1 when no lock file can be made
// there (the bind then fails or succeeds on its own: a folder that does not
// exist, one this user may not write). Throws ConfigError when the lock
// file is a symbolic link.
int lock_ipc_path(const std::string& lock_file, bool& busy) {
  busy = false;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const int fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    // A link planted there would silently turn the lock off: refused.
    if (fd < 0 && errno == ELOOP)
      throw ConfigError("coordinator.endpoint",
                        "the ipc path's lock file " + lock_file +
                            " is a symbolic link: refused (never followed); remove it");
    if (fd < 0) return -1;
    int rc = -1;
    do {
      rc = ::flock(fd, LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      ::close(fd);
      busy = errno == EWOULDBLOCK;
      return -1;
    }
    // The file locked must still be the one at the path: its holder
    // removes it before it lets go, and a lock on a removed file locks
    // nothing (open it again).
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) == 0 && ::lstat(lock_file.c_str(), &now) == 0 &&
        held.st_dev == now.st_dev && held.st_ino == now.st_ino)
      return fd;
    ::close(fd);
  }
  return -1;
}

}  // namespace

std::string Transport::bind(const std::string& where) {
  // IPv6 addresses ("tcp://[::1]:5555") need ZMQ_IPV6 (libzmq applies the
  // socket's options as they are at each bind).
  socket_.set(zmq::sockopt::ipv6, zmq_util::ipv6_endpoint(where));
  try {
    return zmq_util::bind_owner_only(socket_, where);
  } catch (const zmq::error_t& e) {
    throw Error("coordinator: cannot bind '" + where + "': " + e.what());
  }
}

// Binds the private ipc endpoint (plain ZMTP), then options.endpoint: a
// CURVE server with a ZAP handler when there are keys (libzmq applies the
// socket's options as they are at each bind).
void Transport::bind_endpoints(CoordinatorOptions& options) {
  local_endpoint_ = bind("ipc://" + private_dir_.path() + "/coordinator.sock");
  if (options.endpoint.empty()) {
    endpoint_ = local_endpoint_;
    artifact_bind_ = "ipc://" + private_dir_.path() + "/artifacts.sock";
    return;
  }
  artifact_bind_ = zmq_util::artifact_endpoint_for(options.endpoint);
  if (!options.keys_dir.empty()) {
    curve::CoordinatorKeys keys = curve::load_coordinator_keys(options.keys_dir);
    options.curve_secret_key = keys.keys.secret_key;
    options.authorized_keys = std::move(keys.authorized);
  }
  if (!options.curve_secret_key.empty()) {
    curve::require("coordinator: CURVE keys");
    if (options.authorized_keys.empty())
      throw ConfigError("coordinator.authorized_keys", "lists no worker key");
    zap_ = std::make_unique<ZapAuthenticator>(context_, options.authorized_keys);
    socket_.set(zmq::sockopt::curve_server, true);
    socket_.set(zmq::sockopt::curve_secretkey, options.curve_secret_key);
    socket_.set(zmq::sockopt::zap_domain, curve::kZapDomain);
    curve_on_ = true;
    // Before the endpoint is bound, so that no peer goes unseen.
    monitor_ = std::make_unique<HandshakeMonitor>(context_, socket_, local_endpoint_);
  }
  const bool ipc_file =
      options.endpoint.rfind("ipc://", 0) == 0 && options.endpoint.rfind("ipc://*", 0) != 0;
  if (ipc_file) {
    const std::string path = options.endpoint.substr(6);
    bool busy = false;
    ipc_lock_file_ = path + ".lock";
    ipc_lock_fd_ = lock_ipc_path(ipc_lock_file_, busy);
    if (busy)
      throw ConfigError("coordinator.endpoint",
                        "'" + path + "' is being bound by another process (another " +
                            "coordinator? its lock, " + ipc_lock_file_ +
                            ", is held): name another path, or stop that process first");
    // libzmq deletes whatever is at an ipc path to bind there.
    const std::string rule = zmq_util::ipc_path_refusal(options.endpoint);
    if (!rule.empty()) throw ConfigError("coordinator.endpoint", rule);
  }
  // An ipc socket file is owner-only whatever the umask (bind()): only the
  // user who started the coordinator may connect (other users join over
  // tcp with CURVE keys).
  endpoint_ = bind(options.endpoint);
  ipc_file_ = zmq_util::IpcSocketFile::of(endpoint_);  // removed by the destructor
  if (curve_on_)
    spdlog::info("coordinator: CURVE on {} (key {}); {} authorized worker keys", endpoint_,
                 curve::fingerprint(curve::public_key_of(options.curve_secret_key,
                                                         "coordinator.curve_secret_key")),
                 options.authorized_keys.size());
  else if (endpoint_.rfind("tcp://", 0) == 0)
    spdlog::warn(
        "coordinator: {} is INSECURE (no CURVE keys): anyone who can reach it can join as a "
        "worker, read every trial's objective config and store made-up results",
        endpoint_);
}

std::vector<Transport::Incoming> Transport::drain(int max_batch, bool& drained) {
  std::vector<Incoming> batch;
  drained = false;
  while (static_cast<int>(batch.size()) < max_batch) {
    zmq::message_t part;
    auto got = zmq_util::no_eintr([&] { return socket_.recv(part, zmq::recv_flags::dontwait); });
    if (!got) {
      drained = true;
      break;
    }
    Incoming in;
    in.rid.assign(static_cast<const char*>(part.data()), part.size());
    int parts = 0;
    while (part.more()) {
      zmq::message_t next;
      (void)zmq_util::no_eintr([&] { return socket_.recv(next, zmq::recv_flags::none); });
      ++parts;
      if (parts == 1) {
        in.frame.assign(static_cast<const char*>(next.data()), next.size());
        if (curve_on_)
          if (const char* user = zmq_msg_gets(next.handle(), "User-Id")) in.user_id = user;
      }
      part = std::move(next);
    }
    in.valid = parts == 1;
    batch.push_back(std::move(in));
  }
  return batch;
}

void Transport::wait(int timeout_ms, int extra_fd) {
  pollfd fds[2] = {{socket_fd_, POLLIN, 0}, {extra_fd, POLLIN, 0}};
  // EINTR (a signal): handled by the caller's next step
  (void)::poll(fds, extra_fd >= 0 ? 2 : 1, timeout_ms);
}

void Transport::flush() {
  for (auto& entry : outbox_) {
    // Plain references: clang 14 cannot capture structured bindings.
    const auto& rid = entry.first;
    const auto& frame = entry.second;
    try {
      zmq_util::no_eintr([&] {
        return socket_.send(zmq::buffer(rid), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      });
      zmq_util::no_eintr(
          [&] { return socket_.send(zmq::buffer(frame), zmq::send_flags::dontwait); });
    } catch (const zmq::error_t& e) {
      spdlog::debug("coordinator: cannot send to {}: {}", printable_id(rid), e.what());
    }
  }
  outbox_.clear();
}

}  // namespace hps
