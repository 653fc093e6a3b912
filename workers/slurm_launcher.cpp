#include "workers/slurm_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "search/errors.h"
#include "search/util/wait_status.h"

namespace hps {

namespace {

using Steady = std::chrono::steady_clock;

std::string random_suffix() {
  std::random_device rd;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
  return buf;
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::vector<char*> c_argv(std::vector<std::string>& args) {
  std::vector<char*> out;
  out.reserve(args.size() + 1);
  for (auto& a : args) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

// In a forked child before exec: SIGPIPE's default action back (`hpsearch
// run` ignores it, and an ignored signal stays ignored across exec).
// Async-signal-safe.
void default_sigpipe() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);
}

// Runs argv (argv[0] an absolute path) to its end, with stdin /dev/null;
// returns its exit status (-1 if it could not run) and, with `capture`, its
// stdout. stderr goes to ours.
int run_program(std::vector<std::string> args, std::string* capture) {
  int fds[2] = {-1, -1};
  if (capture && pipe2(fds, O_CLOEXEC) != 0) return -1;
  std::vector<char*> argv = c_argv(args);
  pid_t pid = fork();
  if (pid < 0) {
    if (capture) {
      close(fds[0]);
      close(fds[1]);
    }
    return -1;
  }
  if (pid == 0) {
    default_sigpipe();
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    if (capture) dup2(fds[1], STDOUT_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (capture) {
    close(fds[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) != 0) {
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      capture->append(buf, static_cast<std::size_t>(n));
    }
    close(fds[0]);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::string find_in_path(const std::string& program) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos)
    return access(program.c_str(), X_OK) == 0 ? program : "";
  const std::string dirs = env_or_empty("PATH");
  for (std::size_t start = 0; start <= dirs.size();) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    if (end > start) {
      std::string candidate = dirs.substr(start, end - start) + "/" + program;
      if (access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate))
        return candidate;
    }
    start = end + 1;
  }
  return "";
}

std::vector<std::string> split_shell_words(const std::string& text, const std::string& field) {
  wordexp_t we{};
  int rc = wordexp(text.c_str(), &we, WRDE_NOCMD | WRDE_UNDEF);
  if (rc != 0) {
    if (rc == WRDE_NOSPACE) wordfree(&we);
    switch (rc) {
      case WRDE_CMDSUB:
        throw ConfigError(field, "command substitution ($(...) or `...`) is not allowed");
      case WRDE_BADCHAR:
        throw ConfigError(field,
                          "has a character a shell treats specially (| & ; < > ( ) { } or a "
                          "newline): quote it");
      case WRDE_BADVAL:
        throw ConfigError(field, "names an environment variable that is not set");
      case WRDE_SYNTAX:
        throw ConfigError(field, "is not valid shell syntax (an unmatched quote?)");
      default:
        throw ConfigError(field, "cannot be split into arguments");
    }
  }
  std::vector<std::string> out(we.we_wordv, we.we_wordv + we.we_wordc);
  wordfree(&we);
  return out;
}

void require_slurm_commands() {
  for (const char* tool : {"srun", "scancel", "squeue"})
    if (find_in_path(tool).empty())
      throw ConfigError("--launcher",
                        std::string("slurm: ") + tool +
                            " not found in PATH (is this a node of a Slurm cluster, with the "
                            "Slurm client commands installed?); --launcher local (the default) "
                            "runs the workers on this machine");
}

SlurmTask slurm_task_from_env() {
  SlurmTask t;
  const std::string procid = env_or_empty("SLURM_PROCID");
  if (procid.empty() || procid.find_first_not_of("0123456789") != std::string::npos) return t;
  t.procid = std::atoi(procid.c_str());
  t.node = env_or_empty("SLURMD_NODENAME");
  t.job_id = env_or_empty("SLURM_JOB_ID");
  t.step_id = env_or_empty("SLURM_STEP_ID");
  const std::string cpus = env_or_empty("SLURM_CPUS_PER_TASK");
  if (!cpus.empty() && cpus.find_first_not_of("0123456789") == std::string::npos)
    t.cpus_per_task = std::atoi(cpus.c_str());
  return t;
}

std::string slurm_task_worker_id(const SlurmTask& task) {
  std::string id = task.node.empty() ? std::string("slurm") : task.node;
  if (!task.job_id.empty())
    id += ":job" + task.job_id + (task.step_id.empty() ? "" : "." + task.step_id);
  id += ":task" + std::to_string(task.procid);
  return id;
}

std::string auto_device() {
  const std::string visible = env_or_empty("CUDA_VISIBLE_DEVICES");
  if (visible.empty() || visible == "-1" || visible == "NoDevFiles") return "cpu";
  return visible.find(',') == std::string::npos ? "cuda:0" : "cuda";
}

SlurmLauncher::SlurmLauncher(SlurmLauncherOptions options) : options_(std::move(options)) {
  if (options_.workers < 1)
    throw ConfigError("--workers", "must be >= 1 with --launcher slurm (the tasks of the step)");
  if (options_.endpoint.empty()) throw ConfigError("launcher.endpoint", "is required");
  if (options_.max_quick_exits < 1) throw ConfigError("launcher.max_quick_exits", "must be >= 1");
  if (options_.gpus_per_task < 0)
    throw ConfigError("--gpus-per-worker",
                      "must be >= 1, got " + std::to_string(options_.gpus_per_task));
  require_slurm_commands();
  srun_ = find_in_path("srun");
  scancel_ = find_in_path("scancel");
  squeue_ = find_in_path("squeue");
  if (options_.executable.empty()) {
    std::error_code ec;
    auto real = std::filesystem::read_symlink("/proc/self/exe", ec);
    options_.executable = ec ? "/proc/self/exe" : real.string();
  }
  if (options_.job_name.empty())
    options_.job_name = "hpsearch-" + std::to_string(getpid()) + "-" + random_suffix();
  in_allocation_ = !env_or_empty("SLURM_JOB_ID").empty();

  argv_ = {srun_, "--ntasks=" + std::to_string(options_.workers), "--job-name=" + options_.job_name,
           "--kill-on-bad-exit=0"};
  if (options_.gpus_per_task > 0)
    argv_.push_back("--gpus-per-task=" + std::to_string(options_.gpus_per_task));
  argv_.insert(argv_.end(), options_.slurm_args.begin(), options_.slurm_args.end());
  argv_.insert(argv_.end(), {options_.executable, "worker", "--connect", options_.endpoint});
  if (options_.keys_dir.empty())
    argv_.emplace_back("--insecure");
  else
    argv_.insert(argv_.end(), {"--keys", options_.keys_dir});
  argv_.insert(argv_.end(), {"--device", "auto"});
  argv_.insert(argv_.end(), options_.worker_args.begin(), options_.worker_args.end());
}

SlurmLauncher::~SlurmLauncher() {
  if (running()) shutdown(0.0);
}

void SlurmLauncher::start() {
  if (!running()) spawn();
}

void SlurmLauncher::spawn() {
  std::vector<std::string> args = argv_;
  std::vector<char*> argv = c_argv(args);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw Error(std::string("--launcher slurm: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // srun ends with the coordinator, also one killed with SIGKILL: srun
    // given SIGTERM cancels its job (step), so nothing is left queued or
    // running in the cluster. (A parent already gone: end here.)
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    setpgid(0, 0);
    default_sigpipe();
    // The tasks run this very program: no hand-over to hpsearch-torch.
    setenv("HPSEARCH_NO_HANDOVER", "1", 1);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "hpsearch: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  pid_ = pid;
  started_ = Steady::now();
  restart_at_.reset();
  spdlog::info("slurm: started {} worker task{} as {} '{}' (srun pid {})", options_.workers,
               options_.workers == 1 ? "" : "s", in_allocation_ ? "a job step" : "a job",
               options_.job_name, pid);
}

std::optional<std::string> SlurmLauncher::reap(bool wait_briefly) {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0 && wait_briefly) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    r = waitpid(pid_, &status, WNOHANG);
  }
  if (r != pid_) return std::nullopt;
  pid_ = 0;
  return util::describe_wait_status(status);
}

std::optional<std::string> SlurmLauncher::poll() {
  std::optional<std::string> how = reap(false);
  if (how && restarting_) {
    const double ran_s = std::chrono::duration<double>(Steady::now() - started_).count();
    quick_exits_ = ran_s < options_.quick_exit_s ? quick_exits_ + 1 : 0;
    if (quick_exits_ >= options_.max_quick_exits) {
      given_up_ = true;
      spdlog::error("slurm: srun {} {} times in a row within {} s of its start; giving up", *how,
                    quick_exits_, options_.quick_exit_s);
    } else {
      double delay = options_.restart_delay_s * (1 << std::min(quick_exits_, 6));
      spdlog::warn("slurm: the worker step {} {}; starting it again in {} s", options_.job_name,
                   *how, delay);
      restart_at_ = Steady::now() + std::chrono::duration_cast<Steady::duration>(
                                        std::chrono::duration<double>(delay));
    }
  }
  if (!running() && restarting_ && !given_up_ && restart_at_ && Steady::now() >= *restart_at_)
    spawn();
  return how;
}

void SlurmLauncher::stop_restarting() {
  restarting_ = false;
  restart_at_.reset();
}

void SlurmLauncher::cancel() {
  if (!in_allocation_) {
    // srun asked for a job of its own (maybe still pending): cancel it by name.
    run_program({scancel_, "--name=" + options_.job_name}, nullptr);
    return;
  }
  // A step of the enclosing job: find its id by name.
  std::string out;
  run_program({squeue_, "--steps", "--noheader", "--format=%i %j",
               "--jobs=" + env_or_empty("SLURM_JOB_ID")},
              &out);
  std::istringstream lines(out);
  std::string id, name;
  while (lines >> id >> name)
    if (name == options_.job_name) run_program({scancel_, id}, nullptr);
}

void SlurmLauncher::shutdown(double grace_s) {
  stop_restarting();
  auto wait_for = [&](double seconds) {
    const auto until = Steady::now() + std::chrono::duration_cast<Steady::duration>(
                                           std::chrono::duration<double>(seconds));
    while (running()) {
      if (auto how = reap(true)) {
        spdlog::debug("slurm: srun {}", *how);
        return;
      }
      if (Steady::now() >= until) return;
    }
  };
  wait_for(grace_s);
  if (running()) {
    spdlog::info("slurm: cancelling the worker {} '{}' (scancel)", in_allocation_ ? "step" : "job",
                 options_.job_name);
    cancel();
    wait_for(5.0);
  }
  if (running()) {
    kill(-pid_, SIGTERM);
    wait_for(2.0);
  }
  if (running()) {
    kill(-pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
  }
}

}  // namespace hps
