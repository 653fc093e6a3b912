// Storages of every kind for tests that must hold on each (the storage
// contract, change-feed readers such as TrialView and the coordinator's
// mirror), and helpers to compare and write their trials.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "search/storage.h"

namespace hps::testsupport {

// A trial as a comparable text: what a reader can see of it (id, number,
// state, params, attrs, count of intermediate values, value).
std::string describe(const FrozenTrial& t);
std::vector<std::string> describe_all(const std::vector<TrialPtr>& trials);

// A storage a user wrote: forwards to an InMemoryStorage, keeps no change
// log (Storage::trial_changes' default).
class PlainStorage : public Storage {
 public:
  std::int64_t create_study(const std::string& n, StudyDirection d, const Json& c) override {
    return s_.create_study(n, d, c);
  }
  std::optional<std::int64_t> find_study(const std::string& n) override { return s_.find_study(n); }
  StudyInfo get_study(std::int64_t id) override { return s_.get_study(id); }
  std::vector<StudyInfo> list_studies() override { return s_.list_studies(); }
  void set_study_config(std::int64_t id, const Json& c) override { s_.set_study_config(id, c); }
  void set_study_user_attr(std::int64_t id, const std::string& k, const Json& v) override {
    s_.set_study_user_attr(id, k, v);
  }
  void set_study_system_attr(std::int64_t id, const std::string& k, const Json& v) override {
    s_.set_study_system_attr(id, k, v);
  }
  TrialPtr create_trial(std::int64_t id, const NewTrial& init) override {
    return s_.create_trial(id, init);
  }
  TrialPtr claim_waiting_trial(std::int64_t id, const std::string& w) override {
    return s_.claim_waiting_trial(id, w);
  }
  void set_trial_param(std::int64_t id, const std::string& n, const Json& v,
                       const Distribution& d) override {
    s_.set_trial_param(id, n, v, d);
  }
  bool set_trial_intermediate_value(std::int64_t id, std::int64_t step, double v) override {
    return s_.set_trial_intermediate_value(id, step, v);
  }
  bool set_trial_state(std::int64_t id, TrialState st, std::optional<double> v,
                       const std::string& r) override {
    return s_.set_trial_state(id, st, v, r);
  }
  void set_trial_user_attr(std::int64_t id, const std::string& k, const Json& v) override {
    s_.set_trial_user_attr(id, k, v);
  }
  void set_trial_system_attr(std::int64_t id, const std::string& k, const Json& v) override {
    s_.set_trial_system_attr(id, k, v);
  }
  TrialPtr get_trial(std::int64_t id) override { return s_.get_trial(id); }
  TrialPtr get_trial_by_number(std::int64_t id, std::int64_t n) override {
    return s_.get_trial_by_number(id, n);
  }
  std::vector<TrialPtr> get_all_trials(std::int64_t id,
                                       const std::vector<TrialState>& states) override {
    return s_.get_all_trials(id, states);
  }
  void run_in_transaction(const std::function<void()>& fn) override { s_.run_in_transaction(fn); }

 private:
  InMemoryStorage s_;
};

// One kind of storage: its name (a test suffix) and how to make one (`file`:
// a path in a test's temporary folder, for the kinds that use a file).
struct StorageKind {
  std::string name;
  std::function<std::shared_ptr<Storage>(const std::string& file)> make;
};

// Prints the kind's name in test failures (GoogleTest's printer).
void PrintTo(const StorageKind& kind, std::ostream* os);

// InMemory, CachingSqlite, CachingInMemory, PlainSqlite (SqliteStorage
// without the cache) and UserStorageWithoutFeed (PlainStorage).
std::vector<StorageKind> storage_kinds();

// One random write to the study's trials: a new RUNNING or WAITING trial, a
// param, an intermediate value, COMPLETE, a user attr, or a claim of the
// oldest WAITING trial.
void random_write(Storage& s, std::int64_t study, std::mt19937_64& rng);

}  // namespace hps::testsupport
