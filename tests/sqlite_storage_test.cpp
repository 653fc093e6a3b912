// Tests of SqliteStorage, plus a Storage conformance suite (StorageContract)
// that runs against every Storage implementation: InMemoryStorage,
// SqliteStorage (uncached) and CachingStorage around each. The SQLite
// tests of visibility across connections and processes run on a plain and
// on a cached SqliteStorage; CachingStorage's own tests over SQLite are
// here too (its generic ones: caching_storage_test.cpp).
#include "search/sqlite_storage.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "search/caching_storage.h"
#include "search/printable.h"
#include "search/storage.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A directory for one test, removed at the end.
using testsupport::TempDir;

std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }

// JSON equality that also requires the same type (1 != 1.0 != true) and, for
// doubles, the same bits.
::testing::AssertionResult same_json(const Json& a, const Json& b) {
  bool same = false;
  if (a.is_number_float() && b.is_number_float()) {
    same = bits(a.get<double>()) == bits(b.get<double>());
  } else if (a.is_primitive() && b.is_primitive()) {
    same = same_json_scalar(a, b);
  } else if (a.type() == b.type() && a.size() == b.size()) {
    same = a.dump() == b.dump();
  }
  if (same) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a.dump() << " (" << a.type_name() << ") vs " << b.dump()
                                       << " (" << b.type_name() << ")";
}

// Field-by-field equality of two snapshots; doubles bit-exact (NaN == NaN).
void expect_same_trial(const FrozenTrial& a, const FrozenTrial& b) {
  SCOPED_TRACE("trial number " + std::to_string(a.number));
  EXPECT_EQ(a.trial_id, b.trial_id);
  EXPECT_EQ(a.number, b.number);
  EXPECT_EQ(a.state, b.state);
  ASSERT_EQ(a.value.has_value(), b.value.has_value());
  if (a.value) {
    EXPECT_EQ(bits(*a.value), bits(*b.value));
  }
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [name, v] : a.params) {
    ASSERT_TRUE(b.params.count(name)) << name;
    EXPECT_TRUE(same_json(v, b.params.at(name))) << name;
  }
  ASSERT_EQ(a.distributions.size(), b.distributions.size());
  for (const auto& [name, d] : a.distributions) {
    ASSERT_TRUE(b.distributions.count(name)) << name;
    EXPECT_TRUE(d == b.distributions.at(name)) << name;
  }
  ASSERT_EQ(a.intermediate_values.size(), b.intermediate_values.size());
  for (const auto& [step, v] : a.intermediate_values) {
    ASSERT_TRUE(b.intermediate_values.count(step)) << step;
    double w = b.intermediate_values.at(step);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(w)) << step;
    } else {
      EXPECT_EQ(bits(v), bits(w)) << step;
    }
  }
  EXPECT_EQ(a.user_attrs.dump(), b.user_attrs.dump());
  EXPECT_EQ(a.system_attrs.dump(), b.system_attrs.dump());
  EXPECT_EQ(a.datetime_start, b.datetime_start);
  EXPECT_EQ(a.datetime_complete, b.datetime_complete);
  EXPECT_EQ(a.worker, b.worker);
  EXPECT_EQ(a.fail_reason, b.fail_reason);
}

// Runs SQL on a file through a raw SQLite connection (to set up states the
// storage itself never writes).
void raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg << " in: " << sql;
}

std::string raw_query_text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
    out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const StorageError& e) {
    return e.what();
  }
  return "(no StorageError)";
}

NewTrial running(Params params = {}, std::map<std::string, Distribution> dists = {}) {
  NewTrial init;
  init.state = TrialState::kRunning;
  init.params = std::move(params);
  init.distributions = std::move(dists);
  init.worker = "test:1";
  return init;
}

// ======================================================================
// Conformance suite: every Storage implementation passes these.

struct StorageFactory {
  std::string name;
  std::function<std::shared_ptr<Storage>(const std::string& dir_file)> make;
};
// Names the param in test listings (instead of a byte dump).
[[maybe_unused]] void PrintTo(const StorageFactory& f, std::ostream* os) { *os << f.name; }

class StorageContract : public ::testing::TestWithParam<StorageFactory> {
 protected:
  void SetUp() override { storage_ = GetParam().make(dir_.file("store.db")); }
  TempDir dir_;
  std::shared_ptr<Storage> storage_;
};

TEST_P(StorageContract, CreatesFindsAndListsStudies) {
  auto a = storage_->create_study("alpha", StudyDirection::kMinimize, Json{{"x", 1}});
  auto b = storage_->create_study("beta", StudyDirection::kMaximize, Json());
  EXPECT_NE(a, b);
  EXPECT_EQ(storage_->find_study("alpha"), a);
  EXPECT_EQ(storage_->find_study("beta"), b);
  EXPECT_EQ(storage_->find_study("gamma"), std::nullopt);
  StudyInfo info = storage_->get_study(b);
  EXPECT_EQ(info.name, "beta");
  EXPECT_EQ(info.direction, StudyDirection::kMaximize);
  EXPECT_TRUE(info.config.is_null());
  EXPECT_EQ(storage_->get_study(a).config, (Json{{"x", 1}}));
  auto all = storage_->list_studies();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_THROW(storage_->create_study("alpha", StudyDirection::kMinimize, Json()), StorageError);
  EXPECT_THROW(storage_->create_study("", StudyDirection::kMinimize, Json()), StorageError);
  EXPECT_THROW(storage_->get_study(a + b + 100), StorageError);
}

TEST_P(StorageContract, Utf8StudyNames) {
  const std::string name =
      "\xc3\xa9tude \xe7\xa0\x94\xe7\xa9\xb6 \xf0\x9f\x9a\x80";  // étude 研究 🚀
  auto id = storage_->create_study(name, StudyDirection::kMinimize, Json());
  EXPECT_EQ(storage_->get_study(id).name, name);
  EXPECT_EQ(storage_->find_study(name), id);
  EXPECT_EQ(storage_->find_study("\xc3\xa9tude"), std::nullopt);
}

TEST_P(StorageContract, StudyConfigAndAttrs) {
  auto id = storage_->create_study("s", StudyDirection::kMinimize, Json());
  storage_->set_study_config(id, Json{{"space", {{"lr", {{"type", "float"}}}}}});
  storage_->set_study_user_attr(id, "note", "hello");
  storage_->set_study_user_attr(id, "note", Json{1, 2.5, nullptr});  // overwrite
  storage_->set_study_system_attr(id, "seed", 7);
  StudyInfo info = storage_->get_study(id);
  EXPECT_EQ(info.config["space"]["lr"]["type"], "float");
  EXPECT_TRUE(same_json(info.user_attrs, Json::object({{"note", Json{1, 2.5, nullptr}}})));
  EXPECT_TRUE(same_json(info.system_attrs, Json::object({{"seed", 7}})));
  EXPECT_THROW(storage_->set_study_user_attr(id + 100, "k", 1), StorageError);
}

