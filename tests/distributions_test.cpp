// Tests of search/distributions.h: construction rules, the step grid,
// to_external()/contains(), categorical types, JSON round trips and error
// messages.
#include "search/distributions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "search/errors.h"

namespace hps {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The ConfigError thrown by `fn`, or a test failure if none is thrown.
template <typename F>
ConfigError config_error(F&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ConfigError, got another exception: " << e.what();
    return ConfigError("", "");
  }
  ADD_FAILURE() << "expected ConfigError, nothing was thrown";
  return ConfigError("", "");
}

// Every double the tests feed to to_external(): far outside, special, huge,
// tiny, and random bit patterns.
std::vector<double> probe_values() {
  std::vector<double> v = {0.0,
                           -0.0,
                           1.0,
                           -1.0,
                           0.5,
                           1e-300,
                           -1e-300,
                           std::numeric_limits<double>::denorm_min(),
                           std::numeric_limits<double>::min(),
                           std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::lowest(),
                           1e18,
                           -1e18,
                           9007199254740993.0,
                           kInf,
                           -kInf,
                           kNaN,
                           -kNaN};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    v.push_back(d);
  }
  std::uniform_real_distribution<double> u(-2000, 2000);
  for (int i = 0; i < 2000; ++i) v.push_back(u(rng));
  return v;
}

// Checks that every probe maps to a contained value that is never outside
// [low, high] (numeric kinds).
void expect_to_external_contained(const Distribution& d) {
  for (double x : probe_values()) {
    Json v = d.to_external(x);
    ASSERT_TRUE(d.contains(v)) << d.to_json().dump() << " to_external(" << x << ") = " << v.dump();
    if (d.is_numeric()) {
      double y = v.get<double>();
      ASSERT_GE(y, d.low()) << d.to_json().dump() << " x = " << x;
      ASSERT_LE(y, d.high()) << d.to_json().dump() << " x = " << x;
      ASSERT_LE(y, d.grid_high()) << d.to_json().dump() << " x = " << x;
      if (d.kind() == DistributionKind::kInt) {
        ASSERT_TRUE(v.is_number_integer()) << v.dump();
      } else {
        ASSERT_TRUE(v.is_number_float()) << v.dump();
      }
    }
  }
}

// ------------------------------------------------------------ float rules

TEST(DistributionsTest, FloatNeedsLowAtMostHigh) {
  auto e = config_error([] { Distribution::make_float(2, 1, false, std::nullopt, "space.lr"); });
  EXPECT_EQ(e.path(), "space.lr");
  EXPECT_NE(std::string(e.what()).find("low <= high"), std::string::npos) << e.what();
  EXPECT_NO_THROW(Distribution::make_float(1, 1));
  EXPECT_NO_THROW(Distribution::make_float(-1, 1));
}

TEST(DistributionsTest, FloatLogNeedsPositiveLow) {
  auto e = config_error([] { Distribution::make_float(0, 1, true, std::nullopt, "space.lr"); });
  EXPECT_STREQ(e.what(), "space.lr.low: log scale needs low > 0, got low = 0");
  EXPECT_EQ(e.path(), "space.lr.low");
  auto neg = config_error([] { Distribution::make_float(-1, 1, true, std::nullopt, "space.lr"); });
  EXPECT_STREQ(neg.what(), "space.lr.low: log scale needs low > 0, got low = -1");
  EXPECT_NO_THROW(Distribution::make_float(1e-300, 1, true));
}

