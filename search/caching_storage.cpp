// CachingStorage: see caching_storage.h for the rules.
#include "search/caching_storage.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "search/trial_view.h"

namespace hps {
namespace {

bool by_number(const TrialPtr& t, std::int64_t number) { return t->number < number; }

bool state_in(TrialState s, const std::vector<TrialState>& states) {
  return states.empty() || std::find(states.begin(), states.end(), s) != states.end();
}

// The cached trials of one study.
struct StudyTrials {
  std::vector<TrialPtr> trials;  // number order
  // The changes since the study was loaded (readers from before start over).
  TrialChangeLog log;
};

struct Location {
  std::int64_t study_id;
  std::int64_t number;
};

}  // namespace

struct CachingStorage::Impl final : StorageObserver {
  explicit Impl(std::shared_ptr<Storage> s) : inner(std::move(s)) {}

  std::shared_ptr<Storage> inner;
  bool observed = false;  // inner tells its writes (set_observer)
  std::recursive_mutex mutex;
  int depth = 0;                             // run_in_transaction levels open
  bool checked_in_txn = false;               // data_version checked in this transaction
  std::optional<std::int64_t> seen_version;  // inner's data_version the cache matches
  std::uint64_t version = 0;                 // history versions handed out
  std::optional<std::vector<StudyInfo>> studies;
  std::unordered_map<std::int64_t, StudyTrials> trials;  // by study
  std::unordered_map<std::int64_t, Location> where;      // trial_id -> its cached slot

  void drop() {
    studies.reset();
    trials.clear();
    where.clear();
  }

  // Drops the cache if someone else changed the store since it was filled.
  void refresh() {
    if (depth > 0 && checked_in_txn) return;
    auto v = inner->data_version();
    if (!v || v != seen_version) drop();
    seen_version = v;
    if (depth > 0) checked_in_txn = true;
  }

  std::vector<StudyInfo>& all_studies() {
    if (!studies) studies = inner->list_studies();
    return *studies;
  }

  // The cached trials of a study, loaded on first use (throws if absent).
  StudyTrials& study_trials(std::int64_t study_id) {
    auto it = trials.find(study_id);
    if (it != trials.end()) return it->second;
    StudyTrials loaded;
    loaded.trials = inner->get_all_trials(study_id, {});
    loaded.log.reset(++version);
    for (const auto& t : loaded.trials) where[t->trial_id] = {study_id, t->number};
    return trials.emplace(study_id, std::move(loaded)).first->second;
  }

  // The cached slot of a trial, or null when its study is not cached.
  TrialPtr* slot(std::int64_t trial_id, StudyTrials** study = nullptr) {
    auto w = where.find(trial_id);
    if (w == where.end()) return nullptr;
    auto it = trials.find(w->second.study_id);
    if (it == trials.end()) return nullptr;
    auto& list = it->second.trials;
    auto pos = find_trial_number(list, w->second.number);
    if (pos == list.end() || (*pos)->trial_id != trial_id) return nullptr;
    if (study) *study = &it->second;
    return &list[static_cast<std::size_t>(pos - list.cbegin())];
  }

  void log_change(StudyTrials& st, std::int64_t number) {
    st.log.record(++version, number, st.trials.size());
  }

  // Puts a new snapshot of a trial of `study_id` in the cache (when the
  // study is cached): replaces the one with its number, else inserted.
  void place(std::int64_t study_id, const TrialPtr& t) {
    auto it = trials.find(study_id);
    if (it == trials.end()) return;
    auto& list = it->second.trials;
    if (auto found = find_trial_number(list, t->number); found != list.end()) {
      auto& pos = list[static_cast<std::size_t>(found - list.cbegin())];
      if (pos->trial_id != t->trial_id) where.erase(pos->trial_id);
      pos = t;
    } else if (list.empty() || list.back()->number < t->number) {
      list.push_back(t);
    } else {
      list.insert(std::lower_bound(list.begin(), list.end(), t->number, by_number), t);
    }
    where[t->trial_id] = {study_id, t->number};
    log_change(it->second, t->number);
  }

  // After a write to a trial: a storage that does not tell its writes has
  // the trial read back (when it is cached).
  void written(std::int64_t trial_id) {
    if (observed) return;  // trial_written() did it
    auto w = where.find(trial_id);
    if (w == where.end()) return;
    place(w->second.study_id, inner->get_trial(trial_id));
  }

