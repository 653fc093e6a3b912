// Queries that read a SqliteStorage file back into snapshots (see reads.h).
#include "search/sqlite/reads.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "search/sqlite/codec.h"
#include "search/sqlite/param_set.h"

namespace hps::sqlite {
namespace {

// SQL to load trials: by study (all its trials), one trial by id, or one by
// study and number. ?1 is the study_id or the trial_id; ?2 the number.
struct TrialQueries {
  const char* trials;
  const char* params;
  const char* intermediates;
  const char* attrs;
};

constexpr TrialQueries kByStudy = {
    "SELECT trial_id, number, state, value, datetime_start, datetime_complete, worker, "
    "fail_reason FROM trials WHERE study_id = ?1 ORDER BY number",
    "SELECT p.trial_id, p.data FROM trial_param_sets p "
    "JOIN trials t ON t.trial_id = p.trial_id WHERE t.study_id = ?1",
    "SELECT v.trial_id, v.step, v.value FROM trial_intermediate_values v "
    "JOIN trials t ON t.trial_id = v.trial_id WHERE t.study_id = ?1",
    "SELECT a.trial_id, a.kind, a.key, a.value_json FROM trial_attrs a "
    "JOIN trials t ON t.trial_id = a.trial_id WHERE t.study_id = ?1",
};

constexpr TrialQueries kByTrial = {
    "SELECT trial_id, number, state, value, datetime_start, datetime_complete, worker, "
    "fail_reason FROM trials WHERE trial_id = ?1",
    "SELECT trial_id, data FROM trial_param_sets WHERE trial_id = ?1",
    "SELECT trial_id, step, value FROM trial_intermediate_values WHERE trial_id = ?1",
    "SELECT trial_id, kind, key, value_json FROM trial_attrs WHERE trial_id = ?1",
};

// The trials being read, by trial id: a sorted array (ids are unique; rows
// of the other tables mostly come in id order, so a lookup first tries the
// entry after the last one found). 16 bytes per trial and no allocation per
// trial, where a hash map took a node each (1,000,000 trials on a resume).
class ById {
 public:
  void add(std::int64_t id, FrozenTrial* trial) {
    if (!entries_.empty() && id <= entries_.back().first) sorted_ = false;
    entries_.emplace_back(id, trial);
  }
  // Call once after the last add.
  void finish() {
    if (!sorted_) std::sort(entries_.begin(), entries_.end());
    sorted_ = true;
  }
  // The trial with this id, or nullptr (a row of a trial not read).
  FrozenTrial* find(std::int64_t id) const {
    if (next_ < entries_.size() && entries_[next_].first == id) return entries_[next_++].second;
    auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                               [](const auto& e, std::int64_t key) { return e.first < key; });
    if (it == entries_.end() || it->first != id) return nullptr;
    next_ = static_cast<std::size_t>(it - entries_.begin()) + 1;
    return it->second;
  }

 private:
  std::vector<std::pair<std::int64_t, FrozenTrial*>> entries_;
  bool sorted_ = true;
  mutable std::size_t next_ = 0;  // the entry after the last found
};

// Puts a value of an attrs row (kind 0 = user, 1 = system) into `user` or
// `system`.
void put_attr(std::int64_t kind, const std::string& key, Json value, Json& user, Json& system,
              const Where& where) {
  if (kind == kKindUser) {
    user[key] = std::move(value);
  } else if (kind == kKindSystem) {
    system[key] = std::move(value);
  } else {
    throw StorageError(where.str() + ": unknown attr kind " + std::to_string(kind));
  }
}

// Reads attrs rows (owner id, kind, key, value_json) of `table`, whose
// owner id column is `id_name`, into their owners: `owner(id)` gives the
// owner's {user, system} attrs, or {nullptr, nullptr} for an orphan row
// (foreign keys were off), which is skipped.
template <class Owner>
void read_attr_rows(Statement& s, const char* table, const char* id_name, Owner owner) {
  while (s.step()) {
    std::int64_t id = col_int(s, 0, Where{table}, id_name);
    Where where{table, id_name, id};
    std::int64_t kind = col_int(s, 1, where, "kind");
    std::string key = col_text(s, 2, where, "key");
    where.key_name = "key";
    where.key = &key;
    Json value = decode_json(col_text(s, 3, where, "value_json"), where, "value_json");
    auto [user, system] = owner(id);
    if (user == nullptr) continue;
    put_attr(kind, key, std::move(value), *user, *system, where);
  }
}

std::vector<std::shared_ptr<FrozenTrial>> read_trial_rows(Statement& s, ById& by_id) {
  std::vector<std::shared_ptr<FrozenTrial>> list;
  while (s.step()) {
    auto t = std::make_shared<FrozenTrial>();
    t->trial_id = col_int(s, 0, Where{"trials"}, "trial_id");
    Where where = trial_row_where("trials", t->trial_id);
    t->number = col_int(s, 1, where, "number");
    where.number = &t->number;
    t->state = decode_state(col_int(s, 2, where, "state"), where);
    t->value = col_opt_real(s, 3, where, "value");
    t->datetime_start = col_time(s, 4, where, "datetime_start");
    t->datetime_complete = col_time(s, 5, where, "datetime_complete");
    t->worker = col_text(s, 6, where, "worker", true);
    t->fail_reason = col_text(s, 7, where, "fail_reason", true);
    by_id.add(t->trial_id, t.get());
    list.push_back(std::move(t));
  }
  return list;
}

// The distributions of the trials being read: each distribution_id is
// looked up and decoded once, and each distinct sequence of (name,
// distribution_id) becomes one DistributionMap that its trials share (a
// study's trials nearly always have the same: one map for all of them).
class DistributionInterner {
 public:
  explicit DistributionInterner(Connection& conn) : conn_(conn) {}

