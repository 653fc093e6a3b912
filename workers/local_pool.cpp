#include "workers/local_pool.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef HPSEARCH_HAVE_CUDA
#include <dlfcn.h>
#endif

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "search/errors.h"
#include "search/printable.h"
#include "search/util/wait_status.h"

extern char** environ;

namespace hps {

namespace {

using Steady = std::chrono::steady_clock;

// The GPUs as CUDA_VISIBLE_DEVICES lists them: "0,1".
std::string gpu_list_text(const std::vector<std::string>& gpus) {
  std::string out;
  for (const auto& g : gpus) out += (out.empty() ? "" : ",") + g;
  return out;
}

}  // namespace

std::vector<std::string> assigned_gpus(const std::vector<std::string>& gpus, int slot,
                                       int gpus_per_worker, int workers_per_gpu) {
  if (gpus.empty() || slot < 0 || gpus_per_worker < 1 || workers_per_gpu < 1) return {};
  const auto g = gpus.size();
  const auto i = static_cast<std::size_t>(slot);
  if (gpus_per_worker > 1) {
    const auto k = static_cast<std::size_t>(gpus_per_worker);
    std::vector<std::string> out;
    for (std::size_t j = 0; j < k; ++j) out.push_back(gpus[(i * k + j) % g]);
    return out;
  }
  return {gpus[(i / static_cast<std::size_t>(workers_per_gpu)) % g]};
}

int default_threads_per_worker(int workers) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, workers > 0 ? cores / workers : cores);
}

LocalWorkerPool::LocalWorkerPool(LocalPoolOptions options) : options_(std::move(options)) {
  if (options_.workers < 0) throw ConfigError("--workers", "must be >= 0");
  if (options_.workers > LocalPoolOptions::kMaxWorkers)
    throw ConfigError("--workers", "must be <= " + std::to_string(LocalPoolOptions::kMaxWorkers));
  if (options_.workers > 0 && options_.endpoint.empty())
    throw ConfigError("pool.endpoint", "is required to start workers");
  if (options_.threads_per_worker < 0) throw ConfigError("--threads", "must be >= 0");
  if (options_.executable.empty()) options_.executable = "/proc/self/exe";
  // argv[0] of the workers names the executable as `ps` and `pgrep -f
  // 'hpsearch worker'` should show it, though /proc/self/exe itself is what
  // runs (it stays this very binary even if the file is replaced meanwhile).
  shown_executable_ = options_.executable;
  if (shown_executable_ == "/proc/self/exe") {
    std::error_code ec;
    auto real = std::filesystem::read_symlink(shown_executable_, ec);
    if (!ec && !real.empty()) shown_executable_ = real.string();
  }
  check_gpu_layout();
  threads_ = options_.threads_per_worker > 0 ? options_.threads_per_worker
                                             : default_threads_per_worker(options_.workers);
  slots_.resize(static_cast<std::size_t>(options_.workers));
}

void LocalWorkerPool::check_gpu_layout() const {
  const int k_gpus = options_.gpus_per_worker, k_workers = options_.workers_per_gpu;
  if (k_gpus < 1)
    throw ConfigError("--gpus-per-worker", "must be >= 1, got " + std::to_string(k_gpus));
  if (k_workers < 1)
    throw ConfigError("--workers-per-gpu", "must be >= 1, got " + std::to_string(k_workers));
  if (k_gpus > 1 && k_workers > 1)
    throw ConfigError("--gpus-per-worker",
                      "cannot be combined with --workers-per-gpu: a worker either has several "
                      "GPUs or shares one; give one of them");
  const auto g = static_cast<std::int64_t>(options_.gpus.size());
  if (g == 0 || k_gpus == 1) return;
  if (k_gpus > g)
    throw ConfigError("--gpus-per-worker", "is " + std::to_string(k_gpus) + " but only " +
                                               std::to_string(g) + " GPUs are available (" +
                                               gpu_list_text(options_.gpus) + ")");
  if (static_cast<std::int64_t>(options_.workers) * k_gpus > g)
    throw ConfigError("--workers",
                      std::to_string(options_.workers) + " workers with " + std::to_string(k_gpus) +
                          " GPUs each need " +
                          std::to_string(static_cast<std::int64_t>(options_.workers) * k_gpus) +
                          " GPUs, only " + std::to_string(g) + " are available (" +
                          gpu_list_text(options_.gpus) + "): give --workers " +
                          std::to_string(g / k_gpus) +
                          " or fewer, or --workers-per-gpu to share GPUs");
}

