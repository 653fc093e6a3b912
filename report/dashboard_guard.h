// The dashboard's checks of who asks and what (cli/report_command.cpp:
// hpsearch dashboard): loopback peers and host names, the since= revision.
// Pure functions, so the rules are tested without a server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hps::report {

// Whether `host` is a loopback address or name (127.0.0.0/8 as a dotted
// quad, ::1 or [::1], localhost): the only hosts the dashboard listens on
// without --allow-remote.
bool is_loopback_host(const std::string& host);

// Whether `addr`, a peer's numeric address as accepted (127.0.0.0/8, ::1,
// or an IPv4-mapped ::ffff:127.x.y.z), is a loopback one: the only peers
// the dashboard answers without --allow-remote (others get 403).
bool is_loopback_peer(const std::string& addr);

// The name part of a Host header ("127.0.0.1:8080" -> "127.0.0.1",
// "[::1]:8080" -> "[::1]"; "" for "[::1" with no closing bracket).
std::string host_header_name(const std::string& host_header);

// Whether a request with Host header `host_header` may be answered by a
// dashboard listening on `bound` (as given to --host, IPv6 bracketed):
// a loopback name, or `bound` itself; any name when `bound` is a wildcard
// (0.0.0.0, [::]), which only --allow-remote permits. A page reached under
// another name is refused: DNS rebinding (a site whose name now resolves
// to 127.0.0.1) must not read the study.
bool host_allowed(const std::string& host_header, const std::string& bound);

// The dashboard's `since=` query value: a revision, a decimal integer in
// 0..2^63-1 with nothing else; nullopt for anything else (negative, empty,
// out of range, "1e5", " 1", "+1").
std::optional<std::int64_t> parse_since(const std::string& text);

}  // namespace hps::report
