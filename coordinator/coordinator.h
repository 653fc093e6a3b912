// Coordinator: the ZeroMQ ROUTER server that runs a study with worker
// processes. It is the only writer of the study's store.
//
//   hps::Coordinator coordinator(study, config.objective, {.n_trials = 64});
//   spawn workers: hpsearch worker --connect <coordinator.endpoint()>
//   while (coordinator.step(100)) {}
//
// What it does (protocol/protocol.h has the messages):
//  - Workers say Hello and get a session (a lease on their trial). Each side
//    sends a heartbeat every heartbeat interval; a worker silent for
//    liveness x interval is expired (the ZeroMQ guide's Paranoid Pirate
//    pattern, zguide chapter 4): its RUNNING trial becomes FAIL("worker
//    lost") and, while retries remain, a WAITING trial with the same params is
//    queued (system attrs retry_of / retried_as / retry_cause; the retry
//    limit counts lost and stopped workers: search/trial_lifecycle.h). A later message from an
//    expired session is answered with Disconnect and logged as a rejected
//    late result.
//  - Dispatch: a worker's RequestTrial is answered with the oldest WAITING
//    trial, else a new trial whose params the sampler chooses at that moment
//    with every RUNNING trial visible (so parallel samplers such as TPE's
//    constant liar see the trials in flight; the sampler is also told the
//    number of connected workers, SamplingContext::n_workers, which turns
//    TPE's constant liar on when there is more than one). Dispatching stops when the
//    budget is met (finished trials + running trials >= n_trials, or
//    timeout_s passed since the coordinator started, or the search space is
//    exhausted); when the running trials have ended, every worker gets
//    Shutdown. The budget counts finished trials: COMPLETE, PRUNED and FAIL
//    neither retried nor excluded from the budget (system attr
//    budget_excluded: exclude_earlier_failures below, and hpsearch run for
//    a run its failure rules stopped before any success).
//  - Failures (RunLimits, coordinator/run_limits.h): the run stops
//    dispatching when max_failed_trials trials of this run ended FAIL, or
//    (fail_fast) when its first min(5, n_trials) finished trials all ended
//    FAIL; stopped_for_failures() then says so. Retried FAILs do not count.
//  - Each Report is stored and put to the study's pruner; the answer goes
//    back in a Decision.
//  - Resume: trials left RUNNING by an earlier coordinator become
//    FAIL("coordinator restarted") and are queued again with the same params.
//  - Throughput (group commit): every step() handles the messages that
//    arrived since the last step (while its commit ran), up to max_batch,
//    in one storage transaction, and sends the replies only after the
//    commit (so nothing a worker is told is lost if the process dies, and a
//    transaction that fails is answered with nothing: its replies are
//    dropped). The more load, the larger the group and the fewer commits
//    per trial (CoordinatorStats::commits). The
//    coordinator keeps its own copy of the study's trials (a vector by trial
//    number, updated from the store after each write), so no step reads the
//    whole history.
//  - Every incoming frame is validated; bad frames are logged (rate
//    limited) and dropped, a protocol version mismatch is refused with
//    Disconnect(kRefused).
//
// Not thread-safe: one thread calls step() and the other methods.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "search/checkpoints.h"
#include "search/pbt_options.h"
#include "search/resources.h"
#include "search/study.h"

