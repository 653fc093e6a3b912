// The hpsearch subcommands. Each returns the process exit code:
// 0 success, 1 runtime failure, 2 bad input (config, arguments), 130/143
// interrupted by SIGINT/SIGTERM.
#pragma once

#include <atomic>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "report/dashboard_guard.h"
#include "search/json_util.h"
#include "search/storage.h"

namespace hps::cli {

// What the read commands say when a study has no best trial: "no COMPLETE
// trial yet", or, when it has `complete` COMPLETE trials (> 0) that are all
// warm-start copies of an earlier study (never the best), that they are.
std::string no_best_trial_yet(std::int64_t complete);

// Parses a command-line integer of type T: decimal digits only (no sign,
// blank, '+' or exponent), in T's range. Returns the value, or nullopt with
// `error` set to the rule it broke: "must be a whole number (digits only),
// got 'x'", "is out of range (at most N), got 'x'", or for a negative
// number "must be a positive integer, got '-3'" (`lowest` 1: the least
// value the option takes) or "must be 0 or a positive integer, got '-1'"
// (`lowest` 0; a 0 where 1 is the least is left to the option's own check).
// Used by the integer flags' validators and `trials --limit/--since`, so
// they agree.
template <typename T>
std::optional<T> parse_whole_number(std::string_view text, std::string& error, int lowest = 0) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  const bool negative = text.size() > 1 && text.front() == '-' &&
                        text.find_first_not_of("0123456789", 1) == std::string_view::npos;
  if (negative) {
    error =
        std::string(lowest > 0 ? "must be a positive integer" : "must be 0 or a positive integer") +
        ", got '" + std::string(text) + "'";
    return std::nullopt;
  }
  if (ec == std::errc::result_out_of_range && text.front() != '-') {
    error = "is out of range (at most " + std::to_string(std::numeric_limits<T>::max()) +
            "), got '" + std::string(text) + "'";
    return std::nullopt;
  }
  if (text.empty() || text.front() == '-' || ec != std::errc() || ptr != end) {
    error = "must be a whole number (digits only), got '" + std::string(text) + "'";
    return std::nullopt;
  }
  return value;
}

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Writes "hpsearch: error: WHAT" and a line break to stderr, with `what`
// made printable (search/printable.h: control characters, C1 controls and
// bytes that are not UTF-8 escaped), since an error quotes the user's
// files, stores and peers (`unknown type 'tp\x1b[31me'`). The one place a
// command's error is printed.
void print_error(std::string_view what);

// `value` as the JSON text the commands print (`--format json`), indented
// by 2: ASCII only (ensure_ascii: every other character as \uXXXX, so no C1
// control or bidirectional override from the store reaches a terminal
// raw), and a string that is not UTF-8 (a store edited by hand) with U+FFFD
// for its bad bytes rather than an exception.
std::string json_output(const Json& value);

struct RunOptions {
  std::string space_file;                         // run: the space.json file
  std::optional<std::string> storage;             // --storage (resume: the STORAGE argument)
  std::optional<std::string> study;               // --study
  std::optional<std::string> warm_start;          // run --warm-start STORAGE[:STUDY]
  std::optional<std::int64_t> n_trials;           // --n-trials
  std::optional<double> timeout_s;                // --timeout (seconds)
  std::optional<std::int64_t> max_failed_trials;  // --max-failed-trials (>= 1)
  bool no_fail_fast = false;                      // --no-fail-fast
  bool allow_objective_change = false;            // run --allow-objective-change
  std::optional<std::uint64_t> seed;              // --seed
  int workers = 1;                  // --workers: local worker processes (0: remote only)
  bool workers_given = false;       // --workers was on the command line
  std::optional<std::string> bind;  // --bind: the coordinator's endpoint
  std::optional<std::string> gpus;  // --gpus: "0,1,..." (default: automatic)
  // --gpus-per-worker K: each worker K GPUs of its own (local pools;
  // srun --gpus-per-task=K under --launcher slurm).
  std::optional<int> gpus_per_worker;
  std::optional<int> workers_per_gpu;     // --workers-per-gpu K: K workers share each GPU
  int heartbeat_ms = 1000;                // --heartbeat-ms
  int liveness = 5;                       // --liveness
  int max_retries = 1;                    // --max-retries
  int prefetch = 0;                       // --prefetch: passed on to the workers it starts
  bool prefetch_given = false;            // --prefetch was on the command line
  std::string log_level = "info";         // passed on to local workers
  std::optional<std::string> keys_dir;    // --keys (default: $HPSEARCH_KEYS_DIR)
  bool insecure = false;                  // --insecure: a tcp --bind without keys
  int max_workers = 1024;                 // --max-workers
  std::string launcher = "local";         // --launcher: local | slurm (workers as a Slurm job step)
  std::optional<std::string> slurm_args;  // --slurm-args: extra srun options (shell words)
  // How errors name `storage`: the flag of run, or the argument of resume.
  std::string storage_field = "--storage";
  // run --dry-run, and hpsearch validate: every check of a run, then the
  // plan (print_plan) instead of the run; nothing is created or written.
  bool dry_run = false;
  // hpsearch validate: checks the file alone, not against the default pool
  // (validate takes no --workers; a multi-process study needs several).
  bool validate_only = false;
  std::optional<std::string> try_output;  // validate --try-output FILE
  std::string format = "text";            // validate --format text | json
};