  // Starts the params of a trial.
  void begin() {
    key_.clear();
    rows_.clear();
  }
  // Adds param `name` with distribution `id` (not kNoDistribution) of the
  // current trial (`name` stays valid until finish()).
  void add(std::string_view name, std::int64_t id) {
    key_.append(name);
    key_.push_back('\0');
    key_.append(reinterpret_cast<const char*>(&id), sizeof id);
    rows_.emplace_back(name, id);
  }
  // The map of the current trial's distributions (shared with every trial
  // of the same names and ids). `where` names the trial's row in errors (a
  // distribution id not in table distributions).
  const DistributionMap& finish(const Where& where) {
    if (last_ != nullptr && key_ == last_->first) return last_->second;
    auto it = sets_.find(key_);
    if (it == sets_.end()) {
      DistributionMap::Map map;
      for (const auto& [name, id] : rows_)
        map.insert_or_assign(std::string(name), get(id, where, name));
      it = sets_.emplace(key_, DistributionMap(std::move(map))).first;
    }
    last_ = &*it;
    return last_->second;
  }

 private:
  const Distribution& get(std::int64_t id, const Where& where, std::string_view name) {
    auto found = by_id_.find(id);
    if (found != by_id_.end()) return found->second;
    Use u(conn_.stmt("SELECT distribution_json FROM distributions WHERE distribution_id = ?1"));
    u->bind(1, id);
    if (!u->step())
      throw StorageError(where.str() + " name='" + std::string(name) +
                         "': column data: distribution id " + std::to_string(id) +
                         " is not in table distributions");
    const Where row{"distributions", "distribution_id", id};
    return by_id_
        .emplace(id, decode_distribution(col_text(u.get(), 0, row, "distribution_json"), row))
        .first->second;
  }

