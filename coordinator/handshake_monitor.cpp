#include "coordinator/handshake_monitor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <zmq.h>

#include <chrono>
#include <cstring>

#include "protocol/zmq_util.h"
#include "search/errors.h"
#include "search/printable.h"

namespace hps {

namespace {

constexpr const char* kMonitorEndpoint = "inproc://hps-coordinator-handshake-monitor";

// The events read: a connection accepted and closed (to tell the peers that
// send no ZMTP 3 greeting, which libzmq rejects without a handshake event)
// and every handshake outcome.
constexpr int kEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                        ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                        ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

// Why a handshake failed with protocol error `code` (ZMQ_PROTOCOL_ERROR_*),
// as the log says it.
std::string protocol_failure(std::uint32_t code) {
  if (code == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    return "protocol error: it offered no CURVE keys, e.g. a worker started with --insecure or "
           "without --keys, or not an hpsearch worker";
  if (code == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
    return "cryptographic error: it pins another coordinator public key, e.g. a worker folder "
           "of other keys (its coordinator.public is not this coordinator's), or not an "
           "hpsearch worker";
  return fmt::format("protocol error 0x{:08x}: not an hpsearch worker", code);
}

}  // namespace

HandshakeMonitor::HandshakeMonitor(zmq::context_t& context, zmq::socket_t& socket,
                                   std::string ignored)
    : monitored_(socket), events_(context, zmq::socket_type::pair), ignored_(std::move(ignored)) {
  if (zmq_socket_monitor(socket.handle(), kMonitorEndpoint, kEvents) != 0)
    throw Error(std::string("coordinator: cannot monitor the handshakes: ") +
                zmq_strerror(zmq_errno()));
  events_.set(zmq::sockopt::linger, 0);
  // Unlimited: an event libzmq could not queue would be lost (it does not
  // wait), and a lost "handshake succeeded" would make an admitted
  // worker's departure look like a refusal. The thread reads them as they
  // come.
  events_.set(zmq::sockopt::rcvhwm, 0);
  events_.connect(kMonitorEndpoint);
  // spdlog's registry (the default logger) is made on first use: make it
  // here, before the thread, so that the thread's first log line reads a
  // registry this thread finished making (ThreadSanitizer saw the two
  // first uses race when the coordinator logged its first line after the
  // thread started).
  (void)spdlog::default_logger_raw();
  thread_ = std::thread([this] { run(); });
}

HandshakeMonitor::~HandshakeMonitor() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  (void)zmq_socket_monitor(monitored_.handle(), nullptr, 0);
}

void HandshakeMonitor::refused(const std::string& address, const std::string& why) {
  ++failed_;
  if (!log_.allow(LogLimiter::Clock::now())) return;
  spdlog::warn(
      "coordinator: refused a peer on {} that failed the CURVE handshake ({}); libzmq tells the "
      "endpoint it reached, not the peer's address",
      printable(address), why);
}

void HandshakeMonitor::on_event(std::uint16_t event, std::uint32_t value,
                                const std::string& address) {
  switch (event) {
    case ZMQ_EVENT_ACCEPTED:
      if (address != ignored_) accepted_[value] = outcomes_;
      return;
    case ZMQ_EVENT_DISCONNECTED: {
      auto it = accepted_.find(value);
      if (it == accepted_.end()) return;
      // No handshake event of any connection since this one was accepted:
      // it cannot have completed its handshake, and it failed none that
      // libzmq reports (a peer without a ZMTP 3 greeting).
      const bool silent = it->second == outcomes_;
      accepted_.erase(it);
      if (silent)
        refused(address,
                "it sent no ZeroMQ 3 greeting: garbage bytes, an HTTP client, a ZeroMQ older "
                "than 3.0, or not an hpsearch worker");
      return;
    }
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
      ++outcomes_;
      return;
    default:
      break;
  }
  ++outcomes_;
  if (address == ignored_) return;
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
    refused(address, protocol_failure(value));
  } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
    refused(address, "it closed the connection or stopped answering during the handshake (" +
                         std::string(std::strerror(static_cast<int>(value))) +
                         "), e.g. a port scan, or not an hpsearch worker");
  } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && value != 400) {
    // 400 (an unknown key) is the ZAP handler's own refusal, logged there.
    refused(address, "the key check answered ZAP status " + std::to_string(value));
  }
}

void HandshakeMonitor::run() {
  poll_events();
  log_.flush_at_exit();
}

void HandshakeMonitor::poll_events() {
  while (!stop_.load()) {
    zmq::pollitem_t item{events_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
      // The count of the lines a flood held back, once their second
      // passed, also when the flood stopped (no later line to say it).
      log_.flush(LogLimiter::Clock::now());
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq_util::MonitorEvent e;
      while (zmq_util::next_monitor_event(events_, e))
        if (e.event != 0) on_event(e.event, e.value, e.address);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      if (e.num() == ETERM) return;
      spdlog::error("coordinator: handshake monitor: {}", e.what());
      return;
    }
  }
}

}  // namespace hps
