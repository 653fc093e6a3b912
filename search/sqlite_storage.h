// SqliteStorage: a Storage kept in one SQLite file (WAL mode), so a study
// survives the process and can be read by other processes while it runs.
//
//   auto storage = std::make_shared<hps::SqliteStorage>("fmnist-mlp.db");
//
// File format. The schema version is PRAGMA user_version; migrations are
// applied in order when a file is opened, by every command, read-only ones
// included (v1 = the initial schema; v2 adds the indexes
// trials_by_study_state_value and trial_attrs_by_key, for the reads that do
// not load the history; v3 the per-state counts trial_state_counts; v4
// replaces trial_params by distributions and trial_param_sets, converting
// every row in the one migration transaction; v5 replaces the two indexes
// on (study_id, state, ...) by trials_active, WAITING and RUNNING trials
// only, and study_best, each study's best trial kept by triggers: fewer
// pages written per trial). Tables:
//   studies(study_id, name UNIQUE, direction 0=minimize 1=maximize,
//           config_json, created)
//   study_attrs(study_id, kind 0=user 1=system, key, value_json)
//   trials(trial_id, study_id, number, state 0..4 = TrialState, value,
//          datetime_start REAL, datetime_complete REAL, worker, fail_reason)
//   distributions(distribution_id, distribution_json UNIQUE): each distinct
//           distribution JSON text once per store (never deleted)
//   trial_param_sets(trial_id, data BLOB): all params of a trial in one row,
//           in name order (byte layout in search/sqlite/param_set.h: per
//           param its name, distribution_id or none, and its value)
//   trial_intermediate_values(trial_id, step, value)
//   trial_attrs(trial_id, kind 0=user 1=system, key, value_json)
//   trial_state_counts(study_id, state, n): trials per study and state,
//           kept by triggers
//   study_best(study_id, value, number): the study's best trial, kept by
//           triggers (schema.cpp, v5)
// Times are unix seconds as REAL (microsecond precision: times are truncated
// to whole microseconds before they are stored). Objective and intermediate
// values are stored as REAL, bit-exact including +-inf and -0.0 (their
// columns have no declared type, so SQLite keeps them as given); NaN is
// stored as NULL (an intermediate NULL reads back as NaN; a NaN objective
// value is refused for COMPLETE). A param whose value is a JSON float keeps
// the double's 8 bytes (bit-exact, +-inf and -0.0 included); other values
// keep their JSON type (null, bool, integer, string; arrays and objects as
// JSON text).
//
// Transactions. Every state-changing call is one BEGIN IMMEDIATE ...
// COMMIT transaction (rolled back on any error, so the file is never
// half-written); run_in_transaction() groups calls into one transaction
// (nested calls become savepoints inside it). Trial numbers are assigned as
// max(number)+1 inside the write transaction, so they are unique and
// contiguous even with several writer processes.
//
// Reads. Every read runs the queries it needs in one read transaction (one
// consistent snapshot) and builds new snapshots; a SqliteStorage keeps no
// copy of the history. open_storage() wraps it in a CachingStorage
// (search/caching_storage.h), which serves reads from memory: this class
// tells it of its own writes (set_observer) and of other connections'
// commits (data_version(), PRAGMA data_version).
//
// Code layout (private, not installed): search/sqlite/ holds one concept
// per file: connection (open, pragmas), schema (migrations), statement,
// codec (rows <-> values), param_set (the trial_param_sets blob),
// transaction, checkpointer (WAL checkpoint thread), reads (queries),
// writes (row writes); sqlite_storage.cpp
// coordinates them.
//
// Thread safety: one connection guarded by a (recursive) mutex; every
// method may be called from any thread. A run_in_transaction() holds the
// lock until it ends, so other threads wait rather than join it. Do not
// use one object on both sides of a fork(): the child opens its own.
//
// Files: a new store is created owner-only (0600; SQLite gives its -wal and
// -shm files the store's mode); an existing one keeps its mode
// (search/private_files.h). Temporary data (statement journals, sorts) is
// kept in memory (PRAGMA temp_store=MEMORY), so no file is opened after
// the store: a process out of descriptors still commits. Before each
// commit the path is checked to still name the file that was opened
// (search/file_watch.h): a store deleted or replaced under the process
// makes every later write fail with StorageError, rolled back.
//
// Errors: everything raises StorageError: SQLite errors (with SQLite's
// message), a file that is not a SQLite database, a schema newer than this
// build knows, and damaged rows (bad JSON, unknown state or direction,
// wrong column type), which name the table and row.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "search/storage.h"

namespace hps {

struct SqliteOptions {
  // How long a call waits for another connection's lock (another process
  // writing, or a checkpoint) before it fails with "database is locked".
  // Default 30000 ms. Larger waits out long writers; smaller fails faster.
  // Must be >= 0.
  int busy_timeout_ms = 30000;
  // PRAGMA synchronous: "OFF", "NORMAL" or "FULL" (case-insensitive).
  // Default "NORMAL": in WAL mode a commit survives a process crash but the
  // last commits may be lost on power loss (fsync only at checkpoints);
  // "FULL" fsyncs every commit (durable, slower); "OFF" never fsyncs
  // (fastest, may corrupt the file on power loss).
  std::string synchronous = "NORMAL";
  // WAL checkpoints (copying the write-ahead log into the database file, with
  // its fsyncs) run on a thread of their own, with a connection of their
  // own, once the WAL holds checkpoint_pages pages, so a writer does not wait
  // for them. Default true. false: SQLite's own automatic checkpoint, run by
  // the writing call after its commit (what a plain SQLite connection does).
  // Either way the WAL stays bounded: if it reaches 8 x checkpoint_pages (the
  // thread cannot keep up), the writer checkpoints itself.
  bool background_checkpoint = true;
  // WAL size in pages (of 4096 bytes by default) that starts a checkpoint.
  // Default 1000 (SQLite's default). Must be >= 1.
  int checkpoint_pages = 1000;
  // Whether a store of an older schema version is upgraded in its file when
  // opened (default true: every command does it). false: it is read through
  // a copy in memory upgraded there (its size in RAM), the file unchanged,
  // as a store the user may only read is; for a store that is only read,
  // such as a warm start's earlier study, which an older hpsearch may still
  // use. A new (empty) file gets the schema either way.
  bool upgrade_file = true;

