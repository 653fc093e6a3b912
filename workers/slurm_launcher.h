// SlurmLauncher: the workers of `hpsearch run --launcher slurm` as one
// Slurm job step.
//
// start() runs, as a child process of the coordinator,
//
//   srun --ntasks=N --job-name=NAME --kill-on-bad-exit=0
//        [--gpus-per-task=K] [slurm_args...]
//        <executable> worker --connect ENDPOINT --keys KEYS --device auto
//        [worker_args...]
//
// Inside an allocation (SLURM_JOB_ID set: a batch script, salloc) srun
// starts a job step of that job; elsewhere (a login node) srun asks for a
// job of its own and waits for it. Slurm places the tasks; each task is one
// worker, which takes its device from Slurm (`--device auto`: cuda:0 when
// Slurm set CUDA_VISIBLE_DEVICES to one GPU, e.g. with --gpus-per-task=1,
// "cuda" (all of them) when to several, else cpu)
// and names itself after its task (slurm_task_worker_id()).
//
// Ending: shutdown() waits for srun to end on its own (the coordinator told
// the workers to stop), then cancels what is left with scancel: the job
// (`scancel --name=NAME`) when srun made one, else the step (JOB.STEP, found
// with `squeue --steps` by its name), and last ends srun itself (SIGTERM,
// SIGKILL 2 s later). A step that ends while the study runs (preempted,
// cancelled, a node lost) is started again after restart_delay_s (doubling
// with each quick exit), so the study keeps its pace as tasks come and go;
// after max_quick_exits exits in a row within quick_exit_s of the start,
// the launcher gives up (given_up()).
//
// Not thread-safe: one thread calls every method. srun, scancel and squeue
// must be in PATH (the constructor checks; see find_in_path()).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hps {

struct SlurmLauncherOptions {
  // Tasks of the step, one worker each (srun --ntasks). Default 1; >= 1.
  int workers = 1;
  // The program the tasks run. Default "" = this program (the real path of
  // /proc/self/exe; it must be where the compute nodes see it, as with any
  // srun).
  std::string executable{};
  // The coordinator's endpoint as the compute nodes reach it
  // ("tcp://login1:40123"). Required.
  std::string endpoint{};
  // The workers' CURVE keys folder (a worker folder such as KEYS/worker-1,
  // on the shared filesystem). Default "": none, the workers get --insecure.
  std::string keys_dir{};
  // GPUs of each task (`hpsearch run --gpus-per-worker K`): srun's
  // --gpus-per-task=K, so Slurm gives each task K GPUs of its own (in
  // CUDA_VISIBLE_DEVICES). Default 0: none asked for (slurm_args may ask).
  int gpus_per_task = 0;
  // Extra srun options ("--partition=gpu", "--gpus-per-task=1"), after the
  // launcher's own, so that they win. Default none.
  std::vector<std::string> slurm_args{};
  // Extra `hpsearch worker` arguments ("--log-dir", DIR). Default none.
  std::vector<std::string> worker_args{};
  // The job (or step) name. Default "" = "hpsearch-<pid>-<random hex>";
  // it must be unique: cancelling finds the job or step by it.
  std::string job_name{};
  // The step is given up after it ended this many times in a row within
  // quick_exit_s of its start. Default 3 and 10 s.
  int max_quick_exits = 3;
  double quick_exit_s = 10.0;
  // Seconds before an ended step is started again. Default 2; doubles with
  // each quick exit in a row.
  double restart_delay_s = 2.0;
};

class SlurmLauncher {
 public:
  // Throws ConfigError("--launcher", "slurm: srun not found in PATH ...")
  // when srun, scancel or squeue is missing, and ConfigError for bad options
  // (workers < 1, no endpoint, gpus_per_task < 0).
  explicit SlurmLauncher(SlurmLauncherOptions options);
  // shutdown(0) if srun still runs.
  ~SlurmLauncher();
  SlurmLauncher(const SlurmLauncher&) = delete;
  SlurmLauncher& operator=(const SlurmLauncher&) = delete;

  // Starts srun (fork + exec, in its own process group so that a Ctrl-C at
  // the terminal reaches only the coordinator). Throws Error if fork fails.
  void start();
  // Reaps srun if it ended (returns how: "exited with status 1"), and starts
  // it again when its restart delay passed, unless restarting was stopped or
  // given up.
  std::optional<std::string> poll();
  // No more restarts (the study is ending).
  void stop_restarting();
  // Waits up to grace_s for srun to end on its own, then cancels the job or
  // step with scancel and waits up to 5 s more, then SIGTERM/SIGKILL srun.
  void shutdown(double grace_s);

  bool running() const { return pid_ > 0; }
  bool given_up() const { return given_up_; }
  // True when the coordinator runs inside a Slurm allocation (SLURM_JOB_ID
  // set): the workers are a step of that job, not a job of their own.
  bool in_allocation() const { return in_allocation_; }
  const std::string& job_name() const { return options_.job_name; }
  // The srun command line start() runs.
  const std::vector<std::string>& command() const { return argv_; }

 private:
  void spawn();
  std::optional<std::string> reap(bool wait_briefly);
  void cancel();

  SlurmLauncherOptions options_;
  std::vector<std::string> argv_;
  std::string srun_, scancel_, squeue_;
  bool in_allocation_ = false;
  pid_t pid_ = 0;
  std::chrono::steady_clock::time_point started_{};
  std::optional<std::chrono::steady_clock::time_point> restart_at_{};
  int quick_exits_ = 0;
  bool given_up_ = false;
  bool restarting_ = true;
};

// Throws ConfigError("--launcher", "slurm: srun not found in PATH ...")
// unless srun, scancel and squeue are all in PATH.
void require_slurm_commands();

// The absolute path of `program` found in PATH (as execvp looks it up), or
// "" if it is not there. A name with '/' is returned as it is if executable.
std::string find_in_path(const std::string& program);

// Splits a command-line string into arguments as a POSIX shell does
// (quotes, backslashes; wordexp(3) without command substitution: `$(...)`
// and backquotes are refused). Throws ConfigError(field, ...) for bad
// syntax or command substitution.
std::vector<std::string> split_shell_words(const std::string& text, const std::string& field);

// The Slurm task this process is, from the environment srun gives each task
// (SLURM_PROCID, SLURMD_NODENAME, SLURM_JOB_ID, SLURM_STEP_ID,
// SLURM_CPUS_PER_TASK). procid is -1 outside a Slurm task.
struct SlurmTask {
  int procid = -1;
  std::string node;       // SLURMD_NODENAME ("" if unset)
  std::string job_id;     // SLURM_JOB_ID
  std::string step_id;    // SLURM_STEP_ID
  int cpus_per_task = 0;  // SLURM_CPUS_PER_TASK (0 if unset)
};
SlurmTask slurm_task_from_env();
// The worker id of a Slurm task: "<node>:job<J>.<S>:task<P>" (the parts
// that are known), so that `hpsearch status` shows where each worker runs.
std::string slurm_task_worker_id(const SlurmTask& task);
// `--device auto`: "cuda:0" when CUDA_VISIBLE_DEVICES names one device
// (Slurm sets it per task with --gpus-per-task; hpsearch then sees its one
// GPU as cuda:0), "cuda" when it names several (the worker uses them all: a
// command objective's program sees every one; the LibTorch objectives
// train on the first), else "cpu".
std::string auto_device();

}  // namespace hps
