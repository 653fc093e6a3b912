// Pruners behind the ZeroMQ coordinator: `hpsearch run` with a worker
// process, killed (kill -9) in the middle of a trial, then `hpsearch
// resume`. Pruned trials must end PRUNED with their last reported step
// stored, and every decision -- before and after the restart -- must be the
// one a fresh pruner makes from the stored history alone.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "algorithms/factory.h"
#include "search/storage.h"
#include "search/study.h"
#include "support/pruning_harness.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace hps {
namespace {

using Steady = std::chrono::steady_clock;
using testsupport::BackgroundProcess;
using testsupport::TempDir;

constexpr std::int64_t kSteps = 8;    // the sleep objective reports steps 1..8
constexpr std::int64_t kTrials = 24;  // enqueued param sets (the budget)

// The study: sleep objective (value x + y, curve x + y + (8 - step) / 8),
// minimized, with `pruner`.
Json study_document(const std::string& db, const Json& pruner) {
  return Json{{"study", {{"name", "pruned"}, {"direction", "minimize"}, {"storage", db}}},
              {"sampler", {{"type", "random"}, {"seed", 3}}},
              {"pruner", pruner},
              {"budget", {{"n_trials", kTrials}}},
              {"objective", {{"type", "sleep"}, {"seconds", 0.4}, {"steps", kSteps}}},
              {"space",
               {{"x", {{"type", "float"}, {"low", 0.0}, {"high", 1.0}}},
                {"y", {{"type", "float"}, {"low", -1.0}, {"high", 1.0}}}}}};
}

// Creates the study in `db` with kTrials enqueued param sets, so both
// coordinator processes serve the same configurations in number order.
void create_study(const std::string& db, const Json& doc) {
  StudyConfig config = StudyConfig::from_json(doc);
  StudyOptions so;
  so.space = config.space;
  Study study = Study::create(open_storage(db), config.name, config.direction, so, config.source);
  for (int i = 0; i < kTrials; ++i) {
    double x = std::fmod(0.618034 * (i + 1), 1.0);
    double y = 2.0 * std::fmod(0.414214 * (i + 3), 1.0) - 1.0;
    study.enqueue_trial(Params{{"x", x}, {"y", y}});
  }
}

std::vector<TrialPtr> read_trials(const std::string& db) {
  auto storage = open_storage(db);
  auto id = storage->find_study("pruned");
  if (!id) return {};
  return storage->get_all_trials(*id, {});
}

class PrunerCoordinatorTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PrunerCoordinatorTest, RestartedCoordinatorDecidesFromStoredHistory) {
  const Json pruner = Json::parse(GetParam());
  TempDir dir("pruner-coord");
  const std::string db = dir.file("study.db");
  const Json doc = study_document(db, pruner);
  const std::string space = dir.write("space.json", doc.dump(2));
  create_study(db, doc);

  const std::vector<std::string> common{"--workers", "1",           "--heartbeat-ms",
                                        "100",       "--log-level", "warn"};
  // 1. Run until at least 8 trials finished and one is mid-trial, then kill -9.
  {
    std::vector<std::string> argv{HPSEARCH_CLI_PATH, "run", space};
    argv.insert(argv.end(), common.begin(), common.end());
    BackgroundProcess run(argv, dir.path().string(), dir.file("run.out"), dir.file("run.err"));
    bool killed = false;
    auto until = Steady::now() + std::chrono::seconds(60);
    while (!killed && Steady::now() < until && run.running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      try {
        auto trials = read_trials(db);
        int finished = 0;
        bool mid_trial = false;
        for (const auto& t : trials) {
          finished += is_finished(t->state) ? 1 : 0;
          if (t->state == TrialState::kRunning && t->intermediate_values.size() >= 2)
            mid_trial = true;
        }
        if (finished >= 8 && mid_trial) {
          run.send_signal(SIGKILL);
          killed = true;
        }
      } catch (const StorageError&) {
        // The file is being written; look again.
      }
    }
    auto result = run.wait();
    ASSERT_TRUE(killed) << "never caught a trial mid-run\n" << result.err;
    ASSERT_EQ(result.signal, SIGKILL) << result.err;
  }
  int running_at_kill = 0;
  for (const auto& t : read_trials(db)) running_at_kill += t->state == TrialState::kRunning;
  ASSERT_GE(running_at_kill, 1);

