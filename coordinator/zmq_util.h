// Small helpers for ZeroMQ calls shared by the coordinator and the workers.
// Internal: includes zmq.hpp, so only .cpp files include it.
#pragma once

#include <cerrno>

#include <zmq.hpp>

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

}  // namespace hps::zmq_util
