#include "search/checkpoints.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <system_error>

#include "search/errors.h"
#include "search/json_util.h"
#include "search/printable.h"
#include "search/private_files.h"
#include "search/trial_lifecycle.h"
#include "search/util/fd_io.h"
#include "search/util/hash.h"

namespace hps::checkpoints {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSnapshotPrefix = "snapshot-";
constexpr const char* kManifestSuffix = ".manifest";
constexpr const char* kTmpPrefix = ".tmp-";
constexpr const char* kWork = "work";
// The largest manifest read back (a manifest lists file names and numbers).
constexpr std::uint64_t kMaxManifestBytes = 64ULL << 20;

// "<name>/<rel>: <why>": the message of a snapshot entry that breaks a rule.
std::string entry_error(const std::string& name, const std::string& rel, std::string_view why) {
  return fmt::format("{}/{}: {}", name, rel, why);
}

// Throws Error naming the entry when the bytes' hash `h` is not the
// manifest's `expected`.
void check_hash(const std::string& name, const std::string& rel, const std::string& h,
                const std::string& expected) {
  if (h != expected)
    throw Error(entry_error(
        name, rel,
        fmt::format("its bytes differ from those snapshot (hash {}, the manifest says {}): "
                    "damaged",
                    h, expected)));
}

std::string errno_text(int err) {
  const char* d = strerrordesc_np(err);
  return d ? d : "error " + std::to_string(err);
}

// The hash a manifest names for a file: XXH3 64 ("xxh3_64"); manifests
// written before it name FNV-1a 64 ("fnv1a64"), still verified.
enum class HashKind : std::uint8_t { kXxh3, kFnv1a };

// Streams bytes into the hash of `kind`.
class FileHash {
 public:
  explicit FileHash(HashKind kind) : kind_(kind) {}
  void update(const void* data, std::size_t n) {
    if (kind_ == HashKind::kXxh3) {
      xxh3_.update(data, n);
      return;
    }
    fnv_ = util::fnv1a64_continue(fnv_, std::string_view(static_cast<const char*>(data), n));
  }
  std::string hex() const { return util::hex64(kind_ == HashKind::kXxh3 ? xxh3_.digest() : fnv_); }

 private:
  HashKind kind_;
  util::Xxh3Stream xxh3_;
  std::uint64_t fnv_ = util::kFnv1a64Basis;
};

// The hash of `kind` of a file's bytes, as 16 hex digits; throws Error
// "<path>: <why>".
std::string hash_file(const fs::path& path, std::uint64_t* size_out = nullptr,
                      HashKind kind = HashKind::kXxh3) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) throw Error(path.string() + ": " + errno_text(errno));
  FileHash h(kind);
  std::uint64_t size = 0;
  std::vector<unsigned char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw Error(path.string() + ": " + errno_text(err));
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<std::size_t>(n));
    size += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  if (size_out) *size_out = size;
  return h.hex();
}

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000LL +
         static_cast<std::int64_t>(st.st_mtim.tv_nsec);
}

// One entry of a manifest.
struct Entry {
  std::string kind;  // "file", "dir", "link"
  std::uint64_t size = 0;
  std::int64_t mtime = 0;  // of the file in work/ when it was copied
  std::string hash;        // file: its hash (hash_kind), hex
  HashKind hash_kind = HashKind::kXxh3;
  std::string target;  // link: what it points to
};
using Manifest = std::map<std::string, Entry>;  // relative path -> entry

// `key`: "step" (a snapshot's manifest) or "trial" (a trial's user
// artifacts); `id`: its value.
Json manifest_json(const char* key, std::int64_t id, const Manifest& m) {
  Json files = Json::array();
  for (const auto& [path, e] : m) {
    Json j{{"path", path}, {"kind", e.kind}};
    if (e.kind == "file") {
      j["size"] = e.size;
      j["mtime_ns"] = e.mtime;
      j[e.hash_kind == HashKind::kXxh3 ? "xxh3_64" : "fnv1a64"] = e.hash;
    } else if (e.kind == "link") {
      j["target"] = e.target;
    }
    files.push_back(std::move(j));
  }
  return Json{{key, id}, {"files", std::move(files)}};
}

// Whether a link at `path` (relative to its folder's top) to `target` stays
// inside that folder: a relative target that, resolved lexically from the
// link's own folder, never climbs above the top. A link leading outside
// would, restored on another machine, make a program that saves "in place"
// write where the link points.
bool link_stays_inside(const std::string& path, const std::string& target) {
  if (target.empty() || fs::path(target).is_absolute()) return false;
  int depth = 0;
  for (const auto& part : fs::path(path).parent_path() / target) {
    if (part == "..") {
      if (--depth < 0) return false;
    } else if (part != "." && !part.empty()) {
      ++depth;
    }
  }
  return true;
}

// Parses a manifest's text (of `key` "step" or "trial" `id`); throws Error
// naming what is wrong.
Manifest parse_manifest(const std::string& text, const std::string& name, std::int64_t id,
                        const char* id_key = "step") {
  Json j = parse_json_text(text, name);
  if (!j.is_object() || !j.contains(id_key) || !j[id_key].is_number_integer() ||
      j[id_key].get<std::int64_t>() != id || !j.contains("files") || !j["files"].is_array())
    throw Error(name + ": not a manifest of " + id_key + " " + std::to_string(id));
  Manifest m;
  for (const Json& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("kind") ||
        !f["kind"].is_string())
      throw Error(name + ": an entry without path or kind");
    const std::string path = f["path"].get<std::string>();
    fs::path p(path);
    if (path.empty() || p.is_absolute() || path.find("..") != std::string::npos)
      throw Error(name + ": entry '" + printable_excerpt(path) + "' is not a plain relative path");
    if (std::count(path.begin(), path.end(), '/') >= kMaxTreeDepth)
      throw Error(name + ": entry '" + printable_excerpt(path) + "' is nested deeper than " +
                  std::to_string(kMaxTreeDepth) + " levels");
    Entry e;
    e.kind = f["kind"].get<std::string>();
    if (e.kind == "file") {
      const char* key = f.contains("xxh3_64") ? "xxh3_64" : "fnv1a64";
      if (!f.contains("size") || !f["size"].is_number_unsigned() || !f.contains(key) ||
          !f[key].is_string())
        throw Error(name + ": file entry '" + printable_excerpt(path) + "' lacks size or hash");
      e.size = f["size"].get<std::uint64_t>();
      e.hash = f[key].get<std::string>();
      e.hash_kind = key[0] == 'x' ? HashKind::kXxh3 : HashKind::kFnv1a;
      if (f.contains("mtime_ns") && f["mtime_ns"].is_number_integer())
        e.mtime = f["mtime_ns"].get<std::int64_t>();
    } else if (e.kind == "link") {
      if (!f.contains("target") || !f["target"].is_string())
        throw Error(name + ": link entry '" + printable_excerpt(path) + "' lacks its target");
      e.target = f["target"].get<std::string>();
      if (!link_stays_inside(path, e.target))
        throw Error(name + ": link entry '" + printable_excerpt(path) + "' leads outside (to '" +
                    printable_excerpt(e.target) + "'): refused");
    } else if (e.kind != "dir") {
      throw Error(name + ": entry '" + printable_excerpt(path) + "' has unknown kind '" +
                  printable_excerpt(e.kind) + "'");
    }
    m.emplace(path, std::move(e));
  }
  return m;
}

