// CURVE keys (CurveZMQ, ZeroMQ RFC 26) for the trusted network mode: key
// pairs as Z85 text (40 characters for 32 bytes), the key files that
// `hpsearch keys init` writes, and their checks. Used by the coordinator
// (its secret key, the authorized workers), the workers (their key pair,
// the coordinator's pinned public key) and the CLI.
//
// A keys folder (mode 0700), as `hpsearch keys init DIR --workers 2` makes it:
//
//   DIR/coordinator.secret        0600  the coordinator's secret key
//   DIR/coordinator.public        0644  its public key (what workers pin)
//   DIR/authorized_workers        0600  "<public key> <name>" per worker
//   DIR/worker-1/worker.secret    0600  worker 1's secret key
//   DIR/worker-1/worker.public    0644
//   DIR/worker-1/coordinator.public     a copy, so that worker-1/ is all a
//   DIR/worker-2/...                    worker machine needs
//
// Key files hold one key on one line; other lines starting with '#' are
// comments ('#' is also a Z85 character: a line that starts with a valid key
// is a key).
// Secret key files must be owner-only (no group or other permission bits),
// as ssh requires of its keys.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace hps::curve {

// Characters of a Z85-encoded CURVE key (32 bytes).
inline constexpr std::size_t kKeyChars = 40;

// File names inside a keys folder (see above).
inline constexpr const char* kCoordinatorSecretFile = "coordinator.secret";
inline constexpr const char* kCoordinatorPublicFile = "coordinator.public";
inline constexpr const char* kAuthorizedWorkersFile = "authorized_workers";
inline constexpr const char* kWorkerSecretFile = "worker.secret";
inline constexpr const char* kWorkerPublicFile = "worker.public";

// The ZAP domain of hpsearch coordinators (ZMQ_ZAP_DOMAIN).
inline constexpr const char* kZapDomain = "hpsearch";

// True if the linked libzmq supports CURVE (zmq_has("curve")).
bool available();
// Throws Error("<what>: this libzmq was built without CURVE ...") unless
// available().
void require(const std::string& what);

// A CURVE key pair, both Z85 (kKeyChars characters).
struct KeyPair {
  std::string public_key;
  std::string secret_key;
};

// A new random key pair (zmq_curve_keypair). Throws Error if CURVE is
// unavailable.
KeyPair generate();
// The public key of a secret key (zmq_curve_public). Throws
// ConfigError(field, ...) if `secret_key` is not a Z85 key.
std::string public_key_of(const std::string& secret_key, const std::string& field);
// True if `text` is kKeyChars characters of valid Z85.
bool is_key(const std::string& text);
// A short form of a public key for logs: its first 8 characters and "...".
std::string fingerprint(const std::string& public_key);

// What check_key_path() checks: a keys folder (or worker folder), a secret
// key file, or another key file (a public key, authorized_workers).
enum class KeyPathKind { kFolder, kSecret, kFile };

// The rule for every keys folder and key file hpsearch reads keys from or
// writes keys into, so that no other local user can read a secret or change
// which workers are admitted (the one place the coordinator's and the
// worker's key loading and make_keys() check it):
//  - not a symbolic link (checked with lstat: a planted link to a folder
//    of another user is refused, not followed);
//  - owned by the user the process runs as (its effective uid);
//  - a folder for kFolder, a regular file otherwise;
//  - not writable by group or others; kSecret: no group or other
//    permission at all (0600 or stricter).
// Trailing '/' of `path` are ignored. Never changes the path's mode.
// Throws ConfigError(path, "<the rule broken>") naming the fix, or
// ConfigError(path, "cannot read ...: <strerror>") if lstat fails.
void check_key_path(const std::string& path, KeyPathKind kind);

// Reads a secret key file. Throws ConfigError(path, ...) if it cannot be
// read, breaks check_key_path(path, kSecret) (names the mode and the chmod
// that fixes it), or holds no valid Z85 key.
std::string read_secret_key(const std::string& path);
// Reads a public key file. Throws ConfigError(path, ...) if it cannot be
// read, breaks check_key_path(path, kFile) or holds no valid Z85 key.
std::string read_public_key(const std::string& path);
// Reads an authorized workers file: "<public key> [name]" per line, '#'
// comments and blank lines skipped; a key without a name is named by its
// fingerprint. Returns public key -> name. Throws ConfigError("path:line",
// ...) for a bad line and ConfigError(path, ...) if it lists no key or
// breaks check_key_path(path, kFile).
std::map<std::string, std::string> read_authorized_keys(const std::string& path);

// The coordinator's side of a keys folder: coordinator.secret and
// authorized_workers. Throws ConfigError as the readers above, if `dir`
// breaks check_key_path(dir, kFolder), or if `dir` is a worker folder
// (names the right one).
struct CoordinatorKeys {
  KeyPair keys;
  std::map<std::string, std::string> authorized;  // public key -> name
};
CoordinatorKeys load_coordinator_keys(const std::string& dir);

// A worker's side: DIR/worker.secret and DIR/coordinator.public (a worker
// folder such as keys/worker-1). Throws ConfigError as the readers above,
// if `dir` breaks check_key_path(dir, kFolder), or if `dir` is the
// coordinator's folder (names a worker folder in it).
struct WorkerKeys {
  KeyPair keys;
  std::string server_key;  // the coordinator's public key, pinned
};
WorkerKeys load_worker_keys(const std::string& dir);

// What make_keys() wrote.
struct MadeKeys {
  bool new_coordinator = false;      // the coordinator's pair was created
  std::vector<std::string> workers;  // the worker folders created ("DIR/worker-3")
};

// Creates a keys folder with the coordinator's key pair and `workers`
// worker folders, or with `add`, adds `workers` worker folders (numbered
// after the existing ones) to an existing folder and appends their keys to
// authorized_workers. Keys are made only in a folder that does not exist
// (created 0700, with its missing parents) or an empty one that passes
// check_key_path(dir, kFolder); an existing folder's mode is never
// changed. Files are created exclusively (O_EXCL): nothing existing is
// overwritten, and no symbolic link is followed. Throws ConfigError(dir,
// ...) if `dir` already holds keys (without `add`), holds none (with
// `add`), holds other files (without `add`: "name an empty or new
// folder"), or breaks check_key_path (as do its key files with `add`); if
// workers < 1; and Error for file system failures.
MadeKeys make_keys(const std::string& dir, int workers, bool add);

}  // namespace hps::curve
