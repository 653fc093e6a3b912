#include "objectives/group_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace hps {

namespace {

// The guard process: only async-signal-safe system calls from here on.
[[noreturn]] void guard_main(int read_fd, const pid_t* slot) {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2})
    (void)::sigaction(sig, &ignore, nullptr);
  sigset_t none;
  sigemptyset(&none);
  (void)::sigprocmask(SIG_SETMASK, &none, nullptr);
  (void)::prctl(PR_SET_NAME, "hpsearch-guard", 0, 0, 0);
  // Keep only the pipe, as descriptor 0: nothing else of the worker (its
  // sockets, the child's output pipes) is held open by the guard.
  if (read_fd != 0) {
    if (::dup2(read_fd, 0) != 0) ::_exit(1);
  }
  if (::syscall(SYS_close_range, 1u, ~0u, 0u) != 0)
    for (int fd = 1; fd < 65536; ++fd) (void)::close(fd);
  char byte;
  ssize_t n;
  do {
    n = ::read(0, &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) {  // end of file: the worker is gone
    pid_t pgid = __atomic_load_n(slot, __ATOMIC_SEQ_CST);
    if (pgid > 0) ::kill(-pgid, SIGKILL);
  }
  ::_exit(0);
}

}  // namespace

GroupGuard::~GroupGuard() { finish(); }

bool GroupGuard::start() noexcept {
  if (pid_ > 0) return false;
  void* page =
      ::mmap(nullptr, sizeof(pid_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return false;
  auto* slot = static_cast<pid_t*>(page);
  *slot = 0;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ::munmap(page, sizeof(pid_t));
    return false;
  }
  pid_t pid = ::fork();
  if (pid == 0) guard_main(fds[0], slot);
  ::close(fds[0]);
  if (pid < 0) {
    ::close(fds[1]);
    ::munmap(page, sizeof(pid_t));
    return false;
  }
  pid_ = pid;
  write_fd_ = fds[1];
  slot_ = slot;
  return true;
}

void GroupGuard::finish() noexcept {
  if (pid_ <= 0) return;
  const char done = 'x';
  ssize_t n;
  do {
    n = ::write(write_fd_, &done, 1);
  } while (n < 0 && errno == EINTR);
  ::close(write_fd_);
  write_fd_ = -1;
  // Not a blocking waitpid(): with SIGCHLD ignored it would wait for every
  // child of the process.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (true) {
    int status = 0;
    pid_t rc = ::waitpid(pid_, &status, WNOHANG);
    if (rc == pid_ || (rc < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  pid_ = -1;
  ::munmap(slot_, sizeof(pid_t));
  slot_ = nullptr;
}

}  // namespace hps
