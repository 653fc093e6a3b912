// SqliteStorage: see sqlite_storage.h for the file format and the rules.
// This file coordinates: it checks arguments, runs each call in its
// transaction, and tells the observer (CachingStorage) what a write changed.
// The SQL lives in search/sqlite/ (one concept per file).
#include "search/sqlite_storage.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <mutex>
#include <utility>

#include "search/printable.h"
#include "search/sqlite/codec.h"
#include "search/sqlite/connection.h"
#include "search/sqlite/reads.h"
#include "search/sqlite/transaction.h"
#include "search/sqlite/writes.h"

namespace hps {

using sqlite::kKindSystem;
using sqlite::kKindUser;

// ------------------------------------------------------------------ options

void SqliteOptions::validate() const {
  if (busy_timeout_ms < 0)
    throw ConfigError("sqlite.busy_timeout_ms",
                      "must be >= 0, got " + std::to_string(busy_timeout_ms));
  if (checkpoint_pages < 1)
    throw ConfigError("sqlite.checkpoint_pages",
                      "must be >= 1, got " + std::to_string(checkpoint_pages));
  std::string s = synchronous;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  if (s != "OFF" && s != "NORMAL" && s != "FULL")
    throw ConfigError("sqlite.synchronous",
                      "must be one of OFF, NORMAL, FULL, got '" + synchronous + "'");
}

// ------------------------------------------------------------------ Impl

struct SqliteStorage::Impl {
  Impl(const std::string& path, const SqliteOptions& options) : conn(path, options) {}

  sqlite::Connection conn;
  // Recursive: run_in_transaction() holds it while fn calls other methods.
  std::recursive_mutex mutex;
  sqlite::ParamWriter params;
  StorageObserver* observer = nullptr;

  // A state-changing call: one transaction (a savepoint inside one).
  template <class F>
  auto write(F&& f) {
    std::lock_guard lock(mutex);
    return sqlite::write(conn, std::forward<F>(f));
  }
  // A state-changing call of at most one SQL statement (no savepoint needed
  // inside a transaction).
  template <class F>
  auto write_one(F&& f) {
    std::lock_guard lock(mutex);
    return sqlite::write_one(conn, std::forward<F>(f));
  }
  // A read: one consistent snapshot.
  template <class F>
  auto read(F&& f) {
    std::lock_guard lock(mutex);
    return sqlite::read(conn, std::forward<F>(f));
  }

  // Tells the observer (if any) how trial `trial_id` changed. `edit` is only
  // built into a TrialEdit when someone listens.
  template <class F>
  void notify(std::int64_t trial_id, F&& edit) {
    if (observer) observer->trial_written(trial_id, TrialEdit(std::forward<F>(edit)));
  }

  static void require_unfinished(std::int64_t trial_id, const sqlite::TrialRow& row,
                                 const std::string& action) {
    if (is_finished(row.state))
      throw StorageError("trial " + std::to_string(row.number) + " (id " +
                         std::to_string(trial_id) + ") is already finished (" +
                         to_string(row.state) + "); cannot " + action);
  }

  void set_trial_attr(std::int64_t trial_id, int kind, const std::string& key, const Json& value) {
    sqlite::check_utf8(key, "attr key");
    std::string text = sqlite::encode_json(value, "attr '" + key + "'");
    write_one([&] {
      if (!sqlite::write_trial_attr(conn, trial_id, kind, key, text, /*upsert=*/true))
        throw StorageError("no trial with id " + std::to_string(trial_id));
      notify(trial_id, [&](FrozenTrial& t) {
        (kind == kKindUser ? t.user_attrs : t.system_attrs)[key] =
            sqlite::decode_keyed(text, "trial_attrs", trial_id, "key", key);
      });
    });
  }

  void set_study_attr(std::int64_t study_id, int kind, const std::string& key, const Json& value) {
    sqlite::check_utf8(key, "attr key");
    std::string text = sqlite::encode_json(value, "attr '" + key + "'");
    write([&] {
      sqlite::require_study(conn, study_id);
      sqlite::upsert_study_attr(conn, study_id, kind, key, text);
    });
  }

