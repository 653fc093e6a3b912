// ThresholdPruner: absolute bounds, warm-up, interval and NaN, in both
// directions (bounds are absolute: a mirrored study mirrors the bounds).
#include "algorithms/threshold_pruner.h"

#include <gtest/gtest.h>

#include <limits>

#include "support/pruning_harness.h"

namespace hps {
namespace {

using testing::PruningHarness;

class ThresholdPrunerTest : public ::testing::TestWithParam<StudyDirection> {
 protected:
  PruningHarness h{GetParam()};
  // A bound on the "bad" side of the scripted (minimize) curves: an upper
  // bound when minimizing becomes a lower bound of the negated values.
  ThresholdPrunerOptions bad_side(double limit) {
    ThresholdPrunerOptions o;
    if (GetParam() == StudyDirection::kMinimize)
      o.upper = limit;
    else
      o.lower = -limit;
    return o;
  }
};

TEST_P(ThresholdPrunerTest, PrunesOutsideTheBound) {
  ThresholdPruner p(bad_side(2.0));
  auto t = h.start();
  EXPECT_FALSE(h.report(p, t, 0, 1.5));
  EXPECT_FALSE(h.report(p, t, 1, 2.0));  // on the bound: inside
  EXPECT_TRUE(h.report(p, t, 2, 2.1));
  // The bound does not depend on other trials or on the direction's "best".
  auto u = h.start();
  EXPECT_TRUE(h.report(p, u, 0, 3.0));
}

TEST_P(ThresholdPrunerTest, BothBounds) {
  ThresholdPrunerOptions o;
  o.lower = -1.0;
  o.upper = 1.0;
  ThresholdPruner p(o);
  auto t = h.start();
  EXPECT_FALSE(h.report(p, t, 0, 0.5));
  EXPECT_TRUE(h.report(p, t, 1, 1.5));
  auto u = h.start();
  EXPECT_TRUE(h.report(p, u, 0, -1.5));
}

TEST_P(ThresholdPrunerTest, WarmupAndInterval) {
  ThresholdPrunerOptions o = bad_side(2.0);
  o.n_warmup_steps = 2;
  o.interval_steps = 2;  // checked at the first report of [2,4), [4,6), ...
  ThresholdPruner p(o);
  auto t = h.start();
  EXPECT_FALSE(h.report(p, t, 0, 9.0));
  EXPECT_FALSE(h.report(p, t, 1, 9.0));
  EXPECT_TRUE(h.report(p, t, 2, 9.0));
  auto u = h.start();
  EXPECT_FALSE(h.report(p, u, 2, 1.0));
  EXPECT_FALSE(h.report(p, u, 3, 9.0));  // second report of [2,4)
  EXPECT_TRUE(h.report(p, u, 4, 9.0));
}

TEST_P(ThresholdPrunerTest, NanPrunesEvenDuringWarmup) {
  ThresholdPrunerOptions o = bad_side(2.0);
  o.n_warmup_steps = 100;
  ThresholdPruner p(o);
  auto t = h.start();
  EXPECT_TRUE(h.report(p, t, 0, std::numeric_limits<double>::quiet_NaN()));
}

TEST_P(ThresholdPrunerTest, InfinityIsOutsideAFiniteBound) {
  ThresholdPruner p(bad_side(1e300));
  auto t = h.start();
  EXPECT_TRUE(h.report(p, t, 0, std::numeric_limits<double>::infinity()));
}

INSTANTIATE_TEST_SUITE_P(Directions, ThresholdPrunerTest,
                         ::testing::Values(StudyDirection::kMinimize, StudyDirection::kMaximize),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(ThresholdPrunerOptionsTest, ValidateNamesTheField) {
  auto path_of = [](ThresholdPrunerOptions o) {
    try {
      ThresholdPruner p(o);
    } catch (const ConfigError& e) {
      return e.path();
    }
    return std::string("ok");
  };
  EXPECT_EQ(path_of({}), "pruner");
  ThresholdPrunerOptions o;
  o.lower = 2;
  o.upper = 1;
  EXPECT_EQ(path_of(o), "pruner.lower");
  o.upper = 3;
  EXPECT_EQ(path_of(o), "ok");
  o.n_warmup_steps = -1;
  EXPECT_EQ(path_of(o), "pruner.n_warmup_steps");
  o.n_warmup_steps = 0;
  o.interval_steps = 0;
  EXPECT_EQ(path_of(o), "pruner.interval_steps");
}

}  // namespace
}  // namespace hps
