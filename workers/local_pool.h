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
// Devices: with G GPUs, each worker gets its GPUs through
// CUDA_VISIBLE_DEVICES (assigned_gpus(): by default worker i gets GPU
// gpus[i mod G]; with gpus_per_worker K, GPUs K*i .. K*i+K-1; with
// workers_per_gpu K, GPU gpus[(i / K) mod G]) and runs on "cuda:0" (one
// GPU) or "cuda" (several: all those it sees); without GPUs, device "cpu".
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
  // GPUs each worker gets (`--gpus-per-worker`): worker i gets gpus[K*i ..
  // K*i+K-1], disjoint between workers. Default 1; >= 1; workers * K must
  // not exceed the GPUs (no sharing). Ignored without GPUs.
  int gpus_per_worker = 1;
  // Workers sharing each GPU (`--workers-per-gpu`): worker i gets
  // gpus[(i / K) mod G]. Default 1 (round robin over the GPUs); >= 1; only
  // one of gpus_per_worker and workers_per_gpu may be above 1. Ignored
  // without GPUs.
  int workers_per_gpu = 1;
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
  // Throws ConfigError naming the field for bad options (workers < 0, no
  // endpoint, gpus_per_worker or workers_per_gpu < 1 or both above 1,
  // gpus_per_worker > GPUs, workers * gpus_per_worker > GPUs).
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
  // The device string of slot i: "cpu" without GPUs, "cuda:0" with one GPU
  // per worker, "cuda" (every GPU the worker sees) with several.
  std::string device_of(int slot) const;
  // The GPUs of slot i (assigned_gpus()), and its CUDA_VISIBLE_DEVICES:
  // them joined by ',' ("" = none: CUDA_VISIBLE_DEVICES is left as it is).
  std::vector<std::string> gpus_of(int slot) const;
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
  // Throws the constructor's ConfigErrors about the GPU options.
  void check_gpu_layout() const;
  std::vector<ExitedWorker> reap(bool block_briefly);

  LocalPoolOptions options_;
  std::string shown_executable_;  // argv[0] of the workers (the real path of /proc/self/exe)
  int threads_ = 1;
  std::vector<Slot> slots_;
  bool restarting_ = true;
};

// The GPUs of worker `slot` (0-based) among `gpus` (G entries, in order):
// with gpus_per_worker K > 1, gpus[K*slot .. K*slot+K-1] (wrapping around
// past the end: callers check workers * K <= G first); else, with
// workers_per_gpu K >= 1, the one GPU gpus[(slot / K) mod G] (K = 1: round
// robin). Empty when `gpus` is. slot must be >= 0 and both counts >= 1.
std::vector<std::string> assigned_gpus(const std::vector<std::string>& gpus, int slot,
                                       int gpus_per_worker, int workers_per_gpu);

// CPU threads for each of `workers` workers on this machine: max(1,
// hardware threads / workers) (all of them for workers <= 0).
int default_threads_per_worker(int workers);

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
