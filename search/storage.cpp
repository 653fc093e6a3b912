#include "search/storage.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "search/caching_storage.h"
#include "search/printable.h"
#include "search/sqlite_storage.h"
#include "search/trial_lifecycle.h"
#include "search/trial_view.h"
#include "search/util/storage_url.h"

namespace hps {

std::int64_t Storage::count_trials(std::int64_t study_id, const std::vector<TrialState>& states) {
  return static_cast<std::int64_t>(get_all_trials(study_id, states).size());
}

namespace {

bool state_in(TrialState s, const std::vector<TrialState>& states) {
  return states.empty() || std::find(states.begin(), states.end(), s) != states.end();
}

// Whether `a` comes before `b` in TrialOrder::kValue.
bool value_order_before(StudyDirection direction, const FrozenTrial& a, const FrozenTrial& b) {
  if (a.value.has_value() != b.value.has_value()) return a.value.has_value();
  if (a.value && *a.value != *b.value)
    return direction == StudyDirection::kMaximize ? *a.value > *b.value : *a.value < *b.value;
  return a.number < b.number;
}

}  // namespace

std::int64_t TrialCounts::total() const {
  std::int64_t n = 0;
  for (auto c : by_state) n += c;
  return n;
}

void TrialQuery::validate() const {
  if (limit && *limit < 0)
    throw ConfigError("limit", "must be >= 0, got " + std::to_string(*limit));
  if (batch_size < 1) throw ConfigError("batch_size", "must be >= 1, got 0");
}

std::vector<TrialPtr> select_trials(std::vector<TrialPtr> trials, const TrialQuery& query,
                                    StudyDirection direction) {
  query.validate();
  std::erase_if(trials, [&](const TrialPtr& t) {
    return !state_in(t->state, query.states) ||
           (query.since_number && t->number < *query.since_number);
  });
  if (query.order == TrialOrder::kValue)
    std::sort(trials.begin(), trials.end(), [&](const TrialPtr& a, const TrialPtr& b) {
      return value_order_before(direction, *a, *b);
    });
  else
    std::sort(trials.begin(), trials.end(),
              [](const TrialPtr& a, const TrialPtr& b) { return a->number < b->number; });
  if (query.limit && static_cast<std::size_t>(*query.limit) < trials.size())
    trials.resize(static_cast<std::size_t>(*query.limit));
  return trials;
}

TrialCounts tally_trials(const std::vector<TrialPtr>& trials) {
  TrialCounts counts;
  for (const auto& t : trials) {
    counts.by_state[static_cast<std::size_t>(t->state)]++;
    if (t->counts_as_finished()) ++counts.finished;
  }
  return counts;
}

TrialCounts Storage::count_trials_by_state(std::int64_t study_id) {
  return tally_trials(get_all_trials(study_id));
}

TrialPtr Storage::best_trial(std::int64_t study_id) {
  StudyDirection direction = get_study(study_id).direction;
  return lifecycle::best_trial(direction, get_all_trials(study_id));
}

std::vector<StudySummary> Storage::list_study_summaries() {
  std::vector<StudySummary> out;
  for (auto& info : list_studies()) {
    TrialCounts counts = count_trials_by_state(info.study_id);
    out.push_back({std::move(info), counts});
  }
  return out;
}

void Storage::read_trials(std::int64_t study_id, const TrialQuery& query,
                          const TrialVisitor& visit) {
  query.validate();
  StudyDirection direction = get_study(study_id).direction;
  for (const auto& t : select_trials(get_all_trials(study_id), query, direction)) visit(t);
}

struct InMemoryStorage::Impl {
  std::recursive_mutex mu;
  std::map<std::int64_t, StudyInfo> studies;
  std::map<std::int64_t, std::vector<TrialPtr>> trials_by_study;  // index = number
  std::unordered_map<std::int64_t, std::pair<std::int64_t, std::int64_t>>
      where;  // trial_id -> (study, number)
  std::int64_t next_study_id = 0;
  std::int64_t next_trial_id = 0;
  // The change feed (trial_changes): a log per study, one version counter.
  std::map<std::int64_t, TrialChangeLog> logs;
  std::uint64_t version = 0;
  // Per study: no trial numbered below this one is WAITING.
  std::map<std::int64_t, std::size_t> first_waiting;
  // Open run_in_transaction() levels, and what undoes each write made
  // inside them (newest last).
  int depth = 0;
  std::vector<std::function<void()>> undo;

