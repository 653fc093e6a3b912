// HyperbandPruner: bracket counts, deterministic bracket assignment in
// proportion to the bracket budgets, the sampler's view of one bracket, and
// successive halving within a bracket (both directions).
#include "algorithms/hyperband_pruner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "algorithms/successive_halving_pruner.h"
#include "support/pruning_harness.h"

namespace hps {
namespace {

using testing::PruningHarness;

HyperbandPrunerOptions opts(std::int64_t min_r, std::int64_t max_r, std::int64_t eta,
                            std::uint64_t seed = 0) {
  HyperbandPrunerOptions o;
  o.min_resource = min_r;
  o.max_resource = max_r;
  o.reduction_factor = eta;
  o.seed = seed;
  return o;
}

TEST(HyperbandBracketsTest, CountsUseExactIntegerArithmetic) {
  EXPECT_EQ(HyperbandPruner::n_brackets(1, 243, 3), 6);
  EXPECT_EQ(HyperbandPruner::n_brackets(1, 1000, 10), 4);
  EXPECT_EQ(HyperbandPruner::n_brackets(1, 81, 3), 5);
  // Just below a power: one bracket fewer.
  EXPECT_EQ(HyperbandPruner::n_brackets(1, 242, 3), 5);
  EXPECT_EQ(HyperbandPruner::n_brackets(1, 999, 10), 3);
  EXPECT_EQ(HyperbandPruner::n_brackets(5, 5, 2), 1);
  EXPECT_EQ(HyperbandPruner::n_brackets(3, 10, 3), 2);     // 3, 9
  EXPECT_EQ(HyperbandPruner::n_brackets(2, 1000, 10), 3);  // 2, 20, 200
  // 2^62 <= INT64_MAX < 2^63.
  EXPECT_EQ(HyperbandPruner::n_brackets(1, std::numeric_limits<std::int64_t>::max(), 2), 63);
  EXPECT_EQ(HyperbandPruner(opts(1, 243, 3)).n_brackets(), 6);
}

TEST(HyperbandBracketsTest, AssignmentIsDeterministicAndFollowsBudgets) {
  HyperbandPruner a(opts(1, 81, 3));
  HyperbandPruner b(opts(1, 81, 3));
  HyperbandPruner salted(opts(1, 81, 3, 7));
  // Budgets for n = 5 brackets, eta = 3: ceil(5 * 3^s / (s + 1)) for
  // s = 4..0 = 81, 34, 15, 8, 5 (total 143).
  const std::vector<double> budget{81, 34, 15, 8, 5};
  std::map<std::int64_t, int> count;
  int differs = 0;
  const int n = 20000;
  for (int t = 0; t < n; ++t) {
    auto br = a.bracket_for_number(t);
    ASSERT_GE(br, 0);
    ASSERT_LT(br, 5);
    EXPECT_EQ(br, b.bracket_for_number(t));
    if (salted.bracket_for_number(t) != br) ++differs;
    ++count[br];
  }
  EXPECT_GT(differs, 0);
  for (std::size_t br = 0; br < 5; ++br) {
    double expected = n * budget[br] / 143.0;
    // Within 5 standard deviations of a binomial draw.
    double sd = std::sqrt(expected * (1 - budget[br] / 143.0));
    EXPECT_NEAR(count[static_cast<std::int64_t>(br)], expected, 5 * sd) << "bracket " << br;
  }
}

TEST(HyperbandBracketsTest, StoredBracketTakesPrecedence) {
  HyperbandPruner p(opts(1, 81, 3));
  FrozenTrial t;
  t.number = 0;
  std::int64_t hashed = p.bracket_for_number(0);
  t.system_attrs[kAttrHyperbandBracket] = (hashed + 1) % 5;
  EXPECT_EQ(p.bracket_of(t), (hashed + 1) % 5);
  t.system_attrs[kAttrHyperbandBracket] = 99;  // out of range: ignored
  EXPECT_EQ(p.bracket_of(t), hashed);
  t.system_attrs[kAttrHyperbandBracket] = "x";
  EXPECT_EQ(p.bracket_of(t), hashed);
}

class HyperbandPrunerTest : public ::testing::TestWithParam<StudyDirection> {
 protected:
  PruningHarness h{GetParam()};
  // Creates RUNNING trials until one lands in `bracket`; returns it.
  TrialPtr start_in(const HyperbandPruner& p, std::int64_t bracket) {
    for (int i = 0; i < 10000; ++i) {
      auto t = h.start();
      if (p.bracket_for_number(t->number) == bracket) return t;
      h.storage().set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, "filler");
    }
    ADD_FAILURE() << "no trial in bracket " << bracket;
    return nullptr;
  }
};

TEST_P(HyperbandPrunerTest, JudgesOnlyAgainstTheSameBracket) {
  // (1, 27, 3): 4 brackets; bracket 0 has rungs at 1, 3, 9; bracket 1 at 3, 9.
  HyperbandPruner p(opts(1, 27, 3));
  ASSERT_EQ(p.n_brackets(), 4);
  auto a = start_in(p, 0);
  EXPECT_FALSE(h.report(p, a, 1, 1.0));
  EXPECT_EQ(h.get(a)->system_attrs.value(kAttrHyperbandBracket, -1), 0);
  // A trial of bracket 1 is not judged at step 1, and at step 3 it is alone
  // in its bracket: promoted though a (bracket 0) is better.
  auto b = start_in(p, 1);
  EXPECT_FALSE(h.report(p, b, 1, 5.0));
  EXPECT_FALSE(h.report(p, a, 3, 1.0));
  EXPECT_FALSE(h.report(p, b, 3, 5.0));
  EXPECT_EQ(h.get(b)->system_attrs.value(kAttrHyperbandBracket, -1), 1);
  // A second trial of bracket 0 that is worse than a at step 1 is pruned.
  auto c = start_in(p, 0);
  EXPECT_TRUE(h.report(p, c, 1, 2.0));
  EXPECT_EQ(h.get(c)->system_attrs.value(kAttrPrunedAtRung, -1), 0);
}

TEST_P(HyperbandPrunerTest, RungsAtTheFullBudgetAreNotJudged) {
  // (1, 9, 3): 3 brackets. Bracket 2's first rung is 9 = max_resource: its
  // trials run to the end unjudged; bracket 0 judges at 1 and 3 but not 9.
  HyperbandPruner p(opts(1, 9, 3));
  ASSERT_EQ(p.n_brackets(), 3);
  auto best = start_in(p, 2);
  for (int s = 0; s <= 9; ++s) EXPECT_FALSE(h.report(p, best, s, 1.0));
  auto worst = start_in(p, 2);
  for (int s = 0; s <= 9; ++s) EXPECT_FALSE(h.report(p, worst, s, 100.0));
  EXPECT_FALSE(h.get(worst)->system_attrs.contains(std::string(kAttrCompletedRungPrefix) + "0"));
  auto x = start_in(p, 0);
  for (int s : {1, 3, 9}) EXPECT_FALSE(h.report(p, x, s, 1.0));
  auto y = start_in(p, 0);
  EXPECT_FALSE(h.report(p, y, 1, 0.5));
  EXPECT_FALSE(h.report(p, y, 3, 0.5));
  EXPECT_FALSE(h.report(p, y, 9, 50.0));  // worse than x, but at the full budget
  EXPECT_FALSE(h.get(y)->system_attrs.contains(std::string(kAttrCompletedRungPrefix) + "2"));
}

TEST_P(HyperbandPrunerTest, SamplerSeesOnlyTheTrialsOfTheSameBracket) {
  HyperbandPruner p(opts(1, 81, 3));
  for (int i = 0; i < 60; ++i) h.start();
  auto all = h.storage().get_all_trials(h.study_id());
  for (const auto& t : all) {
    auto view = p.trials_for_sampler(*t, all);
    std::int64_t mine = p.bracket_of(*t);
    std::size_t expected = 0;
    for (const auto& u : all)
      if (p.bracket_for_number(u->number) == mine) ++expected;
    EXPECT_EQ(view.size(), expected);
    bool self = false;
    for (const auto& u : view) {
      EXPECT_EQ(p.bracket_of(*u), mine);
      if (u->number == t->number) self = true;
    }
    EXPECT_TRUE(self);
  }
}

TEST_P(HyperbandPrunerTest, NanPrunes) {
  HyperbandPruner p(opts(1, 81, 3));
  auto t = h.start();
  EXPECT_TRUE(h.report(p, t, 0, std::numeric_limits<double>::quiet_NaN()));
}

INSTANTIATE_TEST_SUITE_P(Directions, HyperbandPrunerTest,
                         ::testing::Values(StudyDirection::kMinimize, StudyDirection::kMaximize),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(HyperbandPrunerOptionsTest, ValidateNamesTheField) {
  auto path_of = [](HyperbandPrunerOptions o) {
    try {
      HyperbandPruner p(o);
    } catch (const ConfigError& e) {
      return e.path();
    }
    return std::string("ok");
  };
  EXPECT_EQ(path_of(opts(0, 81, 3)), "pruner.min_resource");
  EXPECT_EQ(path_of(opts(10, 9, 3)), "pruner.max_resource");
  EXPECT_EQ(path_of(opts(1, 81, 1)), "pruner.reduction_factor");
  EXPECT_EQ(path_of(HyperbandPrunerOptions{}), "pruner.max_resource");
  EXPECT_EQ(path_of(opts(1, std::numeric_limits<std::int64_t>::max(), 2)), "ok");
}

}  // namespace
}  // namespace hps
