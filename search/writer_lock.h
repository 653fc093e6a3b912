// WriterLock: one coordinator per study, enforced by the operating system.
//
//   WriterLock lock = WriterLock::acquire("fmnist.db", study_id, holder);
//   ... the only writer of that study while `lock` lives ...
//
// The lock is an open-file-description lock (fcntl F_OFD_SETLK, Linux >=
// 3.15) on a region of the file "<store>.lock" (mode 0600, next to the
// store; never deleted, so every process locks the same inode). Each study
// has its own region (4096 bytes at offset study_id x 4096), so studies of
// one store run side by side but one study never has two coordinators.
// Taking the lock is one system call: of N coordinators started at the same
// moment exactly one gets it, the others get WriterLockBusy at once. The
// holder writes who it is (host, pid, since, study, endpoint; one line of
// JSON) into its region, so the others can name it. The kernel drops the
// lock when the holder's process ends, however it ends (kill -9 included),
// so no stale lock is ever left behind; and since the lock belongs to the
// open file description (not to the process, as a classic POSIX lock
// would), two coordinators in one process also exclude each other, and
// closing some other descriptor of the file drops nothing. The descriptor
// is close-on-exec, so worker processes never inherit the lock.
//
// Who takes it: hps::Coordinator, for its whole life, when its study is in
// a SqliteStorage (an in-memory study cannot be shared by processes).
// Plain embedded use of a Study (ask/tell, optimize() in several processes
// on one file) does not take it: SQLite's own locking keeps the file
// consistent there, and trial numbers stay unique (storage.h).
//
// Limits. The lock works between processes of one host on a local
// filesystem. On NFS it is only as good as the NFS lock service: NFSv4, or
// NFSv3 with lockd (NLM), excludes coordinators on different clients; a
// mount with `nolock` (or `local_lock=all`) excludes only coordinators on
// the same client. Keep a store on a local disk (SQLite's WAL mode needs
// that anyway: its shared memory does not work across hosts).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "search/errors.h"

namespace hps {

// Who holds a study's writer lock, as the holder wrote it.
struct WriterLockHolder {
  std::string host;      // host name of the holder
  std::int64_t pid = 0;  // its process id on that host
  double since = 0;      // when it took the lock, unix seconds
  std::string study;     // the study's name
  std::string endpoint;  // where its workers connect ("" if not known yet)

  // "host:pid, since 2026-11-29 12:00:00 UTC (local time), endpoint tcp://..."
  // (no endpoint part while it is ""); control characters are escaped.
  std::string describe() const;
};

// Another process (or another object of this one) holds the lock. what()
// names the holder: "study 'x' in a.db is being run by another coordinator
// (host:pid, since ...)".
class WriterLockBusy : public Error {
 public:
  WriterLockBusy(const std::string& message, std::optional<WriterLockHolder> holder)
      : Error(message), holder_(std::move(holder)) {}
  // nullopt when the holder wrote nothing readable yet.
  const std::optional<WriterLockHolder>& holder() const { return holder_; }

 private:
  std::optional<WriterLockHolder> holder_;
};

// The filesystem of the lock file has no (open-file-description) locks:
// ENOLCK, EINVAL or EOPNOTSUPP from fcntl (some network and FUSE
// filesystems, kernels before 3.15).
class WriterLockUnsupported : public Error {
 public:
  using Error::Error;
};

class WriterLock {
 public:
  // Bytes of the lock file per study.
  static constexpr std::int64_t kRegionBytes = 4096;

  // The lock file of the store at `store_path`: "<store_path>.lock", where
  // a store named through a symbolic link (its last component) is the file
  // the link resolves to: "<resolved path>.lock", one lock however the
  // store is named.
  static std::string lock_path(const std::string& store_path);

  // Why the store at `store_path` may not be run by a coordinator, or "":
  // "the store has N hard links ...: refused ..." for a regular file with
  // more than one name (each name would get its own lock file and SQLite
  // journal: two coordinators at once). Looks only (stat); "" when there is
  // no file yet. acquire() applies it (Error "<store>: <rule>").
  static std::string store_refusal(const std::string& store_path);

