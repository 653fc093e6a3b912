#include "protocol/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
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

// The lines of a file that are not blank or comments, with their line
// numbers. `owner_only`: refuse a file with group or other permissions.
std::vector<std::pair<int, std::string>> read_lines(const std::string& path, bool owner_only) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw ConfigError(path, std::string("cannot read the key file: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ConfigError(path, "is not a regular file");
  }
  if (owner_only && (st.st_mode & 077) != 0) {
    ::close(fd);
    throw ConfigError(path, "holds a secret key but has mode " + octal_mode(st.st_mode) +
                                ": it must be readable by its owner only (chmod 600 " + path + ")");
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

void make_private_dir(const fs::path& dir) {
  std::error_code ec;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno != EEXIST)
      throw Error("cannot create the folder " + dir.string() + ": " + std::strerror(errno));
    if (!fs::is_directory(dir)) throw ConfigError(dir.string(), "exists and is not a folder");
  }
  if (::chmod(dir.c_str(), 0700) != 0)
    throw Error("cannot chmod 700 " + dir.string() + ": " + std::strerror(errno));
}

}  // namespace

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

CoordinatorKeys load_coordinator_keys(const std::string& dir) {
  fs::path d(dir);
  if (!fs::exists(d / kCoordinatorSecretFile) && fs::exists(d / kWorkerSecretFile))
    throw ConfigError(dir, std::string("is a worker's keys folder; the coordinator needs the "
                                       "folder that holds ") +
                               kCoordinatorSecretFile + " and " + kAuthorizedWorkersFile);
  if (!fs::is_directory(d))
    throw ConfigError(dir, "no such keys folder (make one with `hpsearch keys init " + dir + "`)");
  CoordinatorKeys out;
  out.keys.secret_key = read_secret_key((d / kCoordinatorSecretFile).string());
  out.keys.public_key = public_key_of(out.keys.secret_key, (d / kCoordinatorSecretFile).string());
  out.authorized = read_authorized_keys((d / kAuthorizedWorkersFile).string());
  return out;
}

WorkerKeys load_worker_keys(const std::string& dir) {
  fs::path d(dir);
  if (!fs::exists(d / kWorkerSecretFile) && fs::exists(d / kCoordinatorSecretFile))
    throw ConfigError(dir, std::string("is the coordinator's keys folder; a worker needs a "
                                       "worker folder in it, such as ") +
                               (d / "worker-1").string() + " (copy that one to the worker)");
  if (!fs::is_directory(d))
    throw ConfigError(dir, "no such keys folder (make one with `hpsearch keys init DIR`)");
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
  fs::path d(dir);
  const fs::path secret_file = d / kCoordinatorSecretFile;
  const fs::path public_file = d / kCoordinatorPublicFile;
  const fs::path authorized_file = d / kAuthorizedWorkersFile;
  MadeKeys out;
  std::string server_public;
  if (add) {
    if (!fs::exists(secret_file))
      throw ConfigError(
          dir, "holds no coordinator keys; make them with `hpsearch keys init " + dir + "`");
    server_public = read_public_key(public_file.string());
    make_private_dir(d);
  } else {
    if (fs::exists(secret_file) || fs::exists(authorized_file))
      throw ConfigError(dir,
                        "already holds keys (they are never overwritten); add workers with "
                        "`hpsearch keys add " +
                            dir + " --workers N`, or choose another folder");
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
    std::ofstream f(authorized_file, std::ios::app);
    f << lines;
    f.flush();
    if (!f) throw Error("cannot append to " + authorized_file.string());
  }
  return out;
}

}  // namespace hps::curve
