#include "protocol/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "search/errors.h"

namespace hps::curve {

namespace fs = std::filesystem;

namespace {

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// `path` without trailing '/' (so that lstat sees a link, not its target).
std::string without_trailing_slash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// The lines of a file that are not blank or comments, with their line
// numbers. `owner_only`: a secret (check_key_path kSecret, else kFile).
std::vector<std::pair<int, std::string>> read_lines(const std::string& path, bool owner_only) {
  check_key_path(path, owner_only ? KeyPathKind::kSecret : KeyPathKind::kFile);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    throw ConfigError(path, std::string("cannot read the key file: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ConfigError(path, "is not a regular file");
  }
  std::string text;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < (1u << 20))
    text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  std::vector<std::pair<int, std::string>> lines;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = trim(line);
    // '#' starts a comment, unless the line starts with a key ('#' is Z85).
    if (line.empty() || (line[0] == '#' && !is_key(line.substr(0, line.find_first_of(" \t")))))
      continue;
    lines.emplace_back(number, line);
  }
  return lines;
}

std::string read_key(const std::string& path, bool secret) {
  auto lines = read_lines(path, secret);
  if (lines.empty()) throw ConfigError(path, "holds no key");
  if (lines.size() > 1) throw ConfigError(path, "holds more than one key line");
  const std::string& key = lines[0].second;
  if (!is_key(key))
    throw ConfigError(path, std::string("is not a Z85 CURVE ") + (secret ? "secret" : "public") +
                                " key (40 characters of the Z85 alphabet, as `hpsearch keys "
                                "init` writes)");
  return key;
}

// Writes `text` to a new file (O_EXCL) with `mode`. Throws Error if it
// exists or cannot be written.
void write_new_file(const fs::path& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    throw Error("cannot create " + path.string() + ": " + std::strerror(errno) +
                (errno == EEXIST ? " (existing keys are never overwritten)" : ""));
  (void)fchmod(fd, mode);  // the umask may have removed bits
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::fsync(fd) == 0 && ok;
  ok = ::close(fd) == 0 && ok;
  if (!ok) throw Error("cannot write " + path.string() + ": " + std::strerror(errno));
}

// Creates `dir` (0700, its missing parents too) if it does not exist (true:
// created here); an existing one must pass check_key_path and is never
// chmodded.
bool make_private_dir(const fs::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0) {
    check_key_path(dir.string(), KeyPathKind::kFolder);
    return false;
  }
  std::error_code ec;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) {  // made meanwhile by someone else: the rule decides
      check_key_path(dir.string(), KeyPathKind::kFolder);
      return false;
    }
    throw Error("cannot create the folder " + dir.string() + ": " + std::strerror(errno));
  }
  // Ours, just made: the umask may have removed bits of 0700.
  if (::chmod(dir.c_str(), 0700) != 0)
    throw Error("cannot chmod 700 " + dir.string() + ": " + std::strerror(errno));
  return true;
}

}  // namespace

