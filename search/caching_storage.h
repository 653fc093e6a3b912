// CachingStorage: the one cache of the trial history. It wraps any Storage
// and serves reads from memory: each study's trials as immutable snapshots
// (TrialPtr), kept current by the wrapper's own writes and reloaded when
// someone else changed the store.
//
//   auto storage = std::make_shared<hps::CachingStorage>(
//       std::make_shared<hps::SqliteStorage>("study.db"));   // what open_storage() does
//
// How it stays current:
//  - Own writes: every write goes to the inner storage first; then the
//    cached snapshot of the trial is replaced by a new one. An inner storage
//    that supports Storage::set_observer (SqliteStorage) says what each write
//    changed, as a read would give it (stored JSON types, bits of doubles,
//    times as stored), so nothing is read back; any other storage
//    (InMemoryStorage, a user's own) has the trial read back with
//    get_trial(). New trials (create_trial, claim_waiting_trial) come from
//    the inner call's result.
//  - Others' writes: before a read the inner storage's data_version() is
//    compared with the one the cache was filled at; a change (another
//    process or connection committed) drops everything, which is reloaded
//    on demand. Inside run_in_transaction() this is checked once (no other
//    writer can commit while it runs). A storage whose data_version() is
//    nullopt is read again before every read.
//  - Failures: a write that throws, or a run_in_transaction() whose fn
//    throws (the inner storage rolled back), drops everything.
// So a process that is the only writer of a study never re-reads it, and
// what it reads equals what a fresh connection reads, bit for bit.
//
// Study info (name, direction, config, attrs) is cached too and reloaded
// after any study write (it is small).
//
// Use the inner storage only through the wrapper once wrapped, and wrap it
// once: writes made on the inner object directly are not seen by the cache
// until data_version() changes (for SQLite: never, same connection).
//
// Thread safety: all methods may be called from any thread (one recursive
// mutex; run_in_transaction() holds it until it ends, so other threads wait
// rather than join it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "search/storage.h"

namespace hps {

class CachingStorage;

// An append-only read view of one study's trials in a CachingStorage, for
// readers that keep state per trial (the coordinator's bookkeeping of
// waiting/running/finished trials and the best one, a sampler's per-trial
// cache) and want to update it from what changed instead of rescanning or
// guessing whether a trial id was reused:
//
//   std::uint64_t seen = 0;                 // 0: nothing seen yet
//   auto changes = history.changes_since(seen);
//   if (changes.reset) mine.clear();
//   for (const TrialPtr& t : changes.trials) mine.put(t->number, t);  // add or replace
//   seen = changes.version;
//
// Between resets, trials are never removed or renumbered: new trials come at
// the end and a written trial's snapshot is replaced by a newer one. Each
// call first checks the store for others' writes (as any read does). Cheap
// to copy; valid while its CachingStorage lives.
class TrialHistory {
 public:
  // See TrialChanges. Throws StorageError if the study no longer exists.
  TrialChanges changes_since(std::uint64_t version) const;
  std::int64_t study_id() const { return study_id_; }

 private:
  friend class CachingStorage;
  TrialHistory(CachingStorage* storage, std::int64_t study_id)
      : storage_(storage), study_id_(study_id) {}

  CachingStorage* storage_;
  std::int64_t study_id_;
};

class CachingStorage : public Storage {
 public:
  // Wraps `inner` (registers itself as its observer when it supports one).
  // Throws StorageError if inner is null.
  explicit CachingStorage(std::shared_ptr<Storage> inner);
  // Unregisters from the inner storage.
  ~CachingStorage() override;
  CachingStorage(const CachingStorage&) = delete;
  CachingStorage& operator=(const CachingStorage&) = delete;

  // The wrapped storage (for what only it offers, e.g. SqliteStorage::path();
  // do not write through it).
  Storage& inner() const;

  // The append-only view of a study's trials (see TrialHistory). Throws
  // StorageError if there is no such study.
  TrialHistory history(std::int64_t study_id);

  // Storage: the inner storage's rules and errors; reads from memory.
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
  bool set_trial_state(std::int64_t trial_id, TrialState state,
                       std::optional<double> value = std::nullopt,
                       const std::string& fail_reason = "") override;
  void set_trial_user_attr(std::int64_t trial_id, const std::string& key,
                           const Json& value) override;
  void set_trial_system_attr(std::int64_t trial_id, const std::string& key,
                             const Json& value) override;
  // From memory when the trial's study is cached; else read from the inner
  // storage (and not cached).
  TrialPtr get_trial(std::int64_t trial_id) override;
  // These load the study's trials into the cache on first use.
  TrialPtr get_trial_by_number(std::int64_t study_id, std::int64_t number) override;
  std::vector<TrialPtr> get_all_trials(std::int64_t study_id,
                                       const std::vector<TrialState>& states = {}) override;
  std::int64_t count_trials(std::int64_t study_id,
                            const std::vector<TrialState>& states = {}) override;
  // Asked of the inner storage (its indexed queries), not of the cache: a
  // command that only counts or streams never loads the history.
  TrialCounts count_trials_by_state(std::int64_t study_id) override;
  TrialPtr best_trial(std::int64_t study_id) override;
  std::vector<StudySummary> list_study_summaries() override;
  void read_trials(std::int64_t study_id, const TrialQuery& query,
                   const TrialVisitor& visit) override;
  // The inner storage's transaction around fn; if fn throws, the cache is
  // dropped (the inner storage rolled back) and the exception propagates.
  void run_in_transaction(const std::function<void()>& fn) override;
  // The inner storage's.
  std::optional<std::int64_t> data_version() override;
  // The cache's change log (what TrialHistory::changes_since gives); loads
  // the study's trials into the cache on first use.
  std::optional<TrialChanges> trial_changes(std::int64_t study_id, std::uint64_t version) override;

 private:
  friend class TrialHistory;
  TrialChanges changes_since(std::int64_t study_id, std::uint64_t version);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hps
