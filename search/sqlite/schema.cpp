// The schema of a SqliteStorage file and its migrations (see schema.h).
#include "search/sqlite/schema.h"

#include <iterator>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "search/errors.h"
#include "search/sqlite/codec.h"
#include "search/sqlite/connection.h"
#include "search/sqlite/param_set.h"
#include "search/sqlite_storage.h"
#include "search/writer_lock.h"

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
    // v4: a trial's params in one row (trial_param_sets.data, encoded as in
    // search/sqlite/param_set.h), their distributions once per store
    // (distributions); a resume decodes one row per trial, not one per
    // param. convert_trial_params() then moves the trial_params rows over and
    // drops that table.
    R"sql(
CREATE TABLE distributions(
  distribution_id INTEGER PRIMARY KEY,
  distribution_json TEXT NOT NULL UNIQUE
);
CREATE TABLE trial_param_sets(
  trial_id INTEGER PRIMARY KEY REFERENCES trials(trial_id) ON DELETE CASCADE,
  data BLOB NOT NULL
);
)sql",
    // v5: fewer index pages written per trial (issue #16's dispatch rate:
    // 13 WAL frames per commit down to 7). The two indexes on (study_id,
    // state, ...) took an entry out and put one in at every state change,
    // and trials_by_study_state_value's went to a page chosen by the value
    // (a different one for nearly every trial). Now:
    // - trials_active indexes only WAITING and RUNNING trials (a claim of a
    //   waiting trial, a --state RUNNING listing); a query uses it when its
    //   WHERE says "state IN (0, 1)" word for word (SQLite's rule for
    //   partial indexes);
    // - study_best keeps each study's best trial (value, number), kept by
    //   triggers: lifecycle::is_best_candidate (COMPLETE, a value, not a
    //   warm-start copy) and ranks_before (the better value, then the lower
    //   number), in the study's direction (studies.direction 1 = maximize).
    //   A reader checks the row against its trial and scans the study when
    //   it does not hold (reads.cpp: load_best_trial); the next finished
    //   trial's trigger makes such a row again from a scan. So a row made
    //   stale by a write the triggers do not see (a deleted trial, a
    //   warm_start attr added later, a hand edit that breaks it) costs
    //   time, not a wrong answer. Not seen: a hand edit that points the row
    //   at a worse trial that is a candidate, or changes a study's
    //   direction.
    // Filled here from the trials there (warm-start copies have their attr
    // by then: a finished copy is written RUNNING, then finished).
    R"sql(
DROP INDEX IF EXISTS trials_by_study_state;
DROP INDEX IF EXISTS trials_by_study_state_value;
CREATE INDEX trials_active ON trials(study_id, state, number) WHERE state IN (0, 1);
CREATE TABLE study_best(
  study_id INTEGER PRIMARY KEY REFERENCES studies(study_id) ON DELETE CASCADE,
  value NOT NULL,  -- REAL; no declared type, as trials.value
  number INTEGER NOT NULL
);
INSERT INTO study_best(study_id, value, number)
  SELECT t.study_id, t.value, min(t.number) FROM trials t
  JOIN (SELECT u.study_id AS id,
               CASE s.direction WHEN 1 THEN max(u.value) ELSE min(u.value) END AS best
          FROM trials u JOIN studies s ON s.study_id = u.study_id
         WHERE u.state = 2 AND typeof(u.value) = 'real' AND NOT EXISTS (SELECT 1 FROM trial_attrs a
               WHERE a.trial_id = u.trial_id AND a.kind = 1 AND a.key = 'warm_start')
         GROUP BY u.study_id) b ON b.id = t.study_id AND b.best = t.value
  WHERE t.state = 2 AND NOT EXISTS (SELECT 1 FROM trial_attrs a
        WHERE a.trial_id = t.trial_id AND a.kind = 1 AND a.key = 'warm_start')
  GROUP BY t.study_id;
)sql",
};
static_assert(std::size(kMigrations) == SqliteStorage::kSchemaVersion,
              "one migration per schema version");

