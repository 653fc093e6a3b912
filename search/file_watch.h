// FileWatch: notices that the file a process keeps open was deleted or
// replaced under it (rm, mv, a restore from backup over the path).
//
//   FileWatch watch("study.db");   // after the file was opened
//   ...
//   watch.check();                  // before each commit: throws if gone
//
// An open file survives its deletion: SQLite would go on committing into an
// unlinked inode (or into a file no other process finds at the path) and
// every commit would look durable though the study is gone. check()
// compares the device and inode now at the path with those recorded when
// the file was opened (one stat(2), about a microsecond).
//
// Limit: a file overwritten in place (cp over it, same inode) is not
// noticed; SQLite may then report it damaged.
#pragma once

#include <sys/types.h>

#include <string>

namespace hps {

class FileWatch {
 public:
  // Records the identity of the file at `path` now (a relative path is
  // made absolute first, so a later chdir() changes nothing). Throws
  // StorageError if it cannot be stat'ed.
  explicit FileWatch(std::string path);

  // Throws StorageError ("<path>: the store file was deleted while it was
  // in use ..." or "... was replaced by another file ...") if the path no
  // longer names the recorded file, or if the path cannot be stat'ed.
  void check() const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;      // as given, for messages
  std::string absolute_;  // what is stat'ed
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace hps