TEST_P(StorageContract, ParamValuesKeepTypesAndBits) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  auto f = Distribution::make_float(0.0, DBL_MAX);
  auto neg = Distribution::make_float(-1.0, 1.0);
  auto i = Distribution::make_int(-5, 1000000);
  auto c = Distribution::make_categorical({Json(), Json(true), Json(1), Json(1.5), Json("relu")});
  auto o = Distribution::make_ordinal({Json(16), Json(32), Json(64.5), Json("big")});
  const std::vector<double> floats = {1.2345678901234567e-4, 0.1, 1e-308, 4.9e-324, DBL_MAX, 0.0};
  for (double x : floats) {
    auto t = storage_->create_trial(study, running());
    storage_->set_trial_param(t->trial_id, "x", x, f);
    storage_->set_trial_param(t->trial_id, "neg", -0.0, neg);
    auto got = storage_->get_trial(t->trial_id);
    ASSERT_TRUE(got->params.at("x").is_number_float());
    EXPECT_EQ(bits(got->params.at("x").get<double>()), bits(x)) << x;
    EXPECT_EQ(bits(got->params.at("neg").get<double>()), bits(-0.0));
    EXPECT_TRUE(got->distributions.at("x") == f);
  }
  auto t = storage_->create_trial(study, running());
  storage_->set_trial_param(t->trial_id, "i", 123456, i);
  storage_->set_trial_param(t->trial_id, "i_neg", -5, i);
  const std::vector<Json> choices = {Json(), Json(true), Json(1), Json(1.5), Json("relu")};
  for (std::size_t k = 0; k < choices.size(); ++k)
    storage_->set_trial_param(t->trial_id, "c" + std::to_string(k), choices[k], c);
  storage_->set_trial_param(t->trial_id, "o_int", 32, o);
  storage_->set_trial_param(t->trial_id, "o_float", 64.5, o);
  storage_->set_trial_param(t->trial_id, "o_str", "big", o);
  auto got = storage_->get_trial(t->trial_id);
  EXPECT_TRUE(same_json(got->params.at("i"), 123456));
  EXPECT_TRUE(got->params.at("i").is_number_integer());
  EXPECT_TRUE(same_json(got->params.at("i_neg"), -5));
  for (std::size_t k = 0; k < choices.size(); ++k) {
    std::string name = "c" + std::to_string(k);
    ASSERT_TRUE(got->params.count(name)) << name;  // a null choice is present, not absent
    EXPECT_TRUE(same_json(got->params.at(name), choices[k])) << name;
    EXPECT_TRUE(got->distributions.at(name) == c);
  }
  EXPECT_TRUE(got->params.at("c0").is_null());
  EXPECT_TRUE(got->params.at("c1").is_boolean());
  EXPECT_TRUE(got->params.at("c2").is_number_integer());
  EXPECT_TRUE(got->params.at("c3").is_number_float());
  EXPECT_TRUE(got->params.at("c4").is_string());
  EXPECT_TRUE(same_json(got->params.at("o_int"), 32));
  EXPECT_TRUE(same_json(got->params.at("o_float"), 64.5));
  EXPECT_TRUE(same_json(got->params.at("o_str"), "big"));
  EXPECT_EQ(got->params.count("absent"), 0u);
  EXPECT_TRUE(got->distributions.at("o_str") == o);
}

TEST_P(StorageContract, ParamRules) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  auto c = Distribution::make_categorical({Json(1), Json(1.0), Json("1")});
  auto t = storage_->create_trial(study, running());
  storage_->set_trial_param(t->trial_id, "c", 1, c);
  storage_->set_trial_param(t->trial_id, "c", 1, c);  // same value again: allowed
  EXPECT_THROW(storage_->set_trial_param(t->trial_id, "c", 1.0, c), StorageError);
  EXPECT_THROW(storage_->set_trial_param(t->trial_id, "c", "1", c), StorageError);
  EXPECT_THROW(storage_->set_trial_param(t->trial_id, "d", "2", c), StorageError);  // not in c
  auto got = storage_->get_trial(t->trial_id);
  EXPECT_TRUE(same_json(got->params.at("c"), 1));
  EXPECT_EQ(got->params.count("d"), 0u);
}

TEST_P(StorageContract, ObjectiveValuesAreBitExact) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  const std::vector<double> values = {1.2345678901234567e-4,
                                      0.1,
                                      1e-308,
                                      4.9e-324,
                                      DBL_MAX,
                                      -DBL_MAX,
                                      kInf,
                                      -kInf,
                                      0.0,
                                      -0.0,
                                      3.0,
                                      -1e300};
  for (double v : values) {
    auto t = storage_->create_trial(study, running());
    EXPECT_TRUE(storage_->set_trial_state(t->trial_id, TrialState::kComplete, v));
    auto got = storage_->get_trial(t->trial_id);
    EXPECT_EQ(got->state, TrialState::kComplete);
    ASSERT_TRUE(got->value.has_value());
    EXPECT_EQ(bits(*got->value), bits(v)) << v;
    EXPECT_TRUE(got->datetime_complete.has_value());
  }
}

TEST_P(StorageContract, IntermediateValues) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  auto t = storage_->create_trial(study, running());
  const std::vector<std::pair<std::int64_t, double>> reports = {
      {0, 0.5},   {1, std::nan("")}, {2, kInf}, {3, -kInf}, {4, 1.2345678901234567e-4},
      {10, -0.0}, {-3, 1e-308}};
  for (const auto& [step, v] : reports)
    EXPECT_TRUE(storage_->set_trial_intermediate_value(t->trial_id, step, v));
  // A second report for a step keeps the first value.
  EXPECT_FALSE(storage_->set_trial_intermediate_value(t->trial_id, 0, 99.0));
  EXPECT_FALSE(storage_->set_trial_intermediate_value(t->trial_id, 1, 99.0));
  auto got = storage_->get_trial(t->trial_id);
  ASSERT_EQ(got->intermediate_values.size(), reports.size());
  for (const auto& [step, v] : reports) {
    double w = got->intermediate_values.at(step);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(w)) << step;
    } else {
      EXPECT_EQ(bits(w), bits(v)) << step;
    }
  }
  auto last = got->last_intermediate();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->first, 10);
}

TEST_P(StorageContract, TrialAttrs) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  NewTrial init = running();
  init.system_attrs = Json{{kAttrFixedParams, {{"lr", 0.1}}}};
  auto t = storage_->create_trial(study, init);
  EXPECT_TRUE(same_json(t->system_attrs, init.system_attrs));
  storage_->set_trial_user_attr(t->trial_id, "loss_curve", Json{1.5, 2, "x", nullptr, true});
  storage_->set_trial_user_attr(t->trial_id, "nested", Json{{"a", {{"b", 1.0}}}});
  storage_->set_trial_system_attr(t->trial_id, kAttrRetryOf, 3);
  storage_->set_trial_user_attr(t->trial_id, "nested", "replaced");
  auto got = storage_->get_trial(t->trial_id);
  EXPECT_EQ(got->user_attrs.dump(), R"({"loss_curve":[1.5,2,"x",null,true],"nested":"replaced"})");
  EXPECT_EQ(got->system_attrs.dump(), R"({"fixed_params":{"lr":0.1},"retry_of":3})");
  // Attrs stay writable after the trial finished (retried_as is set then).
  ASSERT_TRUE(storage_->set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, "boom"));
  storage_->set_trial_system_attr(t->trial_id, kAttrRetriedAs, 9);
  got = storage_->get_trial(t->trial_id);
  EXPECT_EQ(got->system_attrs.at(kAttrRetriedAs), 9);
  EXPECT_TRUE(got->was_retried());
  EXPECT_EQ(got->fail_reason, "boom");
  EXPECT_THROW(storage_->set_trial_user_attr(t->trial_id + 1000, "k", 1), StorageError);
}

TEST_P(StorageContract, NumbersAreContiguousAndFilteredByState) {
  auto s1 = storage_->create_study("one", StudyDirection::kMinimize, Json());
  auto s2 = storage_->create_study("two", StudyDirection::kMinimize, Json());
  for (int k = 0; k < 30; ++k) {
    NewTrial init = running();
    if (k % 3 == 0) init.state = TrialState::kWaiting;
    auto t = storage_->create_trial(k % 2 ? s1 : s2, init);
    if (k % 5 == 0 && init.state == TrialState::kRunning)
      storage_->set_trial_state(t->trial_id, TrialState::kComplete, k);
  }
  for (auto s : {s1, s2}) {
    auto all = storage_->get_all_trials(s, {});
    ASSERT_EQ(all.size(), 15u);
    for (std::size_t k = 0; k < all.size(); ++k) {
      EXPECT_EQ(all[k]->number, static_cast<std::int64_t>(k));
      EXPECT_EQ(storage_->get_trial_by_number(s, all[k]->number)->trial_id, all[k]->trial_id);
    }
    std::int64_t waiting = 0, complete = 0;
    for (const auto& t : all) {
      waiting += t->state == TrialState::kWaiting;
      complete += t->state == TrialState::kComplete;
    }
    auto w = storage_->get_all_trials(s, {TrialState::kWaiting});
    EXPECT_EQ(static_cast<std::int64_t>(w.size()), waiting);
    for (const auto& t : w) EXPECT_EQ(t->state, TrialState::kWaiting);
    EXPECT_EQ(storage_->count_trials(s, {TrialState::kWaiting, TrialState::kComplete}),
              waiting + complete);
    EXPECT_EQ(storage_->count_trials(s, {}), 15);
  }
  EXPECT_THROW(storage_->get_trial_by_number(s1, 15), StorageError);
}