  // 2. A new coordinator process resumes the study to its budget.
  {
    std::vector<std::string> argv{HPSEARCH_CLI_PATH, "resume", db};
    argv.insert(argv.end(), common.begin(), common.end());
    BackgroundProcess resume(argv, dir.path().string(), dir.file("resume.out"),
                             dir.file("resume.err"));
    auto until = Steady::now() + std::chrono::seconds(90);
    while (resume.running() && Steady::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto result = resume.wait();
    ASSERT_EQ(result.exit_code, 0) << result.err;
  }

  // 3. What was stored.
  auto trials = read_trials(db);
  int n_pruned = 0, n_complete = 0, n_restarted = 0;
  for (const auto& t : trials) {
    SCOPED_TRACE("trial " + std::to_string(t->number));
    ASSERT_TRUE(is_finished(t->state)) << to_string(t->state);
    if (t->state == TrialState::kFail) {
      // The trial the kill interrupted: failed, retried with the same params.
      EXPECT_EQ(t->fail_reason, "coordinator restarted");
      ASSERT_TRUE(t->system_attrs.contains(kAttrRetriedAs));
      auto retry = trials.at(t->system_attrs[kAttrRetriedAs].get<std::size_t>());
      EXPECT_EQ(retry->params, t->params);
      EXPECT_TRUE(retry->state == TrialState::kComplete || retry->state == TrialState::kPruned);
      ++n_restarted;
      continue;
    }
    ASSERT_FALSE(t->intermediate_values.empty());
    const auto [last_step, last_value] = *t->last_intermediate();
    // Steps 1..last, each once: nothing reported after the prune decision.
    EXPECT_EQ(t->intermediate_values.begin()->first, 1);
    EXPECT_EQ(static_cast<std::int64_t>(t->intermediate_values.size()), last_step);
    if (t->state == TrialState::kPruned) {
      ++n_pruned;
      ASSERT_TRUE(t->value);
      EXPECT_EQ(*t->value, last_value);  // the last reported value
    } else {
      ++n_complete;
      EXPECT_EQ(last_step, kSteps);
    }
  }
  EXPECT_GE(n_restarted, 1);
  EXPECT_GT(n_pruned, 0);
  EXPECT_GT(n_complete, 0);

  // 4. Replay: a fresh pruner in a fresh storage, fed the stored curves in
  // the order the single worker ran them (number order; the interrupted
  // trial's retry was queued last and so got the highest number), must stop
  // each trial exactly where the coordinators did. Trial numbers are kept
  // (Hyperband's brackets depend on them): the interrupted trial becomes a
  // retried FAIL trial without values.
  testing::PruningHarness replay(StudyDirection::kMinimize);
  auto fresh = make_pruner(pruner);
  for (const auto& t : trials) {
    ASSERT_EQ(replay.storage().count_trials(replay.study_id()), t->number);
    if (t->state == TrialState::kFail) {
      auto placeholder = replay.add_finished({}, TrialState::kFail);
      replay.storage().set_trial_system_attr(placeholder->trial_id, kAttrRetriedAs,
                                             t->system_attrs[kAttrRetriedAs]);
      continue;
    }
    SCOPED_TRACE("replaying trial " + std::to_string(t->number));
    auto pruned_at = replay.run(*fresh, t->intermediate_values);
    if (t->state == TrialState::kPruned) {
      EXPECT_EQ(pruned_at, t->last_intermediate()->first);
    } else {
      EXPECT_EQ(pruned_at, std::nullopt);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Pruners, PrunerCoordinatorTest,
    ::testing::Values(
        R"({"type": "asha", "min_resource": 1, "reduction_factor": 2})",
        R"({"type": "median", "n_startup_trials": 3})",
        R"({"type": "hyperband", "min_resource": 1, "max_resource": 8, "reduction_factor": 2})"),
    [](const auto& param_info) {
      return Json::parse(param_info.param)["type"].template get<std::string>();
    });

}  // namespace
}  // namespace hps
