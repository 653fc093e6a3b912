// Tests of TrialView (search/trial_view.h) and the storages' change feed
// (Storage::trial_changes): a view kept up to date from the feed holds
// exactly what a full read gives, after own writes, others' writes, a
// rolled-back transaction, on every storage; and samplers given the view
// sample as with a full read (TPE's view index).
#include "search/trial_view.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "algorithms/tpe_sampler.h"
#include "search/caching_storage.h"
#include "search/sqlite_storage.h"
#include "search/study.h"
#include "tests/support/storage_kinds.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using testsupport::describe_all;
using testsupport::PlainStorage;
using testsupport::random_write;

class TrialViewTest : public ::testing::TestWithParam<testsupport::StorageKind> {
 protected:
  void SetUp() override {
    storage_ = GetParam().make(dir_.file("store.db"));
    study_ = storage_->create_study("s", StudyDirection::kMinimize, Json());
  }
  void expect_view_matches_full_read(const std::string& when) {
    view_.sync(*storage_, study_);
    EXPECT_EQ(describe_all(view_.trials()), describe_all(storage_->get_all_trials(study_, {})))
        << when;
  }

  testsupport::TempDir dir_;
  std::shared_ptr<Storage> storage_;
  std::int64_t study_ = -1;
  TrialView view_;
};

TEST_P(TrialViewTest, MatchesAFullReadAfterEveryWriteAndARollback) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    random_write(*storage_, study_, rng);
    if (i % 3 == 0) expect_view_matches_full_read("after write " + std::to_string(i));
    if (i % 50 == 25) {
      EXPECT_THROW(storage_->run_in_transaction([&] {
        random_write(*storage_, study_, rng);
        random_write(*storage_, study_, rng);
        throw std::runtime_error("roll back");
      }),
                   std::runtime_error);
      expect_view_matches_full_read("after a rollback at " + std::to_string(i));
    }
  }
  expect_view_matches_full_read("at the end");
}

TEST_P(TrialViewTest, ChangedSinceNamesWhatChangedAndOldReadersStartOver) {
  NewTrial init;
  auto a = storage_->create_trial(study_, init);
  auto b = storage_->create_trial(study_, init);
  view_.sync(*storage_, study_);
  const std::uint64_t seen = view_.version();
  EXPECT_EQ(view_.changed_since(seen), std::vector<std::int64_t>{});
  storage_->set_trial_state(b->trial_id, TrialState::kComplete, 1.0);
  storage_->create_trial(study_, init);
  view_.sync(*storage_, study_);
  auto changed = view_.changed_since(seen);
  ASSERT_TRUE(changed);
  if (storage_->trial_changes(study_, 0)) {
    EXPECT_EQ(*changed, (std::vector<std::int64_t>{1, 2}));
  } else {  // a full read: a storage that makes new snapshots per read changes them all
    EXPECT_TRUE(*changed == (std::vector<std::int64_t>{1, 2}) ||
                *changed == (std::vector<std::int64_t>{0, 1, 2}));
  }
  EXPECT_EQ(view_.changed_since(view_.version() + 1), std::nullopt);  // unknown version
  EXPECT_EQ(view_.changed_since(0), std::nullopt);                    // before the first sync
  TrialView other;
  EXPECT_NE(other.id(), view_.id());
  (void)a;
}

INSTANTIATE_TEST_SUITE_P(AllStorages, TrialViewTest,
                         ::testing::ValuesIn(testsupport::storage_kinds()),
                         [](const auto& p) { return p.param.name; });

TEST(TrialView, FollowsWritesOfAnotherConnection) {
  testsupport::TempDir dir;
  auto mine = std::make_shared<CachingStorage>(std::make_shared<SqliteStorage>(dir.file("s.db")));
  auto theirs = std::make_shared<CachingStorage>(std::make_shared<SqliteStorage>(dir.file("s.db")));
  auto study = mine->create_study("s", StudyDirection::kMinimize, Json());
  TrialView view;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 60; ++i) {
    random_write(i % 2 == 0 ? *mine : *theirs, study, rng);
    view.sync(*mine, study);
    auto fresh = SqliteStorage(dir.file("s.db")).get_all_trials(study, {});
    ASSERT_EQ(describe_all(view.trials()), describe_all(fresh)) << "after write " << i;
  }
}

