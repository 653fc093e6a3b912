// The report lines of the "command" objective (objectives/command.h): a
// program reports by printing, on stdout,
//
//   hpsearch: {"step": 3, "value": 0.41}      an intermediate value
//   hpsearch: {"value": 0.38, "attrs": {...}}  the final value (+ user attrs)
//   hpsearch: {"attrs": {...}}                 user attrs only
//   hpsearch: {"status": "pruned"}             persistent mode: how a trial
//   hpsearch: {"status": "fail", "reason": "..."}  ended without a final
//   hpsearch: {"status": "done"}               value line (see command.h)
//
// Any report may carry "number": the trial it is for (an integer >= 0); a
// report whose number is not the running trial's is ignored (so a line a
// persistent program prints late, after its trial ended, is never taken for
// the next trial's).
// "value" is a JSON number or one of the strings "nan", "inf", "+inf",
// "infinity", "-inf", "-infinity" (any case). Python's json.dumps literals
// NaN, Infinity and -Infinity (outside strings) are read as those floats,
// in "value" and in "attrs" alike (an attr stays a float). "step" is an integer >= 0 (a float with
// an integer value below 9e15 is accepted) and needs a "value". Other keys are errors. The text may
// hold any bytes: the parser never throws and refuses JSON nested deeper than kMaxJsonDepth before
// parsing it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "search/json_util.h"

namespace hps {

// The prefix of a report line. The command objective drops one trailing
// '\r' from a stdout line, then reads the text after this prefix.
inline constexpr std::string_view kReportPrefix = "hpsearch:";

// One report, as read from the text after kReportPrefix.
struct CommandReport {
  std::optional<std::int64_t> number;  // set: the trial the report is for (>= 0)
  std::optional<std::int64_t> step;    // set: an intermediate value (>= 0)
  std::optional<double> value;         // set unless the line has only attrs
  Json attrs;                          // an object, or null when absent
  std::string status;                  // "pruned", "fail", "done", or "" when absent
  std::string reason;                  // with status "fail": why ("" if not given)
};

// Parses the text after "hpsearch:" (leading/trailing blanks allowed).
// Returns "" and fills `out` for a valid report; otherwise a message saying
// what is wrong ("not valid JSON", "\"step\" must be >= 0", ...), with `out`
// possibly partly filled. Never throws for any input.
std::string parse_command_report(std::string_view text, CommandReport& out);

}  // namespace hps
