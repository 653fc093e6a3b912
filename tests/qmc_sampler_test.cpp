// QmcSampler (algorithms/qmc_sampler.h): the sequences' textbook points,
// the stratification that makes them low-discrepancy (kept by scrambling),
// the sampler's mapping onto params, TPE's startup design and bad configs.
// The conformance suite (tests/sampler_conformance_test.cpp) runs the
// sampler too.
#include "algorithms/qmc_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "algorithms/factory.h"
#include "algorithms/tpe_sampler.h"
#include "search/study.h"

namespace hps {
namespace {

// Which of `cells` equal intervals of [0, 1) holds u.
// (A point on a cell's lower edge, such as Halton's 1/3 computed as
// 0.333...32, counts in that cell.)
std::size_t cell_of(double u, std::size_t cells) {
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
  return std::min(static_cast<std::size_t>(u * static_cast<double>(cells) + 1e-9), cells - 1);
}

TEST(QmcPoints, SobolStartsWithTheTextbookPoints) {
  QmcPoints sobol(QmcSequence::kSobol, /*scramble=*/false, 0);
  const std::vector<std::vector<double>> expected = {
      {0.0, 0.0, 0.0},       {0.5, 0.5, 0.5},       {0.75, 0.25, 0.25},    {0.25, 0.75, 0.75},
      {0.375, 0.375, 0.625}, {0.875, 0.875, 0.125}, {0.625, 0.125, 0.875}, {0.125, 0.625, 0.375},
  };
  for (std::size_t n = 0; n < expected.size(); ++n)
    EXPECT_EQ(sobol.point(n, 3), expected[n]) << "point " << n;
  // Asking out of order or for fewer dimensions gives the same coordinates.
  EXPECT_EQ(sobol.point(5, 1), std::vector<double>{0.875});
  EXPECT_EQ(sobol.point(2, 3), expected[2]);
}

TEST(QmcPoints, HaltonStartsWithTheRadicalInverses) {
  QmcPoints halton(QmcSequence::kHalton, /*scramble=*/false, 0);
  const std::vector<double> base2 = {0.0, 0.5, 0.25, 0.75, 0.125};
  const std::vector<double> base3 = {0.0, 1.0 / 3, 2.0 / 3, 1.0 / 9, 4.0 / 9};
  const std::vector<double> base5 = {0.0, 0.2, 0.4, 0.6, 0.8};
  for (std::size_t n = 0; n < base2.size(); ++n) {
    const std::vector<double> p = halton.point(n, 3);
    EXPECT_DOUBLE_EQ(p[0], base2[n]) << n;
    EXPECT_DOUBLE_EQ(p[1], base3[n]) << n;
    EXPECT_DOUBLE_EQ(p[2], base5[n]) << n;
  }
}

// The property that makes a Sobol sequence low-discrepancy: its first 2^m
// points put exactly one point in each of the 2^m intervals of every
// dimension, and (dimensions 1 and 2 form a (0, m, 2)-net) exactly one in
// each elementary box 2^-a x 2^-(m-a). Random linear scrambling with a
// digital shift keeps both (Owen 2003); independent random points do not.
void expect_sobol_net(QmcPoints& sobol, int m, std::size_t n_dims) {
  const std::size_t n = std::size_t{1} << m;
  std::vector<std::vector<double>> points;
  for (std::size_t i = 0; i < n; ++i) points.push_back(sobol.point(i, n_dims));
  for (std::size_t d = 0; d < n_dims; ++d) {
    std::set<std::size_t> cells;
    for (const auto& p : points) cells.insert(cell_of(p[d], n));
    EXPECT_EQ(cells.size(), n) << "dimension " << d;
  }
  for (int a = 0; a <= m; ++a) {
    std::set<std::pair<std::size_t, std::size_t>> boxes;
    for (const auto& p : points)
      boxes.insert({cell_of(p[0], std::size_t{1} << a), cell_of(p[1], std::size_t{1} << (m - a))});
    EXPECT_EQ(boxes.size(), n) << "boxes 2^-" << a << " x 2^-" << (m - a);
  }
}

TEST(QmcPoints, SobolPointsAreStratifiedPlainAndScrambled) {
  QmcPoints plain(QmcSequence::kSobol, false, 0);
  expect_sobol_net(plain, 8, 12);
  QmcPoints scrambled(QmcSequence::kSobol, true, 42);
  expect_sobol_net(scrambled, 8, 12);
  // Scrambled points do not sit on the textbook ones.
  EXPECT_NE(scrambled.point(0, 2), plain.point(0, 2));
}

TEST(QmcPoints, HaltonPointsAreStratifiedPlainAndScrambled) {
  for (bool scramble : {false, true}) {
    QmcPoints halton(QmcSequence::kHalton, scramble, 7);
    // The first b^k points of the dimension in base b fill each of the b^k
    // intervals once (base 2: 64 points; base 3: 81; base 5: 125).
    const std::vector<std::pair<std::size_t, std::size_t>> base_and_n = {
        {2, 64}, {3, 81}, {5, 125}};
    for (std::size_t d = 0; d < base_and_n.size(); ++d) {
      const auto [base, n] = base_and_n[d];
      std::set<std::size_t> cells;
      for (std::size_t i = 0; i < n; ++i) cells.insert(cell_of(halton.point(i, 3)[d], n));
      EXPECT_EQ(cells.size(), n) << "base " << base << (scramble ? " scrambled" : "");
    }
  }
}

TEST(QmcPoints, TheSeedChoosesTheScramble) {
  QmcPoints a(QmcSequence::kSobol, true, 1), b(QmcSequence::kSobol, true, 1),
      c(QmcSequence::kSobol, true, 2);
  EXPECT_EQ(a.point(9, 4), b.point(9, 4));
  EXPECT_NE(a.point(9, 4), c.point(9, 4));
  QmcPoints h1(QmcSequence::kHalton, true, 1), h2(QmcSequence::kHalton, true, 2);
  EXPECT_NE(h1.point(9, 4), h2.point(9, 4));
  // Unscrambled, the seed does not matter.
  QmcPoints p1(QmcSequence::kHalton, false, 1), p2(QmcSequence::kHalton, false, 2);
  EXPECT_EQ(p1.point(9, 4), p2.point(9, 4));
}

TEST(QmcPoints, SobolRefusesMoreDimensionsThanItsTable) {
  QmcPoints sobol(QmcSequence::kSobol, true, 1);
  EXPECT_EQ(sobol.max_dims(), 3667u);
  EXPECT_NO_THROW(sobol.point(3, 3667));
  try {
    sobol.point(3, 3668);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("halton"), std::string::npos) << e.what();
  }
  QmcPoints halton(QmcSequence::kHalton, true, 1);
  EXPECT_EQ(halton.point(3, 5000).size(), 5000u);
}

TEST(QmcSampler, MapsUnitCoordinatesOntoEveryKindOfParam) {
  const auto f = Distribution::make_float(-2.0, 6.0);
  EXPECT_DOUBLE_EQ(QmcSampler::from_unit(f, 0.0), -2.0);
  EXPECT_DOUBLE_EQ(QmcSampler::from_unit(f, 0.25), 0.0);
  const auto lg = Distribution::make_float(1e-4, 1.0, /*log=*/true);
  EXPECT_NEAR(QmcSampler::from_unit(lg, 0.5), 1e-2, 1e-12);
  // Ints: 8 values, each owning an eighth of [0, 1).
  const auto i = Distribution::make_int(1, 8);
  EXPECT_EQ(QmcSampler::from_unit(i, 0.0), 1.0);
  EXPECT_EQ(QmcSampler::from_unit(i, 0.124), 1.0);
  EXPECT_EQ(QmcSampler::from_unit(i, 0.126), 2.0);
  EXPECT_EQ(QmcSampler::from_unit(i, 0.999999), 8.0);
  const auto c = Distribution::make_categorical({"a", "b", "c"});
  EXPECT_EQ(QmcSampler::from_unit(c, 0.3), 0.0);
  EXPECT_EQ(QmcSampler::from_unit(c, 0.4), 1.0);
  EXPECT_EQ(QmcSampler::from_unit(c, 0.99), 2.0);
  // Out of range or NaN coordinates are clamped, never outside the domain.
  EXPECT_EQ(QmcSampler::from_unit(c, 1.0), 2.0);
  EXPECT_EQ(QmcSampler::from_unit(c, std::nan("")), 0.0);
  const auto huge = Distribution::make_float(-1e308, 1e308);
  EXPECT_TRUE(std::isfinite(QmcSampler::from_unit(huge, 0.75)));
}

Study qmc_study(const std::string& space_json, const Json& sampler) {
  return Study::create(
      std::make_shared<InMemoryStorage>(), "qmc", StudyDirection::kMinimize,
      StudyOptions{make_sampler(sampler), {}, SearchSpace::from_json(Json::parse(space_json))});
}

// 16 trials of an int param with 16 values: a Sobol design tries each value
// once (stratification); so does a Halton one in base 2.
TEST(QmcSampler, SixteenTrialsCoverSixteenValues) {
  for (const char* sequence : {"sobol", "halton"}) {
    Study study = qmc_study(R"({"k": {"type": "int", "low": 0, "high": 15},
                                "x": {"type": "float", "low": 0, "high": 1}})",
                            Json{{"type", "qmc"}, {"sequence", sequence}, {"seed", 3}});
    std::set<std::int64_t> ks;
    std::set<int> x_cells;
    for (int n = 0; n < 16; ++n) {
      Trial t = study.ask();
      ks.insert(t.param("k").get<std::int64_t>());
      x_cells.insert(static_cast<int>(t.param("x").get<double>() * 16));
      study.tell(t, 1.0);
    }
    EXPECT_EQ(ks.size(), 16u) << sequence;
    if (std::string(sequence) == "sobol") {
      EXPECT_EQ(x_cells.size(), 16u) << sequence;
    }
  }
}

