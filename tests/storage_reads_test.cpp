// Tests of the reads that do not load the history (Storage::
// count_trials_by_state, best_trial, list_study_summaries, read_trials):
// on randomized studies, every storage's answer equals the answer computed
// from a full load (tally_trials, lifecycle::best_trial, select_trials),
// trial by trial; and the schema migration that adds their indexes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "search/caching_storage.h"
#include "search/distributions.h"
#include "search/errors.h"
#include "search/json_util.h"
#include "search/sqlite/schema.h"
#include "search/sqlite_storage.h"
#include "search/storage.h"
#include "search/trial_lifecycle.h"
#include "search/writer_lock.h"
#include "tests/support/older_stores.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using ::testing::HasSubstr;
using testsupport::raw_exec;
using testsupport::run_process;
using testsupport::TempDir;
using testsupport::write_as_v4;

struct Factory {
  std::string name;
  std::function<std::shared_ptr<Storage>(const std::string& file)> make;
};
[[maybe_unused]] void PrintTo(const Factory& f, std::ostream* os) { *os << f.name; }

class StorageReads : public ::testing::TestWithParam<Factory> {
 protected:
  void SetUp() override { storage_ = GetParam().make(dir_.file("store.db")); }
  TempDir dir_;
  std::shared_ptr<Storage> storage_;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// A copied trial (NewTrial with a finished state) or a live one.
NewTrial make_trial(TrialState state, std::optional<double> value) {
  NewTrial t;
  t.state = state;
  if (is_finished(state)) t.value = value;
  t.params = {{"x", Json(0.25 * static_cast<int>(state))}, {"k", Json(static_cast<int>(state))}};
  t.worker = "w";
  return t;
}

// Adds `n` random trials to the study: every state, values drawn from a
// small set (ties, -0.0, +-inf), NaN values on finished trials, warm-start
// copies (better values than any own trial) and retried FAIL trials,
// intermediate values and user attrs on some.
void add_random_trials(Storage& s, std::int64_t study, int n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<double> values = {1.0, 2.0, 2.0, -0.0, 0.0, kInf, -kInf, 0.5, 3.25, -7.0};
  auto pick = [&](std::size_t k) {
    return std::uniform_int_distribution<std::size_t>(0, k - 1)(rng);
  };
  for (int i = 0; i < n; ++i) {
    auto state = static_cast<TrialState>(pick(5));
    std::optional<double> value = values[pick(values.size())];
    if (state != TrialState::kComplete && pick(3) == 0) value = std::nullopt;
    if (state != TrialState::kComplete && pick(5) == 0) value = std::nan("");
    NewTrial t = make_trial(state, value);
    if (is_finished(state) && pick(6) == 0) {  // a warm-start copy, best of all values
      t.system_attrs["warm_start"] = Json{{"storage", "old.db"}, {"study", "s"}, {"trial", i}};
      if (state == TrialState::kComplete) t.value = pick(2) ? -1e300 : 1e300;
    }
    if (state == TrialState::kFail && pick(3) == 0) t.system_attrs["retried_as"] = i + 1;
    if (state == TrialState::kComplete && pick(4) == 0) t.system_attrs["retried_as"] = 7;
    if (pick(4) == 0) t.user_attrs["note"] = "n" + std::to_string(i);
    if (state != TrialState::kWaiting && pick(3) == 0)
      t.intermediate_values = {{0, 1.5}, {1, std::nan("")}, {2, -kInf}};
    s.create_trial(study, t);
  }
}

// Both trials, field by field (through their JSON form, which keeps
// non-finite numbers and all attrs).
void expect_same_trials(const std::vector<TrialPtr>& got, const std::vector<TrialPtr>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(trial_to_json(*got[i]).dump(), trial_to_json(*want[i]).dump()) << what << " at " << i;
}

void expect_same_counts(const TrialCounts& got, const TrialCounts& want, const std::string& what) {
  for (std::size_t i = 0; i < want.by_state.size(); ++i)
    EXPECT_EQ(got.by_state[i], want.by_state[i]) << what << " state " << i;
  EXPECT_EQ(got.finished, want.finished) << what;
  EXPECT_EQ(got.total(), want.total()) << what;
}

std::vector<TrialPtr> read_all(Storage& s, std::int64_t study, const TrialQuery& q) {
  std::vector<TrialPtr> out;
  s.read_trials(study, q, [&](const TrialPtr& t) { out.push_back(t); });
  return out;
}

// Every read of `study` against the full load.
// The counts by state and the best trial (the rows the triggers keep)
// equal a full load's. Returns the full load.
std::vector<TrialPtr> expect_counts_and_best_match_full_load(Storage& s, std::int64_t study) {
  StudyDirection direction = s.get_study(study).direction;
  auto all = s.get_all_trials(study);
  expect_same_counts(s.count_trials_by_state(study), tally_trials(all), "counts");
  TrialPtr best = s.best_trial(study);
  TrialPtr want = lifecycle::best_trial(direction, all);
  EXPECT_EQ(best == nullptr, want == nullptr);
  if (want && best) {
    EXPECT_EQ(best->number, want->number);
    EXPECT_TRUE(lifecycle::is_best_candidate(*best));
  }
  return all;
}

void expect_reads_match_full_load(Storage& s, std::int64_t study) {
  StudyDirection direction = s.get_study(study).direction;
  auto all = expect_counts_and_best_match_full_load(s, study);
  std::vector<TrialQuery> queries(1);
  for (TrialOrder order : {TrialOrder::kNumber, TrialOrder::kValue})
    for (std::size_t batch : {std::size_t{1}, std::size_t{7}, std::size_t{512}})
      for (auto limit : {std::optional<std::int64_t>(), std::optional<std::int64_t>(0),
                         std::optional<std::int64_t>(13)})
        for (auto since : {std::optional<std::int64_t>(), std::optional<std::int64_t>(40)}) {
          TrialQuery q;
          q.order = order;
          q.batch_size = batch;
          q.limit = limit;
          q.since_number = since;
          queries.push_back(q);
          q.states = {TrialState::kComplete};
          queries.push_back(q);
          q.states = {TrialState::kPruned, TrialState::kFail};
          queries.push_back(q);
        }
  for (std::size_t i = 0; i < queries.size(); ++i)
    expect_same_trials(read_all(s, study, queries[i]), select_trials(all, queries[i], direction),
                       "query " + std::to_string(i));
}

TEST_P(StorageReads, RandomizedStudiesMatchAFullLoad) {
  for (StudyDirection direction : {StudyDirection::kMinimize, StudyDirection::kMaximize}) {
    for (std::uint32_t seed : {1u, 2u, 3u}) {
      std::string name = std::string(to_string(direction)) + std::to_string(seed);
      auto id = storage_->create_study(name, direction, Json());
      add_random_trials(*storage_, id, 120, seed);
      SCOPED_TRACE(name);
      expect_reads_match_full_load(*storage_, id);
    }
  }
  // Summaries: every study, with its counts.
  auto summaries = storage_->list_study_summaries();
  auto studies = storage_->list_studies();
  ASSERT_EQ(summaries.size(), studies.size());
  for (std::size_t i = 0; i < studies.size(); ++i) {
    EXPECT_EQ(summaries[i].info.name, studies[i].name);
    expect_same_counts(summaries[i].counts,
                       tally_trials(storage_->get_all_trials(studies[i].study_id)),
                       studies[i].name);
  }
}

TEST_P(StorageReads, EmptyAndRunningOnlyStudies) {
  auto empty = storage_->create_study("empty", StudyDirection::kMaximize, Json());
  auto running = storage_->create_study("running", StudyDirection::kMinimize, Json());
  for (int i = 0; i < 5; ++i) storage_->create_trial(running, make_trial(TrialState::kRunning, {}));
  expect_reads_match_full_load(*storage_, empty);
  expect_reads_match_full_load(*storage_, running);
  EXPECT_EQ(storage_->best_trial(empty), nullptr);
  EXPECT_EQ(storage_->best_trial(running), nullptr);
  EXPECT_EQ(storage_->count_trials_by_state(running).count(TrialState::kRunning), 5);
  EXPECT_EQ(storage_->count_trials_by_state(running).finished, 0);
  auto summaries = storage_->list_study_summaries();
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].counts.total(), 0);
  EXPECT_EQ(summaries[1].counts.total(), 5);
}

