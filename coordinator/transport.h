// Transport: the coordinator's ZeroMQ ROUTER socket. It binds a private ipc
// endpoint (plain ZMTP, in a fresh 0700 folder) and the configured endpoint
// (a CURVE server with a ZAP handler when there are keys), reads messages
// in batches without blocking (a thread of its own logs the peers that fail
// the CURVE handshake: coordinator/handshake_monitor.h), and queues replies
// until flush(), so that the caller can commit what it stored before
// anything is sent. Private to the coordinator (not installed).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "coordinator/coordinator.h"
#include "coordinator/handshake_monitor.h"
#include "coordinator/zap_authenticator.h"
#include "protocol/zmq_util.h"

namespace hps {

// A routing id as text: printable as is, else hex ("0x..."). (Worker names
// and other text from peers go through printable(), search/printable.h.)
std::string printable_id(const std::string& id);

// A fresh 0700 folder (under $TMPDIR when short enough for an ipc path,
// else /tmp), removed with everything in it by the destructor. Throws Error
// if none can be created.
class PrivateDir {
 public:
  PrivateDir();
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class Transport {
 public:
  // One message read from the socket.
  struct Incoming {
    std::string rid;      // the peer's routing id
    std::string frame;    // its one frame
    bool valid = true;    // exactly [routing id][one frame]
    std::string user_id;  // the ZAP User-Id (the CURVE key's name), if any
  };

  // Binds the private ipc endpoint, then options.endpoint (if any). With
  // options.keys_dir, loads the keys into options.curve_secret_key and
  // options.authorized_keys. Throws Error if an endpoint cannot be bound,
  // ConfigError for keys that cannot be used.
  explicit Transport(CoordinatorOptions& options);
  // Removes the socket file of an ipc options.endpoint that the bind made
  // (libzmq leaves it), if it is still that file.
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Where workers connect: options.endpoint as bound (the ipc endpoint
  // when none was given), and the private ipc endpoint.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& local_endpoint() const { return local_endpoint_; }
  // Where the artifact endpoint (coordinator/artifact_server.h) binds: the
  // rule of zmq_util::artifact_endpoint_for options.endpoint (the next tcp
  // port; ipc: the path + ".artifacts"), or an ipc path in the private
  // folder when there is no options.endpoint; "" for another scheme.
  const std::string& artifact_bind() const { return artifact_bind_; }
  // Whether endpoint() is a CURVE server (the artifact endpoint is then one
  // too, with the same keys).
  bool curve_on() const { return curve_on_; }

  // Reads up to max_batch messages without blocking; `drained` tells
  // whether the socket had no more.
  std::vector<Incoming> drain(int max_batch, bool& drained);
  // Sleeps until the socket may have a message, at most timeout_ms
  // milliseconds (the socket's ZMQ_FD wakes on an edge: call it only after
  // drain() emptied the socket). A signal ends the wait early.
  // `extra_fd` (when >= 0): another descriptor whose POLLIN also ends the
  // wait (the artifact store's results).
  void wait(int timeout_ms, int extra_fd = -1);

  // Queues a frame for `rid`; flush() sends everything queued (dropping,
  // with a debug log, what cannot be sent now).
  void queue(const std::string& rid, std::string frame) {
    outbox_.emplace_back(rid, std::move(frame));
  }
  void flush();
  // Drops everything queued since the last flush(): the replies of a batch
  // whose transaction did not commit, so that no worker is told of a
  // result, a report or a trial the store does not hold.
  void discard() { outbox_.clear(); }

  // Connections refused by the ZAP handler (unknown CURVE key).
  std::int64_t refused_keys() const { return zap_ ? zap_->refused() : 0; }
  // Peers of the CURVE endpoint refused for a failed handshake, before the
  // ZAP handler (HandshakeMonitor).
  std::int64_t failed_handshakes() const { return monitor_ ? monitor_->failed() : 0; }

 private:
  void bind_endpoints(CoordinatorOptions& options);
  // Removes and unlocks ipc_lock_file_, if held.
  void release_ipc_lock();
  std::string bind(const std::string& where);

  PrivateDir private_dir_;  // holds the local ipc endpoint; outlives the socket
  zmq::context_t context_{1};
  std::unique_ptr<ZapAuthenticator> zap_;  // with CURVE keys; outlives the socket
  zmq::socket_t socket_{context_, zmq::socket_type::router};
  std::unique_ptr<HandshakeMonitor> monitor_;  // with CURVE keys; stopped before the socket closes
  int socket_fd_ = -1;  // the socket's ZMQ_FD, polled while the socket is empty
  std::string endpoint_;
  std::string local_endpoint_;
  std::string artifact_bind_;
  bool curve_on_ = false;  // endpoint is a CURVE server: messages carry a User-Id
  // The socket file of an ipc endpoint (options.endpoint), as bound.
  zmq_util::IpcSocketFile ipc_file_;
  // "<PATH>.lock" of an ipc endpoint, flock'ed (exclusive) from before the
  // bind until the socket file is removed: of coordinators that start
  // together on one path, one binds and the others are refused (the check
  // for a listening socket alone let two pass, about 1 start in 10). -1 /
  // "" when there is none.
  int ipc_lock_fd_ = -1;
  std::string ipc_lock_file_;
  std::vector<std::pair<std::string, std::string>> outbox_;  // (routing id, frame)
};

}  // namespace hps