void check_key_path(const std::string& given, KeyPathKind kind) {
  const std::string path = without_trailing_slash(given);
  const bool folder = kind == KeyPathKind::kFolder;
  const char* what = folder ? "keys folder" : "key file";
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    throw ConfigError(path, std::string("cannot read the ") + what + ": " + std::strerror(errno));
  if (S_ISLNK(st.st_mode))
    throw ConfigError(path, std::string("is a symbolic link; a ") + what +
                                " must not be one (another user could own where it points): "
                                "name the real " +
                                (folder ? "folder" : "file"));
  const uid_t me = ::geteuid();
  if (st.st_uid != me)
    throw ConfigError(path, std::string("is owned by uid ") + std::to_string(st.st_uid) +
                                ", not by this process's user (uid " + std::to_string(me) +
                                "); a " + what +
                                " must be owned by the user who runs hpsearch, as anyone "
                                "who owns it can change which workers are admitted");
  if (folder ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    throw ConfigError(path, folder ? "is not a folder" : "is not a regular file");
  if (kind == KeyPathKind::kSecret && (st.st_mode & 077) != 0)
    throw ConfigError(path, "holds a secret key but has mode " + octal_mode(st.st_mode) +
                                ": it must be readable by its owner only (chmod 600 " + path + ")");
  if ((st.st_mode & 022) != 0)
    throw ConfigError(path, std::string("has mode ") + octal_mode(st.st_mode) + ": a " + what +
                                " must not be writable by group or others (chmod go-w " + path +
                                ")");
}

bool available() { return zmq_has("curve") != 0; }

void require(const std::string& what) {
  if (!available())
    throw Error(what +
                ": this libzmq was built without CURVE (zmq_has(\"curve\") is false); install "
                "a libzmq built with libsodium (Debian: libzmq5), or use --insecure");
}

KeyPair generate() {
  require("CURVE keys");
  char pub[kKeyChars + 1] = {0};
  char sec[kKeyChars + 1] = {0};
  if (zmq_curve_keypair(pub, sec) != 0)
    throw Error(std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
  return {pub, sec};
}

bool is_key(const std::string& text) {
  if (text.size() != kKeyChars) return false;
  std::uint8_t bytes[32];
  return zmq_z85_decode(bytes, text.c_str()) != nullptr;
}

std::string public_key_of(const std::string& secret_key, const std::string& field) {
  if (!is_key(secret_key)) throw ConfigError(field, "is not a Z85 CURVE key (40 characters)");
  require(field);
  char pub[kKeyChars + 1] = {0};
  if (zmq_curve_public(pub, secret_key.c_str()) != 0)
    throw ConfigError(field, std::string("zmq_curve_public failed: ") + zmq_strerror(zmq_errno()));
  return pub;
}

std::string fingerprint(const std::string& public_key) { return public_key.substr(0, 8) + "..."; }

std::string read_secret_key(const std::string& path) { return read_key(path, true); }
std::string read_public_key(const std::string& path) { return read_key(path, false); }

std::map<std::string, std::string> read_authorized_keys(const std::string& path) {
  std::map<std::string, std::string> keys;
  for (const auto& [number, line] : read_lines(path, false)) {
    auto space = line.find_first_of(" \t");
    std::string key = line.substr(0, space);
    std::string name = space == std::string::npos ? "" : trim(line.substr(space));
    if (!is_key(key))
      throw ConfigError(path + ":" + std::to_string(number),
                        "'" + key.substr(0, 48) +
                            "' is not a Z85 CURVE public key (40 characters of the Z85 alphabet)");
    keys[key] = name.empty() ? fingerprint(key) : name;
  }
  if (keys.empty())
    throw ConfigError(path, "lists no worker key (add some with `hpsearch keys add DIR`)");
  return keys;
}

namespace {

// Refuses `dir` when it exists and is no folder (a key file, or any other
// file, given where a keys folder goes): ConfigError "is not a folder", and
// the folder to name instead when the file is one of a keys folder's.
// `what`: the folder wanted ("a keys folder, as `hpsearch keys init DIR`
// makes", ...).
void refuse_file_as_folder(const std::string& dir, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec || !fs::exists(st) || fs::is_directory(st)) return;
  std::string hint;
  const fs::path parent = fs::path(dir).parent_path();
  for (const char* name : {kCoordinatorSecretFile, kCoordinatorPublicFile, kAuthorizedWorkersFile,
                           kWorkerSecretFile, kWorkerPublicFile})
    if (fs::path(dir).filename() == name)
      hint = "; it is a key file: name the folder that holds it, " +
             (parent.empty() ? std::string(".") : parent.string());
  throw ConfigError(dir, std::string(fs::is_regular_file(st) ? "is a file, " : "") +
                             "not a folder: keys are given as a folder (" + what + ")" + hint);
}

// Refuses `dir` when it does not exist: a dangling symbolic link is named
// as one, with its target; anything else is "no such keys folder" (`make`:
// the command that makes one).
void refuse_missing_folder(const std::string& dir, const std::string& make) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  if (fs::is_symlink(fs::symlink_status(dir, ec))) {
    const fs::path target = fs::read_symlink(dir, ec);
    throw ConfigError(dir, "is a dangling symbolic link (to '" + target.string() +
                               "', which does not exist); name the keys folder itself: a "
                               "keys folder is never read through a link");
  }
  throw ConfigError(dir, "no such keys folder (make one with `" + make + "`)");
}

}  // namespace

CoordinatorKeys load_coordinator_keys(const std::string& dir) {
  fs::path d(dir);
  refuse_file_as_folder(dir, "a keys folder, as `hpsearch keys init DIR` makes: it holds " +
                                 std::string(kCoordinatorSecretFile) + ", " +
                                 kAuthorizedWorkersFile + " and the worker-N folders");
  if (!fs::exists(d / kCoordinatorSecretFile) && fs::exists(d / kWorkerSecretFile))
    throw ConfigError(dir, std::string("is a worker's keys folder; the coordinator needs the "
                                       "folder that holds ") +
                               kCoordinatorSecretFile + " and " + kAuthorizedWorkersFile);
  refuse_missing_folder(dir, "hpsearch keys init " + dir);
  check_key_path(dir, KeyPathKind::kFolder);
  CoordinatorKeys out;
  out.keys.secret_key = read_secret_key((d / kCoordinatorSecretFile).string());
  out.keys.public_key = public_key_of(out.keys.secret_key, (d / kCoordinatorSecretFile).string());
  out.authorized = read_authorized_keys((d / kAuthorizedWorkersFile).string());
  return out;
}

