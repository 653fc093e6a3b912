// Study and Trial: the tuning API (ask/tell, optimize, define-by-run).
//
//   auto storage = hps::open_storage("example.db");
//   auto study = hps::Study::load_if_exists(storage, "demo", hps::StudyDirection::kMinimize);
//   study.optimize([](hps::Trial& t) {
//     double x = t.suggest_float("x", -10, 10);
//     return (x - 2) * (x - 2);
//   }, {.n_trials = 100});
//   double best = study.best_value();
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "search/checkpoints.h"
#include "search/distributions.h"
#include "search/pruner.h"
#include "search/sampler.h"
#include "search/search_space.h"
#include "search/storage.h"
#include "search/trial.h"

namespace hps {

class Trial;
namespace checkpoints {
class LineageFolder;   // search/checkpoints.h
class ArtifactFolder;  // search/checkpoints.h
struct ArtifactSummary;
}  // namespace checkpoints

// Where a Trial's calls go: the in-process Study, or a remote coordinator
// (hps::Worker). Implementations must be thread-safe across trials.
class TrialBackend {
 public:
  virtual ~TrialBackend() = default;
  // Samples a value for a param not yet set in `trial` (external value).
  virtual Json suggest(Trial& trial, const std::string& name, const Distribution& distribution) = 0;
  // Stores an intermediate value; false if the step was already reported
  // (the first value is kept).
  virtual bool report(Trial& trial, std::int64_t step, double value) = 0;
  // Asks the pruner about the trial's newest report.
  virtual bool should_prune(Trial& trial) = 0;
  virtual void set_user_attr(Trial& trial, const std::string& key, const Json& value) = 0;
};

struct SuggestOptions {
  bool log = false;              // sample on a log scale (needs low > 0)
  std::optional<double> step{};  // quantization step (float); int default 1
};

// A running trial, handed to the objective. Not copyable; lives as long as
// the objective call (or until Study::tell()).
class Trial {
 public:
  // `params`: values already chosen (declared space); `fixed`: enqueued
  // values that define-by-run suggest calls take when they fit.
  Trial(TrialBackend* backend, std::int64_t trial_id, std::int64_t number, Params params,
        std::map<std::string, Distribution> distributions, Params fixed, const SearchSpace* space,
        std::atomic<bool>* interrupt = nullptr);
  Trial(const Trial&) = delete;
  Trial& operator=(const Trial&) = delete;
  Trial(Trial&&) = default;

  std::int64_t number() const { return number_; }
  std::int64_t trial_id() const { return trial_id_; }

  // Define-by-run suggestions. A param already set (declared space, enqueued
  // params, or an earlier call) returns the same value; the distribution
  // asked must equal the declared one when the study has a declared space,
  // else Error("suggest 'x': ... does not agree with the declared space").
  // Throws ConfigError for an invalid distribution (low > high, ...).
  double suggest_float(const std::string& name, double low, double high, SuggestOptions opt = {});
  std::int64_t suggest_int(const std::string& name, std::int64_t low, std::int64_t high,
                           SuggestOptions opt = {});
  Json suggest_categorical(const std::string& name, std::vector<Json> choices);
  Json suggest(const std::string& name, const Distribution& distribution);

  // The value of a param already set (declared space or earlier suggest);
  // throws Error if the param is absent (inactive or never suggested).
  // Returned by value: a later suggest may move the params (search/params.h).
  Json param(const std::string& name) const;
  bool has_param(const std::string& name) const { return params_.count(name) != 0; }
  // The params set so far; the reference and its iterators are valid until
  // the next suggest call (which may insert a param).
  const Params& params() const { return params_; }
  const std::map<std::string, Distribution>& distributions() const { return distributions_; }
  // Enqueued values not yet asked for by a suggest call.
  const Params& fixed_params() const { return fixed_; }

