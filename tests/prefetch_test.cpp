// Prefetch (WorkerOptions::prefetch, Hello.prefetch): a worker holds the
// next trial while it runs one. Seen from the coordinator with hand-driven
// workers (what it hands out, what a loss or a third request does, no
// prefetch near the end of the budget, a bad Hello), and end to end with
// `hpsearch run --prefetch 1` and real worker processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "algorithms/random_sampler.h"
#include "coordinator/coordinator.h"
#include "protocol/protocol.h"
#include "search/sqlite_storage.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/trial_lifecycle.h"
#include "tests/support/raw_worker.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "workers/worker.h"

namespace hps {
namespace {

namespace proto = hps::protocol;
using testsupport::RawWorker;

Study open_study(const std::string& path) {
  StudyOptions o;
  o.sampler = std::make_shared<RandomSampler>(5);
  o.space = SearchSpace::from_json(Json::parse(R"({"x": {"type": "float", "low": 0, "high": 1}})"));
  return Study::load_if_exists(open_storage(path), "prefetch", StudyDirection::kMinimize,
                               std::move(o));
}

CoordinatorOptions budget(std::int64_t n_trials) {
  CoordinatorOptions co;
  co.n_trials = n_trials;
  return co;
}

// A study in a store of its own and its coordinator, for workers driven by
// hand (the "external" objective: the coordinator runs nothing itself).
struct CoordinatorBench {
  CoordinatorBench(const std::string& name, CoordinatorOptions co)
      : dir(name),
        study(open_study(dir.file("study.db"))),
        c(study, Json{{"type", "external"}}, std::move(co)) {}
  testsupport::TempDir dir;
  zmq::context_t ctx;
  Study study;
  Coordinator c;
};

TrialState state_of(Study& study, std::int64_t number) {
  return study.storage().get_trial_by_number(study.study_id(), number)->state;
}

// Steps `c` until trial `number` is in `state` (or 10 s).
bool step_until(Coordinator& c, Study& study, std::int64_t number, TrialState state) {
  return testsupport::wait_until(
      [&] {
        c.step(10);
        return state_of(study, number) == state;
      },
      std::chrono::seconds(10));
}

// A new worker ("w2") takes `n` trials queued again and completes them.
// Returns each one's params by the number of the trial it retries.
std::map<std::int64_t, Params> complete_retries(zmq::context_t& ctx, Coordinator& c, Study& study,
                                                int n) {
  RawWorker w2(ctx, c.endpoint(), "w2");
  std::map<std::int64_t, Params> retried;
  for (int i = 0; i < n; ++i) {
    auto r = w2.request(c);
    EXPECT_TRUE(r) << i;
    if (!r) break;
    auto t = study.storage().get_trial_by_number(study.study_id(), r->number);
    retried[t->system_attrs.at(kAttrRetryOf).get<std::int64_t>()] = t->params;
    w2.send(proto::Complete{r->number, false, 0.3, ""});
  }
  return retried;
}

TEST(Prefetch, AWorkerHoldsTheNextTrialWhileItRunsOne) {
  CoordinatorBench run("prefetch_holds", budget(20));
  auto& [dir, ctx, study, c] = run;
  RawWorker w(ctx, c.endpoint(), "w", /*prefetch=*/1);
  auto first = w.request(c);
  ASSERT_TRUE(first);
  auto next = w.request(c);  // asked while `first` runs: not a lost trial
  ASSERT_TRUE(next);
  EXPECT_NE(next->number, first->number);
  EXPECT_EQ(state_of(study, first->number), TrialState::kRunning);
  EXPECT_EQ(state_of(study, next->number), TrialState::kRunning);
  EXPECT_EQ(c.stats().running, 2);
  EXPECT_EQ(c.stats().workers_busy, 1);
  ASSERT_EQ(c.workers().size(), 1u);
  EXPECT_EQ(c.workers()[0].trial, first->number);
  EXPECT_EQ(c.workers()[0].prefetched, std::vector<std::int64_t>{next->number});

  // Both end with their own results, in order.
  w.send(proto::Complete{first->number, false, 0.5, ""});
  ASSERT_TRUE(step_until(c, study, first->number, TrialState::kComplete));
  EXPECT_EQ(c.workers()[0].trial, next->number);
  EXPECT_TRUE(c.workers()[0].prefetched.empty());
  w.send(proto::Complete{next->number, false, 0.25, ""});
  ASSERT_TRUE(step_until(c, study, next->number, TrialState::kComplete));
  EXPECT_EQ(c.stats().running, 0);
  EXPECT_EQ(c.stats().rejected_results, 0);
}

TEST(Prefetch, AThirdRequestLosesTheOldestTrialAsWithoutPrefetch) {
  CoordinatorBench run("prefetch_third", budget(20));
  auto& [dir, ctx, study, c] = run;
  RawWorker w(ctx, c.endpoint(), "w", 1);
  auto a = w.request(c);
  auto b = w.request(c);
  ASSERT_TRUE(a && b);
  auto third = w.request(c);  // holds two (1 + prefetch) already: it moved on without `a`
  ASSERT_TRUE(third);
  auto lost = study.storage().get_trial_by_number(study.study_id(), a->number);
  EXPECT_EQ(lost->state, TrialState::kFail);
  EXPECT_EQ(lost->fail_reason, "worker lost (asked for a new trial without ending this one)");
  EXPECT_EQ(state_of(study, b->number), TrialState::kRunning);
  // A result for the lost trial is rejected; the held ones are accepted.
  w.send(proto::Complete{a->number, false, 0.1, ""});
  w.send(proto::Complete{b->number, false, 0.2, ""});
  ASSERT_TRUE(step_until(c, study, b->number, TrialState::kComplete));
  EXPECT_EQ(c.stats().rejected_results, 1);
  EXPECT_EQ(state_of(study, a->number), TrialState::kFail);
}

TEST(Prefetch, AWorkerLeavingHasEveryTrialItHeldQueuedAgain) {
  CoordinatorOptions co = budget(20);
  co.max_retries = 0;  // a worker stopped by a signal does not use up retries
  CoordinatorBench run("prefetch_leaving", co);
  auto& [dir, ctx, study, c] = run;
  RawWorker w(ctx, c.endpoint(), "w", 1);
  auto a = w.request(c);
  auto b = w.request(c);
  ASSERT_TRUE(a && b);
  proto::Disconnect leaving;
  leaving.reason = "stopped by a signal";
  w.send(leaving);
  ASSERT_TRUE(step_until(c, study, b->number, TrialState::kFail));
  ASSERT_TRUE(step_until(c, study, a->number, TrialState::kFail));
  // Each is queued again with its params, and a new worker gets both.
  std::map<std::int64_t, Params> retried = complete_retries(ctx, c, study, 2);
  ASSERT_EQ(retried.size(), 2u);
  for (const auto& held : {a, b}) {
    auto t = study.storage().get_trial_by_number(study.study_id(), held->number);
    EXPECT_EQ(t->fail_reason, "worker stopped: stopped by a signal");
    EXPECT_EQ(retried.at(held->number), t->params);
  }
}

// A worker stopped by a signal says so with its running trial's Fail
// ("interrupted"); until its Disconnect arrives, a request it had sent (or
// sends) gets nothing: the trial queued again goes to another worker, not
// back to the one leaving.
TEST(Prefetch, AWorkerStoppedByASignalIsGivenNoMoreTrials) {
  CoordinatorOptions co = budget(20);
  co.max_retries = 0;  // a worker stopped by a signal does not use up retries
  CoordinatorBench run("prefetch_stopped", co);
  auto& [dir, ctx, study, c] = run;
  RawWorker w(ctx, c.endpoint(), "w", 1);
  auto a = w.request(c);
  auto b = w.request(c);
  ASSERT_TRUE(a && b);
  proto::Fail stopped;
  stopped.number = a->number;
  stopped.reason = proto::Fail::Reason::kInterrupted;
  stopped.message = "stopped by a signal";
  w.send(stopped);
  auto more = w.request(c, 1.0);
  EXPECT_FALSE(more) << "the stopped worker was handed trial " << more->number;
  EXPECT_EQ(state_of(study, a->number), TrialState::kFail);
  proto::Disconnect leaving;
  leaving.reason = "stopped by a signal";
  w.send(leaving);
  ASSERT_TRUE(step_until(c, study, b->number, TrialState::kFail));
  // Both are queued again, for another worker.
  std::vector<std::int64_t> retry_of;
  for (const auto& [number, params] : complete_retries(ctx, c, study, 2))
    retry_of.push_back(number);
  EXPECT_EQ(retry_of, (std::vector<std::int64_t>{a->number, b->number}));
}

// A worker (hps::Worker, prefetch 1) whose stop flag is set (a signal)
// while its objective runs one trial and it holds the next: it starts no
// held trial and asks for no other, even when the running objective
// ignores the stop and returns normally; the held trial is queued again as
// "worker stopped".
TEST(Prefetch, AStoppedWorkerStartsNoHeldTrialAndAsksForNone) {
  CoordinatorOptions co = budget(20);
  co.max_retries = 0;
  CoordinatorBench run("prefetch_worker_stop", co);
  // Plain references: clang 14 lambdas cannot capture structured bindings.
  Coordinator& c = run.c;
  Study& study = run.study;
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  WorkerOptions wo;
  wo.connect = c.endpoint();
  wo.prefetch = 1;
  wo.heartbeat_interval_ms = 100;
  wo.stop = &stop;
  Worker worker(wo);
  std::atomic<int> rc{-1};
  std::thread serving([&] {
    rc = worker.run([&](Trial&) {
      ++calls;
      // An objective that never looks at the interrupt: it returns once
      // the stop flag is set.
      while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return 1.0;
    });
  });
  struct Join {  // also when an assertion below returns early
    std::atomic<bool>& stop;
    std::thread& thread;
    ~Join() {
      stop = true;
      thread.join();
    }
  } join{stop, serving};
  const bool holds_two = testsupport::wait_until(
      [&] {
        c.step(10);
        auto workers = c.workers();
        return workers.size() == 1 && workers[0].trial && !workers[0].prefetched.empty();
      },
      std::chrono::seconds(20));
  if (holds_two) {
    const std::int64_t first = *c.workers()[0].trial;
    const std::int64_t held = c.workers()[0].prefetched.front();
    stop = true;
    testsupport::wait_until(
        [&] {
          c.step(10);
          return rc != -1;
        },
        std::chrono::seconds(20));
    EXPECT_EQ(rc, Worker::kStopped);
    EXPECT_EQ(calls, 1) << "the held trial was started after the stop";
    EXPECT_EQ(state_of(study, first), TrialState::kComplete);  // it did end with a value
    ASSERT_TRUE(step_until(c, study, held, TrialState::kFail));
    EXPECT_EQ(study.storage().get_trial_by_number(study.study_id(), held)->fail_reason,
              "worker stopped: stopped by a signal");
    // Nothing else was handed to it: the first, the held one and its retry.
    EXPECT_EQ(study.storage().get_all_trials(study.study_id(), {}).size(), 3u);
  }
  ASSERT_TRUE(holds_two) << "the worker never held a second trial";
}

TEST(Prefetch, NoTrialWaitsOnABusyWorkerNearTheEndOfTheBudget) {
  CoordinatorBench run("prefetch_end", budget(3));
  auto& [dir, ctx, study, c] = run;
  RawWorker w1(ctx, c.endpoint(), "w1", 1);
  RawWorker w2(ctx, c.endpoint(), "w2", 1);
  auto a = w1.request(c);
  auto b = w2.request(c);
  ASSERT_TRUE(a && b);
  // One trial left and two workers: w1's prefetch request waits until its
  // running trial ends, so an idle worker would get the last trial first.
  EXPECT_FALSE(w1.request(c, 1.0)) << "the last trial went to a busy worker";
  EXPECT_EQ(c.stats().running, 2);
  w1.send(proto::Complete{a->number, false, 0.5, ""});
  auto last = w1.await<proto::Assignment>(c);  // the deferred request is answered now
  ASSERT_TRUE(last);
  w1.send(proto::Complete{last->number, false, 0.5, ""});
  w2.send(proto::Complete{b->number, false, 0.5, ""});
  ASSERT_TRUE(testsupport::wait_until([&] { return !run.c.step(10); }, std::chrono::seconds(10)));
  EXPECT_EQ(c.done_reason(), "budget reached");
  EXPECT_EQ(study.storage().count_trials(study.study_id()), 3);
}

TEST(Prefetch, AHelloAskingForMoreThanTheMostIsRefused) {
  CoordinatorBench run("prefetch_hello", budget(3));
  auto& [dir, ctx, study, c] = run;
  RawWorker w(ctx, c.endpoint(), "greedy", proto::kMaxPrefetch + 1);
  auto d = w.await<proto::Disconnect>(c, 5);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->code, proto::Disconnect::Code::kRefused);
  EXPECT_NE(d->reason.find("Hello.prefetch: must be in [0, 1]"), std::string::npos) << d->reason;
  EXPECT_EQ(c.stats().workers_busy + c.stats().workers_idle, 0);