WorkerKeys load_worker_keys(const std::string& dir) {
  fs::path d(dir);
  refuse_file_as_folder(dir, "a worker folder of a keys folder, such as KEYS/worker-1: it holds " +
                                 std::string(kWorkerSecretFile) + " and " + kCoordinatorPublicFile);
  if (!fs::exists(d / kWorkerSecretFile) && fs::exists(d / kCoordinatorSecretFile))
    throw ConfigError(dir, std::string("is the coordinator's keys folder; a worker needs a "
                                       "worker folder in it, such as ") +
                               (d / "worker-1").string() + " (copy that one to the worker)");
  refuse_missing_folder(dir, "hpsearch keys init DIR");
  check_key_path(dir, KeyPathKind::kFolder);
  WorkerKeys out;
  out.keys.secret_key = read_secret_key((d / kWorkerSecretFile).string());
  out.keys.public_key = public_key_of(out.keys.secret_key, (d / kWorkerSecretFile).string());
  out.server_key = read_public_key((d / kCoordinatorPublicFile).string());
  return out;
}

MadeKeys make_keys(const std::string& dir, int workers, bool add) {
  if (workers < 1) throw ConfigError("--workers", "must be >= 1");
  if (workers > 10000) throw ConfigError("--workers", "must be <= 10000");
  require("hpsearch keys");
  fs::path d(without_trailing_slash(dir));
  const fs::path secret_file = d / kCoordinatorSecretFile;
  const fs::path public_file = d / kCoordinatorPublicFile;
  const fs::path authorized_file = d / kAuthorizedWorkersFile;
  MadeKeys out;
  std::string server_public;
  struct stat st {};
  const bool existed = ::lstat(d.c_str(), &st) == 0;
  if (existed) check_key_path(d.string(), KeyPathKind::kFolder);
  if (add) {
    if (!existed || ::lstat(secret_file.c_str(), &st) != 0)
      throw ConfigError(
          dir, "holds no coordinator keys; make them with `hpsearch keys init " + dir + "`");
    check_key_path(secret_file.string(), KeyPathKind::kSecret);
    check_key_path(authorized_file.string(), KeyPathKind::kFile);
    server_public = read_public_key(public_file.string());
  } else {
    if (existed &&
        (::lstat(secret_file.c_str(), &st) == 0 || ::lstat(authorized_file.c_str(), &st) == 0))
      throw ConfigError(dir,
                        "already holds keys (they are never overwritten); add workers with "
                        "`hpsearch keys add " +
                            dir + " --workers N`, or choose another folder");
    if (existed && !fs::is_empty(d))
      throw ConfigError(dir,
                        "holds other files; name an empty or new folder (keys are made only "
                        "in a folder hpsearch creates, or an empty one)");
    make_private_dir(d);
    KeyPair server = generate();
    write_new_file(secret_file,
                   "# hpsearch: the coordinator's CURVE secret key. Keep it owner-only (0600); "
                   "never copy it to a worker.\n" +
                       server.secret_key + "\n",
                   0600);
    write_new_file(public_file,
                   "# hpsearch: the coordinator's CURVE public key (workers pin it).\n" +
                       server.public_key + "\n",
                   0644);
    server_public = server.public_key;
    out.new_coordinator = true;
  }
  int next = 1;
  while (fs::exists(d / ("worker-" + std::to_string(next)))) ++next;
  std::string lines;
  for (int i = 0; i < workers; ++i, ++next) {
    const std::string name = "worker-" + std::to_string(next);
    const fs::path wdir = d / name;
    if (::mkdir(wdir.c_str(), 0700) != 0)
      throw Error("cannot create " + wdir.string() + ": " + std::strerror(errno));
    KeyPair pair = generate();
    write_new_file(wdir / kWorkerSecretFile,
                   "# hpsearch: the CURVE secret key of " + name +
                       ". Keep it owner-only (0600).\n" + pair.secret_key + "\n",
                   0600);
    write_new_file(wdir / kWorkerPublicFile,
                   "# hpsearch: the CURVE public key of " + name + ".\n" + pair.public_key + "\n",
                   0644);
    write_new_file(wdir / kCoordinatorPublicFile,
                   "# hpsearch: the coordinator's CURVE public key (this worker pins it).\n" +
                       server_public + "\n",
                   0644);
    lines += pair.public_key + " " + name + "\n";
    out.workers.push_back(wdir.string());
  }
  if (!fs::exists(authorized_file)) {
    write_new_file(authorized_file,
                   "# hpsearch: the workers this coordinator admits, \"<CURVE public key> "
                   "<name>\" per line.\n" +
                       lines,
                   0600);
  } else {
    check_key_path(authorized_file.string(), KeyPathKind::kFile);
    int fd = ::open(authorized_file.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    bool ok =
        fd >= 0 && ::write(fd, lines.data(), lines.size()) == static_cast<ssize_t>(lines.size());
    ok = fd >= 0 && ::close(fd) == 0 && ok;
    if (!ok)
      throw Error("cannot append to " + authorized_file.string() + ": " + std::strerror(errno));
  }
  return out;
}

}  // namespace hps::curve
