// Retries recorded as structured system attrs (retry_cause), seen from the
// coordinator: the retry limit is decided by the recorded causes, not by a
// fail reason's text, and a store written before retry_cause existed
// resumes with the rule of that version. A worker here is a raw DEALER
// socket in this process that asks for a trial and then asks again without
// ending it (which the coordinator treats as a lost worker).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "algorithms/random_sampler.h"
#include "coordinator/coordinator.h"
#include "protocol/protocol.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/trial_lifecycle.h"
#include "tests/support/raw_worker.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace proto = hps::protocol;
using Steady = std::chrono::steady_clock;

SearchSpace one_param() {
  return SearchSpace::from_json(Json::parse(R"({"x": {"type": "float", "low": 0, "high": 1}})"));
}

Study open_study(const std::string& path) {
  StudyOptions o;
  o.sampler = std::make_shared<RandomSampler>(3);
  o.space = one_param();
  return Study::load_if_exists(open_storage(path), "retries", StudyDirection::kMinimize,
                               std::move(o));
}

using testsupport::RawWorker;

// Steps the coordinator until trial `number` is FAIL (or 10 s), so that what
// a worker sent is taken before the test goes on.
void step_until_failed(Coordinator& c, Study& study, std::int64_t number) {
  auto until = Steady::now() + std::chrono::seconds(10);
  while (Steady::now() < until &&
         study.storage().get_trial_by_number(study.study_id(), number)->state != TrialState::kFail)
    c.step(10);
}

CoordinatorOptions with_retries(int max_retries) {
  CoordinatorOptions co;
  co.max_retries = max_retries;  // default heartbeats: the raw worker sends none, 5 s of slack
  return co;
}

TEST(CoordinatorRetry, ReasonStartingLikeAWorkerLossDoesNotUseUpTheRetries) {
  testsupport::TempDir dir("coordinator_retry");
  const std::string db = dir.file("study.db");
  zmq::context_t ctx;
  {
    // A run stopped with a reason that starts with "worker": the trial is
    // queued again because the run was interrupted (retry_cause
    // "interrupted"), which never counts against the limit.
    Study study = open_study(db);
    Coordinator c(study, Json{{"type", "external"}}, with_retries(1));
    RawWorker w(ctx, c.endpoint(), "w1");
    auto a = w.request(c);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->number, 0);
    c.stop("workers told to stop");
  }
  Study study = open_study(db);
  auto t0 = study.storage().get_trial_by_number(study.study_id(), 0);
  EXPECT_EQ(t0->fail_reason, "workers told to stop");
  auto t1 = study.storage().get_trial_by_number(study.study_id(), 1);
  EXPECT_EQ(t1->system_attrs.at(lifecycle::kAttrRetryCause), "interrupted");

  Coordinator c(study, Json{{"type", "external"}}, with_retries(1));
  RawWorker w(ctx, c.endpoint(), "w2");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 1);  // the retry, served first
  // Asking again without ending trial 1 loses it: its one retry is left.
  a = w.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 2);
  t1 = study.storage().get_trial_by_number(study.study_id(), 1);
  EXPECT_EQ(t1->state, TrialState::kFail);
  EXPECT_EQ(t1->fail_reason.rfind("worker lost", 0), 0u) << t1->fail_reason;
  ASSERT_TRUE(t1->system_attrs.contains(kAttrRetriedAs));
  auto t2 = study.storage().get_trial_by_number(study.study_id(), 2);
  EXPECT_EQ(t2->system_attrs.at(kAttrRetryOf), 1);
  EXPECT_EQ(t2->system_attrs.at(lifecycle::kAttrRetryCause), "worker_lost");
  EXPECT_EQ(t2->params, t1->params);
  // Losing trial 2 too: the one retry is used up.
  a = w.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 3);
  t2 = study.storage().get_trial_by_number(study.study_id(), 2);
  EXPECT_EQ(t2->state, TrialState::kFail);
  EXPECT_FALSE(t2->system_attrs.contains(kAttrRetriedAs));
  auto t3 = study.storage().get_trial_by_number(study.study_id(), 3);
  EXPECT_FALSE(t3->system_attrs.contains(kAttrRetryOf));
}

