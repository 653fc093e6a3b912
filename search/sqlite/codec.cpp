// The row codec of SqliteStorage (see codec.h).
#include "search/sqlite/codec.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "search/json_util.h"
#include "search/printable.h"

namespace hps::sqlite {

using Micros = std::chrono::microseconds;

// Largest |seconds| stored: well inside what TimePoint (nanoseconds, int64)
// can hold (about year 2262).
constexpr double kMaxTimeSeconds = 9.0e9;

void check_utf8(const std::string& text, const std::string& what) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return;  // ASCII
  try {
    (void)Json(text).dump();  // nlohmann refuses to dump anything but UTF-8
  } catch (const Json::exception&) {
    throw StorageError(what + " is not valid UTF-8");
  }
}

std::string encode_json(const Json& value, const std::string& what) {
  try {
    return dump_json_nonfinite(value);
  } catch (const Json::exception& e) {
    throw StorageError(what + ": cannot store value as JSON: " + e.what());
  }
}

std::string Where::str() const {
  std::string out = std::string(table) + " row";
  if (id_name) out += std::string(" ") + id_name + "=" + std::to_string(id);
  if (number) out += " (trial number " + std::to_string(*number) + ")";
  if (key_name && key) out += std::string(" ") + key_name + "='" + *key + "'";
  return out;
}

Json decode_json(const std::string& text, const Where& where, const char* column) {
  if (json_too_deep_at(text) != std::string_view::npos)
    throw StorageError(where.str() + ": column " + column + ": invalid JSON: nested deeper than " +
                       std::to_string(kMaxJsonDepth) + " levels");
  try {
    return parse_json_nonfinite(text);
  } catch (const Json::exception& e) {
    // nlohmann quotes the offending text, bytes of the store: escaped, so
    // that a corrupt row cannot send control bytes to a terminal.
    throw StorageError(where.str() + ": column " + column +
                       ": invalid JSON: " + printable(e.what()));
  }
}

Json decode_config_json(Statement& s, int col, const Where& where, std::string& error) {
  try {
    return parse_stored_json_text(col_text(s, col, where, "config_json"),
                                  where.str() + ": column config_json");
  } catch (const Error& e) {  // ConfigError (the text), StorageError (not text)
    error = e.what();
    return Json();
  }
}

Json decode_keyed(const std::string& text, const char* table, std::int64_t trial_id,
                  const char* key_name, const std::string& key) {
  Where where = trial_row_where(table, trial_id);
  where.key_name = key_name;
  where.key = &key;
  return decode_json(text, where, "value_json");
}

TimePoint now_us() { return std::chrono::floor<Micros>(Clock::now()); }

double encode_time(TimePoint t) {
  auto us = std::chrono::floor<Micros>(t.time_since_epoch()).count();
  return static_cast<double>(us) / 1e6;
}

TimePoint stored_time(TimePoint t) {
  auto us = Micros(std::llround(encode_time(t) * 1e6));
  return TimePoint(std::chrono::duration_cast<Clock::duration>(us));
}

std::int64_t col_int(Statement& s, int col, const Where& where, const char* name) {
  if (s.type(col) != SQLITE_INTEGER)
    throw StorageError(where.str() + ": column " + name + " is not an integer");
  return s.int64(col);
}

std::optional<double> col_opt_real(Statement& s, int col, const Where& where, const char* name) {
  switch (s.type(col)) {
    case SQLITE_NULL:
      return std::nullopt;
    case SQLITE_INTEGER:
    case SQLITE_FLOAT:
      return s.real(col);
    default:
      throw StorageError(where.str() + ": column " + name + " is not a number");
  }
}

std::string col_text(Statement& s, int col, const Where& where, const char* name, bool null_ok) {
  int t = s.type(col);
  if (t == SQLITE_NULL && null_ok) return std::string();
  if (t != SQLITE_TEXT) throw StorageError(where.str() + ": column " + name + " is not text");
  return s.text(col);
}

std::optional<TimePoint> col_time(Statement& s, int col, const Where& where, const char* name) {
  auto v = col_opt_real(s, col, where, name);
  if (!v) return std::nullopt;
  if (!std::isfinite(*v) || std::fabs(*v) > kMaxTimeSeconds)
    throw StorageError(where.str() + ": column " + name + ": time out of range");
  auto us = Micros(std::llround(*v * 1e6));
  return TimePoint(std::chrono::duration_cast<Clock::duration>(us));
}

TrialState decode_state(std::int64_t v, const Where& where) {
  if (v < 0 || v > static_cast<std::int64_t>(TrialState::kFail))
    throw StorageError(where.str() + ": unknown trial state " + std::to_string(v));
  return static_cast<TrialState>(v);
}

StudyDirection decode_direction(std::int64_t v, const Where& where) {
  if (v == 0) return StudyDirection::kMinimize;
  if (v == 1) return StudyDirection::kMaximize;
  throw StorageError(where.str() + ": unknown study direction " + std::to_string(v));
}

int encode_direction(StudyDirection d) { return d == StudyDirection::kMaximize ? 1 : 0; }

Distribution decode_distribution(const std::string& text, const Where& where) {
  Json spec = decode_json(text, where, "distribution_json");
  try {
    return Distribution::from_json(spec, "distribution");
  } catch (const std::exception& e) {
    throw StorageError(where.str() + ": column distribution_json: bad distribution: " + e.what());
  }
}

bool same_value(const Json& a, const Json& b) {
  if (a.is_primitive() && b.is_primitive()) return same_json_scalar(a, b);
  return a == b;
}

}  // namespace hps::sqlite