// Reads a manifest; throws Error naming what is wrong.
Manifest read_manifest(const OwnerOnlyFolder& folder, const std::string& name, std::int64_t id,
                       const char* key = "step") {
  return parse_manifest(folder.read_file(name, kMaxManifestBytes), name, id, key);
}

// lstat; false if missing.
bool lstat_path(const fs::path& p, struct stat& st) { return ::lstat(p.c_str(), &st) == 0; }

// Removes a path (a link itself, never its target; a folder with its
// contents); never throws.
void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}

// Copies the regular file `from` to `to` (created 0600, O_EXCL |
// O_NOFOLLOW); throws Error.
void copy_regular(const fs::path& from, const fs::path& to) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (in < 0) throw Error(from.string() + ": " + errno_text(errno));
  int out =
      ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kPrivateFileMode);
  if (out < 0) {
    int err = errno;
    ::close(in);
    throw Error(to.string() + ": " + errno_text(err));
  }
  std::vector<char> buf(1 << 20);
  std::string error;
  for (;;) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      error = from.string() + ": " + errno_text(errno);
      break;
    }
    if (n == 0) break;
    const char* p = buf.data();
    while (n > 0) {
      ssize_t w = ::write(out, p, static_cast<std::size_t>(n));
      if (w < 0) {
        if (errno == EINTR) continue;
        error = to.string() + ": " + errno_text(errno);
        break;
      }
      p += w;
      n -= w;
    }
    if (!error.empty()) break;
  }
  ::close(in);
  if (::close(out) != 0 && error.empty()) error = to.string() + ": " + errno_text(errno);
  if (!error.empty()) throw Error(error);
}

// Walks `dir` (links not followed): relative path -> lstat of each entry.
// Throws Error for folders nested deeper than kMaxTreeDepth: a walk's cost
// grows with depth times entries, and it runs while the program is paused.
std::map<std::string, struct stat> walk(const fs::path& dir) {
  std::map<std::string, struct stat> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  if (ec) throw Error(dir.string() + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(dir.string() + ": " + ec.message());
    if (it.depth() >= kMaxTreeDepth)
      throw Error(dir.string() + ": folders nested deeper than " + std::to_string(kMaxTreeDepth) +
                  " levels (at " + printable_excerpt(it->path().lexically_relative(dir).string()) +
                  "): refused");
    struct stat st {};
    if (!lstat_path(it->path(), st)) continue;  // removed meanwhile
    out.emplace(it->path().lexically_relative(dir).string(), st);
  }
  return out;
}

std::string snapshot_name(std::int64_t step) { return kSnapshotPrefix + std::to_string(step); }

// The step of "snapshot-<S>", or nullopt.
std::optional<std::int64_t> parse_snapshot_name(const std::string& name) {
  const std::string prefix = kSnapshotPrefix;
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() ||
      name.size() > prefix.size() + 18)
    return std::nullopt;
  std::int64_t v = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::optional<std::int64_t> step_in(const Json& attrs, const char* key) {
  auto it = attrs.find(key);
  if (it == attrs.end() || !it->is_object()) return std::nullopt;
  auto s = it->find("step");
  if (s == it->end() || !s->is_number_integer()) return std::nullopt;
  std::int64_t v = s->get<std::int64_t>();
  if (v < 0) return std::nullopt;
  return v;
}

// The resumed_from step, unless the restore is marked failed.
std::optional<std::int64_t> resumed_step(const Json& attrs) {
  auto it = attrs.find(kAttrResumedFrom);
  if (it != attrs.end() && it->is_object()) {
    auto r = it->find("restored");
    if (r != it->end() && r->is_boolean() && !r->get<bool>()) return std::nullopt;
  }
  return step_in(attrs, kAttrResumedFrom);
}

bool deleted(const Json& attrs) {
  auto it = attrs.find(kAttrCheckpoint);
  if (it == attrs.end() || !it->is_object()) return false;
  auto d = it->find("deleted");
  return d != it->end() && d->is_boolean() && d->get<bool>();
}

// What a manifest describes: the folder <parent>/<name> and its manifest
// <parent>/<name>.manifest, whose `key` ("step" or "trial") is `id`;
// `limit`: the option that bounds its bytes (for messages).
struct TreeSpec {
  std::string name;
  const char* key = "step";
  std::int64_t id = 0;
  const char* limit = "artifacts.max_snapshot_bytes";
};

TreeSpec snapshot_spec(std::int64_t step) {
  return {snapshot_name(step), "step", step, "artifacts.max_snapshot_bytes"};
}

