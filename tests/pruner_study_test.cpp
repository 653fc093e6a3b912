// Pruners inside a Study: the one-value-per-step rule, pruned trials ending
// PRUNED at their last reported step, and the restart property: a study run
// in two halves, the storage (SQLite) closed and reopened with a fresh
// pruner in between, decides exactly as an uninterrupted run.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

#include "algorithms/factory.h"
#include "algorithms/pruner_util.h"
#include "search/storage.h"
#include "search/study.h"
#include "tests/support/log_capture.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;

using testsupport::CapturedLog;

using testsupport::TempDir;

TEST(PrunerStudyTest, SecondReportForTheSameStepKeepsTheFirstValue) {
  auto storage = std::make_shared<InMemoryStorage>();
  StudyOptions so;
  so.pruner = make_pruner(Json::parse(R"({"type": "median", "n_startup_trials": 0})"));
  Study study = Study::create(storage, "s", StudyDirection::kMinimize, so);
  {
    Trial t = study.ask();
    ASSERT_TRUE(t.report(0, 1.0));
    study.tell(t, 1.0);
  }
  Trial t = study.ask();
  ASSERT_TRUE(t.report(0, 0.5));
  CapturedLog log;
  // A worse second value for step 0 is refused with a warning...
  EXPECT_FALSE(t.report(0, 100.0));
  EXPECT_NE(log.text().find("step 0 was already reported"), std::string::npos) << log.text();
  // ...the stored value stays the first one...
  auto stored = storage->get_trial(t.trial_id());
  ASSERT_EQ(stored->intermediate_values.size(), 1u);
  EXPECT_EQ(stored->intermediate_values.at(0), 0.5);
  EXPECT_EQ(t.last_value(), 0.5);
  // ...and the pruner judges the first value (0.5 beats the median 1.0).
  EXPECT_FALSE(t.should_prune());
}

TEST(PrunerStudyTest, PrunedTrialsEndPrunedWithTheirLastReportedStep) {
  auto storage = std::make_shared<InMemoryStorage>();
  for (auto direction : {StudyDirection::kMinimize, StudyDirection::kMaximize}) {
    StudyOptions so;
    so.pruner =
        make_pruner(Json::parse(R"({"type": "asha", "min_resource": 1, "reduction_factor": 2})"));
    const double sign = direction == StudyDirection::kMaximize ? -1.0 : 1.0;
    Study study = Study::create(storage, std::string("s-") + to_string(direction), direction, so);
    std::map<std::int64_t, std::int64_t> pruned_at;  // trial number -> step
    OptimizeOptions twelve;
    twelve.n_trials = 12;
    study.optimize(
        [&](Trial& trial) {
          // Trial n's curve is flat at a level that alternates good/bad.
          const double level =
              (trial.number() % 3 == 0 ? 1.0 : 10.0) + static_cast<double>(trial.number()) * 0.01;
          for (std::int64_t step = 0; step < 8; ++step) {
            trial.report(step, sign * level);
            if (trial.should_prune()) {
              pruned_at[trial.number()] = step;
              throw TrialPruned();
            }
          }
          return sign * level;
        },
        twelve);
    int n_pruned = 0;
    for (const auto& t : study.trials()) {
      auto it = pruned_at.find(t->number);
      if (it == pruned_at.end()) {
        EXPECT_EQ(t->state, TrialState::kComplete) << t->number;
        continue;
      }
      ++n_pruned;
      EXPECT_EQ(t->state, TrialState::kPruned) << t->number;
      ASSERT_TRUE(t->last_intermediate()) << t->number;
      EXPECT_EQ(t->last_intermediate()->first, it->second);
      ASSERT_TRUE(t->value);
      EXPECT_EQ(*t->value, t->last_intermediate()->second);
    }
    EXPECT_GT(n_pruned, 0);
    EXPECT_LT(n_pruned, 12);
  }
}

// The scripted objective of the restart test: a learning curve determined
// by the trial number only (one trial in 17 diverges to NaN).
double scripted_value(std::int64_t number, std::int64_t step) {
  const std::uint64_t h = pruning::mix_hash(12345, static_cast<std::uint64_t>(number));
  if (number % 17 == 5 && step == 3) return std::numeric_limits<double>::quiet_NaN();
  const double level = 0.1 + static_cast<double>(h % 1000) / 1000.0;
  const double speed = 0.5 + static_cast<double>((h >> 20) % 100) / 100.0;
  // Noise: some steps are a little worse than the one before.
  const double noise = 0.03 * static_cast<double>((h >> (step % 40)) & 1U);
  return level + 1.0 / (1.0 + speed * static_cast<double>(step)) + noise;
}