// A scancel of a Slurm step: one worker reports its trial interrupted (it
// was stopped by a signal), the retry goes to another task of the step,
// which is lost before it reports. With --max-retries 1 the params are
// still queued again: the stop from outside did not use up the retry.
TEST(CoordinatorRetry, AWorkerStoppedBySignalDoesNotUseUpTheRetries) {
  testsupport::TempDir dir("coordinator_retry_stopped");
  zmq::context_t ctx;
  Study study = open_study(dir.file("study.db"));
  Coordinator c(study, Json{{"type", "external"}}, with_retries(1));
  RawWorker w1(ctx, c.endpoint(), "task0");
  auto a = w1.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 0);
  proto::Fail stopped;
  stopped.number = 0;
  stopped.reason = proto::Fail::Reason::kInterrupted;
  stopped.message = "stopped by a signal";
  w1.send(stopped);
  // Let the coordinator take the Fail before another worker asks.
  step_until_failed(c, study, 0);
  RawWorker w2(ctx, c.endpoint(), "task1");
  a = w2.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 1);  // the retry of trial 0
  auto t0 = study.storage().get_trial_by_number(study.study_id(), 0);
  EXPECT_EQ(t0->fail_reason, "worker stopped: stopped by a signal");
  auto t1 = study.storage().get_trial_by_number(study.study_id(), 1);
  EXPECT_EQ(t1->system_attrs.at(lifecycle::kAttrRetryCause), "worker_stopped");
  // task1 is lost with trial 1: its one retry is still there.
  a = w2.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 2);
  t1 = study.storage().get_trial_by_number(study.study_id(), 1);
  EXPECT_EQ(t1->state, TrialState::kFail);
  EXPECT_EQ(t1->fail_reason.rfind("worker lost", 0), 0u) << t1->fail_reason;
  auto t2 = study.storage().get_trial_by_number(study.study_id(), 2);
  ASSERT_TRUE(t2->system_attrs.contains(kAttrRetryOf));
  EXPECT_EQ(t2->system_attrs.at(kAttrRetryOf), 1);
  EXPECT_EQ(t2->system_attrs.at(lifecycle::kAttrRetryCause), "worker_lost");
  EXPECT_EQ(t2->params, t0->params);
  // Lost again: now the one retry is used up.
  a = w2.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 3);
  auto t3 = study.storage().get_trial_by_number(study.study_id(), 3);
  EXPECT_FALSE(t3->system_attrs.contains(kAttrRetryOf));
  // The other order: trial 3 lost (its retry, trial 4, uses up the limit),
  // then trial 4's worker stopped by a signal: queued again all the same.
  a = w2.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 4);
  auto t4 = study.storage().get_trial_by_number(study.study_id(), 4);
  EXPECT_EQ(t4->system_attrs.at(kAttrRetryOf), 3);
  stopped.number = 4;
  w2.send(stopped);
  // A worker stopped by a signal is leaving: another one gets the retry.
  RawWorker w3(ctx, c.endpoint(), "task2");
  a = w3.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 5);
  auto t5 = study.storage().get_trial_by_number(study.study_id(), 5);
  ASSERT_TRUE(t5->system_attrs.contains(kAttrRetryOf));
  EXPECT_EQ(t5->system_attrs.at(kAttrRetryOf), 4);
  EXPECT_EQ(t5->system_attrs.at(lifecycle::kAttrRetryCause), "worker_stopped");
}

