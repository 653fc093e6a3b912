// Tests of CachingStorage's own rules (search/caching_storage.h) on an inner
// storage that counts its reads and whose data_version the test sets. The
// Storage contract suite runs on CachingStorage too (sqlite_storage_test.cpp:
// CachingInMemory, CachingSqlite), as do the SQLite visibility tests
// (SqliteReads/*Cached*).
#include "search/caching_storage.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "search/sqlite_storage.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

// An InMemoryStorage that counts the reads CachingStorage makes of it and
// reports the data_version the test sets (nullopt: "cannot tell"). It does
// not support set_observer, so the cache reads a written trial back.
class CountingStorage : public InMemoryStorage {
 public:
  int all_trials_reads = 0;
  int trial_reads = 0;
  int study_reads = 0;
  std::optional<std::int64_t> version = 0;

  std::vector<TrialPtr> get_all_trials(std::int64_t study_id,
                                       const std::vector<TrialState>& states) override {
    ++all_trials_reads;
    return InMemoryStorage::get_all_trials(study_id, states);
  }
  TrialPtr get_trial(std::int64_t trial_id) override {
    ++trial_reads;
    return InMemoryStorage::get_trial(trial_id);
  }
  std::vector<StudyInfo> list_studies() override {
    ++study_reads;
    return InMemoryStorage::list_studies();
  }
  std::optional<std::int64_t> data_version() override { return version; }
};

NewTrial running() {
  NewTrial init;
  init.state = TrialState::kRunning;
  init.worker = "test:1";
  return init;
}

std::vector<std::int64_t> numbers_of(const std::vector<TrialPtr>& trials) {
  std::vector<std::int64_t> out;
  for (const auto& t : trials) out.push_back(t->number);
  return out;
}

class CachingStorageTest : public ::testing::Test {
 protected:
  CachingStorageTest()
      : inner_(std::make_shared<CountingStorage>()),
        cache_(inner_),
        study_(cache_.create_study("s", StudyDirection::kMinimize, Json())) {}

  std::shared_ptr<CountingStorage> inner_;
  CachingStorage cache_;
  std::int64_t study_;
};

TEST_F(CachingStorageTest, TheOnlyWriterNeverReadsTheStudyAgain) {
  auto t0 = cache_.create_trial(study_, running());
  auto t1 = cache_.create_trial(study_, running());
  EXPECT_EQ(cache_.get_all_trials(study_).size(), 2u);
  EXPECT_EQ(inner_->all_trials_reads, 1);
  EXPECT_TRUE(cache_.set_trial_state(t0->trial_id, TrialState::kComplete, 0.5));
  cache_.set_trial_user_attr(t1->trial_id, "k", 1);
  auto t2 = cache_.create_trial(study_, running());
  // Each write to a cached trial reads that trial back (the inner storage
  // cannot say what changed); the study is never read again.
  EXPECT_EQ(inner_->trial_reads, 2);
  auto all = cache_.get_all_trials(study_);
  EXPECT_EQ(cache_.count_trials(study_, {TrialState::kComplete}), 1);
  EXPECT_EQ(cache_.get_trial_by_number(study_, 2)->trial_id, t2->trial_id);
  EXPECT_EQ(cache_.get_trial(t1->trial_id)->user_attrs.at("k"), 1);
  EXPECT_EQ(inner_->all_trials_reads, 1);
  EXPECT_EQ(inner_->trial_reads, 2);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]->state, TrialState::kComplete);
  EXPECT_EQ(all[0]->value, 0.5);
  // Study info is read once, again only after a study write.
  cache_.get_study(study_);
  cache_.find_study("s");
  EXPECT_EQ(inner_->study_reads, 1);
  cache_.set_study_user_attr(study_, "a", 2);
  EXPECT_EQ(cache_.get_study(study_).user_attrs.at("a"), 2);
  EXPECT_EQ(inner_->study_reads, 2);
}

TEST_F(CachingStorageTest, AChangedDataVersionReloadsEverything) {
  cache_.create_trial(study_, running());
  auto before = cache_.get_all_trials(study_);
  cache_.get_study(study_);
  inner_->version = 7;  // as if another process committed
  auto after = cache_.get_all_trials(study_);
  cache_.get_study(study_);
  EXPECT_EQ(inner_->all_trials_reads, 2);
  EXPECT_EQ(inner_->study_reads, 2);
  ASSERT_EQ(after.size(), 1u);
  cache_.get_all_trials(study_);
  EXPECT_EQ(inner_->all_trials_reads, 2);  // 7 is the version now cached
}

TEST_F(CachingStorageTest, AnUnknownDataVersionReadsAgainOncePerReadOrTransaction) {
  inner_->version = std::nullopt;
  cache_.create_trial(study_, running());
  cache_.get_all_trials(study_);
  cache_.get_all_trials(study_);
  EXPECT_EQ(inner_->all_trials_reads, 2);
  cache_.run_in_transaction([&] {
    cache_.get_all_trials(study_);
    cache_.create_trial(study_, running());
    EXPECT_EQ(cache_.get_all_trials(study_).size(), 2u);  // its own write, from memory
  });
  EXPECT_EQ(inner_->all_trials_reads, 3);
}