TEST_P(StorageContract, ClaimsLowestWaitingTrial) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  EXPECT_EQ(storage_->claim_waiting_trial(study, "w0"), nullptr);
  auto d = Distribution::make_float(0, 1);
  for (int k = 0; k < 3; ++k) {
    NewTrial init;
    init.state = TrialState::kWaiting;
    init.params = {{"x", 0.25 * k}};
    init.distributions = {{"x", d}};
    auto t = storage_->create_trial(study, init);
    EXPECT_EQ(t->state, TrialState::kWaiting);
    EXPECT_FALSE(t->datetime_start.has_value());
  }
  storage_->create_trial(study, running());  // number 3, not waiting
  for (int k = 0; k < 3; ++k) {
    auto t = storage_->claim_waiting_trial(study, "worker-" + std::to_string(k));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->number, k);
    EXPECT_EQ(t->state, TrialState::kRunning);
    EXPECT_EQ(t->worker, "worker-" + std::to_string(k));
    EXPECT_TRUE(t->datetime_start.has_value());
    EXPECT_TRUE(same_json(t->params.at("x"), 0.25 * k));
    expect_same_trial(*t, *storage_->get_trial(t->trial_id));
  }
  EXPECT_EQ(storage_->claim_waiting_trial(study, "w"), nullptr);
}

TEST_P(StorageContract, FinishedTrialCannotChange) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  auto d = Distribution::make_float(0, 1);
  auto t = storage_->create_trial(study, running({{"x", 0.5}}, {{"x", d}}));
  // COMPLETE needs a value that is not NaN; the trial is left as it was.
  EXPECT_THROW(storage_->set_trial_state(t->trial_id, TrialState::kComplete), StorageError);
  EXPECT_THROW(storage_->set_trial_state(t->trial_id, TrialState::kComplete, std::nan("")),
               StorageError);
  EXPECT_EQ(storage_->get_trial(t->trial_id)->state, TrialState::kRunning);
  ASSERT_TRUE(storage_->set_trial_state(t->trial_id, TrialState::kComplete, 1.5));
  auto done = storage_->get_trial(t->trial_id);
  EXPECT_FALSE(storage_->set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, "late"));
  EXPECT_FALSE(storage_->set_trial_state(t->trial_id, TrialState::kComplete, 2.5));
  EXPECT_FALSE(storage_->set_trial_state(t->trial_id, TrialState::kRunning));
  EXPECT_THROW(storage_->set_trial_param(t->trial_id, "y", 0.5, d), StorageError);
  EXPECT_THROW(storage_->set_trial_intermediate_value(t->trial_id, 0, 1.0), StorageError);
  auto after = storage_->get_trial(t->trial_id);
  expect_same_trial(*done, *after);
  EXPECT_EQ(after->value, 1.5);
  EXPECT_TRUE(after->fail_reason.empty());
}

TEST_P(StorageContract, PrunedAndFailedStates) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  auto p = storage_->create_trial(study, running());
  storage_->set_trial_intermediate_value(p->trial_id, 4, 0.75);
  ASSERT_TRUE(storage_->set_trial_state(p->trial_id, TrialState::kPruned, 0.75));
  auto f = storage_->create_trial(study, running());
  ASSERT_TRUE(storage_->set_trial_state(f->trial_id, TrialState::kFail, std::nullopt,
                                        "worker lost: \xe2\x9c\x97"));
  auto pp = storage_->get_trial(p->trial_id);
  auto ff = storage_->get_trial(f->trial_id);
  EXPECT_EQ(pp->state, TrialState::kPruned);
  EXPECT_EQ(pp->value, 0.75);
  EXPECT_TRUE(pp->datetime_complete.has_value());
  EXPECT_EQ(ff->state, TrialState::kFail);
  EXPECT_FALSE(ff->value.has_value());
  EXPECT_EQ(ff->fail_reason, "worker lost: \xe2\x9c\x97");
  ASSERT_TRUE(ff->duration_s().has_value());
  EXPECT_GE(*ff->duration_s(), 0.0);
}

TEST_P(StorageContract, UnknownIdsThrow) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  auto d = Distribution::make_float(0, 1);
  EXPECT_THROW(storage_->get_trial(12345), StorageError);
  EXPECT_THROW(storage_->create_trial(study + 77, running()), StorageError);
  EXPECT_THROW(storage_->set_trial_param(12345, "x", 0.5, d), StorageError);
  EXPECT_THROW(storage_->set_trial_intermediate_value(12345, 0, 0.5), StorageError);
  EXPECT_THROW(storage_->set_trial_state(12345, TrialState::kFail), StorageError);
  EXPECT_THROW(storage_->get_all_trials(study + 77, {}), StorageError);
}

TEST_P(StorageContract, SnapshotsAreImmutable) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  auto t = storage_->create_trial(study, running());
  auto before = storage_->get_all_trials(study, {});
  storage_->set_trial_intermediate_value(t->trial_id, 0, 1.0);
  storage_->set_trial_state(t->trial_id, TrialState::kComplete, 1.0);
  // Snapshots taken before the writes still show the old state.
  EXPECT_EQ(before[0]->state, TrialState::kRunning);
  EXPECT_TRUE(before[0]->intermediate_values.empty());
  EXPECT_EQ(storage_->get_all_trials(study, {})[0]->state, TrialState::kComplete);
}

TEST_P(StorageContract, ConcurrentThreads) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  constexpr int kThreads = 4, kPerThread = 25;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      try {
        for (int k = 0; k < kPerThread; ++k) {
          auto t = storage_->create_trial(study, running());
          storage_->set_trial_intermediate_value(t->trial_id, 0, w + 0.5);
          storage_->set_trial_state(t->trial_id, TrialState::kComplete, k);
          auto all = storage_->get_all_trials(study, {});
          for (std::size_t i = 0; i < all.size(); ++i)
            if (all[i]->number != static_cast<std::int64_t>(i)) ++errors;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  auto all = storage_->get_all_trials(study, {});
  ASSERT_EQ(all.size(), static_cast<std::size_t>(kThreads * kPerThread));
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i]->number, static_cast<std::int64_t>(i));
    EXPECT_EQ(all[i]->state, TrialState::kComplete);
  }
}

TEST_P(StorageContract, RunInTransactionCommits) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  storage_->run_in_transaction([&] {
    for (int k = 0; k < 5; ++k) {
      auto t = storage_->create_trial(study, running());
      storage_->run_in_transaction([&] {  // nested: joins the outer unit
        storage_->set_trial_state(t->trial_id, TrialState::kComplete, k);
      });
    }
    // Reads inside the unit see its writes.
    EXPECT_EQ(storage_->count_trials(study, {TrialState::kComplete}), 5);
  });
  EXPECT_EQ(storage_->count_trials(study, {TrialState::kComplete}), 5);
}

