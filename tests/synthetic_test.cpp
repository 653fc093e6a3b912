// Tests of objectives/synthetic.h: values at the published optima, values at
// points worked out by hand from the formulas, dimension errors, the table.
#include "objectives/synthetic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "search/errors.h"

namespace hps {
namespace {

constexpr double kPi = std::numbers::pi;

// A published optimum given to d decimals is within half a unit of its last
// digit of the true value: these tolerances are that half unit.
constexpr double kHalfUnit6 = 5e-7;  // 0.397887 (6 decimals)
constexpr double kHalfUnit5 = 5e-6;  // -3.32237, -39.16617 (5 decimals)

double eval(double (*f)(std::span<const double>), std::vector<double> x) { return f(x); }

// ---------------------------------------------------------------- Branin

TEST(BraninTest, ValueAtEachPublishedMinimizer) {
  // The three minimizers as published: (-pi, 12.275), (pi, 2.275),
  // (9.42478, 2.475); the published minimum is 0.397887.
  EXPECT_NEAR(eval(branin, {-kPi, 12.275}), 0.397887, kHalfUnit6);
  EXPECT_NEAR(eval(branin, {kPi, 2.275}), 0.397887, kHalfUnit6);
  // 9.42478 is 3 pi rounded to 5 decimals; the error in x0 (< 5e-6) changes
  // f only to second order (f is flat there), far below the half unit.
  EXPECT_NEAR(eval(branin, {9.42478, 2.475}), 0.397887, kHalfUnit6);
}

TEST(BraninTest, ValuesWorkedOutByHand) {
  // x = (0, 0): (0 - 0 + 0 - 6)^2 + 10 (1 - 1/(8 pi)) cos 0 + 10
  //           = 36 + 10 - 10/(8 pi) + 10 = 56 - 5/(4 pi).
  EXPECT_NEAR(eval(branin, {0.0, 0.0}), 56.0 - 5.0 / (4.0 * kPi), 1e-12);
  // x = (pi, 3.275): b pi^2 = 1.275 and c pi = 5, so the square is
  // (3.275 - 1.275 + 5 - 6)^2 = 1; cos(pi) = -1: 1 - 10 (1 - t) + 10
  // = 1 + 10 t = 1 + 5/(4 pi).
  EXPECT_NEAR(eval(branin, {kPi, 3.275}), 1.0 + 5.0 / (4.0 * kPi), 1e-12);
  // x = (-5, 0): the corner of the domain; u = 0 - b 25 - 5 c - 6.
  const double b = 5.1 / (4.0 * kPi * kPi);
  const double u = -25.0 * b - 25.0 / kPi - 6.0;
  EXPECT_NEAR(eval(branin, {-5.0, 0.0}),
              u * u + 10.0 * (1.0 - 1.0 / (8.0 * kPi)) * std::cos(-5.0) + 10.0, 1e-9);
}

TEST(BraninTest, WrongDimensionThrows) {
  EXPECT_THROW(eval(branin, {1.0}), Error);
  EXPECT_THROW(eval(branin, {}), Error);
  try {
    eval(branin, {1.0, 2.0, 3.0});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "branin: needs exactly 2 inputs, got 3");
  }
}

// ---------------------------------------------------------------- Hartmann6

TEST(Hartmann6Test, ValueAtPublishedMinimizer) {
  EXPECT_NEAR(eval(hartmann6, {0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573}), -3.32237,
              kHalfUnit5);
}

TEST(Hartmann6Test, ValueAtACenterOfATerm) {
  // At x = P row 4 (the centre of the alpha = 3.2 term), that term is
  // exactly -3.2; the others are exp(-sum A_ij (P4j - Pij)^2), written out
  // here from the published constants.
  const std::vector<double> p4 = {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381};
  auto term = [&](double alpha, std::vector<double> a, std::vector<double> p) {
    double s = 0;
    for (std::size_t j = 0; j < 6; ++j) s += a[j] * (p4[j] - p[j]) * (p4[j] - p[j]);
    return alpha * std::exp(-s);
  };
  const double expected =
      -3.2 - term(1.0, {10, 3, 17, 3.5, 1.7, 8}, {0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886}) -
      term(1.2, {0.05, 10, 17, 0.1, 8, 14}, {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991}) -
      term(3.0, {3, 3.5, 1.7, 10, 17, 8}, {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650});
  EXPECT_NEAR(eval(hartmann6, p4), expected, 1e-12);
  // The other terms are small there: the value is close to -3.2 alone.
  EXPECT_LT(eval(hartmann6, p4), -3.2);
  EXPECT_GT(eval(hartmann6, p4), -3.3);
}

TEST(Hartmann6Test, FarFromAllCentresIsNearZero) {
  // At x = (10, ..., 10) every exponent is below -100: f is -0 to ~1e-40.
  const double v = eval(hartmann6, std::vector<double>(6, 10.0));
  EXPECT_LE(v, 0.0);
  EXPECT_GT(v, -1e-40);
}

TEST(Hartmann6Test, WrongDimensionThrows) {
  EXPECT_THROW(eval(hartmann6, std::vector<double>(5, 0.5)), Error);
  try {
    eval(hartmann6, std::vector<double>(7, 0.5));
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "hartmann6: needs exactly 6 inputs, got 7");
  }
}