  WorkerOptions o;
  o.connect = "ipc:///tmp/x.sock";
  for (int bad : {-1, proto::kMaxPrefetch + 1}) {
    o.prefetch = bad;
    try {
      o.validate();
      ADD_FAILURE() << "prefetch " << bad << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.path(), "worker.prefetch");
    }
  }
}

// The trials of study "pf" in `db` numbered `first` or higher that were
// handed to their worker while its previous one still ran (their stored
// start, the dispatch, comes before the previous one's end); each trial is
// expected COMPLETE.
int held_trials(const std::string& db, std::int64_t first = 0) {
  auto storage = open_storage(db);
  std::map<std::string, std::vector<TrialPtr>> by_worker;
  for (const auto& t : storage->get_all_trials(*storage->find_study("pf"), {})) {
    EXPECT_EQ(t->state, TrialState::kComplete) << t->number << ": " << t->fail_reason;
    if (t->number >= first) by_worker[t->worker].push_back(t);
  }
  int held = 0;
  for (auto& [worker, list] : by_worker)
    for (std::size_t i = 1; i < list.size(); ++i)
      if (list[i]->datetime_start && list[i - 1]->datetime_complete &&
          *list[i]->datetime_start < *list[i - 1]->datetime_complete)
        ++held;
  return held;
}