// The tables of schema v1 that every later version keeps (v4 dropped
// trial_params): a file with a user_version of ours but without them is
// another program's (user_version is free for any program to set).
constexpr const char* kCountV1Tables =
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('studies', "
    "'study_attrs', 'trials', 'trial_intermediate_values', 'trial_attrs')";
constexpr std::int64_t kV1Tables = 5;

// The version whose migration is followed by convert_trial_params().
constexpr std::int64_t kParamSetsVersion = 4;

// The version whose migration is followed by create_study_best_triggers().
constexpr std::int64_t kStudyBestVersion = 5;

// The study_best triggers of one write event (@EVENT@), named
// study_best_@NAME@ and study_best_@NAME@_repair.
// Two triggers per write, whichever fires first: one moves the row to a
// better NEW when the row holds (its trial a candidate with its value);
// the other, only when the row is missing, not a number, or would be
// replaced but does not hold (a hand edit, a warm_start attr added later),
// makes it again from one scan of the study (NEW among its trials). Most
// trials neither beat the best nor find it broken: two lookups by key.
constexpr const char* kStudyBestTriggers = R"sql(
CREATE TRIGGER study_best_@NAME@ AFTER @EVENT@ ON trials
  WHEN NEW.state = 2 AND typeof(NEW.value) = 'real' AND NOT EXISTS (SELECT 1 FROM trial_attrs a
       WHERE a.trial_id = NEW.trial_id AND a.kind = 1 AND a.key = 'warm_start') BEGIN
  UPDATE study_best SET value = NEW.value, number = NEW.number
   WHERE study_id = NEW.study_id AND typeof(value) = 'real'
     AND (CASE (SELECT direction FROM studies WHERE study_id = NEW.study_id)
          WHEN 1 THEN NEW.value > value ELSE NEW.value < value END
          OR (NEW.value = value AND NEW.number < number))
     AND EXISTS (SELECT 1 FROM trials t
         WHERE t.study_id = study_best.study_id AND t.number = study_best.number
           AND t.value = study_best.value AND t.state = 2 AND NOT EXISTS (SELECT 1
               FROM trial_attrs a WHERE a.trial_id = t.trial_id AND a.kind = 1
                 AND a.key = 'warm_start'));
END;
CREATE TRIGGER study_best_@NAME@_repair AFTER @EVENT@ ON trials
  WHEN NEW.state = 2 AND typeof(NEW.value) = 'real' AND NOT EXISTS (SELECT 1 FROM trial_attrs a
       WHERE a.trial_id = NEW.trial_id AND a.kind = 1 AND a.key = 'warm_start')
   AND NOT EXISTS (SELECT 1 FROM study_best WHERE study_id = NEW.study_id
       AND typeof(value) = 'real'
       AND (NOT CASE (SELECT direction FROM studies WHERE study_id = NEW.study_id)
                WHEN 1 THEN NEW.value >= value ELSE NEW.value <= value END
            OR EXISTS (SELECT 1 FROM trials t
         WHERE t.study_id = study_best.study_id AND t.number = study_best.number
           AND t.value = study_best.value AND t.state = 2 AND NOT EXISTS (SELECT 1
               FROM trial_attrs a WHERE a.trial_id = t.trial_id AND a.kind = 1
                 AND a.key = 'warm_start')))) BEGIN
  DELETE FROM study_best WHERE study_id = NEW.study_id;
  INSERT INTO study_best(study_id, value, number)
    SELECT t.study_id, t.value, t.number FROM trials t
     WHERE t.study_id = NEW.study_id AND t.state = 2 AND typeof(t.value) = 'real'
       AND NOT EXISTS (SELECT 1 FROM trial_attrs a
           WHERE a.trial_id = t.trial_id AND a.kind = 1 AND a.key = 'warm_start')
     ORDER BY CASE (SELECT direction FROM studies WHERE study_id = NEW.study_id)
              WHEN 1 THEN -t.value ELSE t.value END, t.number
     LIMIT 1;
END;
)sql";

// Creates the study_best triggers (schema v5) for finishing a trial
// (UPDATE OF state, value) and for a row inserted already COMPLETE
// (another program's: our writes insert RUNNING, then finish).
void create_study_best_triggers(Connection& conn) {
  for (const auto& [event, name] :
       {std::pair{"UPDATE OF state, value", "finish"}, std::pair{"INSERT", "insert"}}) {
    std::string sql = kStudyBestTriggers;
    for (const auto& [from, to] : {std::pair{std::string("@EVENT@"), std::string(event)},
                                   std::pair{std::string("@NAME@"), std::string(name)}})
      for (auto at = sql.find(from); at != std::string::npos; at = sql.find(from, at + to.size()))
        sql.replace(at, from.size(), to);
    conn.exec(sql.c_str());
  }
}

