// SuccessiveHalvingPruner (ASHA) on scripted learning curves, for minimize
// and (values negated) maximize.
#include "algorithms/successive_halving_pruner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/pruning_harness.h"

namespace hps {
namespace {

using testing::PruningHarness;

constexpr double kInf = std::numeric_limits<double>::infinity();

SuccessiveHalvingPrunerOptions opts(std::optional<std::int64_t> min_resource, std::int64_t eta,
                                    std::int64_t rate = 0) {
  SuccessiveHalvingPrunerOptions o;
  o.min_resource = min_resource;
  o.reduction_factor = eta;
  o.min_early_stopping_rate = rate;
  return o;
}

class SuccessiveHalvingPrunerTest : public ::testing::TestWithParam<StudyDirection> {
 protected:
  PruningHarness h{GetParam()};
  // The stored rung value of `t` at `rung`, before sign().
  std::optional<double> rung_value(const TrialPtr& t, int rung) {
    auto s = h.get(t);
    auto key = std::string(kAttrCompletedRungPrefix) + std::to_string(rung);
    if (!s->system_attrs.contains(key)) return std::nullopt;
    const Json& j = s->system_attrs[key];
    if (j.is_string()) return h.sign() * (j.get<std::string>() == "inf" ? kInf : -kInf);
    return h.sign() * j.get<double>();
  }
};

TEST_P(SuccessiveHalvingPrunerTest, FirstTrialsArePromotedOnlyWhenBest) {
  // eta = 2, rungs at steps 1, 2, 4, 8.
  SuccessiveHalvingPruner pruner(opts(1, 2));
  EXPECT_EQ(h.run(pruner, {{0, 5.0}, {1, 4.0}, {2, 3.0}, {4, 2.0}, {8, 1.0}}), std::nullopt);
  // n = 2 < eta at rung 0: only a new best is promoted.
  EXPECT_EQ(h.run(pruner, {{0, 5.0}, {1, 4.5}, {2, 3.0}}), 1);
  EXPECT_EQ(h.run(pruner, {{0, 5.0}, {1, 3.5}, {2, 2.5}, {4, 2.5}}), 4);
}

TEST_P(SuccessiveHalvingPrunerTest, TopOneOverEtaIsPromoted) {
  SuccessiveHalvingPruner pruner(opts(1, 2));
  // Four trials recorded at rung 0 (step 1) with values 1, 2, 3, 4: each
  // ends at step 1 before its rung 1.
  for (double v : {1.0, 2.0, 3.0, 4.0}) h.run(pruner, {{1, v}});
  // With a fifth value there are 5 values, floor(5/2) = 2 promoted: the bar
  // is the second best, 2.
  auto worse = h.start();
  EXPECT_TRUE(h.report(pruner, worse, 1, 2.5));
  EXPECT_EQ(rung_value(worse, 0), 2.5);
  EXPECT_EQ(h.get(worse)->system_attrs.value(kAttrPrunedAtRung, -1), 0);
  auto tie = h.start();
  EXPECT_FALSE(h.report(pruner, tie, 1, 2.0));
  EXPECT_EQ(rung_value(tie, 0), 2.0);
  EXPECT_FALSE(h.get(tie)->system_attrs.contains(kAttrPrunedAtRung));
  EXPECT_FALSE(h.report(pruner, tie, 2, 2.0));  // alone at rung 1 (step 2)
  // Steps between rungs are not judged, however bad the value.
  EXPECT_FALSE(h.report(pruner, tie, 3, 100.0));
}

TEST_P(SuccessiveHalvingPrunerTest, DirectionMatters) {
  // Raw values 1..4 recorded, then 3.5: bad when minimizing, good when
  // maximizing, whatever sign the harness applies.
  PruningHarness other(GetParam() == StudyDirection::kMinimize ? StudyDirection::kMaximize
                                                               : StudyDirection::kMinimize);
  for (auto* x : {&h, &other}) {
    SuccessiveHalvingPruner pruner(opts(1, 2));
    for (double v : {1.0, 2.0, 3.0, 4.0}) x->run(pruner, {{1, h.sign() * x->sign() * v}});
    auto t = x->start();
    EXPECT_EQ(x->report(pruner, t, 1, h.sign() * x->sign() * 3.5), x == &h);
  }
}

TEST_P(SuccessiveHalvingPrunerTest, OnlyOneEarlierTrialReachedTheLateRung) {
  // eta = 3, rungs at 1, 3, 9. Trial A ran to step 9; B and C stopped at step 3.
  SuccessiveHalvingPruner pruner(opts(1, 3));
  EXPECT_EQ(h.run(pruner, {{1, 3.0}, {3, 2.0}, {9, 1.0}}), std::nullopt);
  EXPECT_EQ(h.run(pruner, {{1, 2.5}, {3, 1.5}}), std::nullopt);
  EXPECT_EQ(h.run(pruner, {{1, 2.0}, {3, 1.0}}), std::nullopt);
  // D is excellent early; at rung 2 its only competitor is A (1.0).
  auto d = h.start();
  EXPECT_FALSE(h.report(pruner, d, 1, 0.5));
  EXPECT_FALSE(h.report(pruner, d, 3, 0.5));
  EXPECT_TRUE(h.report(pruner, d, 9, 1.2));
  auto e = h.start();
  EXPECT_FALSE(h.report(pruner, e, 1, 0.5));
  EXPECT_FALSE(h.report(pruner, e, 3, 0.5));
  EXPECT_FALSE(h.report(pruner, e, 9, 0.9));
  EXPECT_EQ(rung_value(e, 2), 0.9);
}

TEST_P(SuccessiveHalvingPrunerTest, MinEarlyStoppingRateDelaysTheFirstRung) {
  // r = 1, eta = 3, s = 1: rungs at 3, 9.
  SuccessiveHalvingPruner pruner(opts(1, 3, 1));
  h.run(pruner, {{0, 1.0}, {1, 1.0}, {2, 1.0}, {3, 1.0}});
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, 0, 9.0));
  EXPECT_FALSE(h.report(pruner, t, 1, 9.0));
  EXPECT_FALSE(h.report(pruner, t, 2, 9.0));
  EXPECT_TRUE(h.report(pruner, t, 3, 9.0));
  EXPECT_EQ(rung_value(t, 0), 9.0);
}

