// Tests of TPE with warm-start trials (algorithms/tpe_model.h, the
// task-similarity mixture of Watanabe et al. 2023; TpeOptions::
// warm_start_weighting): an earlier study's good region drives the search
// while nothing new is known, fades when the new trials show the optimum
// moved, and "none" (or a study without warm-start trials) is modelled as
// before.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "algorithms/factory.h"
#include "algorithms/tpe_sampler.h"
#include "search/search_space.h"
#include "search/trial.h"

namespace hps {
namespace {

std::string x_name(std::size_t i) {
  std::string s = "x";
  s += std::to_string(i);
  return s;
}

SearchSpace unit_space(std::size_t n) {
  SearchSpace s;
  for (std::size_t i = 0; i < n; ++i) s.add(x_name(i), Distribution::make_float(0, 1));
  return s;
}

// sum_i (x_i - centre)^2
double bowl(const Params& p, double centre) {
  double s = 0;
  for (const auto& [name, v] : p) s += (v.get<double>() - centre) * (v.get<double>() - centre);
  return s;
}

// A hand-built history: warm-start copies (system attr warm_start, as
// search/warm_start.cpp writes it) and the new study's own trials.
class WarmHistory {
 public:
  explicit WarmHistory(const SearchSpace& space) : space_(space) {}

  // n COMPLETE trials at uniform random points, valued by bowl(centre);
  // `source`: the earlier study they are copied from ("" = the study's own).
  void add_random(std::size_t n, double centre, std::uint64_t seed, const std::string& source,
                  bool mark = true) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (std::size_t k = 0; k < n; ++k) {
      auto t = std::make_shared<FrozenTrial>();
      t->number = next_++;
      t->trial_id = t->number;
      t->state = TrialState::kComplete;
      for (const auto& spec : space_.params()) {
        t->params[spec.name] = u(rng);
        t->distributions.emplace(spec.name, spec.distribution);
      }
      t->value = bowl(t->params, centre);
      if (!source.empty() && mark)
        t->system_attrs[kAttrWarmStart] =
            Json{{"storage", "old.db"}, {"study", source}, {"trial", k}};
      trials_.push_back(t);
    }
  }

  // The suggestion for a new trial numbered `number`.
  Params suggest(Sampler& s, std::int64_t number) const {
    FrozenTrial current;
    current.number = number;
    current.trial_id = number;
    current.state = TrialState::kRunning;
    std::vector<TrialPtr> all = trials_;
    all.push_back(std::make_shared<FrozenTrial>(current));
    SamplingContext ctx{StudyDirection::kMinimize, all, current, 1};
    Params p;
    s.sample(ctx, space_, p);
    return p;
  }

  // Mean Euclidean distance of `count` suggestions (trial numbers from
  // 1000 on, so each has its own random stream) from (centre, ..., centre).
  double mean_distance(Sampler& s, double centre, int count = 20) const {
    double sum = 0;
    for (int k = 0; k < count; ++k) sum += std::sqrt(bowl(suggest(s, 1000 + k), centre));
    return sum / count;
  }

 private:
  const SearchSpace& space_;
  std::vector<TrialPtr> trials_;
  std::int64_t next_ = 0;
};

std::shared_ptr<Sampler> tpe(bool multivariate, const std::string& weighting,
                             std::uint64_t seed = 3) {
  return make_sampler(Json{{"type", "tpe"},
                           {"seed", seed},
                           {"multivariate", multivariate},
                           {"warm_start_weighting", weighting}});
}

class TpeWarmStartTest : public ::testing::TestWithParam<bool> {};  // multivariate?

TEST_P(TpeWarmStartTest, WithoutNewTrialsSuggestionsFollowTheEarlierGoodRegion) {
  const bool multi = GetParam();
  SearchSpace space = unit_space(2);
  WarmHistory h(space);
  h.add_random(50, 0.2, 11, "old");  // earlier study: optimum at (0.2, 0.2)
  auto sampler = tpe(multi, "similarity");
  // Random points of the unit square lie 0.57 from (0.2, 0.2) on average.
  EXPECT_LT(h.mean_distance(*sampler, 0.2), 0.15);
}

TEST_P(TpeWarmStartTest, NewTrialsShowingTheOptimumMovedWinOverTheEarlierStudy) {
  const bool multi = GetParam();
  SearchSpace space = unit_space(2);
  WarmHistory h(space);
  h.add_random(50, 0.2, 11, "old");  // earlier study: optimum at (0.2, 0.2)
  h.add_random(20, 0.8, 12, "");     // the new study: optimum at (0.8, 0.8)
  auto similarity = tpe(multi, "similarity");
  auto none = tpe(multi, "none");
  const double d_similarity = h.mean_distance(*similarity, 0.8);
  const double d_none = h.mean_distance(*none, 0.8);
  // Ranked together, the earlier study's low values keep its good points in
  // the below group and the suggestions near (0.2, 0.2) ...
  EXPECT_LT(h.mean_distance(*none, 0.2), 0.2);
  // ... weighted by similarity, its region fades and the new one wins.
  EXPECT_LT(d_similarity, 0.3);  // uniform points: about 0.45
  EXPECT_LT(d_similarity, 0.5 * d_none);
}

TEST_P(TpeWarmStartTest, NoneModelsWarmStartTrialsAsOrdinaryTrials) {
  const bool multi = GetParam();
  SearchSpace space = unit_space(3);
  WarmHistory marked(space), plain(space);
  marked.add_random(30, 0.2, 21, "old");
  marked.add_random(8, 0.7, 22, "");
  plain.add_random(30, 0.2, 21, "old", /*mark=*/false);
  plain.add_random(8, 0.7, 22, "");
  auto none = tpe(multi, "none");
  auto similarity = tpe(multi, "similarity");
  for (int k = 0; k < 5; ++k) {
    // "none" on warm-start trials == either mode on the same trials unmarked.
    const Params p = marked.suggest(*none, 100 + k);
    EXPECT_EQ(p, plain.suggest(*none, 100 + k));
    EXPECT_EQ(p, plain.suggest(*similarity, 100 + k));
  }
}

TEST_P(TpeWarmStartTest, EachEarlierStudyIsATaskOfItsOwn) {
  const bool multi = GetParam();
  SearchSpace space = unit_space(2);
  WarmHistory h(space);
  // Two earlier studies, one like the new function (0.8) and one not (0.2);
  // the unlike one's values are lower, which ranked together would win.
  h.add_random(40, 0.2, 31, "unlike");
  h.add_random(40, 0.8, 32, "like");
  h.add_random(15, 0.8, 33, "");
  auto similarity = tpe(multi, "similarity");
  EXPECT_LT(h.mean_distance(*similarity, 0.8), 0.2);
}

INSTANTIATE_TEST_SUITE_P(Modes, TpeWarmStartTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "Multivariate" : "Univariate");
                         });

TEST(TpeWarmStartOptionsTest, WarmStartWeightingIsReadAndCheckedByName) {
  EXPECT_EQ(TpeOptions().warm_start_weighting, TpeWarmStartWeighting::kSimilarity);
  TpeOptions o = TpeOptions::from_json({{"type", "tpe"}, {"warm_start_weighting", "none"}});
  EXPECT_EQ(o.warm_start_weighting, TpeWarmStartWeighting::kNone);
  EXPECT_EQ(o.to_json()["warm_start_weighting"], "none");
  try {
    make_sampler(Json{{"type", "tpe"}, {"warm_start_weighting", "mean"}});
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "sampler.warm_start_weighting");
    EXPECT_NE(std::string(e.what()).find("'similarity', 'none', got 'mean'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hps