// ---------------------------------------------------------------- Styblinski-Tang

TEST(StyblinskiTangTest, ValueAtPublishedMinimizerScalesWithN) {
  for (std::size_t n : {1u, 2u, 5u, 20u}) {
    // The half unit of -39.16617 per coordinate adds up over N coordinates;
    // the rounding of x_i = -2.903534 (< 5e-7) matters only to second order.
    EXPECT_NEAR(eval(styblinski_tang, std::vector<double>(n, -2.903534)),
                -39.16617 * static_cast<double>(n), kHalfUnit5 * static_cast<double>(n))
        << "N = " << n;
  }
}

TEST(StyblinskiTangTest, ValuesWorkedOutByHand) {
  EXPECT_EQ(eval(styblinski_tang, {0.0}), 0.0);
  // (1 - 16 + 5 + 16 - 64 + 10) / 2 = -48 / 2.
  EXPECT_DOUBLE_EQ(eval(styblinski_tang, {1.0, 2.0}), -24.0);
  // (625 - 400 - 25) / 2 = 100 at the lower bound, (625 - 400 + 25) / 2 = 125
  // at the upper bound.
  EXPECT_DOUBLE_EQ(eval(styblinski_tang, {-5.0}), 100.0);
  EXPECT_DOUBLE_EQ(eval(styblinski_tang, {5.0}), 125.0);
  EXPECT_DOUBLE_EQ(eval(styblinski_tang, {-5.0, 5.0, 0.0}), 225.0);
}

TEST(StyblinskiTangTest, EmptyInputThrows) {
  try {
    eval(styblinski_tang, {});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "styblinski_tang: needs at least 1 input, got 0");
  }
}

// ---------------------------------------------------------------- Rosenbrock

TEST(RosenbrockTest, ZeroAtOnes) {
  for (std::size_t n : {2u, 3u, 10u}) {
    EXPECT_EQ(eval(rosenbrock, std::vector<double>(n, 1.0)), 0.0) << "N = " << n;
  }
}

TEST(RosenbrockTest, ValuesWorkedOutByHand) {
  // 100 (0 - 0)^2 + (1 - 0)^2.
  EXPECT_EQ(eval(rosenbrock, {0.0, 0.0}), 1.0);
  // 100 (2 - 1)^2 + (1 + 1)^2.
  EXPECT_EQ(eval(rosenbrock, {-1.0, 2.0}), 104.0);
  // [100 (2 - 1)^2 + 0] + [100 (3 - 4)^2 + (1 - 2)^2] = 100 + 101.
  EXPECT_EQ(eval(rosenbrock, {1.0, 2.0, 3.0}), 201.0);
  // Only consecutive pairs couple: (0, 0, 1): 1 + [100 (1 - 0)^2 + 1] = 102.
  EXPECT_EQ(eval(rosenbrock, {0.0, 0.0, 1.0}), 102.0);
}

TEST(RosenbrockTest, FewerThanTwoInputsThrows) {
  EXPECT_THROW(eval(rosenbrock, {}), Error);
  try {
    eval(rosenbrock, {1.0});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "rosenbrock: needs at least 2 inputs, got 1");
  }
}

// ---------------------------------------------------------------- Ackley

TEST(AckleyTest, ZeroAtOrigin) {
  // Exactly 0 in real arithmetic: -20 - e + 20 + e. In doubles the sum of
  // terms of size ~20 leaves a rounding error of a few ulp(20) ~ 4e-15.
  for (std::size_t n : {1u, 2u, 10u}) {
    EXPECT_NEAR(eval(ackley, std::vector<double>(n, 0.0)), 0.0, 1e-14) << "N = " << n;
  }
}