Objective scripted_objective(StudyDirection direction, std::int64_t n_steps) {
  const double sign = direction == StudyDirection::kMaximize ? -1.0 : 1.0;
  return [=](Trial& trial) {
    // Some trials stop early on their own (different lengths).
    const std::int64_t steps = trial.number() % 4 == 1 ? n_steps / 3 : n_steps;
    double v = 0;
    for (std::int64_t step = 0; step < steps; ++step) {
      v = sign * scripted_value(trial.number(), step);
      trial.report(step, v);
      if (trial.should_prune()) throw TrialPruned();
    }
    return v;
  };
}

struct RestartCase {
  const char* pruner;
  StudyDirection direction;
};

class PrunerRestartTest : public ::testing::TestWithParam<RestartCase> {};

TEST_P(PrunerRestartTest, ReloadedStorageGivesTheSameDecisions) {
  const Json config = Json::parse(GetParam().pruner);
  const StudyDirection direction = GetParam().direction;
  const std::int64_t n_steps = 27, n_total = 40, n_first = 15;
  TempDir dir;
  auto run = [&](const std::string& file, std::int64_t n_trials, bool create) {
    auto storage = open_storage(file);
    StudyOptions so;
    so.pruner = make_pruner(config);  // a fresh pruner: nothing kept in memory
    Study study = create ? Study::create(storage, "restart", direction, so)
                         : Study::load(storage, "restart", so);
    OptimizeOptions oo;
    oo.n_trials = n_trials;
    study.optimize(scripted_objective(direction, n_steps), oo);
  };
  run(dir.file("whole.db"), n_total, true);
  run(dir.file("halves.db"), n_first, true);
  run(dir.file("halves.db"), n_total - n_first, false);

  auto whole = open_storage(dir.file("whole.db"));
  auto halves = open_storage(dir.file("halves.db"));
  auto a = whole->get_all_trials(*whole->find_study("restart"));
  auto b = halves->get_all_trials(*halves->find_study("restart"));
  ASSERT_EQ(a.size(), static_cast<std::size_t>(n_total));
  ASSERT_EQ(b.size(), a.size());
  int n_pruned = 0, n_complete = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("trial " + std::to_string(a[i]->number));
    EXPECT_EQ(a[i]->state, b[i]->state);
    EXPECT_EQ(a[i]->intermediate_values.size(), b[i]->intermediate_values.size());
    EXPECT_EQ(a[i]->last_intermediate()->first, b[i]->last_intermediate()->first);
    EXPECT_EQ(a[i]->system_attrs, b[i]->system_attrs);
    n_pruned += a[i]->state == TrialState::kPruned;
    n_complete += a[i]->state == TrialState::kComplete;
  }
  // The case is not trivial: the pruner stopped some trials and let others run.
  EXPECT_GT(n_pruned, 0);
  EXPECT_GT(n_complete, 0);
}

const RestartCase kRestartCases[] = {
    {R"({"type": "median", "n_startup_trials": 3, "n_warmup_steps": 2})",
     StudyDirection::kMinimize},
    {R"({"type": "median", "n_startup_trials": 3, "n_warmup_steps": 2})",
     StudyDirection::kMaximize},
    {R"({"type": "percentile", "percentile": 30, "n_startup_trials": 2, "interval_steps": 3})",
     StudyDirection::kMinimize},
    {R"({"type": "asha", "reduction_factor": 3})", StudyDirection::kMinimize},
    {R"({"type": "asha", "min_resource": 1, "reduction_factor": 3})", StudyDirection::kMaximize},
    {R"({"type": "hyperband", "min_resource": 1, "max_resource": 27, "reduction_factor": 3})",
     StudyDirection::kMinimize},
    {R"({"type": "hyperband", "min_resource": 1, "max_resource": 27, "reduction_factor": 3})",
     StudyDirection::kMaximize},
    {R"({"type": "threshold", "upper": 1.5})", StudyDirection::kMinimize},
    {R"({"type": "patient", "patience": 0, "wrapped_pruner": {"type": "asha", "min_resource": 1}})",
     StudyDirection::kMinimize},
};

INSTANTIATE_TEST_SUITE_P(
    Pruners, PrunerRestartTest, ::testing::ValuesIn(kRestartCases), [](const auto& param_info) {
      return Json::parse(param_info.param.pruner)["type"].template get<std::string>() + "_" +
             std::to_string(param_info.index) + "_" + to_string(param_info.param.direction);
    });

}  // namespace
}  // namespace hps