  StudyInfo& study(std::int64_t id) {
    auto it = studies.find(id);
    if (it == studies.end()) throw StorageError("no study with id " + std::to_string(id));
    return it->second;
  }
  TrialPtr& trial(std::int64_t trial_id) {
    auto it = where.find(trial_id);
    if (it == where.end()) throw StorageError("no trial with id " + std::to_string(trial_id));
    return trials_by_study[it->second.first][static_cast<std::size_t>(it->second.second)];
  }
  void changed(std::int64_t study_id, std::int64_t number) {
    logs[study_id].record(++version, number, trials_by_study[study_id].size());
  }
  void became_waiting(std::int64_t study_id, std::int64_t number) {
    auto& first = first_waiting[study_id];
    first = std::min(first, static_cast<std::size_t>(number));
  }
  // Inside a transaction: keeps how to undo a write.
  void on_rollback(std::function<void()> fn) {
    if (depth > 0) undo.push_back(std::move(fn));
  }
  // Keeps a study's info for a rollback (before a write to it).
  void keep_study(std::int64_t study_id) {
    if (depth > 0)
      on_rollback([this, study_id, old = study(study_id)] { studies[study_id] = old; });
  }
  // Keeps a trial's snapshot for a rollback (before a write to it).
  void keep_trial(std::int64_t trial_id) {
    if (depth > 0) on_rollback([this, trial_id, old = trial(trial_id)] { trial(trial_id) = old; });
  }
  // Copy-on-write update of one trial: a snapshot someone holds never
  // changes. When no one else holds the trial (the slot's is the only
  // reference; copies are only made under `mu`, which the caller holds),
  // it is changed in place: a trial reporting its n-th intermediate value
  // no longer copies the n-1 before it. Every slot holds a FrozenTrial made
  // here by make_shared<FrozenTrial> (not const), so changing it is defined.
  // Inside a transaction the old snapshot is kept for a rollback (so it is
  // copied).
  template <typename F>
  void update(std::int64_t trial_id, F&& f) {
    keep_trial(trial_id);
    TrialPtr& slot = trial(trial_id);
    if (slot.use_count() == 1) {
      f(const_cast<FrozenTrial&>(*slot));  // NOLINT: see above
    } else {
      auto copy = std::make_shared<FrozenTrial>(*slot);
      f(*copy);
      slot = std::move(copy);
    }
    const auto& w = where.at(trial_id);
    changed(w.first, w.second);
    if (slot->state == TrialState::kWaiting) became_waiting(w.first, w.second);
  }
};

InMemoryStorage::InMemoryStorage() : impl_(std::make_unique<Impl>()) {}
InMemoryStorage::~InMemoryStorage() = default;

std::int64_t InMemoryStorage::create_study(const std::string& name, StudyDirection direction,
                                           const Json& config) {
  std::lock_guard lock(impl_->mu);
  if (name.empty()) throw StorageError("study name must not be empty");
  for (const auto& [id, s] : impl_->studies)
    if (s.name == name)
      throw StorageError("a study named '" + printable_excerpt(name) + "' already exists");
  StudyInfo info;
  info.study_id = impl_->next_study_id++;
  info.name = name;
  info.direction = direction;
  info.config = config;
  impl_->studies[info.study_id] = info;
  impl_->trials_by_study[info.study_id];
  impl_->logs[info.study_id].reset(++impl_->version);
  impl_->first_waiting[info.study_id] = 0;
  impl_->on_rollback([m = impl_.get(), id = info.study_id] {
    m->studies.erase(id);
    m->trials_by_study.erase(id);
    m->logs.erase(id);
    m->first_waiting.erase(id);
    m->next_study_id = id;
  });
  return info.study_id;
}

std::optional<std::int64_t> InMemoryStorage::find_study(const std::string& name) {
  std::lock_guard lock(impl_->mu);
  for (const auto& [id, s] : impl_->studies)
    if (s.name == name) return id;
  return std::nullopt;
}

StudyInfo InMemoryStorage::get_study(std::int64_t study_id) {
  std::lock_guard lock(impl_->mu);
  return impl_->study(study_id);
}

std::vector<StudyInfo> InMemoryStorage::list_studies() {
  std::lock_guard lock(impl_->mu);
  std::vector<StudyInfo> out;
  for (const auto& [id, s] : impl_->studies) out.push_back(s);
  return out;
}

void InMemoryStorage::set_study_config(std::int64_t study_id, const Json& config) {
  std::lock_guard lock(impl_->mu);
  impl_->keep_study(study_id);
  impl_->study(study_id).config = config;
}

void InMemoryStorage::set_study_user_attr(std::int64_t study_id, const std::string& key,
                                          const Json& value) {
  std::lock_guard lock(impl_->mu);
  impl_->keep_study(study_id);
  impl_->study(study_id).user_attrs[key] = value;
}

void InMemoryStorage::set_study_system_attr(std::int64_t study_id, const std::string& key,
                                            const Json& value) {
  std::lock_guard lock(impl_->mu);
  impl_->keep_study(study_id);
  impl_->study(study_id).system_attrs[key] = value;
}

void check_new_trial(const NewTrial& init) {
  for (const auto& [name, dist] : init.distributions)
    if (!init.params.count(name))
      throw StorageError("distribution given for param '" + printable_excerpt(name) +
                         "' without a value");
  if (!init.system_attrs.is_object())
    throw StorageError("new trial system_attrs must be a JSON object");
  if (!init.user_attrs.is_object())
    throw StorageError("new trial user_attrs must be a JSON object");
  if (init.state == TrialState::kComplete && (!init.value || std::isnan(*init.value)))
    throw StorageError("a COMPLETE trial needs a value that is not NaN");
  if (init.state == TrialState::kWaiting &&
      (init.datetime_complete || init.datetime_start || !init.intermediate_values.empty()))
    throw StorageError("a new WAITING trial has no times and no intermediate values");
  if (!is_finished(init.state) && init.datetime_complete)
    throw StorageError(std::string("a new ") + to_string(init.state) +
                       " trial has no datetime_complete");
}

TrialPtr InMemoryStorage::create_trial(std::int64_t study_id, const NewTrial& init) {
  std::lock_guard lock(impl_->mu);
  impl_->study(study_id);
  check_new_trial(init);
  auto& list = impl_->trials_by_study[study_id];
  auto t = std::make_shared<FrozenTrial>();
  t->trial_id = impl_->next_trial_id++;
  t->number = static_cast<std::int64_t>(list.size());
  t->state = init.state;
  t->params = init.params;
  t->distributions = init.distributions;
  t->system_attrs = init.system_attrs.is_object() ? init.system_attrs : Json::object();
  t->worker = init.worker;
  t->user_attrs = init.user_attrs;
  t->intermediate_values = init.intermediate_values;
  if (init.state != TrialState::kWaiting)
    t->datetime_start = init.datetime_start.value_or(Clock::now());
  if (is_finished(init.state)) {
    t->datetime_complete = init.datetime_complete.value_or(Clock::now());
    if (init.value && !std::isnan(*init.value)) t->value = init.value;
    if (init.state == TrialState::kFail) t->fail_reason = init.fail_reason;
  }
  list.push_back(t);
  impl_->where[t->trial_id] = {study_id, t->number};
  impl_->changed(study_id, t->number);
  if (t->state == TrialState::kWaiting) impl_->became_waiting(study_id, t->number);
  impl_->on_rollback([m = impl_.get(), study_id, id = t->trial_id] {
    m->trials_by_study[study_id].pop_back();
    m->where.erase(id);
    m->next_trial_id = id;
  });
  return t;
}

TrialPtr InMemoryStorage::claim_waiting_trial(std::int64_t study_id, const std::string& worker) {
  std::lock_guard lock(impl_->mu);
  impl_->study(study_id);
  auto& list = impl_->trials_by_study[study_id];
  auto& first = impl_->first_waiting[study_id];
  for (; first < list.size(); ++first) {
    TrialPtr& slot = list[first];
    if (slot->state != TrialState::kWaiting) continue;
    impl_->keep_trial(slot->trial_id);
    auto copy = std::make_shared<FrozenTrial>(*slot);
    copy->state = TrialState::kRunning;
    copy->datetime_start = Clock::now();
    copy->worker = worker;
    slot = copy;
    impl_->changed(study_id, copy->number);
    ++first;
    return copy;
  }
  return nullptr;
}

void InMemoryStorage::set_trial_param(std::int64_t trial_id, const std::string& name,
                                      const Json& value, const Distribution& distribution) {
  std::lock_guard lock(impl_->mu);
  if (!distribution.contains(value))
    throw StorageError("param '" + printable_excerpt(name) + "': value " +
                       printable_excerpt(value.dump()) + " is not in its distribution");
  impl_->update(trial_id, [&](FrozenTrial& t) {
    if (is_finished(t.state))
      throw StorageError("trial " + std::to_string(t.number) + " is finished; cannot set param '" +
                         name + "'");
    auto it = t.params.find(name);
    if (it != t.params.end() && !same_json_scalar(it->second, value))
      throw StorageError("param '" + printable_excerpt(name) + "' of trial " +
                         std::to_string(t.number) + " is already set");
    t.params[name] = value;
    t.distributions.insert_or_assign(name, distribution);
  });
}

bool InMemoryStorage::set_trial_intermediate_value(std::int64_t trial_id, std::int64_t step,
                                                   double value) {
  std::lock_guard lock(impl_->mu);
  const TrialPtr& t = impl_->trial(trial_id);  // a reference: no count of our own
  if (is_finished(t->state))
    throw StorageError("trial " + std::to_string(t->number) + " is finished; cannot report step " +
                       std::to_string(step));
  if (t->intermediate_values.count(step)) return false;
  impl_->update(trial_id, [&](FrozenTrial& c) { c.intermediate_values[step] = value; });
  return true;
}

bool InMemoryStorage::set_trial_state(std::int64_t trial_id, TrialState state,
                                      std::optional<double> value, const std::string& fail_reason) {
  std::lock_guard lock(impl_->mu);
  const TrialPtr& t = impl_->trial(trial_id);
  if (is_finished(t->state)) return false;
  if (state == TrialState::kComplete && (!value || std::isnan(*value)))
    throw StorageError("a COMPLETE trial needs a value that is not NaN");
  impl_->update(trial_id, [&](FrozenTrial& c) {
    c.state = state;
    if (value && !std::isnan(*value)) c.value = value;
    if (state == TrialState::kFail) c.fail_reason = fail_reason;
    if (state == TrialState::kRunning && !c.datetime_start) c.datetime_start = Clock::now();
    if (is_finished(state)) c.datetime_complete = Clock::now();
  });
  return true;
}

void InMemoryStorage::set_trial_user_attr(std::int64_t trial_id, const std::string& key,
                                          const Json& value) {
  std::lock_guard lock(impl_->mu);
  impl_->update(trial_id, [&](FrozenTrial& c) { c.user_attrs[key] = value; });
}

void InMemoryStorage::set_trial_system_attr(std::int64_t trial_id, const std::string& key,
                                            const Json& value) {
  std::lock_guard lock(impl_->mu);
  impl_->update(trial_id, [&](FrozenTrial& c) { c.system_attrs[key] = value; });
}

TrialPtr InMemoryStorage::get_trial(std::int64_t trial_id) {
  std::lock_guard lock(impl_->mu);
  return impl_->trial(trial_id);
}

TrialPtr InMemoryStorage::get_trial_by_number(std::int64_t study_id, std::int64_t number) {
  std::lock_guard lock(impl_->mu);
  impl_->study(study_id);
  auto& list = impl_->trials_by_study[study_id];
  if (number < 0 || number >= static_cast<std::int64_t>(list.size()))
    throw StorageError("study has no trial number " + std::to_string(number));
  return list[static_cast<std::size_t>(number)];
}

std::vector<TrialPtr> InMemoryStorage::get_all_trials(std::int64_t study_id,
                                                      const std::vector<TrialState>& states) {
  std::lock_guard lock(impl_->mu);
  impl_->study(study_id);
  const auto& list = impl_->trials_by_study[study_id];
  if (states.empty()) return list;
  std::vector<TrialPtr> out;
  for (const auto& t : list)
    if (state_in(t->state, states)) out.push_back(t);
  return out;
}

TrialCounts InMemoryStorage::count_trials_by_state(std::int64_t study_id) {
  std::lock_guard lock(impl_->mu);
  impl_->study(study_id);
  return tally_trials(impl_->trials_by_study[study_id]);
}

TrialPtr InMemoryStorage::best_trial(std::int64_t study_id) {
  std::lock_guard lock(impl_->mu);
  StudyDirection direction = impl_->study(study_id).direction;
  return lifecycle::best_trial(direction, impl_->trials_by_study[study_id]);
}

std::vector<StudySummary> InMemoryStorage::list_study_summaries() {
  std::lock_guard lock(impl_->mu);
  std::vector<StudySummary> out;
  for (const auto& [id, info] : impl_->studies)
    out.push_back({info, tally_trials(impl_->trials_by_study[id])});
  return out;
}

void InMemoryStorage::read_trials(std::int64_t study_id, const TrialQuery& query,
                                  const TrialVisitor& visit) {
  query.validate();
  if (query.order == TrialOrder::kValue) {
    // A sort needs them all: pointers to the snapshots, not copies.
    std::vector<TrialPtr> all;
    StudyDirection direction{};
    {
      std::lock_guard lock(impl_->mu);
      direction = impl_->study(study_id).direction;
      all = impl_->trials_by_study[study_id];
    }
    for (const auto& t : select_trials(std::move(all), query, direction)) visit(t);
    return;
  }
  // By number: the list is indexed by number; copy one batch at a time and
  // call `visit` outside the lock.
  std::size_t next = query.since_number
                         ? static_cast<std::size_t>(std::max<std::int64_t>(*query.since_number, 0))
                         : 0;
  std::int64_t left = query.limit ? *query.limit : -1;
  std::vector<TrialPtr> batch;
  while (left != 0) {
    batch.clear();
    {
      std::lock_guard lock(impl_->mu);
      impl_->study(study_id);
      const auto& list = impl_->trials_by_study[study_id];
      for (; next < list.size() && batch.size() < query.batch_size; ++next)
        if (state_in(list[next]->state, query.states)) batch.push_back(list[next]);
      if (batch.empty() && next >= list.size()) return;
    }
    for (const auto& t : batch) {
      if (left == 0) return;
      visit(t);
      if (left > 0) --left;
    }
  }
}

void InMemoryStorage::run_in_transaction(const std::function<void()>& fn) {
  // Holds the lock for the whole unit so no reader sees half of it. Each
  // write inside it keeps how to undo it (the old snapshot: trials are
  // copy-on-write, so no trial is copied for this beyond the one written);
  // when fn throws, its own writes are undone, newest first: like SQLite's
  // savepoints, a failed nested unit undoes only its own writes. Readers of
  // the change feed then start over.
  std::lock_guard lock(impl_->mu);
  Impl& m = *impl_;
  const std::size_t mark = m.undo.size();
  ++m.depth;
  try {
    fn();
  } catch (...) {
    while (m.undo.size() > mark) {
      auto undo = std::move(m.undo.back());
      m.undo.pop_back();
      undo();
    }
    --m.depth;
    for (auto& [id, log] : m.logs) log.reset(++m.version);
    for (auto& [id, first] : m.first_waiting) first = 0;
    throw;
  }
  --m.depth;
  if (m.depth == 0) m.undo.clear();
}

std::optional<std::int64_t> InMemoryStorage::data_version() { return 0; }

std::optional<TrialChanges> InMemoryStorage::trial_changes(std::int64_t study_id,
                                                           std::uint64_t version) {
  std::lock_guard lock(impl_->mu);
  impl_->study(study_id);
  return impl_->logs[study_id].changes(impl_->trials_by_study[study_id], version, impl_->version);
}

std::shared_ptr<Storage> open_storage(const std::string& url) {
  util::StorageUrl parsed = util::parse_storage_url(url);
  if (parsed.in_memory) return std::make_shared<InMemoryStorage>();
  if (parsed.path.empty()) throw StorageError("empty storage path");
  return std::make_shared<CachingStorage>(std::make_shared<SqliteStorage>(parsed.path));
}

}  // namespace hps
