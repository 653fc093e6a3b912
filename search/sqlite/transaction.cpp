// Transactions on a SqliteStorage connection (see transaction.h).
#include "search/sqlite/transaction.h"

namespace hps::sqlite {

Transaction::Transaction(Connection& conn) : conn_(conn) {
  if (conn_.depth == 0) {
    conn_.run("BEGIN IMMEDIATE");
    conn_.depth = 1;
    return;
  }
  ++conn_.depth;
  name_ = "hps_sp" + std::to_string(conn_.depth);
  try {
    conn_.run(("SAVEPOINT " + name_).c_str());
  } catch (...) {
    --conn_.depth;
    throw;
  }
}

Transaction::~Transaction() {
  if (!done_) rollback();
}

void Transaction::commit() {
  if (name_.empty()) {
    conn_.check_file();  // throws: rolled back, nothing claimed saved
    conn_.run("COMMIT");
  } else {
    conn_.run(("RELEASE " + name_).c_str());
  }
  done_ = true;
  --conn_.depth;
}

void Transaction::rollback() noexcept {
  done_ = true;
  --conn_.depth;
  if (name_.empty()) {
    conn_.rollback_quietly();
  } else {
    ++conn_.rollbacks;
    std::string sql = "ROLLBACK TO " + name_ + "; RELEASE " + name_;
    sqlite3_exec(conn_.db(), sql.c_str(), nullptr, nullptr, nullptr);
  }
}

}  // namespace hps::sqlite
