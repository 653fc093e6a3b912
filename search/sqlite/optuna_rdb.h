// Optuna interoperability: a study written to, and read from, a SQLite file
// in Optuna's RDB storage schema (optuna/storages/_rdb/models.py), as of
// Optuna 3.1 (schema_version 12, alembic head "v3.0.0.d"), so that
// optuna.load_study(storage="sqlite:///FILE") opens it and newer Optuna
// versions upgrade it with `optuna storage upgrade`.
//
// Mapping (hpsearch -> Optuna; import is the reverse):
//   study         studies + study_directions (one objective)
//   config        study system attr "hpsearch:config" (space.json document)
//   trial         trials (number, state name, datetime_start/complete as
//                 naive "YYYY-MM-DD HH:MM:SS.ffffff" in UTC, microseconds)
//   value         trial_values (objective 0; value_type FINITE / INF_POS /
//                 INF_NEG, value NULL when infinite)
//   intermediate  trial_intermediate_values (FINITE / INF_POS / INF_NEG / NAN)
//   params        trial_params: distribution_json in Optuna's format
//                 ({"name": "FloatDistribution", "attributes": {...}}, also
//                 IntDistribution, CategoricalDistribution; an ordinal is a
//                 CategoricalDistribution of its values); param_value in
//                 Optuna's internal representation (the float or int value;
//                 for categorical, the index of the choice). Inactive
//                 (conditional) params have no row.
//   attrs         trial/study user and system attributes, JSON as Python's
//                 json.dumps writes it (NaN, Infinity for non-finite floats)
//   worker, fail_reason   trial system attrs "hpsearch:worker",
//                 "hpsearch:fail_reason"
//   ordinals      trial system attr "hpsearch:ordinal": the names of the
//                 trial's ordinal params (so they come back as ordinals)
// One deviation from Optuna's DDL: the three float value columns
// (trial_values.value, trial_intermediate_values.intermediate_value,
// trial_params.param_value) are declared without a type, as in hpsearch's
// own store, so -0.0 keeps its sign (a FLOAT column turns it into 0.0);
// Optuna reads them as the same floats.
#pragma once

#include <optional>
#include <string>

#include "search/storage.h"

namespace hps::sqlite {

// Optuna's schema version (version_info.schema_version) and alembic head
// revision of Optuna 3.1, written by export_optuna.
inline constexpr int kOptunaSchemaVersion = 12;
inline constexpr const char* kOptunaAlembicRevision = "v3.0.0.d";
inline constexpr const char* kOptunaLibraryVersion = "3.1.0";

// Writes study `study_id` of `storage` to a new SQLite file `path` in
// Optuna's schema (see above). The file is written under a temporary name
// beside `path` and renamed when complete, so `path` is never half-written.
// The file is created owner-only (0600, search/private_files.h).
// Throws ConfigError("-o", ...) if `path` is empty, its folder does not
// exist or the file cannot be created there, if it exists and !force, if
// it is the storage's own file (even with force) or a directory; StorageError
// for a param without a distribution (and none in the study's space) and
// for SQLite errors.
void export_optuna(Storage& storage, std::int64_t study_id, const std::string& path, bool force);

// What import_optuna did.
struct OptunaImport {
  std::int64_t study_id = -1;  // in the target storage
  std::size_t n_trials = 0;
  std::string study_name;  // the Optuna study that was copied
};

// Copies study `study_name` of the Optuna SQLite file `path` (an empty name:
// the file's only study) into `target` as a new study named `as_name`
// (default: the Optuna study's name), trials in number
// order with their states, values, datetimes, params, intermediate values
// and attrs. Everything is read and checked first, then written in one
// transaction: on any error nothing is stored. Throws ConfigError for: a
// missing file, a file that is not a SQLite database or not an Optuna
// storage (naming the missing table), an Optuna schema older than 12 ("run
// optuna storage upgrade"), an unknown study (listing those there), an
// empty `study_name` for a file with no study or several (listing them), a
// multi-objective study, a distribution hpsearch does not have or a param
// value outside it (naming the trial and param), a target name already
// taken.
OptunaImport import_optuna(const std::string& path, const std::string& study_name, Storage& target,
                           const std::optional<std::string>& as_name);

}  // namespace hps::sqlite