// Checks <dir>/<spec.name> against its manifest (every file there, sizes and
// hashes equal, nothing more, at most max_bytes of files); returns the
// manifest. Throws Error "<name>/<file>: <why>".
Manifest verify_tree(const std::string& dir, const TreeSpec& spec, std::uint64_t max_bytes) {
  const std::string& name = spec.name;
  const fs::path snap = fs::path(dir) / name;
  const OwnerOnlyFolder folder(dir, false);
  Manifest m = read_manifest(folder, name + kManifestSuffix, spec.id, spec.key);
  auto found = walk(snap);
  std::uint64_t total = 0;
  for (const auto& [rel, e] : m) {
    auto f = found.find(rel);
    if (f == found.end()) throw Error(entry_error(name, rel, "missing (listed in the manifest)"));
    const struct stat& fst = f->second;
    if (e.kind == "dir" && !S_ISDIR(fst.st_mode))
      throw Error(entry_error(name, rel, "not a folder (the manifest says folder)"));
    if (e.kind == "link" && !S_ISLNK(fst.st_mode))
      throw Error(entry_error(name, rel, "not a symbolic link (the manifest says link)"));
    if (e.kind == "file") {
      if (!S_ISREG(fst.st_mode))
        throw Error(entry_error(name, rel, "not a regular file (the manifest says file)"));
      total += e.size;
      if (total > max_bytes)
        throw Error(fmt::format("{}: over {} bytes ({})", name, max_bytes, spec.limit));
      std::uint64_t size = 0;
      std::string h = hash_file(snap / rel, &size, e.hash_kind);
      if (size != e.size)
        throw Error(entry_error(name, rel,
                                fmt::format("{} bytes, the manifest says {}{}", size, e.size,
                                            size < e.size ? " (truncated?)" : "")));
      check_hash(name, rel, h, e.hash);
    }
  }
  for (const auto& [rel, fst] : found)
    if (!m.count(rel)) throw Error(entry_error(name, rel, "not in the manifest"));
  return m;
}

Manifest verify_snapshot(const std::string& lineage_dir, std::int64_t step,
                         std::uint64_t max_bytes) {
  return verify_tree(lineage_dir, snapshot_spec(step), max_bytes);
}

// Copies the verified snapshot folder `snap` (manifest `m`) to `to`
// (created; must not exist yet or be empty).
// `overwrite`: a file of the same name already in `to` is replaced (else
// copy_regular's O_EXCL refuses it).
void copy_tree(const fs::path& snap, const Manifest& m, const fs::path& to_dir,
               bool overwrite = false) {
  create_private_directories(to_dir.string());
  for (const auto& [rel, e] : m) {  // map order: a folder before its contents
    const fs::path to = to_dir / rel;
    if (e.kind == "dir") {
      create_private_directories(to.string());
    } else if (e.kind == "link") {
      fs::create_symlink(e.target, to);
    } else {
      struct stat st {};
      if (overwrite && lstat_path(to, st) && !S_ISDIR(st.st_mode)) ::unlink(to.c_str());
      copy_regular(snap / rel, to);
      struct timespec times[2] = {
          {0, UTIME_OMIT},
          {static_cast<time_t>(e.mtime / 1000000000LL), static_cast<long>(e.mtime % 1000000000LL)}};
      ::utimensat(AT_FDCWD, to.c_str(), times, AT_SYMLINK_NOFOLLOW);
    }
  }
}
}  // namespace

// ------------------------------------------------------------ attrs

Json checkpoint_attr(std::int64_t step) { return Json{{"step", step}}; }

Json deleted_checkpoint_attr(const FrozenTrial& t) {
  Json attr = t.system_attrs.value(kAttrCheckpoint, Json::object());
  if (!attr.is_object()) attr = Json::object();
  attr["deleted"] = true;
  return attr;
}

std::int64_t lineage_of(const FrozenTrial& trial) {
  auto it = trial.system_attrs.find(kAttrLineage);
  if (it != trial.system_attrs.end() && it->is_number_integer() && it->get<std::int64_t>() >= 0)
    return it->get<std::int64_t>();
  return trial.number;
}

std::optional<std::int64_t> snapshot_step(const FrozenTrial& trial) {
  if (deleted(trial.system_attrs)) return std::nullopt;
  if (auto s = step_in(trial.system_attrs, kAttrCheckpoint)) return s;
  return resumed_step(trial.system_attrs);
}

std::optional<std::int64_t> resume_step_of(const FrozenTrial& trial) {
  return resumed_step(trial.system_attrs);
}

std::optional<std::int64_t> continued_trial(const FrozenTrial& trial) {
  auto it = trial.system_attrs.find(kAttrResumedFrom);
  if (it == trial.system_attrs.end() || !it->is_object()) return std::nullopt;
  auto r = it->find("restored");
  auto n = it->find("trial");
  if (r == it->end() || !r->is_boolean() || !r->get<bool>() || n == it->end() ||
      !n->is_number_integer())
    return std::nullopt;
  return n->get<std::int64_t>();
}

std::string lineage_path(const std::string& root, std::int64_t lineage) {
  return (fs::path(root) / ("lineage-" + std::to_string(lineage))).string();
}

// ------------------------------------------------------------ options

void ArtifactOptions::validate() const {
  if (keep_best < 0)
    throw ConfigError("artifacts.keep_best", "must be >= 0, got " + std::to_string(keep_best));
  if (max_snapshot_bytes == 0) throw ConfigError("artifacts.max_snapshot_bytes", "must be >= 1");
  if (max_study_bytes == 0) throw ConfigError("artifacts.max_study_bytes", "must be >= 1");
  if (max_artifact_bytes == 0) throw ConfigError("artifacts.max_artifact_bytes", "must be >= 1");
}

ArtifactOptions ArtifactOptions::from_json(const Json& section) {
  ArtifactOptions o;
  if (section.is_null()) return o;
  if (!section.is_object())
    throw ConfigError("artifacts", "must be an object {\"keep_best\": ..., ...}, got " +
                                       printable_excerpt(section.dump()));
  for (const auto& [key, value] : section.items()) {
    const std::string path = join_path("artifacts", key);
    if (key == "keep_best") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
          value.get<std::int64_t>() > 1000000)
        throw ConfigError(
            path, "must be an integer from 0 to 1000000, got " + printable_excerpt(value.dump()));
      o.keep_best = value.get<int>();
    } else if (key == "keep_pruned" || key == "keep_failed" || key == "checkpoints") {
      if (!value.is_boolean())
        throw ConfigError(path, "must be true or false, got " + printable_excerpt(value.dump()));
      (key == "keep_pruned"   ? o.keep_pruned
       : key == "keep_failed" ? o.keep_failed
                              : o.checkpoints) = value.get<bool>();
    } else if (key == "path") {
      if (!value.is_string() || value.get<std::string>().empty() ||
          value.get<std::string>().size() > 4095 ||
          value.get<std::string>().find('\0') != std::string::npos)
        throw ConfigError(path,
                          "must be a folder's path (a non-empty string of at most 4095 "
                          "bytes), got " +
                              printable_excerpt(value.dump()));
      o.path = value.get<std::string>();
    } else if (key == "max_snapshot_bytes" || key == "max_study_bytes" ||
               key == "max_artifact_bytes") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 1)
        throw ConfigError(
            path, "must be an integer >= 1 (bytes), got " + printable_excerpt(value.dump()));
      (key == "max_snapshot_bytes" ? o.max_snapshot_bytes
       : key == "max_study_bytes"  ? o.max_study_bytes
                                   : o.max_artifact_bytes) = value.get<std::uint64_t>();
    } else {
      throw ConfigError(path,
                        "unknown key (known: checkpoints, keep_best, keep_failed, keep_pruned, "
                        "max_artifact_bytes, max_snapshot_bytes, max_study_bytes, path)");
    }
  }
  o.validate();
  return o;
}

