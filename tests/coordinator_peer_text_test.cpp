// Text a worker sends that is not UTF-8 (its name, host, device, a fail
// reason) is made valid (U+FFFD for each bad byte) before the coordinator
// logs or stores it: the store refuses invalid UTF-8, and a refused write
// stopped the whole run (found by the new-user pass of session 18).
#include <gtest/gtest.h>

#include <string>
#include <zmq.hpp>

#include "algorithms/random_sampler.h"
#include "coordinator/coordinator.h"
#include "protocol/protocol.h"
#include "search/storage.h"
#include "search/study.h"
#include "tests/support/raw_worker.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace proto = hps::protocol;

constexpr const char* kReplacement = "\xEF\xBF\xBD";

TEST(CoordinatorPeerText, BytesThatAreNotUtf8DoNotStopTheRun) {
  testsupport::TempDir dir("peer_text");
  StudyOptions so;
  so.sampler = std::make_shared<RandomSampler>(1);
  so.space =
      SearchSpace::from_json(Json::parse(R"({"x": {"type": "float", "low": 0, "high": 1}})"));
  Study study = Study::load_if_exists(open_storage(dir.file("study.db")), "text",
                                      StudyDirection::kMinimize, std::move(so));
  CoordinatorOptions co;
  co.n_trials = 3;
  co.status_interval_s = 0.001;  // the workers table (with the name) is written at each step
  Coordinator c(study, Json{{"type", "external"}}, co);
  zmq::context_t ctx;
  testsupport::RawWorker w(ctx, c.endpoint(), "caf\xe9");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  ASSERT_EQ(c.workers().size(), 1u);
  EXPECT_EQ(c.workers()[0].name, std::string("caf") + kReplacement);
  w.send(proto::Fail{a->number, proto::Fail::Reason::kException, "bad \xff\xfe msg", ""});
  ASSERT_TRUE(testsupport::wait_until(
      [&] {
        c.step(10);
        return study.storage().get_trial_by_number(study.study_id(), a->number)->state ==
               TrialState::kFail;
      },
      std::chrono::seconds(10)));
  EXPECT_EQ(study.storage().get_trial_by_number(study.study_id(), a->number)->fail_reason,
            std::string("bad ") + kReplacement + kReplacement + " msg");
  // The run goes on: the next trial is handed out and completes.
  auto b = w.request(c);
  ASSERT_TRUE(b);
  w.send(proto::Complete{b->number, false, 0.5, ""});
  ASSERT_TRUE(testsupport::wait_until(
      [&] {
        c.step(10);
        return study.storage().get_trial_by_number(study.study_id(), b->number)->state ==
               TrialState::kComplete;
      },
      std::chrono::seconds(10)));
}

}  // namespace
}  // namespace hps