  Connection& conn_;
  std::unordered_map<std::int64_t, Distribution> by_id_;  // nodes stay put
  std::string key_;                                       // the current trial's (name, id) sequence
  std::vector<std::pair<std::string_view, std::int64_t>> rows_;
  std::unordered_map<std::string, DistributionMap> sets_;
  const std::pair<const std::string, DistributionMap>* last_ = nullptr;
};

void read_param_sets(Connection& conn, Statement& s, const ById& by_id) {
  DistributionInterner distributions(conn);
  while (s.step()) {
    std::int64_t id = col_int(s, 0, Where{"trial_param_sets"}, "trial_id");
    const Where where = trial_row_where("trial_param_sets", id);
    if (s.type(1) != SQLITE_BLOB) throw StorageError(where.str() + ": column data is not a blob");
    FrozenTrial* trial = by_id.find(id);
    if (trial == nullptr) continue;
    ParamSetReader reader(s.blob_view(1), where);
    trial->params.reserve(reader.size());
    distributions.begin();
    bool any = false;
    while (reader.next()) {
      const auto name = reader.name();
      if (reader.distribution_id() != kNoDistribution) {
        distributions.add(name, reader.distribution_id());
        any = true;
      }
      trial->params.emplace_hint(trial->params.end(), name, reader.value());
    }
    if (any) trial->distributions = distributions.finish(where);
  }
}

void read_intermediate_rows(Statement& s, const ById& by_id) {
  while (s.step()) {
    std::int64_t id = col_int(s, 0, Where{"trial_intermediate_values"}, "trial_id");
    Where where = trial_row_where("trial_intermediate_values", id);
    std::int64_t step = col_int(s, 1, where, "step");
    auto value = col_opt_real(s, 2, where, "value");
    FrozenTrial* trial = by_id.find(id);
    if (trial == nullptr) continue;
    trial->intermediate_values[step] = value ? *value : std::nan("");
  }
}

void read_trial_attr_rows(Statement& s, const ById& by_id) {
  read_attr_rows(s, "trial_attrs", "trial_id", [&](std::int64_t id) -> std::pair<Json*, Json*> {
    FrozenTrial* trial = by_id.find(id);
    if (trial == nullptr) return {nullptr, nullptr};
    return {&trial->user_attrs, &trial->system_attrs};
  });
}

// Runs q's four statements with `key` bound to ?1: the trials into `list`
// (and `by_id`), then their params, intermediate values and attrs.
template <typename Key>
void read_trial_tables(Connection& conn, const TrialQueries& q, const Key& key, ById& by_id,
                       std::vector<std::shared_ptr<FrozenTrial>>& list) {
  {
    Use u(conn.stmt(q.trials));
    u->bind(1, key);
    list = read_trial_rows(u.get(), by_id);
  }
  by_id.finish();
  if (list.empty()) return;
  {
    Use u(conn.stmt(q.params));
    u->bind(1, key);
    read_param_sets(conn, u.get(), by_id);
  }
  {
    Use u(conn.stmt(q.intermediates));
    u->bind(1, key);
    read_intermediate_rows(u.get(), by_id);
  }
  {
    Use u(conn.stmt(q.attrs));
    u->bind(1, key);
    read_trial_attr_rows(u.get(), by_id);
  }
}

std::vector<TrialPtr> load_trials_unchecked(Connection& conn, const TrialQueries& q,
                                            std::int64_t key) {
  ById by_id;
  std::vector<std::shared_ptr<FrozenTrial>> list;
  read_trial_tables(conn, q, key, by_id, list);
  return {list.begin(), list.end()};
}

// Loads trials (all of a study, or one) from the file, in number order;
// errors name the file.
std::vector<TrialPtr> load_trials(Connection& conn, const TrialQueries& q, std::int64_t key) {
  try {
    return load_trials_unchecked(conn, q, key);
  } catch (const StorageError& e) {
    throw StorageError(conn.path() + ": " + e.what());
  }
}

std::vector<StudyInfo> load_studies_unchecked(Connection& conn,
                                              std::optional<std::int64_t> study_id) {
  std::vector<StudyInfo> loaded;
  std::unordered_map<std::int64_t, std::size_t> index;
  {
    Use u(conn.stmt(study_id ? "SELECT study_id, name, direction, config_json FROM studies "
                               "WHERE study_id = ?1"
                             : "SELECT study_id, name, direction, config_json FROM studies "
                               "ORDER BY study_id"));
    Statement& s = u.get();
    if (study_id) s.bind(1, *study_id);
    while (s.step()) {
      std::int64_t id = col_int(s, 0, Where{"studies"}, "study_id");
      Where where = study_row_where("studies", id);
      StudyInfo info;
      info.study_id = id;
      info.name = col_text(s, 1, where, "name");
      info.direction = decode_direction(col_int(s, 2, where, "direction"), where);
      info.config = decode_config_json(s, 3, where, info.config_error);
      index[id] = loaded.size();
      loaded.push_back(std::move(info));
    }
  }
  if (loaded.empty()) return loaded;
  Use u(conn.stmt(study_id ? "SELECT study_id, kind, key, value_json FROM study_attrs "
                             "WHERE study_id = ?1"
                           : "SELECT study_id, kind, key, value_json FROM study_attrs"));
  Statement& s = u.get();
  if (study_id) s.bind(1, *study_id);
  read_attr_rows(s, "study_attrs", "study_id", [&](std::int64_t id) -> std::pair<Json*, Json*> {
    auto it = index.find(id);
    if (it == index.end()) return {nullptr, nullptr};
    return {&loaded[it->second].user_attrs, &loaded[it->second].system_attrs};
  });
  return loaded;
}

}  // namespace

std::vector<StudyInfo> load_studies(Connection& conn, std::optional<std::int64_t> study_id) {
  try {
    return load_studies_unchecked(conn, study_id);
  } catch (const StorageError& e) {
    throw StorageError(conn.path() + ": " + e.what());
  }
}