TEST(DistributionsTest, FloatLogAndStepCannotBeCombined) {
  auto e = config_error([] { Distribution::make_float(1, 10, true, 1.0, "space.x"); });
  EXPECT_EQ(e.path(), "space.x.step");
  EXPECT_NE(std::string(e.what()).find("log"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("step"), std::string::npos) << e.what();
}

TEST(DistributionsTest, FloatStepMustBePositiveAndFinite) {
  for (double step : {0.0, -0.5, kInf, kNaN}) {
    auto e = config_error([&] { Distribution::make_float(0, 1, false, step, "space.x"); });
    EXPECT_EQ(e.path(), "space.x.step") << step;
    EXPECT_NE(std::string(e.what()).find("> 0"), std::string::npos) << e.what();
  }
}

TEST(DistributionsTest, FloatBoundsMustBeFinite) {
  EXPECT_EQ(
      config_error([] { Distribution::make_float(-kInf, 1, false, std::nullopt, "p"); }).path(),
      "p.low");
  EXPECT_EQ(
      config_error([] { Distribution::make_float(0, kInf, false, std::nullopt, "p"); }).path(),
      "p.high");
  EXPECT_EQ(
      config_error([] { Distribution::make_float(kNaN, 1, false, std::nullopt, "p"); }).path(),
      "p.low");
}

TEST(DistributionsTest, FloatStepThatDoesNotDivideTheRange) {
  auto d = Distribution::make_float(64, 1312, false, 160.0);
  EXPECT_DOUBLE_EQ(d.grid_high(), 1184);
  EXPECT_EQ(d.high(), 1312);
  EXPECT_EQ(d.cardinality(), 8u);  // 64, 224, ..., 1184
  EXPECT_TRUE(d.contains(1184.0));
  EXPECT_FALSE(d.contains(1312.0));  // in bounds but not on the grid
  EXPECT_FALSE(d.contains(1344.0));
  EXPECT_EQ(d.to_external(1312).get<double>(), 1184);
  EXPECT_EQ(d.to_external(1e9).get<double>(), 1184);
  EXPECT_EQ(d.to_external(1270).get<double>(), 1184);
  EXPECT_EQ(d.to_external(150).get<double>(), 224);
  EXPECT_EQ(d.to_external(-1e9).get<double>(), 64);
}

TEST(DistributionsTest, FloatStepThatDividesTheRangeKeepsHigh) {
  auto d = Distribution::make_float(0, 1, false, 0.25);
  EXPECT_EQ(d.grid_high(), 1.0);
  EXPECT_EQ(d.cardinality(), 5u);
  // 0.3 / 0.1 is 2.9999999999999996 in doubles: the last point must still count.
  auto tenth = Distribution::make_float(0, 0.3, false, 0.1);
  EXPECT_EQ(tenth.cardinality(), 4u);
  EXPECT_TRUE(tenth.contains(tenth.to_external(0.3)));
  EXPECT_NEAR(tenth.to_external(0.3).get<double>(), 0.3, 1e-12);
}

TEST(DistributionsTest, FloatGridEndingAtZero) {
  // -0.3 + 3 * 0.1 is 5.55e-17 in doubles: 0 is still the last grid point.
  auto d = Distribution::make_float(-0.3, 0, false, 0.1);
  EXPECT_EQ(d.grid_high(), 0.0);
  EXPECT_EQ(d.cardinality(), 4u);
  EXPECT_TRUE(d.contains(0.0));
  EXPECT_EQ(d.to_external(0.0).get<double>(), 0.0);
  EXPECT_EQ(d.to_external(1.0).get<double>(), 0.0);
}

TEST(DistributionsTest, FloatStepTooSmallForTheRange) {
  // More grid points than doubles can index exactly.
  auto e = config_error([] { Distribution::make_float(-1e308, 1e308, false, 1e-300, "space.x"); });
  EXPECT_EQ(e.path(), "space.x.step");
  EXPECT_NE(std::string(e.what()).find("2^53"), std::string::npos) << e.what();
  EXPECT_THROW(Distribution::make_float(0, 1e20, false, 1.0), ConfigError);
  auto fine = Distribution::make_float(0, 1e15, false, 1.0);
  EXPECT_EQ(fine.cardinality(), 1000000000000001u);
  EXPECT_EQ(fine.grid_high(), 1e15);
}

TEST(DistributionsTest, FloatCardinalityWithATinyStepNearALargeValue) {
  // The tolerance for floating error must stay far below one step.
  auto d = Distribution::make_float(1e6, 1e6 + 1, false, 1e-7);
  EXPECT_LE(d.grid_high(), 1e6 + 1);
  EXPECT_LE(d.cardinality(), 10000001u);
  EXPECT_GE(d.cardinality(), 9999999u);
}

TEST(DistributionsTest, QuantizedFloatNeverLeavesTheRange) {
  auto d = Distribution::make_float(0.1, 1.0, false, 0.3);
  EXPECT_EQ(d.cardinality(), 4u);  // 0.1, 0.4, 0.7, 1.0
  std::set<double> seen;
  for (double x = -5; x <= 5; x += 0.001) {
    double v = d.to_external(x).get<double>();
    EXPECT_GE(v, 0.1);
    EXPECT_LE(v, 1.0);
    EXPECT_NE(v, 0.0);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(*seen.begin(), 0.1);
  expect_to_external_contained(d);
}

TEST(DistributionsTest, LogFloatNeverGivesZeroOrLeavesTheRange) {
  auto d = Distribution::make_float(1e-5, 1, true);
  for (double x : {0.0, -0.0, -1.0, 1e-300, 1e-6, kNaN, -kInf})
    EXPECT_EQ(d.to_external(x).get<double>(), 1e-5) << x;
  EXPECT_EQ(d.to_external(kInf).get<double>(), 1.0);
  EXPECT_EQ(d.to_external(1e-3).get<double>(), 1e-3);
  expect_to_external_contained(d);
}

TEST(DistributionsTest, SingleValueFloat) {
  auto d = Distribution::make_float(0.5, 0.5);
  EXPECT_TRUE(d.single_value());
  EXPECT_EQ(d.cardinality(), 1u);
  for (double x : {-1e300, 0.0, 0.5, 7.0, kNaN, kInf})
    EXPECT_EQ(d.to_external(x).get<double>(), 0.5);
  EXPECT_TRUE(d.contains(0.5));
  EXPECT_FALSE(d.contains(0.50000000000001));
  auto stepped = Distribution::make_float(3, 3, false, 2.0);
  EXPECT_TRUE(stepped.single_value());
  EXPECT_EQ(stepped.to_external(100).get<double>(), 3);
  auto log = Distribution::make_float(2, 2, true);
  EXPECT_TRUE(log.single_value());
  EXPECT_FALSE(Distribution::make_float(0, 1).single_value());
  EXPECT_EQ(Distribution::make_float(0, 1).cardinality(), 0u);
}

TEST(DistributionsTest, FloatContains) {
  auto d = Distribution::make_float(-1, 1);
  EXPECT_TRUE(d.contains(0.0));
  EXPECT_TRUE(d.contains(-1.0));
  EXPECT_TRUE(d.contains(1.0));
  EXPECT_TRUE(d.contains(0));  // a JSON integer is a number too
  EXPECT_FALSE(d.contains(1.0000001));
  EXPECT_FALSE(d.contains(Json("0.5")));
  EXPECT_FALSE(d.contains(Json(true)));
  EXPECT_FALSE(d.contains(Json()));
  EXPECT_FALSE(d.contains(Json::array({0.5})));
  EXPECT_FALSE(d.contains(kNaN));
  EXPECT_FALSE(Distribution::make_float(-1e308, 1e308).contains(kInf));
}

TEST(DistributionsTest, FloatToExternalIsAlwaysContained) {
  for (const auto& d :
       {Distribution::make_float(-1, 1), Distribution::make_float(0, 1, false, 0.1),
        Distribution::make_float(64, 1312, false, 160.0), Distribution::make_float(1e-8, 1e8, true),
        Distribution::make_float(-1e308, 1e308), Distribution::make_float(5, 5),
        Distribution::make_float(-3.5, 2.25, false, 0.7),
        Distribution::make_float(1e6, 1e6 + 1, false, 1e-3)}) {
    expect_to_external_contained(d);
  }
}

// ------------------------------------------------------------ int rules

TEST(DistributionsTest, IntRules) {
  EXPECT_EQ(config_error([] { Distribution::make_int(5, 4, false, 1, "space.n"); }).path(),
            "space.n");
  auto log0 = config_error([] { Distribution::make_int(0, 4, true, 1, "space.n"); });
  EXPECT_STREQ(log0.what(), "space.n.low: log scale needs low > 0, got low = 0");
  EXPECT_EQ(config_error([] { Distribution::make_int(1, 9, true, 2, "space.n"); }).path(),
            "space.n.step");
  EXPECT_EQ(config_error([] { Distribution::make_int(1, 9, false, 0, "space.n"); }).path(),
            "space.n.step");
  EXPECT_EQ(config_error([] { Distribution::make_int(1, 9, false, -2, "space.n"); }).path(),
            "space.n.step");
  const std::int64_t big = (std::int64_t{1} << 53) + 1;
  EXPECT_EQ(config_error([&] { Distribution::make_int(0, big, false, 1, "space.n"); }).path(),
            "space.n.high");
  EXPECT_EQ(config_error([&] { Distribution::make_int(-big, 0, false, 1, "space.n"); }).path(),
            "space.n.low");
  EXPECT_NO_THROW(Distribution::make_int(1, 1, true));
}

TEST(DistributionsTest, IntStepGivesOddValuesOnly) {
  auto d = Distribution::make_int(1, 9, false, 2);
  EXPECT_EQ(d.cardinality(), 5u);
  EXPECT_EQ(d.grid_high(), 9);
  std::set<std::int64_t> seen;
  for (double x = -20; x <= 20; x += 0.01) {
    Json v = d.to_external(x);
    ASSERT_TRUE(v.is_number_integer());
    std::int64_t i = v.get<std::int64_t>();
    EXPECT_EQ(i % 2, 1) << i;
    seen.insert(i);
  }
  EXPECT_EQ(seen, (std::set<std::int64_t>{1, 3, 5, 7, 9}));
  EXPECT_FALSE(d.contains(4));
  EXPECT_TRUE(d.contains(7));
}

TEST(DistributionsTest, IntStepThatDoesNotDivideTheRange) {
  auto d = Distribution::make_int(0, 10, false, 3);
  EXPECT_EQ(d.grid_high(), 9);
  EXPECT_EQ(d.cardinality(), 4u);
  EXPECT_EQ(d.to_external(10).get<std::int64_t>(), 9);
  EXPECT_FALSE(d.contains(10));
  EXPECT_TRUE(d.contains(9));
  auto neg = Distribution::make_int(-7, 7, false, 5);  // -7, -2, 3
  EXPECT_EQ(neg.grid_high(), 3);
  EXPECT_EQ(neg.to_external(100).get<std::int64_t>(), 3);
  EXPECT_EQ(neg.to_external(0).get<std::int64_t>(), -2);
}

TEST(DistributionsTest, IntContainsNeedsWholeNumbers) {
  auto d = Distribution::make_int(0, 10);
  EXPECT_TRUE(d.contains(3));
  EXPECT_TRUE(d.contains(Json(std::uint64_t{3})));
  EXPECT_FALSE(d.contains(3.5));
  EXPECT_FALSE(d.contains(11));
  EXPECT_FALSE(d.contains(-1));
  EXPECT_FALSE(d.contains(Json("3")));
  EXPECT_FALSE(d.contains(Json(true)));
  EXPECT_FALSE(d.contains(Json()));
}

TEST(DistributionsTest, IntCardinalityIsExactForHugeRanges) {
  const std::int64_t p53 = std::int64_t{1} << 53;
  EXPECT_EQ(Distribution::make_int(0, 1000000000000000).cardinality(), 1000000000000001u);
  EXPECT_EQ(Distribution::make_int(-p53, p53).cardinality(), (std::uint64_t{1} << 54) + 1);
  EXPECT_EQ(Distribution::make_int(-p53, p53, false, 3).cardinality(),
            static_cast<std::uint64_t>((2 * p53) / 3 + 1));
  EXPECT_EQ(Distribution::make_int(1, p53, true).cardinality(), static_cast<std::uint64_t>(p53));
}

TEST(DistributionsTest, LogIntNeverBelowLow) {
  auto d = Distribution::make_int(1, 1000, true);
  for (double x : {0.0, -1.0, 0.4, 0.6, kNaN})
    EXPECT_EQ(d.to_external(x).get<std::int64_t>(), 1) << x;
  EXPECT_EQ(d.to_external(1e12).get<std::int64_t>(), 1000);
}

TEST(DistributionsTest, IntToExternalIsAlwaysContained) {
  const std::int64_t p53 = std::int64_t{1} << 53;
  for (const auto& d :
       {Distribution::make_int(0, 10), Distribution::make_int(1, 9, false, 2),
        Distribution::make_int(-7, 7, false, 5), Distribution::make_int(1, 1000, true),
        Distribution::make_int(4, 4), Distribution::make_int(-p53, p53),
        Distribution::make_int(-p53, p53, false, 7)}) {
    expect_to_external_contained(d);
  }
}

TEST(DistributionsTest, SingleValueInt) {
  auto d = Distribution::make_int(7, 7);
  EXPECT_TRUE(d.single_value());
  EXPECT_EQ(d.to_external(-100).get<std::int64_t>(), 7);
  EXPECT_EQ(Distribution::make_int(3, 4, false, 5).cardinality(), 1u);  // only 3
  EXPECT_TRUE(Distribution::make_int(3, 4, false, 5).single_value());
}

// ------------------------------------------------------------ categorical / ordinal

TEST(DistributionsTest, CategoricalKeepsJsonTypes) {
  std::vector<Json> choices = {Json(), Json(true), Json(1), Json(1.0), Json("1"), Json("relu")};
  auto d = Distribution::make_categorical(choices);
  EXPECT_EQ(d.cardinality(), 6u);
  for (std::size_t i = 0; i < choices.size(); ++i) {
    Json v = d.to_external(static_cast<double>(i));
    EXPECT_TRUE(same_json_scalar(v, choices[i])) << i << ": " << v.dump();
    EXPECT_EQ(v.type(), choices[i].type()) << i;
    EXPECT_EQ(d.index_of(choices[i]), static_cast<int>(i));
    EXPECT_EQ(d.to_internal(choices[i]), static_cast<double>(i));
  }
  EXPECT_EQ(d.index_of(Json(false)), -1);
  EXPECT_EQ(d.index_of(Json(2)), -1);
  EXPECT_EQ(d.index_of(Json("null")), -1);
  EXPECT_FALSE(d.contains(Json(false)));
  EXPECT_FALSE(d.contains(Json(0)));
  EXPECT_FALSE(d.contains(Json::array()));
  // Integers parsed from text are unsigned in nlohmann: still the same choice.
  EXPECT_EQ(d.index_of(Json::parse("1")), 2);
  EXPECT_EQ(d.index_of(Json::parse("1.0")), 3);
}

TEST(DistributionsTest, CategoricalOnlyNullAndOne) {
  // null is a real choice, distinct from the absence of a value.
  auto d = Distribution::make_categorical({Json(), Json(1)});
  EXPECT_TRUE(d.to_external(0).is_null());
  EXPECT_TRUE(d.contains(Json()));
  EXPECT_TRUE(d.to_external(1).is_number_integer());
}

TEST(DistributionsTest, SameJsonScalar) {
  EXPECT_TRUE(same_json_scalar(Json(), Json()));
  EXPECT_FALSE(same_json_scalar(Json(), Json(false)));
  EXPECT_FALSE(same_json_scalar(Json(0), Json(false)));
  EXPECT_FALSE(same_json_scalar(Json(1), Json(true)));
  EXPECT_FALSE(same_json_scalar(Json(1), Json(1.0)));
  EXPECT_FALSE(same_json_scalar(Json(1), Json("1")));
  EXPECT_TRUE(same_json_scalar(Json(1), Json(std::uint64_t{1})));
  EXPECT_FALSE(same_json_scalar(Json(-1), Json(std::uint64_t{18446744073709551615u})));
  EXPECT_TRUE(same_json_scalar(Json("relu"), Json("relu")));
  EXPECT_FALSE(same_json_scalar(Json("relu"), Json("Relu")));
  EXPECT_TRUE(same_json_scalar(Json(0.5), Json(0.5)));
}

TEST(DistributionsTest, ChoicesMustBeNonEmptyScalarsWithoutDuplicates) {
  auto empty = config_error([] { Distribution::make_categorical({}, "space.act"); });
  EXPECT_EQ(empty.path(), "space.act.choices");
  EXPECT_NE(std::string(empty.what()).find("empty"), std::string::npos);
  auto dup = config_error([] { Distribution::make_categorical({"a", "b", "a"}, "space.act"); });
  EXPECT_EQ(dup.path(), "space.act.choices");
  EXPECT_NE(std::string(dup.what()).find("duplicate"), std::string::npos);
  EXPECT_NE(std::string(dup.what()).find("\"a\""), std::string::npos);
  auto dup_null = config_error([] { Distribution::make_categorical({Json(), Json()}, "c"); });
  EXPECT_NE(std::string(dup_null.what()).find("duplicate"), std::string::npos);
  EXPECT_THROW(Distribution::make_categorical({Json(1), Json::parse("1")}, "c"), ConfigError);
  auto nested = config_error([] {
    Distribution::make_categorical({Json::array({1, 2})}, "space.x");
  });
  EXPECT_NE(std::string(nested.what()).find("scalar"), std::string::npos);
  EXPECT_THROW(Distribution::make_categorical({Json::object()}, "c"), ConfigError);
  EXPECT_EQ(config_error([] { Distribution::make_ordinal({}, "space.bs"); }).path(),
            "space.bs.values");
  EXPECT_EQ(config_error([] {
              Distribution::make_ordinal({16, 32, 16}, "space.bs");
            }).path(),
            "space.bs.values");
  // 1, 1.0, "1" and true are four different choices.
  EXPECT_NO_THROW(Distribution::make_categorical({Json(1), Json(1.0), Json("1"), Json(true)}));
}

TEST(DistributionsTest, SingleChoice) {
  auto d = Distribution::make_categorical({"only"});
  EXPECT_TRUE(d.single_value());
  EXPECT_EQ(d.to_external(5), "only");
  EXPECT_EQ(d.to_external(kNaN), "only");
}

TEST(DistributionsTest, OrdinalInternalIsTheIndex) {
  auto d = Distribution::make_ordinal({16, 32, 64, 128});
  EXPECT_EQ(d.kind(), DistributionKind::kOrdinal);
  EXPECT_TRUE(d.is_indexed());
  EXPECT_EQ(d.to_internal(Json(64)), 2.0);
  EXPECT_EQ(d.to_external(2), 64);
  EXPECT_EQ(d.to_external(2.4), 64);
  EXPECT_EQ(d.to_external(2.6), 128);
  EXPECT_EQ(d.to_external(-3), 16);
  EXPECT_EQ(d.to_external(1e300), 128);
  EXPECT_THROW(d.to_internal(Json(48)), Error);
  EXPECT_FALSE(d.contains(Json(64.0)));
}

TEST(DistributionsTest, IndexedToExternalIsAlwaysContained) {
  expect_to_external_contained(Distribution::make_categorical({Json(), true, 1, 1.0, "1", "relu"}));
  expect_to_external_contained(Distribution::make_ordinal({16, 32, 64}));
  expect_to_external_contained(Distribution::make_ordinal({"x"}));
}

TEST(DistributionsTest, ToInternalRejectsValuesOutside) {
  EXPECT_THROW(Distribution::make_float(0, 1).to_internal(2.0), Error);
  EXPECT_THROW(Distribution::make_int(0, 1).to_internal(0.5), Error);
  EXPECT_THROW(Distribution::make_categorical({"a"}).to_internal("b"), Error);
  EXPECT_EQ(Distribution::make_float(0, 1).to_internal(0.25), 0.25);
  EXPECT_EQ(Distribution::make_int(0, 9).to_internal(4), 4.0);
}

// ------------------------------------------------------------ JSON

TEST(DistributionsTest, JsonRoundTrips) {
  std::vector<Distribution> all = {
      Distribution::make_float(-1.5, 2.25),
      Distribution::make_float(0.1, 0.30000000000000004),
      Distribution::make_float(1e-5, 1, true),
      Distribution::make_float(64, 1312, false, 160.0),
      Distribution::make_float(0.1, 1.0, false, 0.3),
      Distribution::make_float(2, 2),
      Distribution::make_int(-3, 17),
      Distribution::make_int(1, 9, false, 2),
      Distribution::make_int(1, 1024, true),
      Distribution::make_int(-(std::int64_t{1} << 53), std::int64_t{1} << 53),
      Distribution::make_categorical({Json(), true, 1, 1.0, "1", "relu", -2, 0.1}),
      Distribution::make_ordinal({16, 32, 64}),
      Distribution::make_ordinal({"low", "mid", "high"}),
  };
  for (const auto& d : all) {
    Json j = d.to_json();
    Distribution back = Distribution::from_json(j, "space.p");
    EXPECT_TRUE(back == d) << j.dump();
    EXPECT_EQ(back.to_json(), j);
    // Through text as well (what a file or the store keeps).
    Distribution text = Distribution::from_json(Json::parse(j.dump()), "space.p");
    EXPECT_TRUE(text == d) << j.dump();
    EXPECT_EQ(text.grid_high(), d.grid_high());
    EXPECT_EQ(text.cardinality(), d.cardinality());
    if (d.is_indexed()) {
      for (std::size_t i = 0; i < d.choices().size(); ++i) {
        const Json& a = d.choices()[i];
        const Json& b = text.choices()[i];
        EXPECT_TRUE(same_json_scalar(a, b)) << a.dump() << " vs " << b.dump();
        EXPECT_EQ(a.is_number_integer(), b.is_number_integer()) << a.dump();
        EXPECT_EQ(a.is_number_float(), b.is_number_float()) << a.dump();
      }
    }
  }
}

TEST(DistributionsTest, EqualityComparesKindAndParameters) {
  EXPECT_FALSE(Distribution::make_float(0, 1) == Distribution::make_float(0, 2));
  EXPECT_FALSE(Distribution::make_float(1, 2) == Distribution::make_float(1, 2, true));
  EXPECT_FALSE(Distribution::make_float(0, 1) == Distribution::make_float(0, 1, false, 0.5));
  EXPECT_FALSE(Distribution::make_float(0, 1) == Distribution::make_int(0, 1));
  EXPECT_FALSE(Distribution::make_categorical({1, 2}) == Distribution::make_ordinal({1, 2}));
  EXPECT_FALSE(Distribution::make_categorical({1, 2}) == Distribution::make_categorical({1, 2.0}));
  EXPECT_FALSE(Distribution::make_categorical({1, 2}) == Distribution::make_categorical({2, 1}));
  EXPECT_TRUE(Distribution::make_categorical({1, "a"}) ==
              Distribution::make_categorical({Json::parse("1"), Json("a")}));
  EXPECT_TRUE(Distribution::make_int(0, 10, false, 2, "a") ==
              Distribution::make_int(0, 10, false, 2, "b"));
}

TEST(DistributionsTest, FromJsonErrorsNameTheField) {
  struct Case {
    const char* spec;
    const char* path;
    const char* words;
  };
  const Case cases[] = {
      {R"({"type": "float", "low": 0, "high": 1, "log": true})", "space.lr.low",
       "log scale needs low > 0, got low = 0"},
      {R"({"type": "float", "low": 2, "high": 1})", "space.lr", "low <= high"},
      {R"({"type": "float", "high": 1})", "space.lr.low", "required"},
      {R"({"type": "float", "low": 0})", "space.lr.high", "required"},
      {R"({"type": "float", "low": "0", "high": 1})", "space.lr.low", "number"},
      {R"({"type": "float", "low": 0, "high": 1, "log": "yes"})", "space.lr.log", "true or false"},
      {R"({"type": "float", "low": 0, "high": 1, "step": 0})", "space.lr.step", "> 0"},
      {R"({"type": "float", "low": 0, "high": 1, "step": -1})", "space.lr.step", "> 0"},
      {R"({"type": "float", "low": 1, "high": 2, "step": 0.1, "log": true})", "space.lr.step",
       "log"},
      {R"({"type": "float", "low": 0, "hihg": 1})", "space.lr.hihg", "did you mean 'high'?"},
      {R"({"type": "flaot", "low": 0, "high": 1})", "space.lr.type", "did you mean 'float'?"},
      {R"({"type": "tensor"})", "space.lr.type", "unknown type 'tensor'"},
      {R"({"low": 0, "high": 1})", "space.lr.type", "required"},
      {R"({"type": 3})", "space.lr.type", "string"},
      {R"({"type": "int", "low": 0.5, "high": 4})", "space.lr.low", "integer"},
      {R"({"type": "int", "low": 1, "high": 4, "step": 1.5})", "space.lr.step", "integer"},
      {R"({"type": "int", "low": 0, "high": 4, "log": true})", "space.lr.low",
       "log scale needs low > 0"},
      {R"({"type": "int", "low": 1, "high": 4, "step": 0})", "space.lr.step", "> 0"},
      {R"({"type": "int", "low": 1, "high": 18446744073709551615})", "space.lr.high",
       "must be an integer from -9223372036854775808 to 9223372036854775807, got "
       "18446744073709551615"},
      {R"({"type": "categorical"})", "space.lr.choices", "required"},
      {R"({"type": "categorical", "choices": "adam"})", "space.lr.choices", "array"},
      {R"({"type": "categorical", "choices": []})", "space.lr.choices", "empty"},
      {R"({"type": "categorical", "choices": ["a", "a"]})", "space.lr.choices", "duplicate"},
      {R"({"type": "categorical", "choices": [[1]]})", "space.lr.choices", "scalar"},
      {R"({"type": "categorical", "choices": ["a"], "values": [1]})", "space.lr.values",
       "unknown key"},
      {R"({"type": "ordinal", "values": []})", "space.lr.values", "empty"},
      {R"({"type": "ordinal", "choices": [1]})", "space.lr.choices", "unknown key"},
      {R"([1, 2])", "space.lr", "object"},
      {R"("float")", "space.lr", "object"},
  };
  for (const auto& c : cases) {
    Json spec = Json::parse(c.spec);
    auto e = config_error([&] { Distribution::from_json(spec, "space.lr"); });
    EXPECT_EQ(e.path(), c.path) << c.spec << " -> " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.words), std::string::npos)
        << c.spec << " -> " << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(std::string(c.path) + ": ", 0), 0u) << e.what();
  }
}

