// ChildProcess: runs a program in its own process group with stdin from
// /dev/null (or a pipe, SpawnOptions::stdin_pipe) and stdout/stderr piped back, and guarantees that
// the group is gone and the leader reaped when the object is destroyed. Used by the "command"
// objective (objectives/command.h).
//
// Built on posix_spawnp(3) (glibc: vfork-like clone, so it is safe in
// multi-threaded programs), because Debian 12 packages no maintained C++
// process library that supports process groups and timeouts:
//  - the child is the leader of a new process group (POSIX_SPAWN_SETPGROUP),
//    so a terminal's Ctrl-C does not reach it and the whole group (the
//    program and everything it started, e.g. data loader workers) is
//    signalled at once;
//  - every descriptor but 0, 1, 2 is closed in the child
//    (posix_spawn_file_actions_addclosefrom_np), and every descriptor this
//    class opens has O_CLOEXEC, so nothing leaks into either process;
//  - the signal mask is emptied and every signal reset to its default
//    action in the child (a worker that ignores SIGPIPE or blocks SIGTERM
//    does not pass that on);
//  - the leader's exit is noticed through a pidfd (Linux >= 5.3; a 50 ms
//    poll of waitid() otherwise) without reaping it, the rest of the group
//    is then sent SIGKILL while the zombie leader still pins the group id,
//    and only then is the leader reaped: no zombies, and no signal can reach
//    an unrelated group that reused the id;
//  - a guard process (objectives/group_guard.h) kills the group if this
//    process dies first, even by kill -9: no trial outlives its worker.
// Every live group is also kept in a process-wide table that
// kill_child_process_groups() empties with SIGKILL; it runs at exit() and
// may be called from signal handlers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "objectives/group_guard.h"

namespace hps {

struct SpawnOptions {
  // The program and its arguments; argv[0] is looked up in the caller's PATH
  // when it has no '/'. Must not be empty.
  std::vector<std::string> argv{};
  // Working directory of the child; "" (default) keeps the caller's.
  std::string cwd{};
  // The child's whole environment, "NAME=value" entries.
  std::vector<std::string> env{};
  // false (default): stdin is /dev/null. true: stdin is a pipe that
  // ChildProcess::write_stdin() writes and close_stdin() closes (the
  // "command" objective's persistent mode, objectives/persistent_program.h).
  bool stdin_pipe = false;
};

class ChildProcess {
 public:
  enum class Stream { kStdout, kStderr };
  // Receives each complete line of output (without the '\n'; a trailing
  // '\r' is kept). A last line without '\n' is delivered at end of file; a
  // line longer than kMaxLineBytes is delivered in pieces of that size, and
  // continued() tells the pieces after the first from lines of their own.
  using LineHandler = std::function<void(Stream stream, std::string_view line)>;
  static constexpr std::size_t kMaxLineBytes = 1 << 20;

  // Starts the program. Throws hps::Error("cannot run '<argv[0]>': <reason>")
  // when it cannot be started (not found, not executable, bad cwd, no more
  // processes or descriptors); nothing is left behind then.
  explicit ChildProcess(const SpawnOptions& options);
  // Sends SIGKILL to the group if any of it may still run, reaps the leader,
  // closes the pipes. Blocks only as long as the kernel takes to kill.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The leader's pid (also the process group id).
  pid_t pid() const { return pid_; }

  // Waits up to `timeout` (>= 0) for output or for the leader to exit, and
  // passes every complete line read to `on_line`. Returns true once the
  // child is finished: the leader exited (and was reaped, the rest of its
  // group killed) and both pipes reached end of file, or stayed open
  // kDrainTimeout after the leader exited (a process that left the group
  // still holds them). Exceptions from `on_line` propagate; the child keeps
  // running then (destroy or terminate() it).
  bool wait_for_output(std::chrono::milliseconds timeout, const LineHandler& on_line);
  // While a LineHandler runs: whether its line is a piece of a line longer
  // than kMaxLineBytes other than the first (so text in the middle of a long
  // line, such as an echoed input, is never read as a line's start).
  bool continued() const { return continued_; }

  // Ends the child: SIGTERM to the group, up to `grace` for the leader to
  // exit (output meanwhile goes to `on_line`, if set), then SIGKILL to the
  // group; reaps the leader. Returns when finished() is true. Does nothing
  // if the leader has already exited.
  void terminate(std::chrono::duration<double> grace, const LineHandler& on_line = {});

  // Writes `data` to the child's stdin (SpawnOptions::stdin_pipe) without
  // blocking and without SIGPIPE reaching this process. Returns "" when all
  // of it was written, else why not: "stdin is closed" (no pipe, or
  // close_stdin() ran), "the program closed its stdin" (EPIPE: it exited or
  // closed it), "the program does not read its stdin" (the pipe is full,
  // 64 KiB on Linux), or the system error.
  std::string write_stdin(std::string_view data);
  // Closes the write end of the stdin pipe (the child reads end of file).
  // Does nothing when there is none.
  void close_stdin();

  // True when wait_for_output() has returned true or terminate() has run.
  bool finished() const { return reaped_ && out_fd_ < 0 && err_fd_ < 0; }
  // After the leader was reaped: its exit code if it exited, nullopt if a
  // signal ended it (or its status was lost: someone else reaped it).
  std::optional<int> exit_code() const { return exit_code_; }
  // The signal that ended the leader, if one did.
  std::optional<int> term_signal() const { return term_signal_; }
  // "exit code 3", "killed by signal 9 (Killed)", "still running", or
  // "exit status unknown" (reaped elsewhere, e.g. SIGCHLD ignored).
  std::string describe_status() const;

  // How long the pipes are read after the leader exited when some other
  // process keeps them open.
  static constexpr std::chrono::milliseconds kDrainTimeout{2000};

 private:
  void read_available(int& fd, std::string& buffer, Stream stream, const LineHandler& on_line);
  // Notices the leader's exit without reaping it; then kills the group and
  // reaps. True if the leader is (now) reaped.
  bool check_exit(bool block);
  void kill_group_and_reap();
  // Reads what the pipes hold now, delivers partial lines, closes them.
  void close_pipes(const LineHandler& on_line);

  pid_t pid_ = -1;
  int slot_ = -1;  // index in the process-wide table of groups, -1 if none
  int out_fd_ = -1;
  int err_fd_ = -1;
  int in_fd_ = -1;  // write end of the stdin pipe, -1 if none
  int pidfd_ = -1;
  bool reaped_ = false;
  std::optional<int> exit_code_;
  std::optional<int> term_signal_;
  bool status_lost_ = false;
  std::chrono::steady_clock::time_point exited_at_{};
  std::string out_buffer_;
  std::string err_buffer_;
  bool out_cut_ = false;  // the stream is inside a line longer than kMaxLineBytes
  bool err_cut_ = false;
  bool continued_ = false;  // see continued()
  GroupGuard guard_;        // kills the group if this process dies first
};

// Sends SIGKILL to every process group started by a ChildProcess that has
// not been reaped yet. Async-signal-safe (no locks, no allocation): call it
// from a signal handler before _exit(). Also registered with std::atexit()
// when the first child starts.
void kill_child_process_groups() noexcept;

}  // namespace hps
