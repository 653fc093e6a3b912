// Storage: where studies and trials live. Two implementations:
// InMemoryStorage (this header) and SqliteStorage (search/sqlite_storage.h).
//
// The interface follows Optuna's BaseStorage: small, state-changing calls
// each applied atomically. Readers get immutable snapshots (TrialPtr).
// All methods are safe to call from several threads at once.
#pragma once

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
  Json user_attrs = Json::object();
  Json system_attrs = Json::object();
};

// What a trial is created with.
struct NewTrial {
  TrialState state = TrialState::kRunning;            // WAITING (enqueued) or RUNNING
  Params params;                                      // fixed params, may be empty
  std::map<std::string, Distribution> distributions;  // for each fixed param (optional)
  Json system_attrs = Json::object();
  std::string worker;
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
  // and contiguous even with several writer processes). Returns it.
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

  // Runs `fn` as one atomic unit: all its writes commit together or none do
  // (SQLite: one transaction; cheaper than one per call when batching).
  // Nested calls join the outer unit. The default just calls fn.
  virtual void run_in_transaction(const std::function<void()>& fn) { fn(); }
};

// Everything in memory; lost when the process ends. Thread-safe.
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
  void run_in_transaction(const std::function<void()>& fn) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Opens a storage from a URL or path: "memory" / ":memory:" gives an
// InMemoryStorage; "sqlite:///path" or a plain path gives a SqliteStorage
// (created if missing). Throws StorageError.
std::shared_ptr<Storage> open_storage(const std::string& url);

}  // namespace hps