TEST_P(StorageContract, RunInTransactionRollsBackEverythingWhenItThrows) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  auto keep = storage_->create_trial(study, running());
  EXPECT_THROW(storage_->run_in_transaction([&] {
    for (int k = 0; k < 3; ++k) {
      auto t = storage_->create_trial(study, running());
      storage_->set_trial_intermediate_value(t->trial_id, 0, 1.0);
    }
    storage_->set_trial_state(keep->trial_id, TrialState::kComplete, 1.0);
    storage_->set_study_user_attr(study, "k", 1);
    EXPECT_EQ(storage_->count_trials(study, {}), 4);
    throw std::runtime_error("objective failed");
  }),
               std::runtime_error);
  auto all = storage_->get_all_trials(study, {});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0]->state, TrialState::kRunning);
  EXPECT_FALSE(all[0]->value.has_value());
  EXPECT_TRUE(storage_->get_study(study).user_attrs.empty());
  EXPECT_EQ(storage_->create_trial(study, running())->number, 1);
}

TEST_P(StorageContract, FailedNestedTransactionUndoesOnlyItsOwnWrites) {
  auto study = storage_->create_study("s", StudyDirection::kMinimize, Json());
  storage_->run_in_transaction([&] {
    storage_->create_trial(study, running());
    EXPECT_THROW(storage_->run_in_transaction([&] {
      storage_->create_trial(study, running());
      throw std::runtime_error("inner");
    }),
                 std::runtime_error);
    storage_->create_trial(study, running());
  });
  auto all = storage_->get_all_trials(study, {});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->number, 0);
  EXPECT_EQ(all[1]->number, 1);
}

std::vector<StorageFactory> all_storages() {
  return {
      {"InMemory", [](const std::string&) { return std::make_shared<InMemoryStorage>(); }},
      {"Sqlite", [](const std::string& file) { return std::make_shared<SqliteStorage>(file); }},
      {"SqliteInMemoryDb",
       [](const std::string&) { return std::make_shared<SqliteStorage>(":memory:"); }},
      {"CachingInMemory",
       [](const std::string&) {
         return std::make_shared<CachingStorage>(std::make_shared<InMemoryStorage>());
       }},
      {"CachingSqlite",
       [](const std::string& file) {
         return std::make_shared<CachingStorage>(std::make_shared<SqliteStorage>(file));
       }},
  };
}

INSTANTIATE_TEST_SUITE_P(AllStorages, StorageContract, ::testing::ValuesIn(all_storages()),
                         [](const auto& param_info) { return param_info.param.name; });

// ======================================================================
// SqliteStorage only.

class SqliteStorageTest : public ::testing::Test {
 protected:
  std::string path() const { return dir_.file("study.db"); }
  TempDir dir_;
};

// SQLite tests of what readers see (other connections, other processes,
// reopened files, damaged rows): on a plain SqliteStorage and on one inside
// a CachingStorage (what open_storage() gives).
struct SqliteOpener {
  std::string name;
  std::function<std::shared_ptr<Storage>(const std::string& path)> open;
};
[[maybe_unused]] void PrintTo(const SqliteOpener& o, std::ostream* os) { *os << o.name; }

class SqliteReads : public ::testing::TestWithParam<SqliteOpener> {
 protected:
  std::string path() const { return dir_.file("study.db"); }
  std::shared_ptr<Storage> open(const std::string& file) const { return GetParam().open(file); }
  TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(PlainAndCached, SqliteReads,
                         ::testing::Values(SqliteOpener{"Plain",
                                                        [](const std::string& p) {
                                                          return std::make_shared<SqliteStorage>(p);
                                                        }},
                                           SqliteOpener{"Cached",
                                                        [](const std::string& p) {
                                                          return std::make_shared<CachingStorage>(
                                                              std::make_shared<SqliteStorage>(p));
                                                        }}),
                         [](const auto& param_info) { return param_info.param.name; });

// A study with trials of every kind, for reopen and cache tests.
void populate(Storage& storage, std::int64_t study) {
  auto f = Distribution::make_float(1e-5, 1.0, true);
  auto q = Distribution::make_float(0.0, 0.5, false, 0.05);
  auto i = Distribution::make_int(1, 512, true);
  auto c = Distribution::make_categorical({Json(), Json(true), Json(1), Json(1.5), Json("relu")});
  auto o = Distribution::make_ordinal({Json(16), Json(32), Json(64)});
  const std::vector<Json> choices = {Json(), Json(true), Json(1), Json(1.5), Json("relu")};
  for (int k = 0; k < 12; ++k) {
    NewTrial init;
    init.state = k % 4 == 3 ? TrialState::kWaiting : TrialState::kRunning;
    init.worker = "host:" + std::to_string(100 + k);
    if (k % 4 == 3) {
      init.params = {{"c", choices[static_cast<std::size_t>(k) % choices.size()]}};
      init.distributions = {{"c", c}};
      init.system_attrs = Json{{kAttrFixedParams, init.params.at("c")}};
    }
    auto t = storage.create_trial(study, init);
    if (init.state == TrialState::kWaiting) continue;
    storage.set_trial_param(t->trial_id, "lr", 1.2345678901234567e-4 * (k + 1), f);
    storage.set_trial_param(t->trial_id, "dropout", 0.05 * (k % 10), q);
    storage.set_trial_param(t->trial_id, "hidden", 32 + k, i);
    storage.set_trial_param(t->trial_id, "act",
                            choices[static_cast<std::size_t>(k) % choices.size()], c);
    storage.set_trial_param(t->trial_id, "batch", 32, o);
    for (int step = 0; step < 5; ++step)
      storage.set_trial_intermediate_value(t->trial_id, step,
                                           step == 2 ? std::nan("") : 1.0 / (step + k + 1));
    storage.set_trial_user_attr(t->trial_id, "epoch_s", Json{0.1, 0.2});
    switch (k % 4) {
      case 0:
        storage.set_trial_state(t->trial_id, TrialState::kComplete, k == 4 ? -kInf : 0.1 * k);
        break;
      case 1:
        storage.set_trial_state(t->trial_id, TrialState::kPruned, 0.5);
        break;
      case 2:
        if (k != 6)
          storage.set_trial_state(t->trial_id, TrialState::kFail, std::nullopt,
                                  "OOM \xf0\x9f\x92\xa5");
        break;
    }
  }
}

TEST_P(SqliteReads, ReopeningGivesIdenticalTrials) {
  std::vector<TrialPtr> before;
  StudyInfo info_before;
  const std::string name = "\xc3\xa9tude \xe7\xa0\x94\xe7\xa9\xb6 \xf0\x9f\x9a\x80";
  {
    auto storage = open(path());
    auto study = storage->create_study(name, StudyDirection::kMaximize, Json{{"budget", 3}});
    storage->set_study_user_attr(study, "k", Json{{"v", 1.5}});
    populate(*storage, study);
    before = storage->get_all_trials(study, {});
    info_before = storage->get_study(study);
  }
  auto reopened = open(path());
  auto study = reopened->find_study(name);
  ASSERT_TRUE(study.has_value());
  auto info = reopened->get_study(*study);
  EXPECT_EQ(info.name, name);
  EXPECT_EQ(info.direction, StudyDirection::kMaximize);
  EXPECT_EQ(info.config.dump(), info_before.config.dump());
  EXPECT_EQ(info.user_attrs.dump(), info_before.user_attrs.dump());
  auto after = reopened->get_all_trials(*study, {});
  ASSERT_EQ(after.size(), before.size());
  ASSERT_EQ(after.size(), 12u);
  for (std::size_t k = 0; k < after.size(); ++k) expect_same_trial(*before[k], *after[k]);
  EXPECT_EQ(bits(*after[4]->value), bits(-kInf));
  EXPECT_TRUE(std::isnan(after[0]->intermediate_values.at(2)));
  // WAITING trials with enqueued categorical params (choices 1.5, 1, true).
  EXPECT_TRUE(same_json(after[3]->params.at("c"), 1.5));
  EXPECT_TRUE(same_json(after[7]->params.at("c"), 1));
  EXPECT_TRUE(same_json(after[11]->params.at("c"), true));
}

// Trials with the same distributions share one map when read back (memory
// of large studies); a trial with other distributions, or whose param was
// added later with set_trial_param, has its own, with the right content.
TEST_P(SqliteReads, TrialsWithTheSameDistributionsShareOneMapWhenRead) {
  auto x = Distribution::make_float(0.0, 1.0);
  auto k = Distribution::make_int(1, 8);
  std::int64_t study = 0;
  {
    auto storage = open(path());
    study = storage->create_study("s", StudyDirection::kMinimize, Json());
    for (int n = 0; n < 40; ++n) {
      NewTrial init =
          running({{"x", Json(0.01 * n)}, {"k", Json(1 + n % 8)}}, {{"x", x}, {"k", k}});
      if (n == 17) init = running({{"x", Json(0.5)}}, {{"x", x}});
      auto t = storage->create_trial(study, init);
      if (n == 23) storage->set_trial_param(t->trial_id, "z", Json(0.25), x);
      storage->set_trial_state(t->trial_id, TrialState::kComplete, 1.0 * n);
    }
  }
  auto trials = open(path())->get_all_trials(study, {});
  ASSERT_EQ(trials.size(), 40u);
  const DistributionMap both{{"x", x}, {"k", k}};
  for (std::size_t n = 0; n < trials.size(); ++n) {
    const auto& d = trials[n]->distributions;
    if (n == 17) {
      EXPECT_TRUE(d == DistributionMap({{"x", x}}));
      EXPECT_FALSE(d.shares_map_with(trials[0]->distributions));
    } else if (n == 23) {
      EXPECT_TRUE(d == DistributionMap({{"x", x}, {"k", k}, {"z", x}}));
      EXPECT_FALSE(d.shares_map_with(trials[0]->distributions));
    } else {
      EXPECT_TRUE(d == both) << n;
      EXPECT_TRUE(d.shares_map_with(trials[0]->distributions)) << n;
    }
  }
}

// A distribution first written in a transaction that is rolled back (the
// whole transaction, or a savepoint inside one) is written again by the
// next trial that has it: its id from the undone write is not reused (the
// trial would name a distribution the file does not have).
TEST_F(SqliteStorageTest, ADistributionWrittenInARolledBackTransactionIsWrittenAgain) {
  const auto x = Distribution::make_float(0.0, 1.0, false);
  const auto k = Distribution::make_int(1, 8, false);
  std::int64_t study = 0;
  {
    SqliteStorage storage(path());
    study = storage.create_study("s", StudyDirection::kMinimize, Json());
    NewTrial init = running({{"x", Json(0.5)}}, {{"x", x}});
    EXPECT_THROW(storage.run_in_transaction([&] {
      storage.create_trial(study, init);
      throw std::runtime_error("undo");
    }),
                 std::runtime_error);
    storage.create_trial(study, init);
    storage.run_in_transaction([&] {
      auto t = storage.create_trial(study, running({{"y", Json(0.5)}}, {}));
      EXPECT_THROW(storage.run_in_transaction([&] {
        storage.set_trial_param(t->trial_id, "k", Json(3), k);
        throw std::runtime_error("undo");
      }),
                   std::runtime_error);
      storage.set_trial_param(t->trial_id, "k", Json(3), k);
    });
  }
  SqliteStorage fresh(path());
  auto trials = fresh.get_all_trials(study);
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_TRUE(trials[0]->distributions == DistributionMap({{"x", x}}));
  EXPECT_TRUE(trials[1]->distributions == DistributionMap({{"k", k}}));
  EXPECT_EQ(raw_query_text(path(), "SELECT count(*) FROM distributions"), "2");
}

// set_trial_param keeps a trial's params in name order in its one row,
// whatever order they are set in; setting one again with the same value
// replaces only its distribution, with another value is refused with the
// message of before and changes nothing.
TEST_F(SqliteStorageTest, SetTrialParamKeepsNameOrderAndRefusesAChange) {
  const auto f = Distribution::make_float(0.0, 1.0, false);
  const auto g = Distribution::make_float(0.0, 2.0, false);
  SqliteStorage storage(path());
  auto study = storage.create_study("s", StudyDirection::kMinimize, Json());
  auto t = storage.create_trial(study, running({{"m", Json(0.5)}}, {{"m", f}}));
  for (const char* name : {"z", "a", "q", "b"}) storage.set_trial_param(t->trial_id, name, 0.25, f);
  storage.set_trial_param(t->trial_id, "q", 0.25, g);
  std::string msg = error_of([&] { storage.set_trial_param(t->trial_id, "a", 0.75, f); });
  EXPECT_NE(msg.find("param 'a' of trial 0 is already set to 0.25; cannot change it to 0.75"),
            std::string::npos)
      << msg;
  SqliteStorage fresh(path());
  auto read = fresh.get_trial(t->trial_id);
  std::vector<std::string> names;
  for (const auto& [name, v] : read->params) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "m", "q", "z"}));
  EXPECT_EQ(read->params.at("a"), Json(0.25));
  EXPECT_TRUE(read->distributions.at("q") == g);
  EXPECT_TRUE(read->distributions.at("z") == f);
  EXPECT_EQ(raw_query_text(path(), "SELECT count(*) FROM trial_param_sets"), "1");
}

