// ZapAuthenticator: the ZAP handler (ZeroMQ RFC 27) of a coordinator's
// ZeroMQ context. A CURVE server socket of that context (ZMQ_CURVE_SERVER
// with ZMQ_ZAP_DOMAIN set) asks it about every connecting peer: a CURVE
// client whose public key is listed is admitted, with its name as the
// connection's User-Id (zmq_msg_gets(msg, "User-Id") on its messages);
// anything else is refused (ZAP status 400), logged at warning level with
// the peer's address and counted. The lines are rate limited (LogLimiter,
// at most 20 a second); the count of those held back is logged once their
// second has passed (the thread flushes it every poll, about every 100 ms)
// and when the handler stops.
//
// Internal to the coordinator (includes zmq.hpp). It must exist before the
// CURVE socket binds and outlive it: with no handler bound, libzmq admits
// every CURVE client.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "coordinator/log_limiter.h"

namespace hps {

class ZapAuthenticator {
 public:
  // Binds inproc://zeromq.zap.01 in `context` and starts the thread that
  // answers. `authorized`: Z85 public key -> name. Throws Error if the
  // endpoint cannot be bound (another handler in this context).
  ZapAuthenticator(zmq::context_t& context, std::map<std::string, std::string> authorized);
  // Stops the thread (within about 100 ms) and closes its socket.
  ~ZapAuthenticator();
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;

  // Connections refused so far (unknown key, other mechanism). Thread-safe.
  std::int64_t refused() const { return refused_.load(); }
  // Connections admitted so far. Thread-safe.
  std::int64_t admitted() const { return admitted_.load(); }

 private:
  // The thread: answer_requests(), then the last count of held-back lines.
  void run();
  // Answers requests until stop_ (or the context ends).
  void answer_requests();
  // Answers one request (the frames of RFC 27); returns the reply frames.
  std::vector<std::string> answer(const std::vector<std::string>& request);

  zmq::socket_t socket_;
  std::map<std::string, std::string> authorized_;
  LogLimiter log_{20, "connections refused by the key check"};  // the thread's only
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> refused_{0};
  std::atomic<std::int64_t> admitted_{0};
  std::thread thread_;
};

}  // namespace hps
