// SqliteStorage: see sqlite_storage.h for the file format and the rules.
#include "search/sqlite_storage.h"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "search/file_watch.h"
#include "search/private_files.h"

namespace hps {
namespace {

constexpr int kKindUser = 0;
constexpr int kKindSystem = 1;

// ------------------------------------------------------------------ schema

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
};
static_assert(std::size(kMigrations) == SqliteStorage::kSchemaVersion,
              "one migration per schema version");

// ------------------------------------------------------------------ statements

// A prepared statement; finalized on destruction.
class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql) : db_(db), sql_(sql) {
    int rc = sqlite3_prepare_v3(db, sql_.data(), static_cast<int>(sql_.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
    if (rc != SQLITE_OK) fail(rc, "prepare");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void bind(int i, std::int64_t v) { check(sqlite3_bind_int64(stmt_, i, v)); }
  void bind(int i, int v) { check(sqlite3_bind_int64(stmt_, i, v)); }
  // NaN is stored as NULL by SQLite.
  void bind(int i, double v) { check(sqlite3_bind_double(stmt_, i, v)); }
  void bind(int i, std::optional<double> v) {
    if (v) {
      bind(i, *v);
    } else {
      bind_null(i);
    }
  }
  void bind(int i, std::string_view v) {
    check(sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  void bind(int i, const std::string& v) { bind(i, std::string_view(v)); }
  void bind(int i, const char* v) { bind(i, std::string_view(v)); }
  void bind_null(int i) { check(sqlite3_bind_null(stmt_, i)); }

  // Runs one step: true when a row is available, false when done.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(rc, "step");
  }
  // Ends a use: the statement no longer holds a read snapshot.
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  int type(int col) const { return sqlite3_column_type(stmt_, col); }
  std::int64_t int64(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  const std::string& sql() const { return sql_; }
  std::string text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    int n = sqlite3_column_bytes(stmt_, col);
    return p ? std::string(p, static_cast<std::size_t>(n)) : std::string();
  }

  bool in_use = false;

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail(rc, "bind");
  }
  [[noreturn]] void fail(int rc, const char* what) {
    const char* file = db_ ? sqlite3_db_filename(db_, "main") : nullptr;
    std::string msg = (file && *file ? std::string(file) + ": " : std::string()) + "SQLite " +
                      what + " failed: " + sqlite3_errstr(rc);
    if (db_ && sqlite3_errcode(db_) == rc) msg += " (" + std::string(sqlite3_errmsg(db_)) + ")";
    msg += " in: " + sql_;
    throw StorageError(msg);
  }

  sqlite3* db_;
  std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

// One use of a cached statement: resets it (and its bindings) when done, so
// no read snapshot stays open between calls.
class Use {
 public:
  explicit Use(Statement& s) : s_(s) {
    if (s_.in_use) throw StorageError("internal error: statement used re-entrantly");
    s_.in_use = true;
  }
  ~Use() {
    s_.reset();
    s_.in_use = false;
  }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  Statement* operator->() { return &s_; }
  Statement& get() { return s_; }

 private:
  Statement& s_;
};

// ------------------------------------------------------------------ encoding

// Checks that `text` is valid UTF-8 (nlohmann refuses to dump anything else).
void check_utf8(const std::string& text, const std::string& what) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return;  // ASCII
  try {
    (void)Json(text).dump();
  } catch (const Json::exception&) {
    throw StorageError(what + " is not valid UTF-8");
  }
}

std::string encode_json(const Json& value, const std::string& what) {
  try {
    return value.dump();
  } catch (const Json::exception& e) {
    throw StorageError(what + ": cannot store value as JSON: " + e.what());
  }
}

// Names a row in error messages: "trial_params row trial_id=7 name='lr'".
// Built only when an error is raised (reads stay cheap).
struct Where {
  const char* table;
  const char* id_name = nullptr;  // null: the id column itself is unreadable
  std::int64_t id = 0;
  const char* key_name = nullptr;
  const std::string* key = nullptr;

  std::string str() const {
    std::string out = std::string(table) + " row";
    if (id_name) out += std::string(" ") + id_name + "=" + std::to_string(id);
    if (key_name && key) out += std::string(" ") + key_name + "='" + *key + "'";
    return out;
  }
};

Where trial_row_where(const char* table, std::int64_t trial_id) {
  return {table, "trial_id", trial_id};
}

Where study_row_where(const char* table, std::int64_t study_id) {
  return {table, "study_id", study_id};
}

Json decode_json(const std::string& text, const Where& where, const char* column) {
  if (json_too_deep_at(text) != std::string_view::npos)
    throw StorageError(where.str() + ": column " + column + ": invalid JSON: nested deeper than " +
                       std::to_string(kMaxJsonDepth) + " levels");
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw StorageError(where.str() + ": column " + column + ": invalid JSON: " + e.what());
  }
}

// A JSON column of a trial's keyed row (trial_params by name, trial_attrs by
// key) decoded as a read of that row decodes it (errors name the row).
Json decode_keyed(const std::string& text, const char* table, std::int64_t trial_id,
                  const char* key_name, const std::string& key) {
  Where where = trial_row_where(table, trial_id);
  where.key_name = key_name;
  where.key = &key;
  return decode_json(text, where, "value_json");
}

using Micros = std::chrono::microseconds;

TimePoint now_us() { return std::chrono::floor<Micros>(Clock::now()); }

double encode_time(TimePoint t) {
  auto us = std::chrono::floor<Micros>(t.time_since_epoch()).count();
  return static_cast<double>(us) / 1e6;
}

// Largest |seconds| stored: well inside what TimePoint (nanoseconds, int64)
// can hold (about year 2262).
constexpr double kMaxTimeSeconds = 9.0e9;

// What reading back encode_time(t) gives (col_time below): a snapshot
// updated in memory after a write equals one read from the file.
TimePoint stored_time(TimePoint t) {
  auto us = Micros(std::llround(encode_time(t) * 1e6));
  return TimePoint(std::chrono::duration_cast<Clock::duration>(us));
}

// Columns read with type checks: a damaged row gives a StorageError naming
// the table, row and column instead of garbage.
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

std::string col_text(Statement& s, int col, const Where& where, const char* name,
                     bool null_ok = false) {
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

// A param value: value_real when set (floats, bit-exact and +-inf safe),
// else value_json (keeps the JSON type).
Json decode_param_value(Statement& s, int json_col, int real_col, const Where& where) {
  auto real = col_opt_real(s, real_col, where, "value_real");
  if (real) return Json(*real);
  return decode_json(col_text(s, json_col, where, "value_json"), where, "value_json");
}

bool same_value(const Json& a, const Json& b) {
  if (a.is_primitive() && b.is_primitive()) return same_json_scalar(a, b);
  return a == b;
}

// SQL to load trials: by study (all its trials) or one trial by id. ?1 is
// the study_id or the trial_id.
struct TrialQueries {
  const char* trials;
  const char* params;
  const char* intermediates;
  const char* attrs;
};

constexpr TrialQueries kByStudy = {
    "SELECT trial_id, number, state, value, datetime_start, datetime_complete, worker, "
    "fail_reason FROM trials WHERE study_id = ?1 ORDER BY number",
    "SELECT p.trial_id, p.name, p.distribution_json, p.value_json, p.value_real "
    "FROM trial_params p JOIN trials t ON t.trial_id = p.trial_id WHERE t.study_id = ?1",
    "SELECT v.trial_id, v.step, v.value FROM trial_intermediate_values v "
    "JOIN trials t ON t.trial_id = v.trial_id WHERE t.study_id = ?1",
    "SELECT a.trial_id, a.kind, a.key, a.value_json FROM trial_attrs a "
    "JOIN trials t ON t.trial_id = a.trial_id WHERE t.study_id = ?1",
};

constexpr TrialQueries kByTrial = {
    "SELECT trial_id, number, state, value, datetime_start, datetime_complete, worker, "
    "fail_reason FROM trials WHERE trial_id = ?1",
    "SELECT trial_id, name, distribution_json, value_json, value_real "
    "FROM trial_params WHERE trial_id = ?1",
    "SELECT trial_id, step, value FROM trial_intermediate_values WHERE trial_id = ?1",
    "SELECT trial_id, kind, key, value_json FROM trial_attrs WHERE trial_id = ?1",
};

bool by_number(const TrialPtr& t, std::int64_t number) { return t->number < number; }

}  // namespace

// ------------------------------------------------------------------ options

void SqliteOptions::validate() const {
  if (busy_timeout_ms < 0)
    throw ConfigError("sqlite.busy_timeout_ms",
                      "must be >= 0, got " + std::to_string(busy_timeout_ms));
  if (checkpoint_pages < 1)
    throw ConfigError("sqlite.checkpoint_pages",
                      "must be >= 1, got " + std::to_string(checkpoint_pages));
  std::string s = synchronous;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  if (s != "OFF" && s != "NORMAL" && s != "FULL")
    throw ConfigError("sqlite.synchronous",
                      "must be one of OFF, NORMAL, FULL, got '" + synchronous + "'");
}

// ------------------------------------------------------------------ Impl

struct SqliteStorage::Impl {
  std::string path;
  SqliteOptions options;
  sqlite3* db = nullptr;
  // Recursive: run_in_transaction() holds it while fn calls other methods.
  std::recursive_mutex mutex;
  std::unordered_map<std::string_view, std::unique_ptr<Statement>> statements;
  int depth = 0;  // open transaction levels (0: none; 1: BEGIN; >1: savepoints)

