#include "search/private_files.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "search/errors.h"

namespace hps {

namespace {

std::string reason(int err) {
  const char* text = strerrordesc_np(err);
  return text ? text : "error " + std::to_string(err);
}

}  // namespace

bool create_private_file(const std::string& path) {
  // O_EXCL tells a new file from an existing one, so the mode of an
  // existing file is never changed (not even by fchmod below).
  int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kPrivateFileMode);
  if (fd >= 0) {
    // The umask can only have removed bits from 0600; set them anyway so a
    // umask such as 0277 still leaves the owner able to write.
    (void)::fchmod(fd, kPrivateFileMode);
    ::close(fd);
    return true;
  }
  const int err = errno;
  struct stat st {};
  if (err == EEXIST || err == ELOOP) {
    if (::stat(path.c_str(), &st) == 0) return false;  // exists (a link to a file included)
    if (err == ELOOP) throw Error(path + ": cannot create the file: " + reason(errno));
    return false;  // removed meanwhile: SQLite creates it (with the umask's mode)
  }
  throw Error(path + ": cannot create the file: " + reason(err));
}

void create_private_directories(const std::string& path) {
  if (path.empty()) return;
  std::filesystem::path p(path);
  std::filesystem::path so_far;
  for (const auto& part : p) {
    so_far /= part;
    if (part.empty() || part == "/" || part == "." || part == "..") continue;
    const std::string dir = so_far.string();
    if (::mkdir(dir.c_str(), kPrivateDirMode) == 0) {
      (void)::chmod(dir.c_str(), kPrivateDirMode);  // as for files: whatever the umask
      continue;
    }
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && ::stat(dir.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) throw Error(dir + ": cannot create the folder: not a folder");
      continue;
    }
    throw Error(dir + ": cannot create the folder: " + reason(err));
  }
}

int open_private_append(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, kPrivateFileMode);
}

}  // namespace hps