TEST_P(SuccessiveHalvingPrunerTest, IrregularStepsJudgeEachCrossedRungWithFirstValueAtOrAfterIt) {
  SuccessiveHalvingPruner pruner(opts(1, 2));  // rungs 1, 2, 4, 8
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, 0, 9.0));
  EXPECT_FALSE(h.report(pruner, t, 5, 3.0));  // crosses rungs 0, 1, 2 at once
  for (int k = 0; k < 3; ++k) EXPECT_EQ(rung_value(t, k), 3.0) << k;
  EXPECT_EQ(rung_value(t, 3), std::nullopt);
}

TEST_P(SuccessiveHalvingPrunerTest, AutoMinResourceComesFromTheFirstCompletedTrial) {
  SuccessiveHalvingPruner pruner(opts(std::nullopt, 2));
  auto early = h.start();
  // No COMPLETE trial yet: no judgement, no bookkeeping.
  EXPECT_FALSE(h.report(pruner, early, 1, 100.0));
  EXPECT_EQ(rung_value(early, 0), std::nullopt);
  EXPECT_EQ(pruner.resolve_min_resource(h.storage().get_all_trials(h.study_id())), std::nullopt);
  // The first trial to complete ran to step 450: r = 4. A later one ran longer.
  h.add_finished({{0, 1.0}, {450, 0.5}});
  h.add_finished({{0, 1.0}, {999, 0.5}});
  EXPECT_EQ(pruner.resolve_min_resource(h.storage().get_all_trials(h.study_id())), 4);
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, 3, 1.0));
  EXPECT_EQ(rung_value(t, 0), std::nullopt);
  EXPECT_FALSE(h.report(pruner, t, 4, 1.0));
  EXPECT_EQ(rung_value(t, 0), 1.0);
  // A short completed run gives r = 1.
  PruningHarness g(GetParam());
  g.add_finished({{0, 1.0}, {7, 0.5}});
  EXPECT_EQ(pruner.resolve_min_resource(g.storage().get_all_trials(g.study_id())), 1);
}

TEST_P(SuccessiveHalvingPrunerTest, PruneDecisionIsKept) {
  SuccessiveHalvingPruner pruner(opts(1, 2));
  h.run(pruner, {{1, 1.0}});
  auto t = h.start();
  EXPECT_TRUE(h.report(pruner, t, 1, 2.0));
  // Asked again (same step, or a later report of an objective that ignored
  // the answer): still pruned, no new rung recorded.
  EXPECT_TRUE(h.ask(pruner, t, 1));
  EXPECT_TRUE(h.report(pruner, t, 2, 0.1));
  EXPECT_EQ(rung_value(t, 1), std::nullopt);
}

