// A prepared SQLite statement (see statement.h).
#include "search/sqlite/statement.h"

#include "search/errors.h"

namespace hps::sqlite {

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db), sql_(sql) {
  int rc = sqlite3_prepare_v3(db, sql_.data(), static_cast<int>(sql_.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
  if (rc != SQLITE_OK) fail(rc, "prepare");
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

std::string Statement::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(p, static_cast<std::size_t>(n)) : std::string();
}

std::string_view Statement::text_view(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string_view(p, static_cast<std::size_t>(n)) : std::string_view();
}

std::string_view Statement::blob_view(int col) const {
  const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, col));
  int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string_view(p, static_cast<std::size_t>(n)) : std::string_view();
}

void Statement::fail(int rc, const char* what) {
  const char* file = db_ ? sqlite3_db_filename(db_, "main") : nullptr;
  std::string msg = (file && *file ? std::string(file) + ": " : std::string()) + "SQLite " + what +
                    " failed: " + sqlite3_errstr(rc);
  if (db_ && sqlite3_errcode(db_) == rc) msg += " (" + std::string(sqlite3_errmsg(db_)) + ")";
  msg += " in: " + sql_;
  throw StorageError(msg);
}

Use::Use(Statement& s) : s_(s) {
  if (s_.in_use) throw StorageError("internal error: statement used re-entrantly");
  s_.in_use = true;
}

Use::~Use() {
  s_.reset();
  s_.in_use = false;
}

}  // namespace hps::sqlite