std::optional<std::int64_t> find_study_id(Connection& conn, const std::string& name) {
  Use u(conn.stmt("SELECT study_id FROM studies WHERE name = ?1"));
  u->bind(1, name);
  if (!u->step()) return std::nullopt;
  return col_int(u.get(), 0, Where{"studies"}, "study_id");
}

void require_study(Connection& conn, std::int64_t study_id) {
  Use u(conn.stmt("SELECT 1 FROM studies WHERE study_id = ?1"));
  u->bind(1, study_id);
  if (!u->step()) throw StorageError("no study with id " + std::to_string(study_id));
}

std::vector<TrialPtr> load_study_trials(Connection& conn, std::int64_t study_id) {
  return load_trials(conn, kByStudy, study_id);
}

TrialPtr load_trial(Connection& conn, std::int64_t trial_id) {
  auto loaded = load_trials(conn, kByTrial, trial_id);
  if (loaded.empty()) throw StorageError("no trial with id " + std::to_string(trial_id));
  return loaded.front();
}

TrialPtr load_trial_by_number(Connection& conn, std::int64_t study_id, std::int64_t number) {
  std::int64_t trial_id = 0;
  {
    Use u(conn.stmt("SELECT trial_id FROM trials WHERE study_id = ?1 AND number = ?2"));
    u->bind(1, study_id);
    u->bind(2, number);
    if (!u->step()) return nullptr;
    trial_id = col_int(u.get(), 0, Where{"trials"}, "trial_id");
  }
  return load_trial(conn, trial_id);
}

std::int64_t count_study_trials(Connection& conn, std::int64_t study_id,
                                const std::vector<TrialState>& states) {
  Use u(conn.stmt("SELECT state, n FROM trial_state_counts WHERE study_id = ?1"));
  Statement& s = u.get();
  s.bind(1, study_id);
  std::int64_t n = 0;
  Where where = study_row_where("trials", study_id);
  while (s.step()) {
    TrialState state = decode_state(col_int(s, 0, where, "state"), where);
    if (states.empty() || std::find(states.begin(), states.end(), state) != states.end())
      n += col_int(s, 1, where, "n");
  }
  return n;
}

// ------------------------------------------------ reads without a full load

