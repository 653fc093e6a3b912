// Worker: serves trials for a coordinator (coordinator/coordinator.h) over a
// ZeroMQ DEALER socket. `hpsearch worker --connect ENDPOINT` runs one; a
// training program can embed one to serve trials with its own objective:
//
//   hps::WorkerOptions o;
//   o.endpoint = "tcp://head-node:5555";
//   o.objective = [](hps::Trial& t) { ...; return loss; };   // optional
//   return hps::Worker(o).run();
//
// The worker says Hello, then asks for a trial, runs the objective (each
// Trial::report() goes to the coordinator, which answers continue or prune),
// sends Complete or Fail, and asks again, until the coordinator says
// Shutdown.
//
// Threads: the objective runs on the thread that called run(); a second
// thread owns the socket, sends heartbeats every interval and watches the
// coordinator's, so an objective that blocks for a long time (a long epoch
// with no report) never makes the worker look dead. If the coordinator is
// silent for liveness x interval, or says the session expired, the worker
// abandons the running trial (the coordinator has failed it) and reconnects
// with a fresh session, waiting 1, 2, 4 ... up to reconnect_max_ms between
// attempts (the ZeroMQ guide's Paranoid Pirate worker); after
// reconnect_attempts failed attempts in a row it gives up.
//
// An exception from the objective ends the trial FAIL with its message and
// the worker goes on with the next trial.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "search/study.h"

namespace hps {

struct WorkerOptions {
  // The coordinator's endpoint ("tcp://host:5555", "ipc:///tmp/x.sock").
  // Required.
  std::string endpoint{};
  // The device the objective uses: "cpu" or "cuda:N". Default "cpu".
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
  // The objective to run. Default (empty): built from the "objective"
  // section the coordinator sends, through the objective registry
  // (objectives/objective.h).
  Objective objective{};
  // Per-study log directory passed to objectives (ObjectiveContext::log_dir).
  std::string log_dir{};
  // Set (e.g. by a signal handler) to stop: the running trial is
  // interrupted at its next report (FAIL, queued again by the coordinator)
  // and run() returns kStopped.
  std::atomic<bool>* stop = nullptr;

  // Throws ConfigError naming the field ("worker.endpoint: ...").
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
  // this worker (protocol version mismatch: returns 1), stays unreachable
  // for reconnect_attempts attempts (returns 1), or *options.stop is set
  // (returns kStopped). Call once.
  int run();

  // Trials this worker ended (complete, pruned or failed) so far.
  std::int64_t trials_run() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hps
