// The statements that write a SqliteStorage's rows (see writes.h).
#include "search/sqlite/writes.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "search/sqlite/codec.h"

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
                "ORDER BY number LIMIT 1"));
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

std::optional<Json> stored_param(Connection& conn, std::int64_t trial_id, const std::string& name) {
  Use u(conn.stmt(
      "SELECT value_json, value_real FROM trial_params WHERE trial_id = ?1 AND name = ?2"));
  Statement& s = u.get();
  s.bind(1, trial_id);
  s.bind(2, name);
  if (!s.step()) return std::nullopt;
  Where where = trial_row_where("trial_params", trial_id);
  where.key_name = "name";
  where.key = &name;
  return decode_param_value(s, 0, 1, where);
}

void update_param_distribution(Connection& conn, std::int64_t trial_id, const std::string& name,
                               const std::string& distribution_json) {
  Use u(conn.stmt(
      "UPDATE trial_params SET distribution_json = ?3 WHERE trial_id = ?1 AND name = ?2"));
  u->bind(1, trial_id);
  u->bind(2, name);
  u->bind(3, distribution_json);
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

namespace {

// "INSERT ... VALUES (?, ?, ?, ?, ?), ..." for 1..kRowsPerInsert rows.
const std::string& insert_params_sql(std::size_t n) {
  static const std::vector<std::string> sql = [] {
    std::vector<std::string> out(ParamWriter::kRowsPerInsert + 1);
    for (std::size_t k = 1; k <= ParamWriter::kRowsPerInsert; ++k) {
      out[k] =
          "INSERT INTO trial_params(trial_id, name, distribution_json, value_json, value_real) "
          "VALUES ";
      for (std::size_t r = 0; r < k; ++r) out[k] += r ? ", (?, ?, ?, ?, ?)" : "(?, ?, ?, ?, ?)";
    }
    return out;
  }();
  return sql[n];
}

}  // namespace

std::vector<Json> ParamWriter::insert(Connection& conn, std::int64_t trial_id,
                                      const std::vector<Row>& rows) {
  std::vector<std::string> texts(rows.size());
  for (std::size_t first = 0; first < rows.size(); first += kRowsPerInsert) {
    const std::size_t n = std::min(kRowsPerInsert, rows.size() - first);
    Use u(conn.stmt(insert_params_sql(n)));
    Statement& s = u.get();
    for (std::size_t r = 0; r < n; ++r) {
      const Row& row = rows[first + r];
      const std::string& name = *row.name;
      const Json& value = *row.value;
      std::string what = "param '" + name + "'";
      check_utf8(name, "param name");
      if (value.is_number_float() && std::isnan(value.get<double>()))
        throw StorageError(what + ": value must not be NaN");
      const int c = static_cast<int>(5 * r);
      s.bind(c + 1, trial_id);
      s.bind(c + 2, name);
      if (row.distribution) {
        s.bind(c + 3, distribution_text(name, *row.distribution, what));
      } else {
        s.bind_null(c + 3);
      }
      std::string& text = texts[first + r];
      text = encode_json(value, what);
      s.bind(c + 4, text);
      if (value.is_number_float()) {
        s.bind(c + 5, value.get<double>());
      } else {
        s.bind_null(c + 5);
      }
    }
    s.step();
  }
  std::vector<Json> stored;
  stored.reserve(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Json& value = *rows[r].value;
    if (value.is_number_float()) {
      stored.emplace_back(value.get<double>());
      continue;
    }
    stored.push_back(decode_keyed(texts[r], "trial_params", trial_id, "name", *rows[r].name));
  }
  return stored;
}

}  // namespace hps::sqlite
