#include "coordinator/zap_authenticator.h"

#include <spdlog/spdlog.h>
#include <zmq.h>

#include <chrono>

#include "protocol/curve_keys.h"
#include "search/errors.h"
#include "search/printable.h"

namespace hps {

namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

}  // namespace

ZapAuthenticator::ZapAuthenticator(zmq::context_t& context,
                                   std::map<std::string, std::string> authorized)
    : socket_(context, zmq::socket_type::rep), authorized_(std::move(authorized)) {
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    throw Error(std::string("coordinator: cannot start the ZAP handler: ") + e.what());
  }
  thread_ = std::thread([this] { run(); });
}

ZapAuthenticator::~ZapAuthenticator() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> ZapAuthenticator::answer(const std::vector<std::string>& request) {
  // version, request id, domain, address, identity, mechanism, credentials...
  std::string request_id = request.size() > 1 ? request[1] : "";
  auto reply = [&](const char* code, const std::string& text, const std::string& user) {
    return std::vector<std::string>{"1.0", request_id, code, text, user, ""};
  };
  if (request.size() < 6 || request[0] != "1.0") return reply("500", "malformed ZAP request", "");
  const std::string& address = request[3];
  const std::string& mechanism = request[5];
  std::string why;
  if (mechanism != "CURVE") {
    why = "mechanism " + printable(mechanism) + " (CURVE keys are required)";
  } else if (request.size() < 7 || request[6].size() != 32) {
    why = "no CURVE public key";
  } else {
    char z85[curve::kKeyChars + 1] = {0};
    zmq_z85_encode(z85, reinterpret_cast<const std::uint8_t*>(request[6].data()), 32);
    auto it = authorized_.find(z85);
    if (it != authorized_.end()) {
      ++admitted_;
      spdlog::debug("coordinator: admitted a connection from {} (key '{}')", printable(address),
                    printable(it->second));
      return reply("200", "OK", it->second);
    }
    why = "CURVE key " + curve::fingerprint(z85) + " is not in the authorized workers list";
  }
  ++refused_;
  if (log_.allow(LogLimiter::Clock::now()))
    spdlog::warn("coordinator: refused a connection from {}: {}", printable(address), why);
  return reply("400", why, "");
}

void ZapAuthenticator::run() {
  answer_requests();
  log_.flush_at_exit();
}

void ZapAuthenticator::answer_requests() {
  while (!stop_.load()) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
      // The count of the refusals a flood held back, once their second
      // passed, also when the flood stopped.
      log_.flush(LogLimiter::Clock::now());
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      if (e.num() == ETERM) return;
      spdlog::error("coordinator: ZAP handler: {}", e.what());
      return;
    }
    if (!(item.revents & ZMQ_POLLIN)) continue;
    try {
      std::vector<std::string> request;
      while (true) {
        zmq::message_t part;
        if (!socket_.recv(part, zmq::recv_flags::dontwait)) break;
        request.emplace_back(static_cast<const char*>(part.data()), part.size());
        if (!part.more()) break;
      }
      if (request.empty()) continue;
      auto frames = answer(request);
      for (std::size_t i = 0; i < frames.size(); ++i)
        socket_.send(zmq::buffer(frames[i]),
                     i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      if (e.num() != EINTR) spdlog::warn("coordinator: ZAP handler: {}", e.what());
    }
  }
}

}  // namespace hps
