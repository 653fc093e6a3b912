// ArtifactServer: the coordinator's artifact endpoint, a second ROUTER
// socket served by a thread of its own, so that the pieces of snapshots and
// user artifacts that remote workers upload or download do not pass
// through the coordinator's loop (the ZeroMQ guide's file transfer,
// chapter 7, "fileio3": a socket of its own and a bounded number of pieces
// in flight).
//
// The first piece of a transfer still goes through the loop (ArtifactPut
// or ArtifactGet at offset 0): the loop checks it as any message (the
// session holds the trial, the lineage, the resume step, the per-trial and
// per-study size caps) and answers with a token (grant()). The worker sends
// the next pieces here with that token; this thread checks the token,
// hands each piece to the store's I/O thread (coordinator/artifact_store.h,
// Route::kTransfer) and answers each written piece here. The last result of
// an upload (done: the snapshot installed and verified; or a refusal) goes
// to the loop's result queue (ArtifactStore::post), which records it as
// before and answers on the main socket. The loop revokes a trial's grants
// when the trial ends (revoke_trial()).
//
// Security: the same CURVE secret key and the same authorised worker keys
// as the main endpoint, with a ZAP handler of its own (an unknown key is
// refused here too); a token is 128 random bits, valid only for the trial,
// step and direction it was granted for.
//
// The thread, and the ZeroMQ I/O thread of its context, run at the
// artifact threads' low priority (kArtifactThreadNice). Private to the
// coordinator (not installed).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "coordinator/artifact_store.h"
#include "coordinator/handshake_monitor.h"
#include "coordinator/zap_authenticator.h"
#include "protocol/protocol.h"
#include "protocol/zmq_util.h"

namespace hps {

class ArtifactServer {
 public:
  // What a token allows.
  struct Grant {
    enum class Kind : std::uint8_t { kPut, kGet };
    Kind kind = Kind::kPut;
    std::string rid;  // the session's routing id on the main socket
    std::int64_t number = -1;
    std::int64_t lineage = -1;
    std::int64_t step = 0;
    std::uint64_t total = 0;           // kPut: the stream's length, bytes
    std::uint64_t manifest_bytes = 0;  // kPut
    bool user = false;                 // kPut: the trial's user artifacts
  };

  // Binds `where` (a ZeroMQ endpoint). With a non-empty
  // `curve_secret_key` (Z85), a CURVE server whose ZAP handler admits the
  // keys of `authorized` (Z85 public key -> name). Throws Error naming the
  // endpoint if it cannot be bound.
  ArtifactServer(const std::string& where, const std::string& curve_secret_key,
                 const std::map<std::string, std::string>& authorized);
  // Stops the thread (within about 100 ms), closes the socket and removes
  // the socket file of an ipc endpoint it bound.
  ~ArtifactServer();
  ArtifactServer(const ArtifactServer&) = delete;
  ArtifactServer& operator=(const ArtifactServer&) = delete;

  // The endpoint as bound ("tcp://0.0.0.0:5556", "ipc:///path").
  const std::string& endpoint() const { return endpoint_; }
  // Starts serving, with `store` (which must outlive this object). Until
  // then no piece is answered. Call once.
  void start(ArtifactStore& store);

  // A fresh token (32 hex digits) for `grant`. Thread-safe.
  std::string grant(Grant grant);
  // Revokes the tokens of trial `number`. Thread-safe.
  void revoke_trial(std::int64_t number);
  // Connections refused by the ZAP handler (unknown CURVE key).
  std::int64_t refused_keys() const { return zap_ ? zap_->refused() : 0; }
  // Peers refused for failing the CURVE handshake before the key check
  // (HandshakeMonitor), as on the main endpoint.
  std::int64_t failed_handshakes() const { return monitor_ ? monitor_->failed() : 0; }

  // Pieces one token may have queued at a time (a worker keeps 4 in
  // flight), and all tokens together (the memory for queued pieces stays
  // under kMaxQueued x 1 MiB).
  static constexpr int kMaxQueuedPerToken = 16;
  static constexpr int kMaxQueued = 256;

 private:
  void run();
  void on_frame(const std::string& rid, const std::string& frame);
  void on_put(const std::string& rid, protocol::ArtifactPut& m);
  void on_get(const std::string& rid, const protocol::ArtifactGet& m);
  void on_results();
  // "" when `token` may queue one more piece, else why not.
  std::string queue_refusal(const std::string& token) const;
  void submit(ArtifactStore::Job job);
  void send(const std::string& rid, const protocol::Message& m);
  std::optional<Grant> find(const std::string& token);
  void revoke(const std::string& token);

  zmq::context_t context_{1};
  std::unique_ptr<ZapAuthenticator> zap_;  // with CURVE keys; outlives the socket
  zmq::socket_t socket_;
  std::unique_ptr<HandshakeMonitor> monitor_;  // with CURVE keys; stopped before the socket closes
  std::string endpoint_;
  // The socket file of an ipc endpoint, as bound ("" when none).
  zmq_util::IpcSocketFile ipc_file_;  // the ipc socket file bound, if any
  ArtifactStore* store_ = nullptr;

  std::mutex mutex_;
  std::map<std::string, Grant> grants_;  // token -> grant (mutex_)

  // ---- the thread's
  std::map<std::string, int> queued_;  // token -> pieces queued on the store
  int queued_total_ = 0;

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hps