  // Caches, valid while data_version is unchanged (and no rollback happened).
  std::int64_t data_version = -1;
  std::optional<std::map<std::int64_t, StudyInfo>> studies;
  std::unordered_map<std::int64_t, std::vector<TrialPtr>> trials;  // by study, number order
  struct Location {
    std::int64_t study_id;
    std::int64_t number;
  };
  std::unordered_map<std::int64_t, Location> trial_loc;  // trial_id -> where in `trials`
  // The store file as opened: every commit first checks that the path still
  // names it (search/file_watch.h). None for ":memory:" and temporary files.
  std::optional<FileWatch> watch;

  ~Impl() {
    checkpointer.reset();  // its connection closes before ours
    statements.clear();
    if (db) sqlite3_close_v2(db);
  }

  // ---------------------------------------------------------------- checkpoints

  // Copies the WAL into the database file on its own thread and connection
  // (SQLITE_CHECKPOINT_PASSIVE: it never blocks the writer or readers, and
  // the writer restarts the WAL from its beginning once all of it is copied).
  class Checkpointer {
   public:
    explicit Checkpointer(std::string path) : path_(std::move(path)), thread_([this] { run(); }) {}
    ~Checkpointer() {
      {
        std::lock_guard lock(mutex_);
        quit_ = true;
      }
      wake_.notify_one();
      thread_.join();
    }
    Checkpointer(const Checkpointer&) = delete;
    Checkpointer& operator=(const Checkpointer&) = delete;

    // Asks for a checkpoint (cheap when one is already asked for or running).
    void request() {
      {
        std::lock_guard lock(mutex_);
        if (pending_) return;
        pending_ = true;
      }
      wake_.notify_one();
    }
    std::int64_t completed() const { return completed_.load(); }

    // A checkpoint on the writer's connection, after the thread's current
    // one (if any) ends, so that it is not refused as busy.
    void checkpoint_here(sqlite3* writer, const char* name) {
      std::lock_guard running(running_);
      sqlite3_wal_checkpoint_v2(writer, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    }

   private:
    void run() {
      sqlite3* conn = nullptr;
      while (true) {
        {
          std::unique_lock lock(mutex_);
          wake_.wait(lock, [&] { return pending_ || quit_; });
          if (quit_) break;
          pending_ = false;
        }
        // A connection checkpoints only once it has opened the WAL, which its
        // first read does (SQLite before 3.42 silently does nothing otherwise).
        if (!conn &&
            (sqlite3_open_v2(path_.c_str(), &conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                             nullptr) != SQLITE_OK ||
             sqlite3_exec(conn, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) !=
                 SQLITE_OK)) {
          sqlite3_close_v2(conn);  // the writer's own fallback checkpoints instead
          conn = nullptr;
          continue;
        }
        int log = 0, copied = 0;
        int rc = SQLITE_OK;
        {
          std::lock_guard running(running_);
          rc = sqlite3_wal_checkpoint_v2(conn, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
        }
        if (rc == SQLITE_OK && copied > 0) ++completed_;
        // SQLITE_BUSY: another checkpoint runs; the next request retries.
      }
      if (conn) sqlite3_close_v2(conn);
    }

    std::string path_;
    std::mutex running_;  // held while a checkpoint of this process runs
    std::mutex mutex_;
    std::condition_variable wake_;
    bool pending_ = false;
    bool quit_ = false;
    std::atomic<std::int64_t> completed_{0};
    std::thread thread_;  // last: starts after the members above exist
  };
  std::unique_ptr<Checkpointer> checkpointer;
  int last_wal_pages = 0;      // the WAL's size after the last commit
  int next_checkpoint_at = 0;  // WAL size that asks for the next checkpoint

  // sqlite3_wal_hook: called by the writing thread after each commit with
  // the WAL's size in pages.
  static int on_wal_commit(void* arg, sqlite3* db, const char* name, int pages) {
    auto* self = static_cast<Impl*>(arg);
    const int threshold = self->options.checkpoint_pages;
    if (pages < self->last_wal_pages || self->next_checkpoint_at == 0)
      self->next_checkpoint_at = threshold;  // the WAL restarted from its beginning
    self->last_wal_pages = pages;
    if (pages >= 8 * threshold) {
      // The thread cannot keep up (or a long reader pins old frames):
      // checkpoint here, as SQLite's automatic checkpoint would.
      if (self->checkpointer) {
        self->checkpointer->checkpoint_here(db, name);
      } else {
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
      }
    } else if (pages >= self->next_checkpoint_at) {
      // One checkpoint per `threshold` new pages, as SQLite's own cadence
      // (not one per commit: each costs two fsyncs).
      self->next_checkpoint_at = pages + threshold;
      try {
        if (!self->checkpointer) self->checkpointer = std::make_unique<Checkpointer>(self->path);
        self->checkpointer->request();
      } catch (const std::exception&) {
        // No thread (resources): checkpoint here instead.
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
      }
    }
    return SQLITE_OK;
  }

  [[noreturn]] void fail(const std::string& what, int rc) {
    std::string msg = path + ": " + what + ": " + sqlite3_errstr(rc);
    if (db && sqlite3_errcode(db) == rc) msg += " (" + std::string(sqlite3_errmsg(db)) + ")";
    throw StorageError(msg);
  }

  Statement& stmt(std::string_view sql) {
    auto it = statements.find(sql);
    if (it == statements.end()) {
      auto s = std::make_unique<Statement>(db, sql);
      std::string_view key = s->sql();  // points into the statement: stable
      it = statements.emplace(key, std::move(s)).first;
    }
    return *it->second;
  }

  void exec(const char* sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
      std::string msg = err ? err : sqlite3_errstr(rc);
      sqlite3_free(err);
      if (rc == SQLITE_NOTADB) throw StorageError(path + ": not a SQLite database (" + msg + ")");
      throw StorageError(path + ": " + msg + " (while running: " + sql + ")");
    }
  }

