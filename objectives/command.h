// The "command" objective: runs any program (a Python training script, a C++
// binary, a shell script) once per trial and reads its results from stdout.
//
//   "objective": {"type": "command",
//                 "argv": ["python3", "train.py", "--lr", "{lr}",
//                          "--momentum", "{momentum?}"],
//                 "cwd": "examples/python", "env": {"DATA_DIR": "/data"},
//                 "timeout_s": 600, "grace_s": 10}
//
// Fields:
//  - mode: "per_trial" (default: the program runs once per trial) or
//    "persistent" (it is started once and serves many trials through its
//    stdin; see "Persistent mode" below).
//  - argv (required): the program and its arguments, strings. "{name}" is
//    replaced by the value of param `name` (anywhere in an argument, e.g.
//    "--lr={lr}"), formatted by format_param_value() so that it reads back
//    to the same value. A param that is inactive in a trial (its "when" does
//    not hold) must be written "{name?}": the argument is then dropped, and
//    so is the flag before it when the argument is exactly "{name?}" and the
//    argument before it is a literal starting with '-'. "{{" and "}}" are
//    literal braces. argv[0] is looked up in PATH unless it contains '/'
//    (then it is relative to cwd).
//  - cwd: the working directory of the program (default: the worker's).
//  - env: {"NAME": "value"} added to the worker's environment; values may
//    hold placeholders ("{name?}" omits the variable when inactive).
//  - timeout_s: seconds a trial may run (> 0; default: no limit). A trial
//    still running then is terminated and ends FAIL("timeout ...").
//  - grace_s: seconds between SIGTERM and SIGKILL when the program is
//    stopped (pruned, timed out, interrupted); default 10, in [0, 3600].
//  - log_max_bytes: the most bytes of the program's output kept in a
//    trial's log file (below); an integer in [4096, 2^50], default 67108864
//    (64 MiB). Past it the log says where it was cut and keeps only
//    hpsearch's own notes (at most 64 KiB more: the exit status, ...);
//    the program's output is still read (reports, metrics, the FAIL tail).
//    The cap is per run of a trial (a retried trial appends a new run).
//  - metrics: read the values from what the program prints or writes its
//    own way ("val_loss=0.41", a regex, a CSV or JSON-lines file), for
//    programs that do not print the protocol below; see
//    objectives/command_metrics.h. A program that prints a valid report line
//    with a value is read by the protocol from that line on.
// The placeholder "{trial_dir}" (in argv, env and metrics.source.file) is a
// folder of the trial's own, <log_dir>/trial-<number> (created mode 0700
// when the config uses it; without a log_dir, a fresh folder in $TMPDIR or
// /tmp, removed when the trial ends); a space may not then name a param
// "trial_dir". A metrics file inside it left by an earlier run of the same
// trial number is removed before the program starts.
// Errors name the field: "objective.argv[3]: placeholder {lrr} names no
// param in space (did you mean 'lr'?)".
//
// The program's environment also holds
//  - HPSEARCH_PARAMS: the trial's params as a JSON object,
//  - HPSEARCH_TRIAL_NUMBER, HPSEARCH_STUDY (ObjectiveContext::study_name),
//  - HPSEARCH_THREADS (ObjectiveContext::threads), and OMP_NUM_THREADS with
//    the same value unless the environment or "env" sets it,
//  - CUDA_VISIBLE_DEVICES from ObjectiveContext::device: "cuda:N" gives the
//    N-th entry of the worker's own CUDA_VISIBLE_DEVICES (N itself when the
//    worker has none), so the program sees its one GPU as cuda:0; "cpu"
//    gives "" (no GPU).
// These names may not be set in "env". PYTHONUNBUFFERED=1 is set too unless
// the environment or "env" sets it (stdout is a pipe: Python would buffer
// its lines, and so intermediate values and pruning, until it exits).
//
// Protocol: the program reports by printing lines on stdout
//   hpsearch: {"step": 3, "value": 0.41}     an intermediate value
//   hpsearch: {"value": 0.38, "attrs": {...}} the final value (+ user attrs)
// ("value" may be a number, "nan", "inf" or "-inf"; Python's json.dumps
// literals NaN, Infinity, -Infinity are accepted; a later final value
// replaces an earlier one). Other lines, and stderr, go to the per-trial log
// file <log_dir>/trial-<number>.log (ObjectiveContext::log_dir; no file when
// it is ""), together with the command line, the exit status and any line
// starting with "hpsearch:" that is not a valid report (which is otherwise
// ignored). stdin is /dev/null (persistent mode: a pipe, below).
//
// Outcome of a trial:
//  - after each intermediate value the pruner is asked (Trial::report(),
//    Trial::should_prune()); on prune the program's process group gets
//    SIGTERM, SIGKILL after grace_s, and the trial ends PRUNED;
//  - exit code 0 with a final value: the trial's value (NaN: FAIL);
//  - with "metrics": exit code 0 without the metric ever seen: FAIL("metric
//    'x' (objective.metrics.name) was never seen ...", with the names the
//    output showed with a number and "did you mean 'y'?", ending with the
//    last lines of stdout and stderr together); a near miss of the name on
//    the program's first report-like line (MetricsCollector::typo_reason)
//    fails the trial there, stopping the program;
//  - a non-zero exit, death by a signal, or exit 0 without a final value:
//    FAIL, the reason ending with the last lines of stderr;
//  - the run is interrupted (Ctrl-C, the worker told to stop; checked
//    every 100 ms): the program is stopped as on prune and Interrupted is
//    thrown (the trial ends FAIL("interrupted") and is queued again);
//  - the program cannot be started: FAIL("cannot run 'x': ...");
//  - a "{name}" placeholder of a param inactive in this trial: FAIL naming
//    the argument (validation rejects "{name}" for conditional params).
// The program runs in its own process group (see objectives/child_process.h):
// it and every process it started in that group are killed when the trial
// ends, and when the worker exits.
//
// Persistent mode ("mode": "persistent"; default "per_trial", all of the
// above): the program is started once per objective (per worker: lazily, at
// its first trial; one program per trial running at the same time) and
// serves the following trials (objectives/persistent_program.h). argv and
// env may not hold placeholders (ConfigError naming objective.argv[i] /
// objective.env.NAME), and a metrics file must be the trial's own: its path
// holds {trial_dir} (ConfigError naming objective.metrics.source.file); the
// environment has HPSEARCH_MODE=persistent instead of HPSEARCH_PARAMS and
// HPSEARCH_TRIAL_NUMBER. Per trial:
//  - the worker writes one line of compact JSON to the program's stdin:
//      {"number": N, "params": {...}, "type": "trial"}
//    (params as in HPSEARCH_PARAMS; with "trial_dir": the trial's folder
//    when metrics.source.file uses {trial_dir}), and reads its output as
//    above (report lines, "metrics": the lines, or the file while the
//    trial runs) until the trial ends: a final value line
//    (hpsearch: {"value": v}), or a status line
//      hpsearch: {"status": "pruned"}                 the trial ends PRUNED
//      hpsearch: {"status": "fail", "reason": "..."}  FAIL("the program
//                                                     failed the trial: ...")
//      hpsearch: {"status": "done"}                   the value so far (the
//                                                     protocol's, or metrics')
//    (a status line in per-trial mode is logged and ignored);
//  - prune: the worker writes {"number": N, "type": "prune"} and waits up
//    to grace_s for the trial to end (any of the lines above, or the
//    program's exit); then the trial ends PRUNED. If it has not, the
//    program's group is killed (SIGKILL) and the next trial starts a new
//    program;
//  - timeout_s is per trial; a timed-out or interrupted trial stops the
//    program (SIGTERM, SIGKILL after grace_s) as in per-trial mode;
//  - the program exits during a trial: FAIL with the end of stderr ("the
//    program exited during the trial (exit code 1) ..."); the next trial
//    starts a new program. A program started for the trial that exits
//    with status 0 without ending it (a per-trial script) is told the
//    contract instead: FAIL("the program exited (exit code 0) during its
//    first trial without ending it: ... must read its trials on stdin ...
//    remove \"mode\": \"persistent\" ..."). An exit between trials is a restart: a program
//    that exits with status 0 before it wrote any line for the trial is
//    started again and given the trial once more (twice in a row: FAIL);
//  - each trial's output goes to its trial-<number>.log (what the program
//    prints between trials, to the next trial's log).
// When the objective is destroyed (the worker shuts down), each program's
// stdin is closed (end of file: no more trials); it gets grace_s to exit,
// then SIGTERM and SIGKILL after grace_s. examples/persistent/
// hpsearch_trials.py is a Python helper for the program's side.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "objectives/objective.h"

