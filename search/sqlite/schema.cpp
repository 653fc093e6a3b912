// The schema of a SqliteStorage file and its migrations (see schema.h).
#include "search/sqlite/schema.h"

#include <iterator>
#include <string>

#include "search/errors.h"
#include "search/sqlite/connection.h"
#include "search/sqlite_storage.h"

namespace hps::sqlite {
namespace {

// Columns holding doubles that must round-trip bit-exactly (objective,
// intermediate and float param values) are declared without a type: a
// column of REAL affinity stores integral values as integers, which turns
// -0.0 into 0.0. Only REAL (bound with sqlite3_bind_double) or NULL is ever
// written to them.
//
// Migration i (0-based) brings a file from user_version i to i + 1. Append
// new migrations at the end; never edit a released one.
constexpr const char* kMigrations[] = {
    // v1: the initial schema.
    R"sql(
CREATE TABLE studies(
  study_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  direction INTEGER NOT NULL,
  config_json TEXT NOT NULL DEFAULT 'null',
  created REAL NOT NULL
);
CREATE TABLE study_attrs(
  study_id INTEGER NOT NULL REFERENCES studies(study_id) ON DELETE CASCADE,
  kind INTEGER NOT NULL,
  key TEXT NOT NULL,
  value_json TEXT NOT NULL,
  PRIMARY KEY(study_id, kind, key)
) WITHOUT ROWID;
CREATE TABLE trials(
  trial_id INTEGER PRIMARY KEY,
  study_id INTEGER NOT NULL REFERENCES studies(study_id) ON DELETE CASCADE,
  number INTEGER NOT NULL,
  state INTEGER NOT NULL,
  value,  -- REAL or NULL; no declared type (see below)
  datetime_start REAL,
  datetime_complete REAL,
  worker TEXT NOT NULL DEFAULT '',
  fail_reason TEXT NOT NULL DEFAULT '',
  UNIQUE(study_id, number)
);
CREATE INDEX trials_by_study_state ON trials(study_id, state, number);
CREATE TABLE trial_params(
  trial_id INTEGER NOT NULL REFERENCES trials(trial_id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  distribution_json TEXT,
  value_json TEXT NOT NULL,
  value_real,  -- REAL or NULL; no declared type (see below)
  PRIMARY KEY(trial_id, name)
) WITHOUT ROWID;
CREATE TABLE trial_intermediate_values(
  trial_id INTEGER NOT NULL REFERENCES trials(trial_id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  value,  -- REAL or NULL (NaN); no declared type (see below)
  PRIMARY KEY(trial_id, step)
) WITHOUT ROWID;
CREATE TABLE trial_attrs(
  trial_id INTEGER NOT NULL REFERENCES trials(trial_id) ON DELETE CASCADE,
  kind INTEGER NOT NULL,
  key TEXT NOT NULL,
  value_json TEXT NOT NULL,
  PRIMARY KEY(trial_id, kind, key)
) WITHOUT ROWID;
)sql",
    // v2: indexes for the reads that do not load the history
    // (Storage::best_trial, count_trials_by_state, read_trials): the best
    // COMPLETE value of a study is an index range scan; the warm-start and
    // retried trials (system attrs by key) are found without scanning.
    R"sql(
CREATE INDEX trials_by_study_state_value ON trials(study_id, state, value, number);
CREATE INDEX trial_attrs_by_key ON trial_attrs(kind, key, trial_id);
)sql",
    // v3: the number of trials per study and state, kept by triggers, so
    // that count_trials_by_state (status, studies) reads a few rows instead
    // of counting a million index entries; filled from the trials there.
    R"sql(
CREATE TABLE trial_state_counts(
  study_id INTEGER NOT NULL,
  state INTEGER NOT NULL,
  n INTEGER NOT NULL,
  PRIMARY KEY(study_id, state)
) WITHOUT ROWID;
INSERT INTO trial_state_counts(study_id, state, n)
  SELECT study_id, state, count(*) FROM trials GROUP BY study_id, state;
CREATE TRIGGER trial_state_counts_insert AFTER INSERT ON trials BEGIN
  INSERT INTO trial_state_counts(study_id, state, n) VALUES (NEW.study_id, NEW.state, 1)
    ON CONFLICT(study_id, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER trial_state_counts_update AFTER UPDATE OF study_id, state ON trials
  WHEN OLD.study_id IS NOT NEW.study_id OR OLD.state IS NOT NEW.state BEGIN
  UPDATE trial_state_counts SET n = n - 1 WHERE study_id = OLD.study_id AND state = OLD.state;
  INSERT INTO trial_state_counts(study_id, state, n) VALUES (NEW.study_id, NEW.state, 1)
    ON CONFLICT(study_id, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER trial_state_counts_delete AFTER DELETE ON trials BEGIN
  UPDATE trial_state_counts SET n = n - 1 WHERE study_id = OLD.study_id AND state = OLD.state;
END;
)sql",
};
static_assert(std::size(kMigrations) == SqliteStorage::kSchemaVersion,
              "one migration per schema version");

// The tables of schema v1, which every later version keeps: a file with a
// user_version of ours but without them is another program's (user_version
// is free for any program to set).
constexpr const char* kCountV1Tables =
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('studies', "
    "'study_attrs', 'trials', 'trial_params', 'trial_intermediate_values', 'trial_attrs')";
constexpr std::int64_t kV1Tables = 6;

// Refuses a file that is not an hpsearch store: tables but no version, or a
// version without hpsearch's tables. Changes nothing.
void check_ours(const Connection& conn, std::int64_t version, std::int64_t tables,
                std::int64_t v1_tables) {
  if (version == 0 && tables > 0)
    throw StorageError(conn.path() +
                       ": is a SQLite database of another program (it has tables but no "
                       "hpsearch schema version)");
  if (version > 0 && v1_tables != kV1Tables)
    throw StorageError(conn.path() +
                       ": is a SQLite database of another program (its "
                       "user_version is " +
                       std::to_string(version) + " but it lacks hpsearch's tables)");
}

void check_version(const Connection& conn, std::int64_t version) {
  if (version > SqliteStorage::kSchemaVersion)
    throw StorageError(conn.path() + ": schema version " + std::to_string(version) +
                       " is newer than this hpsearch supports (" +
                       std::to_string(SqliteStorage::kSchemaVersion) + "); upgrade hpsearch");
  if (version < 0)
    throw StorageError(conn.path() + ": bad schema version " + std::to_string(version));
}

}  // namespace

std::int64_t inspect_schema(Connection& conn) {
  // Look before changing anything: a file of another program or of a newer
  // hpsearch is left as it is. Version and tables are read in one read
  // transaction: another process creating the schema of a new file between
  // the two reads must not make it look like a file of another program.
  std::int64_t version = 0, tables = 0, v1_tables = 0;
  try {
    conn.exec("BEGIN");
    version = conn.pragma_int("PRAGMA user_version");
    tables = conn.pragma_int("SELECT count(*) FROM sqlite_master");
    v1_tables = conn.pragma_int(kCountV1Tables);
    conn.exec("COMMIT");
  } catch (const StorageError&) {
    const int code = sqlite3_errcode(conn.db());
    conn.rollback_quietly();
    if (code == SQLITE_NOTADB)
      throw StorageError(conn.path() + ": not a SQLite database (file is not a database)");
    if (code == SQLITE_CORRUPT)
      throw StorageError(conn.path() +
                         ": the file is damaged (cut short or overwritten: SQLite says \"database "
                         "disk image is malformed\"); hpsearch cannot read it. Restore it from a "
                         "copy, or try sqlite3's .recover on a copy of it");
    throw;
  }
  check_version(conn, version);
  check_ours(conn, version, tables, v1_tables);
  return version;
}

void migrate(Connection& conn) {
  conn.exec("BEGIN IMMEDIATE");
  try {
    auto version = conn.pragma_int("PRAGMA user_version");  // another process may have migrated
    check_version(conn, version);
    check_ours(conn, version, conn.pragma_int("SELECT count(*) FROM sqlite_master"),
               conn.pragma_int(kCountV1Tables));
    for (auto v = version; v < SqliteStorage::kSchemaVersion; ++v)
      conn.exec(kMigrations[static_cast<std::size_t>(v)]);
    conn.exec(("PRAGMA user_version=" + std::to_string(SqliteStorage::kSchemaVersion)).c_str());
    conn.exec("COMMIT");
  } catch (...) {
    conn.rollback_quietly();
    throw;
  }
}

}  // namespace hps::sqlite