// ------------------------------------------------------------ LineageFolder

LineageFolder::LineageFolder(const std::string& root, std::int64_t lineage,
                             std::uint64_t max_snapshot_bytes)
    : lineage_(lineage), max_bytes_(max_snapshot_bytes) {
  if (lineage < 0) throw Error("checkpoint lineage must be >= 0, got " + std::to_string(lineage));
  const std::string hint =
      "hpsearch makes this folder itself: remove the one found there (after checking who made "
      "it) and run the trial again";
  { const OwnerOnlyFolder r(root, true, hint); }
  const OwnerOnlyFolder l(lineage_path(root, lineage), true, hint);
  path_ = l.path();
  work_ = (fs::path(path_) / kWork).string();
}

Prepared LineageFolder::prepare(std::optional<std::int64_t> resume_step) {
  Prepared out;
  const fs::path lineage(path_), work(work_);
  // Leftovers of an interrupted restore or snapshot.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(lineage, ec))
    if (e.path().filename().string().rfind(kTmpPrefix, 0) == 0) remove_quietly(e.path());

  auto from_scratch = [&](const std::string& why) {
    out.resume_step.reset();
    out.warning = why;
    remove_quietly(work);
    create_private_directories(work.string());
  };
  if (!resume_step) {
    from_scratch("");
    return out;
  }
  const std::string name = snapshot_name(*resume_step);
  const fs::path snap = lineage / name;
  struct stat st {};
  if (!lstat_path(snap, st)) {
    from_scratch(snap.string() + ": missing (removed, or taken on another machine)");
    return out;
  }
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
    from_scratch(
        snap.string() + ": " +
        (S_ISLNK(st.st_mode) ? "is a symbolic link: refused (never followed)" : "is not a folder"));
    return out;
  }
  try {
    Manifest m = verify_snapshot(path_, *resume_step, max_bytes_);
    // Copy into a temporary folder, then swap it in.
    const fs::path tmp = lineage / (std::string(kTmpPrefix) + kWork);
    remove_quietly(tmp);
    copy_tree(snap, m, tmp);
    remove_quietly(work);
    fs::rename(tmp, work);
    out.resume_step = resume_step;
  } catch (const std::exception& e) {
    // Messages name the file relative to the lineage, or already whole.
    const std::string what = e.what();
    from_scratch(what.rfind('/', 0) == 0 ? what : lineage.string() + "/" + what);
  }
  return out;
}

namespace {

// Removes from `found` (walk(work)) what a snapshot does not keep (links
// that lead outside, special files, names that are not UTF-8; see
// LineageFolder::snapshot) and returns them as "<path>: <why>: not kept;
// ...", each path named once (`said`, at most 1000 remembered).
std::string leave_out_unkept(const fs::path& work, std::map<std::string, struct stat>& found,
                             std::set<std::string>& said) {
  std::string skipped;
  for (auto it = found.begin(); it != found.end();) {
    const auto& [rel, st] = *it;
    std::string why;
    if (valid_utf8(rel) != rel) {
      why = "its name is not UTF-8";
    } else if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      const std::string target = fs::read_symlink(work / rel, ec).string();
      if (ec || !link_stays_inside(rel, target))
        why = "a symbolic link that leads outside the folder (to '" + printable_excerpt(target) +
              "')";
    } else if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
      why = "not a regular file, folder or link (a FIFO, socket or device)";
    }
    if (why.empty()) {
      ++it;
      continue;
    }
    if (said.size() < 1000 && said.insert(rel).second)
      skipped += (skipped.empty() ? "" : "; ") + printable_excerpt(rel) + ": " + why + ": not kept";
    it = found.erase(it);
  }
  return skipped;
}

}  // namespace

