#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/support/temp_dir.h"

namespace hps::testsupport {

namespace {

// argv as the NULL-terminated array execv() takes; built before fork() so
// the child only makes async-signal-safe calls.
struct Argv {
  explicit Argv(const std::vector<std::string>& args) : strings(args) {
    for (auto& s : strings) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
  std::vector<std::string> strings;
  std::vector<char*> pointers;
};

// In the child: stdin from /dev/null, stdout/stderr to the fds given, cd,
// exec. Exits 127 if anything fails.
[[noreturn]] void exec_child(const Argv& argv, const char* cwd, int out_fd, int err_fd) {
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0) _exit(127);
  if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0) _exit(127);
  if (chdir(cwd) != 0) _exit(127);
  // Close everything else so pipes of other threads' children are not kept open.
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  execv(argv.pointers[0], argv.pointers.data());
  _exit(127);
}

void decode(int status, ProcessResult& r) {
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& args, const std::string& cwd) {
  if (args.empty()) throw std::runtime_error("run_process: empty argv");
  Argv argv(args);
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    throw std::runtime_error("pipe failed");
  }
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) exec_child(argv, cwd.c_str(), out_pipe[1], err_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  ProcessResult r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  decode(status, r);
  return r;
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& args, const std::string& cwd,
                                     const std::string& out_file, const std::string& err_file)
    : out_file_(out_file), err_file_(err_file) {
  if (args.empty()) throw std::runtime_error("BackgroundProcess: empty argv");
  Argv argv(args);
  int out_fd = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err_fd = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) {
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    throw std::runtime_error("cannot create " + out_file + " or " + err_file);
  }
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid_ == 0) exec_child(argv, cwd.c_str(), out_fd, err_fd);
  close(out_fd);
  close(err_fd);
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    wait();
  }
}

bool BackgroundProcess::running() {
  if (reaped_) return false;
  pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

void BackgroundProcess::send_signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

ProcessResult BackgroundProcess::wait() {
  if (!reaped_) {
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  ProcessResult r;
  decode(status_, r);
  r.out = read_file(out_file_);
  r.err = read_file(err_file_);
  return r;
}

PipedProcess::PipedProcess(const std::vector<std::string>& args, const std::string& cwd,
                           const std::string& err_file)
    : err_file_(err_file) {
  if (args.empty()) throw std::runtime_error("PipedProcess: empty argv");
  Argv argv(args);
  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  int err_fd = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (err_fd < 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    throw std::runtime_error("cannot create " + err_file);
  }
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid_ == 0) {
    // SIGPIPE as a shell leaves it for a pipeline's program (the test
    // runner may ignore or block it; both survive exec).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigprocmask(SIG_UNBLOCK, &pipe_set, nullptr);
    exec_child(argv, cwd.c_str(), out_pipe[1], err_fd);
  }
  close(out_pipe[1]);
  close(err_fd);
  out_fd_ = out_pipe[0];
}

PipedProcess::~PipedProcess() {
  close_stdout();
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    wait();
  }
}

std::optional<std::string> PipedProcess::read_line(std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (out_fd_ >= 0) {
    if (std::size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      lines_ += buffered_.substr(0, nl + 1);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd fd{out_fd_, POLLIN, 0};
    int ready = poll(&fd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    char buf[4096];
    ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;  // end of file (or an error)
    buffered_.append(buf, static_cast<std::size_t>(n));
  }
  return std::nullopt;
}

void PipedProcess::close_stdout() {
  if (out_fd_ >= 0) close(out_fd_);
  out_fd_ = -1;
}

void PipedProcess::send_signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

ProcessResult PipedProcess::wait() {
  if (!reaped_) {
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  ProcessResult r;
  decode(status_, r);
  r.out = lines_;
  r.err = read_file(err_file_);
  return r;
}

bool wait_until(const std::function<bool()>& pred, std::chrono::seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

std::vector<pid_t> processes_in_group(pid_t pgid) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string text = read_file((e.path() / "stat").string());
    std::size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 2));
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp)) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') out.push_back(std::stoi(name));
  }
  return out;
}

}  // namespace hps::testsupport
