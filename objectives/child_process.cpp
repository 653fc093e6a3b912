#include "objectives/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <tuple>
#include <utility>

#include "search/errors.h"

namespace hps {

namespace {

using SteadyClock = std::chrono::steady_clock;

// ---------------------------------------------------------------- registry
// Live process groups, as a fixed table of atomics so that
// kill_child_process_groups() is async-signal-safe. A group that finds no
// free slot still runs; it is then only killed by its ChildProcess.
constexpr std::size_t kMaxGroups = 4096;
std::array<std::atomic<pid_t>, kMaxGroups> g_groups{};

int register_group(pid_t pgid) {
  for (std::size_t i = 0; i < kMaxGroups; ++i) {
    pid_t expected = 0;
    if (g_groups[i].compare_exchange_strong(expected, pgid)) return static_cast<int>(i);
  }
  return -1;
}

void unregister_group(int slot) {
  if (slot >= 0) g_groups[static_cast<std::size_t>(slot)].store(0);
}

void kill_at_exit() { kill_child_process_groups(); }

// ---------------------------------------------------------------- fds
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

std::string errno_text(int err) {
  return std::string(strerrordesc_np(err) ? strerrordesc_np(err) : "unknown error");
}

// Moves `fd` (close-on-exec) to a number >= 3, so that dup2() onto 0, 1 or 2
// in the child never meets itself (dup2(fd, fd) would keep FD_CLOEXEC).
void move_above_stdio(Fd& fd) {
  if (fd.get() > 2) return;
  int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3);
  if (moved < 0) throw Error("fcntl(F_DUPFD_CLOEXEC): " + errno_text(errno));
  fd.reset(moved);
}

// A pipe with both ends close-on-exec and the read end non-blocking.
void make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error("pipe2: " + errno_text(errno));
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  int flags = ::fcntl(read_end.get(), F_GETFL);
  if (flags < 0 || ::fcntl(read_end.get(), F_SETFL, flags | O_NONBLOCK) != 0)
    throw Error("fcntl(O_NONBLOCK): " + errno_text(errno));
  move_above_stdio(read_end);
  move_above_stdio(write_end);
}

// The stdin pipe: both ends close-on-exec, the write end (the parent's)
// non-blocking, so a program that does not read cannot block the caller.
void make_stdin_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error("pipe2: " + errno_text(errno));
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  int flags = ::fcntl(write_end.get(), F_GETFL);
  if (flags < 0 || ::fcntl(write_end.get(), F_SETFL, flags | O_NONBLOCK) != 0)
    throw Error("fcntl(O_NONBLOCK): " + errno_text(errno));
  move_above_stdio(read_end);
  move_above_stdio(write_end);
}

// Blocks SIGPIPE in this thread while it lives; a SIGPIPE raised meanwhile
// (a write to a pipe nobody reads) is consumed before the mask is restored.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    ::sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    if (!was_pending_) {
      const timespec zero{0, 0};
      while (::sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
};

struct SpawnActions {
  posix_spawn_file_actions_t actions;
  SpawnActions() {
    if (int rc = posix_spawn_file_actions_init(&actions); rc != 0)
      throw Error("posix_spawn_file_actions_init: " + errno_text(rc));
  }
  ~SpawnActions() { posix_spawn_file_actions_destroy(&actions); }
};

struct SpawnAttr {
  posix_spawnattr_t attr;
  SpawnAttr() {
    if (int rc = posix_spawnattr_init(&attr); rc != 0)
      throw Error("posix_spawnattr_init: " + errno_text(rc));
  }
  ~SpawnAttr() { posix_spawnattr_destroy(&attr); }
};