// The failure rules (coordinator/run_limits.h) count FAILs from the
// objective, not FAILs queued again: three lost workers and three workers
// stopped by a signal leave fail fast off and dispatching on; five FAILs
// from the objective then stop the run.
TEST(CoordinatorRetry, RetriedFailsDoNotCountTowardsTheFailureRules) {
  testsupport::TempDir dir("coordinator_retry_fail_fast");
  zmq::context_t ctx;
  Study study = open_study(dir.file("study.db"));
  CoordinatorOptions co = with_retries(100);
  co.n_trials = 50;
  Coordinator c(study, Json{{"type", "external"}}, co);
  RawWorker w(ctx, c.endpoint(), "w");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  for (int i = 0; i < 3; ++i) {  // lost: asks again without ending it
    a = w.request(c);
    ASSERT_TRUE(a) << i;
  }
  // Stopped by a signal, three times: each worker stopped is leaving, so
  // the next trial goes to a new one.
  std::vector<std::unique_ptr<RawWorker>> replacements;
  RawWorker* current = &w;
  for (int i = 0; i < 3; ++i) {
    proto::Fail stopped;
    stopped.number = a->number;
    stopped.reason = proto::Fail::Reason::kInterrupted;
    stopped.message = "stopped by a signal";
    current->send(stopped);
    step_until_failed(c, study, a->number);
    replacements.push_back(
        std::make_unique<RawWorker>(ctx, c.endpoint(), "w" + std::to_string(i + 2)));
    current = replacements.back().get();
    a = current->request(c);
    ASSERT_TRUE(a) << i;
  }
  EXPECT_EQ(c.stats().run_failed, 0);
  EXPECT_FALSE(c.stopped_for_failures());
  for (int i = 0; i < 5; ++i) {
    proto::Fail boom;
    boom.number = a->number;
    boom.message = "ImportError: no module named torch";
    current->send(boom);
    step_until_failed(c, study, a->number);
    if (i == 4) break;
    EXPECT_FALSE(c.stopped_for_failures()) << i;
    a = current->request(c);
    ASSERT_TRUE(a) << i;
  }
  EXPECT_EQ(c.stats().run_failed, 5);
  EXPECT_TRUE(c.stopped_for_failures());
  for (int i = 0; i < 100 && c.step(10); ++i) {
  }
  EXPECT_TRUE(c.done());
  EXPECT_EQ(c.done_reason(),
            "the first 5 trials all failed; last reason: ImportError: no module named torch: the "
            "objective looks broken");
  EXPECT_EQ(c.stats().finished, 5);  // the retried FAILs are not in the budget either
}

// Writes what an older version left behind: trial 0 lost by its worker and
// queued again as trial 1, without retry_cause.
void write_old_format_store(const std::string& db) {
  Study study = open_study(db);
  Storage& s = study.storage();
  NewTrial init;
  init.params = {{"x", 0.5}};
  init.distributions = {{"x", one_param().params()[0].distribution}};
  auto t0 = s.create_trial(study.study_id(), init);
  s.set_trial_state(t0->trial_id, TrialState::kFail, std::nullopt, "worker lost");
  NewTrial retry;
  retry.state = TrialState::kWaiting;
  retry.system_attrs = Json{{kAttrRetryOf, 0}, {kAttrFixedParams, Json{{"x", 0.5}}}};
  auto t1 = s.create_trial(study.study_id(), retry);
  s.set_trial_system_attr(t0->trial_id, kAttrRetriedAs, t1->number);
}

class CoordinatorRetryOldStore : public ::testing::TestWithParam<int> {};

