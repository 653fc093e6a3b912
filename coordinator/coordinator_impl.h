// Coordinator::Impl: the state of a running coordinator and the steps that
// tie its parts together. The parts, one concept per file:
//   transport.h          the ROUTER socket: bind, read a batch, queue and send
//   sessions.h           connected workers (a session is the lease on one trial)
//   trial_mirror.h       the copy of the study's trials
//   trial_source.h       a claimed WAITING trial or a newly sampled one
//   run_limits.h         budget, timeout, min_workers, and when the study is done
//   coordinator_record.h the "coordinator" study attr (status, take-over check)
//   log_limiter.h        rate-limited logs
// The Impl's own steps are split the same way: coordinator.cpp (the step
// loop, stop, the public API), worker_messages.cpp (one handler per worker
// message), dispatch.cpp (dispatching trials, ending the study), leases.cpp
// (ending a trial, losing a worker, retries, heartbeats). Private (not
// installed).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/artifact_server.h"
#include "coordinator/artifact_store.h"
#include "coordinator/coordinator.h"
#include "coordinator/descriptor_watch.h"
#include "coordinator/log_limiter.h"
#include "coordinator/run_limits.h"
#include "coordinator/sessions.h"
#include "coordinator/transport.h"
#include "coordinator/trial_mirror.h"
#include "coordinator/trial_source.h"
#include "protocol/protocol.h"
#include "search/trial_lifecycle.h"
#include "search/util/host.h"
#include "search/writer_lock.h"

namespace hps {

struct Coordinator::Impl {
  using Steady = std::chrono::steady_clock;

  // ---- single writer: taken first, released last (search/writer_lock.h)
  WriterLock writer_lock;

  // ---- configuration
  Study study;
  Storage& storage;
  std::int64_t study_id;
  StudyDirection direction;
  SearchSpace space;
  CoordinatorOptions options;  // validated before anything binds
  bool nop_pruner;             // NopPruner: no decisions, no bookkeeping
  std::string config_json;
  std::uint64_t config_id;
  std::string hostname = util::host_name();

  // ---- parts
  Transport transport;
  DescriptorWatch descriptors;  // says when connections exhaust the descriptors
  SessionTable sessions;
  TrialMirror mirror;
  TrialSource source;
  std::unordered_map<std::int64_t, std::string> running;  // trial number -> routing id
  int n_workers = 1;  // connected workers (at least 1), for SamplingContext
  RunLimits limits;
  // Snapshots that travel (artifact_store.h): the I/O thread, null when the
  // coordinator keeps no checkpoint root; the token of <checkpoint_root>/.store-id
  // sent in assignments; the file bytes of each lineage's newest kept
  // snapshot, and of the uploads under way (artifacts.max_study_bytes).
  std::unique_ptr<ArtifactStore> artifacts;
  // The artifact endpoint (artifact_server.h), with the store; null without
  // it. Declared after `artifacts`: its thread stops before the store goes.
  std::unique_ptr<ArtifactServer> artifact_server;
  std::string store_id;
  std::map<std::int64_t, std::uint64_t> stored_bytes;
  std::map<std::int64_t, std::uint64_t> pending_bytes;
  // User artifacts (search/checkpoints.h ArtifactFolder): their root
  // (checkpoints::artifact_root_for the checkpoint root; "" when the store
  // is closed), the bytes kept there (found at start, then uploaded) and
  // those of the uploads under way, by trial; both count against
  // artifacts.max_study_bytes with the snapshots.
  std::string artifact_root;
  std::uint64_t user_stored_bytes = 0;
  std::map<std::int64_t, std::uint64_t> user_pending_bytes;
  // The bytes of everything the study keeps, but `lineage`'s snapshots
  // (-1: none left out).
  std::uint64_t study_bytes_but(std::int64_t lineage) const;
  // Records trial `number`'s user artifacts kept in place (Complete.artifacts
  // or Fail.artifacts): system attr artifacts from their manifest, or user
  // attr artifact_warning when it cannot be read.
  void record_artifacts_in_place(std::int64_t number);
  // Pieces (ArtifactPut/ArtifactGet) queued on the I/O thread, per session
  // and in all: a worker keeps at most its window (4) in flight, so more
  // than kMaxArtifactJobsPerSession is a peer that floods; the coordinator's
  // memory for queued pieces stays under kMaxArtifactJobs x 1 MiB.
  static constexpr int kMaxArtifactJobsPerSession = 16;
  static constexpr int kMaxArtifactJobs = 256;
  std::map<std::string, int> artifact_jobs;  // routing id -> pieces queued
  int artifact_jobs_total = 0;
  // Whether `s` may queue one more piece; else the reason to refuse it.
  std::string artifact_job_refusal(const Session& s) const;
  void submit_artifact_job(ArtifactStore::Job job);