namespace hps {

struct CoordinatorOptions {
  // Where the ROUTER socket binds for workers, besides local_endpoint().
  // Default "" = nowhere else: endpoint() is then local_endpoint(), the
  // private ipc socket (workers of this user on this host only).
  // "tcp://0.0.0.0:5555" accepts remote workers and needs CURVE keys
  // (keys_dir or curve_secret_key) unless insecure is set; "ipc:///path" a
  // Unix socket (guarded by its folder's permissions).
  std::string endpoint{};
  // Heartbeat interval in milliseconds, both ways. Default 1000. Shorter
  // finds dead workers sooner at the cost of more messages. Workers adopt it.
  int heartbeat_interval_ms = 1000;
  // Missed intervals before a peer counts as dead. Default 5: a worker is
  // expired after 5 s of silence.
  int liveness = 5;
  // How many times a trial whose worker was lost is queued again. Default
  // 1. 0 never retries. A trial stopped from outside (its worker stopped by
  // a signal, the run interrupted, a coordinator restart) is queued again
  // without counting (lifecycle::counts_against_retry_limit).
  int max_retries = 1;
  // Budget: finished trials in the study (none: no limit).
  std::optional<std::int64_t> n_trials{};
  // Budget: seconds after the coordinator started when no new trial is
  // dispatched (none: no limit).
  std::optional<double> timeout_s{};
  // Failure limit: once this many trials of this run ended FAIL, no new
  // trial is dispatched; running trials finish and the run ends ("N trials
  // failed (budget.max_failed_trials)"). Default none (no limit); >= 1. A
  // FAIL queued again as a retry (worker lost or stopped, run interrupted,
  // coordinator restarted) does not count; a FAIL from the objective does.
  std::optional<std::int64_t> max_failed_trials{};
  // Fail fast: when the first K trials of this run to finish all ended FAIL
  // (K = 5, or n_trials if smaller), no new trial is dispatched and the run
  // ends ("the first K trials all failed; ..."). A COMPLETE or PRUNED trial
  // turns it off for the rest of the run. Default true. False runs the
  // whole budget whatever fails.
  bool fail_fast = true;
  // When not empty: the study's FAIL trials from before this coordinator
  // (neither retried nor excluded already) stop counting against n_trials:
  // each gets the system attr budget_excluded (kAttrBudgetExcluded) with
  // this text as why, before the budget is first counted. Default "" (they
  // count). hpsearch run sets "objective changed" when it continues a study
  // with a changed objective: the budget is for the current objective.
  std::string exclude_earlier_failures;
  // Most messages handled in one step (one storage transaction). Default
  // 1024. Larger batches amortise commits; smaller ones reply sooner.
  int max_batch = 1024;
  // Dispatching waits until this many workers have asked for a trial (said
  // Hello, then RequestTrial), or until min_workers_wait_s seconds after the
  // coordinator started, whichever comes first: the first trials of N
  // workers then start together, not only once each worker said Hello. Default 0: dispatch to each
  // worker as soon as it asks. Set it to start the first trials of N workers together (benchmarks).
  int min_workers = 0;
  double min_workers_wait_s = 10.0;
  // Workers the launcher starts (a local pool, a Slurm step), 0 when not
  // known. A multi-process trial bigger than the workers connected says it
  // waits for more only once this many connected, or after
  // min_workers_wait_s: not while the pool is still starting.
  int expected_workers = 0;
  // Seconds between updates of the study's "coordinator" system attr (the
  // workers table that `hpsearch status` shows). Default 1.0.
  double status_interval_s = 1.0;

  // ---- Long trials (search/checkpoints.h).
  // The folder of the lineages' checkpoint folders, as the workers see it
  // (`hpsearch run`: <study>.logs/checkpoints, the folder local workers
  // use). When a trial ends, retention removes lineage folders there
  // (`artifacts`) and marks the trial's checkpoint attr deleted. Default
  // "": the coordinator removes nothing (the workers' folders are not its).
  std::string checkpoint_root{};
  // space.json's "artifacts": checkpoints on or off (off: assignments name
  // no lineage, so workers give trials no checkpoint folder), retention
  // and the snapshot size limit.
  checkpoints::ArtifactOptions artifacts{};
  // space.json's "scheduler" {"type": "pbt"} (search/pbt_options.h):
  // Population Based Training of `population` members (coordinator/pbt.cpp).
  // Needs artifacts.checkpoints and a checkpoint_root the workers share (local
  // workers); n_trials is not used with it. Default none.
  std::optional<PbtOptions> pbt{};
  // space.json's "resources" (search/resources.h): the processes (ranks)
  // of each trial, gang scheduled on that many workers (docs
  // "Multi-process trials"). Default: one process per trial. A
  // processes_param must name a param of the study's space
  // (ConfigError("resources.processes.param") otherwise).
  TrialResources resources{};