// Moves every trial_params row (schema v1 to v3) into trial_param_sets and
// distributions, then drops trial_params. Rows of one trial become one
// blob in name order (the table's key order); a distribution_json text is
// kept as it is (a bad one fails when read, as before), and so is a
// value_json that does not parse. Rows of a trial that does not exist
// (written with foreign keys off) are left out. Throws StorageError for a
// row whose columns have the wrong type, naming it.
void convert_trial_params(Connection& conn) {
  Statement rows(conn.db(),
                 "SELECT p.trial_id, p.name, p.distribution_json, p.value_json, p.value_real "
                 "FROM trial_params p JOIN trials t ON t.trial_id = p.trial_id "
                 "ORDER BY p.trial_id, p.name");
  Statement add_set(conn.db(), "INSERT INTO trial_param_sets(trial_id, data) VALUES (?1, ?2)");
  Statement add_distribution(conn.db(), "INSERT INTO distributions(distribution_json) VALUES (?1)");
  std::unordered_map<std::string, std::int64_t> ids;
  std::int64_t trial = 0;
  std::size_t count = 0;
  std::string params, blob;
  auto flush = [&] {
    if (count == 0) return;
    blob.clear();
    append_param_set_header(blob, count);
    blob += params;
    add_set.bind(1, trial);
    add_set.bind_blob(2, blob);
    add_set.step();
    add_set.reset();
    params.clear();
    count = 0;
  };
  while (rows.step()) {
    const std::int64_t id = col_int(rows, 0, Where{"trial_params"}, "trial_id");
    Where where = trial_row_where("trial_params", id);
    const std::string name = col_text(rows, 1, where, "name");
    where.key_name = "name";
    where.key = &name;
    if (id != trial) {
      flush();
      trial = id;
    }
    std::int64_t distribution = kNoDistribution;
    if (rows.type(2) != SQLITE_NULL) {
      std::string text = col_text(rows, 2, where, "distribution_json");
      auto it = ids.find(text);
      if (it == ids.end()) {
        add_distribution.bind(1, text);
        add_distribution.step();
        add_distribution.reset();
        it = ids.emplace(std::move(text), sqlite3_last_insert_rowid(conn.db())).first;
      }
      distribution = it->second;
    }
    append_param_key(params, name, distribution);
    if (auto real = col_opt_real(rows, 4, where, "value_real")) {
      // A REAL is never NaN (SQLite stores NaN as NULL): it always encodes,
      // so no row name is built for an error.
      append_param_value(params, Json(*real), "value_real");
    } else {
      std::string text = col_text(rows, 3, where, "value_json");
      try {
        append_param_value(params, decode_json(text, where, "value_json"), where.str());
      } catch (const StorageError&) {
        append_param_json_text(params, text);  // fails when read, as before
      }
    }
    ++count;
  }
  flush();
  conn.exec("DROP TABLE trial_params");
}

// Refuses a file that is not an hpsearch store: tables but no version, or a
// version without hpsearch's tables. Changes nothing.
void check_ours(const Connection& conn, std::int64_t version, std::int64_t tables,
                std::int64_t v1_tables) {
  if (version == 0 && tables > 0)
    throw StoreRefused(conn.path() +
                       ": is a SQLite database of another program (it has tables but no "
                       "hpsearch schema version)");
  if (version > 0 && v1_tables != kV1Tables)
    throw StoreRefused(conn.path() +
                       ": is a SQLite database of another program (its "
                       "user_version is " +
                       std::to_string(version) + " but it lacks hpsearch's tables)");
}

// The objects this schema version has besides schema v1's tables: a store
// of this version without one of them was changed by hand or by another
// program (without a trigger, counts or the best would go silently wrong).
constexpr const char* kCurrentObjects[] = {"trials_active",
                                           "trial_attrs_by_key",
                                           "trial_state_counts",
                                           "trial_state_counts_insert",
                                           "trial_state_counts_update",
                                           "trial_state_counts_delete",
                                           "distributions",
                                           "trial_param_sets",
                                           "study_best",
                                           "study_best_finish",
                                           "study_best_finish_repair",
                                           "study_best_insert",
                                           "study_best_insert_repair"};

// The names of kCurrentObjects that `conn`'s schema lacks, comma-separated
// ("" if none). Called inside a read transaction.
std::string missing_objects(Connection& conn) {
  std::string sql = "SELECT name FROM sqlite_master WHERE name IN (";
  for (std::size_t i = 0; i < std::size(kCurrentObjects); ++i)
    sql += std::string(i ? ", '" : "'") + kCurrentObjects[i] + "'";
  Statement s(conn.db(), sql + ")");
  std::set<std::string> present;
  while (s.step()) present.insert(col_text(s, 0, Where{"sqlite_master"}, "name"));
  std::string missing;
  for (const char* name : kCurrentObjects)
    if (!present.count(name)) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return missing;
}

