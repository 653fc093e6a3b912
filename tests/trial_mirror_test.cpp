// Tests of the coordinator's TrialMirror (coordinator/trial_mirror.h): after
// each write, told to the mirror as the coordinator tells it, the mirror's
// trials, WAITING numbers, finished count and best trial equal what a full
// read of the store gives, on every storage kind (with and without a change
// feed); trials another process adds are picked up.
#include "coordinator/trial_mirror.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "search/caching_storage.h"
#include "search/sqlite_storage.h"
#include "search/trial_lifecycle.h"
#include "tests/support/sanitizer_scale.h"
#include "tests/support/storage_kinds.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using testsupport::describe;
using testsupport::describe_all;

// What the mirror must answer, computed from a full read.
struct Bookkeeping {
  std::set<std::int64_t> waiting;
  std::int64_t finished = 0;
  std::string best;  // describe() of the best trial, or ""
};

Bookkeeping full_read(Storage& storage, std::int64_t study, StudyDirection direction) {
  Bookkeeping b;
  TrialPtr best;
  for (const TrialPtr& t : storage.get_all_trials(study, {})) {
    if (t->state == TrialState::kWaiting) b.waiting.insert(t->number);
    if (t->counts_as_finished()) ++b.finished;
    if (lifecycle::is_best_candidate(*t) &&
        (!best || lifecycle::ranks_before(direction, *t, *best)))
      best = t;
  }
  if (best) b.best = describe(*best);
  return b;
}

void expect_mirror_matches(const TrialMirror& m, Storage& storage, std::int64_t study,
                           StudyDirection direction, const std::string& when) {
  EXPECT_EQ(describe_all(m.trials()), describe_all(storage.get_all_trials(study, {}))) << when;
  Bookkeeping want = full_read(storage, study, direction);
  EXPECT_EQ(m.waiting(), want.waiting) << when;
  EXPECT_EQ(m.finished(), want.finished) << when;
  EXPECT_EQ(m.best() ? describe(*m.best()) : std::string(), want.best) << when;
}

// One write of the kinds the coordinator makes, told to the mirror the way
// the coordinator tells it.
void coordinator_write(Storage& s, std::int64_t study, TrialMirror& m, std::mt19937_64& rng) {
  std::vector<std::int64_t> running;
  for (const TrialPtr& t : m.trials())
    if (t->state == TrialState::kRunning) running.push_back(t->number);
  const auto kind = rng() % 8;
  const auto dist = Distribution::make_float(0.0, 1.0, false, std::nullopt, "x");
  if (running.empty() || kind == 0) {
    NewTrial init;
    init.state = rng() % 3 == 0 ? TrialState::kWaiting : TrialState::kRunning;
    init.params["x"] = static_cast<double>(rng() % 10) / 10.0;
    init.distributions.emplace("x", dist);
    m.append(s.create_trial(study, init));
    return;
  }
  if (kind == 1) {
    if (TrialPtr t = s.claim_waiting_trial(study, "w")) m.replace_claimed(t);
    return;
  }
  if (kind == 2) {  // an attr on any trial, the best one included
    const TrialPtr& t = m.trials()[rng() % m.trials().size()];
    s.set_trial_user_attr(t->trial_id, "k", static_cast<int>(rng() % 7));
    m.refresh(t->number);
    return;
  }
  const FrozenTrial& t = m.at(running[rng() % running.size()]);
  const std::int64_t number = t.number;
  switch (kind) {
    case 3:
      s.set_trial_intermediate_value(t.trial_id, static_cast<std::int64_t>(rng() % 5), 0.5);
      break;
    case 4:
      s.set_trial_state(t.trial_id, TrialState::kPruned, static_cast<double>(rng() % 20));
      break;
    case 5:
      s.set_trial_state(t.trial_id, TrialState::kFail, std::nullopt, "boom");
      break;
    default:  // values repeat, so ties are broken by trial number
      s.set_trial_state(t.trial_id, TrialState::kComplete, static_cast<double>(rng() % 20));
      break;
  }
  m.refresh(number);
}

