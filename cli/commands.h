// The hpsearch subcommands. Each returns the process exit code:
// 0 success, 1 runtime failure, 2 bad input (config, arguments), 130/143
// interrupted by SIGINT/SIGTERM.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "search/json_util.h"

namespace hps::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct RunOptions {
  std::string space_file;                // run: the space.json file
  std::optional<std::string> storage;    // --storage (resume: the STORAGE argument)
  std::optional<std::string> study;      // --study
  std::optional<std::int64_t> n_trials;  // --n-trials
  std::optional<double> timeout_s;       // --timeout (seconds)
  std::optional<std::uint64_t> seed;     // --seed
  int workers = 1;                       // --workers: local worker processes (0: remote only)
  std::optional<std::string> bind;       // --bind: the coordinator's endpoint
  std::optional<std::string> gpus;       // --gpus: "0,1,..." (default: automatic)
  int heartbeat_ms = 1000;               // --heartbeat-ms
  int liveness = 5;                      // --liveness
  int max_retries = 1;                   // --max-retries
  std::string log_level = "info";        // passed on to local workers
  std::optional<std::string> keys_dir;   // --keys (default: $HPSEARCH_KEYS_DIR)
  bool insecure = false;                 // --insecure: a tcp --bind without keys
  int max_workers = 1024;                // --max-workers
};

// hpsearch run space.json: runs (or continues) the study with a coordinator
// and `workers` local worker processes.
// LibTorch hand-over. `hpsearch` is built without LibTorch (its processes,
// local workers included, start in milliseconds; LibTorch costs about 1 s of
// CPU per process at load); `hpsearch-torch`, installed beside it, is the
// same program with the LibTorch objectives. remember_program_args() keeps
// main's arguments; exec_torch_sibling() replaces this process with
// `hpsearch-torch` and the same arguments when this program registered no
// "torch.*" objective type (objectives/objective.h; hpsearch-torch's main()
// registers them) and the sibling exists (else it returns, and a torch
// objective is then refused as an unknown type). `why` is logged.
void remember_program_args(int argc, char** argv);
bool needs_torch(const Json& objective);  // objective.type starts with "torch."
void exec_torch_sibling(const char* why);

int run_command(const RunOptions& options);
// hpsearch resume STORAGE: continues a study from the settings stored with
// it (options.storage is the STORAGE argument; space_file is unused).
int resume_command(const RunOptions& options);

struct WorkerCommandOptions {
  std::string connect;                      // --connect ENDPOINT
  std::string device = "cpu";               // --device
  int threads = 0;                          // --threads (0: all hardware threads)
  std::optional<std::string> id;            // --id
  int heartbeat_ms = 1000;                  // --heartbeat-ms (until the coordinator's Welcome)
  int liveness = 5;                         // --liveness
  int reconnect_attempts = 6;               // --reconnect-attempts
  int reconnect_initial_ms = 1000;          // --reconnect-initial-ms
  std::optional<std::string> log_dir;       // --log-dir (default: ./<study>.logs)
  std::optional<std::string> keys_dir;      // --keys (default: $HPSEARCH_KEYS_DIR)
  bool insecure = false;                    // --insecure: tcp without keys
  bool allow_command = false;               // --allow-command
  std::vector<std::string> allow_programs;  // --allow-program (repeatable)
};

// hpsearch worker --connect ENDPOINT: serves trials until told to stop.
int worker_command(const WorkerCommandOptions& options);

// The environment variable naming a keys folder, used when --keys is not
// given (by `run`/`resume` for a tcp --bind, by `worker` for a tcp --connect).
inline constexpr const char* kKeysDirEnv = "HPSEARCH_KEYS_DIR";

struct KeysOptions {
  std::string dir;   // the keys folder
  int workers = 1;   // --workers: worker key pairs to make
  bool add = false;  // `keys add`: add workers to an existing folder
};

// hpsearch keys init DIR [--workers N] / hpsearch keys add DIR [--workers N]:
// makes CURVE keys (protocol/curve_keys.h) and prints the commands that use
// them. Exit 2 if DIR already holds keys (init) or holds none (add).
int keys_command(const KeysOptions& options);

struct ReadOptions {
  std::string storage;
  std::optional<std::string> study;
  std::string format = "table";      // table | csv | json
  std::optional<std::string> state;  // filter
};

int best_command(const ReadOptions& options);
int trials_command(const ReadOptions& options);
int studies_command(const ReadOptions& options);
// hpsearch status STORAGE: trials by state, the coordinator and what each
// worker runs now, the best trial so far.
int status_command(const ReadOptions& options);

// Installs SIGINT/SIGTERM handlers: the first sets the stop flag (returned)
// and, with `announce`, says on stderr what happens next; the second exits at
// once with 128 + signal. Workers do not announce: a local pool stops its
// workers with SIGTERM, and one line from the coordinator is enough.
std::atomic<bool>* install_stop_handlers(bool announce = true);
// 0 if no signal arrived, else the first signal number.
int stop_signal();

}  // namespace hps::cli