  // Reports an intermediate value at `step` (an epoch, an iteration; any
  // non-negative integer). A second report for the same step keeps the first
  // value and returns false (logged as a warning). Throws Interrupted if the
  // run was interrupted.
  bool report(std::int64_t step, double value);
  // Whether the pruner wants this trial stopped after its newest report;
  // then throw TrialPruned from the objective. Throws Interrupted if the run
  // was interrupted.
  bool should_prune();
  void set_user_attr(const std::string& key, const Json& value);
  // True once the run was interrupted (Ctrl-C, a worker told to stop, a lost
  // lease): report() and should_prune() then throw Interrupted. For
  // objectives that wait without reporting (the "command" objective waiting
  // on its program): poll this and throw Interrupted. Thread-safe.
  bool interrupted() const { return interrupt_ && interrupt_->load(); }

  // The newest step reported, if any.
  std::optional<std::int64_t> last_step() const { return last_step_; }
  std::optional<double> last_value() const { return last_value_; }

  // ---- Long trials (search/checkpoints.h; docs "Long trials").
  // The trial's checkpoint folder: an absolute path, shared by the trial
  // and its retries (its lineage), or "" when the runner gives none
  // (Study without StudyOptions::checkpoint_root). Save the training state
  // there, then report() the step: report() snapshots the folder before it
  // reports, and a retry starts with the folder as it was at the last
  // reported step.
  const std::string& checkpoint_dir() const;
  // On a retry that continues an earlier trial: the step its folder was
  // restored to (the last step reported with a snapshot); load the state
  // and go on with step + 1. nullopt on a first run, or when the snapshot
  // could not be used (then the folder is empty and the runner logged why).
  // The steps up to it are already the trial's intermediate values.
  std::optional<std::int64_t> resume_step() const { return resume_step_; }
  // For runners: the lineage folder report() snapshots, and the step it was
  // restored to.
  void set_checkpoint(std::shared_ptr<checkpoints::LineageFolder> folder,
                      std::optional<std::int64_t> resume_step);
  // For backends: the step whose snapshot the report in progress (or the
  // newest one) took; nullopt if none.
  std::optional<std::int64_t> snapshot_step() const { return snapshot_step_; }
  // For runners, once the objective returned or threw: removes the
  // lineage's folder if it holds no snapshot
  // (checkpoints::LineageFolder::remove_if_unused). Never throws.
  void drop_unused_checkpoint();

  // ---- Multi-process trials (search/resources.h; docs "Multi-process
  // trials"). Where this process stands among the trial's ranks, or
  // nullopt for a single-process trial. The command objective gives its
  // program these as the torchrun environment (RANK, WORLD_SIZE, ...).
  struct Ranks {
    int rank = 0;               // 0 .. world_size - 1; rank 0's result is the trial's
    int world_size = 1;         // processes of the trial
    int local_rank = 0;         // its place among the ranks on its host
    int local_world_size = 1;   // ranks on its host
    int group_rank = 0;         // the index of its host among the trial's hosts
    std::string master_addr{};  // rank 0's host ("127.0.0.1" on rank 0's own host)
    int master_port = 0;        // the rendezvous TCP port on master_addr
  };
  const std::optional<Ranks>& ranks() const { return ranks_; }
  // For runners: set before the objective runs.
  void set_ranks(Ranks ranks) { ranks_ = std::move(ranks); }
  // ---- User artifacts (search/checkpoints.h; docs "Keep files from a
  // trial"): files the trial keeps (plots, a final model, predictions),
  // apart from its checkpoints; like Optuna's upload_artifact.
  // Copies the regular file or folder `file_or_folder` into the trial's
  // artifact folder, under its own name (an earlier upload of the same name
  // is replaced). Kept once the trial ends, whatever its state; listed and
  // fetched with `hpsearch artifacts`. Throws Error naming the path when it
  // is missing, a symbolic link (or a folder holding one), neither a
  // regular file nor a folder, or when the trial's artifacts would pass
  // artifacts.max_artifact_bytes (StudyOptions::max_artifact_bytes); and
  // when the runner gives no artifact folder (a Study without
  // StudyOptions::artifact_root). Nothing is copied when it throws.
  void upload_artifact(const std::filesystem::path& file_or_folder);
  // The trial's artifact folder (absolute; a command objective's
  // HPSEARCH_ARTIFACT_DIR): whatever is there when the trial ends is kept.
  // "" when the runner gives none.
  const std::string& artifact_dir() const;
  // For runners: the folder upload_artifact() copies into; null: none.
  void set_artifact_folder(std::shared_ptr<checkpoints::ArtifactFolder> folder);
  const std::shared_ptr<checkpoints::ArtifactFolder>& artifact_folder() const { return artifacts_; }

