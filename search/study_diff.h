// What differs between two space.json documents: the settings stored with a
// study (studies.config_json, as its last run stored them) and the file a
// run or `hpsearch validate` is given now. The one comparison behind run's
// warning on a changed search space and validate's report on an existing
// study.
#pragma once

#include <string>
#include <vector>

#include "search/json_util.h"

namespace hps {

// One difference. `field` names it as space.json does: "space.lr",
// "study.direction", "objective.argv", "sampler.seed", "pruner.type",
// "budget.n_trials". `stored` is null when the field was added, `now` null
// when it was removed (a JSON null value itself reads as absent).
struct SettingChange {
  std::string field;
  Json stored;
  Json now;
};

// The differences between `stored` and `now` (whole space.json documents;
// a document or section that is not an object compares as a whole), in this
// order: study.direction; the space, param by param (added, removed, or a
// distribution changed: type, range, log, step, choices, when, scale_with),
// each param read as SearchSpace::from_json gives it when the section
// parses (so 1 and 1.0, or a key order, are no change; the text as written
// otherwise); then the keys of objective, sampler, pruner, budget,
// warm_start and artifacts, key by key, in key order. study.name and
// study.storage are not compared (they name the study, they do not change
// it). Empty when the documents agree. Never throws (but std::bad_alloc).
std::vector<SettingChange> settings_changes(const Json& stored, const Json& now);

// Only the changes of the search space (settings_changes' "space." ones).
std::vector<SettingChange> space_changes(const Json& stored, const Json& now);

// A param's distribution as one line of text, from its space.json spec:
// "float [0.0001, 0.1] log", "int [32, 512] step 32", "categorical ['adam',
// 'sgd']", "ordinal [16, 32, 64]", followed by " when optimizer = 'sgd'"
// and " scale_with batch_size (reference 64, sqrt)" when set. A spec that
// is not an object is written as its JSON text. Never throws (but
// std::bad_alloc).
std::string param_text(const Json& spec);

// One change as a line: "space.lr: added (float [0.0001, 0.1] log)",
// "space.dropout: removed (was float [0, 0.5])", "space.lr: float [0.0001,
// 0.1] log -> float [1e-05, 0.1] log", "study.direction: minimize ->
// maximize", "objective.argv: [...] -> [...]" (long values cut, bytes
// escaped with printable()).
std::string change_text(const SettingChange& change);

// The changes as change_text lines joined by `separator` ("" when none).
std::string changes_text(const std::vector<SettingChange>& changes,
                         const std::string& separator = "; ");

}  // namespace hps