  // The trial's params and fixed system attrs, written after its row.
  void insert_trial_contents(FrozenTrial& t, const NewTrial& init) {
    std::vector<sqlite::ParamWriter::Row> rows;
    rows.reserve(init.params.size());
    for (const auto& [name, value] : init.params) {
      auto d = init.distributions.find(name);
      rows.push_back({&name, &value, d == init.distributions.end() ? nullptr : &d->second});
    }
    std::vector<Json> stored = params.insert(conn, t.trial_id, rows);
    for (std::size_t r = 0; r < rows.size(); ++r)
      t.params.emplace_hint(t.params.end(), *rows[r].name, std::move(stored[r]));
    // Every distribution names a param (check_new_trial): the same map,
    // shared with the caller's (one map for a study's trials).
    t.distributions = init.distributions;
    for (const auto& [key, value] : init.system_attrs.items()) {
      sqlite::check_utf8(key, "attr key");
      std::string text = sqlite::encode_json(value, "attr '" + key + "'");
      sqlite::write_trial_attr(conn, t.trial_id, kKindSystem, key, text, /*upsert=*/false);
      t.system_attrs[key] = sqlite::decode_keyed(text, "trial_attrs", t.trial_id, "key", key);
    }
  }
};

// ------------------------------------------------------------------ SqliteStorage

namespace {

SqliteOptions validated(SqliteOptions options) {
  options.validate();
  return options;
}

bool state_in(TrialState s, const std::vector<TrialState>& states) {
  return states.empty() || std::find(states.begin(), states.end(), s) != states.end();
}

}  // namespace

SqliteStorage::SqliteStorage(const std::string& path, SqliteOptions options)
    : impl_(std::make_unique<Impl>(path, validated(std::move(options)))) {}

SqliteStorage::~SqliteStorage() = default;

const std::string& SqliteStorage::path() const { return impl_->conn.path(); }

std::int64_t SqliteStorage::background_checkpoints() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->conn.background_checkpoints();
}

std::optional<std::int64_t> SqliteStorage::data_version() {
  std::lock_guard lock(impl_->mutex);
  return impl_->conn.data_version();
}

bool SqliteStorage::set_observer(StorageObserver* observer) {
  std::lock_guard lock(impl_->mutex);
  impl_->observer = observer;
  return true;
}

std::int64_t SqliteStorage::create_study(const std::string& name, StudyDirection direction,
                                         const Json& config) {
  if (name.empty()) throw StorageError("study name must not be empty");
  sqlite::check_utf8(name, "study name");
  std::string config_text = sqlite::encode_json(config, "study '" + name + "' config");
  return impl_->write([&] {
    if (sqlite::find_study_id(impl_->conn, name))
      throw StorageError("a study named '" + printable_excerpt(name) + "' already exists");
    return sqlite::insert_study(impl_->conn, name, direction, config_text,
                                sqlite::encode_time(sqlite::now_us()));
  });
}

std::optional<std::int64_t> SqliteStorage::find_study(const std::string& name) {
  return impl_->read([&] { return sqlite::find_study_id(impl_->conn, name); });
}

StudyInfo SqliteStorage::get_study(std::int64_t study_id) {
  return impl_->read([&] {
    auto found = sqlite::load_studies(impl_->conn, study_id);
    if (found.empty()) throw StorageError("no study with id " + std::to_string(study_id));
    return std::move(found.front());
  });
}

std::vector<StudyInfo> SqliteStorage::list_studies() {
  return impl_->read([&] { return sqlite::load_studies(impl_->conn); });
}

void SqliteStorage::set_study_config(std::int64_t study_id, const Json& config) {
  std::string text = sqlite::encode_json(config, "study config");
  impl_->write([&] {
    sqlite::require_study(impl_->conn, study_id);
    sqlite::update_study_config(impl_->conn, study_id, text);
  });
}

void SqliteStorage::set_study_user_attr(std::int64_t study_id, const std::string& key,
                                        const Json& value) {
  impl_->set_study_attr(study_id, kKindUser, key, value);
}

void SqliteStorage::set_study_system_attr(std::int64_t study_id, const std::string& key,
                                          const Json& value) {
  impl_->set_study_attr(study_id, kKindSystem, key, value);
}

