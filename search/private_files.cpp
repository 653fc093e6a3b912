#include "search/private_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "search/errors.h"

namespace hps {

namespace {

std::string reason(int err) {
  const char* text = strerrordesc_np(err);
  return text ? text : "error " + std::to_string(err);
}

// "owned by uid N, not by this user (uid M)" when `uid` is not the
// effective uid, else "".
std::string other_owner(std::uint32_t uid) {
  const uid_t me = ::geteuid();
  if (uid == me) return "";
  return "owned by uid " + std::to_string(uid) + ", not by this user (uid " + std::to_string(me) +
         ")";
}

// "0666" for the permission bits of `mode`.
std::string octal_mode(std::uint32_t mode) {
  char text[8];
  ::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Why the file "<store><suffix>" with status `st` (from lstat) may not be
// used, or "": store_files_refusal's rule for the SQLite files beside a store.
std::string sqlite_file_refusal(const std::string& suffix, const struct stat& st) {
  return written_file_refusal(st.st_mode, st.st_nlink, st.st_uid, "the store's " + suffix + " file",
                              suffix == "-shm" ? "SQLite would write the study's WAL index into"
                                               : "SQLite would write the study's journal into",
                              "; remove it (SQLite makes it itself, with the store's mode)");
}

}  // namespace

std::string written_file_refusal(std::uint32_t mode, std::uint64_t nlink, std::uint32_t uid,
                                 const std::string& what, const std::string& writes,
                                 const std::string& fix) {
  if (S_ISLNK(mode))
    return what + " is a symbolic link: refused (never followed: " + writes +
           " whatever it points to)" + fix;
  if (!S_ISREG(mode))
    return what + " is not a regular file (a folder, FIFO or device): refused" + fix;
  if (nlink > 1)
    return what + " has " + std::to_string(nlink) +
           " hard links: refused (another name for a file " + writes + ")" + fix;
  if (std::string why = study_file_owner_refusal(uid, mode); !why.empty())
    return what + " is " + why;
  return "";
}

std::string study_file_owner_refusal(std::uint32_t uid, std::uint32_t mode) {
  if (std::string who = other_owner(uid); !who.empty())
    return who +
           ": refused (a file of a study planted by another user would be written, read back and "
           "run as this user's own); remove it, or run hpsearch as its owner";
  if ((mode & S_IWOTH) != 0)
    return "writable by others (mode " + octal_mode(mode) +
           "): refused (anyone could change the study, and the commands its objective runs); "
           "chmod o-w it";
  return "";
}

std::string store_base_path(const std::string& store_path) {
  struct stat st {};
  if (::lstat(store_path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(store_path, ec);
    if (!ec) return real.string();
  }
  return store_path;
}

std::optional<StoreFileRefusal> store_files_refusal(const std::string& store_path) {
  struct stat st {};
  if (::stat(store_path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    if (std::string why = study_file_owner_refusal(st.st_uid, st.st_mode); !why.empty())
      return StoreFileRefusal{store_path, "the store is " + why};
    struct stat link {};
    if (st.st_size == 0 && ::lstat(store_path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      std::error_code ec;
      const std::string target = std::filesystem::read_symlink(store_path, ec).string();
      return StoreFileRefusal{
          store_path, "is a symbolic link to an empty file (" + (ec ? std::string("?") : target) +
                          "): refused, a new store is never made through a link (it would be "
                          "made in the file it points to, with that file's mode, not "
                          "owner-only); name the file itself, or remove the link"};
    }
  }
  const std::string base = store_base_path(store_path);
  for (const char* suffix : {"-journal", "-wal", "-shm"}) {
    const std::string file = base + suffix;
    if (::lstat(file.c_str(), &st) != 0) continue;  // none: SQLite makes it
    if (std::string why = sqlite_file_refusal(suffix, st); !why.empty())
      return StoreFileRefusal{file, why};
  }
  return std::nullopt;
}

namespace {

// Whether this user may not write the folder of the store `store_path`
// (EACCES; the folder the sidecars and the lock go to: a store named
// through a link has them beside the file it names); sets `folder` and its
// `mode` (octal) when so.
bool unwritable_folder(const std::string& store_path, std::string& folder, std::string& mode) {
  folder = std::filesystem::path(store_base_path(store_path)).parent_path().string();
  if (folder.empty()) folder = ".";
  struct stat dir {};
  if (::stat(folder.c_str(), &dir) != 0 || !S_ISDIR(dir.st_mode)) return false;
  if (::access(folder.c_str(), W_OK | X_OK) == 0 || errno != EACCES) return false;
  mode = octal_mode(dir.st_mode);
  return true;
}

}  // namespace

std::string read_only_store_refusal(const std::string& store_path) {
  struct stat st {};
  if (::stat(store_path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      ::access(store_path.c_str(), W_OK) != 0 && errno == EACCES)
    return "the store is read-only for this user (mode " + octal_mode(st.st_mode) +
           "): run and resume write to it; chmod u+w it (the read commands work on it as it is)";
  std::string folder, mode;
  if (!unwritable_folder(store_path, folder, mode)) return "";
  return "the store's folder '" + folder + "' is read-only for this user (mode " + mode +
         "): run and resume write there too (SQLite makes the store's -wal and -shm files "
         "beside it, the coordinator its .lock file); make the folder writable (chmod u+w '" +
         folder + "'), or copy the store to a folder you may write";
}

std::string unwritable_store_folder(const std::string& store_path) {
  std::string folder, mode;
  if (!unwritable_folder(store_path, folder, mode)) return "";
  return "'" + folder + "' (mode " + mode + ")";
}

void mend_read_only_sidecars(const std::string& store_path) {
  struct stat store {};
  if (::stat(store_path.c_str(), &store) != 0 || store.st_uid != ::geteuid() ||
      (store.st_mode & S_IWUSR) == 0)
    return;  // a store its owner made read-only (or not this user's): left as it is
  const std::string base = store_base_path(store_path);
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string file = base + suffix;
    struct stat st {};
    if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
        st.st_uid != ::geteuid() || (st.st_mode & S_IWUSR) != 0)
      continue;
    (void)::chmod(file.c_str(), (st.st_mode & 07777) | S_IWUSR);
  }
}

std::string dangling_link_refusal(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return "";
  if (::stat(path.c_str(), &st) == 0) return "";  // a link to an existing file
  std::error_code ec;
  const std::string target = std::filesystem::read_symlink(path, ec).string();
  return "is a symbolic link to a missing file (" + (ec ? std::string("?") : target) +
         "): refused, a file made through it would be made where it points with the umask's "
         "mode, not owner-only (0600); remove the link, or name its target once that exists";
}

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
    if (std::string why = dangling_link_refusal(path); !why.empty()) throw Error(path + ": " + why);
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

int open_private_append(const std::string& path, const std::string& what,
                        const std::string& writes) {
  const std::string fix = "; remove it (hpsearch makes " + what + " itself, owner-only)";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                  kPrivateFileMode);
  struct stat st {};
  if (fd < 0) {
    const int err = errno;
    if (::lstat(path.c_str(), &st) == 0) {
      if (std::string why =
              written_file_refusal(st.st_mode, st.st_nlink, st.st_uid, what, writes, fix);
          !why.empty())
        throw Error(path + ": " + why);
    }
    throw Error(path + ": cannot open " + what + ": " + reason(err));
  }
  const std::string why =
      ::fstat(fd, &st) != 0
          ? "cannot stat " + what + ": " + reason(errno)
          : written_file_refusal(st.st_mode, st.st_nlink, st.st_uid, what, writes, fix);
  if (!why.empty()) {
    ::close(fd);
    throw Error(path + ": " + why);
  }
  return fd;
}

namespace {

constexpr const char* kOwnerOnlyRule =
    "refused (the folder and its files must be owned by this user and writable by no one else: "
    "a file or link planted there by another user would be written through or loaded)";

// Why `st` (of a folder or file) breaks the owner-only rule, or "".
std::string owner_only_violation(const struct stat& st) {
  if (std::string who = other_owner(st.st_uid); !who.empty()) return who + ": " + kOwnerOnlyRule;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return "writable by group or others (mode " + octal_mode(st.st_mode) + "): " + kOwnerOnlyRule;
  return "";
}

// The plain file name `name` (no '/', not "." or ".."), or throws.
void check_name(const std::string& folder, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw Error(folder + ": '" + name + "' is not a plain file name");
}

// Closes `fd` when it goes out of scope.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

OwnerOnlyFolder::OwnerOnlyFolder(const std::string& path, bool create,
                                 const std::string& refusal_hint) {
  const std::string hint = refusal_hint.empty() ? "" : "; " + refusal_hint;
  if (path.empty()) throw Error("an empty folder name");
  if (create) create_private_directories(path);
  // The last component is not followed: a link there could point anywhere.
  // A trailing '/' would make the kernel follow it, so it is dropped.
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  fd_ = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    struct stat st {};
    if ((err == ELOOP || err == ENOTDIR) && ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      throw Error(path + ": is a symbolic link: " + kOwnerOnlyRule + hint);
    throw Error(path + ": cannot open the folder: " + reason(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISDIR(st.st_mode)) {
    ::close(fd_);
    throw Error(path + ": not a folder");
  }
  if (std::string why = owner_only_violation(st); !why.empty()) {
    ::close(fd_);
    throw Error(path + ": " + why + hint);
  }
  // The folder the kernel opened (not a lexical guess: "a/../b" with a link
  // at "a" is not "b").
  std::error_code ec;
  auto real = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd_), ec);
  if (ec || real.empty() || real.is_relative())
    real = std::filesystem::weakly_canonical(std::filesystem::absolute(p), ec);
  path_ = real.string();
}

OwnerOnlyFolder::~OwnerOnlyFolder() {
  if (fd_ >= 0) ::close(fd_);
}

void OwnerOnlyFolder::replace_file(
    const std::string& name,
    const std::function<void(const std::function<void(const void*, std::size_t)>&)>& write) const {
  check_name(path_, name);
  const std::string tmp = name + ".tmp";
  const std::string where = path_ + "/" + name;
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(fd_, tmp.c_str(), flags, kPrivateFileMode);
  if (fd < 0 && errno == EEXIST) {
    // A stale temporary file of a killed writer (or a link): unlink it, the
    // link itself, and try once more.
    (void)::unlinkat(fd_, tmp.c_str(), 0);
    fd = ::openat(fd_, tmp.c_str(), flags, kPrivateFileMode);
  }
  if (fd < 0) throw Error(where + ".tmp: cannot create the file: " + reason(errno));
  bool renamed = false;
  try {
    FdCloser closer{fd};
    (void)::fchmod(fd, kPrivateFileMode);  // whatever the umask
    write([&](const void* data, std::size_t size) {
      const char* p = static_cast<const char*>(data);
      while (size > 0) {
        const ssize_t n = ::write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error(where + ".tmp: cannot write: " + reason(n < 0 ? errno : EIO));
        p += n;
        size -= static_cast<std::size_t>(n);
      }
    });
    closer.fd = -1;
    if (::close(fd) != 0) throw Error(where + ".tmp: cannot write: " + reason(errno));
    if (::renameat(fd_, tmp.c_str(), fd_, name.c_str()) != 0)
      throw Error(where + ": cannot rename the temporary file into place: " + reason(errno));
    renamed = true;
  } catch (...) {
    if (!renamed) (void)::unlinkat(fd_, tmp.c_str(), 0);
    throw;
  }
}

bool OwnerOnlyFolder::remove(const std::string& name) const {
  check_name(path_, name);
  return ::unlinkat(fd_, name.c_str(), 0) == 0;
}

bool OwnerOnlyFolder::is_regular_file(const std::string& name) const {
  check_name(path_, name);
  struct stat st {};
  return ::fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

std::string OwnerOnlyFolder::read_file(const std::string& name, std::uint64_t max_bytes) const {
  check_name(path_, name);
  const std::string where = path_ + "/" + name;
  const int fd = ::openat(fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) throw Error(where + ": no such file on this machine");
    if (err == ELOOP) throw Error(where + ": is a symbolic link: " + kOwnerOnlyRule);
    throw Error(where + ": cannot open: " + reason(err));
  }
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(where + ": cannot read: " + reason(errno));
  if (!S_ISREG(st.st_mode)) throw Error(where + ": not a regular file");
  if (std::string why = owner_only_violation(st); !why.empty()) throw Error(where + ": " + why);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes)
    throw Error(where + ": " + std::to_string(size) + " bytes, more than the " +
                std::to_string(max_bytes) + " expected: refused (not read)");
  std::string out(static_cast<std::size_t>(size), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(where + ": cannot read: " + reason(errno));
    if (n == 0) break;  // shrunk meanwhile
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace hps