TEST(DistributionsTest, FromJsonReadsEveryKind) {
  auto f = Distribution::from_json(
      Json::parse(R"({"type": "float", "low": 64, "high": 1312, "step": 160})"), "space.x");
  EXPECT_EQ(f.kind(), DistributionKind::kFloat);
  EXPECT_EQ(f.grid_high(), 1184);
  auto i = Distribution::from_json(
      Json::parse(R"({"type": "int", "low": 1, "high": 9, "step": 2})"), "s");
  EXPECT_EQ(i.kind(), DistributionKind::kInt);
  EXPECT_EQ(i.step(), 2);
  // An integer-valued float is accepted for int bounds.
  auto i2 = Distribution::from_json(Json::parse(R"({"type": "int", "low": 1.0, "high": 8})"), "s");
  EXPECT_EQ(i2.low(), 1);
  auto l = Distribution::from_json(
      Json::parse(R"({"type": "int", "low": 1, "high": 8, "log": true})"), "s");
  EXPECT_TRUE(l.is_log());
  auto c = Distribution::from_json(
      Json::parse(R"({"type": "categorical", "choices": [null, true, 1, 1.0, "1"]})"), "s");
  EXPECT_EQ(c.cardinality(), 5u);
  EXPECT_TRUE(c.to_external(0).is_null());
  EXPECT_TRUE(c.to_external(3).is_number_float());
  auto o = Distribution::from_json(Json::parse(R"({"type": "ordinal", "values": [16, 32]})"), "s");
  EXPECT_EQ(o.kind(), DistributionKind::kOrdinal);
  EXPECT_STREQ(to_string(o.kind()), "ordinal");
}

}  // namespace
}  // namespace hps

