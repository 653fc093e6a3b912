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
// The guard is started *before* the child: start() forks it, and the child's
// pid is then written into a page the guard shares (group_slot(), handed to
// posix_spawnp() as its pid argument), which the guard reads only when the
// write end closes. A guard forked after the child (as before) left the
// child running unguarded for as long as that fork took: under load the
// trial's program ran and the worker could be killed before any guard
// existed (CliWriterTest.NoTrialProcessSurvivesAWorkerKilledByKill9). Now
// only a kill landing between the spawn's clone() and glibc's store of the
// pid (a few instructions) leaves the child unguarded. A guard whose slot
// is still 0 at end of file (the spawn failed, or that window) signals no
// one.
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

  // Starts a guard for a process group not made yet: its id is to be
  // written to *group_slot() (posix_spawnp() does) once the
  // group's leader exists. Returns false (and guards nothing) if no page,
  // pipe or process can be made (ENOMEM, EMFILE, EAGAIN): the child then
  // runs unguarded, as it would without this class.
  bool start() noexcept;

  // Where the guarded group's id goes (shared with the guard); nullptr when
  // start() was not called or failed.
  pid_t* group_slot() const { return slot_; }

  // Tells the guard to exit without signalling and reaps it (waits at most
  // about a second for it; a guard not yet exited then is left to init).
  // Idempotent; a no-op if start() was not called or failed.
  void finish() noexcept;

  // The guard's pid, -1 if none.
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int write_fd_ = -1;
  pid_t* slot_ = nullptr;  // a MAP_SHARED page, or nullptr
};

}  // namespace hps
