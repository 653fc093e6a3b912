// Private to SqliteStorage: a prepared SQLite statement and one use of it.
//
//   Use u(connection.stmt("SELECT ... WHERE trial_id = ?1"));
//   u->bind(1, trial_id);
//   while (u->step()) ... u->int64(0) ...
//
// Statements are prepared once per connection (Connection::stmt keeps
// them); a Use resets the statement and its bindings when it ends, so no
// read snapshot stays open between calls. Every failure raises StorageError
// naming the file, what failed, SQLite's message and the SQL.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hps::sqlite {

// A prepared statement; finalized on destruction.
class Statement {
 public:
  // Prepares `sql` on `db` (SQLITE_PREPARE_PERSISTENT). Throws StorageError.
  Statement(sqlite3* db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Bind parameter `i` (1-based). Throw StorageError.
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
  // Binds `bytes` as a BLOB (copied: the caller's buffer may change after).
  void bind_blob(int i, std::string_view bytes) {
    check(sqlite3_bind_blob64(stmt_, i, bytes.data(), bytes.size(), SQLITE_TRANSIENT));
  }

  // Runs one step: true when a row is available, false when done. Throws
  // StorageError.
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

  // Columns of the current row (0-based), unchecked; sqlite/codec.h reads
  // them with type checks.
  int type(int col) const { return sqlite3_column_type(stmt_, col); }
  std::int64_t int64(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  std::string text(int col) const;
  // The text of column `col`, valid until the next step(), reset or
  // another column read of `col` ("" for NULL).
  std::string_view text_view(int col) const;
  // The bytes of BLOB column `col` (empty for a zero-length BLOB or NULL),
  // valid as long as text_view's.
  std::string_view blob_view(int col) const;
  const std::string& sql() const { return sql_; }

  bool in_use = false;  // a Use holds it

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail(rc, "bind");
  }
  [[noreturn]] void fail(int rc, const char* what);

  sqlite3* db_;
  std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

// One use of a cached statement: resets it (and its bindings) when done, so
// no read snapshot stays open between calls. Throws StorageError if the
// statement is already in use (a re-entrant call).
class Use {
 public:
  explicit Use(Statement& s);
  ~Use();
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  Statement* operator->() { return &s_; }
  Statement& get() { return s_; }

 private:
  Statement& s_;
};

}  // namespace hps::sqlite