namespace hps {
namespace {

TEST(DistributionMapTest, CopiesShareOneMapUntilOneIsWritten) {
  auto x = Distribution::make_float(0.0, 1.0);
  auto k = Distribution::make_int(1, 8);
  DistributionMap a{{"x", x}};
  DistributionMap b = a;
  EXPECT_TRUE(b.shares_map_with(a));
  // A write to a shared map copies it: the other copy does not see it.
  b.emplace("k", k);
  EXPECT_FALSE(b.shares_map_with(a));
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(b.size(), 2u);
  EXPECT_FALSE(a.count("k"));
  EXPECT_TRUE(b.at("k") == k);
  // insert_or_assign and emplace_hint copy too.
  DistributionMap c = b;
  c.insert_or_assign("x", k);
  EXPECT_TRUE(b.at("x") == x);
  EXPECT_TRUE(c.at("x") == k);
  DistributionMap d = c;
  d.emplace_hint(d.end(), "y", x);
  EXPECT_FALSE(c.count("y"));
  EXPECT_TRUE(d.at("y") == x);
  // Equal content compares equal without sharing; clear empties one copy.
  DistributionMap e{{"x", x}};
  EXPECT_TRUE(e == a);
  EXPECT_FALSE(e.shares_map_with(a));
  EXPECT_TRUE(e != b);
  e.clear();
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(a.size(), 1u);
  EXPECT_THROW((void)e.at("x"), std::out_of_range);
  // A hint taken from an empty map (before it has one of its own) is
  // ignored, as the coordinator builds a new trial's map.
  DistributionMap g;
  g.emplace_hint(g.end(), "x", x);
  g.emplace_hint(g.end(), "y", k);
  EXPECT_EQ(g.size(), 2u);
  EXPECT_TRUE(g.at("y") == k);
  // An unshared map is written in place (no copy).
  DistributionMap f{{"x", x}};
  const Distribution* before = &f.at("x");
  f.emplace("k", k);
  EXPECT_EQ(&f.at("x"), before);
}

TEST(DistributionMapTest, ReadsAsTheStdMap) {
  DistributionMap::Map m{{"b", Distribution::make_float(0.0, 1.0)},
                         {"a", Distribution::make_int(0, 3)}};
  DistributionMap d(m);
  const DistributionMap::Map& view = d;
  EXPECT_TRUE(view == m);
  std::vector<std::string> names;
  for (const auto& [name, dist] : d) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(d.find("c") == d.end());
  EXPECT_TRUE(DistributionMap().map().empty());
}

}  // namespace
}  // namespace hps
