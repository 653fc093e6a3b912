#include "search/file_watch.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <filesystem>

#include "search/errors.h"

namespace hps {

FileWatch::FileWatch(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  absolute_ = std::filesystem::absolute(path_, ec).string();
  if (ec || absolute_.empty()) absolute_ = path_;
  struct stat st {};
  if (::stat(absolute_.c_str(), &st) != 0)
    throw StorageError(path_ + ": cannot stat the store file: " +
                       std::string(strerrordesc_np(errno) ? strerrordesc_np(errno) : "error"));
  dev_ = st.st_dev;
  ino_ = st.st_ino;
}

void FileWatch::check() const {
  struct stat st {};
  if (::stat(absolute_.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      throw StorageError(path_ +
                         ": the store file was deleted while in use; nothing more is saved (the "
                         "last changes were not stored)");
    // EMFILE cannot happen (stat opens nothing); EACCES, EIO: say so.
    throw StorageError(path_ + ": the store file cannot be checked: " +
                       std::string(strerrordesc_np(err) ? strerrordesc_np(err) : "error"));
  }
  if (st.st_dev != dev_ || st.st_ino != ino_)
    throw StorageError(path_ +
                       ": the store file was replaced by another file while in use; nothing more "
                       "is saved (the last changes were not stored)");
}

}  // namespace hps
