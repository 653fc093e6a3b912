#include "tests/support/older_stores.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "search/sqlite/schema.h"
#include "search/sqlite_storage.h"

namespace hps::testsupport {

void raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

namespace {

// The two indexes of v1 and v2 that v5 dropped, from their migrations' SQL.
std::string v4_indexes_sql() {
  const std::string v1 = sqlite::migration_sql(0), v2 = sqlite::migration_sql(1);
  const std::string state = "CREATE INDEX trials_by_study_state ON";
  const std::string value = "CREATE INDEX trials_by_study_state_value ON";
  const auto a = v1.find(state), b = v2.find(value);
  EXPECT_NE(a, std::string::npos);
  EXPECT_NE(b, std::string::npos);
  return v1.substr(a, v1.find(';', a) + 1 - a) + v2.substr(b, v2.find(';', b) + 1 - b);
}

}  // namespace

void write_as_v4(const std::string& path) {
  { SqliteStorage s(path); }  // made, or upgraded to this version
  raw_exec(path,
           "DROP TRIGGER study_best_finish; DROP TRIGGER study_best_finish_repair; "
           "DROP TRIGGER study_best_insert; DROP TRIGGER study_best_insert_repair; "
           "DROP TABLE study_best; "
           "DROP INDEX trials_active; " +
               v4_indexes_sql() + " PRAGMA user_version = 4;");
}

}  // namespace hps::testsupport