LineageFolder::Snapshot LineageFolder::snapshot(std::int64_t step) {
  const fs::path lineage(path_), work(work_);
  struct stat wst {};
  if (!lstat_path(work, wst) || !S_ISDIR(wst.st_mode))
    return {false,
            work.string() + (S_ISLNK(wst.st_mode) ? ": is a symbolic link: refused (never followed)"
                                                  : ": missing or not a folder"),
            ""};
  const std::string name = snapshot_name(step);
  const fs::path tmp = lineage / (std::string(kTmpPrefix) + name);
  std::string skipped;
  try {
    auto found = walk(work);
    skipped = leave_out_unkept(work, found, skipped_said_);
    if (found.empty()) return {false, "", skipped};
    std::uint64_t total = 0;
    for (const auto& [rel, st] : found)
      if (S_ISREG(st.st_mode)) total += static_cast<std::uint64_t>(st.st_size);
    if (total > max_bytes_)
      return {false,
              work.string() + " holds " + std::to_string(total) + " bytes, over " +
                  std::to_string(max_bytes_) + " (artifacts.max_snapshot_bytes)",
              skipped};
    // The newest earlier snapshot: unchanged files are hard links to it.
    Manifest previous;
    std::string previous_name;
    auto steps = snapshot_steps();
    const OwnerOnlyFolder folder(path_, false);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      if (*it == step) continue;
      try {
        previous = read_manifest(folder, snapshot_name(*it) + kManifestSuffix, *it);
        previous_name = snapshot_name(*it);
        break;
      } catch (const std::exception&) {
        continue;
      }
    }
    remove_quietly(tmp);
    create_private_directories(tmp.string());
    Manifest m;
    for (const auto& [rel, st] : found) {
      const fs::path to = tmp / rel;
      Entry e;
      if (S_ISDIR(st.st_mode)) {
        e.kind = "dir";
        create_private_directories(to.string());
      } else if (S_ISLNK(st.st_mode)) {
        e.kind = "link";
        e.target = fs::read_symlink(work / rel).string();
        fs::create_symlink(e.target, to);
      } else if (S_ISREG(st.st_mode)) {
        e.kind = "file";
        e.size = static_cast<std::uint64_t>(st.st_size);
        e.mtime = mtime_ns(st);
        auto p = previous.find(rel);
        bool linked = false;
        if (p != previous.end() && p->second.kind == "file" && p->second.size == e.size &&
            p->second.mtime == e.mtime && e.mtime != 0) {
          std::error_code ec;
          fs::create_hard_link(lineage / previous_name / rel, to, ec);
          if (!ec) {
            e.hash = p->second.hash;
            e.hash_kind = p->second.hash_kind;
            linked = true;
          }
        }
        if (!linked) {
          copy_regular(work / rel, to);
          e.hash = hash_file(to);
        }
      } else {
        continue;  // FIFOs, sockets, devices: not state
      }
      m.emplace(rel, std::move(e));
    }
    // The manifest, then the folder, each renamed into place: a snapshot
    // whose folder is there has its manifest.
    const std::string manifest = name + kManifestSuffix;
    const std::string text = manifest_json("step", step, m).dump();
    folder.replace_file(manifest, [&](const auto& sink) { sink(text.data(), text.size()); });
    remove_quietly(lineage / name);
    fs::rename(tmp, lineage / name);
  } catch (const std::exception& e) {
    remove_quietly(tmp);
    return {false, e.what(), skipped};
  }
  return {true, "", skipped};
}

void LineageFolder::keep_only(std::int64_t step) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(path_), ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(kTmpPrefix, 0) == 0) {
      remove_quietly(e.path());
      continue;
    }
    std::string base = name;
    if (base.size() > std::strlen(kManifestSuffix) &&
        base.compare(base.size() - std::strlen(kManifestSuffix), std::string::npos,
                     kManifestSuffix) == 0)
      base.resize(base.size() - std::strlen(kManifestSuffix));
    auto s = parse_snapshot_name(base);
    if (s && *s != step) remove_quietly(e.path());
  }
}

