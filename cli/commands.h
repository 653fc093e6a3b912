// The hpsearch subcommands. Each returns the process exit code:
// 0 success, 1 runtime failure, 2 bad input (config, arguments), 130/143
// interrupted by SIGINT/SIGTERM.
#pragma once

#include <cstdint>
#include <atomic>
#include <optional>
#include <string>

namespace hps::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct RunOptions {
  std::string space_file;
  std::optional<std::string> storage;      // --storage
  std::optional<std::string> study;        // --study
  std::optional<std::int64_t> n_trials;    // --n-trials
  std::optional<double> timeout_s;         // --timeout (seconds)
  std::optional<std::uint64_t> seed;       // --seed
  int n_jobs = 1;                          // --jobs: in-process threads
};

int run_command(const RunOptions& options);

struct ReadOptions {
  std::string storage;
  std::optional<std::string> study;
  std::string format = "table";  // table | csv | json
  std::optional<std::string> state;  // filter
};

int best_command(const ReadOptions& options);
int trials_command(const ReadOptions& options);
int studies_command(const ReadOptions& options);

// Installs SIGINT/SIGTERM handlers: the first sets the stop flag (returned),
// the second exits at once with 128 + signal.
std::atomic<bool>* install_stop_handlers();
// 0 if no signal arrived, else the first signal number.
int stop_signal();

}  // namespace hps::cli
