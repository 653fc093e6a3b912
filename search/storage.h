// Storage: where studies and trials live. Two implementations:
// InMemoryStorage (this header) and SqliteStorage (search/sqlite_storage.h),
// and one wrapper: CachingStorage (search/caching_storage.h) keeps the
// trial history of any Storage in memory (open_storage() puts it around a
// SqliteStorage).
//
// The interface follows Optuna's BaseStorage: small, state-changing calls
// each applied atomically. Readers get immutable snapshots (TrialPtr).
// All methods are safe to call from several threads at once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "search/errors.h"
#include "search/search_space.h"
#include "search/trial.h"

namespace hps {

struct StudyInfo {
  std::int64_t study_id = -1;
  std::string name;
  StudyDirection direction = StudyDirection::kMinimize;
  Json config = Json();  // the study's space.json document (null if none)
  // Why the stored document could not be read (a store edited by hand: text
  // that does not parse as JSON, a key twice, a number beyond a double's
  // range), naming the row and column; `config` is then null. Empty when it
  // was read. Commands that use the settings refuse such a study (exit 2);
  // the read commands show the rest of it.
  std::string config_error;
  Json user_attrs = Json::object();
  Json system_attrs = Json::object();
};

// What a trial is created with.
struct NewTrial {
  TrialState state = TrialState::kRunning;  // WAITING (enqueued) or RUNNING
  Params params;                            // fixed params, may be empty
  DistributionMap distributions;            // for each fixed param (optional)
  Json system_attrs = Json::object();
  std::string worker;

  // For a trial copied from elsewhere (hpsearch import; Optuna's
  // create_new_trial(template_trial)): it is created as given, in one write.
  // `state` may also be COMPLETE (value required, not NaN), PRUNED or FAIL;
  // a finished trial gets value (if set and not NaN), datetime_complete
  // (default now) and fail_reason (FAIL only). datetime_start: default now
  // for RUNNING and finished trials, none for WAITING.
  std::optional<TimePoint> datetime_start;
  std::optional<TimePoint> datetime_complete;
  std::optional<double> value;
  std::map<std::int64_t, double> intermediate_values;  // step -> value (NaN allowed)
  Json user_attrs = Json::object();
  std::string fail_reason;
};

// The trials of a study counted by state (Storage::count_trials_by_state).
struct TrialCounts {
  std::array<std::int64_t, 5> by_state{};  // indexed by the TrialState's value
  // Trials that count as finished (FrozenTrial::counts_as_finished: COMPLETE,
  // PRUNED, or FAIL not retried; never a warm-start copy).
  std::int64_t finished = 0;

  std::int64_t count(TrialState state) const { return by_state[static_cast<std::size_t>(state)]; }
  std::int64_t total() const;
};

// A study with its trial counts (Storage::list_study_summaries).
struct StudySummary {
  StudyInfo info;
  TrialCounts counts;
};

// The order of Storage::read_trials.
enum class TrialOrder {
  kNumber,  // by trial number, ascending
  // Trials with a value first, best first in the study's direction (lowest
  // value to minimize, highest to maximize), ties by number; then the
  // trials without a value by number. Every state and warm-start copies
  // take part (this is an order, not the best-trial rule).
  kValue,
};

// Which trials Storage::read_trials gives, and how.
struct TrialQuery {
  std::vector<TrialState> states;  // only trials in these states; default empty = all
  // Only trials numbered >= since_number (e.g. the trials added since the
  // last look). Default none: from trial 0.
  std::optional<std::int64_t> since_number;
  TrialOrder order = TrialOrder::kNumber;  // default by number
  // At most this many trials (after filtering and ordering). Default none:
  // all. Must be >= 0.
  std::optional<std::int64_t> limit;
  // Trials read from the store per round trip: memory holds about one
  // batch. Default 512; larger means fewer queries, more memory. Must be >= 1.
  std::size_t batch_size = 512;