// A study "pf" of `n_trials` short sleep trials in dir/study.db, described
// by dir/space.json.
void write_sleep_study(const testsupport::TempDir& dir, int n_trials) {
  std::ofstream f(dir.file("space.json"));
  f << Json{{"study",
             {{"name", "pf"}, {"direction", "minimize"}, {"storage", dir.file("study.db")}}},
            {"sampler", {{"type", "random"}, {"seed", 3}}},
            {"budget", {{"n_trials", n_trials}}},
            {"objective", {{"type", "sleep"}, {"seconds", 0.03}, {"steps", 1}}},
            {"space", {{"x", {{"type", "float"}, {"low", 0.0}, {"high", 1.0}}}}}}
           .dump();
}

// Real worker processes: every trial ends COMPLETE once, and trials were
// handed to a worker while its previous one still ran (the trial's stored
// start, its dispatch, comes before the previous one's end).
TEST(Prefetch, HpsearchRunWithPrefetchRunsEveryTrialOnce) {
  testsupport::TempDir dir("prefetch_run");
  const std::string db = dir.file("study.db");
  write_sleep_study(dir, 40);
  auto r = testsupport::run_process({HPSEARCH_CLI_PATH, "run", dir.file("space.json"), "--workers",
                                     "2", "--prefetch", "1", "--log-level", "warn"},
                                    dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  {
    auto storage = open_storage(db);
    ASSERT_EQ(storage->get_all_trials(*storage->find_study("pf"), {}).size(), 40u);
  }
  EXPECT_GT(held_trials(db), 0) << "no trial was dispatched while its worker's previous one ran";

  auto bad = testsupport::run_process(
      {HPSEARCH_CLI_PATH, "run", dir.file("space.json"), "--prefetch", "2"}, dir.path().string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--prefetch: must be in [0, 1]"), std::string::npos) << bad.err;
  // The worker names its option as given on its command line too.
  auto bad_worker = testsupport::run_process({HPSEARCH_CLI_PATH, "worker", "--connect",
                                              "ipc://" + dir.file("none.sock"), "--prefetch", "2"},
                                             dir.path().string());
  EXPECT_EQ(bad_worker.exit_code, 2);
  EXPECT_NE(bad_worker.err.find("--prefetch: must be in [0, 1]"), std::string::npos)
      << bad_worker.err;
}

// hpsearch resume starts its workers with the last run's --prefetch (it
// started them without: a study run with --prefetch 1 lost it on resume);
// an explicit --prefetch wins, and is what the next resume keeps.
TEST(Prefetch, ResumeKeepsTheLastRunsPrefetch) {
  testsupport::TempDir dir("prefetch_resume");
  const std::string db = dir.file("study.db");
  write_sleep_study(dir, 4);
  const auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), HPSEARCH_CLI_PATH);
    return testsupport::run_process(args, dir.path().string());
  };
  auto r = cli({"run", dir.file("space.json"), "--workers", "2", "--prefetch", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = cli({"resume", db, "--n-trials", "44"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("resume: --prefetch 1, as the last run (--prefetch changes it)"),
            std::string::npos)
      << r.err;
  EXPECT_GT(held_trials(db, 4), 0) << "the resumed run's workers held no trial: no prefetch";
  r = cli({"resume", db, "--n-trials", "46", "--prefetch", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("--prefetch 1, as the last run"), std::string::npos) << r.err;
  r = cli({"resume", db, "--n-trials", "48"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("as the last run (--prefetch"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hps
