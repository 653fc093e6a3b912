// The host's name, for worker names and the coordinator's description of
// itself. Private to hpsearch: not installed.
#pragma once

#include <unistd.h>

#include <string>

namespace hps::util {

// This machine's host name (gethostname(2)), or "localhost" if it cannot be
// read. A name longer than 255 bytes is cut there.
inline std::string host_name() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "localhost";
  return host;
}

}  // namespace hps::util