  // Throws ConfigError naming the field ("limit", "batch_size").
  void validate() const;
};

// What changed in a study's trials since a reader last asked
// (Storage::trial_changes, TrialHistory::changes_since).
struct TrialChanges {
  // Pass it to the next call.
  std::uint64_t version = 0;
  // true: the reader must forget what it kept and take `trials` as the whole
  // history (first call, or the store's log cannot answer from `version`:
  // another process wrote, a transaction rolled back, or the change log was
  // trimmed).
  bool reset = false;
  // reset: every trial in number order. Otherwise the trials added or
  // changed since `version`, each once (its newest snapshot), in number
  // order.
  std::vector<TrialPtr> trials;
};

// Called once per trial by Storage::read_trials, in the query's order.
using TrialVisitor = std::function<void(const TrialPtr&)>;

// Throws StorageError unless `init` can be created: user_attrs and
// system_attrs objects, a distribution only for a param given, a COMPLETE
// trial with a value that is not NaN, a WAITING trial with no end time and
// no intermediate value. The rules of every Storage::create_trial.
void check_new_trial(const NewTrial& init);

// How a storage tells a cache of its trials (CachingStorage) what its own
// writes changed, so the cache stays current without reading trials back.
// `edit` applied to the trial's snapshot as a read gave it just before the
// write gives exactly what a read gives after it (stored forms: JSON types,
// bits of doubles, times as stored).
using TrialEdit = std::function<void(FrozenTrial&)>;

class StorageObserver {
 public:
  virtual ~StorageObserver() = default;
  // Called by the thread that writes, inside the write (after its change is
  // made, before it commits; a write that then fails throws to its caller).
  // Not called for create_trial and claim_waiting_trial (they return the new
  // snapshot) nor for writes that change nothing (set_trial_state and
  // set_trial_intermediate_value returning false).
  virtual void trial_written(std::int64_t trial_id, const TrialEdit& edit) = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;

  // --- studies ---------------------------------------------------------
  // Creates a study; throws StorageError if the name is taken. Any UTF-8
  // name is allowed (empty is refused).
  virtual std::int64_t create_study(const std::string& name, StudyDirection direction,
                                    const Json& config) = 0;
  // nullopt if no study has that name.
  virtual std::optional<std::int64_t> find_study(const std::string& name) = 0;
  virtual StudyInfo get_study(std::int64_t study_id) = 0;  // throws StorageError if absent
  virtual std::vector<StudyInfo> list_studies() = 0;
  virtual void set_study_config(std::int64_t study_id, const Json& config) = 0;
  virtual void set_study_user_attr(std::int64_t study_id, const std::string& key,
                                   const Json& value) = 0;
  virtual void set_study_system_attr(std::int64_t study_id, const std::string& key,
                                     const Json& value) = 0;

  // --- trials ----------------------------------------------------------
  // Creates a trial numbered max(number)+1 in the study (numbers are unique
  // and contiguous even with several writer processes). Returns it. Throws
  // StorageError for a state other than WAITING/RUNNING unless the trial is
  // copied (see NewTrial), for COMPLETE without a value or with NaN, and for
  // a non-object user_attrs/system_attrs.
  virtual TrialPtr create_trial(std::int64_t study_id, const NewTrial& init) = 0;
  // Atomically moves the lowest-numbered WAITING trial to RUNNING (setting
  // start time and worker) and returns it; nullopt if none is waiting.
  virtual TrialPtr claim_waiting_trial(std::int64_t study_id, const std::string& worker) = 0;
  // Sets a param of a RUNNING trial (external value + its distribution).
  // Throws StorageError if the trial is finished or the param already set
  // with a different value.
  virtual void set_trial_param(std::int64_t trial_id, const std::string& name, const Json& value,
                               const Distribution& distribution) = 0;
  // Records an intermediate value. A second report for the same step keeps
  // the first value and returns false; returns true when stored. NaN is
  // stored as NaN. Throws StorageError if the trial is finished.
  virtual bool set_trial_intermediate_value(std::int64_t trial_id, std::int64_t step,
                                            double value) = 0;
  // Moves a trial to `state`. For COMPLETE, `value` is required and must not
  // be NaN (callers turn NaN into FAIL). Sets the completion time for
  // finished states. Returns false (and changes nothing) if the trial is
  // already finished.
  virtual bool set_trial_state(std::int64_t trial_id, TrialState state,
                               std::optional<double> value = std::nullopt,
                               const std::string& fail_reason = "") = 0;
  virtual void set_trial_user_attr(std::int64_t trial_id, const std::string& key,
                                   const Json& value) = 0;
  virtual void set_trial_system_attr(std::int64_t trial_id, const std::string& key,
                                     const Json& value) = 0;