TEST_F(SqliteStorageTest, SchemaVersionIsRecorded) {
  { SqliteStorage storage(path()); }
  EXPECT_EQ(raw_query_text(path(), "PRAGMA user_version"),
            std::to_string(SqliteStorage::kSchemaVersion));
  EXPECT_EQ(raw_query_text(path(), "PRAGMA journal_mode"), "wal");
  { SqliteStorage again(path()); }  // opening a current file again works
}

TEST_F(SqliteStorageTest, NewerSchemaIsRefused) {
  { SqliteStorage storage(path()); }
  raw_exec(path(), "PRAGMA user_version = 99");
  EXPECT_THROW(SqliteStorage storage(path()), StoreRefused);  // the CLI's exit 2
  std::string msg = error_of([&] { SqliteStorage storage(path()); });
  EXPECT_NE(msg.find("schema version 99 is newer than this hpsearch supports (" +
                     std::to_string(SqliteStorage::kSchemaVersion) + "); upgrade hpsearch"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(path()), std::string::npos) << msg;
}

TEST_F(SqliteStorageTest, NotADatabaseIsRefused) {
  {
    std::ofstream out(path());
    for (int k = 0; k < 20; ++k) out << "this is a text file, not a SQLite database\n";
  }
  std::string msg = error_of([&] { SqliteStorage storage(path()); });
  EXPECT_NE(msg.find("not a SQLite database"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path()), std::string::npos) << msg;
}

// A store cut short (a full disk, a partial copy): the error says the file
// is damaged and what to do, not only SQLite's words; the file is unchanged.
TEST_F(SqliteStorageTest, ACutShortStoreIsCalledDamaged) {
  {
    SqliteStorage storage(path());
    storage.create_study("s", StudyDirection::kMinimize, Json());
  }
  std::filesystem::resize_file(path(), 3000);
  const std::string before = testsupport::read_file(path());
  std::string msg = error_of([&] { SqliteStorage storage(path()); });
  EXPECT_NE(msg.find("the file is damaged (cut short or overwritten"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path()), std::string::npos) << msg;
  EXPECT_EQ(testsupport::read_file(path()), before);
}

TEST_F(SqliteStorageTest, OtherProgramsDatabaseIsRefusedAndLeftAlone) {
  raw_exec(path(), "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT)");
  std::string msg = error_of([&] { SqliteStorage storage(path()); });
  EXPECT_NE(msg.find("another program"), std::string::npos) << msg;
  EXPECT_EQ(raw_query_text(path(), "PRAGMA journal_mode"), "delete");
  EXPECT_EQ(raw_query_text(path(), "PRAGMA user_version"), "0");
}

// user_version is any program's to set: a file that says 1 (or 3, ours
// today) without hpsearch's tables is still another program's, and neither
// opening it changes it.
TEST_F(SqliteStorageTest, OtherProgramsDatabaseWithAUserVersionIsRefusedAndLeftAlone) {
  for (const char* version : {"1", "3"}) {
    std::filesystem::remove(path());
    raw_exec(path(), "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT)");
    raw_exec(path(), (std::string("PRAGMA user_version=") + version).c_str());
    const std::string before = testsupport::read_file(path());
    std::string msg = error_of([&] { SqliteStorage storage(path()); });
    EXPECT_NE(msg.find("another program"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lacks hpsearch's tables"), std::string::npos) << msg;
    EXPECT_EQ(raw_query_text(path(), "PRAGMA user_version"), version);
    EXPECT_EQ(raw_query_text(path(), "SELECT count(*) FROM sqlite_master"), "1");
    EXPECT_EQ(testsupport::read_file(path()), before);
  }
}

TEST_F(SqliteStorageTest, EmptyFileGetsTheSchema) {
  { std::ofstream out(path()); }
  SqliteStorage storage(path());
  auto id = storage.create_study("s", StudyDirection::kMinimize, Json());
  EXPECT_EQ(storage.find_study("s"), id);
}

TEST_F(SqliteStorageTest, UnopenablePathIsRefused) {
  std::string msg = error_of([&] { SqliteStorage storage(dir_.file("no/such/dir/x.db")); });
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST_F(SqliteStorageTest, OptionsAreValidated) {
  SqliteOptions bad;
  bad.busy_timeout_ms = -1;
  try {
    SqliteStorage storage(path(), bad);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "sqlite.busy_timeout_ms");
  }
  SqliteOptions sync;
  sync.synchronous = "sometimes";
  EXPECT_THROW(sync.validate(), ConfigError);
  sync.synchronous = "full";
  EXPECT_NO_THROW(sync.validate());
  SqliteStorage storage(path(), sync);
  EXPECT_EQ(storage.path(), path());
  SqliteOptions pages;
  pages.checkpoint_pages = 0;
  try {
    pages.validate();
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "sqlite.checkpoint_pages");
  }
}

// Writes `n` trials with 10 float params each, one transaction per trial.
void write_trials(SqliteStorage& storage, std::int64_t study, int n) {
  auto d = Distribution::make_float(-5.0, 5.0);
  for (int k = 0; k < n; ++k) {
    NewTrial init;
    for (int p = 0; p < 10; ++p) {
      init.params["x" + std::to_string(p)] = 0.001 * k + p;
      init.distributions.insert_or_assign("x" + std::to_string(p), d);
    }
    auto t = storage.create_trial(study, init);
    storage.set_trial_state(t->trial_id, TrialState::kComplete, 1.0 * k);
  }
}

// The WAL is copied into the database file by the background thread, and
// stays bounded whether the thread keeps up or not (the writer checkpoints
// itself at 8 x checkpoint_pages).
TEST_F(SqliteStorageTest, BackgroundCheckpointsKeepTheWalBounded) {
  for (bool background : {true, false}) {
    SCOPED_TRACE(background ? "background" : "SQLite's automatic checkpoint");
    std::filesystem::remove(path());
    SqliteOptions options;
    options.checkpoint_pages = 20;
    options.background_checkpoint = background;
    std::int64_t study = 0;
    {
      SqliteStorage storage(path(), options);
      study = storage.create_study("s", StudyDirection::kMinimize, Json());
      write_trials(storage, study, 600);
      if (background) {
        auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (storage.background_checkpoints() == 0 && std::chrono::steady_clock::now() < give_up)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        EXPECT_GT(storage.background_checkpoints(), 0);
      } else {
        EXPECT_EQ(storage.background_checkpoints(), 0);
      }
      // 600 trials wrote thousands of WAL frames; the file never held more
      // than the limit plus one commit.
      auto wal = std::filesystem::file_size(path() + "-wal");
      EXPECT_LE(wal, (8 * 20 + 64) * (4096 + 24) + 32) << wal;
      SqliteStorage reader(path());
      EXPECT_EQ(reader.count_trials(study, {TrialState::kComplete}), 600);
    }
    SqliteStorage reopened(path());
    EXPECT_EQ(reopened.count_trials(study, {TrialState::kComplete}), 600);
  }
}

TEST_F(SqliteStorageTest, InvalidUtf8IsRefused) {
  SqliteStorage storage(path());
  EXPECT_THROW(storage.create_study("bad \xff\xfe name", StudyDirection::kMinimize, Json()),
               StorageError);
  EXPECT_TRUE(storage.list_studies().empty());
}

TEST_P(SqliteReads, RunInTransactionRollsBackOnException) {
  auto storage = open(path());
  auto study = storage->create_study("s", StudyDirection::kMinimize, Json());
  auto keep = storage->create_trial(study, running());
  EXPECT_THROW(storage->run_in_transaction([&] {
    for (int k = 0; k < 3; ++k) {
      auto t = storage->create_trial(study, running());
      storage->set_trial_intermediate_value(t->trial_id, 0, 1.0);
    }
    storage->set_trial_state(keep->trial_id, TrialState::kComplete, 1.0);
    storage->set_study_user_attr(study, "k", 1);
    EXPECT_EQ(storage->count_trials(study, {}), 4);
    throw std::runtime_error("objective failed");
  }),
               std::runtime_error);
  auto check = [&](Storage& s) {
    auto all = s.get_all_trials(study, {});
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0]->state, TrialState::kRunning);
    EXPECT_TRUE(s.get_study(study).user_attrs.empty());
  };
  check(*storage);
  SqliteStorage other(path());
  check(other);
  // The next trial number is 1 again: the rolled-back numbers are reused.
  EXPECT_EQ(storage->create_trial(study, running())->number, 1);
}

