// Owner-only files: what hpsearch creates to hold a study (the store, its
// -wal/-shm files, the writer lock file, trial logs and their folders) is
// created readable and writable by its owner only (files 0600, folders
// 0700), whatever the process umask, because it holds the objective's
// environment (API tokens) and the coordinator's endpoint.
//
// Files and folders that already exist are left as they are: a mode the
// user set on purpose (a shared group folder, say) is kept.
//
// SQLite creates a database's -wal and -shm files with the mode of the
// database file itself, so a store created here owner-only has private
// -wal and -shm files too.
//
// The files of a store (the store itself, its SQLite -journal, -wal and
// -shm files, its writer lock file "<store>.lock") that already exist must
// be this user's (store_files_refusal, study_file_owner_refusal): owned by
// the effective uid (root included) and not writable by others. A file
// planted by another user who can write the folder (an empty store, a lock
// file, a -wal of mode 0666) would otherwise be written, read back and run
// (the study's settings hold the objective's command line) as the user's
// own. Group write is allowed: a store in a shared group folder, with a
// mode of 0664 the user gave it, keeps working.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace hps {

// Mode of a new private file / folder.
constexpr unsigned kPrivateFileMode = 0600;
constexpr unsigned kPrivateDirMode = 0700;

// Why a new private file must not be made at `path`, or "" when it may:
// "is a symbolic link to a missing file (...): refused ..." when `path` is a
// symbolic link whose target does not exist. Creating the file through such
// a link would make the target, wherever the link points, with the umask's
// mode (0644) instead of 0600: a link planted by another user where a
// store is to be made would yield a store others can read. A link to an
// existing file is no such case (the file exists and keeps its mode).
// Looks only (lstat, stat); never creates anything.
std::string dangling_link_refusal(const std::string& path);

// Why an existing file of a store (the store, its -journal/-wal/-shm, its
// lock file) with owner `uid` and mode `mode` (st_uid, st_mode) may not be
// used, or "": "owned by uid N, not by this user (uid M): refused ..." when
// `uid` is not the effective uid of this process (root is no exception: a
// file planted by another user is not root's either), or "writable by
// others (mode 0666): refused ..." when others (not the group) may write it.
// Each ends with what to do.
std::string study_file_owner_refusal(std::uint32_t uid, std::uint32_t mode);

// Why an existing file that hpsearch writes into (a SQLite file beside a
// store, the writer lock file, a trial log), with lstat's `mode`, `nlink`
// and `uid` (st_mode, st_nlink, st_uid: a link is not followed), may not
// be written, or "": "<what> is a symbolic link: refused (never followed:
// <writes> whatever it points to)<fix>", "<what> is not a regular file (a
// folder, FIFO or device): refused<fix>", "<what> has N hard links: refused
// (another name for a file <writes>)<fix>" (a name planted for a file
// elsewhere: the writes would land there), or "<what> is <owner rule>"
// (study_file_owner_refusal). `what` names the file ("the writer lock
// file"), `writes` says what would be written through it ("SQLite would
// write the study's journal into"), `fix` ends the first three ("; remove
// it (...)"). The one home of these checks: store_files_refusal,
// WriterLock::lock_file_refusal and open_private_append apply it.
std::string written_file_refusal(std::uint32_t mode, std::uint64_t nlink, std::uint32_t uid,
                                 const std::string& what, const std::string& writes,
                                 const std::string& fix);

// The name the files beside a store are named after: `store_path`, or, when
// its last component is a symbolic link, the path it resolves to (SQLite
// names the -wal and -shm files after the resolved name, and the writer
// lock file follows it). Looks only.
std::string store_base_path(const std::string& store_path);

// A file of a store that may not be used, and the rule it breaks.
struct StoreFileRefusal {
  std::string file;  // the path of the file refused ("a.db-wal")
  std::string rule;  // what is wrong and what to do
  // "<file>: <rule>", the text of the error raised for it (ConfigError in
  // the CLI, StorageError when a SqliteStorage opens the store).
  std::string message() const { return file + ": " + rule; }
};

// Why the store at `store_path` (a plain file path, not ":memory:" or a
// "file:" URI) and the files SQLite keeps beside it may not be opened, or
// nullopt. Refused: an existing store (a symbolic link is followed: its
// target is checked) that breaks study_file_owner_refusal's rule; a
// symbolic link to an empty file (a new store would be made through the
// link, in a file with another mode than 0600); an
// existing "<base>-journal", "<base>-wal" or "<base>-shm" (base:
// store_base_path) that is a symbolic link (never followed: SQLite would
// write the study's journal into whatever it points to), not a regular
// file (a folder, FIFO or device), a file with more than one hard link, or
// that breaks the owner rule. Missing files pass (SQLite makes them with the
// store's mode); a regular -wal/-shm of this user (an interrupted study's)
// passes. Looks only (stat, lstat): nothing is created or written, so a
// caller can refuse before it touches anything. The one home of these
// rules: `hpsearch run`/`resume` and the read commands apply it (exit 2),
// and so does SqliteStorage when it opens a file (StorageError).
std::optional<StoreFileRefusal> store_files_refusal(const std::string& store_path);

// Why `run`/`resume` may not use the store `store_path`: "" if this user
// may write it (or it is missing) and its folder, else "the store is
// read-only for this user (mode 0400): ...; chmod u+w it ..." or "the
// store's folder 'DIR' is read-only for this user (mode 0555): ..." (SQLite
// makes the -wal and -shm files there, the coordinator the writer lock).
// Checked before anything is opened, so the refusal names the mode instead
// of SQLite's "attempt to write a readonly database" (or "unable to open
// database file") at the first write.
std::string read_only_store_refusal(const std::string& store_path);