TrialPtr SqliteStorage::create_trial(std::int64_t study_id, const NewTrial& init) {
  check_new_trial(init);
  sqlite::check_utf8(init.worker, "worker");
  sqlite::check_utf8(init.fail_reason, "fail_reason");
  return impl_->write([&]() -> TrialPtr {
    sqlite::Connection& conn = impl_->conn;
    auto number = sqlite::next_trial_number(conn, study_id);
    if (!number) throw StorageError("no study with id " + std::to_string(study_id));
    // The snapshot is built from what is written, as reading it back gives
    // it (no read of the file).
    auto t = std::make_shared<FrozenTrial>();
    t->state = init.state;
    t->worker = init.worker;
    t->number = *number;
    std::optional<double> start;
    if (init.state != TrialState::kWaiting) {
      TimePoint when = init.datetime_start.value_or(sqlite::now_us());
      start = sqlite::encode_time(when);
      t->datetime_start = sqlite::stored_time(when);
    }
    if (init.state == TrialState::kRunning || init.state == TrialState::kWaiting) {
      t->trial_id = sqlite::insert_trial(conn, study_id, t->number, init.state, start, init.worker);
      impl_->insert_trial_contents(*t, init);
      if (init.intermediate_values.empty() && init.user_attrs.empty()) return t;
    } else {
      // A finished copy: written RUNNING with its contents, then finished.
      t->trial_id =
          sqlite::insert_trial(conn, study_id, t->number, TrialState::kRunning, start, init.worker);
      impl_->insert_trial_contents(*t, init);
    }
    for (const auto& [step, v] : init.intermediate_values)
      sqlite::insert_intermediate_value(conn, t->trial_id, step, v);
    for (const auto& [key, value] : init.user_attrs.items()) {
      sqlite::check_utf8(key, "attr key");
      sqlite::write_trial_attr(conn, t->trial_id, kKindUser, key,
                               sqlite::encode_json(value, "attr '" + key + "'"),
                               /*upsert=*/false);
    }
    if (is_finished(init.state)) {
      TimePoint end = init.datetime_complete.value_or(sqlite::now_us());
      std::optional<double> value;
      if (init.value && !std::isnan(*init.value)) value = init.value;
      sqlite::update_trial_state(conn, t->trial_id, init.state, value, *start,
                                 sqlite::encode_time(end),
                                 init.state == TrialState::kFail ? init.fail_reason : "");
    }
    return sqlite::load_trial(conn, t->trial_id);
  });
}

TrialPtr SqliteStorage::claim_waiting_trial(std::int64_t study_id, const std::string& worker) {
  sqlite::check_utf8(worker, "worker");
  return impl_->write([&]() -> TrialPtr {
    sqlite::Connection& conn = impl_->conn;
    sqlite::require_study(conn, study_id);
    auto trial_id = sqlite::first_waiting_trial(conn, study_id);
    if (!trial_id) return nullptr;
    sqlite::mark_running(conn, *trial_id, sqlite::encode_time(sqlite::now_us()), worker);
    return sqlite::load_trial(conn, *trial_id);
  });
}

void SqliteStorage::set_trial_param(std::int64_t trial_id, const std::string& name,
                                    const Json& value, const Distribution& distribution) {
  if (!distribution.contains(value))
    throw StorageError("param '" + printable_excerpt(name) + "': value " +
                       printable_excerpt(sqlite::encode_json(value, name)) +
                       " is not in its distribution");
  impl_->write([&] {
    sqlite::Connection& conn = impl_->conn;
    auto row = sqlite::trial_row(conn, trial_id);
    Impl::require_unfinished(trial_id, row, "set param '" + name + "'");
    auto set = impl_->params.set(conn, trial_id, name, value, distribution);
    using Outcome = sqlite::ParamWriter::SetOutcome;
    if (set.outcome == Outcome::kConflict)
      throw StorageError("param '" + printable_excerpt(name) + "' of trial " +
                         std::to_string(row.number) + " is already set to " +
                         sqlite::encode_json(set.value, name) + "; cannot change it to " +
                         sqlite::encode_json(value, name));
    if (set.outcome == Outcome::kReplaced) {
      // Same value: the distribution given now replaces the stored one.
      impl_->notify(trial_id,
                    [&](FrozenTrial& t) { t.distributions.insert_or_assign(name, distribution); });
      return;
    }
    impl_->notify(trial_id, [&](FrozenTrial& t) {
      t.params[name] = set.value;
      t.distributions.insert_or_assign(name, distribution);
    });
  });
}

bool SqliteStorage::set_trial_intermediate_value(std::int64_t trial_id, std::int64_t step,
                                                 double value) {
  return impl_->write_one([&] {
    if (!sqlite::insert_intermediate_value(impl_->conn, trial_id, step, value)) {
      // Why not: the step has a value (false), or the trial is finished or
      // absent (thrown).
      auto row = sqlite::trial_row(impl_->conn, trial_id);
      Impl::require_unfinished(trial_id, row, "report step " + std::to_string(step));
      return false;
    }
    impl_->notify(trial_id, [&](FrozenTrial& t) {
      t.intermediate_values[step] = std::isnan(value) ? std::nan("") : value;  // as read from NULL
    });
    return true;
  });
}