  // For backends: record the value chosen for a param.
  void record_param(const std::string& name, const Json& value, const Distribution& d);

 private:
  void check_interrupt() const;

  TrialBackend* backend_;
  std::int64_t trial_id_;
  std::int64_t number_;
  Params params_;
  std::map<std::string, Distribution> distributions_;
  Params fixed_;
  const SearchSpace* space_;
  std::atomic<bool>* interrupt_;
  std::optional<std::int64_t> last_step_;
  std::optional<double> last_value_;
  std::shared_ptr<checkpoints::LineageFolder> checkpoint_;
  std::optional<std::int64_t> resume_step_;
  std::optional<std::int64_t> snapshot_step_;
  std::optional<Ranks> ranks_;
  std::shared_ptr<checkpoints::ArtifactFolder> artifacts_;
};

// The objective: returns the value to minimize or maximize. Throw
// TrialPruned to end the trial as PRUNED; any other exception ends it FAIL
// with the exception's message; a NaN result ends it FAIL.
using Objective = std::function<double(Trial&)>;

struct OptimizeOptions {
  std::optional<std::int64_t> n_trials{};  // trials to run in this call; default: no limit
  std::optional<double> timeout_s{};       // seconds; no new trial starts after it; default none
  int n_jobs = 1;                          // threads running trials at once (>= 1)
  // true: an exception in the objective fails the trial and the run goes on;
  // false (default, as Optuna): the trial is FAIL, then the exception is
  // rethrown once running trials end.
  bool catch_exceptions = false;
  // Called after each trial finishes (from the thread that ran it, under a
  // lock: callbacks never run concurrently).
  std::function<void(const FrozenTrial&)> callback{};
  // When set and true, no new trial starts; a running trial's report() and
  // should_prune() throw Interrupted, which ends it FAIL("interrupted") and
  // queues it again.
  std::atomic<bool>* stop = nullptr;
};

struct StudyOptions {
  // default: make_default_sampler() (a RandomSampler; search/sampler.h)
  std::shared_ptr<Sampler> sampler{};
  std::shared_ptr<Pruner> pruner{};  // default: NopPruner
  // A declared space: ask() samples all of it up front; suggest calls must
  // agree with it. Without one, params come from define-by-run calls only.
  std::optional<SearchSpace> space{};
  // Recorded as the trial's worker; default "host:pid".
  std::string worker{};
  // The folder under which each lineage gets its checkpoint folder
  // (Trial::checkpoint_dir(); search/checkpoints.h), made owner-only when
  // needed. Default "": trials have no checkpoint folder.
  std::string checkpoint_root{};
  // With checkpoint_root: whether trials get a folder (`checkpoints`) and
  // which lineage folders are kept once trials end (keep_best,
  // keep_pruned, keep_failed), as a coordinator keeps them
  // (Study::apply_retention). The size limits are not used here.
  checkpoints::ArtifactOptions artifacts{};
  // The folder under which each trial gets its user artifact folder
  // <artifact_root>/trial-<N> (Trial::upload_artifact, artifact_dir();
  // search/checkpoints.h), made owner-only when needed. When a trial ends
  // (tell), its files are listed in a manifest and the trial's system attr
  // "artifacts" says {"files": n, "bytes": b}. Default "": trials have no
  // artifact folder.
  std::string artifact_root{};
  // The most bytes of user artifacts one trial keeps. Default 16 GiB
  // (artifacts.max_artifact_bytes).
  std::uint64_t max_artifact_bytes = 16ULL << 30;
};

class Study {
 public:
  // Creates a new study; throws StorageError if the name exists.
  static Study create(std::shared_ptr<Storage> storage, const std::string& name,
                      StudyDirection direction, StudyOptions options = {},
                      const Json& config = Json());
  // Loads an existing study; throws StorageError if absent.
  static Study load(std::shared_ptr<Storage> storage, const std::string& name,
                    StudyOptions options = {});
  // Loads the study if it exists (its stored direction must equal
  // `direction`, else StorageError), creates it otherwise.
  static Study load_if_exists(std::shared_ptr<Storage> storage, const std::string& name,
                              StudyDirection direction, StudyOptions options = {},
                              const Json& config = Json());

