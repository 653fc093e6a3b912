// PatientPruner: patience and min_delta on scripted curves (both
// directions), deferring to a wrapped pruner only when stalled.
#include "algorithms/patient_pruner.h"

#include <gtest/gtest.h>

#include <limits>

#include "algorithms/hyperband_pruner.h"
#include "algorithms/percentile_pruner.h"
#include "support/pruning_harness.h"

namespace hps {
namespace {

using testing::PruningHarness;

PatientPrunerOptions opts(std::int64_t patience, double min_delta = 0.0) {
  PatientPrunerOptions o;
  o.patience = patience;
  o.min_delta = min_delta;
  return o;
}

// Answers a fixed value and counts calls.
class FixedPruner : public Pruner {
 public:
  explicit FixedPruner(bool answer) : answer_(answer) {}
  bool prune(const PruningContext&) override {
    ++calls;
    return answer_;
  }
  std::string name() const override { return "fixed"; }
  int calls = 0;

 private:
  bool answer_;
};

class PatientPrunerTest : public ::testing::TestWithParam<StudyDirection> {
 protected:
  PruningHarness h{GetParam()};
};

TEST_P(PatientPrunerTest, PrunesAfterPatiencePlusOneStalledReports) {
  PatientPruner p(nullptr, opts(2));
  EXPECT_EQ(h.run(p, {{0, 1.0}, {1, 0.8}, {2, 0.9}, {3, 0.85}, {4, 0.81}, {5, 0.1}}), 4);
  // An improvement resets the count.
  EXPECT_EQ(h.run(p, {{0, 1.0}, {1, 1.1}, {2, 1.2}, {3, 0.9}, {4, 1.0}, {5, 1.0}, {6, 0.5}}),
            std::nullopt);
  // Patience 0: the first report that does not improve.
  PatientPruner impatient(nullptr, opts(0));
  EXPECT_EQ(h.run(impatient, {{0, 1.0}, {1, 0.9}, {2, 0.9}}), 2);
}

TEST_P(PatientPrunerTest, MinDeltaTreatsSmallGainsAsStalls) {
  PatientPruner p(nullptr, opts(1, 0.1));
  // 0.95 and 0.9 each beat the best (1.0) by no more than 0.1.
  EXPECT_EQ(h.run(p, {{0, 1.0}, {1, 0.95}, {2, 0.9}, {3, 0.5}}), 2);
  EXPECT_EQ(h.run(p, {{0, 1.0}, {1, 0.85}, {2, 0.7}, {3, 0.55}}), std::nullopt);
}

TEST_P(PatientPrunerTest, DirectionMatters) {
  // Rising raw values improve a maximized study and stall a minimized one.
  PruningHarness other(GetParam() == StudyDirection::kMinimize ? StudyDirection::kMaximize
                                                               : StudyDirection::kMinimize);
  for (auto* x : {&h, &other}) {
    PatientPruner p(nullptr, opts(1));
    double k = h.sign() * x->sign();
    auto pruned_at = x->run(p, {{0, k * 1.0}, {1, k * 2.0}, {2, k * 3.0}, {3, k * 4.0}});
    if (x == &h)
      EXPECT_EQ(pruned_at, 2);
    else
      EXPECT_EQ(pruned_at, std::nullopt);
  }
}

TEST_P(PatientPrunerTest, WrappedPrunerIsAskedOnlyWhenStalled) {
  auto no = std::make_shared<FixedPruner>(false);
  PatientPruner p(no, opts(1));
  EXPECT_EQ(h.run(p, {{0, 1.0}, {1, 0.9}, {2, 0.95}, {3, 0.96}, {4, 0.97}}), std::nullopt);
  EXPECT_EQ(no->calls, 2);  // steps 3 and 4
  auto yes = std::make_shared<FixedPruner>(true);
  PatientPruner q(yes, opts(1));
  EXPECT_EQ(h.run(q, {{0, 1.0}, {1, 0.9}, {2, 0.95}, {3, 0.96}}), 3);
  EXPECT_EQ(yes->calls, 1);
}

TEST_P(PatientPrunerTest, WrapsAMedianPruner) {
  MedianPrunerOptions mo;
  mo.n_startup_trials = 0;
  PatientPruner p(std::make_shared<MedianPruner>(mo), opts(0));
  h.add_finished({{0, 1.0}, {1, 0.8}, {2, 0.4}});
  // Stalled at step 1 but better than the median: continue; at step 2
  // stalled and worse than the median (best 0.6 > 0.4): prune.
  EXPECT_EQ(h.run(p, {{0, 0.6}, {1, 0.7}, {2, 0.65}}), 2);
  // Worse than the median but improving at every step: never pruned.
  EXPECT_EQ(h.run(p, {{0, 3.0}, {1, 2.0}, {2, 1.0}}), std::nullopt);
}

TEST_P(PatientPrunerTest, NanPrunesWithoutAskingTheWrappedPruner) {
  auto no = std::make_shared<FixedPruner>(false);
  PatientPruner p(no, opts(100));
  auto t = h.start();
  EXPECT_TRUE(h.report(p, t, 0, std::numeric_limits<double>::quiet_NaN()));
  EXPECT_EQ(no->calls, 0);
}

TEST_P(PatientPrunerTest, SamplerViewComesFromTheWrappedPruner) {
  HyperbandPrunerOptions ho;
  ho.max_resource = 81;
  auto hb = std::make_shared<HyperbandPruner>(ho);
  PatientPruner p(hb, opts(1));
  PatientPruner alone(nullptr, opts(1));
  for (int i = 0; i < 30; ++i) h.start();
  auto all = h.storage().get_all_trials(h.study_id());
  EXPECT_EQ(p.trials_for_sampler(*all[0], all).size(), hb->trials_for_sampler(*all[0], all).size());
  EXPECT_EQ(alone.trials_for_sampler(*all[0], all).size(), all.size());
}

INSTANTIATE_TEST_SUITE_P(Directions, PatientPrunerTest,
                         ::testing::Values(StudyDirection::kMinimize, StudyDirection::kMaximize),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(PatientPrunerOptionsTest, ValidateNamesTheField) {
  auto path_of = [](PatientPrunerOptions o) {
    try {
      PatientPruner p(nullptr, o);
    } catch (const ConfigError& e) {
      return e.path();
    }
    return std::string("ok");
  };
  EXPECT_EQ(path_of(opts(-1)), "pruner.patience");
  EXPECT_EQ(path_of(opts(1, -0.5)), "pruner.min_delta");
  EXPECT_EQ(path_of(opts(1, std::numeric_limits<double>::infinity())), "pruner.min_delta");
  EXPECT_EQ(path_of(opts(0, 0.0)), "ok");
}

}  // namespace
}  // namespace hps