  // ---- Trust (CurveZMQ + ZAP, ZeroMQ RFC 26/27; README "Security").
  // A keys folder made by `hpsearch keys init`: coordinator.secret and
  // authorized_workers (protocol/curve_keys.h). Default "": none. With keys,
  // `endpoint` is a CURVE server that admits only the listed worker public
  // keys; refusals are logged at warning level (rate limited) and counted:
  // CoordinatorStats::refused_keys for an unknown key, failed_handshakes
  // for a peer that fails before its key is checked.
  std::string keys_dir{};
  // Or the keys themselves: the coordinator's CURVE secret key (Z85, 40
  // characters) and the admitted workers' public keys (Z85 -> name, the
  // name shown in logs). keys_dir, when set, replaces both.
  std::string curve_secret_key{};
  std::map<std::string, std::string> authorized_keys{};
  // Bind a tcp endpoint without keys. Default false (refused). When true,
  // anyone who can reach the port joins as a worker, sees every trial's
  // objective config and can store made-up results; a warning is logged.
  bool insecure = false;
  // Most workers connected at once. Default 1024. A Hello beyond it gets
  // Disconnect(refused), a warning and CoordinatorStats::refused_workers.
  int max_workers = 1024;

  // Throws ConfigError naming the field ("coordinator.liveness: ..."):
  // also for a tcp endpoint without keys unless insecure.
  void validate() const;
};

// A connected worker, as `hpsearch status` and the progress line show it.
struct WorkerStatus {
  std::string name;  // the worker's id (Hello.worker_id), "host:pid" by default
  std::string hostname;
  std::int64_t pid = 0;
  std::string device;  // "cpu", "cuda:0", "cuda" (several GPUs)
  std::string gpus;    // its CUDA_VISIBLE_DEVICES ("0,1"; "" when unset)
  int threads = 1;
  std::optional<std::int64_t> trial;  // the number of the trial it runs, if any
  // Trials assigned to it that wait there for `trial` to end (prefetch).
  std::vector<std::int64_t> prefetched;
  double connected_s = 0;  // seconds since its Hello
};

struct CoordinatorStats {
  std::int64_t finished = 0;  // trials counting towards the budget (whole study)
  std::int64_t running = 0;   // trials dispatched and not ended
  std::int64_t waiting = 0;   // WAITING trials (enqueued, retries)
  int workers_busy = 0;
  int workers_idle = 0;
  std::optional<double> best_value{};
  std::optional<std::int64_t> best_number{};
  std::int64_t dropped_frames = 0;    // invalid frames received
  std::int64_t rejected_results = 0;  // late results from expired sessions
  std::int64_t expired_workers = 0;   // sessions expired (silent or exited)
  std::int64_t refused_keys = 0;      // connections refused by CURVE/ZAP (unknown key)
  // Peers of a CURVE endpoint refused for failing the handshake before the
  // key check: no CURVE keys (a worker started --insecure), another pinned
  // coordinator key, no ZeroMQ greeting (garbage bytes), closed during it.
  std::int64_t failed_handshakes = 0;
  std::int64_t refused_workers = 0;  // Hellos refused: max_workers connected
  // Group commit: storage transactions committed by this coordinator (one
  // per step that had anything to store) and worker messages handled in
  // them; messages / commits is the mean group size.
  std::int64_t commits = 0;
  std::int64_t messages = 0;
  // This run's trials (since this coordinator started), as the failure rules
  // count them: ended COMPLETE or PRUNED, and ended FAIL not queued again.
  std::int64_t run_succeeded = 0;
  std::int64_t run_failed = 0;
};

class Coordinator {
 public:
  // Takes the study's writer lock (search/writer_lock.h) for the
  // coordinator's whole life when the study is in a SQLite file, refusing
  // with WriterLockBusy (an Error naming the holder: host, pid, since when)
  // if another coordinator holds it; for other storages a live process
  // named by the study's "coordinator" system attr refuses with Error. Then
  // binds the socket, fails and re-queues trials left RUNNING
  // ("coordinator restarted"), and loads the trials. `objective_config` is
  // the "objective" section sent to workers; the search space is the
  // study's (an empty one if the study has none).
  // Throws ConfigError for bad options, Error if the endpoint cannot be bound,
  // StorageError from the store.
  Coordinator(Study study, Json objective_config, CoordinatorOptions options);
  // Records the end of the run in the study's status attr: the reason it
  // ended, or, if it had not, the reason its limits give now (a run whose
  // budget was already reached: "budget reached") or "coordinator exited".
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // The endpoint workers connect to ("tcp://127.0.0.1:41234"); for a
  // wildcard bind (0.0.0.0) the address is as bound. Without
  // options.endpoint, local_endpoint().
  const std::string& endpoint() const;
  // The private endpoint for worker processes of this user on this host
  // (local pools): "ipc://<folder>/coordinator.sock" in a fresh 0700
  // folder under $TMPDIR (or /tmp), removed with the coordinator. Plain
  // ZMTP (no CURVE: ipc is as fast as it gets, and the folder's permissions
  // keep other users out), whatever the keys of endpoint().
  const std::string& local_endpoint() const;
  // The artifact endpoint as bound (coordinator/artifact_server.h): where
  // remote workers send the pieces of snapshots and user artifacts after
  // the first, told to them in the Welcome; by default the endpoint's next
  // tcp port ("tcp://0.0.0.0:5556" for 5555; any free port for "*"), for an
  // ipc endpoint its path + ".artifacts". "" when the coordinator keeps no
  // checkpoints (options.checkpoint_root empty or artifacts.checkpoints
  // false).
  const std::string& artifact_endpoint() const;