  // Runs a statement without results through the statement cache (for
  // transactions and the savepoints every nested write opens: no parsing
  // each time).
  void run(std::string_view sql) {
    Use u(stmt(sql));
    u->step();
  }

  std::int64_t pragma_int(const char* sql) {
    Use s(stmt(sql));
    if (!s->step()) throw StorageError(path + ": " + sql + " returned nothing");
    return s->int64(0);
  }

  // ---------------------------------------------------------------- open

  // A path naming a file of its own (not ":memory:", "" or a "file:" URI).
  bool is_plain_file() const {
    return !path.empty() && path != ":memory:" && path.rfind("file:", 0) != 0;
  }

  void open() {
    // A new store is created owner-only (its -wal and -shm files get its
    // mode from SQLite); an existing one keeps its mode.
    if (is_plain_file()) {
      try {
        create_private_file(path);
      } catch (const Error& e) {
        throw StorageError(path + ": cannot open database file (" + e.what() + ")");
      }
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
    if (rc != SQLITE_OK) fail("cannot open database file", rc);
    sqlite3_busy_timeout(db, options.busy_timeout_ms);

    // Look before changing anything: a file of another program or of a
    // newer hpsearch is left as it is.
    // Version and tables are read in one read transaction: another process
    // creating the schema of a new file between the two reads must not make
    // it look like a file of another program.
    std::int64_t version = 0, tables = 0;
    try {
      exec("BEGIN");
      version = pragma_int("PRAGMA user_version");
      tables = pragma_int("SELECT count(*) FROM sqlite_master");
      exec("COMMIT");
    } catch (const StorageError&) {
      const int code = sqlite3_errcode(db);
      if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      if (code == SQLITE_NOTADB)
        throw StorageError(path + ": not a SQLite database (file is not a database)");
      throw;
    }
    check_version(version);
    if (version == 0 && tables > 0)
      throw StorageError(path +
                         ": is a SQLite database of another program (it has tables but no "
                         "hpsearch schema version)");

    // Switching a new file to WAL needs it to itself for a moment; another
    // process opening it at the same time can make this fail as busy, so
    // it is retried until the busy timeout.
    std::string mode;
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(std::max(0, options.busy_timeout_ms));
    while (true) {
      try {
        Use s(stmt("PRAGMA journal_mode=WAL"));
        if (s->step()) mode = s->text(0);
        break;
      } catch (const StorageError&) {
        const int code = sqlite3_errcode(db) & 0xff;
        if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) ||
            std::chrono::steady_clock::now() > give_up)
          throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (mode != "wal" && mode != "memory")
      throw StorageError(path + ": cannot use WAL journal mode (got '" + mode + "')");
    std::string sync = options.synchronous;
    std::transform(sync.begin(), sync.end(), sync.begin(),
                   [](unsigned char c) { return std::toupper(c); });
    exec(("PRAGMA synchronous=" + sync).c_str());
    exec("PRAGMA foreign_keys=ON");
    // Statement journals and sorts in memory: no temporary file is opened
    // during a run, so a process out of descriptors (many connected peers)
    // still commits.
    exec("PRAGMA temp_store=MEMORY");
    if (mode == "wal") {
      // Not for "" (a private temporary file another connection cannot open).
      if (options.background_checkpoint && !path.empty()) {
        sqlite3_wal_hook(db, &Impl::on_wal_commit, this);  // replaces the automatic checkpoint
      } else {
        sqlite3_wal_autocheckpoint(db, options.checkpoint_pages);
      }
    }
    if (version < SqliteStorage::kSchemaVersion) migrate();
    data_version = pragma_int("PRAGMA data_version");
    if (is_plain_file()) watch.emplace(path);
  }

  void check_version(std::int64_t version) {
    if (version > SqliteStorage::kSchemaVersion)
      throw StorageError(path + ": schema version " + std::to_string(version) +
                         " is newer than this hpsearch supports (" +
                         std::to_string(SqliteStorage::kSchemaVersion) + "); upgrade hpsearch");
    if (version < 0) throw StorageError(path + ": bad schema version " + std::to_string(version));
  }

  // Applies the migrations the file lacks, in one transaction.
  void migrate() {
    exec("BEGIN IMMEDIATE");
    try {
      auto version = pragma_int("PRAGMA user_version");  // another process may have migrated
      check_version(version);
      if (version == 0 && pragma_int("SELECT count(*) FROM sqlite_master") > 0)
        throw StorageError(path + ": is a SQLite database of another program");
      for (auto v = version; v < SqliteStorage::kSchemaVersion; ++v) exec(kMigrations[v]);
      exec(("PRAGMA user_version=" + std::to_string(SqliteStorage::kSchemaVersion)).c_str());
      exec("COMMIT");
    } catch (...) {
      if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  // ---------------------------------------------------------------- caches

  void drop_caches() {
    studies.reset();
    trials.clear();
    trial_loc.clear();
  }

  // Drops the caches if another connection committed since we last looked.
  void refresh() {
    std::int64_t v = pragma_int("PRAGMA data_version");
    if (v != data_version) {
      drop_caches();
      data_version = v;
    }
  }

  // ---------------------------------------------------------------- transactions

  // One level of transaction: BEGIN IMMEDIATE at the top, a savepoint inside.
  // Rolls back (and drops the caches, which may hold rolled-back writes)
  // unless commit() was called.
  class Txn {
   public:
    explicit Txn(Impl& impl) : impl_(impl) {
      if (impl_.depth == 0) {
        impl_.run("BEGIN IMMEDIATE");
        impl_.depth = 1;
        try {
          impl_.refresh();
        } catch (...) {
          rollback();
          throw;
        }
      } else {
        ++impl_.depth;
        name_ = "hps_sp" + std::to_string(impl_.depth);
        try {
          impl_.run(("SAVEPOINT " + name_).c_str());
        } catch (...) {
          --impl_.depth;
          throw;
        }
      }
    }
    ~Txn() {
      if (!done_) rollback();
    }
    Txn(const Txn&) = delete;
    Txn& operator=(const Txn&) = delete;

    void commit() {
      if (name_.empty()) {
        if (impl_.watch) impl_.watch->check();  // throws: rolled back, nothing claimed saved
        impl_.run("COMMIT");
      } else {
        impl_.run(("RELEASE " + name_).c_str());
      }
      done_ = true;
      --impl_.depth;
    }

   private:
    void rollback() noexcept {
      done_ = true;
      --impl_.depth;
      impl_.drop_caches();
      if (name_.empty()) {
        if (!sqlite3_get_autocommit(impl_.db))
          sqlite3_exec(impl_.db, "ROLLBACK", nullptr, nullptr, nullptr);
      } else {
        std::string sql = "ROLLBACK TO " + name_ + "; RELEASE " + name_;
        sqlite3_exec(impl_.db, sql.c_str(), nullptr, nullptr, nullptr);
      }
    }

    Impl& impl_;
    std::string name_;  // empty at the top level
    bool done_ = false;
  };

  // A state-changing call: one transaction (or a savepoint inside one).
  template <class F>
  auto write(F&& f) {
    std::lock_guard lock(mutex);
    Txn txn(*this);
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      txn.commit();
    } else {
      auto result = f();
      txn.commit();
      return result;
    }
  }

  // A state-changing call that writes with at most one SQL statement: inside
  // a transaction it needs no savepoint of its own (a failed statement undoes
  // itself); a failure after the statement drops the caches, which may then
  // disagree with the file. Outside a transaction it is write().
  template <class F>
  auto write_one(F&& f) {
    std::lock_guard lock(mutex);
    if (depth == 0) return write(std::forward<F>(f));
    try {
      return f();
    } catch (...) {
      drop_caches();
      throw;
    }
  }

  // A read: inside a write transaction the caches are current; otherwise a
  // read transaction gives one consistent snapshot for the check of
  // data_version and any loading.
  template <class F>
  auto read(F&& f) {
    std::lock_guard lock(mutex);
    if (depth > 0) return f();
    exec("BEGIN");
    try {
      refresh();
      auto result = f();
      exec("COMMIT");
      return result;
    } catch (...) {
      if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  // ---------------------------------------------------------------- studies

  std::map<std::int64_t, StudyInfo>& all_studies() {
    if (studies) return *studies;
    try {
      studies = load_studies();
    } catch (const StorageError& e) {
      throw StorageError(path + ": " + e.what());
    }
    return *studies;
  }

  std::map<std::int64_t, StudyInfo> load_studies() {
    std::map<std::int64_t, StudyInfo> loaded;
    {
      Use u(stmt("SELECT study_id, name, direction, config_json FROM studies"));
      Statement& s = u.get();
      while (s.step()) {
        std::int64_t id = col_int(s, 0, Where{"studies"}, "study_id");
        Where where = study_row_where("studies", id);
        StudyInfo info;
        info.study_id = id;
        info.name = col_text(s, 1, where, "name");
        info.direction = decode_direction(col_int(s, 2, where, "direction"), where);
        info.config = decode_json(col_text(s, 3, where, "config_json"), where, "config_json");
        loaded.emplace(id, std::move(info));
      }
    }
    {
      Use u(stmt("SELECT study_id, kind, key, value_json FROM study_attrs"));
      Statement& s = u.get();
      while (s.step()) {
        std::int64_t id = col_int(s, 0, Where{"study_attrs"}, "study_id");
        Where where = study_row_where("study_attrs", id);
        std::int64_t kind = col_int(s, 1, where, "kind");
        std::string key = col_text(s, 2, where, "key");
        where.key_name = "key";
        where.key = &key;
        Json value = decode_json(col_text(s, 3, where, "value_json"), where, "value_json");
        auto it = loaded.find(id);
        if (it == loaded.end()) continue;  // orphan row (foreign keys were off)
        if (kind == kKindUser) {
          it->second.user_attrs[key] = std::move(value);
        } else if (kind == kKindSystem) {
          it->second.system_attrs[key] = std::move(value);
        } else {
          throw StorageError(where.str() + ": unknown attr kind " + std::to_string(kind));
        }
      }
    }
    return loaded;
  }

  StudyInfo& study(std::int64_t study_id) {
    auto& all = all_studies();
    auto it = all.find(study_id);
    if (it == all.end()) throw StorageError("no study with id " + std::to_string(study_id));
    return it->second;
  }

  // ---------------------------------------------------------------- trials

  // Loads trials (all of a study, or one) from the file, in number order.
  std::vector<TrialPtr> load_trials(const TrialQueries& q, std::int64_t key) {
    try {
      return load_trials_unchecked(q, key);
    } catch (const StorageError& e) {
      throw StorageError(path + ": " + e.what());
    }
  }

  std::vector<TrialPtr> load_trials_unchecked(const TrialQueries& q, std::int64_t key) {
    std::vector<std::shared_ptr<FrozenTrial>> list;
    std::unordered_map<std::int64_t, FrozenTrial*> by_id;
    {
      Use u(stmt(q.trials));
      Statement& s = u.get();
      s.bind(1, key);
      while (s.step()) {
        auto t = std::make_shared<FrozenTrial>();
        t->trial_id = col_int(s, 0, Where{"trials"}, "trial_id");
        Where where = trial_row_where("trials", t->trial_id);
        t->number = col_int(s, 1, where, "number");
        t->state = decode_state(col_int(s, 2, where, "state"), where);
        t->value = col_opt_real(s, 3, where, "value");
        t->datetime_start = col_time(s, 4, where, "datetime_start");
        t->datetime_complete = col_time(s, 5, where, "datetime_complete");
        t->worker = col_text(s, 6, where, "worker", true);
        t->fail_reason = col_text(s, 7, where, "fail_reason", true);
        by_id[t->trial_id] = t.get();
        list.push_back(std::move(t));
      }
    }
    if (list.empty()) return {};
    {
      // Trials of a study mostly share their distributions: decode each
      // distinct text once.
      std::unordered_map<std::string, Distribution> distributions;
      Use u(stmt(q.params));
      Statement& s = u.get();
      s.bind(1, key);
      while (s.step()) {
        std::int64_t id = col_int(s, 0, Where{"trial_params"}, "trial_id");
        Where where = trial_row_where("trial_params", id);
        std::string name = col_text(s, 1, where, "name");
        where.key_name = "name";
        where.key = &name;
        auto it = by_id.find(id);
        if (it == by_id.end()) continue;
        if (s.type(2) != SQLITE_NULL) {
          std::string text = col_text(s, 2, where, "distribution_json");
          auto d = distributions.find(text);
          if (d == distributions.end())
            d = distributions.emplace(text, decode_distribution(text, where)).first;
          it->second->distributions.insert_or_assign(name, d->second);
        }
        it->second->params[name] = decode_param_value(s, 3, 4, where);
      }
    }
    {
      Use u(stmt(q.intermediates));
      Statement& s = u.get();
      s.bind(1, key);
      while (s.step()) {
        std::int64_t id = col_int(s, 0, Where{"trial_intermediate_values"}, "trial_id");
        Where where = trial_row_where("trial_intermediate_values", id);
        std::int64_t step = col_int(s, 1, where, "step");
        auto value = col_opt_real(s, 2, where, "value");
        auto it = by_id.find(id);
        if (it == by_id.end()) continue;
        it->second->intermediate_values[step] = value ? *value : std::nan("");
      }
    }
    {
      Use u(stmt(q.attrs));
      Statement& s = u.get();
      s.bind(1, key);
      while (s.step()) {
        std::int64_t id = col_int(s, 0, Where{"trial_attrs"}, "trial_id");
        Where where = trial_row_where("trial_attrs", id);
        std::int64_t kind = col_int(s, 1, where, "kind");
        std::string key_name = col_text(s, 2, where, "key");
        where.key_name = "key";
        where.key = &key_name;
        Json value = decode_json(col_text(s, 3, where, "value_json"), where, "value_json");
        auto it = by_id.find(id);
        if (it == by_id.end()) continue;
        if (kind == kKindUser) {
          it->second->user_attrs[key_name] = std::move(value);
        } else if (kind == kKindSystem) {
          it->second->system_attrs[key_name] = std::move(value);
        } else {
          throw StorageError(where.str() + ": unknown attr kind " + std::to_string(kind));
        }
      }
    }
    return {list.begin(), list.end()};
  }

  // The cached trials of a study (loaded on first use).
  std::vector<TrialPtr>& study_trials(std::int64_t study_id) {
    auto it = trials.find(study_id);
    if (it != trials.end()) return it->second;
    study(study_id);  // throws if absent
    auto loaded = load_trials(kByStudy, study_id);
    for (const auto& t : loaded) trial_loc[t->trial_id] = {study_id, t->number};
    return trials.emplace(study_id, std::move(loaded)).first->second;
  }

  // The cached snapshot of a trial (loading its study if needed).
  TrialPtr cached_trial(std::int64_t trial_id) {
    auto loc = trial_loc.find(trial_id);
    if (loc == trial_loc.end()) {
      std::int64_t study_id = study_of(trial_id);
      study_trials(study_id);
      loc = trial_loc.find(trial_id);
      if (loc == trial_loc.end())
        throw StorageError("no trial with id " + std::to_string(trial_id));
    }
    const auto& list = study_trials(loc->second.study_id);
    auto pos = std::lower_bound(list.begin(), list.end(), loc->second.number, by_number);
    if (pos == list.end() || (*pos)->trial_id != trial_id)
      throw StorageError("internal error: trial cache out of order");
    return *pos;
  }

  // Re-reads one trial after a write and puts the new snapshot in the cache
  // (if its study is cached). Returns the snapshot.
  TrialPtr reload_trial(std::int64_t trial_id) {
    auto loaded = load_trials(kByTrial, trial_id);
    if (loaded.empty()) throw StorageError("no trial with id " + std::to_string(trial_id));
    TrialPtr t = loaded.front();
    std::int64_t study_id = study_of(trial_id);
    auto it = trials.find(study_id);
    if (it != trials.end()) {
      auto& list = it->second;
      auto pos = std::lower_bound(list.begin(), list.end(), t->number, by_number);
      if (pos != list.end() && (*pos)->number == t->number) {
        *pos = t;
      } else {
        list.insert(pos, t);
      }
      trial_loc[trial_id] = {study_id, t->number};
    }
    return t;
  }

  // The snapshot of a trial after a write to it: `change` applied to a copy
  // of the cached snapshot when its study is cached (the write mirrored in
  // memory, as reading it back would give it: no read of the file), else the
  // trial read from the file. Returns the snapshot.
  template <class F>
  TrialPtr update_trial(std::int64_t trial_id, F&& change) {
    if (TrialPtr* slot = cached_slot(trial_id)) {
      auto t = std::make_shared<FrozenTrial>(**slot);
      change(*t);
      *slot = t;
      return t;
    }
    return reload_trial(trial_id);
  }

  // Where the cached snapshot of a trial is, if its study is cached; else
  // null. Inside a write the cache is current: it was checked against
  // data_version when the write lock was taken, and only this connection
  // writes until the commit.
  TrialPtr* cached_slot(std::int64_t trial_id, std::int64_t* study_id = nullptr) {
    auto loc = trial_loc.find(trial_id);
    if (loc == trial_loc.end()) return nullptr;
    if (study_id) *study_id = loc->second.study_id;
    auto it = trials.find(loc->second.study_id);
    if (it == trials.end()) return nullptr;
    auto& list = it->second;
    auto pos = std::lower_bound(list.begin(), list.end(), loc->second.number, by_number);
    if (pos == list.end() || (*pos)->trial_id != trial_id) return nullptr;
    return &*pos;
  }

  // The snapshot of a trial just inserted: `t` appended to its cached study
  // (when cached and `t` comes last), else the trial read from the file.
  TrialPtr add_trial(std::int64_t study_id, std::shared_ptr<FrozenTrial> t) {
    auto it = trials.find(study_id);
    if (it == trials.end() || (!it->second.empty() && it->second.back()->number >= t->number))
      return reload_trial(t->trial_id);
    trial_loc[t->trial_id] = {study_id, t->number};
    it->second.push_back(t);
    return t;
  }

  // The text of a distribution's distribution_json column. The last one
  // stored per param name is kept (a study's trials mostly repeat them), so
  // it is not encoded again; numeric ones only, compared bit for bit (-0.0
  // and 0.0 are stored differently).
  std::unordered_map<std::string, std::pair<Distribution, std::string>> distribution_texts;

  // The reference stays valid until the next call.
  const std::string& distribution_text(const std::string& name, const Distribution& d,
                                       const std::string& what) {
    auto same = [](const Distribution& a, const Distribution& b) {
      auto bits = [](double x) { return std::bit_cast<std::uint64_t>(x); };
      return a.is_numeric() && b.is_numeric() && a.kind() == b.kind() && a.is_log() == b.is_log() &&
             bits(a.low()) == bits(b.low()) && bits(a.high()) == bits(b.high()) &&
             bits(a.step()) == bits(b.step());
    };
    auto it = distribution_texts.find(name);
    if (it != distribution_texts.end() && same(it->second.first, d)) return it->second.second;
    distribution_scratch = encode_json(d.to_json(), what + " distribution");
    if (!d.is_numeric()) return distribution_scratch;
    if (distribution_texts.size() >= 1024) distribution_texts.clear();
    return distribution_texts
        .insert_or_assign(name, std::pair<Distribution, std::string>(d, distribution_scratch))
        .first->second.second;
  }
  std::string distribution_scratch;

  // study_id of a trial; throws if there is no such trial.
  std::int64_t study_of(std::int64_t trial_id) {
    auto it = trial_loc.find(trial_id);
    if (it != trial_loc.end()) return it->second.study_id;
    Use s(stmt("SELECT study_id FROM trials WHERE trial_id = ?1"));
    s->bind(1, trial_id);
    if (!s->step()) throw StorageError("no trial with id " + std::to_string(trial_id));
    return col_int(s.get(), 0, trial_row_where("trials", trial_id), "study_id");
  }

  struct TrialRow {
    std::int64_t study_id;
    std::int64_t number;
    TrialState state;
  };

  // The trial's current row (inside a write): from the cache when its study
  // is cached, else read from the file.
  TrialRow trial_row(std::int64_t trial_id) {
    std::int64_t study_id = 0;
    if (TrialPtr* slot = cached_slot(trial_id, &study_id))
      return {study_id, (*slot)->number, (*slot)->state};
    Use u(stmt("SELECT study_id, number, state FROM trials WHERE trial_id = ?1"));
    Statement& s = u.get();
    s.bind(1, trial_id);
    if (!s.step()) throw StorageError("no trial with id " + std::to_string(trial_id));
    Where where = trial_row_where("trials", trial_id);
    return {col_int(s, 0, where, "study_id"), col_int(s, 1, where, "number"),
            decode_state(col_int(s, 2, where, "state"), where)};
  }

  void require_unfinished(std::int64_t trial_id, const TrialRow& row, const char* action) {
    if (is_finished(row.state))
      throw StorageError("trial " + std::to_string(row.number) + " (id " +
                         std::to_string(trial_id) + ") is already finished (" +
                         to_string(row.state) + "); cannot " + action);
  }

  struct ParamRow {
    const std::string* name;
    const Json* value;
    const Distribution* distribution;  // may be null
  };

  // Inserts param rows of one trial, up to kRowsPerInsert per statement.
  // Returns each value as reading its row back gives it (value_real for
  // floats, else the parsed value_json), in the order of `rows`.
  static constexpr std::size_t kRowsPerInsert = 16;

  std::vector<Json> insert_params(std::int64_t trial_id, const std::vector<ParamRow>& rows) {
    static const std::vector<std::string> sql = [] {
      std::vector<std::string> out(kRowsPerInsert + 1);
      for (std::size_t n = 1; n <= kRowsPerInsert; ++n) {
        out[n] =
            "INSERT INTO trial_params(trial_id, name, distribution_json, value_json, value_real) "
            "VALUES ";
        for (std::size_t r = 0; r < n; ++r) out[n] += r ? ", (?, ?, ?, ?, ?)" : "(?, ?, ?, ?, ?)";
      }
      return out;
    }();
    std::vector<Json> stored;
    stored.reserve(rows.size());
    std::vector<std::string> texts(rows.size());
    for (std::size_t first = 0; first < rows.size(); first += kRowsPerInsert) {
      const std::size_t n = std::min(kRowsPerInsert, rows.size() - first);
      Use u(stmt(sql[n]));
      Statement& s = u.get();
      for (std::size_t r = 0; r < n; ++r) {
        const ParamRow& row = rows[first + r];
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

  void set_trial_attr(std::int64_t trial_id, int kind, const std::string& key, const Json& value) {
    check_utf8(key, "attr key");
    std::string text = encode_json(value, "attr '" + key + "'");
    write_one([&] {
      trial_row(trial_id);  // throws if absent
      {
        Use u(stmt(
            "INSERT INTO trial_attrs(trial_id, kind, key, value_json) VALUES (?1, ?2, ?3, ?4) "
            "ON CONFLICT(trial_id, kind, key) DO UPDATE SET value_json = excluded.value_json"));
        u->bind(1, trial_id);
        u->bind(2, kind);
        u->bind(3, key);
        u->bind(4, text);
        u->step();
      }
      update_trial(trial_id, [&](FrozenTrial& t) {
        (kind == kKindUser ? t.user_attrs : t.system_attrs)[key] =
            decode_keyed(text, "trial_attrs", trial_id, "key", key);
      });
    });
  }

  void set_study_attr(std::int64_t study_id, int kind, const std::string& key, const Json& value) {
    check_utf8(key, "attr key");
    std::string text = encode_json(value, "attr '" + key + "'");
    write([&] {
      study(study_id);  // throws if absent
      {
        Use u(stmt(
            "INSERT INTO study_attrs(study_id, kind, key, value_json) VALUES (?1, ?2, ?3, ?4) "
            "ON CONFLICT(study_id, kind, key) DO UPDATE SET value_json = excluded.value_json"));
        u->bind(1, study_id);
        u->bind(2, kind);
        u->bind(3, key);
        u->bind(4, text);
        u->step();
      }
      studies.reset();  // reloaded (small) on the next read
    });
  }
};

// ------------------------------------------------------------------ SqliteStorage

SqliteStorage::SqliteStorage(const std::string& path, SqliteOptions options)
    : impl_(std::make_unique<Impl>()) {
  options.validate();
  impl_->path = path;
  impl_->options = std::move(options);
  impl_->open();
}

SqliteStorage::~SqliteStorage() = default;

const std::string& SqliteStorage::path() const { return impl_->path; }

std::int64_t SqliteStorage::background_checkpoints() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->checkpointer ? impl_->checkpointer->completed() : 0;
}

std::int64_t SqliteStorage::create_study(const std::string& name, StudyDirection direction,
                                         const Json& config) {
  if (name.empty()) throw StorageError("study name must not be empty");
  check_utf8(name, "study name");
  std::string config_text = encode_json(config, "study '" + name + "' config");
  return impl_->write([&] {
    for (const auto& [id, info] : impl_->all_studies())
      if (info.name == name) throw StorageError("a study named '" + name + "' already exists");
    {
      Use u(impl_->stmt(
          "INSERT INTO studies(name, direction, config_json, created) VALUES (?1, ?2, ?3, ?4)"));
      u->bind(1, name);
      u->bind(2, encode_direction(direction));
      u->bind(3, config_text);
      u->bind(4, encode_time(now_us()));
      u->step();
    }
    std::int64_t id = sqlite3_last_insert_rowid(impl_->db);
    impl_->studies.reset();
    return id;
  });
}

std::optional<std::int64_t> SqliteStorage::find_study(const std::string& name) {
  return impl_->read([&]() -> std::optional<std::int64_t> {
    for (const auto& [id, info] : impl_->all_studies())
      if (info.name == name) return id;
    return std::nullopt;
  });
}

StudyInfo SqliteStorage::get_study(std::int64_t study_id) {
  return impl_->read([&] { return impl_->study(study_id); });
}

std::vector<StudyInfo> SqliteStorage::list_studies() {
  return impl_->read([&] {
    std::vector<StudyInfo> out;
    for (const auto& [id, info] : impl_->all_studies()) out.push_back(info);
    return out;
  });
}

void SqliteStorage::set_study_config(std::int64_t study_id, const Json& config) {
  std::string text = encode_json(config, "study config");
  impl_->write([&] {
    impl_->study(study_id);  // throws if absent
    {
      Use u(impl_->stmt("UPDATE studies SET config_json = ?2 WHERE study_id = ?1"));
      u->bind(1, study_id);
      u->bind(2, text);
      u->step();
    }
    impl_->studies.reset();
  });
}

void SqliteStorage::set_study_user_attr(std::int64_t study_id, const std::string& key,
                                        const Json& value) {
  impl_->set_study_attr(study_id, kKindUser, key, value);
}

void SqliteStorage::set_study_system_attr(std::int64_t study_id, const std::string& key,
                                          const Json& value) {
  impl_->set_study_attr(study_id, kKindSystem, key, value);
}

TrialPtr SqliteStorage::create_trial(std::int64_t study_id, const NewTrial& init) {
  if (init.state != TrialState::kWaiting && init.state != TrialState::kRunning)
    throw StorageError(std::string("a new trial must be WAITING or RUNNING, got ") +
                       to_string(init.state));
  for (const auto& [name, dist] : init.distributions)
    if (!init.params.count(name))
      throw StorageError("distribution given for param '" + name + "' without a value");
  if (!init.system_attrs.is_object())
    throw StorageError("new trial system_attrs must be a JSON object");
  check_utf8(init.worker, "worker");
  return impl_->write([&] {
    impl_->study(study_id);  // throws if absent
    auto t = std::make_shared<FrozenTrial>();
    t->state = init.state;
    t->worker = init.worker;
    if (auto cached = impl_->trials.find(study_id); cached != impl_->trials.end()) {
      // The cached study holds every trial, in number order.
      t->number = cached->second.empty() ? 0 : cached->second.back()->number + 1;
    } else {
      Use u(impl_->stmt("SELECT COALESCE(MAX(number) + 1, 0) FROM trials WHERE study_id = ?1"));
      u->bind(1, study_id);
      u->step();
      t->number = u->int64(0);
    }
    {
      Use u(
          impl_->stmt("INSERT INTO trials(study_id, number, state, datetime_start, worker) "
                      "VALUES (?1, ?2, ?3, ?4, ?5)"));
      u->bind(1, study_id);
      u->bind(2, t->number);
      u->bind(3, static_cast<int>(init.state));
      if (init.state == TrialState::kRunning) {
        TimePoint now = now_us();
        u->bind(4, encode_time(now));
        t->datetime_start = stored_time(now);
      } else {
        u->bind_null(4);
      }
      u->bind(5, init.worker);
      u->step();
    }
    t->trial_id = sqlite3_last_insert_rowid(impl_->db);
    std::vector<Impl::ParamRow> rows;
    rows.reserve(init.params.size());
    for (const auto& [name, value] : init.params) {
      auto d = init.distributions.find(name);
      rows.push_back({&name, &value, d == init.distributions.end() ? nullptr : &d->second});
    }
    std::vector<Json> stored = impl_->insert_params(t->trial_id, rows);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      t->params.emplace_hint(t->params.end(), *rows[r].name, std::move(stored[r]));
      if (rows[r].distribution)
        t->distributions.emplace_hint(t->distributions.end(), *rows[r].name, *rows[r].distribution);
    }
    for (const auto& [key, value] : init.system_attrs.items()) {
      check_utf8(key, "attr key");
      std::string text = encode_json(value, "attr '" + key + "'");
      {
        Use u(impl_->stmt(
            "INSERT INTO trial_attrs(trial_id, kind, key, value_json) VALUES (?1, ?2, ?3, ?4)"));
        u->bind(1, t->trial_id);
        u->bind(2, kKindSystem);
        u->bind(3, key);
        u->bind(4, text);
        u->step();
      }
      t->system_attrs[key] = decode_keyed(text, "trial_attrs", t->trial_id, "key", key);
    }
    return impl_->add_trial(study_id, std::move(t));
  });
}

TrialPtr SqliteStorage::claim_waiting_trial(std::int64_t study_id, const std::string& worker) {
  check_utf8(worker, "worker");
  return impl_->write([&]() -> TrialPtr {
    impl_->study(study_id);  // throws if absent
    std::int64_t trial_id = 0;
    {
      Use u(
          impl_->stmt("SELECT trial_id FROM trials WHERE study_id = ?1 AND state = ?2 "
                      "ORDER BY number LIMIT 1"));
      u->bind(1, study_id);
      u->bind(2, static_cast<int>(TrialState::kWaiting));
      if (!u->step()) return nullptr;
      trial_id = u->int64(0);
    }
    TimePoint now = now_us();
    {
      Use u(impl_->stmt(
          "UPDATE trials SET state = ?2, datetime_start = ?3, worker = ?4 WHERE trial_id = ?1"));
      u->bind(1, trial_id);
      u->bind(2, static_cast<int>(TrialState::kRunning));
      u->bind(3, encode_time(now));
      u->bind(4, worker);
      u->step();
    }
    return impl_->update_trial(trial_id, [&](FrozenTrial& t) {
      t.state = TrialState::kRunning;
      t.datetime_start = stored_time(now);
      t.worker = worker;
    });
  });
}

void SqliteStorage::set_trial_param(std::int64_t trial_id, const std::string& name,
                                    const Json& value, const Distribution& distribution) {
  if (!distribution.contains(value))
    throw StorageError("param '" + name + "': value " + encode_json(value, name) +
                       " is not in its distribution");
  impl_->write([&] {
    auto row = impl_->trial_row(trial_id);
    impl_->require_unfinished(trial_id, row, ("set param '" + name + "'").c_str());
    Where where = trial_row_where("trial_params", trial_id);
    where.key_name = "name";
    where.key = &name;
    bool exists = false;
    {
      Use u(impl_->stmt(
          "SELECT value_json, value_real FROM trial_params WHERE trial_id = ?1 AND name = ?2"));
      Statement& s = u.get();
      s.bind(1, trial_id);
      s.bind(2, name);
      if (s.step()) {
        exists = true;
        Json old = decode_param_value(s, 0, 1, where);
        if (!same_value(old, value))
          throw StorageError("param '" + name + "' of trial " + std::to_string(row.number) +
                             " is already set to " + encode_json(old, name) +
                             "; cannot change it to " + encode_json(value, name));
      }
    }
    if (exists) {
      // Same value: the distribution given now replaces the stored one.
      {
        Use u(impl_->stmt(
            "UPDATE trial_params SET distribution_json = ?3 WHERE trial_id = ?1 AND name = ?2"));
        u->bind(1, trial_id);
        u->bind(2, name);
        u->bind(3, impl_->distribution_text(name, distribution, "param '" + name + "'"));
        u->step();
      }
      impl_->update_trial(
          trial_id, [&](FrozenTrial& t) { t.distributions.insert_or_assign(name, distribution); });
    } else {
      Json stored =
          std::move(impl_->insert_params(trial_id, {{&name, &value, &distribution}}).front());
      impl_->update_trial(trial_id, [&](FrozenTrial& t) {
        t.params[name] = std::move(stored);
        t.distributions.insert_or_assign(name, distribution);
      });
    }
  });
}

bool SqliteStorage::set_trial_intermediate_value(std::int64_t trial_id, std::int64_t step,
                                                 double value) {
  return impl_->write_one([&] {
    auto row = impl_->trial_row(trial_id);
    impl_->require_unfinished(trial_id, row, ("report step " + std::to_string(step)).c_str());
    {
      Use u(impl_->stmt(
          "INSERT INTO trial_intermediate_values(trial_id, step, value) VALUES (?1, ?2, ?3) "
          "ON CONFLICT(trial_id, step) DO NOTHING"));
      u->bind(1, trial_id);
      u->bind(2, step);
      u->bind(3, value);  // NaN becomes NULL
      u->step();
    }
    if (sqlite3_changes(impl_->db) == 0) return false;
    impl_->update_trial(trial_id, [&](FrozenTrial& t) {
      t.intermediate_values[step] = std::isnan(value) ? std::nan("") : value;  // as read from NULL
    });
    return true;
  });
}

bool SqliteStorage::set_trial_state(std::int64_t trial_id, TrialState state,
                                    std::optional<double> value, const std::string& fail_reason) {
  if (state == TrialState::kComplete && (!value || std::isnan(*value)))
    throw StorageError("trial id " + std::to_string(trial_id) +
                       ": COMPLETE needs a value that is not NaN");
  check_utf8(fail_reason, "fail_reason");
  return impl_->write_one([&] {
    auto row = impl_->trial_row(trial_id);
    if (is_finished(row.state)) return false;
    bool finished = is_finished(state);
    TimePoint now = now_us();
    {
      Use u(
          impl_->stmt("UPDATE trials SET state = ?2, value = ?3, "
                      "datetime_start = CASE WHEN ?2 = 1 THEN COALESCE(datetime_start, ?4) "
                      "ELSE datetime_start END, "
                      "datetime_complete = ?5, fail_reason = ?6 WHERE trial_id = ?1"));
      u->bind(1, trial_id);
      u->bind(2, static_cast<int>(state));
      if (finished && value && !std::isnan(*value)) {
        u->bind(3, *value);
      } else {
        u->bind_null(3);
      }
      u->bind(4, encode_time(now));
      if (finished) {
        u->bind(5, encode_time(now));
      } else {
        u->bind_null(5);
      }
      u->bind(6, state == TrialState::kFail ? fail_reason : std::string());
      u->step();
    }
    impl_->update_trial(trial_id, [&](FrozenTrial& t) {
      t.state = state;
      t.value = finished && value && !std::isnan(*value) ? value : std::nullopt;
      if (state == TrialState::kRunning && !t.datetime_start) t.datetime_start = stored_time(now);
      t.datetime_complete = finished ? std::optional<TimePoint>(stored_time(now)) : std::nullopt;
      t.fail_reason = state == TrialState::kFail ? fail_reason : std::string();
    });
    return true;
  });
}

void SqliteStorage::set_trial_user_attr(std::int64_t trial_id, const std::string& key,
                                        const Json& value) {
  impl_->set_trial_attr(trial_id, kKindUser, key, value);
}

void SqliteStorage::set_trial_system_attr(std::int64_t trial_id, const std::string& key,
                                          const Json& value) {
  impl_->set_trial_attr(trial_id, kKindSystem, key, value);
}

TrialPtr SqliteStorage::get_trial(std::int64_t trial_id) {
  return impl_->read([&] { return impl_->cached_trial(trial_id); });
}

TrialPtr SqliteStorage::get_trial_by_number(std::int64_t study_id, std::int64_t number) {
  return impl_->read([&] {
    const auto& list = impl_->study_trials(study_id);
    auto pos = std::lower_bound(list.begin(), list.end(), number, by_number);
    if (pos == list.end() || (*pos)->number != number)
      throw StorageError("study id " + std::to_string(study_id) + " has no trial number " +
                         std::to_string(number));
    return *pos;
  });
}

std::vector<TrialPtr> SqliteStorage::get_all_trials(std::int64_t study_id,
                                                    const std::vector<TrialState>& states) {
  return impl_->read([&] {
    const auto& list = impl_->study_trials(study_id);
    if (states.empty()) return list;
    std::vector<TrialPtr> out;
    for (const auto& t : list)
      if (std::find(states.begin(), states.end(), t->state) != states.end()) out.push_back(t);
    return out;
  });
}

std::int64_t SqliteStorage::count_trials(std::int64_t study_id,
                                         const std::vector<TrialState>& states) {
  return impl_->read([&] {
    const auto& list = impl_->study_trials(study_id);
    if (states.empty()) return static_cast<std::int64_t>(list.size());
    return static_cast<std::int64_t>(
        std::count_if(list.begin(), list.end(), [&](const TrialPtr& t) {
          return std::find(states.begin(), states.end(), t->state) != states.end();
        }));
  });
}

void SqliteStorage::run_in_transaction(const std::function<void()>& fn) {
  impl_->write([&] { fn(); });
}

}  // namespace hps
