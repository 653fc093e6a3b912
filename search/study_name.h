// The rule of a study name. Private to hpsearch: not installed.
#pragma once

#include <string>

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

}  // namespace hps