  // One round of the event loop: waits up to timeout_ms for messages,
  // handles a batch of them in one transaction, sends replies and
  // heartbeats, expires silent workers, dispatches trials to idle workers.
  // Returns false once the study is done (the budget met and no trial
  // running, or stop() called); it then still answers late Hellos and
  // requests with Shutdown, so keep calling it while local workers exit.
  // Throws StorageError if the store fails (the batch is rolled back), the
  // store's file included: deleted or replaced under the coordinator
  // (search/file_watch.h), nothing of the batch is saved or answered.
  bool step(int timeout_ms);

  // Stops now (Ctrl-C): no more dispatching; running trials become
  // FAIL("interrupted") and are queued again with the same params; every
  // worker gets Shutdown with stop_trial set. Idempotent.
  void stop(const std::string& reason = "interrupted");

  // A local worker process exited: expires its sessions at once (rather than
  // after the heartbeat timeout). `pid` is the process id on this host.
  void worker_exited(std::int64_t pid);

  // True once step() returned false.
  bool done() const;
  // Why the study ended: "budget reached", "timeout", "search space
  // exhausted", "interrupted", a failure rule's reason ("3 trials failed
  // (budget.max_failed_trials)", "the first 5 trials all failed; ...");
  // "" while running.
  const std::string& done_reason() const;
  // True if the run ended (or stops dispatching) because of a failure rule
  // (max_failed_trials or fail_fast).
  bool stopped_for_failures() const;

  CoordinatorStats stats() const;
  std::vector<WorkerStatus> workers() const;

  // Called after each trial ends (COMPLETE, PRUNED, FAIL), after its
  // transaction committed, from the thread calling step().
  void set_trial_callback(std::function<void(const FrozenTrial&)> callback);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hps
