// Worker: serves trials for a coordinator (coordinator/coordinator.h) over a
// ZeroMQ DEALER socket. `hpsearch worker --connect ENDPOINT` runs one with
// the objective the coordinator's study names (objectives/objective.h); a
// training program embeds one to serve trials with its own objective, with
// the same Trial API as the in-process Study:
//
//   hps::Worker worker({.connect = "tcp://head-node:5555", .keys_dir = "keys/worker-1"});
//   return worker.run([&](hps::Trial& t) {
//     double lr = t.suggest_float("lr", 1e-4, 1e-1, {.log = true});
//     for (int epoch = 1; epoch <= 20; ++epoch) {
//       double loss = train_one_epoch(lr);
//       t.report(epoch, loss);
//       if (t.should_prune()) throw hps::TrialPruned();
//     }
//     return loss;
//   });
//
// with a coordinator started by `hpsearch run space.json --workers 0 --bind
// tcp://0.0.0.0:5555 --keys keys` (keys from `hpsearch keys init keys`;
// README "Security"; the space.json's objective may then be
// {"type": "external"}). suggest_*() of a param declared in space.json
// returns the value the coordinator's sampler chose; of an undeclared one,
// it asks the coordinator (define-by-run). report() is a request: it returns
// once the coordinator stored the value and the pruner answered, so
// should_prune() right after it holds that answer. set_user_attr() values
// are sent with the trial's result.
//
// The worker says Hello, then asks for a trial, runs the objective, sends
// Complete or Fail, and asks again, until the coordinator says Shutdown.
//
// Threads: the objective runs on the thread that called run(); a second
// thread owns the socket, sends heartbeats every interval and watches the
// coordinator's, so an objective that blocks for a long time (a long epoch
// with no report) never makes the worker look dead. If the coordinator is
// silent for liveness x interval, or says the session expired, the worker
// abandons the running trial (the coordinator has failed it) and reconnects
// with a fresh session, waiting 1, 2, 4 ... up to reconnect_max_ms between
// attempts (the ZeroMQ guide's Paranoid Pirate worker); after
// reconnect_attempts failed attempts in a row it gives up. An abandoned or
// stopped trial sees Trial::interrupted() become true, and its report() and
// should_prune() throw hps::Interrupted (let it propagate).
//
// An exception from the objective ends the trial FAIL with its message and
// the worker goes on with the next trial; TrialPruned ends it PRUNED; a NaN
// result ends it FAIL.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "search/study.h"

namespace hps {

struct WorkerOptions {
  // The coordinator's endpoint ("tcp://host:5555", "ipc:///tmp/x.sock").
  // Required.
  std::string connect{};
  // The device the objective uses: "cpu", "cuda:N", or "cuda" (every GPU
  // the worker sees: a command objective's program gets them all, the
  // LibTorch objectives train on the first). Default "cpu".
  std::string device = "cpu";
  // CPU threads the objective may use (ObjectiveContext::threads). Default
  // 0: all hardware threads.
  int threads = 0;
  // The worker's name in the store and in `hpsearch status`. Default
  // "" = "<hostname>:<pid>".
  std::string worker_id{};
  // Heartbeat settings until the coordinator's Welcome replaces them.
  // Defaults 1000 ms and 5 (the coordinator's defaults).
  int heartbeat_interval_ms = 1000;
  int liveness = 5;
  // Failed connection attempts in a row before run() gives up (returns 1).
  // Default 6 (about a minute with the default back-off).
  int reconnect_attempts = 6;
  // Back-off between attempts: starts at reconnect_initial_ms (default
  // 1000) and doubles up to reconnect_max_ms (default 32000).
  int reconnect_initial_ms = 1000;
  int reconnect_max_ms = 32000;
  // Trials the worker holds besides the one it runs, 0 or 1
  // (protocol::kMaxPrefetch). Default 0: it asks for a trial when the last
  // one ended and waits for the coordinator's answer. With 1 it asks as
  // soon as a trial starts, so the next one is there when it ends: for
  // objectives of a second or less, where that round trip (and the
  // coordinator's commit) is a noticeable part of each trial. A trial
  // waiting on the worker is RUNNING in the store from its dispatch (its
  // datetime_start), counts as pending for the sampler, and is queued
  // again like the running one if the worker is lost. Near the end of an
  // n_trials budget the coordinator hands no trial to a busy worker.
  int prefetch = 0;
  // The objective to run. Default (empty): built from the "objective"
  // section the coordinator sends, through the objective registry
  // (objectives/objective.h).
  Objective objective{};
  // The study's log directory, passed to objectives built from the
  // registry (ObjectiveContext::log_dir; the "command" objective writes
  // trial-<number>.log files there). Default "" = study_log_dir(study, ".")
  // once the study's name is known.
  std::string log_dir{};
  // Set (e.g. by a signal handler) to stop: the running trial is
  // interrupted at its next report (FAIL, queued again by the coordinator)
  // and run() returns kStopped.
  std::atomic<bool>* stop = nullptr;

