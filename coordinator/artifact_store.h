// ArtifactStore: the coordinator's side of snapshots that travel
// (search/checkpoints.h, protocol ArtifactPut / ArtifactGet). A remote
// worker (one that does not share the coordinator's checkpoint root)
// uploads each snapshot it takes and downloads the one a retry resumes, in
// pieces of at most protocol::kMaxArtifactChunkBytes.
//
// Thread model: every file operation runs on the store's own I/O thread,
// fed by a queue of jobs; the coordinator's loop submits a job and goes on
// answering heartbeats, reports and requests; the I/O thread posts each
// job's result to a second queue and makes fd() readable, which the loop
// polls beside its socket (Transport::wait) and drains with take(). Jobs run
// in the order submitted, so the pieces of one upload, and a lineage's
// removal after them, keep their order. The I/O thread runs at the lowest
// CPU priority (nice 19, kArtifactThreadNice) and the lowest best-effort
// I/O priority (level 7, ioprio_set(2)), so on a busy machine the loop's
// dispatch comes first.
// Jobs submitted by the artifact endpoint's thread (Job::route kTransfer,
// coordinator/artifact_server.h) post their results to a queue of their
// own (take_transfer(), transfer_fd()); that thread hands the last result
// of an upload (done, or refused) to the loop's queue with post().
// Private (not installed).
//
// Paths come from numbers only: a piece of trial N's upload goes to
// <root>/lineage-<L>/.tmp-upload-<S> (L: the lineage the coordinator's store
// names for N, S: an integer step), never to a name the peer sent. A
// trial's user artifacts (Job::user) go to <artifact root>/.tmp-upload-<N>,
// then to <artifact root>/trial-<N> with their manifest.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "search/checkpoints.h"

namespace hps {

// The nice value the artifact threads (the store's I/O thread, the
// artifact endpoint's thread and its ZeroMQ I/O thread) run at: the lowest
// CPU priority, so that on a busy machine the loop's dispatch comes first.
inline constexpr int kArtifactThreadNice = 19;
// Sets thread `tid`'s nice value to kArtifactThreadNice (never lower than
// it is) and its I/O priority to best effort, level 7 (ioprio_set(2)).
// Best effort: a refusal (a seccomp filter, an old kernel) leaves them.
void lower_thread_priority(int tid);

class ArtifactStore {
 public:
  struct Job {
    enum class Kind : std::uint8_t {
      kPut,     // write a piece of an upload; install the snapshot after its last piece
      kGet,     // read a piece of a snapshot
      kRemove,  // remove a lineage's folder (retention)
    };
    Kind kind = Kind::kPut;
    std::string rid;  // the session's routing id (the reply goes there)
    std::int64_t number = -1;
    std::int64_t lineage = -1;
    std::int64_t step = 0;
    std::uint64_t offset = 0;
    std::uint64_t total = 0;
    std::uint64_t manifest_bytes = 0;
    std::uint64_t checksum = 0;
    std::string data;
    bool user = false;  // kPut: the trial's user artifacts, not a snapshot
    // Who submitted it: the coordinator's loop (its results go to take()),
    // or the artifact endpoint's thread (to take_transfer()).
    enum class Route : std::uint8_t { kMain, kTransfer };
    Route route = Route::kMain;
    std::string token;     // kTransfer: the grant's token
    std::string reply_to;  // kTransfer: the routing id on the artifact endpoint
  };
  struct Result {
    Job::Kind kind = Job::Kind::kPut;
    std::string rid;
    std::int64_t number = -1;
    std::int64_t lineage = -1;
    std::int64_t step = 0;
    bool ok = false;
    std::string error;  // !ok: why (names the file and the rule)
    // kPut
    bool done = false;              // the snapshot is installed and verified
    std::uint64_t next_offset = 0;  // the offset the next piece starts at
    std::uint64_t file_bytes = 0;   // done: the snapshot's (or user artifacts') file bytes
    bool user = false;              // the job's
    std::uint64_t files = 0;        // done, user: the user artifacts' files
    // kGet
    std::uint64_t offset = 0;
    std::uint64_t total = 0;
    std::uint64_t manifest_bytes = 0;
    std::string data;
    std::uint64_t checksum = 0;
    // The job's
    bool first = false;  // kPut: the piece at offset 0
    Job::Route route = Job::Route::kMain;
    std::string token;
    std::string reply_to;
  };

  // Starts the I/O thread. `root`: the coordinator's checkpoint root;
  // `max_snapshot_bytes`: artifacts.max_snapshot_bytes (a larger upload is
  // refused); `artifact_root`: where the trials' user artifacts go ("":
  // their uploads are refused); `max_artifact_bytes`:
  // artifacts.max_artifact_bytes. Throws Error when an eventfd cannot be
  // made.
  ArtifactStore(
      std::string root, std::uint64_t max_snapshot_bytes, std::string artifact_root = "",
      std::uint64_t max_artifact_bytes = checkpoints::ArtifactOptions{}.max_artifact_bytes);
  // Runs the jobs still queued, then joins the I/O thread.
  ~ArtifactStore();
  ArtifactStore(const ArtifactStore&) = delete;
  ArtifactStore& operator=(const ArtifactStore&) = delete;

  void submit(Job job);
  // The results posted since the last call, in order.
  std::vector<Result> take();
  bool has_results();
  // Readable (POLLIN) while results wait.
  int fd() const { return fd_; }
  // Queues `r` for take() (the artifact endpoint's thread: the last result
  // of an upload it carried, which the loop records).
  void post(Result r);
  // The results of Route::kTransfer jobs posted since the last call, in
  // order; transfer_fd() is readable while some wait.
  std::vector<Result> take_transfer();
  int transfer_fd() const { return transfer_fd_; }

 private:
  void run();
  Result handle(Job& job);
  Result put(Job& job);
  Result get(const Job& job);

  std::string root_;
  std::uint64_t max_snapshot_bytes_;
  std::string artifact_root_;
  std::uint64_t max_artifact_bytes_;
  int fd_ = -1;
  int transfer_fd_ = -1;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> jobs_;
  std::vector<Result> results_;
  std::vector<Result> transfer_results_;
  bool stopping_ = false;

  // ---- I/O thread state
  struct Upload {
    std::int64_t step = 0;
    std::uint64_t total = 0;
    std::uint64_t manifest_bytes = 0;
    std::uint64_t written = 0;
    std::string path;
  };
  std::map<std::int64_t, Upload> uploads_;       // lineage -> the upload in progress
  std::map<std::int64_t, Upload> user_uploads_;  // trial -> its user artifacts' upload
  std::map<std::int64_t, std::unique_ptr<checkpoints::SnapshotReader>> readers_;  // lineage

  std::thread thread_;  // last: started once the rest is made
};

}  // namespace hps
