#include "coordinator/artifact_store.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "protocol/protocol.h"
#include "search/errors.h"
#include "search/private_files.h"
#include "search/util/fd_io.h"
#include "search/util/hash.h"

namespace hps {

namespace {

std::string errno_text(int err) {
  const char* d = strerrordesc_np(err);
  return d ? d : "error " + std::to_string(err);
}

void remove_file(const std::string& path) {
  if (!path.empty()) ::unlink(path.c_str());
}

}  // namespace

// On Linux a thread id names one thread for setpriority and ioprio_set.
void lower_thread_priority(int tid) {
  const auto id = static_cast<id_t>(tid);
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, id);
  if (errno == 0 && now < kArtifactThreadNice)
    (void)::setpriority(PRIO_PROCESS, id, kArtifactThreadNice);
  constexpr int kIoprioClassBestEffort = 2;  // IOPRIO_CLASS_BE (linux/ioprio.h)
  constexpr int kIoprioClassShift = 13;
  constexpr int kIoprioWhoProcess = 1;  // IOPRIO_WHO_PROCESS: a thread id
  (void)::syscall(SYS_ioprio_set, kIoprioWhoProcess, tid,
                  (kIoprioClassBestEffort << kIoprioClassShift) | 7);
}

ArtifactStore::ArtifactStore(std::string root, std::uint64_t max_snapshot_bytes,
                             std::string artifact_root, std::uint64_t max_artifact_bytes)
    : root_(std::move(root)),
      max_snapshot_bytes_(max_snapshot_bytes),
      artifact_root_(std::move(artifact_root)),
      max_artifact_bytes_(max_artifact_bytes) {
  fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0) throw Error(std::string("coordinator: eventfd failed: ") + errno_text(errno));
  transfer_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (transfer_fd_ < 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(std::string("coordinator: eventfd failed: ") + errno_text(err));
  }
  thread_ = std::thread([this] { run(); });
}

ArtifactStore::~ArtifactStore() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  if (thread_.joinable()) thread_.join();
  for (auto& [lineage, u] : uploads_) remove_file(u.path);
  for (auto& [number, u] : user_uploads_) remove_file(u.path);
  ::close(fd_);
  ::close(transfer_fd_);
}

void ArtifactStore::submit(Job job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  ready_.notify_one();
}

std::vector<ArtifactStore::Result> ArtifactStore::take() {
  std::vector<Result> out;
  std::lock_guard lock(mutex_);
  out.swap(results_);
  std::uint64_t count = 0;
  (void)!::read(fd_, &count, sizeof count);  // not readable until the next result
  return out;
}

void ArtifactStore::post(Result r) {
  std::lock_guard lock(mutex_);
  results_.push_back(std::move(r));
  std::uint64_t one = 1;
  (void)!::write(fd_, &one, sizeof one);
}

std::vector<ArtifactStore::Result> ArtifactStore::take_transfer() {
  std::vector<Result> out;
  std::lock_guard lock(mutex_);
  out.swap(transfer_results_);
  std::uint64_t count = 0;
  (void)!::read(transfer_fd_, &count, sizeof count);  // not readable until the next result
  return out;
}

bool ArtifactStore::has_results() {
  std::lock_guard lock(mutex_);
  return !results_.empty();
}

void ArtifactStore::run() {
  lower_thread_priority(static_cast<int>(::gettid()));
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and every job ran
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Result r;
    try {
      r = handle(job);
    } catch (const std::exception& e) {
      r.ok = false;
      r.error = e.what();
    }
    r.kind = job.kind;
    r.rid = job.rid;
    r.number = job.number;
    r.lineage = job.lineage;
    r.step = job.step;
    r.user = job.user;
    r.first = job.offset == 0;
    if (job.kind == Job::Kind::kPut) {
      r.total = job.total;
      r.manifest_bytes = job.manifest_bytes;
    }
    r.route = job.route;
    r.token = std::move(job.token);
    r.reply_to = std::move(job.reply_to);
    if (job.kind == Job::Kind::kRemove) continue;  // nobody waits for it
    const bool transfer = job.route == Job::Route::kTransfer;
    std::lock_guard lock(mutex_);
    (transfer ? transfer_results_ : results_).push_back(std::move(r));
    std::uint64_t one = 1;
    (void)!::write(transfer ? transfer_fd_ : fd_, &one, sizeof one);
  }
}

ArtifactStore::Result ArtifactStore::handle(Job& job) {
  switch (job.kind) {
    case Job::Kind::kPut:
      return put(job);
    case Job::Kind::kGet:
      return get(job);
    case Job::Kind::kRemove: {
      if (auto u = uploads_.find(job.lineage); u != uploads_.end()) {
        remove_file(u->second.path);
        uploads_.erase(u);
      }
      readers_.erase(job.lineage);
      checkpoints::remove_lineage(root_, job.lineage);
      return {};
    }
  }
  return {};
}

