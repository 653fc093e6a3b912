// Private to SqliteStorage: the row codec. How values are written to and
// read from the store's columns (the file format is in
// search/sqlite_storage.h): JSON text, doubles bit-exact, times as unix
// seconds truncated to whole microseconds, states and directions as
// integers. Every read checks the column's type; a damaged row raises
// StorageError naming the table, the row and the column.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "search/distributions.h"
#include "search/errors.h"
#include "search/search_space.h"
#include "search/sqlite/statement.h"
#include "search/trial.h"

namespace hps::sqlite {

// The `kind` column of study_attrs and trial_attrs.
constexpr int kKindUser = 0;
constexpr int kKindSystem = 1;

// Throws StorageError "<what> is not valid UTF-8" unless `text` is UTF-8.
void check_utf8(const std::string& text, const std::string& what);

// The JSON text of a value_json column: value.dump(), but a float that is
// NaN or +-inf is written as Python's literal NaN, Infinity, -Infinity
// (dump_json_nonfinite; what Optuna stores), so it reads back as that float
// (decode_json accepts the literals), not as null. Files written before
// hold no such literal, so no migration is needed. Throws StorageError
// naming `what` if the value cannot be stored.
std::string encode_json(const Json& value, const std::string& what);

// Names a row in error messages: "trial_attrs row trial_id=7 key='lr'",
// "trials row trial_id=8 (trial number 7)".
// Built only when an error is raised (reads stay cheap).
struct Where {
  const char* table;
  const char* id_name = nullptr;  // null: the id column itself is unreadable
  std::int64_t id = 0;
  const char* key_name = nullptr;
  const std::string* key = nullptr;
  const std::int64_t* number = nullptr;  // the trial's number, once read: what users know it by

  std::string str() const;
};

inline Where trial_row_where(const char* table, std::int64_t trial_id) {
  return {table, "trial_id", trial_id};
}
inline Where study_row_where(const char* table, std::int64_t study_id) {
  return {table, "study_id", study_id};
}

// Parses a JSON column (depth limited to kMaxJsonDepth; NaN, Infinity and
// -Infinity read as floats, see encode_json). Throws StorageError
// naming the row and column.
Json decode_json(const std::string& text, const Where& where, const char* column);

// A study's settings, the studies.config_json column `col` of `s`: read as
// a space.json file is (parse_stored_json_text: a key twice, a number
// beyond a double's range, a NUL byte, deeper than kMaxJsonDepth are
// refused, naming where), NaN and +-Infinity accepted as in decode_json.
// Text that cannot be read gives null and sets `error` (StudyInfo::
// config_error: "studies row study_id=1: column config_json: invalid JSON
// at 'sampler.seed': number overflow ..."), so that the rest of the study can
// still be read; `error` is left as it is otherwise. Never throws (but
// std::bad_alloc).
Json decode_config_json(Statement& s, int col, const Where& where, std::string& error);

// A value_json column of a trial's keyed row (trial_attrs by key), decoded
// as a read of that row decodes it.
Json decode_keyed(const std::string& text, const char* table, std::int64_t trial_id,
                  const char* key_name, const std::string& key);

// Now, truncated to whole microseconds.
TimePoint now_us();
// A time as stored: unix seconds (microsecond precision).
double encode_time(TimePoint t);
// What reading back encode_time(t) gives (col_time): a snapshot updated in
// memory after a write equals one read from the file.
TimePoint stored_time(TimePoint t);

// Columns read with type checks (StorageError naming the row and column).
std::int64_t col_int(Statement& s, int col, const Where& where, const char* name);
std::optional<double> col_opt_real(Statement& s, int col, const Where& where, const char* name);
// null_ok: NULL reads as "".
std::string col_text(Statement& s, int col, const Where& where, const char* name,
                     bool null_ok = false);
// Also refuses times that are not finite or beyond +-9e9 s.
std::optional<TimePoint> col_time(Statement& s, int col, const Where& where, const char* name);

TrialState decode_state(std::int64_t v, const Where& where);
StudyDirection decode_direction(std::int64_t v, const Where& where);
int encode_direction(StudyDirection d);
Distribution decode_distribution(const std::string& text, const Where& where);

// Param values compared as set_trial_param compares them (scalars by type
// and value, see same_json_scalar).
bool same_value(const Json& a, const Json& b);

}  // namespace hps::sqlite