std::vector<std::int64_t> LineageFolder::snapshot_steps() const {
  std::vector<std::int64_t> out;
  std::error_code ec;
  const fs::path lineage(path_);
  for (const auto& e : fs::directory_iterator(lineage, ec)) {
    auto s = parse_snapshot_name(e.path().filename().string());
    struct stat st {};
    if (s && lstat_path(e.path(), st) && S_ISDIR(st.st_mode) &&
        lstat_path(lineage / (e.path().filename().string() + kManifestSuffix), st))
      out.push_back(*s);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool LineageFolder::remove_if_unused() {
  try {
    if (!snapshot_steps().empty()) return false;
  } catch (const std::exception&) {
    return false;
  }
  std::error_code ec;
  return fs::remove_all(fs::path(path_), ec) > 0 && !ec;
}

bool remove_lineage(const std::string& root, std::int64_t lineage) {
  std::error_code ec;
  return fs::remove_all(lineage_path(root, lineage), ec) > 0 && !ec;
}

std::vector<const FrozenTrial*> superseded_by(const std::vector<TrialPtr>& trials,
                                              const FrozenTrial& t) {
  std::vector<const FrozenTrial*> out;
  const auto step = step_in(t.system_attrs, kAttrCheckpoint);
  const auto n = static_cast<std::int64_t>(trials.size());
  const FrozenTrial* cur = &t;
  for (int guard = 0; guard < 1000; ++guard) {
    auto it = cur->system_attrs.find(kAttrRetryOf);
    if (it == cur->system_attrs.end() || !it->is_number_integer()) break;
    const std::int64_t prev = it->get<std::int64_t>();
    if (prev < 0 || prev >= n || prev >= cur->number || !trials[static_cast<std::size_t>(prev)])
      break;
    cur = trials[static_cast<std::size_t>(prev)].get();
    const auto s = step_in(cur->system_attrs, kAttrCheckpoint);
    if (s && s != step && !deleted(cur->system_attrs)) out.push_back(cur);
  }
  return out;
}

// ------------------------------------------------------------ retention

std::vector<const FrozenTrial*> retention_victims(const std::vector<TrialPtr>& trials,
                                                  const FrozenTrial& ended,
                                                  StudyDirection direction,
                                                  const ArtifactOptions& options) {
  std::vector<const FrozenTrial*> out;
  auto holds = [](const FrozenTrial& t) {
    return step_in(t.system_attrs, kAttrCheckpoint).has_value() && !deleted(t.system_attrs);
  };
  if (ended.state == TrialState::kPruned) {
    if (!options.keep_pruned && holds(ended)) out.push_back(&ended);
    return out;
  }
  if (ended.state == TrialState::kFail) {
    if (!ended.was_retried() && !options.keep_failed && holds(ended)) out.push_back(&ended);
    return out;
  }
  if (ended.state != TrialState::kComplete) return out;
  std::vector<const FrozenTrial*> kept;
  for (const auto& t : trials)
    if (t && t->state == TrialState::kComplete && lifecycle::is_best_candidate(*t) && holds(*t))
      kept.push_back(t.get());
  std::sort(kept.begin(), kept.end(), [&](const FrozenTrial* a, const FrozenTrial* b) {
    return lifecycle::ranks_before(direction, *a, *b);
  });
  for (std::size_t i = static_cast<std::size_t>(options.keep_best); i < kept.size(); ++i)
    out.push_back(kept[i]);
  return out;
}

// ------------------------------------------------------------ snapshots that travel

namespace {

bool is_store_token(const std::string& t) {
  if (t.size() != 32) return false;
  return std::all_of(t.begin(), t.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Reads exactly `n` bytes at `offset` of `fd` into `out`; throws Error.
void pread_exact(int fd, std::uint64_t offset, char* out, std::size_t n, const std::string& what) {
  while (n > 0) {
    ssize_t r = ::pread(fd, out, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(what + ": " + errno_text(errno));
    }
    if (r == 0) throw Error(what + ": shorter than expected (changed while read?)");
    out += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

// Whether every component of `rel` is a plain name (not "", ".", "..").
bool plain_relative(const std::string& rel) {
  if (rel.empty() || rel.front() == '/') return false;
  std::size_t start = 0;
  while (start <= rel.size()) {
    std::size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    const std::string part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

std::string ensure_store_id(const std::string& root) {
  const OwnerOnlyFolder folder(root, true);
  if (folder.is_regular_file(kStoreIdFile)) {
    std::string t = folder.read_file(kStoreIdFile, 256);
    if (is_store_token(t)) return t;
  }
  std::random_device rd;
  std::string token;
  for (int i = 0; i < 4; ++i) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(rd()));
    token += hex;
  }
  folder.replace_file(kStoreIdFile, [&](const auto& sink) { sink(token.data(), token.size()); });
  return token;
}

std::string read_store_id(const std::string& root) {
  try {
    const OwnerOnlyFolder folder(root, false);
    if (!folder.is_regular_file(kStoreIdFile)) return "";
    std::string t = folder.read_file(kStoreIdFile, 256);
    return is_store_token(t) ? t : "";
  } catch (const std::exception&) {
    return "";
  }
}

SnapshotReader::SnapshotReader(const std::string& lineage_dir, std::int64_t step)
    : SnapshotReader(lineage_dir, snapshot_name(step), "step", step) {}

SnapshotReader SnapshotReader::user_artifacts(const std::string& root, std::int64_t number) {
  return {root, trial_artifact_name(number), "trial", number};
}

SnapshotReader::SnapshotReader(const std::string& dir, const std::string& name, const char* key,
                               std::int64_t id)
    : name_(name), step_(id) {
  const OwnerOnlyFolder folder(dir, false);
  snapshot_dir_ = (fs::path(folder.path()) / name).string();
  struct stat st {};
  if (!lstat_path(snapshot_dir_, st) || !S_ISDIR(st.st_mode))
    throw Error(name + ": missing or not a folder");
  manifest_ = folder.read_file(name + kManifestSuffix, kMaxManifestBytes);
  Manifest m = parse_manifest(manifest_, name + kManifestSuffix, id, key);
  total_ = manifest_.size();
  for (const auto& [rel, e] : m) {
    if (e.kind != "file") continue;
    files_.push_back({rel, total_, e.size});
    total_ += e.size;
  }
}

std::string SnapshotReader::read(std::uint64_t offset, std::size_t max) const {
  std::string out;
  if (offset >= total_) return out;
  const std::uint64_t end = std::min<std::uint64_t>(total_, offset + max);
  out.reserve(static_cast<std::size_t>(end - offset));
  if (offset < manifest_.size()) {
    const std::uint64_t n = std::min<std::uint64_t>(end, manifest_.size()) - offset;
    out.append(manifest_, static_cast<std::size_t>(offset), static_cast<std::size_t>(n));
    offset += n;
  }
  // The first file that ends after `offset`.
  auto it = std::upper_bound(files_.begin(), files_.end(), offset,
                             [](std::uint64_t o, const File& f) { return o < f.start + f.size; });
  for (; it != files_.end() && offset < end; ++it) {
    const std::uint64_t from = offset - it->start;
    const std::uint64_t n = std::min<std::uint64_t>(end, it->start + it->size) - offset;
    if (n == 0) continue;
    const std::string path = snapshot_dir_ + "/" + it->path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) throw Error(name_ + "/" + it->path + ": " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<std::uint64_t>(st.st_size) != it->size) {
      ::close(fd);
      throw Error(name_ + "/" + it->path + ": not the size its manifest says");
    }
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(n));
    try {
      pread_exact(fd, from, out.data() + at, static_cast<std::size_t>(n), name_ + "/" + it->path);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    offset += n;
  }
  return out;
}

namespace {

// Writes `size` bytes of the stream `in` from `offset` to a new file `to`
// (0600, O_EXCL | O_NOFOLLOW), synced; returns their hash of `kind` as 16
// hex digits. `buf`: a scratch buffer. Throws Error "<label><why>".
std::string write_from_stream(int in, const std::string& stream, std::uint64_t offset,
                              std::uint64_t size, const fs::path& to, std::vector<char>& buf,
                              const std::string& label, HashKind kind) {
  int out =
      ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kPrivateFileMode);
  if (out < 0) throw Error(label + errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{out};
  FileHash h(kind);
  for (std::uint64_t left = size; left > 0;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
    pread_exact(in, offset, buf.data(), n, stream);
    h.update(buf.data(), n);
    if (int err = util::write_all(out, buf.data(), n); err != 0)
      throw Error(label + errno_text(err));
    offset += n;
    left -= n;
  }
  if (::fsync(out) != 0) throw Error(label + errno_text(errno));
  return h.hex();
}

// Throws Error "<name>/<entry>: <why>" unless every entry of `m` is a plain
// relative path (no "", ".", ".." component, not absolute) inside a folder
// that `m` lists, and (unless `links`) none is a link.
void check_entry_names(const std::string& name, const Manifest& m, bool links) {
  for (const auto& [rel, e] : m) {
    if (!plain_relative(rel))
      throw Error(entry_error(name, printable_excerpt(rel), "not a plain relative path: refused"));
    for (std::size_t slash = rel.find('/'); slash != std::string::npos;
         slash = rel.find('/', slash + 1)) {
      auto parent = m.find(rel.substr(0, slash));
      if (parent == m.end() || parent->second.kind != "dir")
        throw Error(entry_error(name, printable_excerpt(rel),
                                "its folder is not a folder of the manifest: refused"));
    }
    if (e.kind == "link" && !links)
      throw Error(entry_error(name, printable_excerpt(rel), "a symbolic link: refused"));
  }
}

// install_snapshot for the tree `spec` under `dir` (created owner-only when
// `create`).
void install_tree(const std::string& dir, const TreeSpec& spec, const std::string& stream_path,
                  std::uint64_t manifest_bytes, std::uint64_t max_bytes, bool create) {
  const std::string& name = spec.name;
  const OwnerOnlyFolder folder(dir, create);
  const fs::path lineage(folder.path());
  const fs::path tmp = lineage / (std::string(kTmpPrefix) + name);
  int in = ::open(stream_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (in < 0) throw Error(stream_path + ": " + errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{in};
  struct stat st {};
  if (::fstat(in, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error(stream_path + ": not a regular file");
  const auto total = static_cast<std::uint64_t>(st.st_size);
  if (manifest_bytes > total || manifest_bytes > kMaxManifestBytes)
    throw Error(name + kManifestSuffix + ": " + std::to_string(manifest_bytes) +
                " bytes: longer than the stream or than " + std::to_string(kMaxManifestBytes));
  std::string text(static_cast<std::size_t>(manifest_bytes), '\0');
  pread_exact(in, 0, text.data(), text.size(), stream_path);
  Manifest m = parse_manifest(text, name + kManifestSuffix, spec.id, spec.key);
  check_entry_names(name, m, spec.key == std::string_view("step"));
  std::uint64_t files = 0;
  for (const auto& [rel, e] : m) {
    if (e.kind == "file") {
      files += e.size;
      if (files > max_bytes)
        throw Error(fmt::format("{}: over {} bytes ({})", name, max_bytes, spec.limit));
    }
  }
  if (manifest_bytes + files != total)
    throw Error(name + ": " + std::to_string(total) + " bytes received, the manifest says " +
                std::to_string(manifest_bytes + files) +
                (total < manifest_bytes + files ? " (truncated?)" : ""));
  remove_quietly(tmp);
  try {
    create_private_directories(tmp.string());
    std::uint64_t offset = manifest_bytes;
    std::vector<char> buf(1 << 20);
    for (const auto& [rel, e] : m) {  // map order: a folder before its contents
      const fs::path to = tmp / rel;
      if (e.kind == "dir") {
        if (::mkdir(to.c_str(), 0700) != 0) throw Error(entry_error(name, rel, errno_text(errno)));
      } else if (e.kind == "link") {
        fs::create_symlink(e.target, to);
      } else {
        const std::string h = write_from_stream(in, stream_path, offset, e.size, to, buf,
                                                entry_error(name, rel, ""), e.hash_kind);
        offset += e.size;
        check_hash(name, rel, h, e.hash);
        struct timespec times[2] = {{0, UTIME_OMIT},
                                    {static_cast<time_t>(e.mtime / 1000000000LL),
                                     static_cast<long>(e.mtime % 1000000000LL)}};
        ::utimensat(AT_FDCWD, to.c_str(), times, AT_SYMLINK_NOFOLLOW);
      }
    }
    remove_quietly(lineage / name);
    folder.replace_file(name + kManifestSuffix,
                        [&](const auto& sink) { sink(text.data(), text.size()); });
    fs::rename(tmp, lineage / name);
  } catch (const Error&) {
    remove_quietly(tmp);
    throw;
  } catch (const std::exception& e) {
    remove_quietly(tmp);
    throw Error(name + ": " + e.what());
  }
}

}  // namespace

void install_snapshot(const std::string& lineage_dir, std::int64_t step,
                      const std::string& stream_path, std::uint64_t manifest_bytes,
                      std::uint64_t max_bytes) {
  install_tree(lineage_dir, snapshot_spec(step), stream_path, manifest_bytes, max_bytes, false);
}

std::string stream_path(const std::string& lineage_dir, const std::string& what,
                        std::int64_t step) {
  return (fs::path(lineage_dir) / (std::string(kTmpPrefix) + what + "-" + std::to_string(step)))
      .string();
}

std::uint64_t folder_bytes(const std::string& path) {
  std::uint64_t total = 0;
  std::error_code ec;
  struct stat st {};
  if (!lstat_path(path, st)) return 0;
  if (S_ISREG(st.st_mode)) return static_cast<std::uint64_t>(st.st_size);
  if (!S_ISDIR(st.st_mode)) return 0;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (lstat_path(it->path(), st) && S_ISREG(st.st_mode))
      total += static_cast<std::uint64_t>(st.st_size);
  }
  return total;
}

void copy_snapshot(const std::string& lineage_dir, std::int64_t step, const std::string& to) {
  Manifest m = verify_snapshot(lineage_dir, step, std::numeric_limits<std::uint64_t>::max());
  copy_tree(fs::path(lineage_dir) / snapshot_name(step), m, to);
}

// ------------------------------------------------------------ user artifacts

namespace {

TreeSpec artifact_spec(std::int64_t number) {
  return {trial_artifact_name(number), "trial", number, "artifacts.max_artifact_bytes"};
}

const char* const kArtifactHint =
    "hpsearch makes this folder itself: remove the one found there (after checking who made it) "
    "and run the trial again";

ArtifactSummary summary_of(const Manifest& m) {
  ArtifactSummary out;
  for (const auto& [rel, e] : m) {
    if (e.kind != "file") continue;
    ++out.files;
    out.bytes += e.size;
  }
  return out;
}

}  // namespace

std::string trial_artifact_name(std::int64_t number) { return "trial-" + std::to_string(number); }

std::string trial_artifact_path(const std::string& root, std::int64_t number) {
  return (fs::path(root) / trial_artifact_name(number)).string();
}

std::string artifact_root_for(const std::string& checkpoint_root, bool shared_path) {
  const fs::path root = fs::path(checkpoint_root).lexically_normal();
  if (shared_path) return (root / "artifacts").string();
  fs::path parent = root.has_filename() ? root.parent_path() : root.parent_path().parent_path();
  return (parent / "artifacts").string();
}

Json ArtifactSummary::to_json() const { return Json{{"files", files}, {"bytes", bytes}}; }

ArtifactFolder::ArtifactFolder(const std::string& root, std::int64_t number,
                               std::uint64_t max_bytes)
    : number_(number), max_bytes_(max_bytes) {
  if (number < 0) throw Error("artifact folder: trial number must be >= 0");
  const OwnerOnlyFolder r(root, true, kArtifactHint);
  root_ = r.path();
  r.remove(trial_artifact_name(number) + kManifestSuffix);
  const OwnerOnlyFolder f(trial_artifact_path(root_, number), true, kArtifactHint);
  path_ = f.path();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(path_), ec)) remove_quietly(e.path());
}

void ArtifactFolder::upload(const std::string& from) {
  struct stat st {};
  if (from.empty()) throw Error("upload_artifact: the path is empty");
  if (!lstat_path(from, st)) throw Error(from + ": missing (" + errno_text(errno) + ")");
  if (S_ISLNK(st.st_mode))
    throw Error(from + ": is a symbolic link: refused (upload the file it points to)");
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    throw Error(from + ": neither a regular file nor a folder: refused");
  fs::path src = fs::path(from).lexically_normal();
  if (!src.has_filename()) src = src.parent_path();
  const std::string name = src.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw Error(from + ": has no name to keep it under: name the file or folder itself");
  const fs::path dest = fs::path(path_) / name;
  std::error_code ec;
  if (fs::equivalent(src, dest, ec)) return;  // already in the artifact folder
  std::map<std::string, struct stat> found;
  std::uint64_t adding = static_cast<std::uint64_t>(st.st_size);
  if (S_ISDIR(st.st_mode)) {
    adding = 0;
    found = walk(src);
    for (const auto& [rel, est] : found) {
      if (S_ISLNK(est.st_mode))
        throw Error(fmt::format("{}: holds the symbolic link {}: refused (nothing copied)", from,
                                printable_excerpt(rel)));
      if (!S_ISREG(est.st_mode) && !S_ISDIR(est.st_mode))
        throw Error(
            fmt::format("{}: holds {}, neither a regular file nor a folder: refused "
                        "(nothing copied)",
                        from, printable_excerpt(rel)));
      if (S_ISREG(est.st_mode)) adding += static_cast<std::uint64_t>(est.st_size);
    }
  }
  const std::uint64_t kept = folder_bytes(path_) - folder_bytes(dest.string());
  if (kept + adding > max_bytes_)
    throw Error(
        fmt::format("{}: {} bytes: trial {}'s artifacts would hold {} bytes, over {} "
                    "(artifacts.max_artifact_bytes): refused (nothing copied)",
                    from, adding, number_, kept + adding, max_bytes_));
  // Into a temporary entry beside the folder, then renamed into place.
  const fs::path tmp = fs::path(root_) / (std::string(kTmpPrefix) + trial_artifact_name(number_));
  remove_quietly(tmp);
  try {
    if (S_ISREG(st.st_mode)) {
      copy_regular(src, tmp);
    } else {
      create_private_directories(tmp.string());
      for (const auto& [rel, est] : found) {  // map order: a folder before its contents
        if (S_ISDIR(est.st_mode))
          create_private_directories((tmp / rel).string());
        else
          copy_regular(src / rel, tmp / rel);
      }
    }
    remove_quietly(dest);
    fs::rename(tmp, dest);
  } catch (const Error&) {
    remove_quietly(tmp);
    throw;
  } catch (const std::exception& e) {
    remove_quietly(tmp);
    throw Error(from + ": " + e.what());
  }
}

ArtifactSummary ArtifactFolder::finish() {
  const fs::path dir(path_);
  const std::string name = trial_artifact_name(number_);
  struct stat st {};
  if (!lstat_path(dir, st)) return {};
  if (!S_ISDIR(st.st_mode)) {
    remove_quietly(dir);
    throw Error(path_ + ": was replaced by " +
                (S_ISLNK(st.st_mode) ? "a symbolic link" : "something not a folder") +
                ": refused (nothing kept)");
  }
  auto found = walk(dir);
  std::uint64_t total = 0;
  for (auto it = found.begin(); it != found.end();) {
    const mode_t mode = it->second.st_mode;
    if (!S_ISREG(mode) && !S_ISDIR(mode)) {  // links, FIFOs, sockets: never kept
      remove_quietly(dir / it->first);
      it = found.erase(it);
      continue;
    }
    if (S_ISREG(mode)) total += static_cast<std::uint64_t>(it->second.st_size);
    ++it;
  }
  if (total > max_bytes_) {
    remove_quietly(dir);
    throw Error(fmt::format("{}: holds {} bytes, over {} (artifacts.max_artifact_bytes): not kept",
                            path_, total, max_bytes_));
  }
  if (found.empty()) {
    remove_quietly(dir);
    return {};
  }
  Manifest m;
  for (const auto& [rel, est] : found) {
    Entry e;
    if (S_ISDIR(est.st_mode)) {
      e.kind = "dir";
    } else {
      e.kind = "file";
      e.mtime = mtime_ns(est);
      e.hash = hash_file(dir / rel, &e.size);
    }
    m.emplace(rel, std::move(e));
  }
  const std::string text = manifest_json("trial", number_, m).dump();
  const OwnerOnlyFolder root(root_, false);
  root.replace_file(name + kManifestSuffix,
                    [&](const auto& sink) { sink(text.data(), text.size()); });
  return summary_of(m);
}

ArtifactSummary read_artifact_summary(const std::string& root, std::int64_t number) {
  const OwnerOnlyFolder folder(root, false);
  return summary_of(
      read_manifest(folder, trial_artifact_name(number) + kManifestSuffix, number, "trial"));
}

ArtifactSummary install_artifacts(const std::string& root, std::int64_t number,
                                  const std::string& stream_path, std::uint64_t manifest_bytes,
                                  std::uint64_t max_bytes) {
  install_tree(root, artifact_spec(number), stream_path, manifest_bytes, max_bytes, true);
  return read_artifact_summary(root, number);
}

ArtifactSummary copy_artifacts(const std::string& root, std::int64_t number, const std::string& to,
                               bool overwrite) {
  const TreeSpec spec = artifact_spec(number);
  Manifest m = verify_tree(root, spec, std::numeric_limits<std::uint64_t>::max());
  check_entry_names(spec.name, m, false);
  const fs::path to_dir(to);
  for (const auto& [rel, e] : m) {
    struct stat st {};
    if (!lstat_path(to_dir / rel, st)) continue;
    if (e.kind == "dir" && S_ISDIR(st.st_mode)) continue;
    if (!overwrite || S_ISDIR(st.st_mode) != (e.kind == "dir"))
      throw Error((to_dir / rel).string() + ": exists: refused (nothing copied" +
                  (overwrite ? "; it is not the same kind, file or folder)"
                             : "; --overwrite replaces files)"));
  }
  copy_tree(fs::path(root) / spec.name, m, to_dir, overwrite);
  return summary_of(m);
}

}  // namespace hps::checkpoints
