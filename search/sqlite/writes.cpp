// The statements that write a SqliteStorage's rows (see writes.h).
#include "search/sqlite/writes.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "search/sqlite/codec.h"
#include "search/sqlite/param_set.h"

namespace hps::sqlite {

std::int64_t insert_study(Connection& conn, const std::string& name, StudyDirection direction,
                          const std::string& config_json, double created) {
  Use u(conn.stmt(
      "INSERT INTO studies(name, direction, config_json, created) VALUES (?1, ?2, ?3, ?4)"));
  u->bind(1, name);
  u->bind(2, encode_direction(direction));
  u->bind(3, config_json);
  u->bind(4, created);
  u->step();
  return sqlite3_last_insert_rowid(conn.db());
}

void update_study_config(Connection& conn, std::int64_t study_id, const std::string& config_json) {
  Use u(conn.stmt("UPDATE studies SET config_json = ?2 WHERE study_id = ?1"));
  u->bind(1, study_id);
  u->bind(2, config_json);
  u->step();
}

void upsert_study_attr(Connection& conn, std::int64_t study_id, int kind, const std::string& key,
                       const std::string& value_json) {
  Use u(
      conn.stmt("INSERT INTO study_attrs(study_id, kind, key, value_json) VALUES (?1, ?2, ?3, ?4) "
                "ON CONFLICT(study_id, kind, key) DO UPDATE SET value_json = excluded.value_json"));
  u->bind(1, study_id);
  u->bind(2, kind);
  u->bind(3, key);
  u->bind(4, value_json);
  u->step();
}

std::optional<std::int64_t> next_trial_number(Connection& conn, std::int64_t study_id) {
  Use u(
      conn.stmt("SELECT EXISTS(SELECT 1 FROM studies WHERE study_id = ?1), "
                "COALESCE((SELECT MAX(number) + 1 FROM trials WHERE study_id = ?1), 0)"));
  u->bind(1, study_id);
  u->step();
  if (u->int64(0) == 0) return std::nullopt;
  return u->int64(1);
}

std::int64_t insert_trial(Connection& conn, std::int64_t study_id, std::int64_t number,
                          TrialState state, std::optional<double> datetime_start,
                          const std::string& worker) {
  Use u(
      conn.stmt("INSERT INTO trials(study_id, number, state, datetime_start, worker) "
                "VALUES (?1, ?2, ?3, ?4, ?5)"));
  u->bind(1, study_id);
  u->bind(2, number);
  u->bind(3, static_cast<int>(state));
  u->bind(4, datetime_start);
  u->bind(5, worker);
  u->step();
  return sqlite3_last_insert_rowid(conn.db());
}

std::optional<std::int64_t> first_waiting_trial(Connection& conn, std::int64_t study_id) {
  Use u(
      conn.stmt("SELECT trial_id FROM trials WHERE study_id = ?1 AND state = ?2 "
                "AND state IN (0, 1) ORDER BY number LIMIT 1"));  // trials_active's WHERE
  u->bind(1, study_id);
  u->bind(2, static_cast<int>(TrialState::kWaiting));
  if (!u->step()) return std::nullopt;
  return u->int64(0);
}

void mark_running(Connection& conn, std::int64_t trial_id, double datetime_start,
                  const std::string& worker) {
  Use u(conn.stmt(
      "UPDATE trials SET state = ?2, datetime_start = ?3, worker = ?4 WHERE trial_id = ?1"));
  u->bind(1, trial_id);
  u->bind(2, static_cast<int>(TrialState::kRunning));
  u->bind(3, datetime_start);
  u->bind(4, worker);
  u->step();
}

bool update_trial_state(Connection& conn, std::int64_t trial_id, TrialState state,
                        std::optional<double> value, double now,
                        std::optional<double> datetime_complete, const std::string& fail_reason) {
  {
    Use u(
        conn.stmt("UPDATE trials SET state = ?2, value = ?3, "
                  "datetime_start = CASE WHEN ?2 = 1 THEN COALESCE(datetime_start, ?4) "
                  "ELSE datetime_start END, "
                  "datetime_complete = ?5, fail_reason = ?6 WHERE trial_id = ?1 AND state IN "
                  "(0, 1)"));  // WAITING, RUNNING
    u->bind(1, trial_id);
    u->bind(2, static_cast<int>(state));
    u->bind(3, value);
    u->bind(4, now);
    u->bind(5, datetime_complete);
    u->bind(6, fail_reason);
    u->step();
  }
  return sqlite3_changes(conn.db()) != 0;
}

bool write_trial_attr(Connection& conn, std::int64_t trial_id, int kind, const std::string& key,
                      const std::string& value_json, bool upsert) {
  {
    Use u(conn.stmt(
        upsert ? "INSERT INTO trial_attrs(trial_id, kind, key, value_json) SELECT ?1, ?2, ?3, ?4 "
                 "WHERE EXISTS(SELECT 1 FROM trials WHERE trial_id = ?1) "
                 "ON CONFLICT(trial_id, kind, key) DO UPDATE SET value_json = excluded.value_json"
               : "INSERT INTO trial_attrs(trial_id, kind, key, value_json) VALUES (?1, ?2, ?3, "
                 "?4)"));
    u->bind(1, trial_id);
    u->bind(2, kind);
    u->bind(3, key);
    u->bind(4, value_json);
    u->step();
  }
  return sqlite3_changes(conn.db()) != 0;
}

bool insert_intermediate_value(Connection& conn, std::int64_t trial_id, std::int64_t step,
                               double value) {
  {
    Use u(
        conn.stmt("INSERT INTO trial_intermediate_values(trial_id, step, value) "
                  "SELECT ?1, ?2, ?3 WHERE EXISTS(SELECT 1 FROM trials WHERE trial_id = ?1 AND "
                  "state IN (0, 1)) ON CONFLICT(trial_id, step) DO NOTHING"));
    u->bind(1, trial_id);
    u->bind(2, step);
    u->bind(3, value);  // NaN becomes NULL
    u->step();
  }
  return sqlite3_changes(conn.db()) != 0;
}

std::string read_param_set(Connection& conn, std::int64_t trial_id) {
  Use u(conn.stmt("SELECT data FROM trial_param_sets WHERE trial_id = ?1"));
  Statement& s = u.get();
  s.bind(1, trial_id);
  if (!s.step()) return std::string();
  if (s.type(0) != SQLITE_BLOB)
    throw StorageError(trial_row_where("trial_param_sets", trial_id).str() +
                       ": column data is not a blob");
  return std::string(s.blob_view(0));
}

void write_param_set(Connection& conn, std::int64_t trial_id, std::string_view blob) {
  Use u(
      conn.stmt("INSERT INTO trial_param_sets(trial_id, data) VALUES (?1, ?2) "
                "ON CONFLICT(trial_id) DO UPDATE SET data = excluded.data"));
  u->bind(1, trial_id);
  u->bind_blob(2, blob);
  u->step();
}

const std::string& ParamWriter::distribution_text(const std::string& name, const Distribution& d,
                                                  const std::string& what) {
  auto same = [](const Distribution& a, const Distribution& b) {
    auto bits = [](double x) { return std::bit_cast<std::uint64_t>(x); };
    return a.is_numeric() && b.is_numeric() && a.kind() == b.kind() && a.is_log() == b.is_log() &&
           bits(a.low()) == bits(b.low()) && bits(a.high()) == bits(b.high()) &&
           bits(a.step()) == bits(b.step());
  };
  auto it = texts_.find(name);
  if (it != texts_.end() && same(it->second.first, d)) return it->second.second;
  scratch_ = encode_json(d.to_json(), what + " distribution");
  if (!d.is_numeric()) return scratch_;
  if (texts_.size() >= 1024) texts_.clear();
  return texts_.insert_or_assign(name, std::pair<Distribution, std::string>(d, scratch_))
      .first->second.second;
}

std::int64_t ParamWriter::distribution_id(Connection& conn, const std::string& name,
                                          const Distribution& d, const std::string& what) {
  if (conn.rollbacks != rollbacks_ || ids_.size() >= 4096) {
    ids_.clear();
    rollbacks_ = conn.rollbacks;
  }
  const std::string& text = distribution_text(name, d, what);
  auto it = ids_.find(text);
  if (it != ids_.end()) return it->second;
  std::int64_t id = 0;
  {
    Use u(conn.stmt("SELECT distribution_id FROM distributions WHERE distribution_json = ?1"));
    u->bind(1, text);
    if (u->step()) id = col_int(u.get(), 0, Where{"distributions"}, "distribution_id");
  }
  if (id == 0) {
    Use u(conn.stmt("INSERT INTO distributions(distribution_json) VALUES (?1)"));
    u->bind(1, text);
    u->step();
    id = sqlite3_last_insert_rowid(conn.db());
  }
  ids_.emplace(text, id);
  return id;
}

Json ParamWriter::append_new(Connection& conn, std::string& out, const Row& row) {
  const std::string& name = *row.name;
  const std::string what = "param '" + name + "'";
  check_utf8(name, "param name");
  const Json& value = *row.value;
  if (value.is_number_float() && std::isnan(value.get<double>()))
    throw StorageError(what + ": value must not be NaN");
  const std::int64_t id =
      row.distribution ? distribution_id(conn, name, *row.distribution, what) : kNoDistribution;
  append_param_key(out, name, id);
  append_param_value(out, value, what);
  return value.is_number_float() ? Json(value.get<double>()) : stored_param_value(value, what);
}

std::vector<Json> ParamWriter::insert(Connection& conn, std::int64_t trial_id,
                                      const std::vector<Row>& rows) {
  std::vector<Json> stored;
  if (rows.empty()) return stored;  // no row for a trial without params
  stored.reserve(rows.size());
  blob_.clear();
  append_param_set_header(blob_, rows.size());
  for (const Row& row : rows) stored.push_back(append_new(conn, blob_, row));
  Use u(conn.stmt("INSERT INTO trial_param_sets(trial_id, data) VALUES (?1, ?2)"));
  u->bind(1, trial_id);
  u->bind_blob(2, blob_);
  u->step();
  return stored;
}

ParamWriter::SetResult ParamWriter::set(Connection& conn, std::int64_t trial_id,
                                        const std::string& name, const Json& value,
                                        const Distribution& d) {
  const std::string old = read_param_set(conn, trial_id);
  const Where where = trial_row_where("trial_param_sets", trial_id);
  // The old entries; `at`: where `name` goes (or is).
  std::vector<std::string_view> entries;
  std::size_t at = std::string::npos;
  bool found = false;
  std::string_view old_value;  // the bytes of `name`'s value, when found
  if (!old.empty()) {
    ParamSetReader reader(old, where);
    entries.reserve(reader.size() + 1);
    while (reader.next()) {
      if (at == std::string::npos && reader.name() >= name) {
        at = entries.size();
        if (reader.name() == name) {
          Json stored = reader.value();
          if (!same_value(stored, value)) return {SetOutcome::kConflict, std::move(stored)};
          found = true;
          old_value = reader.value_bytes();
        }
      }
      entries.push_back(reader.entry_bytes());
    }
  }
  if (at == std::string::npos) at = entries.size();
  std::string blob;
  append_param_set_header(blob, entries.size() + (found ? 0 : 1));
  for (std::size_t i = 0; i < at; ++i) blob.append(entries[i]);
  Json stored;
  if (found) {
    append_param_key(blob, name, distribution_id(conn, name, d, "param '" + name + "'"));
    blob.append(old_value);
  } else {
    stored = append_new(conn, blob, {&name, &value, &d});
  }
  for (std::size_t i = at + (found ? 1 : 0); i < entries.size(); ++i) blob.append(entries[i]);
  write_param_set(conn, trial_id, blob);
  if (found) return {SetOutcome::kReplaced, Json()};
  return {SetOutcome::kAdded, std::move(stored)};
}

}  // namespace hps::sqlite
