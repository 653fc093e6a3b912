// Private to SqliteStorage: one open SQLite connection to a store, set up
// as the file format needs (search/sqlite_storage.h): the schema checked
// and migrated (sqlite/schema.h), WAL journal mode, the synchronous level,
// foreign keys, temporary data in memory, checkpoints (sqlite/checkpointer.h),
// and the watch that makes commits fail once the file is deleted or replaced
// (search/file_watch.h). It keeps the connection's prepared statements.
//
// Not thread-safe: SqliteStorage guards it with its mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "search/file_watch.h"
#include "search/sqlite/checkpointer.h"
#include "search/sqlite/statement.h"
#include "search/sqlite_storage.h"

namespace hps::sqlite {

class Connection {
 public:
  // Opens `path` (see SqliteStorage's constructor for the rules and errors;
  // `options` already validated).
  Connection(std::string path, const SqliteOptions& options);
  // Stops the checkpoint thread, then closes the connection.
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* db() const { return db_; }
  const std::string& path() const { return path_; }

  // The prepared statement for `sql` (prepared on first use, then kept).
  Statement& stmt(std::string_view sql);
  // Runs SQL text (several statements allowed) without results, unprepared.
  // Throws StorageError naming the file (or saying it is not a database).
  void exec(const char* sql);
  // Runs a statement without results through the statement cache (no
  // parsing each time: transactions, savepoints).
  void run(std::string_view sql);
  // The integer of the first row of `sql`; StorageError if there is none.
  std::int64_t pragma_int(const char* sql);
  // ROLLBACK of the open transaction, if any; never throws.
  void rollback_quietly() noexcept;

  // Throws StorageError if the path no longer names the file that was
  // opened (no-op for ":memory:" and temporary files). Before each commit.
  void check_file() const;
  // PRAGMA data_version: changes when another connection committed.
  std::int64_t data_version() { return pragma_int("PRAGMA data_version"); }
  // Checkpoints by the background thread so far.
  std::int64_t background_checkpoints() const;

  int depth = 0;  // open transaction levels (0: none; 1: BEGIN; >1: savepoints)
  // Rollbacks so far (of a transaction or a savepoint): a cache of rows
  // written in a transaction (ParamWriter's distribution ids) is dropped
  // when this changes, as the rows may be gone.
  std::uint64_t rollbacks = 0;

 private:
  void open();
  void set_wal_mode();
  // Brings a store of schema `version` (older) to this version: in the
  // file (migrate), or, for a file this process may only read (an archived
  // store, a read-only mount), in a copy in memory that this connection
  // then uses, the file unchanged. Says so in the log (info).
  void upgrade(std::int64_t version);
  [[noreturn]] void fail(const std::string& what, int rc);
  bool is_plain_file() const;

  std::string path_;
  SqliteOptions options_;
  sqlite3* db_ = nullptr;
  std::unordered_map<std::string_view, std::unique_ptr<Statement>> statements_;
  // The store file as opened: every commit first checks that the path still
  // names it. None for ":memory:" and temporary files.
  std::optional<FileWatch> watch_;
  std::unique_ptr<WalCheckpoints> checkpoints_;  // background_checkpoint on a WAL file
};

}  // namespace hps::sqlite