  // Why the lock file of the store at `store_path` cannot be used, or "" if
  // it can (a regular file of this user, or nothing yet: acquire() makes
  // it): "is a symbolic link: refused ..." (a link is never followed: the
  // coordinator would lock, and write its holder line into, whatever it
  // points to) or "is not a regular file (a folder, FIFO or device): refused
  // ..." or "has N hard links: refused ..." (another name for a file) or
  // "is owned by uid N, not by this user ..." / "is writable by others
  // ..." (study_file_owner_refusal, private_files.h: a lock file planted by
  // another user), each ending with what to do. Looks only (lstat): nothing is created, so a
  // caller can refuse a run before it writes anything (hpsearch run: exit 2).
  static std::string lock_file_refusal(const std::string& store_path);

  // Takes the writer lock of study `study_id` (>= 0) in the store at
  // `store_path` without waiting, and writes `holder` into it (its
  // `since` is set to now if 0). Throws WriterLockBusy naming the holder if
  // the lock is held; WriterLockUnsupported if the filesystem has no such
  // locks; Error "<lock file>: <lock_file_refusal>" for a lock file that is
  // a symbolic link (not followed), not a regular file or not this user's
  // (nothing is written into it); Error naming the
  // lock file if it cannot be created, opened or locked (permissions, no
  // descriptor left: "too many open files").
  static WriterLock acquire(const std::string& store_path, std::int64_t study_id,
                            WriterLockHolder holder);

  // Whether study `study_id` of the store at `store_path` is locked now, and
  // by whom: nullopt if nobody holds it (also when there is no lock file:
  // no coordinator of this version ever ran it). A held lock whose holder
  // wrote nothing readable yet gives a holder with pid 0. Never waits, never
  // creates the lock file. Throws Error if the lock file exists but cannot
  // be opened or asked, or breaks lock_file_refusal's rule (a symbolic link,
  // never followed; a folder, FIFO or device): "<lock file>: <rule>".
  static std::optional<WriterLockHolder> query(const std::string& store_path,
                                               std::int64_t study_id);
  // As query(), for any study of the store: a holder of some study's lock
  // (the first region held), or nullopt if none is held. The same errors.
  // A lock of this process counts too (each lock has its own open file
  // description). SQLite storage asks it before it upgrades an existing
  // store's schema (sqlite/schema.h: a coordinator of an older version
  // running a study of the file would fail under it).
  static std::optional<WriterLockHolder> query_any(const std::string& store_path);

  WriterLock() = default;  // holds nothing
  ~WriterLock();
  WriterLock(WriterLock&& other) noexcept;
  WriterLock& operator=(WriterLock&& other) noexcept;
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const WriterLockHolder& holder() const { return holder_; }
  // Records where the holder's workers connect (rewrites its region).
  // Errors writing are ignored: the lock itself is unaffected.
  void set_endpoint(const std::string& endpoint);
  // Clears the region and drops the lock (also done by the destructor).
  void release() noexcept;

 private:
  void write_holder() noexcept;

  int fd_ = -1;
  std::int64_t offset_ = 0;
  WriterLockHolder holder_;
};

class Storage;
class Study;

// The writer lock of `study` for this process (host name, pid, now) when
// the study is kept in a SqliteStorage with a file; an empty WriterLock
// (held() false) for any other storage (":memory:", InMemoryStorage), which
// no other process can open, and also (with a warning in the log) when the
// store's filesystem has no locks: the caller then falls back to its own
// check. Throws WriterLockBusy and Error as WriterLock::acquire().
WriterLock lock_study_for_writing(const Study& study);

// The path of the SQLite file behind `storage` (what lock_study_for_writing()
// locks and `hpsearch status` asks), or "" if it is not a SqliteStorage
// (alone or inside a CachingStorage) with a file of its own.
std::string storage_file(Storage& storage);

}  // namespace hps