  const std::string& name() const;
  std::int64_t study_id() const;
  StudyDirection direction() const;
  Storage& storage() const;
  const std::shared_ptr<Storage>& storage_ptr() const;
  const std::optional<SearchSpace>& space() const;
  Sampler& sampler() const;
  Pruner& pruner() const;

  // Starts a trial: the oldest WAITING (enqueued) one if any, else a new one;
  // with a declared space every active param is sampled now.
  // May throw SearchSpaceExhausted.
  Trial ask();
  // Ends a trial. A NaN value makes it FAIL ("objective returned NaN").
  // Returns the finished trial.
  TrialPtr tell(Trial& trial, double value);
  // Ends a trial with a state: PRUNED (value: the last intermediate value if
  // omitted), FAIL (reason in fail_reason), COMPLETE (value required).
  TrialPtr tell(Trial& trial, TrialState state, std::optional<double> value = std::nullopt,
                const std::string& fail_reason = "");
  // Both tell()s then apply checkpoint retention (apply_retention) to a
  // COMPLETE or PRUNED trial. A FAIL trial's folder is kept, as it may be
  // retried: optimize() applies retention once it decided (an interrupted
  // trial's retry continues from the folder); after a tell(FAIL) of your
  // own that you will not retry, call apply_retention(trial.number()).

  // Checkpoint retention once trial `number` ended (StudyOptions::artifacts;
  // checkpoints::retention_victims): removes the lineage folders no longer
  // kept (a PRUNED or unretried FAIL trial's own, unless keep_pruned /
  // keep_failed; the COMPLETE trials' beyond the best keep_best) and marks
  // each such trial's checkpoint attr {"deleted": true}, so the store never
  // names a folder that is gone. Nothing without checkpoint_root. Throws
  // StorageError if the store fails; a folder that cannot be removed is
  // left (remove_lineage never throws).
  void apply_retention(std::int64_t number);

  // Runs the objective until n_trials trials ran, the timeout passed, or
  // *stop became true. Safe with n_jobs threads sharing this Study.
  void optimize(const Objective& objective, const OptimizeOptions& options = {});

  // Queues a trial with these params (a WAITING trial served before new
  // samples). With a declared space, the params must be valid for it:
  // each in the space and in its distribution, and none inactive given the
  // other params enqueued (ConfigError("params.<name>", ...) otherwise);
  // missing active params are sampled at ask().
  TrialPtr enqueue_trial(const Params& params, const Json& system_attrs = Json::object());

  // The best COMPLETE trial (lowest value to minimize, highest to
  // maximize; ties go to the lower number), warm-start trials excepted
  // (lifecycle::is_best_candidate). Throws Error if there is none.
  TrialPtr best_trial() const;
  double best_value() const;
  std::vector<TrialPtr> trials(const std::vector<TrialState>& states = {}) const;
  // Finished trials that count towards a budget (COMPLETE, PRUNED, FAIL not
  // retried; warm-start trials never count).
  std::int64_t n_finished() const;

  void set_user_attr(const std::string& key, const Json& value);
  Json user_attrs() const;

  // Marks RUNNING trials left behind by dead processes as FAIL(reason) and
  // queues a retry of each with the same params. With `all` false, only
  // trials whose worker is "host:pid" on this host with that pid no longer
  // running; with `all` true, every RUNNING trial (the single-writer
  // coordinator on start-up). Returns how many were failed.
  int fail_stale_trials(const std::string& reason, bool all = false);

  struct Impl;  // implementation detail

 private:
  explicit Study(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// The default worker name of this process: "<hostname>:<pid>".
std::string default_worker_name();

}  // namespace hps
