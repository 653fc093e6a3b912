// A new Study as a parsed space.json (StudyConfig) describes it: its name,
// direction, search space and source, with the sampler and pruner of its
// "sampler" and "pruner" sections (algorithms/factory.h). The set-up of
// tests and benchmarks that drive a Coordinator directly; the CLI's run
// also resumes an existing study (cli/run_command.cpp, open_study). And
// the check of the settings a study stores (stored_settings_error), which
// the CLI and the report share.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "search/search_space.h"
#include "search/storage.h"
#include "search/study.h"

namespace hps {

// Creates the study in `storage`; throws StorageError if its name exists
// there, ConfigError from make_sampler()/make_pruner().
Study create_study(const StudyConfig& config, std::shared_ptr<Storage> storage);

// Where a value of study `info` is stored, as the store's errors name a row
// and column (StudyInfo::config_error's form): stored_column(info, "name")
// == "studies row study_id=1: column name".
std::string stored_column(const StudyInfo& info, std::string_view column);

// stored_column(info, "config_json") + ": ", the prefix of a stored
// settings error.
std::string stored_settings_where(const StudyInfo& info);

// Why the settings stored with study `info` (studies.config_json: its
// space.json document as its last run stored it) are not valid, or "" when
// they are or when it has none (a study made through the C++ API): the
// column did not parse (StudyInfo::config_error), it is not a JSON object,
// or it breaks a rule of space.json (StudyConfig::from_json, and the
// sampler and pruner sections as make_sampler and make_pruner read them),
// or names the other direction than the study's own (studies.direction).
// Each names the row and column: "studies row study_id=1: column
// config_json: budget.n_trials: must be > 0, got -5". Such a study is a
// store edited by hand: `status`, `report` and the dashboard show it with
// this note, `run` (unless --allow-objective-change) and `resume` refuse it
// (exit 2). Never throws (but std::bad_alloc).
std::string stored_settings_error(const StudyInfo& info);

}  // namespace hps
