// Small helpers for ZeroMQ calls shared by the coordinator and the workers.
// Internal: includes zmq.hpp, so only .cpp files include it.
#pragma once

#include <cerrno>
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

// Checks a ZeroMQ endpoint before it is bound (`bind`) or connected:
// "tcp://HOST:PORT" with PORT in [1, 65535] (for bind also 0 or "*": any
// free port), "ipc://PATH" or "inproc://NAME". Throws ConfigError(field, ...)
// naming the rule, so that a typo is not silently accepted (ZeroMQ takes
// port 99999 modulo 65536).
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
  const std::string port = r.substr(colon + 1);
  if (bind && port == "*") return;
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    fail(bind ? "the port must be a number in [1, 65535] or *"
              : "the port must be a number in [1, 65535]");
  const long n = std::stol(port);
  if (n > 65535 || (n == 0 && !bind)) fail("the port must be in [1, 65535]");
}

}  // namespace hps::zmq_util
