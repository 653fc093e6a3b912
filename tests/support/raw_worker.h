// A worker that speaks the coordinator's protocol by hand (a ZeroMQ DEALER
// socket in the test's process): tests drive each message and step the
// coordinator themselves, so they can send what a real worker never would.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "coordinator/coordinator.h"
#include "protocol/protocol.h"

namespace hps::testsupport {

class RawWorker {
 public:
  // Connects to `endpoint` and says Hello as `name` with `prefetch`.
  RawWorker(zmq::context_t& ctx, const std::string& endpoint, const std::string& name,
            int prefetch = 0)
      : socket_(ctx, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
    protocol::Hello hello{name, "host", 1, "cpu", "", 1, protocol::kProtocolVersion};
    hello.prefetch = prefetch;
    send(hello);
  }
  void send(const protocol::Message& m) {
    socket_.send(zmq::buffer(protocol::encode(m)), zmq::send_flags::none);
  }
  // Steps `c` for up to `seconds` until a message of type T arrives; the
  // messages read before it are kept in received().
  template <class T>
  std::optional<T> await(Coordinator& c, double seconds = 10) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(seconds));
    while (std::chrono::steady_clock::now() < until) {
      c.step(10);
      zmq::message_t m;
      while (socket_.recv(m, zmq::recv_flags::dontwait)) {
        auto msg = protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()));
        if (auto* t = std::get_if<T>(&msg)) return *t;
        received_.push_back(std::move(msg));
      }
    }
    return std::nullopt;
  }
  // Asks for a trial and steps the coordinator until one is assigned (or 10 s).
  std::optional<protocol::Assignment> request(Coordinator& c, double seconds = 10) {
    send(protocol::RequestTrial{});
    return await<protocol::Assignment>(c, seconds);
  }
  const std::vector<protocol::Message>& received() const { return received_; }

 private:
  zmq::socket_t socket_;
  std::vector<protocol::Message> received_;
};

}  // namespace hps::testsupport