LocalWorkerPool::~LocalWorkerPool() {
  if (running() > 0) shutdown(0.0);
}

std::string LocalWorkerPool::device_of(int slot) const {
  const std::size_t n = gpus_of(slot).size();
  return n == 0 ? "cpu" : n == 1 ? "cuda:0" : "cuda";
}

std::vector<std::string> LocalWorkerPool::gpus_of(int slot) const {
  return assigned_gpus(options_.gpus, slot, options_.gpus_per_worker, options_.workers_per_gpu);
}

std::string LocalWorkerPool::visible_devices_of(int slot) const {
  return gpu_list_text(gpus_of(slot));
}

void LocalWorkerPool::start() {
  for (int i = 0; i < options_.workers; ++i)
    if (slots_[static_cast<std::size_t>(i)].pid == 0) spawn(i);
}

void LocalWorkerPool::spawn(int slot) {
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::vector<std::string> args = {
      shown_executable_, "worker",        "--connect", options_.endpoint,
      "--device",        device_of(slot), "--threads", std::to_string(threads_)};
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  std::vector<std::string> env;
  const std::string visible = visible_devices_of(slot);
  bool has_omp = false, has_mkl = false;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    if (!visible.empty() && kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
    if (kv.rfind("OMP_NUM_THREADS=", 0) == 0) has_omp = true;
    if (kv.rfind("MKL_NUM_THREADS=", 0) == 0) has_mkl = true;
    env.push_back(std::move(kv));
  }
  if (!visible.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + visible);
  // The `hpsearch worker` command would otherwise hand over to
  // `hpsearch-torch` (cli/commands.h); this executable is already the one
  // the study needs.
  env.push_back("HPSEARCH_NO_HANDOVER=1");
  if (!has_omp) env.push_back("OMP_NUM_THREADS=" + std::to_string(threads_));
  if (!has_mkl) env.push_back("MKL_NUM_THREADS=" + std::to_string(threads_));
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();

  pid_t pid = fork();
  if (pid < 0)
    throw Error(std::string("cannot start a worker process: fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);     // not SIGKILL: the worker stops its trial's programs
    if (getppid() != parent) _exit(127);  // the coordinator died already
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // SIGPIPE's default action back: `hpsearch run` ignores it (cli/
    // commands.h, ignore_sigpipe), and an ignored signal stays ignored
    // across exec; the worker program decides for itself.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    execve(options_.executable.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  s.pid = pid;
  s.started = Steady::now();
  s.restart_at.reset();
  spdlog::debug("pool: started worker {} (pid {}, {}{})", slot, pid, device_of(slot),
                visible.empty() ? "" : ", CUDA_VISIBLE_DEVICES=" + visible);
}

std::vector<ExitedWorker> LocalWorkerPool::reap(bool) {
  std::vector<ExitedWorker> out;
  // One call says whether any child exited (without reaping it), so the
  // common case (none) costs one system call, not one per worker.
  siginfo_t info{};
  if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0) return out;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.pid == 0) continue;
    int status = 0;
    pid_t r = waitpid(s.pid, &status, WNOHANG);
    if (r == 0) continue;
    if (r < 0 && errno == EINTR) continue;
    ExitedWorker w;
    w.slot = static_cast<int>(i);
    w.pid = s.pid;
    w.how = r < 0 ? "vanished" : util::describe_wait_status(status);
    out.push_back(w);
    double lived = std::chrono::duration<double>(Steady::now() - s.started).count();
    s.pid = 0;
    s.quick_exits = lived < options_.quick_exit_s ? s.quick_exits + 1 : 0;
    if (s.quick_exits >= options_.max_quick_exits) {
      if (!s.given_up && restarting_)
        spdlog::error(
            "pool: worker {} exited {} times in a row right after starting ({}); "
            "not starting it again",
            i, s.quick_exits, w.how);
      s.given_up = true;
    }
    if (restarting_ && !s.given_up) {
      double delay =
          options_.restart_delay_s * static_cast<double>(1 << std::min(s.quick_exits, 6));
      s.restart_at = Steady::now() + std::chrono::duration_cast<Steady::duration>(
                                         std::chrono::duration<double>(delay));
    }
  }
  return out;
}