TEST_P(CoordinatorRetryOldStore, ResumesWithTheRuleOfItsVersion) {
  const int max_retries = GetParam();
  testsupport::TempDir dir("coordinator_retry_old");
  const std::string db = dir.file("study.db");
  write_old_format_store(db);
  zmq::context_t ctx;
  Study study = open_study(db);
  Coordinator c(study, Json{{"type", "external"}}, with_retries(max_retries));
  RawWorker w(ctx, c.endpoint(), "w");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 1);
  ASSERT_EQ(a->params.size(), 1u);
  EXPECT_EQ(proto::from_wire(a->params).at("x"), 0.5);
  a = w.request(c);  // trial 1 lost
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 2);
  auto t1 = study.storage().get_trial_by_number(study.study_id(), 1);
  auto t2 = study.storage().get_trial_by_number(study.study_id(), 2);
  EXPECT_EQ(t1->state, TrialState::kFail);
  if (max_retries == 1) {
    // Trial 0's loss ("worker lost", old row) used up the one retry.
    EXPECT_FALSE(t1->system_attrs.contains(kAttrRetriedAs));
    EXPECT_FALSE(t2->system_attrs.contains(kAttrRetryOf));
  } else {
    EXPECT_EQ(t1->system_attrs.at(kAttrRetriedAs), 2);
    EXPECT_EQ(t2->system_attrs.at(kAttrRetryOf), 1);
    EXPECT_EQ(t2->system_attrs.at(lifecycle::kAttrRetryCause), "worker_lost");
    EXPECT_EQ(t2->params.at("x"), 0.5);
  }
}

INSTANTIATE_TEST_SUITE_P(MaxRetries, CoordinatorRetryOldStore, ::testing::Values(1, 2));

// A worker stopped by a signal right after asking for a trial (a Slurm job
// cancelled between trials) says it leaves: the trial the coordinator had
// just assigned to it is queued again as stopped, at once, without using up
// a retry (max_retries 0 here), and the session ends.
TEST(CoordinatorRetry, AWorkerLeavingWithAnAssignedTrialGetsItQueuedAgain) {
  testsupport::TempDir dir("coordinator_retry_leaving");
  zmq::context_t ctx;
  Study study = open_study(dir.file("study.db"));
  Coordinator c(study, Json{{"type", "external"}}, with_retries(0));
  RawWorker w1(ctx, c.endpoint(), "task0");
  auto a = w1.request(c);
  ASSERT_TRUE(a);
  ASSERT_EQ(a->number, 0);
  proto::Disconnect leaving;
  leaving.reason = "stopped by a signal";
  w1.send(leaving);
  step_until_failed(c, study, 0);
  auto t0 = study.storage().get_trial_by_number(study.study_id(), 0);
  EXPECT_EQ(t0->state, TrialState::kFail);
  EXPECT_EQ(t0->fail_reason, "worker stopped: stopped by a signal");
  EXPECT_EQ(c.stats().workers_busy + c.stats().workers_idle, 0);  // the session ended
  RawWorker w2(ctx, c.endpoint(), "task1");
  a = w2.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->number, 1);  // the retry of trial 0, though max_retries is 0
  auto t1 = study.storage().get_trial_by_number(study.study_id(), 1);
  EXPECT_EQ(t1->system_attrs.at(kAttrRetryOf), 0);
  EXPECT_EQ(t1->system_attrs.at(lifecycle::kAttrRetryCause), "worker_stopped");
  EXPECT_EQ(t1->params, t0->params);
}

// A worker that sent its trial's final value just before the run was
// interrupted (Ctrl-C right after the program printed it): stop() takes
// what is already queued first, so the trial is COMPLETE with its value and
// nothing is queued again.
TEST(CoordinatorRetry, AFinalValueSentJustBeforeAnInterruptIsKept) {
  testsupport::TempDir dir("coordinator_retry_final_value");
  zmq::context_t ctx;
  const std::string db = dir.file("study.db");
  {
    Study study = open_study(db);
    Coordinator c(study, Json{{"type", "external"}}, with_retries(2));
    RawWorker w(ctx, c.endpoint(), "w1");
    auto a = w.request(c);
    ASSERT_TRUE(a);
    proto::Complete done;
    done.number = a->number;
    done.value = 0.125;
    w.send(done);
    // Not stepped: the message waits in the coordinator's socket, as one
    // sent a moment before the signal does. Give it time to get there.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    c.stop("interrupted");
  }
  Study study = open_study(db);
  auto trials = study.storage().get_all_trials(study.study_id());
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0]->state, TrialState::kComplete) << trials[0]->fail_reason;
  ASSERT_TRUE(trials[0]->value);
  EXPECT_EQ(*trials[0]->value, 0.125);
}

}  // namespace
}  // namespace hps