  // Throws ConfigError naming the bad field ("sqlite.busy_timeout_ms", ...).
  void validate() const;
};

class SqliteStorage : public Storage {
 public:
  // The schema version this build writes (PRAGMA user_version).
  static constexpr int kSchemaVersion = 5;

  // Opens `path` (created with the current schema if missing or empty;
  // older schemas are migrated). ":memory:" gives a private in-memory
  // database. Throws ConfigError for bad options, StorageError if the file
  // cannot be opened or is not a SQLite database; StoreRefused (a
  // StorageError; nothing changed) if it is a SQLite database of another
  // program, has a schema version newer than kSchemaVersion, or has an
  // older one while a coordinator runs one of its studies or its writer
  // lock cannot be asked (so it is not upgraded), and StoreRefused "<file>:
  // <rule>" (store_files_refusal, private_files.h)
  // before anything is made or written when the store or a -journal, -wal
  // or -shm file beside it is a symbolic link (the SQLite files), not a
  // regular file, owned by another user or writable by others.
  explicit SqliteStorage(const std::string& path, SqliteOptions options = {});
  ~SqliteStorage() override;
  SqliteStorage(const SqliteStorage&) = delete;
  SqliteStorage& operator=(const SqliteStorage&) = delete;

  const std::string& path() const;
  // Checkpoints by the background thread that copied frames so far (0 when
  // background_checkpoint is off or none was needed). For tests and
  // diagnostics.
  std::int64_t background_checkpoints() const;

  std::int64_t create_study(const std::string& name, StudyDirection direction,
                            const Json& config) override;
  std::optional<std::int64_t> find_study(const std::string& name) override;
  StudyInfo get_study(std::int64_t study_id) override;
  std::vector<StudyInfo> list_studies() override;
  void set_study_config(std::int64_t study_id, const Json& config) override;
  void set_study_user_attr(std::int64_t study_id, const std::string& key,
                           const Json& value) override;
  void set_study_system_attr(std::int64_t study_id, const std::string& key,
                             const Json& value) override;

  // Besides Storage's rules: init.state must be WAITING or RUNNING; a
  // distribution must name a param of init.params; param values must not be
  // NaN. A RUNNING trial gets datetime_start = now.
  TrialPtr create_trial(std::int64_t study_id, const NewTrial& init) override;
  // nullptr when no trial is waiting.
  TrialPtr claim_waiting_trial(std::int64_t study_id, const std::string& worker) override;
  // Throws StorageError if !distribution.contains(value) (so NaN is
  // refused). Setting a param again with the same value (same JSON type)
  // only replaces its distribution.
  void set_trial_param(std::int64_t trial_id, const std::string& name, const Json& value,
                       const Distribution& distribution) override;
  bool set_trial_intermediate_value(std::int64_t trial_id, std::int64_t step,
                                    double value) override;
  // WAITING -> RUNNING sets datetime_start (if unset); a finished state sets
  // datetime_complete, stores `value` if given and not NaN, and for FAIL the
  // fail_reason. Throws StorageError for COMPLETE without a value or with NaN.
  bool set_trial_state(std::int64_t trial_id, TrialState state,
                       std::optional<double> value = std::nullopt,
                       const std::string& fail_reason = "") override;
  void set_trial_user_attr(std::int64_t trial_id, const std::string& key,
                           const Json& value) override;
  void set_trial_system_attr(std::int64_t trial_id, const std::string& key,
                             const Json& value) override;
  TrialPtr get_trial(std::int64_t trial_id) override;
  TrialPtr get_trial_by_number(std::int64_t study_id, std::int64_t number) override;
  // Defaults as in Storage (same values, so calls through either type agree).
  std::vector<TrialPtr> get_all_trials(std::int64_t study_id,
                                       const std::vector<TrialState>& states = {}) override;
  std::int64_t count_trials(std::int64_t study_id,
                            const std::vector<TrialState>& states = {}) override;
  // Indexed queries, in constant memory (Storage's rules; see there).
  // count_trials_by_state: the rows of trial_state_counts, less the
  // warm-start and retried trials found by trial_attrs_by_key. best_trial:
  // the row of study_best, checked against its trial (a scan of the study
  // if it does not hold). list_study_summaries: the rows of
  // trial_state_counts. read_trials: one statement walks the selected ids in
  // order; each batch is loaded with one query per table, all inside one
  // read transaction (inside run_in_transaction: that one).
  TrialCounts count_trials_by_state(std::int64_t study_id) override;
  TrialPtr best_trial(std::int64_t study_id) override;
  std::vector<StudySummary> list_study_summaries() override;
  void read_trials(std::int64_t study_id, const TrialQuery& query,
                   const TrialVisitor& visit) override;
  // One transaction around fn (BEGIN IMMEDIATE ... COMMIT); nested calls
  // are savepoints (an exception rolls back only the nested part, then
  // propagates). If fn throws, nothing it wrote is kept and the exception
  // propagates.
  void run_in_transaction(const std::function<void()>& fn) override;
  // PRAGMA data_version of this connection.
  std::optional<std::int64_t> data_version() override;
  // Supported: returns true.
  bool set_observer(StorageObserver* observer) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hps
