// Private to SqliteStorage: transactions on a Connection.
//
// Every state-changing call is one transaction (write): BEGIN IMMEDIATE ...
// COMMIT at the top level, a savepoint when nested (inside
// run_in_transaction), rolled back on any exception so the file is never
// half-written. Before a top-level COMMIT the file is checked to be the one
// opened (Connection::check_file). A read outside a transaction runs in a
// read transaction, so all its statements see one snapshot.
//
// The caller holds SqliteStorage's mutex.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "search/sqlite/connection.h"

namespace hps::sqlite {

// One level of transaction: BEGIN IMMEDIATE at the top, a savepoint inside.
// Rolls back unless commit() was called.
class Transaction {
 public:
  // Throws StorageError (e.g. "database is locked" after the busy timeout).
  explicit Transaction(Connection& conn);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // Throws StorageError (then the destructor rolls back).
  void commit();

 private:
  void rollback() noexcept;

  Connection& conn_;
  std::string name_;  // the savepoint; empty at the top level
  bool done_ = false;
};

// Runs f in one transaction (a savepoint when nested); returns its result.
template <class F>
auto write(Connection& conn, F&& f) {
  Transaction txn(conn);
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    txn.commit();
  } else {
    auto result = f();
    txn.commit();
    return result;
  }
}

// A write of at most one SQL statement: inside a transaction it needs no
// savepoint of its own (a failed statement undoes itself); outside one it
// is write().
template <class F>
auto write_one(Connection& conn, F&& f) {
  if (conn.depth == 0) return write(conn, std::forward<F>(f));
  return f();
}

// Runs f in a read transaction (inside a write transaction: in that one).
template <class F>
auto read(Connection& conn, F&& f) {
  if (conn.depth > 0) return f();
  conn.exec("BEGIN");
  try {
    auto result = f();
    conn.exec("COMMIT");
    return result;
  } catch (...) {
    conn.rollback_quietly();
    throw;
  }
}

}  // namespace hps::sqlite