namespace {

constexpr int kComplete = static_cast<int>(TrialState::kComplete);

// lifecycle::is_best_candidate in SQL, for a trial row `t`: COMPLETE, with
// a value (NaN is stored as NULL) and without the system attr warm_start
// (FrozenTrial::is_warm_start). ?9 is bound to kAttrWarmStart. Tests check
// that this and is_best_candidate pick the same trial
// (sqlite_storage_test: BestTrialAgreesWithLifecycle...).
constexpr const char* kBestCandidate =
    "t.state = 2 AND t.value IS NOT NULL AND NOT EXISTS (SELECT 1 FROM trial_attrs a "
    "WHERE a.trial_id = t.trial_id AND a.kind = 1 AND a.key = ?9)";
static_assert(kComplete == 2 && kKindSystem == 1, "kBestCandidate's constants");
static_assert(static_cast<int>(TrialState::kWaiting) == 0 &&
                  static_cast<int>(TrialState::kRunning) == 1,
              "trials_active's WHERE (schema v5)");

// FrozenTrial::counts_as_finished in SQL, counted the other way round: the
// finished trials of study ?1 that do not count, i.e. warm-start copies
// (system attr ?2 = warm_start) in any finished state and FAIL trials that
// were retried (system attr ?3 = retried_as) or excluded from the budget
// (system attr ?4 = budget_excluded). Driven by the index
// trial_attrs_by_key, so its cost is the number of such attrs, not the
// history.
constexpr const char* kNotCountedFinished =
    "SELECT t.study_id, count(*) FROM trials t WHERE t.trial_id IN (SELECT a.trial_id FROM "
    "trial_attrs a WHERE a.kind = 1 AND a.key IN (?2, ?3, ?4)) AND (?1 IS NULL OR t.study_id = ?1) "
    "AND (t.state = 4 OR (t.state IN (2, 3) AND EXISTS (SELECT 1 FROM trial_attrs w WHERE "
    "w.trial_id = t.trial_id AND w.kind = 1 AND w.key = ?2))) GROUP BY t.study_id";
static_assert(static_cast<int>(TrialState::kPruned) == 3 &&
                  static_cast<int>(TrialState::kFail) == 4,
              "kNotCountedFinished's constants");

void add_state_count(TrialCounts& c, TrialState state, std::int64_t n) {
  c.by_state[static_cast<std::size_t>(state)] += n;
  if (is_finished(state)) c.finished += n;
}

// Subtracts the finished trials that do not count (kNotCountedFinished) of
// one study (`study_id`) or of all; `counts(id)` gives a study's counts.
template <class F>
void subtract_not_counted(Connection& conn, std::optional<std::int64_t> study_id, F counts) {
  Use u(conn.stmt(kNotCountedFinished));
  Statement& s = u.get();
  if (study_id) s.bind(1, *study_id);
  s.bind(2, kAttrWarmStart);
  s.bind(3, kAttrRetriedAs);
  s.bind(4, kAttrBudgetExcluded);
  while (s.step()) {
    std::int64_t id = col_int(s, 0, Where{"trials"}, "study_id");
    counts(id).finished -= col_int(s, 1, Where{"trials"}, "count(*)");
  }
}

std::string states_sql(const std::vector<TrialState>& states) {
  if (states.empty()) return "";
  std::string sql = " AND state IN (";
  for (std::size_t i = 0; i < states.size(); ++i)
    sql += (i ? ", " : "") + std::to_string(static_cast<int>(states[i]));
  sql += ")";
  // Only WAITING and RUNNING: the partial index trials_active, which SQLite
  // uses when the query has its WHERE term word for word.
  if (std::all_of(states.begin(), states.end(), [](TrialState st) {
        return st == TrialState::kWaiting || st == TrialState::kRunning;
      }))
    sql += " AND state IN (0, 1)";
  return sql;
}

// The statement that walks the selected trial ids in the query's order.
// ?1 study_id, ?2 the lowest number, ?3 the limit (-1: none).
std::string walk_sql(const TrialQuery& query, StudyDirection direction) {
  std::string sql =
      "SELECT trial_id FROM trials WHERE study_id = ?1 AND number >= ?2" + states_sql(query.states);
  if (query.order == TrialOrder::kValue)
    sql += direction == StudyDirection::kMaximize ? " ORDER BY value IS NULL, value DESC, number"
                                                  : " ORDER BY value IS NULL, value, number";
  else
    sql += " ORDER BY number";
  return sql + " LIMIT ?3";
}

// The trials of a batch, by the ids in `ids_json` (a JSON array), loaded
// with one query per table.
constexpr TrialQueries kByIds = {
    "SELECT trial_id, number, state, value, datetime_start, datetime_complete, worker, "
    "fail_reason FROM trials WHERE trial_id IN (SELECT value FROM json_each(?1))",
    "SELECT trial_id, data FROM trial_param_sets "
    "WHERE trial_id IN (SELECT value FROM json_each(?1))",
    "SELECT trial_id, step, value FROM trial_intermediate_values "
    "WHERE trial_id IN (SELECT value FROM json_each(?1))",
    "SELECT trial_id, kind, key, value_json FROM trial_attrs "
    "WHERE trial_id IN (SELECT value FROM json_each(?1))",
};

// Loads the trials `ids` and visits them in that order.
void visit_batch(Connection& conn, const std::vector<std::int64_t>& ids,
                 const TrialVisitor& visit) {
  std::string json = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) json += (i ? "," : "") + std::to_string(ids[i]);
  json += "]";
  ById by_id;
  std::vector<std::shared_ptr<FrozenTrial>> list;
  read_trial_tables(conn, kByIds, json, by_id, list);
  std::unordered_map<std::int64_t, std::shared_ptr<FrozenTrial>> owned;
  for (auto& t : list) owned.emplace(t->trial_id, std::move(t));
  for (std::int64_t id : ids) {
    auto it = owned.find(id);
    if (it != owned.end()) visit(TrialPtr(std::move(it->second)));
  }
}

void read_study_trials_unchecked(Connection& conn, std::int64_t study_id, StudyDirection direction,
                                 const TrialQuery& query, const TrialVisitor& visit) {
  // Its own statement (not the cache): the batch queries run while it is
  // open.
  Statement walk(conn.db(), walk_sql(query, direction));
  walk.bind(1, study_id);
  walk.bind(2, query.since_number ? *query.since_number : std::numeric_limits<std::int64_t>::min());
  walk.bind(3, query.limit ? *query.limit : std::int64_t{-1});
  std::vector<std::int64_t> ids;
  ids.reserve(query.batch_size);
  while (walk.step()) {
    ids.push_back(col_int(walk, 0, Where{"trials"}, "trial_id"));
    if (ids.size() < query.batch_size) continue;
    visit_batch(conn, ids, visit);
    ids.clear();
  }
  if (!ids.empty()) visit_batch(conn, ids, visit);
}

}  // namespace