TEST_F(CachingStorageTest, AFailedWriteOrTransactionDropsTheCache) {
  auto t = cache_.create_trial(study_, running());
  cache_.set_trial_state(t->trial_id, TrialState::kComplete, 1.0);
  cache_.get_all_trials(study_);
  EXPECT_THROW(cache_.set_trial_intermediate_value(t->trial_id, 0, 1.0), StorageError);
  cache_.get_all_trials(study_);
  EXPECT_EQ(inner_->all_trials_reads, 2);
  EXPECT_THROW(cache_.run_in_transaction([&] {
    cache_.create_trial(study_, running());
    throw std::runtime_error("rolled back");
  }),
               std::runtime_error);
  EXPECT_EQ(cache_.get_all_trials(study_).size(), 1u);
  EXPECT_EQ(inner_->all_trials_reads, 3);
}

TEST_F(CachingStorageTest, HistoryGivesWhatChangedSinceAVersion) {
  auto t0 = cache_.create_trial(study_, running());
  auto t1 = cache_.create_trial(study_, running());
  TrialHistory history = cache_.history(study_);
  EXPECT_EQ(history.study_id(), study_);
  auto first = history.changes_since(0);
  EXPECT_TRUE(first.reset);
  EXPECT_EQ(numbers_of(first.trials), (std::vector<std::int64_t>{0, 1}));

  auto none = history.changes_since(first.version);
  EXPECT_FALSE(none.reset);
  EXPECT_TRUE(none.trials.empty());

  cache_.set_trial_intermediate_value(t1->trial_id, 0, 2.0);
  cache_.set_trial_state(t1->trial_id, TrialState::kComplete, 2.0);
  auto t2 = cache_.create_trial(study_, running());
  auto changed = history.changes_since(none.version);
  EXPECT_FALSE(changed.reset);
  // Each changed trial once, its newest snapshot, in number order.
  EXPECT_EQ(numbers_of(changed.trials), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(changed.trials[0]->state, TrialState::kComplete);
  EXPECT_EQ(changed.trials[0].get(), cache_.get_trial(t1->trial_id).get());
  EXPECT_EQ(changed.trials[1]->trial_id, t2->trial_id);

  cache_.set_trial_user_attr(t0->trial_id, "k", 1);
  auto later = history.changes_since(changed.version);
  EXPECT_EQ(numbers_of(later.trials), (std::vector<std::int64_t>{0}));
  // An old version still gets everything since then.
  EXPECT_EQ(numbers_of(history.changes_since(none.version).trials),
            (std::vector<std::int64_t>{0, 1, 2}));
}

TEST_F(CachingStorageTest, HistoryStartsOverAfterOthersWriteOrARollback) {
  cache_.create_trial(study_, running());
  TrialHistory history = cache_.history(study_);
  auto seen = history.changes_since(0);
  inner_->version = 1;
  auto after_other = history.changes_since(seen.version);
  EXPECT_TRUE(after_other.reset);
  EXPECT_EQ(after_other.trials.size(), 1u);
  EXPECT_THROW(cache_.run_in_transaction([&] {
    cache_.create_trial(study_, running());
    throw std::runtime_error("rolled back");
  }),
               std::runtime_error);
  auto after_rollback = history.changes_since(after_other.version);
  EXPECT_TRUE(after_rollback.reset);
  EXPECT_EQ(numbers_of(after_rollback.trials), (std::vector<std::int64_t>{0}));
}

TEST_F(CachingStorageTest, HistoryLogIsBoundedAndFarBehindReadersStartOver) {
  auto t = cache_.create_trial(study_, running());
  TrialHistory history = cache_.history(study_);
  auto start = history.changes_since(0);
  std::uint64_t recent = 0;
  for (int k = 0; k < 5000; ++k) {
    cache_.set_trial_user_attr(t->trial_id, "k", k);
    if (k == 4990) recent = history.changes_since(0).version;
  }
  auto far = history.changes_since(start.version);
  EXPECT_TRUE(far.reset);
  auto near = history.changes_since(recent);
  EXPECT_FALSE(near.reset);
  ASSERT_EQ(near.trials.size(), 1u);
  EXPECT_EQ(near.trials[0]->user_attrs.at("k"), 4999);
}

TEST_F(CachingStorageTest, HistoryOfAnUnknownStudyThrows) {
  EXPECT_THROW(cache_.history(study_ + 100), StorageError);
}

TEST(CachingStorage, NeedsAnInnerStorage) { EXPECT_THROW(CachingStorage(nullptr), StorageError); }

TEST(CachingStorage, OpenStoragePutsOneAroundSqliteOnly) {
  testsupport::TempDir dir("caching");
  auto file = open_storage(dir.file("s.db"));
  auto* cached = dynamic_cast<CachingStorage*>(file.get());
  ASSERT_NE(cached, nullptr);
  auto* sqlite = dynamic_cast<SqliteStorage*>(&cached->inner());
  ASSERT_NE(sqlite, nullptr);
  EXPECT_EQ(sqlite->path(), dir.file("s.db"));
  EXPECT_NE(std::dynamic_pointer_cast<InMemoryStorage>(open_storage("memory")), nullptr);
}

}  // namespace
}  // namespace hps