TEST_P(StorageReads, BestTrialSkipsWarmStartCopiesAsLifecycleDoes) {
  // The SQL rule and lifecycle::is_best_candidate agree: a warm-start copy
  // with the best value, a better FAIL and PRUNED trial, are never best;
  // ties go to the lower number; -0.0 ties with 0.0.
  for (StudyDirection direction : {StudyDirection::kMinimize, StudyDirection::kMaximize}) {
    auto id = storage_->create_study(to_string(direction), direction, Json());
    double sign = direction == StudyDirection::kMinimize ? 1.0 : -1.0;
    NewTrial warm = make_trial(TrialState::kComplete, sign * -kInf);
    warm.system_attrs["warm_start"] = Json{{"storage", "old.db"}, {"study", "s"}, {"trial", 0}};
    storage_->create_trial(id, warm);                                             // 0
    storage_->create_trial(id, make_trial(TrialState::kFail, sign * -50.0));      // 1
    storage_->create_trial(id, make_trial(TrialState::kPruned, sign * -50.0));    // 2
    storage_->create_trial(id, make_trial(TrialState::kComplete, sign * 3.0));    // 3
    storage_->create_trial(id, make_trial(TrialState::kComplete, 0.0));           // 4
    storage_->create_trial(id, make_trial(TrialState::kComplete, -0.0));          // 5
    storage_->create_trial(id, make_trial(TrialState::kComplete, sign * -kInf));  // 6
    storage_->create_trial(id, make_trial(TrialState::kComplete, sign * -kInf));  // 7
    ASSERT_NE(storage_->best_trial(id), nullptr);
    EXPECT_EQ(storage_->best_trial(id)->number, 6);
    expect_reads_match_full_load(*storage_, id);
  }
}

