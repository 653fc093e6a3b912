// libFuzzer target: the command objective's report lines (objectives/
// command_report.h), `hpsearch: {...}` lines that a trial's program prints.
//
// The input is one stdout line. As the command objective does, one
// trailing '\r' is dropped and the text after kReportPrefix is parsed; a
// line without the prefix is parsed whole (the parser must take any bytes).
// Checks, for every input:
//  - parse_command_report() throws nothing (no crash, no UB, no leak);
//  - an accepted report has a value, an attrs object or a status; a step
//    only with a value, and >= 0; a number >= 0; a status one of pruned,
//    fail, done, never with a step; a reason only with "fail"; attrs an
//    object or null, and it dumps as JSON (the store and the protocol
//    write it).
// Run: make test-fuzz, or build/fuzz/tests/fuzz/fuzz_report_line CORPUS_DIR.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "objectives/command_report.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_report_line: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.substr(0, hps::kReportPrefix.size()) == hps::kReportPrefix)
    line.remove_prefix(hps::kReportPrefix.size());

  hps::CommandReport report;
  std::string error;
  try {
    error = hps::parse_command_report(line, report);
  } catch (...) {
    fail("parse_command_report() threw");
  }
  if (!error.empty()) return 0;
  if (!report.value && !report.attrs.is_object() && report.status.empty())
    fail("accepted a report without value, attrs or status");
  if (report.step && (!report.value || *report.step < 0)) fail("accepted a bad step");
  if (report.number && *report.number < 0) fail("accepted a negative number");
  if (!report.status.empty() && report.status != "pruned" && report.status != "fail" &&
      report.status != "done")
    fail("accepted an unknown status");
  if (!report.status.empty() && report.step) fail("accepted a status with a step");
  if (!report.reason.empty() && report.status != "fail") fail("accepted a reason without fail");
  if (!report.attrs.is_null() && !report.attrs.is_object()) fail("attrs is not an object");
  (void)report.attrs.dump();  // throws (-> crash) on a string that is not UTF-8
  return 0;
}