bool SqliteStorage::set_trial_state(std::int64_t trial_id, TrialState state,
                                    std::optional<double> value, const std::string& fail_reason) {
  if (state == TrialState::kComplete && (!value || std::isnan(*value)))
    throw StorageError("trial id " + std::to_string(trial_id) +
                       ": COMPLETE needs a value that is not NaN");
  sqlite::check_utf8(fail_reason, "fail_reason");
  return impl_->write_one([&] {
    const bool finished = is_finished(state);
    const TimePoint now = sqlite::now_us();
    const std::optional<double> stored_value =
        finished && value && !std::isnan(*value) ? value : std::nullopt;
    const std::optional<TimePoint> complete =
        finished ? std::optional<TimePoint>(sqlite::stored_time(now)) : std::nullopt;
    const std::string reason = state == TrialState::kFail ? fail_reason : std::string();
    if (!sqlite::update_trial_state(
            impl_->conn, trial_id, state, stored_value, sqlite::encode_time(now),
            finished ? std::optional<double>(sqlite::encode_time(now)) : std::nullopt, reason)) {
      sqlite::trial_row(impl_->conn, trial_id);  // throws if absent
      return false;                              // finished
    }
    impl_->notify(trial_id, [&](FrozenTrial& t) {
      t.state = state;
      t.value = stored_value;
      if (state == TrialState::kRunning && !t.datetime_start)
        t.datetime_start = sqlite::stored_time(now);
      t.datetime_complete = complete;
      t.fail_reason = reason;
    });
    return true;
  });
}

void SqliteStorage::set_trial_user_attr(std::int64_t trial_id, const std::string& key,
                                        const Json& value) {
  impl_->set_trial_attr(trial_id, kKindUser, key, value);
}

void SqliteStorage::set_trial_system_attr(std::int64_t trial_id, const std::string& key,
                                          const Json& value) {
  impl_->set_trial_attr(trial_id, kKindSystem, key, value);
}

TrialPtr SqliteStorage::get_trial(std::int64_t trial_id) {
  return impl_->read([&] { return sqlite::load_trial(impl_->conn, trial_id); });
}

TrialPtr SqliteStorage::get_trial_by_number(std::int64_t study_id, std::int64_t number) {
  return impl_->read([&] {
    sqlite::require_study(impl_->conn, study_id);
    TrialPtr t = sqlite::load_trial_by_number(impl_->conn, study_id, number);
    if (!t)
      throw StorageError("study id " + std::to_string(study_id) + " has no trial number " +
                         std::to_string(number));
    return t;
  });
}

std::vector<TrialPtr> SqliteStorage::get_all_trials(std::int64_t study_id,
                                                    const std::vector<TrialState>& states) {
  return impl_->read([&] {
    sqlite::require_study(impl_->conn, study_id);
    auto all = sqlite::load_study_trials(impl_->conn, study_id);
    if (states.empty()) return all;
    std::vector<TrialPtr> out;
    for (auto& t : all)
      if (state_in(t->state, states)) out.push_back(std::move(t));
    return out;
  });
}

std::int64_t SqliteStorage::count_trials(std::int64_t study_id,
                                         const std::vector<TrialState>& states) {
  return impl_->read([&] {
    sqlite::require_study(impl_->conn, study_id);
    return sqlite::count_study_trials(impl_->conn, study_id, states);
  });
}

TrialCounts SqliteStorage::count_trials_by_state(std::int64_t study_id) {
  return impl_->read([&] {
    sqlite::require_study(impl_->conn, study_id);
    return sqlite::count_trials_by_state(impl_->conn, study_id);
  });
}

TrialPtr SqliteStorage::best_trial(std::int64_t study_id) {
  return impl_->read([&] {
    auto found = sqlite::load_studies(impl_->conn, study_id);
    if (found.empty()) throw StorageError("no study with id " + std::to_string(study_id));
    return sqlite::load_best_trial(impl_->conn, study_id, found.front().direction);
  });
}

std::vector<StudySummary> SqliteStorage::list_study_summaries() {
  return impl_->read([&] {
    std::vector<StudySummary> out;
    auto counts = sqlite::count_all_studies(impl_->conn);
    auto c = counts.begin();
    for (auto& info : sqlite::load_studies(impl_->conn)) {  // both by study id
      while (c != counts.end() && c->first < info.study_id) ++c;
      TrialCounts n = c != counts.end() && c->first == info.study_id ? c->second : TrialCounts{};
      out.push_back({std::move(info), n});
    }
    return out;
  });
}

void SqliteStorage::read_trials(std::int64_t study_id, const TrialQuery& query,
                                const TrialVisitor& visit) {
  query.validate();
  impl_->read([&] {
    auto found = sqlite::load_studies(impl_->conn, study_id);
    if (found.empty()) throw StorageError("no study with id " + std::to_string(study_id));
    sqlite::read_study_trials(impl_->conn, study_id, found.front().direction, query, visit);
    return 0;
  });
}

void SqliteStorage::run_in_transaction(const std::function<void()>& fn) {
  impl_->write([&] { fn(); });
}

}  // namespace hps