class TrialMirrorTest : public ::testing::TestWithParam<testsupport::StorageKind> {};

TEST_P(TrialMirrorTest, BookkeepingEqualsAFullReadAfterEveryWrite) {
  for (StudyDirection direction : {StudyDirection::kMinimize, StudyDirection::kMaximize}) {
    testsupport::TempDir dir;
    auto storage = GetParam().make(dir.file("store.db"));
    const std::string name = to_string(direction);
    auto study = storage->create_study(name, direction, Json());
    TrialMirror m(*storage, study, direction, name);
    m.load();
    std::mt19937_64 rng(direction == StudyDirection::kMinimize ? 5 : 6);
    // 150 writes in the ASan build (support/sanitizer_scale.h).
    const int n_writes = testsupport::asan_scaled(400, 150);
    for (int i = 0; i < n_writes; ++i) {
      coordinator_write(*storage, study, m, rng);
      expect_mirror_matches(m, *storage, study, direction,
                            name + ", after write " + std::to_string(i));
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_GT(m.finished(), n_writes / 8);
    EXPECT_TRUE(m.best());
    m.load();  // a reload gives the same answers
    expect_mirror_matches(m, *storage, study, direction, name + ", after load()");
  }
}

TEST_P(TrialMirrorTest, TheViewSamplersGetIsTheMirrorsTrials) {
  testsupport::TempDir dir;
  auto storage = GetParam().make(dir.file("store.db"));
  auto study = storage->create_study("s", StudyDirection::kMinimize, Json());
  TrialMirror m(*storage, study, StudyDirection::kMinimize, "s");
  m.load();
  NewTrial init;
  m.append(storage->create_trial(study, init));
  EXPECT_EQ(&m.view().trials(), &m.trials());
  const std::uint64_t seen = m.view().version();
  storage->set_trial_state(m.at(0).trial_id, TrialState::kComplete, 1.0);
  m.refresh(0);
  m.append(storage->create_trial(study, init));
  auto changed = m.view().changed_since(seen);
  ASSERT_TRUE(changed);
  EXPECT_EQ(*changed, (std::vector<std::int64_t>{0, 1}));
}

INSTANTIATE_TEST_SUITE_P(AllStorages, TrialMirrorTest,
                         ::testing::ValuesIn(testsupport::storage_kinds()),
                         [](const auto& p) { return p.param.name; });

// Another process (here a second connection) adds trials to the study; the
// mirror's next update takes them in, with and without a change feed.
TEST(TrialMirror, TrialsAnotherWriterAddedArePickedUp) {
  for (bool cached : {true, false}) {
    testsupport::TempDir dir;
    auto open = [&]() -> std::shared_ptr<Storage> {
      auto sqlite = std::make_shared<SqliteStorage>(dir.file("s.db"));
      if (!cached) return sqlite;
      return std::make_shared<CachingStorage>(sqlite);
    };
    auto mine = open();
    auto theirs = open();
    auto study = mine->create_study("s", StudyDirection::kMinimize, Json());
    TrialMirror m(*mine, study, StudyDirection::kMinimize, "s");
    m.load();
    NewTrial running;
    m.append(mine->create_trial(study, running));
    NewTrial waiting;
    waiting.state = TrialState::kWaiting;
    theirs->create_trial(study, waiting);
    theirs->create_trial(study, waiting);
    m.append(mine->create_trial(study, running));
    const std::string when = cached ? "cached" : "plain";
    expect_mirror_matches(m, *mine, study, StudyDirection::kMinimize, when);
    EXPECT_EQ(m.trials().size(), 4u) << when;
    EXPECT_EQ(m.waiting(), (std::set<std::int64_t>{1, 2})) << when;
  }
}

}  // namespace
}  // namespace hps