  virtual TrialPtr get_trial(std::int64_t trial_id) = 0;  // throws if absent
  virtual TrialPtr get_trial_by_number(std::int64_t study_id, std::int64_t number) = 0;
  // All trials of the study in number order, optionally only those in
  // `states`. Snapshots: cheap to copy (shared pointers).
  virtual std::vector<TrialPtr> get_all_trials(std::int64_t study_id,
                                               const std::vector<TrialState>& states = {}) = 0;
  virtual std::int64_t count_trials(std::int64_t study_id,
                                    const std::vector<TrialState>& states = {});

  // --- reads that do not load the history ---------------------------
  // The defaults below work on get_all_trials(); SqliteStorage answers them
  // with indexed SQL queries (constant memory), InMemoryStorage without
  // copying the history. All throw StorageError if the study is absent.

  // The study's trials counted by state, and how many count as finished.
  virtual TrialCounts count_trials_by_state(std::int64_t study_id);
  // The best trial of the study in its direction (lifecycle::best_trial's
  // answer: is_best_candidate, ranks_before), or null if it has none.
  virtual TrialPtr best_trial(std::int64_t study_id);
  // Every study (as list_studies(), by id) with its trial counts.
  virtual std::vector<StudySummary> list_study_summaries();
  // Calls `visit` for each trial of the study that `query` selects, in its
  // order, reading query.batch_size trials at a time: one consistent
  // snapshot for SqliteStorage (one read transaction around the whole
  // walk). `visit` must not write to this storage (SqliteStorage holds its
  // lock and a read transaction while it runs); an exception from it stops
  // the walk and propagates. Throws ConfigError for a bad query
  // (TrialQuery::validate). Memory: one batch, except TrialOrder::kValue,
  // which SQLite sorts in memory (about 40 bytes per selected trial) and
  // InMemoryStorage sorts as a vector of pointers.
  virtual void read_trials(std::int64_t study_id, const TrialQuery& query,
                           const TrialVisitor& visit);

  // Runs `fn` as one atomic unit: all its writes commit together or none do
  // (SQLite: one transaction; cheaper than one per call when batching).
  // Nested calls join the outer unit. The default just calls fn.
  // While fn runs, no other writer commits to the store (SQLite: the write
  // lock is held; InMemoryStorage: its mutex).
  virtual void run_in_transaction(const std::function<void()>& fn) { fn(); }

  // --- change tracking (what CachingStorage needs) --------------------
  // A number that changes when the stored data was changed other than
  // through this object (another process or connection committed), or
  // nullopt when the storage cannot tell (the default: then a cache reads
  // everything again before each read). Own writes do not change it.
  // SqliteStorage: PRAGMA data_version; InMemoryStorage: always 0.
  virtual std::optional<std::int64_t> data_version() { return std::nullopt; }
  // Registers `observer` (null: none) to be told of this object's writes to
  // trials (StorageObserver). Returns false if this storage cannot tell
  // (the default; then a cache reads a trial back after writing it).
  virtual bool set_observer(StorageObserver* observer) {
    (void)observer;
    return false;
  }

