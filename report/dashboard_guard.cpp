#include "report/dashboard_guard.h"

#include <charconv>
#include <cstdio>
#include <string_view>

namespace hps::report {

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  // 127.0.0.0/8 in dotted quad form: four decimal fields and nothing else.
  unsigned a, b, c, d;
  char tail;
  if (host.empty() || host.front() < '0' || host.front() > '9') return false;
  if (std::sscanf(host.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4)
    return a == 127 && b < 256 && c < 256 && d < 256;
  return false;
}

bool is_loopback_peer(const std::string& addr) {
  constexpr std::string_view kMapped = "::ffff:";  // IPv4-mapped IPv6
  if (addr.size() > kMapped.size() && addr.compare(0, kMapped.size(), kMapped) == 0)
    return is_loopback_host(addr.substr(kMapped.size()));
  return addr != "localhost" && addr != "[::1]" && is_loopback_host(addr);
}

std::string host_header_name(const std::string& host_header) {
  if (host_header.rfind('[', 0) == 0) {
    auto close = host_header.find(']');
    return close == std::string::npos ? std::string() : host_header.substr(0, close + 1);
  }
  return host_header.substr(0, host_header.find(':'));
}

bool host_allowed(const std::string& host_header, const std::string& bound) {
  if (bound == "0.0.0.0" || bound == "[::]" || bound == "::") return true;
  std::string name = host_header_name(host_header);
  return !name.empty() && (is_loopback_host(name) || name == bound);
}

std::optional<std::int64_t> parse_since(const std::string& text) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < 0) return std::nullopt;
  return v;
}

}  // namespace hps::report