TrialCounts count_trials_by_state(Connection& conn, std::int64_t study_id) {
  TrialCounts counts;
  {
    // The counts the triggers keep (schema v3): a few rows, not a scan.
    Use u(conn.stmt("SELECT state, n FROM trial_state_counts WHERE study_id = ?1 AND n != 0"));
    Statement& s = u.get();
    s.bind(1, study_id);
    Where where = study_row_where("trial_state_counts", study_id);
    while (s.step())
      add_state_count(counts, decode_state(col_int(s, 0, where, "state"), where),
                      col_int(s, 1, where, "n"));
  }
  subtract_not_counted(conn, study_id, [&](std::int64_t) -> TrialCounts& { return counts; });
  return counts;
}

std::vector<std::pair<std::int64_t, TrialCounts>> count_all_studies(Connection& conn) {
  std::map<std::int64_t, TrialCounts> by_study;
  {
    Use u(
        conn.stmt("SELECT study_id, state, n FROM trial_state_counts WHERE n != 0 "
                  "ORDER BY study_id"));
    Statement& s = u.get();
    while (s.step()) {
      std::int64_t id = col_int(s, 0, Where{"trial_state_counts"}, "study_id");
      Where where = study_row_where("trial_state_counts", id);
      add_state_count(by_study[id], decode_state(col_int(s, 1, where, "state"), where),
                      col_int(s, 2, where, "n"));
    }
  }
  subtract_not_counted(conn, std::nullopt,
                       [&](std::int64_t id) -> TrialCounts& { return by_study[id]; });
  return {by_study.begin(), by_study.end()};
}

TrialPtr load_best_trial(Connection& conn, std::int64_t study_id, StudyDirection direction) {
  // The row the study_best triggers keep, if its trial still is a best
  // candidate with that value: a later write the triggers do not see (the
  // trial deleted, a warm_start attr added) makes it stale, and the study is
  // then scanned instead. A candidate with the kept value is the best: every
  // better one would have replaced the row when it finished.
  {
    Use u(conn.stmt(std::string("SELECT t.trial_id FROM study_best b JOIN trials t ON "
                                "t.study_id = b.study_id AND t.number = b.number WHERE "
                                "b.study_id = ?1 AND t.value = b.value AND ") +
                    kBestCandidate));
    Statement& s = u.get();
    s.bind(1, study_id);
    s.bind(9, kAttrWarmStart);
    if (s.step()) {
      const std::int64_t trial_id = col_int(s, 0, Where{"trials"}, "trial_id");
      return load_trial(conn, trial_id);
    }
  }
  // The scan: the best value, ties to the lower number (ranks_before).
  const bool maximize = direction == StudyDirection::kMaximize;
  std::int64_t trial_id = 0;
  {
    Use u(conn.stmt(std::string("SELECT t.trial_id FROM trials t WHERE t.study_id = ?1 AND ") +
                    kBestCandidate +
                    (maximize ? " ORDER BY t.value DESC, t.number LIMIT 1"
                              : " ORDER BY t.value, t.number LIMIT 1")));
    Statement& s = u.get();
    s.bind(1, study_id);
    s.bind(9, kAttrWarmStart);
    if (!s.step()) return nullptr;
    trial_id = col_int(s, 0, Where{"trials"}, "trial_id");
  }
  return load_trial(conn, trial_id);
}

void read_study_trials(Connection& conn, std::int64_t study_id, StudyDirection direction,
                       const TrialQuery& query, const TrialVisitor& visit) {
  try {
    read_study_trials_unchecked(conn, study_id, direction, query, visit);
  } catch (const StorageError& e) {
    throw StorageError(conn.path() + ": " + e.what());
  }
}

TrialRow trial_row(Connection& conn, std::int64_t trial_id) {
  Use u(conn.stmt("SELECT study_id, number, state FROM trials WHERE trial_id = ?1"));
  Statement& s = u.get();
  s.bind(1, trial_id);
  if (!s.step()) throw StorageError("no trial with id " + std::to_string(trial_id));
  Where where = trial_row_where("trials", trial_id);
  return {col_int(s, 0, where, "study_id"), col_int(s, 1, where, "number"),
          decode_state(col_int(s, 2, where, "state"), where)};
}

}  // namespace hps::sqlite