// The folder of the store `store_path` (where SQLite makes its -wal and
// -shm files) with its mode, as "'DIR' (mode 0555)", when this user may
// not write it (EACCES); "" otherwise (writable, missing, not a folder).
std::string unwritable_store_folder(const std::string& store_path);

// Gives the owner back write permission on the store's -wal and -shm files
// when the store itself is writable by this user and they are not: SQLite
// makes them with the store's mode, so reading a store its owner had made
// read-only (0400) leaves a 0400 -shm behind, and once the store is
// writable again SQLite would refuse every write ("attempt to write a
// readonly database"). Only regular files of this user with one link are
// changed (owner write added, nothing else); what store_files_refusal
// refuses is left to it. Call after store_files_refusal passed. Errors are
// ignored: SQLite then says what it cannot write.
void mend_read_only_sidecars(const std::string& store_path);

// Creates `path` as an empty file with mode 0600 if nothing exists there;
// an existing file (or a symbolic link to one) is left untouched. Returns
// true if the file was created now. Throws Error "<path>: <reason>" naming
// the system's reason (no such folder, permission denied, too many open
// files) if it can neither be created nor found, and
// "<path>: <dangling_link_refusal>" for a symbolic link to a missing file
// (never followed: nothing is created).
bool create_private_file(const std::string& path);

// Creates the folder `path` and any missing parents with mode 0700 (as
// `mkdir -p -m 0700`, for every folder it creates); existing folders are
// left untouched. Throws Error naming the folder and the system's reason if
// a folder cannot be created or a path component is not a folder.
void create_private_directories(const std::string& path);

// Opens `path` for appending (O_APPEND | O_CLOEXEC | O_NOFOLLOW |
// O_NONBLOCK: a symbolic link at `path` is not followed, a FIFO not waited
// on), creating it with mode 0600 if it is missing. Returns the descriptor.
// Throws Error "<path>: <rule>" when what is there breaks
// written_file_refusal's rule (`what` and `writes` as there: a symbolic
// link, not a regular file, more than one hard link, another user's; as
// found by fstat of what was opened, so a file swapped in meanwhile is
// refused too; nothing is written), or "<path>: cannot open <what>:
// <reason>".
int open_private_append(const std::string& path, const std::string& what,
                        const std::string& writes);

// A folder that only its owner can write, opened once: every file operation
// goes through its descriptor (openat/renameat/unlinkat), so a folder
// renamed or replaced by a link after the checks is not followed, and no
// operation follows a symbolic link planted in the folder. For files that
// are read back and deserialized (trial checkpoints), where a file planted
// by another user would be loaded as the user's own. The rules are those of
// OpenSSH's checks of ~/.ssh (a folder or file owned by someone else, or
// writable by group or others, is refused) plus O_NOFOLLOW | O_EXCL writes
// to a temporary name renamed into place (the rules of mkstemp(3) +
// rename(2) in the CERT C rule FIO21-C).
class OwnerOnlyFolder {
 public:
  // Opens the folder `path`; with `create`, missing folders are created
  // first (0700, as create_private_directories). Throws Error
  // "<path>: <reason>" when the folder cannot be created or opened, when its
  // last component is a symbolic link ("is a symbolic link: refused ..."),
  // is not a folder, is owned by another uid than this process's effective
  // uid ("owned by uid N, not by this user (uid M): refused ..."), or is
  // writable by group or others ("writable by group or others (mode 0777):
  // refused ..."). A folder higher up the path may be a link (/home -> /data).
  // `refusal_hint`, when not empty, ends each of these three refusals
  // ("...; <hint>"): what the caller's user should do, which depends on who
  // names the folder (a checkpoint_dir the user chose: "name the folder it
  // points to"; a trial folder hpsearch makes: remove the planted entry).
  OwnerOnlyFolder(const std::string& path, bool create, const std::string& refusal_hint = "");
  ~OwnerOnlyFolder();
  OwnerOnlyFolder(const OwnerOnlyFolder&) = delete;
  OwnerOnlyFolder& operator=(const OwnerOnlyFolder&) = delete;

  // The absolute path of the folder opened (links above it resolved, as
  // the kernel resolved them when it was opened).
  const std::string& path() const { return path_; }

  // Replaces the file `name` (a plain name, no '/') with a new file of
  // mode 0600 whose bytes `write` produces: `write` gets a sink that writes
  // all its bytes or throws. The bytes go to `name` + ".tmp", created with
  // O_CREAT | O_EXCL | O_NOFOLLOW (a stale one, or a link left there, is
  // unlinked first: the link, never its target), then renamed over `name`
  // (a link at `name` is replaced, not followed). On an error the
  // temporary file is removed and Error "<folder>/<name>: <reason>" thrown.
  void replace_file(
      const std::string& name,
      const std::function<void(const std::function<void(const void*, std::size_t)>&)>& write) const;

  // Unlinks `name` if it exists (a link itself, never its target); returns
  // true if something was removed.
  bool remove(const std::string& name) const;

  // Whether `name` is a regular file (a link is not followed: false).
  bool is_regular_file(const std::string& name) const;

  // The bytes of the file `name`, opened with O_NOFOLLOW | O_NONBLOCK (a
  // FIFO does not block). Throws Error "<folder>/<name>: <reason>" when it
  // is missing, a symbolic link, not a regular file, owned by another uid,
  // writable by group or others, or larger than `max_bytes` (not read).
  std::string read_file(const std::string& name, std::uint64_t max_bytes) const;

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace hps