TEST_P(StorageReads, BadQueriesAndStudiesAreRefused) {
  auto id = storage_->create_study("s", StudyDirection::kMinimize, Json());
  TrialQuery q;
  q.limit = -1;
  try {
    storage_->read_trials(id, q, [](const TrialPtr&) {});
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  q = {};
  q.batch_size = 0;
  EXPECT_THROW(storage_->read_trials(id, q, [](const TrialPtr&) {}), ConfigError);
  EXPECT_THROW(storage_->count_trials_by_state(id + 100), StorageError);
  EXPECT_THROW(storage_->best_trial(id + 100), StorageError);
  EXPECT_THROW(storage_->read_trials(id + 100, {}, [](const TrialPtr&) {}), StorageError);
}

TEST_P(StorageReads, AnExceptionFromTheVisitorStopsTheWalkAndTheStorageStaysUsable) {
  auto id = storage_->create_study("s", StudyDirection::kMinimize, Json());
  add_random_trials(*storage_, id, 30, 9);
  TrialQuery q;
  q.batch_size = 4;
  int seen = 0;
  EXPECT_THROW(storage_->read_trials(id, q,
                                     [&](const TrialPtr&) {
                                       if (++seen == 6) throw std::runtime_error("stop");
                                     }),
               std::runtime_error);
  EXPECT_EQ(seen, 6);
  storage_->create_trial(id, make_trial(TrialState::kRunning, {}));  // writes still work
  expect_reads_match_full_load(*storage_, id);
}

INSTANTIATE_TEST_SUITE_P(
    AllStorages, StorageReads,
    ::testing::Values(
        Factory{"InMemory", [](const std::string&) { return std::make_shared<InMemoryStorage>(); }},
        Factory{"Sqlite", [](const std::string& f) { return std::make_shared<SqliteStorage>(f); }},
        Factory{"CachingSqlite",
                [](const std::string& f) {
                  return std::make_shared<CachingStorage>(std::make_shared<SqliteStorage>(f));
                }},
        Factory{"CachingInMemory",
                [](const std::string&) {
                  return std::make_shared<CachingStorage>(std::make_shared<InMemoryStorage>());
                }}),
    [](const auto& param_info) { return param_info.param.name; });

std::int64_t raw_count(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  std::int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    n = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return n;
}

// trial_params as schemas v1 to v3 declared it: from schema v1's SQL, as
// released.
std::string v3_trial_params_sql() {
  const std::string v1 = sqlite::migration_sql(0);
  const auto begin = v1.find("CREATE TABLE trial_params(");
  const std::string end = "WITHOUT ROWID;";
  const auto last = v1.find(end, begin);
  EXPECT_NE(last, std::string::npos);
  return v1.substr(begin, last + end.size() - begin);
}

// Rewrites the store at `path` as schema v3 wrote it: every param one
// trial_params row (distribution_json and value_json as v3 encoded them,
// value_real for a float), no distributions and trial_param_sets, and
// user_version 3. The other tables are the same in v3 and v4.
void write_as_v3(const std::string& path) {
  std::vector<TrialPtr> trials;
  {
    SqliteStorage s(path);
    for (const auto& study : s.list_studies()) {
      auto some = s.get_all_trials(study.study_id);
      trials.insert(trials.end(), some.begin(), some.end());
    }
  }
  write_as_v4(path);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, v3_trial_params_sql().c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_stmt* insert = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "INSERT INTO trial_params(trial_id, name, distribution_json, "
                               "value_json, value_real) VALUES (?1, ?2, ?3, ?4, ?5)",
                               -1, &insert, nullptr),
            SQLITE_OK);
  for (const auto& t : trials) {
    for (const auto& [name, value] : t->params) {
      sqlite3_bind_int64(insert, 1, t->trial_id);
      sqlite3_bind_text(insert, 2, name.c_str(), -1, SQLITE_TRANSIENT);
      auto d = t->distributions.find(name);
      if (d != t->distributions.end()) {
        sqlite3_bind_text(insert, 3, dump_json_nonfinite(d->second.to_json()).c_str(), -1,
                          SQLITE_TRANSIENT);
      } else {
        sqlite3_bind_null(insert, 3);
      }
      sqlite3_bind_text(insert, 4, dump_json_nonfinite(value).c_str(), -1, SQLITE_TRANSIENT);
      if (value.is_number_float()) {
        sqlite3_bind_double(insert, 5, value.get<double>());
      } else {
        sqlite3_bind_null(insert, 5);
      }
      EXPECT_EQ(sqlite3_step(insert), SQLITE_DONE);
      sqlite3_reset(insert);
    }
  }
  sqlite3_finalize(insert);
  EXPECT_EQ(sqlite3_exec(db,
                         "DROP TABLE trial_param_sets; DROP TABLE distributions; "
                         "PRAGMA user_version = 3;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
}

// "v3.db" in `dir`: a store of schema v3 holding the study `name` with
// `n_trials` random trials (seed `seed`). Returns its path.
std::string v3_store(TempDir& dir, const std::string& name, int n_trials, std::uint32_t seed) {
  std::string path = dir.file("v3.db");
  {
    SqliteStorage s(path);
    add_random_trials(s, s.create_study(name, StudyDirection::kMinimize, Json()), n_trials, seed);
  }
  write_as_v3(path);
  return path;
}

// What schema v3 added: the per-state counts and their triggers.
constexpr const char* kDropV3 =
    "DROP TRIGGER trial_state_counts_insert; DROP TRIGGER trial_state_counts_update; "
    "DROP TRIGGER trial_state_counts_delete; DROP TABLE trial_state_counts; ";

// A version 2 store gets the per-state counts (filled from its trials) and
// the triggers that keep them: counts equal a full load's after the
// upgrade, and after trials are added and change state.
TEST(StorageReadsMigration, AVersion2StoreGetsCountsThatFollowEveryWrite) {
  TempDir dir;
  std::string path = dir.file("v2.db");
  {
    SqliteStorage s(path);
    auto a = s.create_study("a", StudyDirection::kMinimize, Json());
    auto b = s.create_study("b", StudyDirection::kMaximize, Json());
    add_random_trials(s, a, 80, 11);
    add_random_trials(s, b, 30, 12);
  }
  write_as_v3(path);
  raw_exec(path, std::string(kDropV3) + "PRAGMA user_version = 2;");
  SqliteStorage s(path);
  EXPECT_EQ(raw_count(path, "PRAGMA user_version"), SqliteStorage::kSchemaVersion);
  const std::int64_t a = *s.find_study("a"), b = *s.find_study("b");
  expect_reads_match_full_load(s, a);
  expect_reads_match_full_load(s, b);
  // Live trials: RUNNING, then each finished state; WAITING claimed.
  std::mt19937 rng(3);
  for (int i = 0; i < 40; ++i) {
    NewTrial t = make_trial(i % 3 ? TrialState::kRunning : TrialState::kWaiting, std::nullopt);
    TrialPtr created = s.create_trial(i % 2 ? a : b, t);
    const auto end = static_cast<TrialState>(2 + rng() % 3);  // COMPLETE, PRUNED or FAIL
    if (i % 5 == 0) continue;                                 // stays as created
    if (created->state == TrialState::kWaiting) {
      TrialPtr claimed = s.claim_waiting_trial(i % 2 ? a : b, "w");
      ASSERT_NE(claimed, nullptr);
      created = claimed;
    }
    s.set_trial_state(created->trial_id, end,
                      end == TrialState::kComplete ? std::optional<double>(i) : std::nullopt);
  }
  expect_reads_match_full_load(s, a);
  expect_reads_match_full_load(s, b);
  auto summaries = s.list_study_summaries();
  ASSERT_EQ(summaries.size(), 2u);
  for (const auto& sum : summaries)
    expect_same_counts(sum.counts, tally_trials(s.get_all_trials(sum.info.study_id)),
                       sum.info.name);
}

// A version 4 store gets each study's best trial (filled from its trials:
// warm-start copies, ties, -0.0, infinities, NaN as add_random_trials makes
// them) and the triggers that keep it; the two indexes on (study_id, state,
// ...) are gone. Best and reads equal a full load's after the upgrade, and
// after trials finish, a WAITING trial claimed among them (trials_active):
// counts and best after every write, every kind of read at the end.
TEST(StorageReadsMigration, AVersion4StoreGetsBestTrialsThatFollowEveryWrite) {
  TempDir dir;
  std::string path = dir.file("v4.db");
  {
    SqliteStorage s(path);
    auto a = s.create_study("a", StudyDirection::kMinimize, Json());
    auto b = s.create_study("b", StudyDirection::kMaximize, Json());
    s.create_study("empty", StudyDirection::kMinimize, Json());
    add_random_trials(s, a, 120, 21);
    add_random_trials(s, b, 60, 22);
  }
  write_as_v4(path);
  ASSERT_EQ(raw_count(path, "SELECT count(*) FROM sqlite_master WHERE name = 'study_best'"), 0);
  SqliteStorage s(path);
  EXPECT_EQ(raw_count(path, "PRAGMA user_version"), SqliteStorage::kSchemaVersion);
  EXPECT_EQ(raw_count(path,
                      "SELECT count(*) FROM sqlite_master WHERE name IN "
                      "('trials_by_study_state', 'trials_by_study_state_value')"),
            0);
  EXPECT_EQ(raw_count(path, "SELECT count(*) FROM study_best"), 2);  // not the empty study
  const std::int64_t a = *s.find_study("a"), b = *s.find_study("b"), empty = *s.find_study("empty");
  expect_reads_match_full_load(s, a);
  expect_reads_match_full_load(s, b);
  expect_reads_match_full_load(s, empty);
  std::mt19937 rng(4);
  for (int i = 0; i < 60; ++i) {
    const std::int64_t study = i % 3 == 0 ? empty : (i % 2 ? a : b);
    NewTrial t = make_trial(i % 4 ? TrialState::kRunning : TrialState::kWaiting, std::nullopt);
    TrialPtr created = s.create_trial(study, t);
    if (created->state == TrialState::kWaiting) {
      std::int64_t first = -1;  // the WAITING trial with the lowest number
      for (const auto& w : s.get_all_trials(study, {TrialState::kWaiting}))
        if (first < 0 || w->number < first) first = w->number;
      TrialPtr claimed = s.claim_waiting_trial(study, "w");
      ASSERT_NE(claimed, nullptr);
      EXPECT_EQ(claimed->number, first);
      created = claimed;
    }
    // Values from -3 to 3 in steps of 0.5: ties with earlier and later trials.
    const double value = static_cast<double>(static_cast<int>(rng() % 13) - 6) / 2.0;
    const auto end = static_cast<TrialState>(2 + rng() % 3);  // COMPLETE, PRUNED or FAIL
    s.set_trial_state(created->trial_id, end,
                      end == TrialState::kComplete ? std::optional<double>(value) : std::nullopt);
    SCOPED_TRACE("after write " + std::to_string(i));
    expect_counts_and_best_match_full_load(s, study);
  }
  for (std::int64_t study : {a, b, empty}) expect_reads_match_full_load(s, study);
}

// A best row that a write the triggers do not see made stale (a
// warm_start attr added to the best trial later, the trial deleted by
// hand) is not believed: the study is scanned and the answer is a full
// load's.
TEST(StorageReadsMigration, AStaleBestRowIsCheckedAndNotBelieved) {
  TempDir dir;
  std::string path = dir.file("s.db");
  SqliteStorage s(path);
  for (StudyDirection direction : {StudyDirection::kMinimize, StudyDirection::kMaximize}) {
    auto id = s.create_study(to_string(direction), direction, Json());
    const double sign = direction == StudyDirection::kMinimize ? 1.0 : -1.0;
    for (double v : {5.0, 1.0, 3.0, 1.0, 2.0})
      s.create_trial(id, make_trial(TrialState::kComplete, sign * v));
    ASSERT_EQ(s.best_trial(id)->number, 1);
    s.set_trial_system_attr(s.best_trial(id)->trial_id, "warm_start",
                            Json{{"storage", "old.db"}, {"study", "s"}, {"trial", 0}});
    EXPECT_EQ(s.best_trial(id)->number, 3);  // the tie left
    expect_reads_match_full_load(s, id);
    raw_exec(path, "DELETE FROM trials WHERE study_id = " + std::to_string(id) + " AND number = 3");
    SqliteStorage fresh(path);  // no cached snapshot
    EXPECT_EQ(fresh.best_trial(id)->number, 4);
    EXPECT_EQ(fresh.best_trial(id)->value, sign * 2.0);
    expect_reads_match_full_load(fresh, id);
  }
}

// The upgrade of a store in its file locks older hpsearch versions out: it
// is said as a warning, so --log-level warn still shows it (found by a
// new-user pass: it was an info line).
TEST(StorageReadsMigration, AnUpgradeInPlaceIsSaidAsAWarning) {
  TempDir dir;
  std::string path = dir.file("v4.db");
  {
    SqliteStorage s(path);
    add_random_trials(s, s.create_study("s", StudyDirection::kMinimize, Json()), 10, 3);
  }
  write_as_v4(path);
  auto r = run_process({HPSEARCH_CLI_PATH, "--log-level", "warn", "studies", path}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("upgraded from schema version 4 to " +
                               std::to_string(SqliteStorage::kSchemaVersion)));
  EXPECT_EQ(raw_count(path, "PRAGMA user_version"), SqliteStorage::kSchemaVersion);
}

// A store of this version that lacks a trigger, an index or a table of its
// schema (dropped by hand) is refused when opened, naming what is missing,
// and left as it is: without the triggers the best and the counts would go
// silently wrong (found by a new-user pass).
TEST(StorageReadsMigration, AStoreMissingPartOfItsSchemaIsRefusedUnchanged) {
  for (const char* drop :
       {"DROP TRIGGER study_best_finish", "DROP TABLE study_best", "DROP INDEX trials_active",
        "DROP TRIGGER trial_state_counts_update", "DROP TRIGGER study_best_insert_repair"}) {
    TempDir dir;
    std::string path = dir.file("s.db");
    {
      SqliteStorage s(path);
      add_random_trials(s, s.create_study("s", StudyDirection::kMinimize, Json()), 20, 7);
    }
    raw_exec(path, std::string(drop) + "; PRAGMA wal_checkpoint(TRUNCATE);");
    const std::string before = testsupport::read_file(path);
    try {
      SqliteStorage s(path);
      ADD_FAILURE() << drop << ": opened";
    } catch (const StoreRefused& e) {
      const std::string name = std::string(drop).substr(std::string(drop).rfind(' ') + 1);
      EXPECT_NE(std::string(e.what()).find("is damaged: its schema (version " +
                                           std::to_string(SqliteStorage::kSchemaVersion) +
                                           ") lacks " + name),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(testsupport::read_file(path), before) << drop;
  }
}

// A best row broken by hand (gone, a value that is not a number, pointing
// at a FAIL trial with a worse value) is made again from the study's
// trials by the next finished trial's trigger: a trial better than the
// broken row but worse than the best does not take its place (found by a
// new-user pass: before, it did, and every reader then believed it).
TEST(StorageReadsMigration, ABrokenBestRowIsMadeAgainByTheNextFinishedTrial) {
  for (const char* breakage :
       {"DELETE FROM study_best", "UPDATE study_best SET value = 'abc'",
        "UPDATE study_best SET value = x'00'", "UPDATE study_best SET number = 1, value = 1.0e6"}) {
    TempDir dir;
    std::string path = dir.file("s.db");
    SqliteStorage s(path);
    for (StudyDirection direction : {StudyDirection::kMinimize, StudyDirection::kMaximize}) {
      auto id = s.create_study(to_string(direction), direction, Json());
      const double sign = direction == StudyDirection::kMinimize ? 1.0 : -1.0;
      s.create_trial(id, make_trial(TrialState::kComplete, sign * 5.0));  // 0
      s.create_trial(id, make_trial(TrialState::kFail, std::nullopt));    // 1
      s.create_trial(id, make_trial(TrialState::kComplete, sign * 1.0));  // 2: the best
      s.create_trial(id, make_trial(TrialState::kComplete, sign * 3.0));  // 3
      std::string sql = breakage;
      if (sql.find("1.0e6") != std::string::npos)
        sql = "UPDATE study_best SET number = 1, value = " + std::to_string(sign * 1.0e6);
      raw_exec(path, sql + " WHERE study_id = " + std::to_string(id));
      SqliteStorage fresh(path);
      EXPECT_EQ(fresh.best_trial(id)->number, 2) << breakage;                 // the scan
      fresh.create_trial(id, make_trial(TrialState::kComplete, sign * 2.0));  // 4: not the best
      EXPECT_EQ(fresh.best_trial(id)->number, 2) << breakage;
      EXPECT_EQ(
          raw_count(path, "SELECT number FROM study_best WHERE study_id = " + std::to_string(id)),
          2)
          << breakage << ": the row is made again";
      expect_reads_match_full_load(fresh, id);
    }
  }
}

TEST(StorageReadsMigration, AVersion1StoreIsUpgradedInPlaceAndLosesNothing) {
  TempDir dir;
  std::string path = dir.file("old.db");
  std::vector<std::string> before;
  {
    SqliteStorage s(path);
    auto id = s.create_study("s", StudyDirection::kMaximize, Json{{"budget", 5}});
    add_random_trials(s, id, 60, 5);
    for (const auto& t : s.get_all_trials(id)) before.push_back(trial_to_json(*t).dump());
  }
  // What version 1 wrote: the same tables without the v2 indexes and the
  // v3 counts.
  write_as_v3(path);
  raw_exec(path, "DROP INDEX trials_by_study_state_value; DROP INDEX trial_attrs_by_key; " +
                     std::string(kDropV3) + "PRAGMA user_version = 1;");
  const std::string count_indexes =
      "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN "
      "('trials_by_study_state_value', 'trial_attrs_by_key')";
  ASSERT_EQ(raw_count(path, count_indexes), 0);
  {
    SqliteStorage s(path);
    auto id = s.find_study("s");
    ASSERT_TRUE(id);
    std::vector<std::string> after;
    for (const auto& t : s.get_all_trials(*id)) after.push_back(trial_to_json(*t).dump());
    EXPECT_EQ(after, before);
    EXPECT_EQ(s.get_study(*id).config, (Json{{"budget", 5}}));
    expect_reads_match_full_load(s, *id);
  }
  EXPECT_EQ(raw_count(path, "PRAGMA user_version"), SqliteStorage::kSchemaVersion);
  // v2's value index was replaced by v5's study_best.
  EXPECT_EQ(raw_count(path, count_indexes), 1);
  EXPECT_EQ(raw_count(path,
                      "SELECT count(*) FROM sqlite_master WHERE name IN ('trial_attrs_by_key', "
                      "'trials_active', 'study_best')"),
            3);
}

std::uint64_t float_bits(const Json& v) { return std::bit_cast<std::uint64_t>(v.get<double>()); }

// Every trial as a text that tells apart what Json's == does not: the JSON
// type of each param value (1 vs 1u vs 1.0) and a float's bits (-0.0).
std::vector<std::string> exact_trials(Storage& s, std::int64_t study) {
  std::vector<std::string> out;
  for (const auto& t : s.get_all_trials(study)) {
    std::string text = trial_to_json(*t).dump();
    for (const auto& [name, v] : t->params) {
      text += " " + name + ":" + std::to_string(static_cast<int>(v.type()));
      if (v.is_number_float()) text += ":" + std::to_string(float_bits(v));
    }
    for (const auto& [name, d] : t->distributions) text += " " + name + "=" + d.to_json().dump();
    out.push_back(std::move(text));
  }
  return out;
}

// A store written by schema v3 (one trial_params row per param) is
// converted when opened: every value of every JSON type reads back exactly
// (float bits: -0.0, denormals, +-inf; unsigned, negative and large
// integers; strings, null, bools, arrays), params with and without a
// distribution, trials without params; trial_params is gone, and the
// converted store takes new params as before.
TEST(StorageReadsMigration, AVersion3StoreIsConvertedAndReadsTheSameTrials) {
  TempDir dir;
  std::string path = dir.file("v3.db");
  const auto f = Distribution::make_float(-1e308, 1e308, false);
  const auto i = Distribution::make_int(-10, 10, false);
  const auto c =
      Distribution::make_categorical({Json(), Json(true), Json(-3), Json(std::uint64_t{1} << 63),
                                      Json("relu"), Json("\u00e9t\u00e9"), Json(2.5)});
  const std::vector<Json> floats = {Json(-0.0),  Json(4.9e-324), Json(kInf),
                                    Json(-kInf), Json(0.1),      Json(-1e308)};
  std::vector<std::string> before;
  std::int64_t study = 0;
  {
    SqliteStorage s(path);
    study = s.create_study("s", StudyDirection::kMinimize, Json());
    add_random_trials(s, study, 40, 9);
    for (std::size_t k = 0; k < 14; ++k) {
      NewTrial t;
      t.state = TrialState::kRunning;
      t.params = {{"f", floats[k % floats.size()]},
                  {"i", Json(static_cast<int>(k) - 7)},
                  {"c", c.choices()[k % c.choices().size()]},
                  {"free", k % 2 ? Json("no distribution") : Json::array({k})}};
      t.distributions = {{"f", f}, {"i", i}, {"c", c}};
      auto made = s.create_trial(study, t);
      if (k % 3 == 0) s.set_trial_param(made->trial_id, "late", Json(0.5), f);
    }
    s.create_trial(study, NewTrial{});  // no params
    before = exact_trials(s, study);
  }
  write_as_v3(path);
  ASSERT_GT(raw_count(path, "SELECT count(*) FROM trial_params"), 100);
  {
    SqliteStorage s(path);
    EXPECT_EQ(exact_trials(s, study), before);
    expect_reads_match_full_load(s, study);
    EXPECT_EQ(raw_count(path, "SELECT count(*) FROM sqlite_master WHERE name = 'trial_params'"), 0);
    EXPECT_EQ(raw_count(path, "PRAGMA user_version"), SqliteStorage::kSchemaVersion);
    // Each distinct distribution text once.
    EXPECT_EQ(raw_count(path, "SELECT count(*) FROM distributions"), 3);
    auto t = s.create_trial(study, NewTrial{});
    s.set_trial_param(t->trial_id, "f", Json(-0.0), f);
    EXPECT_EQ(float_bits(s.get_trial(t->trial_id)->params.at("f")), float_bits(Json(-0.0)));
  }
  SqliteStorage again(path);  // and a fresh connection reads the same
  auto after = exact_trials(again, study);
  after.pop_back();
  EXPECT_EQ(after, before);
}

// A store of an older schema whose study a coordinator (of the older
// hpsearch) is running is not upgraded under it: opening it is refused,
// naming the holder, and the file is left as it was; once the lock is
// released the store is upgraded.
TEST(StorageReadsMigration, AStoreRunByAnOlderCoordinatorIsNotUpgradedUnderIt) {
  TempDir dir;
  std::string path = dir.file("v3.db");
  std::int64_t second = 0;
  std::vector<std::string> before;
  {
    SqliteStorage s(path);
    s.create_study("a", StudyDirection::kMinimize, Json());
    second = s.create_study("b", StudyDirection::kMinimize, Json());
    add_random_trials(s, second, 20, 4);
    before = exact_trials(s, second);
  }
  write_as_v3(path);
  WriterLockHolder holder;
  holder.host = "old-host";
  holder.pid = 4242;
  holder.study = "b";
  {
    // The lock of the second study (its region is not the first one).
    WriterLock lock = WriterLock::acquire(path, second, holder);
    try {
      SqliteStorage s(path);
      ADD_FAILURE() << "a store run by another coordinator was upgraded";
    } catch (const StoreRefused& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("schema version 3"), std::string::npos) << what;
      EXPECT_NE(what.find("old-host:4242"), std::string::npos) << what;
      EXPECT_NE(what.find("nothing was changed"), std::string::npos) << what;
    }
    // A refusal of the store's state, as a bad store is: the read commands
    // exit 2 (not 1, a failure), naming the coordinator.
    auto r = run_process({HPSEARCH_CLI_PATH, "trials", path}, dir.path());
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr("a coordinator runs one of its studies (old-host:4242"));
    EXPECT_EQ(raw_count(path, "PRAGMA user_version"), 3);
    EXPECT_GT(raw_count(path, "SELECT count(*) FROM trial_params"), 0);
  }
  SqliteStorage s(path);  // the lock released: upgraded
  EXPECT_EQ(raw_count(path, "PRAGMA user_version"), SqliteStorage::kSchemaVersion);
  EXPECT_EQ(exact_trials(s, second), before);
}

// A store of an older schema whose writer lock file was planted (a
// symbolic link, a hard link, a folder) cannot say whether a coordinator
// runs one of its studies, so it is not upgraded: SqliteStorage throws
// StoreRefused naming the store, the lock file and its rule (the text
// `hpsearch run` refuses it with); the read commands exit 2 with it, as
// run does, and the file is unchanged.
TEST(StorageReadsMigration, AnOlderStoreWithAPlantedLockFileIsRefusedUnchanged) {
  TempDir dir;
  const std::string path = v3_store(dir, "s", 10, 3);
  const std::string victim = dir.write("victim", "the victim's data");
  const std::string lock = path + ".lock";
  std::filesystem::create_symlink(victim, lock);
  try {
    SqliteStorage s(path);
    ADD_FAILURE() << "upgraded without asking the writer lock";
  } catch (const StoreRefused& e) {
    EXPECT_THAT(e.what(), HasSubstr(path +
                                    ": has schema version 3, and whether a coordinator "
                                    "runs one of its studies cannot be asked (" +
                                    lock + ": the writer lock file is a symbolic link: refused"));
    EXPECT_THAT(e.what(), HasSubstr("nothing was changed"));
  }
  for (const std::string command : {"status", "best", "trials"}) {
    auto r = run_process({HPSEARCH_CLI_PATH, command, path}, dir.path());
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(lock + ": the writer lock file is a symbolic link: refused"))
        << command;
  }
  auto run = run_process({HPSEARCH_CLI_PATH, "resume", path}, dir.path());
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr(lock + ": the writer lock file is a symbolic link: refused"));
  std::filesystem::remove(lock);
  std::filesystem::create_hard_link(victim, lock);
  auto hard = run_process({HPSEARCH_CLI_PATH, "trials", path}, dir.path());
  EXPECT_EQ(hard.exit_code, 2) << hard.err;
  EXPECT_THAT(hard.err, HasSubstr(lock + ": the writer lock file has 2 hard links: refused"));
  EXPECT_EQ(raw_count(path, "PRAGMA user_version"), 3);
  EXPECT_GT(raw_count(path, "SELECT count(*) FROM trial_params"), 0);
  EXPECT_EQ(testsupport::read_file(victim), "the victim's data");
  std::filesystem::remove(lock);
  auto fine = run_process({HPSEARCH_CLI_PATH, "trials", path}, dir.path());
  EXPECT_EQ(fine.exit_code, 0) << fine.err;  // upgraded once nothing is planted
}

