// Text from peers (worker ids, host names, devices, fail reasons) and from
// programs made safe to print on a terminal or in a log, and to store:
// control characters cannot start a new log line or send escape sequences
// to the terminal, and bytes that are not UTF-8 cannot break the JSON of
// the store or the protocol.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hps {

// `text` with every control character escaped: "\n", "\r" and "\t" as
// those two characters, other C0 bytes and DEL as "\xHH", and C1 controls
// in UTF-8 (U+0080..U+009F, e.g. the one-byte CSI U+009B) as "\u00HH";
// likewise, as "\uHHHH", the characters that show nothing but change how
// the text around them shows: bidirectional embeddings, overrides and
// isolates (U+202A..U+202E, U+2066..U+2069; "\u202e" shows the rest of a
// line backwards), zero-width spaces, joiners and marks (U+200B..U+200F)
// and U+FEFF; each byte that is not part of a well-formed UTF-8 sequence
// replaced by U+FFFD. Everything else (printable ASCII, other UTF-8) is
// kept.
// Backslashes are not escaped, so printable(printable(s)) == printable(s):
// text stored already escaped prints the same. The result is valid UTF-8.
// Never throws (but std::bad_alloc).
std::string printable(std::string_view text);

// `text` as printable() shows it, but with its line breaks ("\n", and
// "\r\n" as one) kept as real ones, each followed by `indent`: a
// multi-line text from a program (a Python traceback in a trial's fail
// reason) reads as lines on a terminal, indented under the line that
// introduced it. Every other control character is escaped as printable()
// does (a lone "\r" as "\\r", ESC as "\\x1b"), so a program still cannot
// send escape sequences, and with a non-empty `indent` none of its lines
// can pass for a line of the log (they all start with `indent`). The
// result has no trailing line break unless `text` ended with one (then it
// ends with "\n" + indent). Never throws (but std::bad_alloc).
std::string printable_lines(std::string_view text, std::string_view indent);

// A reason of several lines (a program's failure: "the program failed ...;
// last lines of stderr:" then the lines, the last one the error) on one
// line, for one-line displays (a progress line, a summary): its first and
// last non-empty lines, each over 150 bytes cut to its first 90 and last 55
// bytes around " ... " (the end often holds a hint; never inside a UTF-8
// sequence), joined by " ... " (by " " when it has just two), made
// printable(); "(none given)" when it has no non-empty line.
// Never throws (but std::bad_alloc).
std::string one_line_reason(std::string_view reason);

// The most characters of a user's text that an error quotes
// (printable_excerpt).
inline constexpr std::size_t kMaxQuotedChars = 200;

// `text` as an error quotes a user's text (a name, key or value from
// space.json, a store or the command line): printable(text), and when
// `text` has more than kMaxQuotedChars characters (code points; a byte that
// is not UTF-8 counts as one), only its first kMaxQuotedChars, escaped,
// then "... (N bytes in all)" with N = text.size(). So a 10 MB study or
// param name in a store edited by hand does not fill the terminal, and the
// rule the error states after it stays in view. Never throws (but
// std::bad_alloc).
std::string printable_excerpt(std::string_view text);

// `text` with every byte that is not part of a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, surrogates or code points above U+10FFFF)
// replaced by U+FFFD, so that a program's binary output or a peer's bytes
// cannot break the JSON of the store, the protocol or `hpsearch trials`;
// and each NUL byte written as the two characters "\0": a FAIL reason
// travels as an exception's what(), a C string, which would end at the NUL
// and lose the rest of the reason. Line breaks and other controls are kept
// (for multi-line reasons; printable() escapes them). Never throws (but
// std::bad_alloc).
std::string valid_utf8(std::string_view text);

// The length in bytes (1 to 4) of the well-formed UTF-8 sequence that
// starts at text[at] (RFC 3629, as valid_utf8 reads it; a NUL is 1), or 0
// when none starts there (a stray continuation byte, an overlong form, a
// surrogate, a truncated sequence). `at` < text.size().
std::size_t utf8_sequence_length(std::string_view text, std::size_t at);

}  // namespace hps