void check_rc(int rc, const char* what) {
  if (rc != 0) throw Error(std::string(what) + ": " + errno_text(rc));
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

int remaining_ms(SteadyClock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

}  // namespace

void kill_child_process_groups() noexcept {
  for (auto& slot : g_groups) {
    pid_t pgid = slot.load();
    if (pgid > 0) ::kill(-pgid, SIGKILL);
  }
}

// ---------------------------------------------------------------- ChildProcess

ChildProcess::ChildProcess(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty())
    throw Error("cannot run a program: argv is empty");
  const std::string& program = options.argv[0];
  auto fail = [&](const std::string& reason) -> Error {
    std::string where = options.cwd.empty() ? "" : " in '" + options.cwd + "'";
    return Error("cannot run '" + program + "'" + where + ": " + reason);
  };

  static std::once_flag atexit_once;
  std::call_once(atexit_once, [] { std::atexit(kill_at_exit); });

  Fd out_read, out_write, err_read, err_write, in_read, in_write;
  try {
    make_pipe(out_read, out_write);
    make_pipe(err_read, err_write);
    if (options.stdin_pipe) make_stdin_pipe(in_read, in_write);
  } catch (const Error& e) {
    throw fail(e.what());
  }

  SpawnActions fa;
  SpawnAttr sa;
  try {
    if (options.stdin_pipe)
      check_rc(posix_spawn_file_actions_adddup2(&fa.actions, in_read.get(), 0),
               "posix_spawn_file_actions_adddup2");
    else
      check_rc(posix_spawn_file_actions_addopen(&fa.actions, 0, "/dev/null", O_RDONLY, 0),
               "posix_spawn_file_actions_addopen");
    check_rc(posix_spawn_file_actions_adddup2(&fa.actions, out_write.get(), 1),
             "posix_spawn_file_actions_adddup2");
    check_rc(posix_spawn_file_actions_adddup2(&fa.actions, err_write.get(), 2),
             "posix_spawn_file_actions_adddup2");
    // Whatever another thread opened without O_CLOEXEC stays out of the child.
    check_rc(posix_spawn_file_actions_addclosefrom_np(&fa.actions, 3),
             "posix_spawn_file_actions_addclosefrom_np");
    if (!options.cwd.empty())
      check_rc(posix_spawn_file_actions_addchdir_np(&fa.actions, options.cwd.c_str()),
               "posix_spawn_file_actions_addchdir_np");

    check_rc(posix_spawnattr_setflags(
                 &sa.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF),
             "posix_spawnattr_setflags");
    check_rc(posix_spawnattr_setpgroup(&sa.attr, 0), "posix_spawnattr_setpgroup");
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    check_rc(posix_spawnattr_setsigmask(&sa.attr, &none), "posix_spawnattr_setsigmask");
    check_rc(posix_spawnattr_setsigdefault(&sa.attr, &all), "posix_spawnattr_setsigdefault");
  } catch (const Error& e) {
    throw fail(e.what());
  }

  std::vector<char*> argv = c_strings(options.argv);
  std::vector<char*> envp = c_strings(options.env);
  // The guard first, so that no moment exists in which the program runs
  // unguarded (objectives/group_guard.h); posix_spawnp() writes the pid
  // straight into the page the guard reads. Best effort: without a guard
  // the child runs as before.
  guard_.start();
  pid_t pid = -1;
  pid_t* pid_out = guard_.group_slot() ? guard_.group_slot() : &pid;
  int rc = posix_spawnp(pid_out, program.c_str(), &fa.actions, &sa.attr, argv.data(), envp.data());
  if (rc != 0) throw fail(errno_text(rc));  // ~GroupGuard ends the guard

  pid_ = *pid_out;
  slot_ = register_group(pid_);
  out_fd_ = out_read.release();
  err_fd_ = err_read.release();
  in_fd_ = in_write.release();
  // glibc 2.36's <sys/pidfd.h> lacks extern "C", so the system call is made
  // directly. A pidfd is close-on-exec by definition; -1 (kernel < 5.3):
  // wait_for_output() polls waitid() instead.
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
}