// A store of an older schema that this user may only read (an archived
// study, a read-only mount) is read through a copy in memory upgraded to
// this version; the file is unchanged. The reader runs as another user
// (setpriv), since root may write any file.
TEST(StorageReadsMigration, AReadOnlyOlderStoreIsReadThroughAnUpgradedCopyInMemory) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to read the store as another user";
  TempDir dir;
  const std::string path = v3_store(dir, "archived", 20, 5);
  const std::string csv_v3 = [&] {
    // What this version prints for the same trials from a writable copy.
    const std::string copy = dir.file("copy.db");
    std::filesystem::copy_file(path, copy);
    auto r = run_process({HPSEARCH_CLI_PATH, "trials", "--format", "csv", copy}, dir.path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }();
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    if (e.path().filename().string().rfind("v3.db", 0) == 0) {
      ASSERT_EQ(::chown(e.path().c_str(), 65534, 65534), 0);
    }
  }
  ASSERT_EQ(::chmod(path.c_str(), 0400), 0);
  ASSERT_EQ(::chown(dir.path().c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  auto r = run_process({"/usr/bin/setpriv", "--reuid", "65534", "--regid", "65534",
                        "--clear-groups", HPSEARCH_CLI_PATH, "trials", "--format", "csv", path},
                       dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, csv_v3);
  EXPECT_NE(r.err.find("copy in memory"), std::string::npos) << r.err;
  EXPECT_EQ(raw_count(path, "PRAGMA user_version"), 3);
  EXPECT_GT(raw_count(path, "SELECT count(*) FROM trial_params"), 0);
}

// What v3 read as an error stays an error after the conversion, with the
// new row named: a value_json that does not parse, a bad distribution.
// Rows of a trial that does not exist (foreign keys off) are left out.
TEST(StorageReadsMigration, AVersion3StoresBadRowsStillFailWhenRead) {
  TempDir dir;
  std::string path = dir.file("v3.db");
  std::int64_t study = 0;
  {
    SqliteStorage s(path);
    study = s.create_study("s", StudyDirection::kMinimize, Json());
    add_random_trials(s, study, 10, 3);
  }
  write_as_v3(path);
  raw_exec(path,
           "INSERT INTO trial_params(trial_id, name, distribution_json, value_json) "
           "VALUES (999, 'orphan', NULL, '1')");
  {
    SqliteStorage s(path);  // converted: the orphan row is left out
    EXPECT_EQ(s.get_all_trials(study).size(), 10u);
  }
  const std::string bad = dir.file("bad.db");
  {
    SqliteStorage s(bad);
    study = s.create_study("s", StudyDirection::kMinimize, Json());
    add_random_trials(s, study, 10, 3);
  }
  write_as_v3(bad);
  raw_exec(bad, "UPDATE trial_params SET value_json = '{bad', value_real = NULL WHERE name = 'k'");
  SqliteStorage s(bad);
  try {
    s.get_all_trials(study);
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("trial_param_sets row trial_id="), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("name='k': column data: invalid JSON"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hps