  // ---- run state
  bool stopping = false;
  bool is_done = false;
  std::string reason_done;
  std::vector<TrialPtr> ended;  // for the callback, after commit
  std::function<void(const FrozenTrial&)> callback;
  Steady::time_point last_status{};
  bool status_dirty = true;
  CoordinatorStats counters;
  // Rate-limited logs; their held-back counts are flushed by step() and by
  // the destructor of Coordinator.
  LogLimiter bad_frame_log{5, "dropped bad frames and protocol version refusals"};
  LogLimiter late_log{20, "rejected late results and messages from unknown or surplus workers"};

  Impl(Study s, Json objective_config, CoordinatorOptions o);

  // ---- coordinator.cpp: the loop
  void take_over();
  void exclude_earlier_failures();
  // The group commit: runs fn in one storage transaction; after the commit,
  // sends every reply queued meanwhile and runs the trial callbacks. If the
  // transaction throws (rolled back), the queued replies and callbacks are
  // dropped (never acknowledge before commit) and the exception propagates.
  void commit_then_reply(const std::function<void()>& fn);
  // Handles the messages of one group: those the socket held when the
  // step began (what arrived while the last commit ran: the classic group
  // commit loop; a group is not extended with what arrives while it is
  // handled, which would make its first members wait for the last ones).
  void handle_group(const std::vector<Transport::Incoming>& batch, Steady::time_point now);
  RunProgress progress() const;
  bool writes_due(Steady::time_point now, bool may_expire);
  bool step(int timeout_ms);
  void handle(const Transport::Incoming& in, Steady::time_point now);
  void write_status(bool force);
  void run_callbacks();
  void stop(const std::string& why);
  void worker_exited(std::int64_t pid);

  // ---- worker_messages.cpp: one handler per worker message
  void send(Session& s, const protocol::Message& m);
  void send_to(const std::string& rid, const protocol::Message& m);
  void bad_frame(const std::string& rid, const std::string& why);
  void refuse_version(const std::string& rid, const protocol::VersionMismatch& e,
                      Steady::time_point now);
  void on_unknown_session(const std::string& rid, const protocol::Message& message);
  // Ends the session of an older link of the worker process saying Hello
  // from `rid`; true if `rid` is itself the older link (its Hello is
  // dropped). See worker_messages.cpp.
  bool supersede_older_link(const std::string& rid, const protocol::Hello& h,
                            const std::string& key_name);
  void on_hello(const std::string& rid, const protocol::Hello& h, const std::string& key_name,
                Steady::time_point now);
  bool refuse_full(const std::string& rid, const protocol::Hello& h, Steady::time_point now);
  void on_request(Session& s);
  bool owns(Session& s, std::int64_t number, const char* what);
  void on_suggest(Session& s, const protocol::Suggest& m);
  void on_report(Session& s, const protocol::Report& m);
  void set_user_attrs(const FrozenTrial& t, const std::string& text);
  void on_complete(Session& s, const protocol::Complete& m);
  void on_fail(Session& s, const protocol::Fail& m);
  // The worker said it is leaving (a Disconnect from the worker: stopped by
  // a signal): its session ends now, and a trial assigned to it (perhaps in
  // flight, unseen) is queued again as stopped, not lost.
  void on_leaving(Session& s, const protocol::Disconnect& m);
  // Snapshots that travel (artifact_store.h): a piece of an upload, a
  // request for a piece of the snapshot a retry resumes, and the I/O
  // thread's results (replies; the checkpoint attr once an upload is whole).
  void open_artifact_store();
  void on_artifact_put(Session& s, protocol::ArtifactPut& m);  // takes m.data
  void on_artifact_get(Session& s, const protocol::ArtifactGet& m);
  void on_restored(Session& s, const protocol::Restored& m);
  void on_artifact_results();
  // The token for the next pieces of the transfer whose first piece `r`
  // is (set in `token`), when there is an artifact endpoint.
  void grant_transfer(const ArtifactStore::Result& r, std::string& token);
  // A piece of a trial's user artifacts written (or refused): the reply to
  // send, and the store's record once the last piece is installed.
  void on_user_artifact_result(const ArtifactStore::Result& r, protocol::ArtifactPutReply& reply);

  // ---- dispatch.cpp: trials to idle workers; the end of the study
  void dispatch(Steady::time_point now);
  // Where a rank of a multi-process trial stands (Assignment's rank fields).
  struct RankPlace {
    int rank = 0;
    int world_size = 1;
    int local_rank = 0;
    int local_world_size = 1;
    int group_rank = 0;
    std::string master_addr;
    std::uint16_t master_port = 0;
  };
  // Sends trial d to `s` (its lease); `place`: the rank it runs of a
  // multi-process trial (nullptr: a single-process trial). Only rank 0
  // gets the lineage (its checkpoint folder is the trial's).
  void send_assignment(Session& s, const TrialSource::Dispatch& d,
                       const RankPlace* place = nullptr);