  // StorageObserver: the inner storage wrote to a trial (this thread, inside
  // one of our calls, so the mutex is held).
  void trial_written(std::int64_t trial_id, const TrialEdit& edit) override {
    StudyTrials* st = nullptr;
    TrialPtr* s = slot(trial_id, &st);
    if (!s) return;
    auto t = std::make_shared<FrozenTrial>(**s);
    edit(*t);
    *s = t;
    log_change(*st, t->number);
  }

  // Runs a write on the inner storage; if it throws, the cache is dropped
  // (a rollback may have undone what it holds).
  template <class F>
  auto guarded(F&& f) {
    try {
      return f();
    } catch (...) {
      drop();
      throw;
    }
  }

  // A write to a study (its settings or attrs), under the mutex: `f(inner)`,
  // then the study list is read again at the next read.
  template <class F>
  void study_write(F&& f) {
    std::lock_guard lock(mutex);
    guarded([&] {
      f(*inner);
      studies.reset();
    });
  }

  // A write to a trial, under the mutex: `f(inner)` returns whether it
  // wrote; if so, the cached trial takes it (through the observer, or read
  // back). Returns what `f` returned.
  template <class F>
  bool trial_write(std::int64_t trial_id, F&& f) {
    std::lock_guard lock(mutex);
    return guarded([&] {
      if (!f(*inner)) return false;
      written(trial_id);
      return true;
    });
  }
};

// ------------------------------------------------------------------ TrialHistory

TrialChanges TrialHistory::changes_since(std::uint64_t version) const {
  return storage_->changes_since(study_id_, version);
}

TrialChanges CachingStorage::changes_since(std::int64_t study_id, std::uint64_t version) {
  std::lock_guard lock(impl_->mutex);
  impl_->refresh();
  StudyTrials& st = impl_->study_trials(study_id);
  return st.log.changes(st.trials, version, impl_->version);
}

std::optional<TrialChanges> CachingStorage::trial_changes(std::int64_t study_id,
                                                          std::uint64_t version) {
  return changes_since(study_id, version);
}

// ------------------------------------------------------------------ CachingStorage

CachingStorage::CachingStorage(std::shared_ptr<Storage> inner) {
  if (!inner) throw StorageError("CachingStorage: the inner storage is null");
  impl_ = std::make_unique<Impl>(std::move(inner));
  impl_->observed = impl_->inner->set_observer(impl_.get());
}

CachingStorage::~CachingStorage() {
  if (impl_->observed) impl_->inner->set_observer(nullptr);
}

Storage& CachingStorage::inner() const { return *impl_->inner; }

TrialCounts CachingStorage::count_trials_by_state(std::int64_t study_id) {
  return impl_->inner->count_trials_by_state(study_id);
}

TrialPtr CachingStorage::best_trial(std::int64_t study_id) {
  return impl_->inner->best_trial(study_id);
}

std::vector<StudySummary> CachingStorage::list_study_summaries() {
  return impl_->inner->list_study_summaries();
}

void CachingStorage::read_trials(std::int64_t study_id, const TrialQuery& query,
                                 const TrialVisitor& visit) {
  impl_->inner->read_trials(study_id, query, visit);
}

TrialHistory CachingStorage::history(std::int64_t study_id) {
  std::lock_guard lock(impl_->mutex);
  impl_->refresh();
  impl_->study_trials(study_id);  // throws if absent
  return TrialHistory(this, study_id);
}

std::int64_t CachingStorage::create_study(const std::string& name, StudyDirection direction,
                                          const Json& config) {
  std::lock_guard lock(impl_->mutex);
  return impl_->guarded([&] {
    auto id = impl_->inner->create_study(name, direction, config);
    impl_->studies.reset();
    return id;
  });
}

std::optional<std::int64_t> CachingStorage::find_study(const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  impl_->refresh();
  for (const auto& info : impl_->all_studies())
    if (info.name == name) return info.study_id;
  return std::nullopt;
}

StudyInfo CachingStorage::get_study(std::int64_t study_id) {
  std::lock_guard lock(impl_->mutex);
  impl_->refresh();
  for (const auto& info : impl_->all_studies())
    if (info.study_id == study_id) return info;
  return impl_->inner->get_study(study_id);  // its error for an unknown id
}

std::vector<StudyInfo> CachingStorage::list_studies() {
  std::lock_guard lock(impl_->mutex);
  impl_->refresh();
  return impl_->all_studies();
}

void CachingStorage::set_study_config(std::int64_t study_id, const Json& config) {
  impl_->study_write([&](Storage& inner) { inner.set_study_config(study_id, config); });
}

void CachingStorage::set_study_user_attr(std::int64_t study_id, const std::string& key,
                                         const Json& value) {
  impl_->study_write([&](Storage& inner) { inner.set_study_user_attr(study_id, key, value); });
}

void CachingStorage::set_study_system_attr(std::int64_t study_id, const std::string& key,
                                           const Json& value) {
  impl_->study_write([&](Storage& inner) { inner.set_study_system_attr(study_id, key, value); });
}

TrialPtr CachingStorage::create_trial(std::int64_t study_id, const NewTrial& init) {
  std::lock_guard lock(impl_->mutex);
  return impl_->guarded([&] {
    TrialPtr t = impl_->inner->create_trial(study_id, init);
    impl_->place(study_id, t);
    return t;
  });
}

TrialPtr CachingStorage::claim_waiting_trial(std::int64_t study_id, const std::string& worker) {
  std::lock_guard lock(impl_->mutex);
  return impl_->guarded([&] {
    TrialPtr t = impl_->inner->claim_waiting_trial(study_id, worker);
    if (t) impl_->place(study_id, t);
    return t;
  });
}

void CachingStorage::set_trial_param(std::int64_t trial_id, const std::string& name,
                                     const Json& value, const Distribution& distribution) {
  impl_->trial_write(trial_id, [&](Storage& inner) {
    inner.set_trial_param(trial_id, name, value, distribution);
    return true;
  });
}

bool CachingStorage::set_trial_intermediate_value(std::int64_t trial_id, std::int64_t step,
                                                  double value) {
  return impl_->trial_write(trial_id, [&](Storage& inner) {
    return inner.set_trial_intermediate_value(trial_id, step, value);
  });
}

bool CachingStorage::set_trial_state(std::int64_t trial_id, TrialState state,
                                     std::optional<double> value, const std::string& fail_reason) {
  return impl_->trial_write(trial_id, [&](Storage& inner) {
    return inner.set_trial_state(trial_id, state, value, fail_reason);
  });
}

void CachingStorage::set_trial_user_attr(std::int64_t trial_id, const std::string& key,
                                         const Json& value) {
  impl_->trial_write(trial_id, [&](Storage& inner) {
    inner.set_trial_user_attr(trial_id, key, value);
    return true;
  });
}

void CachingStorage::set_trial_system_attr(std::int64_t trial_id, const std::string& key,
                                           const Json& value) {
  impl_->trial_write(trial_id, [&](Storage& inner) {
    inner.set_trial_system_attr(trial_id, key, value);
    return true;
  });
}

TrialPtr CachingStorage::get_trial(std::int64_t trial_id) {
  std::lock_guard lock(impl_->mutex);
  impl_->refresh();
  if (TrialPtr* s = impl_->slot(trial_id)) return *s;
  return impl_->inner->get_trial(trial_id);
}

TrialPtr CachingStorage::get_trial_by_number(std::int64_t study_id, std::int64_t number) {
  std::lock_guard lock(impl_->mutex);
  impl_->refresh();
  const auto& list = impl_->study_trials(study_id).trials;
  auto pos = find_trial_number(list, number);
  if (pos == list.end())
    throw StorageError("study id " + std::to_string(study_id) + " has no trial number " +
                       std::to_string(number));
  return *pos;
}

std::vector<TrialPtr> CachingStorage::get_all_trials(std::int64_t study_id,
                                                     const std::vector<TrialState>& states) {
  std::lock_guard lock(impl_->mutex);
  impl_->refresh();
  const auto& list = impl_->study_trials(study_id).trials;
  if (states.empty()) return list;
  std::vector<TrialPtr> out;
  for (const auto& t : list)
    if (state_in(t->state, states)) out.push_back(t);
  return out;
}

std::int64_t CachingStorage::count_trials(std::int64_t study_id,
                                          const std::vector<TrialState>& states) {
  std::lock_guard lock(impl_->mutex);
  impl_->refresh();
  const auto& list = impl_->study_trials(study_id).trials;
  return static_cast<std::int64_t>(std::count_if(
      list.begin(), list.end(), [&](const TrialPtr& t) { return state_in(t->state, states); }));
}

void CachingStorage::run_in_transaction(const std::function<void()>& fn) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  const bool top = m.depth == 0;
  ++m.depth;
  try {
    m.inner->run_in_transaction(fn);
  } catch (...) {
    --m.depth;
    if (top) m.checked_in_txn = false;
    m.drop();
    throw;
  }
  --m.depth;
  if (top) m.checked_in_txn = false;
}

std::optional<std::int64_t> CachingStorage::data_version() {
  std::lock_guard lock(impl_->mutex);
  return impl_->inner->data_version();
}

}  // namespace hps