std::vector<ExitedWorker> LocalWorkerPool::poll() {
  auto out = reap(false);
  if (!restarting_) return out;
  auto now = Steady::now();
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.pid == 0 && !s.given_up && s.restart_at && now >= *s.restart_at) {
      spdlog::info("pool: starting worker {} again", i);
      spawn(static_cast<int>(i));
    }
  }
  return out;
}

void LocalWorkerPool::stop_restarting() {
  restarting_ = false;
  for (auto& s : slots_) s.restart_at.reset();
}

std::vector<ExitedWorker> LocalWorkerPool::shutdown(double grace_s) {
  stop_restarting();
  std::vector<ExitedWorker> out;
  auto wait_all = [&](double seconds) {
    auto until = Steady::now() + std::chrono::duration_cast<Steady::duration>(
                                     std::chrono::duration<double>(seconds));
    while (true) {
      auto r = reap(false);
      out.insert(out.end(), r.begin(), r.end());
      if (running() == 0 || Steady::now() >= until) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  wait_all(grace_s);
  if (running() == 0) return out;
  for (auto& s : slots_)
    if (s.pid > 0) kill(s.pid, SIGTERM);
  wait_all(2.0);
  for (auto& s : slots_)
    if (s.pid > 0) kill(s.pid, SIGKILL);
  wait_all(5.0);
  return out;
}

int LocalWorkerPool::running() const {
  int n = 0;
  for (const auto& s : slots_) n += s.pid > 0 ? 1 : 0;
  return n;
}

std::vector<pid_t> LocalWorkerPool::pids() const {
  std::vector<pid_t> out;
  for (const auto& s : slots_) out.push_back(s.pid);
  return out;
}

bool LocalWorkerPool::all_given_up() const {
  if (slots_.empty()) return false;
  for (const auto& s : slots_)
    if (!s.given_up) return false;
  return true;
}

namespace {

// Whether `item` names a GPU as CUDA_VISIBLE_DEVICES does: an index (digits)
// or a UUID as nvidia-smi -L prints it ("GPU-8a3f...", "MIG-...", the
// legacy "MIG-GPU-<uuid>/<gi>/<ci>"; a prefix of one is enough for CUDA).
bool is_gpu_id(const std::string& item) {
  if (std::all_of(item.begin(), item.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }))
    return item.size() <= 9;
  if (item.rfind("GPU-", 0) != 0 && item.rfind("MIG-", 0) != 0) return false;
  if (item.size() == 4) return false;
  return std::all_of(item.begin() + 4, item.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '/' || c == 'G' ||
           c == 'P' || c == 'U';
  });
}

}  // namespace

std::vector<std::string> parse_gpu_list(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty())
      throw ConfigError("--gpus", "has an empty entry in '" + text + "' (expected e.g. 0,1,2)");
    if (!is_gpu_id(item))
      throw ConfigError("--gpus", "entry '" + printable(item) +
                                      "' is not a GPU index (0, 1, ...) or UUID (GPU-..., "
                                      "MIG-...), as CUDA_VISIBLE_DEVICES takes them");
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> detect_gpus() {
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string v = cvd;
    if (v.empty() || v == "-1" || v == "NoDevFiles") return {};
    try {
      return parse_gpu_list(v);
    } catch (const ConfigError&) {
      spdlog::warn("CUDA_VISIBLE_DEVICES='{}' is not a list of GPUs; using none", v);
      return {};
    }
  }
#ifdef HPSEARCH_HAVE_CUDA
  // The driver API through dlopen: no link-time dependency on CUDA.
  if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    using InitFn = int (*)(unsigned int);
    using CountFn = int (*)(int*);
    auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
    int n = 0;
    std::vector<std::string> out;
    if (init && count && init(0) == 0 && count(&n) == 0)
      for (int i = 0; i < n; ++i) out.push_back(std::to_string(i));
    dlclose(lib);
    return out;
  }
#endif
  return {};
}

}  // namespace hps