TEST(QmcSampler, AFiniteSpaceIsCoveredWithoutRepeatsThenExhausted) {
  Study study = qmc_study(R"({"a": {"type": "categorical", "choices": ["x", "y", "z"]},
                              "b": {"type": "int", "low": 0, "high": 2}})",
                          Json{{"type", "qmc"}, {"seed", 5}});
  std::set<std::string> seen;
  for (int n = 0; n < 9; ++n) {
    Trial t = study.ask();
    EXPECT_TRUE(seen.insert(Json(t.params()).dump()).second) << Json(t.params()).dump();
    study.tell(t, 1.0);
  }
  EXPECT_THROW(study.ask(), SearchSpaceExhausted);
}

// Define-by-run: the first COMPLETE trial's params are the dimensions;
// trial 0 is random, then trial k is point k.
TEST(QmcSampler, TheSameSeedGivesTheSameTrialsAndDefineByRunWorks) {
  auto run = [](std::uint64_t seed) {
    Study study = Study::create(
        std::make_shared<InMemoryStorage>(), "dbr", StudyDirection::kMinimize,
        StudyOptions{make_sampler(Json{{"type", "qmc"}, {"seed", seed}}), {}, std::nullopt});
    std::vector<std::pair<double, double>> xy;
    for (int n = 0; n < 17; ++n) {
      Trial t = study.ask();
      const double y = t.suggest_float("y", 0.0, 1.0);  // asked first, still dimension 1
      const double x = t.suggest_float("x", 0.0, 1.0);
      xy.emplace_back(x, y);
      study.tell(t, x + y);
    }
    return xy;
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Trial k >= 1 is point k of the sequence scrambled with the seed, with
  // x its first dimension and y its second (name order).
  QmcPoints points(QmcSequence::kSobol, true, 1);
  for (std::size_t k = 1; k < a.size(); ++k) {
    const std::vector<double> p = points.point(k, 2);
    EXPECT_EQ(a[k].first, p[0]) << k;
    EXPECT_EQ(a[k].second, p[1]) << k;
  }
  // x and y are two dimensions of one point, not the same coordinate.
  EXPECT_NE(a[3].first, a[3].second);
}

// Without a seed, every process gets the same scramble: a study resumed by
// a new sampler (a new process) continues the sequence it started. (A
// random default seed gave a resumed study a second, unrelated sequence.)
TEST(QmcSampler, AnUnseededStudyContinuesItsSequenceWhenResumed) {
  const SearchSpace space = SearchSpace::from_json(Json::parse(
      R"({"x": {"type": "float", "low": 0, "high": 1}, "y": {"type": "float", "low": 0, "high": 1}})"));
  for (const Json& config :
       {Json{{"type", "qmc"}},
        Json{{"type", "tpe"}, {"startup", "sobol"}, {"n_startup_trials", 20}}}) {
    auto session = [&](const std::shared_ptr<Storage>& storage, int n) {
      Study study = Study::load_if_exists(storage, "resume", StudyDirection::kMinimize,
                                          StudyOptions{make_sampler(config), {}, space});
      for (int k = 0; k < n; ++k) {
        Trial t = study.ask();
        study.tell(t, t.param("x").get<double>());
      }
      std::vector<std::string> out;
      for (const auto& t : study.trials()) out.push_back(Json(t->params).dump());
      return out;
    };
    const auto straight = session(std::make_shared<InMemoryStorage>(), 16);
    auto storage = std::make_shared<InMemoryStorage>();
    session(storage, 8);
    EXPECT_EQ(session(storage, 8), straight) << config.dump();
  }
}

TEST(QmcSampler, BadConfigsNameTheField) {
  auto error_of = [](const Json& config) -> std::string {
    try {
      make_sampler(config);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of(Json{{"type", "qmc"}, {"sequence", "sobel"}}).find("sampler.sequence"),
            std::string::npos);
  EXPECT_NE(error_of(Json{{"type", "qmc"}, {"scramble", "yes"}}).find("sampler.scramble"),
            std::string::npos);
  EXPECT_NE(error_of(Json{{"type", "qmc"}, {"seed", -1}}).find("sampler.seed: must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of(Json{{"type", "qmc"}, {"sequnce", "sobol"}}).find("did you mean 'sequence'"),
            std::string::npos);
  EXPECT_NE(error_of(Json{{"type", "tpe"}, {"startup", "sobel"}}).find("sampler.startup"),
            std::string::npos);
  EXPECT_NE(error_of(Json{{"type", "qmcc"}}).find("did you mean 'qmc'"), std::string::npos);
}

TEST(QmcSampler, ASobolSpaceOfTooManyParamsIsRefusedBeforeAnythingIsStored) {
  Json space = Json::object();
  for (int k = 0; k < 3668; ++k)
    space["p" + std::to_string(k)] = Json{{"type", "float"}, {"low", 0}, {"high", 1}};
  auto storage = std::make_shared<InMemoryStorage>();
  EXPECT_THROW(
      Study::create(
          storage, "wide", StudyDirection::kMinimize,
          StudyOptions{make_sampler(Json{{"type", "qmc"}}), {}, SearchSpace::from_json(space)}),
      ConfigError);
  EXPECT_TRUE(storage->list_studies().empty());
  EXPECT_NO_THROW(
      Study::create(storage, "wide", StudyDirection::kMinimize,
                    StudyOptions{make_sampler(Json{{"type", "qmc"}, {"sequence", "halton"}}),
                                 {},
                                 SearchSpace::from_json(space)}));
}

// TPE with "startup": "sobol": its startup trials are the Sobol design's
// points (16 values of k in 16 trials), then TPE models.
TEST(QmcSampler, TpeStartupDesign) {
  TpeOptions o = TpeOptions::from_json(
      Json{{"type", "tpe"}, {"seed", 9}, {"n_startup_trials", 16}, {"startup", "sobol"}});
  ASSERT_TRUE(o.startup);
  EXPECT_EQ(o.to_json().at("startup"), "sobol");
  EXPECT_EQ(TpeOptions{}.to_json().at("startup"), "random");
  Study study = Study::create(std::make_shared<InMemoryStorage>(), "tpe", StudyDirection::kMinimize,
                              StudyOptions{std::make_shared<TpeSampler>(o),
                                           {},
                                           SearchSpace::from_json(Json::parse(
                                               R"({"k": {"type": "int", "low": 0, "high": 15},
                           "x": {"type": "float", "low": -1, "high": 1}})"))});
  std::set<std::int64_t> ks;
  for (int n = 0; n < 24; ++n) {
    Trial t = study.ask();
    const auto k = t.param("k").get<std::int64_t>();
    if (n < 16) ks.insert(k);
    study.tell(t, std::abs(static_cast<double>(k) - 3.0) + std::abs(t.param("x").get<double>()));
  }
  EXPECT_EQ(ks.size(), 16u);
}

}  // namespace
}  // namespace hps