  // ---- gangs.cpp: multi-process trials (search/resources.h), gang
  // scheduled. A trial of size N takes N idle workers at once: rank 0 is
  // assigned first, picks a rendezvous port and says RankReady; then the
  // other ranks are assigned with MASTER_ADDR/MASTER_PORT. The policy is
  // in gangs.cpp and docs "Multi-process trials".
  struct Gang {
    TrialSource::Dispatch d;
    std::vector<std::string> rids;  // routing id of each rank's worker
    std::vector<RankPlace> places;  // by rank
    std::vector<bool> assigned;     // its Assignment was sent
    std::vector<bool> ready;        // it said RankReady
    Steady::time_point started;     // rank 0's assignment
  };
  // A trial taken from the source (RUNNING in the store, in `running` with
  // no routing id) that waits for `size` idle workers.
  struct PendingTrial {
    TrialSource::Dispatch d;
    int size = 1;
    bool wait_logged = false;
  };
  bool gang_mode = false;              // a trial may have more than one rank
  int max_trial_size = 1;              // TrialResources::max_size of the space
  std::map<std::int64_t, Gang> gangs;  // running multi-process trials
  std::deque<PendingTrial> pending;    // oldest first
  // Ranks released from a trial before their own result came (the trial
  // ended, or they finished after rank 0): that result is dropped quietly.
  std::map<std::int64_t, std::vector<std::string>> released_ranks;
  void dispatch_gangs(Steady::time_point now);
  std::vector<Session*> choose_ranks(const std::vector<Session*>& idle, int size) const;
  void start_gang(PendingTrial p, const std::vector<Session*>& ranks, Steady::time_point now);
  void on_rank_ready(Session& s, const protocol::RankReady& m);
  // A Complete/Fail (fail_message: the Fail's text; nullptr for a
  // Complete) from a worker that is not rank 0 of trial `number`, or one
  // released from it already: handled (true) without ending the trial.
  bool other_rank_ended(Session& s, std::int64_t number, const std::string* fail_message);
  bool is_other_rank(const Session& s, std::int64_t number) const;
  // Ends the other ranks of trial `number` (its end is stored): a StopTrial
  // to each rank's worker that runs it, a released reservation for those
  // not yet assigned. No-op for a single-process trial.
  void release_gang(std::int64_t number, const std::string& reason);
  // " (rank R of N on host H)" for `rid`'s rank of trial `number`, or "".
  std::string rank_note(std::int64_t number, const std::string& rid) const;
  // Trials whose ranks did not all start within rendezvous_timeout_s: FAIL.
  void check_rendezvous(Steady::time_point now);
  bool rendezvous_open() const;
  void forget_pending(std::int64_t number);
  void check_done(Steady::time_point now);
  // ---- pbt.cpp: Population Based Training (CoordinatorOptions::pbt)
  void pbt_setup();
  std::int64_t pbt_members() const;
  std::int64_t pbt_steps_trained() const;
  bool pbt_done() const;
  void pbt_tag(const TrialPtr& t);
  bool pbt_stopped(std::int64_t number) const;
  void pbt_mark(const FrozenTrial& t, const char* key, const Json& value);
  bool pbt_on_report(std::int64_t number, std::int64_t step);
  void finish(const std::string& why, bool stop_trials);

  // ---- leases.cpp: ending trials and sessions; retries; heartbeats
  // Trial `number` ended (its state is stored): `s` (null: none, as for a
  // trial another rank failed) no longer holds it, a multi-process trial's
  // other ranks are stopped, and retention and the run's rules see it.
  void end_trial(Session* s, std::int64_t number);
  // Trial `number` ended or was lost: its transfers' tokens are revoked and
  // what its unfinished uploads reserved of max_study_bytes is released.
  void end_transfers(std::int64_t number);
  void apply_retention(std::int64_t number);
  void mark_checkpoint_deleted(const FrozenTrial& t);
  void record_checkpoint(std::int64_t number, std::int64_t step);
  void end_lost_trial(std::int64_t number, const std::string& reason,
                      lifecycle::RetryCause cause = lifecycle::RetryCause::kWorkerLost,
                      bool always_retry = false);
  void note_worker_count();
  void expire(Session& s, const std::string& why);
  void heartbeats_and_expiry(Steady::time_point now, bool may_expire);
};

}  // namespace hps