ChildProcess::~ChildProcess() {
  if (!reaped_) kill_group_and_reap();
  for (int* fd : {&out_fd_, &err_fd_, &in_fd_, &pidfd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

bool ChildProcess::check_exit(bool block) {
  if (reaped_) return true;
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0 && info.si_pid == 0) return false;  // still running
  if (rc != 0) {
    // ECHILD: reaped elsewhere (SIGCHLD ignored); the group id may be free
    // for reuse, so it is not signalled any more.
    unregister_group(slot_);
    slot_ = -1;
    guard_.finish();  // told to exit without signalling the (maybe reused) id
    status_lost_ = true;
    reaped_ = true;
    exited_at_ = SteadyClock::now();
    if (pidfd_ >= 0) ::close(pidfd_);
    pidfd_ = -1;
    return true;
  }
  // Exited: the zombie still pins the group id, so the rest of the group
  // can be killed safely before the leader is reaped.
  kill_group_and_reap();
  return true;
}

void ChildProcess::kill_group_and_reap() {
  if (reaped_) return;
  ::kill(-pid_, SIGKILL);  // the leader is not reaped yet, so the id is still this group's
  unregister_group(slot_);
  slot_ = -1;
  guard_.finish();
  int status = 0;
  pid_t rc;
  do {
    rc = ::waitpid(pid_, &status, 0);
  } while (rc < 0 && errno == EINTR);
  if (rc == pid_) {
    if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) term_signal_ = WTERMSIG(status);
  } else {
    status_lost_ = true;  // ECHILD: SIGCHLD ignored, or reaped by someone else
  }
  reaped_ = true;
  exited_at_ = SteadyClock::now();
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
}

void ChildProcess::read_available(int& fd, std::string& buffer, Stream stream,
                                  const LineHandler& on_line) {
  // Delivers the complete lines of `buffer`, even if `on_line` throws.
  bool& cut = stream == Stream::kStdout ? out_cut_ : err_cut_;
  auto deliver = [&](bool at_eof) {
    std::size_t start = 0;
    struct Consume {
      std::string& buffer;
      std::size_t& start;
      ~Consume() { buffer.erase(0, start); }
    } consume{buffer, start};
    while (start < buffer.size()) {
      std::size_t nl = buffer.find('\n', start);
      std::size_t end;
      std::size_t next;
      bool rest_of_line = false;  // the piece ends the line it belongs to
      if (nl != std::string::npos && nl - start <= kMaxLineBytes) {
        end = nl;
        next = nl + 1;
        rest_of_line = true;
      } else if (buffer.size() - start >= kMaxLineBytes) {
        end = start + kMaxLineBytes;
        next = end;
      } else if (at_eof) {
        end = next = buffer.size();
        rest_of_line = true;
      } else {
        break;
      }
      std::string_view line(buffer.data() + start, end - start);
      start = next;
      continued_ = cut;
      cut = !rest_of_line;
      if (on_line) on_line(stream, line);
      continued_ = false;
    }
  };

  char chunk[65536];
  // Bounded per call so that one chatty stream cannot starve the other.
  for (int round = 0; round < 16 && fd >= 0; ++round) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      buffer.append(chunk, static_cast<std::size_t>(n));
      deliver(false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // End of file, or an error that ends this stream.
    ::close(fd);
    fd = -1;
    deliver(true);
  }
}

bool ChildProcess::wait_for_output(std::chrono::milliseconds timeout, const LineHandler& on_line) {
  if (timeout.count() < 0) timeout = std::chrono::milliseconds(0);
  auto deadline = SteadyClock::now() + timeout;
  if (!reaped_) check_exit(false);

  if (finished()) return true;
  if (reaped_ && SteadyClock::now() >= exited_at_ + kDrainTimeout) {
    close_pipes(on_line);
    return true;
  }

  std::array<pollfd, 3> fds{};
  nfds_t n = 0;
  if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
  if (!reaped_ && pidfd_ >= 0) fds[n++] = {pidfd_, POLLIN, 0};
  int wait_ms = remaining_ms(deadline);
  if (!reaped_ && pidfd_ < 0) wait_ms = std::min(wait_ms, 50);
  if (reaped_) wait_ms = std::min(wait_ms, remaining_ms(exited_at_ + kDrainTimeout));
  int rc = ::poll(fds.data(), n, wait_ms);
  if (rc < 0 && errno != EINTR) throw Error("poll: " + errno_text(errno));
  if (rc > 0) {
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == out_fd_)
        read_available(out_fd_, out_buffer_, Stream::kStdout, on_line);
      else if (fds[i].fd == err_fd_)
        read_available(err_fd_, err_buffer_, Stream::kStderr, on_line);
    }
  }
  if (!reaped_) check_exit(false);
  if (reaped_ && !finished() && SteadyClock::now() >= exited_at_ + kDrainTimeout)
    close_pipes(on_line);
  return finished();
}

void ChildProcess::terminate(std::chrono::duration<double> grace, const LineHandler& on_line) {
  if (!reaped_) check_exit(false);
  if (!reaped_) {
    ::kill(-pid_, SIGTERM);
    auto deadline = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                             std::max(grace, std::chrono::duration<double>(0)));
    while (!reaped_ && SteadyClock::now() < deadline) {
      auto step = std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(remaining_ms(deadline)), std::chrono::milliseconds(100));
      wait_for_output(step, on_line);
    }
    kill_group_and_reap();
  }
  // The group is dead: read what is left without waiting for stragglers.
  close_pipes(on_line);
}

void ChildProcess::close_pipes(const LineHandler& on_line) {
  for (auto [fd, buffer, stream] : {std::tuple{&out_fd_, &out_buffer_, Stream::kStdout},
                                    std::tuple{&err_fd_, &err_buffer_, Stream::kStderr}}) {
    if (*fd < 0) continue;
    read_available(*fd, *buffer, stream, on_line);  // what is already in the pipe
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
    if (!buffer->empty()) {
      std::string rest = std::move(*buffer);
      buffer->clear();
      if (on_line) on_line(stream, rest);
    }
  }
}

std::string ChildProcess::write_stdin(std::string_view data) {
  if (in_fd_ < 0) return "stdin is closed";
  SigpipeBlock block;
  while (!data.empty()) {
    ssize_t n = ::write(in_fd_, data.data(), data.size());
    if (n >= 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EPIPE) return "the program closed its stdin";
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return "the program does not read its stdin (the pipe is full)";
    return "write to the program's stdin: " + errno_text(errno);
  }
  return "";
}

void ChildProcess::close_stdin() {
  if (in_fd_ >= 0) ::close(in_fd_);
  in_fd_ = -1;
}

std::string ChildProcess::describe_status() const {
  if (!reaped_) return "still running";
  if (status_lost_) return "exit status unknown";
  if (exit_code_) return "exit code " + std::to_string(*exit_code_);
  if (term_signal_) {
    const char* abbrev = sigabbrev_np(*term_signal_);
    const char* desc = sigdescr_np(*term_signal_);
    std::string text = "killed by signal " + std::to_string(*term_signal_);
    if (abbrev)
      text += std::string(" (SIG") + abbrev + (desc ? std::string(": ") + desc : "") + ")";
    return text;
  }
  return "exit status unknown";
}

}  // namespace hps
