// HandshakeMonitor: logs and counts the peers of a coordinator's CURVE
// endpoint that fail before its ZAP handler (coordinator/zap_authenticator.h)
// is asked about their key, which libzmq reports only as socket events
// (zmq_socket_monitor): a peer that offers no CURVE keys (a worker started
// with --insecure), one that pins another coordinator public key (its HELLO
// does not decrypt), one that closes the connection during the handshake,
// and one that sends no ZMTP 3 greeting at all (garbage bytes, an HTTP
// request), for which libzmq 4.3 sends no handshake event: a connection
// closed with no handshake event of any connection since it was accepted
// (exact while handshakes do not overlap; when they do, such a peer may go
// unreported rather than an admitted worker's departure be reported).
//
// libzmq's events name the coordinator's end of the connection (the
// address the peer reached, "tcp://10.0.0.5:5555"), not the peer's
// address: the log lines say so. Lines are rate limited (LogLimiter, at
// most 10 a second); the count of those held back is logged once their
// second has passed (the thread flushes it every poll, about every 100 ms)
// and when the monitor stops. Refusals by the ZAP handler (an unknown key)
// are logged and counted there, not here.
//
// A thread of its own reads the events, so the coordinator's step loop
// never waits for them and a flood of bad peers costs it nothing but CPU.
// Internal to the coordinator (includes zmq.hpp). It must be destroyed
// before the ZeroMQ context and before the monitored socket.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>

#include "coordinator/log_limiter.h"

namespace hps {

class HandshakeMonitor {
 public:
  // Starts monitoring `socket` (of `context`) and the thread that reads the
  // events. Connections accepted on the endpoint `ignored` (the private ipc
  // endpoint, which has no CURVE) are not reported. Throws Error if libzmq
  // refuses the monitor.
  HandshakeMonitor(zmq::context_t& context, zmq::socket_t& socket, std::string ignored);
  // Stops monitoring and the thread (within about 100 ms); closes its socket.
  ~HandshakeMonitor();
  HandshakeMonitor(const HandshakeMonitor&) = delete;
  HandshakeMonitor& operator=(const HandshakeMonitor&) = delete;

  // Peers refused so far for a failed handshake (not the ZAP handler's
  // refusals). Thread-safe.
  std::int64_t failed() const { return failed_.load(); }

 private:
  // The thread: poll_events(), then the last count of held-back lines.
  void run();
  // Reads and handles events until stop_ (or the context ends).
  void poll_events();
  // Handles one event: `event` (ZMQ_EVENT_*), its value (a file descriptor,
  // an errno, a ZMQ_PROTOCOL_ERROR_* or a ZAP status) and its endpoint.
  void on_event(std::uint16_t event, std::uint32_t value, const std::string& address);
  // Counts a refused peer on `address` and logs why (rate limited).
  void refused(const std::string& address, const std::string& why);

  zmq::socket_t& monitored_;
  zmq::socket_t events_;  // the PAIR end that receives the monitor's events
  std::string ignored_;
  std::unordered_map<std::uint32_t, std::uint64_t> accepted_;  // open fd -> outcomes_ then
  std::uint64_t outcomes_ = 0;  // handshake events (any connection) so far
  LogLimiter log_{10, "refused peers that failed the CURVE handshake"};
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> failed_{0};
  std::thread thread_;
};

}  // namespace hps