  // ---- Trust (CurveZMQ, ZeroMQ RFC 26; README "Security").
  // A worker folder made by `hpsearch keys init` (DIR/worker-N: its
  // worker.secret and the coordinator's coordinator.public). Default "":
  // none. With keys the worker connects as a CURVE client that pins the
  // coordinator's public key: a coordinator without the matching secret key
  // (an impostor, or one of other keys) fails the handshake and never gets
  // a Hello, so it can send nothing to run; after 3 such failures in a row
  // the worker gives up (run() returns 1), saying the coordinator does not
  // match the pinned key. Failures that retrying cannot mend end it at
  // once: the coordinator refuses this worker's key, or it uses no CURVE
  // (and, for a worker without keys, a coordinator that requires them).
  // A coordinator that cannot be reached is retried (reconnect_attempts).
  std::string keys_dir{};
  // Or the keys themselves (Z85, 40 characters): the coordinator's public
  // key (pinned) and this worker's secret key (its public key is derived).
  // keys_dir, when set, replaces both.
  std::string curve_server_key{};
  std::string curve_secret_key{};
  // Connect to a tcp endpoint without keys. Default false (refused): a
  // process that answers at that address could hand this worker trials.
  bool insecure = false;
  // Run "command" objectives (any program, with arguments and environment
  // the coordinator chooses) that the coordinator sends. Default false: such
  // a trial ends FAIL with the reason. Local pools (`hpsearch run`) allow it.
  bool allow_command = false;
  // Without allow_command: the programs a "command" objective may run,
  // absolute paths. Its argv[0] must be one of them (compared after
  // resolving symlinks), and its "env" may set only the variables named in
  // allowed_env (an allow-list: BASH_ENV, PYTHONPATH, LD_PRELOAD, NODE_OPTIONS
  // and the like would run code of the coordinator's choosing). The program
  // still gets the coordinator's arguments: an interpreter such as python3
  // runs whatever script it is given. Default empty.
  std::vector<std::string> allowed_programs{};
  // With allowed_programs: the environment variables a "command"
  // objective's "env" may set (exact names). Default empty: none.
  std::vector<std::string> allowed_env{};

  // Throws ConfigError naming the field ("worker.connect: ..."): also for a
  // tcp endpoint without keys unless insecure.
  void validate() const;
};

class Worker {
 public:
  // run()'s result when *WorkerOptions::stop was set (130, as for SIGINT).
  static constexpr int kStopped = 130;

  explicit Worker(WorkerOptions options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Serves trials until the coordinator says Shutdown (returns 0), refuses
  // this worker (protocol version mismatch, its key, a failed handshake:
  // see keys_dir; returns 1), stays unreachable
  // for reconnect_attempts attempts (returns 1), or *options.stop is set
  // (returns kStopped). Runs options.objective, or without one the
  // objective the study's "objective" section names. Call once.
  int run();
  // run() with `objective` (which replaces options.objective).
  int run(Objective objective);

  // Trials this worker ended (complete, pruned or failed) so far.
  std::int64_t trials_run() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The default log directory of a study: <parent>/<name>.logs, where <name>
// is the study name with every character other than A-Z a-z 0-9 . _ -
// replaced by '_' (and "study" if that leaves nothing but dots).
std::string study_log_dir(const std::string& study_name, const std::string& parent);

}  // namespace hps
