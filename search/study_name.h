// The rule of a study name. Private to hpsearch: not installed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "search/search_space.h"  // kMaxStudyNameBytes

namespace hps {

// The rule of a study name, wherever one is given (space.json's study.name,
// `hpsearch run --study`, `hpsearch import --as` or the Optuna study's own
// name): not empty, at most kMaxStudyNameBytes bytes, valid UTF-8, no
// control characters (U+0000 to U+001F, U+007F, the C1 controls U+0080 to
// U+009F: names are printed to terminals and logs) and none of the
// characters that change how the text around them shows (bidirectional
// embeddings, overrides and isolates, zero-width characters, U+FEFF: each
// character printable() escapes, search/printable.h). Throws
// ConfigError(field, ...) naming the rule broken.
void check_study_name(const std::string& name, const std::string& field);

// The most study names an error lists (study_name_list).
inline constexpr std::size_t kMaxListedStudyNames = 20;

// Study names for an error that lists what a store holds: "'a', 'b'", each
// name as printable_excerpt() gives it (escaped, at most kMaxQuotedChars
// characters), the first kMaxListedStudyNames of them and then
// ", ... (N more)"; "none" for no name. Never throws (but std::bad_alloc).
std::string study_name_list(const std::vector<std::string>& names);

}  // namespace hps