namespace hps {

// The registry entry for "command".
ObjectiveType command_objective_type();

// A param value as a command-line argument that reads back to the same
// value: integers in decimal, doubles in the shortest form that parses back
// to the same double ("0.001", "1e-05", "3", "inf"), strings verbatim, bools
// "true"/"false", null "null" (anything else: compact JSON).
std::string format_param_value(const Json& value);

// The argv of one trial: config["argv"] (already validated) with its
// placeholders filled from `params`. Throws Error("objective.argv[i]: ...")
// when a "{name}" placeholder names a param absent from `params`.
std::vector<std::string> command_argv(const Json& config, const Params& params);

// One trial's command line as the worker would start it, for `hpsearch
// validate`'s example: argv (command_argv's), the variables of
// config["env"] with their placeholders filled, and HPSEARCH_PARAMS and
// HPSEARCH_TRIAL_NUMBER (HPSEARCH_MODE=persistent instead in persistent
// mode). "{trial_dir}", "{checkpoint_dir}" and "{artifact_dir}" are written
// as `trial_dir`, `checkpoint_dir` and `artifact_dir`. The worker's own
// environment and the variables it sets per worker (threads, GPU) are left
// out. `config` is validated first (ConfigError naming the field); Error as
// command_argv. `program_problem`: why argv[0] would not start here
// (program_problem()), "" when it would or when argv[0] is a placeholder's
// value.
struct CommandLine {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string program_problem;
};
CommandLine command_line(const Json& config, const Params& params, std::int64_t number,
                         const std::string& trial_dir, const std::string& checkpoint_dir,
                         const std::string& artifact_dir = "");

// Why `program` (argv[0]) would not start from folder `cwd` ("" = this
// process's folder) as a worker here starts it (posix_spawnp): a name with
// a '/' is a path (relative to `cwd`) that must be an executable regular
// file; a name without one is looked up on PATH only, never in `cwd`.
// Returns "" when it would start, else the reason with what to write
// instead ("'train.py' is not on PATH (a name without '/' is looked up on
// PATH only): write './train.py', or run it through its interpreter:
// [\"python3\", \"train.py\", ...]"). Reads the file system only; never
// throws. A remote worker's machine may differ: callers say so.
std::string program_problem(const std::string& program, const std::string& cwd);

}  // namespace hps