TEST(AckleyTest, ValuesWorkedOutByHand) {
  // At integer points cos(2 pi x) = 1, so the cosine term is -e and cancels
  // +e: f = 20 - 20 exp(-0.2 rms(x)).
  EXPECT_NEAR(eval(ackley, {1.0}), 20.0 - 20.0 * std::exp(-0.2), 1e-12);
  EXPECT_NEAR(eval(ackley, {1.0, -1.0}), 20.0 - 20.0 * std::exp(-0.2), 1e-12);
  // rms(3, 4) = sqrt(25 / 2).
  EXPECT_NEAR(eval(ackley, {3.0, 4.0}), 20.0 - 20.0 * std::exp(-0.2 * std::sqrt(12.5)), 1e-12);
  // x = 0.5: cos(pi) = -1: -20 exp(-0.1) - exp(-1) + 20 + e.
  EXPECT_NEAR(eval(ackley, {0.5}), -20.0 * std::exp(-0.1) - std::exp(-1.0) + 20.0 + std::numbers::e,
              1e-12);
}

TEST(AckleyTest, EmptyInputThrows) { EXPECT_THROW(eval(ackley, {}), Error); }

// ---------------------------------------------------------------- table

TEST(SyntheticTableTest, ListsTheFiveFunctionsSortedByName) {
  std::vector<std::string> names;
  for (const auto& f : synthetic_functions()) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ackley", "branin", "hartmann6", "rosenbrock",
                                             "styblinski_tang"}));
  ASSERT_NE(find_synthetic_function("branin"), nullptr);
  EXPECT_EQ(find_synthetic_function("branin")->function, &branin);
  EXPECT_EQ(find_synthetic_function("nope"), nullptr);
}

TEST(SyntheticTableTest, DimensionsAndDomains) {
  const auto* b = find_synthetic_function("branin");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dimension, 2u);
  EXPECT_EQ(b->low_at(0), -5.0);
  EXPECT_EQ(b->high_at(0), 10.0);
  EXPECT_EQ(b->low_at(1), 0.0);
  EXPECT_EQ(b->high_at(1), 15.0);
  EXPECT_THROW(b->low_at(2), Error);
  EXPECT_TRUE(b->accepts_dimension(2));
  EXPECT_FALSE(b->accepts_dimension(3));

  const auto* r = find_synthetic_function("rosenbrock");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->dimension, 0u);
  EXPECT_FALSE(r->accepts_dimension(1));
  EXPECT_TRUE(r->accepts_dimension(2));
  EXPECT_TRUE(r->accepts_dimension(50));
  EXPECT_EQ(r->low_at(17), -5.0);
  EXPECT_EQ(r->high_at(17), 10.0);

  const auto* a = find_synthetic_function("ackley");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->low_at(3), -32.768);
  EXPECT_EQ(a->high_at(3), 32.768);

  const auto* h = find_synthetic_function("hartmann6");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->dimension, 6u);
  EXPECT_EQ(h->low_at(5), 0.0);
  EXPECT_EQ(h->high_at(5), 1.0);

  const auto* s = find_synthetic_function("styblinski_tang");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->low_at(0), -5.0);
  EXPECT_EQ(s->high_at(0), 5.0);
  EXPECT_DOUBLE_EQ(s->known_minimum(3), -3 * 39.16617);
  EXPECT_THROW(s->known_minimum(0), Error);
  EXPECT_THROW(b->known_minimizer(3), Error);
}

// Each entry's function at its known minimizer gives its known minimum, and
// no point of a seeded random sample of the domain does better.
TEST(SyntheticTableTest, KnownMinimumHoldsOverTheDomain) {
  std::mt19937_64 rng(7);
  for (const auto& f : synthetic_functions()) {
    for (std::size_t n : {1u, 2u, 3u, 6u}) {
      if (!f.accepts_dimension(n)) continue;
      const double minimum = f.known_minimum(n);
      const double tol = kHalfUnit5 * static_cast<double>(n);
      const std::vector<double> argmin = f.known_minimizer(n);
      ASSERT_EQ(argmin.size(), n);
      EXPECT_NEAR(f.function(argmin), minimum, tol) << f.name << " N = " << n;
      std::vector<double> x(n);
      for (int k = 0; k < 2000; ++k) {
        for (std::size_t i = 0; i < n; ++i) {
          x[i] = std::uniform_real_distribution<double>(f.low_at(i), f.high_at(i))(rng);
        }
        ASSERT_GE(f.function(x), minimum - tol) << f.name << " N = " << n;
      }
    }
  }
}

}  // namespace
}  // namespace hps