  // --- change feed (what Study, the coordinator and samplers' caches read)
  // The study's trials added or changed since `version` (0, or the version
  // of an earlier answer for the same study of this object): O(changes),
  // not O(trials), for readers that keep a copy of the history and update
  // it (TrialView). Between resets, trials are never removed or renumbered.
  // nullopt when this storage keeps no change log (the default; a reader
  // then reads get_all_trials() instead). CachingStorage and
  // InMemoryStorage keep one. Throws StorageError if the study is absent.
  virtual std::optional<TrialChanges> trial_changes(std::int64_t study_id, std::uint64_t version) {
    (void)study_id;
    (void)version;
    return std::nullopt;
  }
};

// Everything in memory; lost when the process ends. Thread-safe. Each
// write costs O(1) in the number of trials (a write inside
// run_in_transaction() also keeps the old snapshot for a rollback), and
// claim_waiting_trial() skips the trials before the lowest WAITING one.
class InMemoryStorage : public Storage {
 public:
  InMemoryStorage();
  ~InMemoryStorage() override;

  std::int64_t create_study(const std::string& name, StudyDirection direction,
                            const Json& config) override;
  std::optional<std::int64_t> find_study(const std::string& name) override;
  StudyInfo get_study(std::int64_t study_id) override;
  std::vector<StudyInfo> list_studies() override;
  void set_study_config(std::int64_t study_id, const Json& config) override;
  void set_study_user_attr(std::int64_t study_id, const std::string& key,
                           const Json& value) override;
  void set_study_system_attr(std::int64_t study_id, const std::string& key,
                             const Json& value) override;
  TrialPtr create_trial(std::int64_t study_id, const NewTrial& init) override;
  TrialPtr claim_waiting_trial(std::int64_t study_id, const std::string& worker) override;
  void set_trial_param(std::int64_t trial_id, const std::string& name, const Json& value,
                       const Distribution& distribution) override;
  bool set_trial_intermediate_value(std::int64_t trial_id, std::int64_t step,
                                    double value) override;
  bool set_trial_state(std::int64_t trial_id, TrialState state, std::optional<double> value,
                       const std::string& fail_reason) override;
  void set_trial_user_attr(std::int64_t trial_id, const std::string& key,
                           const Json& value) override;
  void set_trial_system_attr(std::int64_t trial_id, const std::string& key,
                             const Json& value) override;
  TrialPtr get_trial(std::int64_t trial_id) override;
  TrialPtr get_trial_by_number(std::int64_t study_id, std::int64_t number) override;
  std::vector<TrialPtr> get_all_trials(std::int64_t study_id,
                                       const std::vector<TrialState>& states) override;
  TrialCounts count_trials_by_state(std::int64_t study_id) override;
  TrialPtr best_trial(std::int64_t study_id) override;
  std::vector<StudySummary> list_study_summaries() override;
  void read_trials(std::int64_t study_id, const TrialQuery& query,
                   const TrialVisitor& visit) override;
  void run_in_transaction(const std::function<void()>& fn) override;
  // Always 0: only this object changes the data.
  std::optional<std::int64_t> data_version() override;
  // From a change log per study (a rolled-back transaction resets readers).
  std::optional<TrialChanges> trial_changes(std::int64_t study_id, std::uint64_t version) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Opens a storage from a URL or path: "memory" / ":memory:" gives an
// InMemoryStorage; "sqlite:///path" or a plain path gives a SqliteStorage
// (created if missing) inside a CachingStorage (search/caching_storage.h).
// Throws StorageError.
std::shared_ptr<Storage> open_storage(const std::string& url);

// What Storage::read_trials gives, from a full list of the study's trials
// (any order): the query's filter, order and limit applied. The reference
// that the storages' own queries are tested against. `direction` is the
// study's (for TrialOrder::kValue).
std::vector<TrialPtr> select_trials(std::vector<TrialPtr> trials, const TrialQuery& query,
                                    StudyDirection direction);
// The counts of count_trials_by_state() from a full list of trials.
TrialCounts tally_trials(const std::vector<TrialPtr>& trials);

}  // namespace hps