TEST_P(SuccessiveHalvingPrunerTest, RetriedFailedTrialsDoNotCompete) {
  SuccessiveHalvingPruner pruner(opts(1, 2));
  auto a = h.start();
  EXPECT_FALSE(h.report(pruner, a, 1, 1.0));
  h.storage().set_trial_state(a->trial_id, TrialState::kFail, std::nullopt, "worker lost");
  h.storage().set_trial_system_attr(a->trial_id, kAttrRetriedAs, 99);
  auto b = h.start();
  EXPECT_FALSE(h.report(pruner, b, 1, 2.0));  // alone at the rung: promoted
  // A FAIL trial that was not retried still counts.
  h.storage().set_trial_state(b->trial_id, TrialState::kFail, std::nullopt, "crashed");
  auto c = h.start();
  EXPECT_TRUE(h.report(pruner, c, 1, 3.0));
}

TEST_P(SuccessiveHalvingPrunerTest, InfiniteRungValuesRoundTrip) {
  SuccessiveHalvingPruner pruner(opts(1, 2));
  // The best possible value is stored as "-inf" or "inf" (JSON has no
  // infinities) and read back as a competitor.
  auto a = h.start();
  EXPECT_FALSE(h.report(pruner, a, 1, -kInf));
  EXPECT_EQ(rung_value(a, 0), -kInf);
  auto b = h.start();
  EXPECT_TRUE(h.report(pruner, b, 1, 5.0));
  auto c = h.start();
  EXPECT_FALSE(h.report(pruner, c, 1, -kInf));  // a tie with the best
}

TEST_P(SuccessiveHalvingPrunerTest, NanPrunes) {
  SuccessiveHalvingPruner pruner(opts(5, 2));
  auto t = h.start();
  EXPECT_TRUE(h.report(pruner, t, 0, std::numeric_limits<double>::quiet_NaN()));
}

INSTANTIATE_TEST_SUITE_P(Directions, SuccessiveHalvingPrunerTest,
                         ::testing::Values(StudyDirection::kMinimize, StudyDirection::kMaximize),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(SuccessiveHalvingPrunerMiscTest, NeedsStorageForBookkeeping) {
  PruningHarness h(StudyDirection::kMinimize);
  SuccessiveHalvingPruner pruner(opts(1, 2));
  auto t = h.start();
  h.storage().set_trial_intermediate_value(t->trial_id, 1, 1.0);
  auto snap = h.get(t);
  auto trials = h.storage().get_all_trials(h.study_id());
  PruningContext ctx{StudyDirection::kMinimize, trials, *snap, 1, nullptr};
  EXPECT_THROW(pruner.prune(ctx), Error);
  // Before the first rung nothing is written, so no storage is needed.
  PruningContext early{StudyDirection::kMinimize, trials, *snap, 1, nullptr};
  SuccessiveHalvingPruner later(opts(2, 2));
  EXPECT_FALSE(later.prune(early));
}

TEST(SuccessiveHalvingPrunerMiscTest, HugeOptionsDoNotOverflow) {
  PruningHarness h(StudyDirection::kMinimize);
  SuccessiveHalvingPruner pruner(opts(std::numeric_limits<std::int64_t>::max() / 2, 1000,
                                      std::numeric_limits<std::int64_t>::max()));
  auto t = h.start();
  EXPECT_FALSE(h.report(pruner, t, std::numeric_limits<std::int64_t>::max(), 1.0));
}

TEST(SuccessiveHalvingPrunerMiscTest, ValidateNamesTheField) {
  auto path_of = [](SuccessiveHalvingPrunerOptions o) {
    try {
      o.validate("pruner");
    } catch (const ConfigError& e) {
      return e.path();
    }
    return std::string("ok");
  };
  EXPECT_EQ(path_of(opts(0, 2)), "pruner.min_resource");
  EXPECT_EQ(path_of(opts(1, 1)), "pruner.reduction_factor");
  EXPECT_EQ(path_of(opts(1, 2, -1)), "pruner.min_early_stopping_rate");
  EXPECT_EQ(path_of(opts(std::nullopt, 2)), "ok");
}

}  // namespace
}  // namespace hps
