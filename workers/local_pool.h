// LocalWorkerPool: N worker processes on this machine for
// `hpsearch run --workers N`.
//
// Each worker is `<executable> worker --connect ENDPOINT --device D
// --threads T [extra args]`, started with fork + exec in its own process
// group (so a Ctrl-C at the terminal reaches only the coordinator, which
// stops the workers itself) and with PR_SET_PDEATHSIG = SIGTERM (so the
// workers stop with the coordinator, even after kill -9: SIGTERM interrupts
// the running trial, which lets the "command" objective stop its program's
// process group first; a second signal ends a worker at once).
//
// Devices: with GPUs, worker i gets GPU gpus[i mod G] through
// CUDA_VISIBLE_DEVICES and runs on "cuda:0"; without GPUs, device "cpu".
// Threads: max(1, hardware threads / N) per worker unless set; exported
// as OMP_NUM_THREADS and MKL_NUM_THREADS when the environment has none.
//
// A worker that exits is reaped by poll() and started again (after a short
// delay) until stop_restarting(); a slot whose worker keeps exiting within
// a few seconds of its start is given up after max_quick_exits times in a
// row. Not thread-safe: one thread calls every method.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hps {

struct LocalPoolOptions {
  // The most worker processes a pool starts.
  static constexpr int kMaxWorkers = 4096;
  // Worker processes. Default 1; 0 starts none; at most kMaxWorkers.
  int workers = 1;
  // The program to run. Default "" = this program (/proc/self/exe).
  std::string executable{};
  // The coordinator's endpoint. Required when workers > 0.
  std::string endpoint{};
  // GPU ids for CUDA_VISIBLE_DEVICES, one entry each ("0", "1", or UUIDs).
  // Default empty: CPU workers.
  std::vector<std::string> gpus{};
  // CPU threads per worker. Default 0 = max(1, hardware threads / workers).
  int threads_per_worker = 0;
  // Arguments appended to every worker's command line (e.g. "--log-level",
  // "warn").
  std::vector<std::string> extra_args{};
  // A slot is given up after its worker exited this many times in a row
  // within quick_exit_s of starting. Default 5 and 2.0 s.
  int max_quick_exits = 5;
  double quick_exit_s = 2.0;
  // Delay before a dead worker is started again, in seconds. Default 0.2;
  // doubles with each quick exit in a row.
  double restart_delay_s = 0.2;
};

// One reaped worker process.
struct ExitedWorker {
  int slot = 0;
  pid_t pid = 0;
  std::string how;  // "exited with status 1", "killed by signal 9"
};

class LocalWorkerPool {
 public:
  // Throws ConfigError for bad options (workers < 0, no endpoint).
  explicit LocalWorkerPool(LocalPoolOptions options);
  // Terminates (SIGTERM, then SIGKILL after 2 s) and reaps what still runs.
  ~LocalWorkerPool();
  LocalWorkerPool(const LocalWorkerPool&) = delete;
  LocalWorkerPool& operator=(const LocalWorkerPool&) = delete;

  // Starts every worker. Throws Error if fork fails.
  void start();
  // Reaps exited workers (returned), and starts again those whose restart
  // delay passed, unless restarting was stopped or the slot given up.
  std::vector<ExitedWorker> poll();
  // No more restarts (the study is ending).
  void stop_restarting();
  // Waits up to grace_s for the workers to exit on their own, then sends
  // SIGTERM, waits up to 2 s more, then SIGKILL; reaps all. Returns the
  // workers that exited meanwhile.
  std::vector<ExitedWorker> shutdown(double grace_s);

  int running() const;              // live worker processes
  std::vector<pid_t> pids() const;  // their pids, by slot (0 = none)
  bool all_given_up() const;        // every slot was given up
  // The threads each worker gets.
  int threads_per_worker() const { return threads_; }
  // The device string and CUDA_VISIBLE_DEVICES of slot i ("" = unset).
  std::string device_of(int slot) const;
  std::string visible_devices_of(int slot) const;

 private:
  struct Slot {
    pid_t pid = 0;
    std::chrono::steady_clock::time_point started{};
    std::optional<std::chrono::steady_clock::time_point> restart_at{};
    int quick_exits = 0;
    bool given_up = false;
  };
  void spawn(int slot);
  std::vector<ExitedWorker> reap(bool block_briefly);

  LocalPoolOptions options_;
  std::string shown_executable_;  // argv[0] of the workers (the real path of /proc/self/exe)
  int threads_ = 1;
  std::vector<Slot> slots_;
  bool restarting_ = true;
};

// Parses a --gpus list ("0,1,3"; entries may be UUIDs). An empty string
// gives an empty list. Each entry is a GPU index (digits) or a UUID as
// CUDA_VISIBLE_DEVICES takes it ("GPU-8a3f...", "MIG-..."). Throws
// ConfigError("--gpus", ...) naming the entry for an empty one or one that
// is neither ("abc").
std::vector<std::string> parse_gpu_list(const std::string& text);

// GPUs for automatic assignment: the entries of CUDA_VISIBLE_DEVICES when
// it is set (empty, or "-1", means none), else, in a build with CUDA
// (HPSEARCH_HAVE_CUDA), "0".."n-1" for the n devices the CUDA driver
// reports; else none.
std::vector<std::string> detect_gpus();

}  // namespace hps
