// Running a program as a child process from a test (fork + exec), in a
// given directory, with its output captured.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hps::testsupport {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or -1 if killed by a signal
  int signal = 0;      // the signal that killed it, or 0
  std::string out;     // everything written to stdout
  std::string err;     // everything written to stderr
};

// Runs argv (argv[0] is a path to the program) in directory `cwd` with
// stdin from /dev/null, and waits for it. Throws std::runtime_error if the
// process cannot be started. Safe to call from several threads at once.
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& cwd);

// A child process running in the background, its stdout and stderr written
// to files. The destructor kills it (SIGKILL) if it still runs and reaps it.
class BackgroundProcess {
 public:
  // Starts argv in `cwd`; stdout goes to `out_file`, stderr to `err_file`
  // (created or truncated). Throws std::runtime_error on failure.
  BackgroundProcess(const std::vector<std::string>& argv, const std::string& cwd,
                    const std::string& out_file, const std::string& err_file);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  // True until the process has exited (reaps it when it has).
  bool running();
  // Sends `sig` to the process (no-op once it was reaped).
  void send_signal(int sig);
  // Waits for the process to end; exit_code/signal as in ProcessResult,
  // out and err read from the files.
  ProcessResult wait();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string out_file_, err_file_;
};

// A child process whose stdout is a pipe this process reads, as the
// program on the left of a shell's `program | head -2`; its stderr goes to
// a file. The child starts with SIGPIPE's default action, unblocked (as a
// shell starts it), so a write after close_stdout() kills it unless it
// ignores SIGPIPE itself. The destructor kills it (SIGKILL) if it still
// runs and reaps it.
class PipedProcess {
 public:
  // Starts argv in `cwd`; stderr goes to `err_file` (created or
  // truncated). Throws std::runtime_error on failure.
  PipedProcess(const std::vector<std::string>& argv, const std::string& cwd,
               const std::string& err_file);
  ~PipedProcess();
  PipedProcess(const PipedProcess&) = delete;
  PipedProcess& operator=(const PipedProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The next line of the child's stdout, without its newline; nullopt at
  // the end of its stdout, after close_stdout(), or when `limit` passed
  // first (a guard against hanging, not a timing assertion).
  std::optional<std::string> read_line(std::chrono::seconds limit = std::chrono::seconds(120));
  // Closes this end of the pipe, as `head` does when it exits: the child's
  // later writes to stdout fail (EPIPE, or SIGPIPE).
  void close_stdout();
  // Sends `sig` to the process (no-op once it was reaped).
  void send_signal(int sig);
  // Waits for the process to end; exit_code/signal as in ProcessResult, out
  // the lines read (each with its newline), err read from the file.
  ProcessResult wait();

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;  // the read end of the child's stdout, -1 once closed
  bool reaped_ = false;
  int status_ = 0;
  std::string buffered_;  // read from the pipe, not returned yet
  std::string lines_;     // the lines returned
  std::string err_file_;
};

// Calls pred() every 50 ms until it is true; false if `limit` passed first
// (a guard against hanging, not a timing assertion).
bool wait_until(const std::function<bool()>& pred,
                std::chrono::seconds limit = std::chrono::seconds(120));

// Process ids whose process group is `pgid` and that are not zombies, from
// the process table (/proc/PID/stat).
std::vector<pid_t> processes_in_group(pid_t pgid);

}  // namespace hps::testsupport
