#include "objectives/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "search/errors.h"

namespace hps {
namespace {

void require_exact_dimension(const char* name, std::span<const double> x, std::size_t n) {
  if (x.size() != n) {
    throw Error(std::string(name) + ": needs exactly " + std::to_string(n) + " inputs, got " +
                std::to_string(x.size()));
  }
}

void require_min_dimension(const char* name, std::span<const double> x, std::size_t n) {
  if (x.size() < n) {
    throw Error(std::string(name) + ": needs at least " + std::to_string(n) + " input" +
                (n == 1 ? "" : "s") + ", got " + std::to_string(x.size()));
  }
}

// Hartmann 6-D constants (Dixon and Szegő, 1978).
constexpr double kHartmannAlpha[4] = {1.0, 1.2, 3.0, 3.2};
constexpr double kHartmannA[4][6] = {
    {10.0, 3.0, 17.0, 3.5, 1.7, 8.0},
    {0.05, 10.0, 17.0, 0.1, 8.0, 14.0},
    {3.0, 3.5, 1.7, 10.0, 17.0, 8.0},
    {17.0, 8.0, 0.05, 10.0, 0.1, 14.0},
};
// P = 1e-4 * these integers.
constexpr double kHartmannP[4][6] = {
    {1312, 1696, 5569, 124, 8283, 5886},
    {2329, 4135, 8307, 3736, 1004, 9991},
    {2348, 1451, 3522, 2883, 3047, 6650},
    {4047, 8828, 8732, 5743, 1091, 381},
};

}  // namespace

double branin(std::span<const double> x) {
  require_exact_dimension("branin", x, 2);
  constexpr double kPi = std::numbers::pi;
  constexpr double a = 1.0;
  constexpr double b = 5.1 / (4.0 * kPi * kPi);
  constexpr double c = 5.0 / kPi;
  constexpr double r = 6.0;
  constexpr double s = 10.0;
  constexpr double t = 1.0 / (8.0 * kPi);
  const double u = x[1] - b * x[0] * x[0] + c * x[0] - r;
  return a * u * u + s * (1.0 - t) * std::cos(x[0]) + s;
}

double hartmann6(std::span<const double> x) {
  require_exact_dimension("hartmann6", x, 6);
  double sum = 0.0;
  for (std::size_t i = 0; i < 4; ++i) {
    double inner = 0.0;
    for (std::size_t j = 0; j < 6; ++j) {
      const double d = x[j] - 1e-4 * kHartmannP[i][j];
      inner += kHartmannA[i][j] * d * d;
    }
    sum += kHartmannAlpha[i] * std::exp(-inner);
  }
  return -sum;
}

double styblinski_tang(std::span<const double> x) {
  require_min_dimension("styblinski_tang", x, 1);
  double sum = 0.0;
  for (double v : x) {
    const double v2 = v * v;
    sum += v2 * v2 - 16.0 * v2 + 5.0 * v;
  }
  return 0.5 * sum;
}

double rosenbrock(std::span<const double> x) {
  require_min_dimension("rosenbrock", x, 2);
  double sum = 0.0;
  for (std::size_t i = 0; i + 1 < x.size(); ++i) {
    const double u = x[i + 1] - x[i] * x[i];
    const double v = 1.0 - x[i];
    sum += 100.0 * u * u + v * v;
  }
  return sum;
}

double ackley(std::span<const double> x) {
  require_min_dimension("ackley", x, 1);
  constexpr double a = 20.0;
  constexpr double b = 0.2;
  constexpr double c = 2.0 * std::numbers::pi;
  double sum_sq = 0.0;
  double sum_cos = 0.0;
  for (double v : x) {
    sum_sq += v * v;
    sum_cos += std::cos(c * v);
  }
  const double n = static_cast<double>(x.size());
  return -a * std::exp(-b * std::sqrt(sum_sq / n)) - std::exp(sum_cos / n) + a + std::numbers::e;
}

double SyntheticFunction::low_at(std::size_t i) const {
  if (dimension == 0) return low.at(0);
  if (i >= low.size()) {
    throw Error(name + ": coordinate " + std::to_string(i) + " out of range (dimension " +
                std::to_string(dimension) + ")");
  }
  return low[i];
}

double SyntheticFunction::high_at(std::size_t i) const {
  if (dimension == 0) return high.at(0);
  if (i >= high.size()) {
    throw Error(name + ": coordinate " + std::to_string(i) + " out of range (dimension " +
                std::to_string(dimension) + ")");
  }
  return high[i];
}

namespace {

void check_dimension(const SyntheticFunction& f, std::size_t n) {
  if (f.accepts_dimension(n)) return;
  if (f.dimension != 0) {
    throw Error(f.name + ": needs exactly " + std::to_string(f.dimension) + " inputs, got " +
                std::to_string(n));
  }
  throw Error(f.name + ": needs at least " + std::to_string(f.min_dimension) + " input" +
              (f.min_dimension == 1 ? "" : "s") + ", got " + std::to_string(n));
}

}  // namespace

double SyntheticFunction::known_minimum(std::size_t n) const {
  check_dimension(*this, n);
  return minimum_per_coordinate ? minimum * static_cast<double>(n) : minimum;
}

std::vector<double> SyntheticFunction::known_minimizer(std::size_t n) const {
  check_dimension(*this, n);
  if (dimension != 0) return minimizer;
  return std::vector<double>(n, minimizer.at(0));
}

const std::vector<SyntheticFunction>& synthetic_functions() {
  static const std::vector<SyntheticFunction> table = [] {
    constexpr double kPi = std::numbers::pi;
    std::vector<SyntheticFunction> t;
    t.push_back({.name = "ackley",
                 .description = "Ackley, N-D (N >= 1), x in [-32.768, 32.768]^N, min 0 at 0",
                 .dimension = 0,
                 .min_dimension = 1,
                 .low = {-32.768},
                 .high = {32.768},
                 .minimizer = {0.0},
                 .minimum = 0.0,
                 .minimum_per_coordinate = false,
                 .function = &ackley});
    t.push_back({.name = "branin",
                 .description = "Branin, 2-D, x0 in [-5, 10], x1 in [0, 15], min 0.397887",
                 .dimension = 2,
                 .min_dimension = 2,
                 .low = {-5.0, 0.0},
                 .high = {10.0, 15.0},
                 .minimizer = {kPi, 2.275},
                 .minimum = 5.0 / (4.0 * kPi),  // = s t, exactly, at the minimizers
                 .minimum_per_coordinate = false,
                 .function = &branin});
    t.push_back({.name = "hartmann6",
                 .description = "Hartmann, 6-D, x in [0, 1]^6, min -3.32237",
                 .dimension = 6,
                 .min_dimension = 6,
                 .low = std::vector<double>(6, 0.0),
                 .high = std::vector<double>(6, 1.0),
                 .minimizer = {0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573},
                 .minimum = -3.32237,
                 .minimum_per_coordinate = false,
                 .function = &hartmann6});
    t.push_back({.name = "rosenbrock",
                 .description = "Rosenbrock, N-D (N >= 2), x in [-5, 10]^N, min 0 at (1, ..., 1)",
                 .dimension = 0,
                 .min_dimension = 2,
                 .low = {-5.0},
                 .high = {10.0},
                 .minimizer = {1.0},
                 .minimum = 0.0,
                 .minimum_per_coordinate = false,
                 .function = &rosenbrock});
    t.push_back({.name = "styblinski_tang",
                 .description = "Styblinski-Tang, N-D (N >= 1), x in [-5, 5]^N, min -39.16617 N",
                 .dimension = 0,
                 .min_dimension = 1,
                 .low = {-5.0},
                 .high = {5.0},
                 .minimizer = {-2.903534},
                 .minimum = -39.16617,
                 .minimum_per_coordinate = true,
                 .function = &styblinski_tang});
    return t;
  }();
  return table;
}

const SyntheticFunction* find_synthetic_function(std::string_view name) {
  const auto& table = synthetic_functions();
  auto it = std::find_if(table.begin(), table.end(),
                         [&](const SyntheticFunction& f) { return f.name == name; });
  return it == table.end() ? nullptr : &*it;
}

}  // namespace hps