void check_version(const Connection& conn, std::int64_t version) {
  if (version > SqliteStorage::kSchemaVersion)
    throw StoreRefused(conn.path() + ": schema version " + std::to_string(version) +
                       " is newer than this hpsearch supports (" +
                       std::to_string(SqliteStorage::kSchemaVersion) + "); upgrade hpsearch");
  if (version < 0)
    throw StoreRefused(conn.path() + ": bad schema version " + std::to_string(version));
}

}  // namespace

std::int64_t inspect_schema(Connection& conn) {
  // Look before changing anything: a file of another program or of a newer
  // hpsearch is left as it is. Version and tables are read in one read
  // transaction: another process creating the schema of a new file between
  // the two reads must not make it look like a file of another program.
  std::int64_t version = 0, tables = 0, v1_tables = 0;
  std::string missing;
  try {
    conn.exec("BEGIN");
    version = conn.pragma_int("PRAGMA user_version");
    tables = conn.pragma_int("SELECT count(*) FROM sqlite_master");
    v1_tables = conn.pragma_int(kCountV1Tables);
    if (version == SqliteStorage::kSchemaVersion) missing = missing_objects(conn);
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
  if (!missing.empty())
    throw StoreRefused(conn.path() + ": is damaged: its schema (version " +
                       std::to_string(version) + ") lacks " + missing +
                       ", dropped by hand or by another program; without them the counts and "
                       "the best trial would be wrong. Restore the file from a copy");
  return version;
}

namespace {

// Refuses to upgrade a store of schema `version` while a coordinator runs
// a study of it: that coordinator is of an older hpsearch (this one
// upgrades a file when it opens it), and its next write would fail on the
// new tables (v4 dropped trial_params). A writer lock that cannot be asked
// (a lock file planted as a link, a folder, another user's: the text of
// WriterLock::lock_file_refusal, which `hpsearch run` refuses too) cannot
// say that none runs: refused as well.
void check_no_coordinator(const Connection& conn, std::int64_t version) {
  std::optional<WriterLockHolder> holder;
  try {
    holder = WriterLock::query_any(conn.path());
  } catch (const Error& e) {
    throw StoreRefused(conn.path() + ": has schema version " + std::to_string(version) +
                       ", and whether a coordinator runs one of its studies cannot be asked (" +
                       e.what() + "): not upgraded to version " +
                       std::to_string(SqliteStorage::kSchemaVersion) +
                       " under one that may run; nothing was changed");
  }
  if (!holder) return;
  throw StoreRefused(conn.path() + ": has schema version " + std::to_string(version) +
                     " and a coordinator runs one of its studies (" + holder->describe() +
                     "): an older hpsearch, which this one's upgrade of the file to version " +
                     std::to_string(SqliteStorage::kSchemaVersion) +
                     " would stop; nothing was changed. Read the study with the hpsearch that "
                     "runs it, or open it with this one once that coordinator has ended");
}

}  // namespace

const char* migration_sql(std::size_t i) {
  if (i >= std::size(kMigrations)) throw std::out_of_range("no migration " + std::to_string(i));
  return kMigrations[i];
}

void migrate(Connection& conn) {
  conn.exec("BEGIN IMMEDIATE");
  try {
    auto version = conn.pragma_int("PRAGMA user_version");  // another process may have migrated
    check_version(conn, version);
    check_ours(conn, version, conn.pragma_int("SELECT count(*) FROM sqlite_master"),
               conn.pragma_int(kCountV1Tables));
    if (version > 0 && version < SqliteStorage::kSchemaVersion) check_no_coordinator(conn, version);
    for (auto v = version; v < SqliteStorage::kSchemaVersion; ++v) {
      conn.exec(kMigrations[static_cast<std::size_t>(v)]);
      if (v + 1 == kParamSetsVersion) convert_trial_params(conn);
      if (v + 1 == kStudyBestVersion) create_study_best_triggers(conn);
    }
    conn.exec(("PRAGMA user_version=" + std::to_string(SqliteStorage::kSchemaVersion)).c_str());
    conn.exec("COMMIT");
  } catch (...) {
    conn.rollback_quietly();
    throw;
  }
}

}  // namespace hps::sqlite