ArtifactStore::Result ArtifactStore::put(Job& job) {
  Result r;
  // Snapshots by lineage; user artifacts by trial.
  std::map<std::int64_t, Upload>& uploads = job.user ? user_uploads_ : uploads_;
  const std::int64_t key = job.user ? job.number : job.lineage;
  const std::uint64_t max_bytes = job.user ? max_artifact_bytes_ : max_snapshot_bytes_;
  const std::string what = job.user ? "the artifacts of trial " + std::to_string(job.number)
                                    : "the snapshot of step " + std::to_string(job.step);
  auto fail = [&](const std::string& why) {
    if (auto u = uploads.find(key); u != uploads.end()) {
      remove_file(u->second.path);  // the partial file goes
      uploads.erase(u);
    }
    r.ok = false;
    r.error = why;
    return r;
  };
  const std::string piece = "the piece at offset " + std::to_string(job.offset) + " of " + what;
  if (util::xxh3_64(job.data) != job.checksum)
    return fail(piece + ": checksum mismatch (XXH3 64 of its " + std::to_string(job.data.size()) +
                " bytes differs from the one sent): refused");
  if (job.total - job.manifest_bytes > max_bytes)
    return fail(what + " holds " + std::to_string(job.total - job.manifest_bytes) +
                " bytes, over " + std::to_string(max_bytes) +
                (job.user ? " (artifacts.max_artifact_bytes)" : " (artifacts.max_snapshot_bytes)") +
                ": refused");
  if (job.user && artifact_root_.empty())
    return fail("this coordinator keeps no user artifacts (no artifact root): refused");
  try {
    if (job.offset == 0) {
      if (auto u = uploads.find(key); u != uploads.end()) {
        remove_file(u->second.path);  // an earlier upload left unfinished
        uploads.erase(u);
      }
      Upload u;
      u.step = job.step;
      u.total = job.total;
      u.manifest_bytes = job.manifest_bytes;
      if (job.user) {
        const OwnerOnlyFolder root(artifact_root_, true);
        u.path = checkpoints::stream_path(root.path(), "upload-trial", job.number);
      } else {
        readers_.erase(job.lineage);
        checkpoints::LineageFolder folder(root_, job.lineage, max_snapshot_bytes_);
        u.path = checkpoints::stream_path(folder.path(), "upload", job.step);
      }
      remove_file(u.path);
      int fd = ::open(u.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                      kPrivateFileMode);
      if (fd < 0) throw Error(u.path + ": " + errno_text(errno));
      ::close(fd);
      uploads[key] = u;
    }
    auto it = uploads.find(key);
    if (it == uploads.end())
      return fail(piece + ": no such upload in progress (its first piece was " +
                  "refused or never came): refused");
    Upload& u = it->second;
    if (u.step != job.step || u.total != job.total || u.manifest_bytes != job.manifest_bytes)
      return fail(piece + ": its step, total or manifest length differ from the upload's " +
                  "first piece: refused");
    if (job.offset != u.written)
      return fail(piece + ": expected offset " + std::to_string(u.written) + ": refused");
    int fd = ::open(u.path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) throw Error(u.path + ": " + errno_text(errno));
    if (int err = util::write_all(fd, job.data.data(), job.data.size(), job.offset); err != 0) {
      ::close(fd);
      throw Error(u.path + ": " + errno_text(err));
    }
    ::close(fd);
    u.written += job.data.size();
    r.ok = true;
    r.next_offset = u.written;
    if (u.written == u.total && job.user) {
      const checkpoints::ArtifactSummary kept = checkpoints::install_artifacts(
          artifact_root_, job.number, u.path, u.manifest_bytes, max_artifact_bytes_);
      remove_file(u.path);
      uploads.erase(it);
      r.file_bytes = kept.bytes;
      r.files = kept.files;
      r.done = true;
    } else if (u.written == u.total) {
      const std::string lineage_dir = checkpoints::lineage_path(root_, job.lineage);
      checkpoints::install_snapshot(lineage_dir, u.step, u.path, u.manifest_bytes,
                                    max_snapshot_bytes_);
      remove_file(u.path);
      r.file_bytes = u.total - u.manifest_bytes;
      uploads_.erase(it);
      checkpoints::LineageFolder(root_, job.lineage, max_snapshot_bytes_).keep_only(job.step);
      r.done = true;
    }
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return r;
}

ArtifactStore::Result ArtifactStore::get(const Job& job) {
  Result r;
  auto it = readers_.find(job.lineage);
  if (it == readers_.end() || it->second->step() != job.step || job.offset == 0) {
    readers_.erase(job.lineage);
    it = readers_
             .emplace(job.lineage, std::make_unique<checkpoints::SnapshotReader>(
                                       checkpoints::lineage_path(root_, job.lineage), job.step))
             .first;
  }
  const checkpoints::SnapshotReader& reader = *it->second;
  if (reader.file_bytes() > max_snapshot_bytes_)
    throw Error("snapshot-" + std::to_string(job.step) + ": over " +
                std::to_string(max_snapshot_bytes_) + " bytes (artifacts.max_snapshot_bytes)");
  r.offset = job.offset;
  r.total = reader.total();
  r.manifest_bytes = reader.manifest_bytes();
  r.data = reader.read(job.offset, protocol::kMaxArtifactChunkBytes);
  r.checksum = util::xxh3_64(r.data);
  r.ok = true;
  if (job.offset + r.data.size() >= r.total) readers_.erase(job.lineage);
  return r;
}

}  // namespace hps