TEST_F(SqliteStorageTest, ConnectionsOpeningANewFileTogetherAllSucceed) {
  // A run creating its store while `hpsearch status` polls it: whoever
  // creates the schema, nobody may take the file for another program's.
  for (int round = 0; round < 20; ++round) {
    const std::string file = dir_.file("race" + std::to_string(round) + ".db");
    { std::ofstream touch(file); }  // an empty file, as a creator leaves it at first
    std::atomic<int> failures{0};
    std::string first_error;
    std::mutex mu;
    std::vector<std::thread> threads;
    for (int k = 0; k < 6; ++k) {
      threads.emplace_back([&] {
        try {
          SqliteStorage s(file);
          (void)s.list_studies();
        } catch (const std::exception& e) {
          ++failures;
          std::lock_guard lock(mu);
          if (first_error.empty()) first_error = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(failures.load(), 0) << "round " << round << ": " << first_error;
  }
}

TEST_P(SqliteReads, NestedTransactionFailureRollsBackOnlyItsPart) {
  auto storage = open(path());
  auto study = storage->create_study("s", StudyDirection::kMinimize, Json());
  storage->run_in_transaction([&] {
    storage->create_trial(study, running());
    try {
      storage->run_in_transaction([&] {
        storage->create_trial(study, running());
        throw std::runtime_error("inner");
      });
    } catch (const std::runtime_error&) {
    }
    storage->create_trial(study, running());
  });
  SqliteStorage other(path());
  auto all = other.get_all_trials(study, {});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->number, 0);
  EXPECT_EQ(all[1]->number, 1);
  expect_same_trial(*all[1], *storage->get_all_trials(study, {})[1]);
}

TEST_P(SqliteReads, FailedCallLeavesNothingHalfWritten) {
  auto storage = open(path());
  auto study = storage->create_study("s", StudyDirection::kMinimize, Json());
  // The trial row is inserted before the bad (NaN) param is seen.
  NewTrial init = running({{"a", 0.5}, {"b", std::nan("")}});
  EXPECT_THROW(storage->create_trial(study, init), StorageError);
  EXPECT_EQ(storage->count_trials(study, {}), 0);
  SqliteStorage other(path());
  EXPECT_EQ(other.count_trials(study, {}), 0);
  EXPECT_EQ(raw_query_text(path(), "SELECT count(*) FROM trial_param_sets"), "0");
}

TEST_P(SqliteReads, SecondConnectionSeesWritesOnNextRead) {
  auto a = open(path());
  auto b = open(path());
  auto study = a->create_study("s", StudyDirection::kMinimize, Json());
  ASSERT_EQ(b->find_study("s"), study);
  EXPECT_TRUE(b->get_all_trials(study, {}).empty());  // b caches the empty study
  auto t = a->create_trial(study, running());
  a->set_trial_intermediate_value(t->trial_id, 0, 0.25);
  auto seen = b->get_all_trials(study, {});
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]->state, TrialState::kRunning);
  EXPECT_EQ(seen[0]->intermediate_values.at(0), 0.25);
  a->set_trial_state(t->trial_id, TrialState::kComplete, 0.125);
  EXPECT_EQ(b->get_trial(t->trial_id)->state, TrialState::kComplete);
  EXPECT_EQ(b->get_trial(t->trial_id)->value, 0.125);
  // Writes from b are seen by a, and numbers stay contiguous across both.
  for (int k = 0; k < 6; ++k) (k % 2 ? a : b)->create_trial(study, running());
  a->set_study_system_attr(study, "x", 1);
  EXPECT_EQ(b->get_study(study).system_attrs.at("x"), 1);
  auto from_a = a->get_all_trials(study, {});
  auto from_b = b->get_all_trials(study, {});
  ASSERT_EQ(from_a.size(), 7u);
  ASSERT_EQ(from_b.size(), 7u);
  for (std::size_t k = 0; k < 7; ++k) {
    EXPECT_EQ(from_a[k]->number, static_cast<std::int64_t>(k));
    expect_same_trial(*from_a[k], *from_b[k]);
  }
}

TEST_F(SqliteStorageTest, CachingStorageKeepsItsSnapshotsUntilAnotherConnectionWrites) {
  CachingStorage a(std::make_shared<SqliteStorage>(path()));
  auto study = a.create_study("s", StudyDirection::kMinimize, Json());
  auto t0 = a.create_trial(study, running());
  auto t1 = a.create_trial(study, running());
  auto first = a.get_all_trials(study, {});
  auto second = a.get_all_trials(study, {});
  // Nothing changed: the same snapshots are handed out again.
  EXPECT_EQ(first[0].get(), second[0].get());
  a.set_trial_intermediate_value(t1->trial_id, 0, 1.0);
  auto third = a.get_all_trials(study, {});
  EXPECT_EQ(third[0].get(), first[0].get());  // untouched trial: same snapshot
  EXPECT_NE(third[1].get(), first[1].get());  // written trial: a new snapshot
  EXPECT_EQ(third[1]->intermediate_values.at(0), 1.0);
  // A write by another connection drops the cache: all snapshots are new.
  {
    SqliteStorage b(path());
    b.set_trial_user_attr(t0->trial_id, "from", "b");
  }
  auto fourth = a.get_all_trials(study, {});
  EXPECT_NE(fourth[1].get(), third[1].get());
  EXPECT_EQ(fourth[0]->user_attrs.at("from"), "b");
  expect_same_trial(*fourth[1], *third[1]);
}

TEST_P(SqliteReads, CachedSnapshotsEqualFreshReads) {
  auto a = open(path());
  auto study = a->create_study("s", StudyDirection::kMinimize, Json());
  populate(*a, study);
  auto cached = a->get_all_trials(study, {});
  SqliteStorage b(path());
  auto fresh = b.get_all_trials(study, {});
  ASSERT_EQ(cached.size(), fresh.size());
  for (std::size_t k = 0; k < cached.size(); ++k) expect_same_trial(*cached[k], *fresh[k]);
}

// Writes to a cached study update its snapshots in memory instead of reading
// them back (Cached: SqliteStorage tells CachingStorage what each write
// changed; Plain: the snapshots create_trial and claim_waiting_trial return
// are built from what was written): those snapshots must be exactly what a
// fresh connection reads (JSON types, bits of every double, times to the
// microsecond).
TEST_P(SqliteReads, SnapshotsUpdatedInMemoryEqualFreshReads) {
  auto a = open(path());
  auto study = a->create_study("s", StudyDirection::kMinimize, Json());
  ASSERT_TRUE(a->get_all_trials(study, {}).empty());  // the study is cached from here on
  populate(*a, study);
  NewTrial init = running();
  init.params = {{"neg_zero", -0.0}, {"big", Json(std::uint64_t{1} << 63)},
                 {"neg", -3},        {"s", "x"},
                 {"b", false},       {"n", nullptr}};
  init.system_attrs = Json{{"retry_of", 2}, {"deep", Json{{"a", Json::array({1, -0.0})}}}};
  auto t = a->create_trial(study, init);
  a->set_trial_system_attr(t->trial_id, "u", Json(std::uint64_t{7}));
  a->set_trial_intermediate_value(t->trial_id, 3, -0.0);
  a->set_trial_state(t->trial_id, TrialState::kComplete, -0.0);
  NewTrial enqueued;
  enqueued.state = TrialState::kWaiting;
  a->create_trial(study, enqueued);
  auto claimed = a->claim_waiting_trial(study, "w:1");
  ASSERT_TRUE(claimed);
  auto cached = a->get_all_trials(study, {});
  SqliteStorage b(path());
  auto fresh = b.get_all_trials(study, {});
  ASSERT_EQ(cached.size(), fresh.size());
  for (std::size_t k = 0; k < cached.size(); ++k) {
    expect_same_trial(*cached[k], *fresh[k]);
    EXPECT_EQ(trial_to_json(*cached[k]).dump(), trial_to_json(*fresh[k]).dump()) << k;
    for (const auto& [name, v] : cached[k]->params)
      EXPECT_EQ(v.type(), fresh[k]->params.at(name).type()) << k << " " << name;
    EXPECT_EQ(cached[k]->system_attrs.dump(), fresh[k]->system_attrs.dump()) << k;
  }
  EXPECT_EQ(bits(*cached[static_cast<std::size_t>(t->number)]->value), bits(-0.0));
  EXPECT_EQ(bits(cached[static_cast<std::size_t>(t->number)]->params.at("neg_zero").get<double>()),
            bits(-0.0));
  EXPECT_EQ(cached[static_cast<std::size_t>(claimed->number)]->state, TrialState::kRunning);
  EXPECT_EQ(cached[static_cast<std::size_t>(claimed->number)]->worker, "w:1");
}

// Damaged rows give a StorageError naming the table, not a crash.
TEST_P(SqliteReads, DamagedRowsGiveClearErrors) {
  struct Case {
    const char* sql;
    const char* expect;
  };
  // Param sets (search/sqlite/param_set.h): X'01' format, count, then per
  // param name length, name, distribution id, value tag and payload.
  const std::vector<Case> cases = {
      // One param 'x' without a distribution whose JSON text is "{bad".
      {"UPDATE trial_param_sets SET data = X'010101780007047b626164'",
       "name='x': column data: invalid JSON"},
      {"UPDATE distributions SET distribution_json = '{\"type\": \"bogus' || distribution_id || "
       "'\"}'",
       "column distribution_json: bad distribution"},
      {"UPDATE distributions SET distribution_json = '[1,' || distribution_id",
       "distributions row distribution_id="},
      {"UPDATE distributions SET distribution_json = '[1,' || distribution_id",
       "column distribution_json: invalid JSON"},
      {"UPDATE trial_param_sets SET data = 'text'", "column data is not a blob"},
      {"UPDATE trial_param_sets SET data = 'text'", "trial_param_sets row trial_id="},
      {"UPDATE trial_param_sets SET data = substr(data, 1, length(data) - 3)",
       "column data: truncated"},
      {"UPDATE trial_param_sets SET data = X''", "column data: empty"},
      {"UPDATE trial_param_sets SET data = X'0201'", "column data: unknown format 2"},
      {"UPDATE trial_param_sets SET data = X'010101780009'",
       "name='x': column data: unknown value tag 9"},
      {"UPDATE trial_param_sets SET data = CAST(data || X'00' AS BLOB)",
       "column data: 1 bytes after the last param"},
      // A count far beyond what the blob holds (no huge allocation).
      {"UPDATE trial_param_sets SET data = X'01ffffffff0f'", "column data: truncated"},
      // A float value 'x' that is NaN (never stored).
      {"UPDATE trial_param_sets SET data = X'010101780003000000000000f87f'",
       "name='x': column data: a float value is NaN"},
      // A distribution id that names no row.
      {"UPDATE distributions SET distribution_id = distribution_id + 1000",
       "is not in table distributions"},
      {"UPDATE trials SET state = 9", "unknown trial state 9"},
      {"UPDATE trials SET value = 'oops'",
       "trials row trial_id=1 (trial number 0): column value is not a number"},
      {"UPDATE trials SET datetime_start = 1e300", "time out of range"},
      {"UPDATE trials SET number = 'x' WHERE number = 0", "trials row"},
      {"UPDATE trial_attrs SET value_json = 'nope'", "trial_attrs"},
      {"UPDATE trial_attrs SET kind = 5", "unknown attr kind 5"},
      {"UPDATE trial_intermediate_values SET value = X'00'", "trial_intermediate_values"},
      {"UPDATE studies SET direction = 7", "unknown study direction 7"},
      {"UPDATE study_attrs SET value_json = ''", "study_attrs"},
  };
  const std::string pristine = dir_.file("pristine.db");
  std::int64_t study = 0;
  {
    SqliteStorage storage(pristine);
    study = storage.create_study("s", StudyDirection::kMinimize, Json());
    storage.set_study_user_attr(study, "k", 1);
    populate(storage, study);
  }  // closing the only connection checkpoints the WAL into the file
  ASSERT_FALSE(fs::exists(pristine + "-wal"));
  for (const auto& c : cases) {
    SCOPED_TRACE(c.sql);
    fs::copy_file(pristine, path(), fs::copy_options::overwrite_existing);
    auto storage = open(path());
    storage->get_study(study);
    storage->get_all_trials(study, {});  // cached before the damage (Cached)
    raw_exec(path(), c.sql);
    std::string msg = error_of([&] {
      storage->get_study(study);
      storage->get_all_trials(study, {});
    });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    // A fresh connection reports the same.
    std::string msg2 = error_of([&] {
      auto other = open(path());
      other->get_study(study);
      other->get_all_trials(study, {});
    });
    EXPECT_NE(msg2.find(c.expect), std::string::npos) << msg2;
  }
}

// A study's stored settings (studies.config_json) that cannot be read (a
// store edited by hand) are not an error of the whole study: its name,
// direction, attrs and trials are read, its config is null and
// config_error names the row, the column and the rule, as a space.json
// file's error would (a key twice, a number out of range, bytes that are not
// UTF-8, a NUL byte, nesting deeper than kMaxJsonDepth, a column that is not
// text). Stored literals NaN and +-Infinity are read as before.
TEST_P(SqliteReads, StoredSettingsThatDoNotParseAreNamedNotThrown) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"UPDATE studies SET config_json = '{'", "invalid JSON at line 1"},
      {"UPDATE studies SET config_json = '{\"sampler\": {\"seed\": 1e309}}'",
       "invalid JSON at 'sampler.seed': number overflow parsing '1e309' (a number must lie "
       "within +-1.8e308"},
      {"UPDATE studies SET config_json = '{\"sampler\": {\"type\": \"tpe\", \"type\": 1}}'",
       "invalid JSON: key 'type' appears twice in 'sampler'"},
      {"UPDATE studies SET config_json = CAST(X'7B2261223A2022FF227D' AS TEXT)",
       "ill-formed UTF-8 byte"},
      {"UPDATE studies SET config_json = CAST(X'7B2261223A20317D00' AS TEXT)", "a NUL byte"},
      {"UPDATE studies SET config_json = '{\"a\": ' || printf('%.300c', '[') || "
       "printf('%.300c', ']') || '}'",
       "nested deeper than 256 levels"},
      {"UPDATE studies SET config_json = X'7B7D'", "column config_json is not text"},
  };
  const std::string pristine = dir_.file("pristine.db");
  std::int64_t study = 0;
  {
    SqliteStorage storage(pristine);
    study = storage.create_study("s", StudyDirection::kMinimize,
                                 Json{{"x", std::numeric_limits<double>::quiet_NaN()}});
    storage.set_study_user_attr(study, "k", 1);
    populate(storage, study);
  }
  {
    auto storage = open(pristine);
    const StudyInfo info = storage->get_study(study);
    EXPECT_TRUE(info.config_error.empty()) << info.config_error;
    EXPECT_TRUE(std::isnan(info.config["x"].get<double>()));
  }
  for (const auto& [sql, rule] : cases) {
    SCOPED_TRACE(sql);
    fs::copy_file(pristine, path(), fs::copy_options::overwrite_existing);
    raw_exec(path(), sql);
    auto storage = open(path());
    for (const StudyInfo& info : {storage->get_study(study), storage->list_studies().at(0)}) {
      EXPECT_EQ(info.name, "s");
      EXPECT_EQ(info.user_attrs["k"], 1);
      EXPECT_TRUE(info.config.is_null());
      EXPECT_NE(info.config_error.find("studies row study_id=" + std::to_string(study) +
                                       ": column config_json"),
                std::string::npos)
          << info.config_error;
      EXPECT_NE(info.config_error.find(rule), std::string::npos) << info.config_error;
      EXPECT_EQ(printable(info.config_error), info.config_error) << "raw bytes in the error";
    }
    EXPECT_FALSE(storage->get_all_trials(study, {}).empty());
  }
}

