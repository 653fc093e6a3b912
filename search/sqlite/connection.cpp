// One set-up connection to a SqliteStorage file (see connection.h).
#include "search/sqlite/connection.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <thread>
#include <utility>

#include "search/errors.h"
#include "search/private_files.h"
#include "search/sqlite/schema.h"

namespace hps::sqlite {

Connection::Connection(std::string path, const SqliteOptions& options)
    : path_(std::move(path)), options_(options) {
  try {
    open();
  } catch (...) {
    checkpoints_.reset();
    statements_.clear();
    if (db_) sqlite3_close_v2(db_);
    throw;
  }
}

Connection::~Connection() {
  checkpoints_.reset();  // its thread's connection closes before ours
  statements_.clear();
  if (db_) sqlite3_close_v2(db_);
}

// A path naming a file of its own (not ":memory:", "" or a "file:" URI).
bool Connection::is_plain_file() const {
  return !path_.empty() && path_ != ":memory:" && path_.rfind("file:", 0) != 0;
}

void Connection::open() {
  // A new store is created owner-only (its -wal and -shm files get its mode
  // from SQLite); an existing one keeps its mode. Files planted beside it
  // (a -wal that is a link, a store of another user) are refused before
  // anything is made or written.
  if (is_plain_file()) {
    if (auto refused = store_files_refusal(path_)) throw StoreRefused(refused->message());
    mend_read_only_sidecars(path_);
    try {
      create_private_file(path_);
    } catch (const Error& e) {
      // e: "PATH: cannot create the file: why" (the path once).
      throw StorageError(std::string("cannot open database file: ") + e.what());
    }
  }
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) fail("cannot open database file", rc);
  sqlite3_busy_timeout(db_, options_.busy_timeout_ms);

  const std::int64_t version = inspect_schema(*this);
  set_wal_mode();
  std::string sync = options_.synchronous;
  std::transform(sync.begin(), sync.end(), sync.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  exec(("PRAGMA synchronous=" + sync).c_str());
  exec("PRAGMA foreign_keys=ON");
  // Statement journals and sorts in memory: no temporary file is opened
  // during a run, so a process out of descriptors (many connected peers)
  // still commits.
  exec("PRAGMA temp_store=MEMORY");
  if (version < SqliteStorage::kSchemaVersion) upgrade(version);
  if (is_plain_file()) watch_.emplace(path_);
}

void Connection::upgrade(std::int64_t version) {
  const std::string to = std::to_string(SqliteStorage::kSchemaVersion);
  if (version == 0 || (options_.upgrade_file && sqlite3_db_readonly(db_, "main") != 1)) {
    migrate(*this);
    if (version > 0)  // a warning: an older hpsearch is locked out from now on
      spdlog::warn(
          "{}: upgraded from schema version {} to {}; an hpsearch older than this one "
          "cannot open it any more",
          path_, version, to);
    return;
  }
  // Read-only, or not to be upgraded (upgrade_file false): the whole store
  // copied into memory (its size in RAM) and upgraded there.
  sqlite3* mem = nullptr;
  int rc = sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc == SQLITE_OK) {
    sqlite3_backup* copy = sqlite3_backup_init(mem, "main", db_, "main");
    rc = copy ? sqlite3_backup_step(copy, -1) : sqlite3_errcode(mem);
    if (copy && sqlite3_backup_finish(copy) != SQLITE_OK && rc == SQLITE_DONE)
      rc = sqlite3_errcode(mem);
  }
  if (rc != SQLITE_DONE) {
    if (mem) sqlite3_close_v2(mem);
    fail("cannot copy the read-only store of schema version " + std::to_string(version) +
             " into memory to read it",
         rc);
  }
  checkpoints_.reset();
  statements_.clear();
  sqlite3_close_v2(db_);
  db_ = mem;
  exec("PRAGMA foreign_keys=ON");
  exec("PRAGMA temp_store=MEMORY");
  migrate(*this);
  spdlog::info(
      "{}: {}schema version {}: read through a copy in memory upgraded to {} (the file is "
      "unchanged)",
      path_, options_.upgrade_file ? "read-only, " : "", version, to);
}

void Connection::set_wal_mode() {
  // Switching a new file to WAL needs it to itself for a moment; another
  // process opening it at the same time can make this fail as busy, so it is
  // retried until the busy timeout.
  std::string mode;
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(std::max(0, options_.busy_timeout_ms));
  while (true) {
    try {
      Use s(stmt("PRAGMA journal_mode=WAL"));
      if (s->step()) mode = s->text(0);
      break;
    } catch (const StorageError&) {
      const int code = sqlite3_errcode(db_) & 0xff;
      if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) ||
          std::chrono::steady_clock::now() > give_up)
        throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (mode != "wal" && mode != "memory")
    throw StorageError(path_ + ": cannot use WAL journal mode (got '" + mode + "')");
  if (mode != "wal") return;
  // Not for "" (a private temporary file another connection cannot open).
  if (options_.background_checkpoint && !path_.empty()) {
    checkpoints_ = std::make_unique<WalCheckpoints>(path_, options_.checkpoint_pages);
    checkpoints_->install(db_);  // replaces the automatic checkpoint
  } else {
    sqlite3_wal_autocheckpoint(db_, options_.checkpoint_pages);
  }
}

void Connection::fail(const std::string& what, int rc) {
  std::string msg = path_ + ": " + what + ": " + sqlite3_errstr(rc);
  if (db_ && sqlite3_errcode(db_) == rc) msg += " (" + std::string(sqlite3_errmsg(db_)) + ")";
  throw StorageError(msg);
}

Statement& Connection::stmt(std::string_view sql) {
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    auto s = std::make_unique<Statement>(db_, sql);
    std::string_view key = s->sql();  // points into the statement: stable
    it = statements_.emplace(key, std::move(s)).first;
  }
  return *it->second;
}

void Connection::exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    if (rc == SQLITE_NOTADB) throw StorageError(path_ + ": not a SQLite database (" + msg + ")");
    throw StorageError(path_ + ": " + msg + " (while running: " + sql + ")");
  }
}

void Connection::run(std::string_view sql) {
  Use u(stmt(sql));
  u->step();
}

std::int64_t Connection::pragma_int(const char* sql) {
  Use s(stmt(sql));
  if (!s->step()) throw StorageError(path_ + ": " + sql + " returned nothing");
  return s->int64(0);
}

void Connection::rollback_quietly() noexcept {
  ++rollbacks;
  if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Connection::check_file() const {
  if (watch_) watch_->check();
}

std::int64_t Connection::background_checkpoints() const {
  return checkpoints_ ? checkpoints_->completed() : 0;
}

}  // namespace hps::sqlite
