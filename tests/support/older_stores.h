// Test support: stores as older hpsearch versions wrote them, made from a
// store of this version through raw SQLite connections.
#pragma once

#include <string>

namespace hps::testsupport {

// Runs `sql` on the file at `path` through a raw SQLite connection; a
// failure is a test failure naming SQLite's message.
void raw_exec(const std::string& path, const std::string& sql);

// Rewrites the store at `path` (made, or upgraded to this version, first)
// as schema v4 wrote it: no trials_active, no study_best and its triggers;
// the indexes trials_by_study_state and trials_by_study_state_value back,
// from their migrations' SQL as released; user_version 4.
void write_as_v4(const std::string& path);

}  // namespace hps::testsupport