// What a dry run found in the store of the run (read-only).
struct PlanStudy {
  bool storage_exists = false;    // the store file exists
  std::optional<StudyInfo> info;  // the study of the run's name, when the store has it
  std::int64_t trials = 0;        // the study's trials, and those counted as finished
  std::int64_t finished = 0;
  std::string refusal;  // why run would refuse that study ("": it would continue it)
  std::string running;  // the coordinator that runs it now (WriterLockHolder::describe), or ""
};

// The plan of run --dry-run and hpsearch validate (cli/plan.cpp), printed
// as text or JSON (o.format) on stdout: the study (name, direction,
// storage, whether it exists and what differs from it: search/study_diff.h),
// each param with its distribution, the sampler and pruner with every
// default resolved (`sampler`, `pruner`: resolved_sampler_section,
// resolved_pruner_section), the objective (a command objective's argv and
// env for an example trial 0, params drawn by the sampler in an in-memory
// study), the metrics rules, the budget and fail-fast rules, the
// artifacts' settings (`checkpoint_root`: where checkpoints go) and the
// workers. JSON: {"valid": true, "accepted": whether run would go ahead,
// "study", "space", "sampler", "pruner", "objective", "budget",
// "artifacts", "workers", "try_output"}. With o.try_output, also what the
// command objective's metrics
// rules (or report lines) read from that saved output file. Returns the
// exit code: 0; 2 (kExitUsage) when `existing.refusal` is set (printed as
// the error); 1 when --try-output read no final value. Creates nothing.
// `log_dir`: the study's log folder (worker --log-dir), where {trial_dir}
// folders go.
int print_plan(const StudyConfig& config, const RunOptions& o, const Json& sampler,
               const Json& pruner, const std::string& checkpoint_root, const std::string& log_dir,
               const PlanStudy& existing);

struct ValidateOptions {
  std::string space_file;                 // the space.json file
  std::optional<std::string> storage;     // --storage
  std::optional<std::string> study;       // --study
  std::optional<std::string> try_output;  // --try-output FILE
  std::string format = "text";            // --format text | json
};

// hpsearch validate space.json: run's checks and its plan, as run
// --dry-run (run_command with RunOptions::dry_run).
int validate_command(const ValidateOptions& options);

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

// hpsearch schema: the JSON Schema (draft 2020-12) of space.json, exactly
// the file search/space.schema.json the program was built with.
std::string_view space_schema();
// Writes space_schema() to stdout. Returns kExitOk, or kExitFailure (with
// an error on stderr) when stdout cannot be written (a closed pipe).
int schema_command();

int run_command(const RunOptions& options);
// hpsearch resume STORAGE: continues a study from the settings stored with
// it (options.storage is the STORAGE argument; space_file is unused).
int resume_command(const RunOptions& options);

struct WorkerCommandOptions {
  std::string connect;                  // --connect ENDPOINT
  std::string device = "cpu";           // --device (auto: cuda:0 or cuda from CUDA_VISIBLE_DEVICES)
  int threads = 0;                      // --threads (0: all hardware threads)
  std::optional<std::string> id;        // --id
  int heartbeat_ms = 1000;              // --heartbeat-ms (until the coordinator's Welcome)
  int liveness = 5;                     // --liveness
  int reconnect_attempts = 6;           // --reconnect-attempts
  int reconnect_initial_ms = 1000;      // --reconnect-initial-ms
  int prefetch = 0;                     // --prefetch
  std::optional<std::string> log_dir;   // --log-dir (default: ./<study>.logs)
  std::optional<std::string> keys_dir;  // --keys (default: $HPSEARCH_KEYS_DIR)
  bool insecure = false;                // --insecure: tcp without keys
  bool allow_command = false;           // --allow-command
  std::vector<std::string> allow_programs;  // --allow-program (repeatable)
  std::vector<std::string> allow_env;       // --allow-env (repeatable)
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
  std::string format = "table";  // table | csv | json
  // trials only: filters (checked by trials_command; ConfigError naming the
  // flag for a bad value).
  std::optional<std::string> state;  // --state: one state or several, comma-separated
  std::optional<std::string> limit;  // --limit N: at most N trials (N >= 0)
  std::string sort = "number";       // --sort number | value (best first)
  std::optional<std::string> since;  // --since N: trials numbered >= N (N >= 0)
  // status only: --verbose, every sampler setting (TPE's internals) besides
  // the short summary.
  bool verbose = false;
};

// The storage at `path`, which must be an existing, non-empty store file
// (ConfigError "STORAGE: ..." otherwise; nothing is created), and the
// id of the study named (or of the only study in it; ConfigError naming
// --study when absent or ambiguous).
std::shared_ptr<Storage> open_existing(const std::string& path);
std::int64_t pick_study(Storage& storage, const std::optional<std::string>& name,
                        const std::string& path);

