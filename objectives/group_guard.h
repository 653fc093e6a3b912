// GroupGuard: kills a child's process group when the process that started
// it dies, even by kill -9 (objectives/child_process.h uses one per child).
//
// A process killed with SIGKILL cannot clean up, and the parent-death
// signal (prctl PR_SET_PDEATHSIG) reaches only the direct child, not what
// it started in the background (`sh -c 'sleep 300 & ...'`), and fires when
// the *thread* that forked exits, not the process. So each child gets a
// guard: a small process forked from this one that waits on a pipe whose
// only write end this process holds (close-on-exec, so the child never has
// it). The write end closes when this process ends, however it ends; the
// guard then reads end of file, sends SIGKILL to the whole group and exits.
// When the child ends normally, finish() writes one byte first: the guard
// exits without signalling anyone.
//
// The guard runs only async-signal-safe system calls after fork() (closes
// every other descriptor, ignores terminal and termination signals, blocks
// in read()), so forking from a multi-threaded worker is safe. It keeps the
// worker's memory only copy-on-write. A kill of the guard itself (OOM
// killer) leaves the child unguarded, as before.
//
// Signalling a process group id is safe as long as the group's leader is
// not reaped (a zombie leader pins the id); a worker killed by SIGKILL never
// reaps it, so the guard's signal cannot reach an unrelated group.
#pragma once

#include <sys/types.h>

namespace hps {

class GroupGuard {
 public:
  GroupGuard() = default;
  // finish()
  ~GroupGuard();
  GroupGuard(const GroupGuard&) = delete;
  GroupGuard& operator=(const GroupGuard&) = delete;

  // Starts a guard for process group `pgid` (> 0). Returns false (and
  // guards nothing) if no pipe or process can be made (EMFILE, EAGAIN):
  // the child then runs unguarded, as it would without this class.
  bool start(pid_t pgid) noexcept;

  // Tells the guard to exit without signalling and reaps it (waits at most
  // about a second for it; a guard not yet exited then is left to init).
  // Idempotent; a no-op if start() was not called or failed.
  void finish() noexcept;

  // The guard's pid, -1 if none.
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int write_fd_ = -1;
};

}  // namespace hps
