#include "search/writer_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <thread>
#include <utility>
#include <vector>

#include "search/caching_storage.h"
#include "search/json_util.h"
#include "search/printable.h"
#include "search/private_files.h"
#include "search/sqlite_storage.h"
#include "search/study.h"
#include "search/util/host.h"

namespace hps {

namespace {

std::string reason(int err) {
  const char* text = strerrordesc_np(err);
  return text ? text : "error " + std::to_string(err);
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string format_time(double unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  if (std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", &tm) == 0) return "?";
  return buf;
}

struct flock region(std::int64_t offset, short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(offset);
  fl.l_len = static_cast<off_t>(WriterLock::kRegionBytes);
  fl.l_pid = 0;  // required by F_OFD_*
  return fl;
}

std::int64_t region_offset(std::int64_t study_id) {
  if (study_id < 0 || study_id > (std::int64_t{1} << 40))
    throw Error("writer lock: bad study id " + std::to_string(study_id));
  return study_id * WriterLock::kRegionBytes;
}

// The holder's line in its region; nullopt if empty or unreadable (being
// written, or cleared).
std::optional<WriterLockHolder> read_holder(int fd, std::int64_t offset) {
  std::vector<char> buf(static_cast<std::size_t>(WriterLock::kRegionBytes));
  ssize_t n;
  do {
    n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return std::nullopt;
  std::string text(buf.data(), static_cast<std::size_t>(n));
  auto end = text.find('\n');
  if (end == std::string::npos) return std::nullopt;
  text.resize(end);
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  WriterLockHolder h;
  h.host = j.value("host", std::string());
  h.pid = j.value("pid", std::int64_t{0});
  h.since = j.value("since", 0.0);
  h.study = j.value("study", std::string());
  h.endpoint = j.value("endpoint", std::string());
  return h;
}

// A holder's region may be empty for a moment after it took the lock (it
// writes right after); wait up to ~200 ms for its line.
std::optional<WriterLockHolder> read_holder_patiently(int fd, std::int64_t offset) {
  for (int i = 0; i < 20; ++i) {
    if (auto h = read_holder(fd, offset)) return h;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

}  // namespace

std::string WriterLockHolder::describe() const {
  std::string out = printable(host.empty() ? "?" : host) + ":" + std::to_string(pid);
  out += ", since " + format_time(since);
  if (!endpoint.empty()) out += ", endpoint " + printable(endpoint);
  return out;
}

std::string WriterLock::lock_path(const std::string& store_path) {
  // A store named through a symbolic link has its lock beside the file the
  // link names (as SQLite's journal does): one lock file however the store
  // is named, so a link cannot open a second coordinator on the study.
  return store_base_path(store_path) + ".lock";
}

std::string WriterLock::store_refusal(const std::string& store_path) {
  struct stat st {};
  if (::stat(store_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink <= 1) return "";
  return "the store has " + std::to_string(st.st_nlink) +
         " hard links (other names for the same file): refused (SQLite's journal and the writer "
         "lock go by the name, so two coordinators could run the study at once under two names "
         "and corrupt it); keep one name, or copy the file";
}

namespace {

// Why a lock file with status `st` (from lstat, or fstat of what open(2)
// opened) may not be used, or "": lock_file_refusal's rule.
std::string lock_file_refusal_of(const struct stat& st) {
  return written_file_refusal(
      st.st_mode, st.st_nlink, st.st_uid, "the writer lock file",
      "the coordinator would lock and write its holder line into",
      "; remove it (the coordinator makes the lock file itself, owner-only)");
}

// Opens the lock file `path` of the store `store_path` with `flags` (plus
// O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK: a link is not followed, a FIFO not
// waited on), refusing what lock_file_refusal's rule refuses, as found by
// open(2) or by fstat of what it opened. Returns -1 when the file is missing
// and `missing_ok`; throws Error "<path>: <rule or reason>" otherwise.
int open_lock_file(const std::string& path, const std::string& store_path, int flags,
                   bool missing_ok) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, kPrivateFileMode);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT && missing_ok) return -1;
    if (std::string why = WriterLock::lock_file_refusal(store_path); !why.empty())
      throw Error(path + ": " + why);
    throw Error(path + ": cannot open the writer lock file: " + reason(err) +
                (err == EMFILE || err == ENFILE ? " (descriptor limit reached)" : ""));
  }
  struct stat st {};
  const std::string why =
      ::fstat(fd, &st) != 0 ? "cannot stat the writer lock file" : lock_file_refusal_of(st);
  if (!why.empty()) {
    ::close(fd);
    throw Error(path + ": " + why);
  }
  return fd;
}

}  // namespace

std::string WriterLock::lock_file_refusal(const std::string& store_path) {
  struct stat st {};
  if (::lstat(lock_path(store_path).c_str(), &st) != 0) return "";  // none yet: acquire() makes it
  return lock_file_refusal_of(st);
}

WriterLock WriterLock::acquire(const std::string& store_path, std::int64_t study_id,
                               WriterLockHolder holder) {
  const std::string path = lock_path(store_path);
  const std::int64_t offset = region_offset(study_id);
  int fd = open_lock_file(path, store_path, O_RDWR | O_CREAT, false);
  if (std::string why = store_refusal(store_path); !why.empty()) {
    ::close(fd);
    throw Error(store_path + ": " + why);
  }
  struct flock fl = region(offset, F_WRLCK);
  int rc;
  do {
    rc = ::fcntl(fd, F_OFD_SETLK, &fl);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err == EAGAIN || err == EACCES) {
      auto who = read_holder_patiently(fd, offset);
      ::close(fd);
      std::string name =
          holder.study.empty() ? "the study" : "study '" + printable(holder.study) + "'";
      std::string msg = name + " in " + store_path + " is being run by another coordinator (" +
                        (who ? who->describe() : std::string("holder unknown")) +
                        "); stop it first, or connect workers to it";
      throw WriterLockBusy(msg, who);
    }
    ::close(fd);
    if (err == EINVAL || err == ENOLCK || err == EOPNOTSUPP)
      throw WriterLockUnsupported(path + ": cannot lock the writer lock file: " + reason(err) +
                                  " (a filesystem without file locks)");
    throw Error(path + ": cannot lock the writer lock file: " + reason(err));
  }
  WriterLock lock;
  lock.fd_ = fd;
  lock.offset_ = offset;
  lock.holder_ = std::move(holder);
  if (lock.holder_.since == 0) lock.holder_.since = unix_now();
  lock.write_holder();
  return lock;
}

namespace {

// The holder of a lock on the region `fl` asks about (F_OFD_GETLK), or
// nullopt. As acquire(): a link planted as the lock file is not followed
// (it could point at a file whose lock and holder line show a coordinator
// that is not this study's), nor is a FIFO waited on.
std::optional<WriterLockHolder> ask_lock(const std::string& store_path, struct flock fl) {
  const std::string path = WriterLock::lock_path(store_path);
  int fd = open_lock_file(path, store_path, O_RDONLY, true);
  if (fd < 0) return std::nullopt;
  int rc;
  do {
    rc = ::fcntl(fd, F_OFD_GETLK, &fl);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(path + ": cannot ask the writer lock: " + reason(err));
  }
  if (fl.l_type == F_UNLCK) {
    ::close(fd);
    return std::nullopt;
  }
  // The region of the lock found (the whole-file question of query_any
  // gets the first one held).
  auto who = read_holder_patiently(fd, static_cast<std::int64_t>(fl.l_start));
  ::close(fd);
  return who ? *who : WriterLockHolder{};
}

}  // namespace

std::optional<WriterLockHolder> WriterLock::query(const std::string& store_path,
                                                  std::int64_t study_id) {
  return ask_lock(store_path, region(region_offset(study_id), F_WRLCK));
}

std::optional<WriterLockHolder> WriterLock::query_any(const std::string& store_path) {
  struct flock fl = region(0, F_WRLCK);
  fl.l_len = 0;  // to the end of the file and beyond: every study's region
  return ask_lock(store_path, fl);
}

WriterLock::~WriterLock() { release(); }

WriterLock::WriterLock(WriterLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      offset_(other.offset_),
      holder_(std::move(other.holder_)) {}

WriterLock& WriterLock::operator=(WriterLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    offset_ = other.offset_;
    holder_ = std::move(other.holder_);
  }
  return *this;
}

void WriterLock::set_endpoint(const std::string& endpoint) {
  holder_.endpoint = endpoint;
  write_holder();
}

void WriterLock::write_holder() noexcept {
  if (fd_ < 0) return;
  try {
    Json j{{"host", holder_.host},
           {"pid", holder_.pid},
           {"since", holder_.since},
           {"study", holder_.study},
           {"endpoint", holder_.endpoint}};
    std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    if (line.size() > static_cast<std::size_t>(kRegionBytes)) {
      j["endpoint"] = "";
      j["study"] = holder_.study.substr(0, 255);
      line = j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    }
    // The line, then zeros to the end of the region, in one write; a reader
    // that catches it half-written finds no valid line and reads again.
    std::string block(static_cast<std::size_t>(kRegionBytes), '\0');
    block.replace(0, std::min(line.size(), block.size()), line, 0,
                  std::min(line.size(), block.size()));
    (void)::pwrite(fd_, block.data(), block.size(), static_cast<off_t>(offset_));
  } catch (...) {
    // Naming the holder is a courtesy; the lock holds without it.
  }
}

void WriterLock::release() noexcept {
  if (fd_ < 0) return;
  std::string zeros(static_cast<std::size_t>(kRegionBytes), '\0');
  (void)::pwrite(fd_, zeros.data(), zeros.size(), static_cast<off_t>(offset_));
  struct flock fl = region(offset_, F_UNLCK);
  (void)::fcntl(fd_, F_OFD_SETLK, &fl);
  ::close(fd_);  // would drop the lock by itself
  fd_ = -1;
}

std::string storage_file(Storage& storage) {
  if (auto* cached = dynamic_cast<CachingStorage*>(&storage)) return storage_file(cached->inner());
  auto* sqlite = dynamic_cast<SqliteStorage*>(&storage);
  if (!sqlite) return "";
  const std::string& path = sqlite->path();
  if (path.empty() || path == ":memory:" || path.rfind("file:", 0) == 0) return "";
  return path;
}

WriterLock lock_study_for_writing(const Study& study) {
  const std::string path = storage_file(study.storage());
  if (path.empty()) return {};
  WriterLockHolder me;
  me.host = util::host_name();
  me.pid = static_cast<std::int64_t>(::getpid());
  me.study = study.name();
  try {
    return WriterLock::acquire(path, study.study_id(), std::move(me));
  } catch (const WriterLockUnsupported& e) {
    spdlog::warn(
        "{}; one coordinator per study is not enforced by a lock on this filesystem (keep the "
        "store on a local disk)",
        e.what());
    return {};
  }
}

}  // namespace hps