int best_command(const ReadOptions& options);
int trials_command(const ReadOptions& options);
int studies_command(const ReadOptions& options);
// hpsearch artifacts STORAGE [--trial N] [--format table|json]: each trial's
// lineage, the checkpoint step the store names, whether its folder exists
// and its size in bytes; then the trials' user artifacts (files, bytes,
// folder). hpsearch artifacts get STORAGE --trial N -o DIR: copies that
// trial's user artifacts (--kind user), or its newest snapshot (--kind
// snapshot), each checked against its manifest, into DIR (created); the
// default, auto, is the user artifacts when the trial has some, else the
// snapshot. A snapshot needs DIR new or empty; user artifacts refuse only
// files already in DIR, unless --overwrite. Read-only on the store.
struct ArtifactsOptions {
  std::string storage;
  std::optional<std::string> study;   // --study
  std::optional<std::int64_t> trial;  // --trial N
  std::string format = "table";       // --format table | json
  std::string output;                 // get: -o DIR
  std::string kind = "auto";          // get: --kind auto | user | snapshot
  bool overwrite = false;             // get: --overwrite (user artifacts)
};
int artifacts_command(const ArtifactsOptions& options);
int artifacts_get_command(const ArtifactsOptions& options);

// hpsearch status STORAGE: trials by state, the coordinator and what each
// worker runs now, the best trial so far.
int status_command(const ReadOptions& options);

struct ExportOptions {
  std::string storage;
  std::optional<std::string> study;  // --study
  std::string format = "optuna";     // --format (only optuna)
  std::string output;                // -o FILE (required)
  bool force = false;                // --force: replace an existing FILE
};

// hpsearch export STORAGE --format optuna -o FILE: writes the study as a
// SQLite file in Optuna's RDB storage schema (search/sqlite/optuna_rdb.h).
// Exit 2 if FILE exists without --force.
int export_command(const ExportOptions& options);

struct ImportOptions {
  std::string file;               // the Optuna SQLite file
  std::string study;              // --study: the Optuna study's name (empty: the file's only one)
  std::string into;               // --into: the hpsearch storage (created if missing)
  std::optional<std::string> as;  // --as: the new study's name (default: the Optuna study's)
};

// hpsearch import FILE [--study NAME] --into STORAGE [--as NAME]: copies an
// Optuna study (without --study: the file's only study) into a hpsearch
// storage. Exit 2 for an unsupported study (naming the param or field), a
// file with several studies and no --study, or a name already taken;
// nothing is stored then.
int import_command(const ImportOptions& options);

struct ReportOptions {
  std::string storage;
  std::optional<std::string> study;  // --study
  std::string output;                // -o FILE (required)
};

// hpsearch report STORAGE -o FILE: writes the study's report, one
// self-contained HTML file (report/html.h) that opens offline.
int report_command(const ReportOptions& options);

struct DashboardOptions {
  std::string storage;
  std::optional<std::string> study;  // --study
  std::string host = "127.0.0.1";    // --host: the address listened on
  int port = 8080;                   // --port (0: any free port)
  bool allow_remote = false;         // --allow-remote: a --host that is not loopback
  int poll_ms = 2000;                // --refresh-ms: the page's polling interval
};

// hpsearch dashboard STORAGE: serves the report page, refreshed while the
// study runs, over HTTP on host:port (loopback unless allow_remote). GET
// only; it never writes to the store. Prints "serving http://HOST:PORT/"
// on stdout once listening; runs until SIGINT/SIGTERM (exit 0).
int dashboard_command(const DashboardOptions& options);

// Whether `host` is a loopback address or name: report/dashboard_guard.h.
using report::is_loopback_host;

// Installs SIGINT/SIGTERM/SIGHUP handlers (SIGHUP: the terminal or the ssh
// session went away, as on a login node): the first sets the stop flag (returned)
// and, with `announce`, says on stderr what happens next; the second exits at
// once with 128 + signal. Workers do not announce: a local pool stops its
// workers with SIGTERM, and one line from the coordinator is enough.
std::atomic<bool>* install_stop_handlers(bool announce = true);
// 0 if no signal arrived, else the first signal number.
int stop_signal();
// The ipc socket file of `endpoint` ("ipc://PATH"; anything else: nothing)
// is removed by a second stop signal before it exits, if PATH is still the
// socket it is now (the run's own end removes it otherwise), and with
// `with_folder` the folder holding it too, if that is then empty (the
// coordinator's private folder). At most two endpoints. Call from the main
// thread once the endpoint is bound.
void remove_on_quit(const std::string& endpoint, bool with_folder = false);
// Ignores SIGPIPE in this process, for the commands that own state to clean
// up at their end (run, resume: the study's end recorded, the ipc socket
// file removed; worker: its trial handed back). Without it, a write to a
// stdout or stderr whose reader is gone (`hpsearch run ... | head -2`, a
// closed ssh session) kills the process on the spot; with it, the write
// fails with EPIPE, which the output code treats as not fatal (the progress
// line and the summary are then lost, the run is not). The programs
// hpsearch starts get SIGPIPE's default action back (an ignored signal
// stays ignored across exec). Never fails.
void ignore_sigpipe();

}  // namespace hps::cli
