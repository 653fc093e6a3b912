// PersistentProgram: the program of a "command" objective in persistent mode
// ("mode": "persistent", objectives/command.h), started once and kept for
// the following trials of the same worker, with a pipe to its stdin.
//
// The trial loop (what the lines on stdin and stdout mean) is the command
// objective's; this class owns the process across trials:
//  - start(): starts the program when it does not run (lazily, at a
//    trial), in its own process group (objectives/child_process.h);
//  - send(): writes one JSON line to its stdin;
//  - stop(): ends it (SIGTERM to its group, SIGKILL after a grace period),
//    so that the next start() starts a new one;
//  - the destructor is the worker's shutdown: it closes the program's stdin
//    (end of file: "no more trials"), waits up to grace_s for it to exit,
//    then stops it.
// Not thread-safe: one trial at a time. PersistentProgramPool hands one
// program to each trial that runs at the same time (Study::optimize with
// n_jobs > 1).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "objectives/child_process.h"
#include "search/json_util.h"

namespace hps {

class PersistentProgram {
 public:
  // `spawn`: how to start the program (stdin_pipe is set here);
  // `grace_s` (>= 0): seconds it gets to exit after end of file on stdin at
  // shutdown, and between SIGTERM and SIGKILL. Starts nothing.
  PersistentProgram(SpawnOptions spawn, double grace_s);
  // Shutdown: close_stdin(), up to grace_s for the program to exit (its
  // output is dropped), then SIGTERM to its group and SIGKILL after grace_s.
  ~PersistentProgram();
  PersistentProgram(const PersistentProgram&) = delete;
  PersistentProgram& operator=(const PersistentProgram&) = delete;

  // Starts the program unless it runs. Returns true when it started it now
  // (the first trial, or after the program ended). Throws
  // Error("cannot run '<argv[0]>': ...") when it cannot start.
  bool start();
  // Whether a program was started and has not been seen to end.
  bool running() const { return child_ && !child_->finished(); }
  // The running program's pid (its process group), -1 when none runs.
  pid_t pid() const { return running() ? child_->pid() : -1; }
  // How many times the program was started.
  std::int64_t starts() const { return starts_; }
  // The argv it runs.
  const std::vector<std::string>& argv() const { return spawn_.argv; }

  // Writes `message` as one line of compact JSON (non-finite numbers as
  // null) to the program's stdin. Returns "" on success, else why it could
  // not (ChildProcess::write_stdin(); "the program is not running").
  std::string send(const Json& message);

  // Waits up to `timeout` for output or the program's end, passing each
  // line to `on_line` (ChildProcess::wait_for_output()). Returns true once
  // the program has ended (or none runs).
  bool wait_for_output(std::chrono::milliseconds timeout, const ChildProcess::LineHandler& on_line);

  // Ends the program: SIGTERM to its group, SIGKILL after `grace`
  // (0: at once); its last output goes to `on_line`. The next start()
  // starts a new one. Does nothing when none runs.
  void stop(std::chrono::duration<double> grace, const ChildProcess::LineHandler& on_line = {});

  // Closes the program's stdin (it reads end of file). For shutdown.
  void close_stdin();
  // The ended program's status ("exit code 1", "killed by signal 9 ...",
  // "still running"; "not started" when none was).
  std::string describe_status() const;
  // The last program, or nullptr before the first start().
  const ChildProcess* child() const { return child_.get(); }

 private:
  SpawnOptions spawn_;
  double grace_s_;
  std::unique_ptr<ChildProcess> child_;
  std::int64_t starts_ = 0;
};

// The programs of one objective: each trial takes one (an idle one, or a new
// one that is not started yet) and gives it back when it ends, so that
// trials that run at the same time each have their own program and a worker
// that runs one trial at a time keeps one program. Thread-safe.
class PersistentProgramPool {
 public:
  PersistentProgramPool(SpawnOptions spawn, double grace_s);
  // Shuts every idle program down (PersistentProgram::~PersistentProgram),
  // closing all their stdins first so that they end together.
  ~PersistentProgramPool();
  PersistentProgramPool(const PersistentProgramPool&) = delete;
  PersistentProgramPool& operator=(const PersistentProgramPool&) = delete;

  // An idle program (the one given back last), or a new one.
  std::unique_ptr<PersistentProgram> take();
  // Returns `program` for the next trial.
  void give_back(std::unique_ptr<PersistentProgram> program);

 private:
  std::mutex mutex_;
  SpawnOptions spawn_;
  double grace_s_;
  std::vector<std::unique_ptr<PersistentProgram>> idle_;
};

}  // namespace hps
