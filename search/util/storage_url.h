// The storage URLs that open_storage() (search/storage.h) accepts. Private to
// hpsearch: not installed.
#pragma once

#include <string>
#include <string_view>

namespace hps::util {

// A parsed storage URL.
struct StorageUrl {
  bool in_memory = false;  // an InMemoryStorage
  std::string path;        // the SQLite file (not in_memory); may be empty
};

// "memory", ":memory:" and "memory://" name an in-memory storage;
// "sqlite:///PATH" names the SQLite file PATH (relative unless PATH starts
// with '/': "sqlite:////tmp/a.db" is /tmp/a.db, as in SQLAlchemy); anything
// else is itself the path of a SQLite file. The path is not checked.
inline StorageUrl parse_storage_url(std::string_view url) {
  if (url == "memory" || url == ":memory:" || url == "memory://") return {true, {}};
  constexpr std::string_view kSqlite = "sqlite:///";
  if (url.starts_with(kSqlite)) url.remove_prefix(kSqlite.size());
  return {false, std::string(url)};
}

}  // namespace hps::util
