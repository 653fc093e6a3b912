// Text from peers (worker ids, host names, devices) made safe to print on a
// terminal or in a log: control characters cannot start a new log line or
// send escape sequences to the terminal.
#pragma once

#include <string>
#include <string_view>

namespace hps {

// `text` with every control character escaped: "\n", "\r" and "\t" as
// those two characters, other C0 bytes and DEL as "\xHH", and C1 controls
// in UTF-8 (U+0080..U+009F, e.g. the one-byte CSI U+009B) as "\u00HH".
// Everything else (printable ASCII, other UTF-8) is kept. Backslashes are
// not escaped, so printable(printable(s)) == printable(s): text stored
// already escaped prints the same. Never throws (but std::bad_alloc).
std::string printable(std::string_view text);

}  // namespace hps