// A child process writes 200 trials while this process reads: no "database
// is locked", every read is a consistent snapshot, and the reader ends with
// everything the writer wrote.
TEST_P(SqliteReads, TwoProcessesWriterAndReader) {
  constexpr int kTrials = 200;
  std::int64_t study = 0;
  {
    SqliteStorage setup(path());
    study = setup.create_study("s", StudyDirection::kMinimize, Json());
  }  // closed before fork(): the child must not share a connection
  std::fflush(nullptr);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    try {
      auto writer = open(path());
      auto d = Distribution::make_float(0, 1);
      for (int k = 0; k < kTrials; ++k) {
        auto t = writer->create_trial(study, running());
        writer->set_trial_param(t->trial_id, "x", k / double(kTrials), d);
        writer->set_trial_intermediate_value(t->trial_id, 0, k);
        writer->set_trial_state(t->trial_id, TrialState::kComplete, k * 0.5);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      code = 1;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  auto reader = open(path());
  std::string error;
  int status = 0;
  std::size_t reads = 0, last_size = 0;
  bool child_done = false;
  while (true) {
    // Check exit before reading, so the last read comes after the child ended.
    if (!child_done) child_done = ::waitpid(pid, &status, WNOHANG) == pid;
    try {
      auto all = reader->get_all_trials(study, {});
      ++reads;
      if (all.size() < last_size) error = "trial count went down";
      last_size = all.size();
      for (std::size_t k = 0; k < all.size(); ++k) {
        const auto& t = *all[k];
        if (t.number != static_cast<std::int64_t>(k)) error = "numbers not contiguous";
        if (t.state == TrialState::kComplete &&
            (t.value != static_cast<double>(t.number) * 0.5 || t.params.size() != 1 ||
             t.intermediate_values.size() != 1))
          error = "COMPLETE trial seen without all its writes";
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!error.empty() || child_done) break;
  }
  if (!child_done) ::waitpid(pid, &status, 0);
  EXPECT_EQ(error, "");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  auto all = reader->get_all_trials(study, {TrialState::kComplete});
  ASSERT_EQ(all.size(), static_cast<std::size_t>(kTrials));
  EXPECT_GT(reads, 0u);
  for (int k = 0; k < kTrials; ++k) {
    const auto& trial = all[static_cast<std::size_t>(k)];
    EXPECT_EQ(trial->number, k);
    EXPECT_EQ(bits(trial->params.at("x").get<double>()), bits(k / double(kTrials)));
  }
}

}  // namespace
}  // namespace hps
