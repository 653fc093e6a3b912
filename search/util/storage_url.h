// The storage URLs that open_storage() (search/storage.h) accepts. Private to
// hpsearch: not installed.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "search/errors.h"
#include "search/printable.h"
#include "search/private_files.h"

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

// Throws ConfigError(field, "must not be empty (name a SQLite file, e.g.
// study.db)") when `path` is "" (hpsearch resume ""), and ConfigError(field,
// "must be at most 4095 bytes (a file path), got PATH") (PATH cut and
// escaped, printable_excerpt) when it is longer than Linux's PATH_MAX.
inline void check_store_path_not_empty(const std::string& path, const std::string& field) {
  if (path.empty())
    throw ConfigError(field, "must not be empty (name a SQLite file, e.g. study.db)");
  // Linux's PATH_MAX with its NUL: a longer path cannot be opened.
  constexpr std::size_t kMaxPathBytes = 4095;
  if (path.size() > kMaxPathBytes)
    throw ConfigError(field,
                      "must be at most 4095 bytes (a file path), got " + printable_excerpt(path));
}

// Checks that `path` can be a store before open_storage() opens or creates
// it; what breaks a rule is bad input (exit 2 in the CLI), not a failure of
// the store. Refused: an empty path; a folder, FIFO or device; a non-empty
// file that does not start with SQLite's header ("SQLite format 3\0"); a
// symbolic link to a missing file (private_files.h, dangling_link_refusal:
// the store would be made through it, readable by others); a store or a
// -journal/-wal/-shm file beside it that store_files_refusal refuses (a
// planted link, another user's file: ConfigError(file, rule), "<file>:
// <rule>", the text SqliteStorage would throw); and, when
// nothing is there, a path whose folder does not exist or is not a folder
// (nothing could be made there). A missing file in an existing folder, an
// existing store, or an empty file (made a new store) passes. Throws
// ConfigError(field, "must not be empty" | "is not a regular file: PATH" |
// "is not a SQLite database (no SQLite header): PATH" | "is a symbolic link
// to a missing file (...): PATH" | "the folder 'DIR' does not exist (...):
// PATH" | "'DIR' is not a folder: PATH"); nothing is created or changed.
inline void check_store_file_if_present(const std::string& path, const std::string& field) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check_store_path_not_empty(path, field);
  if (std::string why = dangling_link_refusal(path); !why.empty())
    throw ConfigError(field, why + ": " + printable_excerpt(path));
  if (!path.starts_with("file:")) {
    if (auto refused = store_files_refusal(path)) throw ConfigError(refused->file, refused->rule);
  }
  if (!fs::exists(path, ec)) {
    const fs::path parent = fs::path(path).parent_path();
    // (A "file:" URI is SQLite's to read: no folder of its own to check.)
    if (parent.empty() || path.starts_with("file:") || fs::is_directory(parent, ec)) return;
    if (fs::exists(parent, ec))
      throw ConfigError(field, "'" + printable_excerpt(parent.string()) +
                                   "' is not a folder: " + printable_excerpt(path));
    throw ConfigError(field, "the folder '" + printable_excerpt(parent.string()) +
                                 "' does not exist (hpsearch makes the store, not its folder: "
                                 "create the folder first): " +
                                 printable_excerpt(path));
  }
  if (!fs::is_regular_file(path, ec))
    throw ConfigError(field, "is not a regular file: " + printable_excerpt(path));
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec || size == 0) return;
  constexpr char kHeader[] = "SQLite format 3";  // and its NUL: 16 bytes
  char head[sizeof kHeader] = {};
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return;  // unreadable: open_storage() says why
  in.read(head, sizeof head);
  if (in.gcount() != static_cast<std::streamsize>(sizeof head) ||
      std::memcmp(head, kHeader, sizeof kHeader) != 0)
    throw ConfigError(field,
                      "is not a SQLite database (no SQLite header): " + printable_excerpt(path));
}

// Checks that `path` is the file of an existing store before open_storage()
// opens it (which would make an empty file, a FIFO or a folder's name a new
// store, or fail with SQLite's words): it must exist, be a regular file (or
// a link to one) and not be empty. Throws ConfigError(field, "must not be
// empty (...)" for "" | "no such storage file: PATH" | "is not a regular file: PATH" | "is empty,
// not a hpsearch store: PATH" | "is not a SQLite database (no SQLite header): PATH"); the file is
// never changed.
inline void check_existing_store_file(const std::string& path, const std::string& field) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check_store_path_not_empty(path, field);
  if (!fs::exists(path, ec))
    throw ConfigError(field, "no such storage file: " + printable_excerpt(path));
  if (!fs::is_regular_file(path, ec))
    throw ConfigError(field, "is not a regular file: " + printable_excerpt(path));
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec || size == 0)
    throw ConfigError(field, "is empty, not a hpsearch store: " + printable_excerpt(path));
  check_store_file_if_present(path, field);
}

}  // namespace hps::util