TEST(InMemoryStorageFeed, ARolledBackTransactionKeepsWaitingTrialsClaimable) {
  InMemoryStorage s;
  auto study = s.create_study("s", StudyDirection::kMinimize, Json());
  NewTrial waiting;
  waiting.state = TrialState::kWaiting;
  s.create_trial(study, waiting);
  s.create_trial(study, waiting);
  EXPECT_THROW(s.run_in_transaction([&] {
    ASSERT_NE(s.claim_waiting_trial(study, "w"), nullptr);
    ASSERT_NE(s.claim_waiting_trial(study, "w"), nullptr);
    throw std::runtime_error("roll back");
  }),
               std::runtime_error);
  auto first = s.claim_waiting_trial(study, "w");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->number, 0);
  EXPECT_EQ(s.claim_waiting_trial(study, "w")->number, 1);
  EXPECT_EQ(s.claim_waiting_trial(study, "w"), nullptr);
  // A trial set back to WAITING is claimed again, lowest number first.
  s.set_trial_state(first->trial_id, TrialState::kWaiting, std::nullopt, "");
  EXPECT_EQ(s.claim_waiting_trial(study, "w")->number, 0);
}

// The suggestions of a seeded TPE sampler over a discrete space, the
// startup trials drawn with the view index (ctx.view) or from a full read
// (no view): the same sequence.
std::vector<std::string> tpe_suggestions(bool with_view, std::size_t n_startup) {
  TpeOptions o;
  o.seed = 11;
  o.n_startup_trials = n_startup;
  TpeSampler sampler(o);
  auto space = SearchSpace::from_json(Json::parse(
      R"({"a": {"type": "int", "low": 0, "high": 3}, "b": {"type": "categorical",
          "choices": ["x", "y", "z"]}, "c": {"type": "float", "low": 0, "high": 1, "step": 0.5}})"));
  InMemoryStorage storage;
  auto study = storage.create_study("s", StudyDirection::kMinimize, Json());
  TrialView view;
  std::vector<std::string> out;
  for (int i = 0; i < 40; ++i) {
    if (i % 7 == 3) {  // an enqueued point, waiting: tried, not sampled again
      NewTrial w;
      w.state = TrialState::kWaiting;
      w.system_attrs[kAttrFixedParams] = Json{{"a", 1}, {"b", "y"}, {"c", 0.5}};
      storage.create_trial(study, w);
    }
    NewTrial init;
    auto t = storage.create_trial(study, init);
    view.sync(storage, study);
    Params p;
    SamplingContext ctx{StudyDirection::kMinimize, view.trials(), *t};
    if (with_view) ctx.view = &view;
    try {
      sampler.sample(ctx, space, p);
    } catch (const SearchSpaceExhausted&) {
      out.push_back("exhausted");
      break;
    }
    out.push_back(Json(p).dump());
    for (const ParamSpec& spec : space.params())
      storage.set_trial_param(t->trial_id, spec.name, p.at(spec.name), spec.distribution);
    const auto state = i % 5 == 4 ? TrialState::kFail : TrialState::kComplete;
    storage.set_trial_state(t->trial_id, state, static_cast<double>(i % 9), "");
  }
  return out;
}

TEST(TpeViewIndex, StartupSuggestionsEqualThoseOfAFullRead) {
  for (std::size_t n_startup : {std::size_t{10}, std::size_t{100}}) {
    auto full = tpe_suggestions(false, n_startup);
    auto viewed = tpe_suggestions(true, n_startup);
    EXPECT_EQ(full, viewed) << "n_startup_trials " << n_startup;
    EXPECT_GE(full.size(), 20u);
  }
}

// Study::ask over a storage without a feed (a user's own) and over the
// in-memory one: the same trials, sampled the same way.
TEST(TrialViewStudy, AskSamplesAsWithAFullReadOnEveryStorage) {
  auto run = [](std::shared_ptr<Storage> storage) {
    StudyOptions opt;
    TpeOptions o;
    o.seed = 5;
    o.n_startup_trials = 8;
    opt.sampler = std::make_shared<TpeSampler>(o);
    opt.space = SearchSpace::from_json(
        Json::parse(R"({"x": {"type": "float", "low": -2, "high": 2}, "n": {"type": "int",
            "low": 1, "high": 4}})"));
    auto study = Study::create(storage, "s", StudyDirection::kMinimize, opt);
    std::vector<std::string> out;
    for (int i = 0; i < 30; ++i) {
      auto trial = study.ask();
      const double x = trial.param("x").get<double>();
      out.push_back(Json(trial.params()).dump());
      study.tell(trial, x * x + trial.param("n").get<double>());
    }
    return out;
  };
  testsupport::TempDir dir;
  auto plain = run(std::make_shared<PlainStorage>());
  EXPECT_EQ(run(std::make_shared<InMemoryStorage>()), plain);
  EXPECT_EQ(run(open_storage(dir.file("s.db"))), plain);
}

}  // namespace
}  // namespace hps
