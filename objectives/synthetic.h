// Synthetic benchmark functions for testing and benchmarking samplers.
//
// Pure functions of a point x (a span of doubles, one per coordinate), to be
// minimized. Formulas, domains and minima follow the Virtual Library of
// Simulation Experiments (S. Surjanovic and D. Bingham, Simon Fraser
// University, https://www.sfu.ca/~ssurjano/optimization.html), which cites
// the original sources given below. Each function is defined on all of R^N
// (it may return +inf for huge inputs, and NaN if an input is NaN); the
// domain is the box where the search is usually run and where the stated
// global minimum holds.
//
// Every function throws hps::Error when x has the wrong number of
// coordinates ("branin: needs exactly 2 inputs, got 3").
//
// As objectives (objectives/objective.h), each function is registered under
// its table name ("branin", "hartmann6", "styblinski_tang", "rosenbrock",
// "ackley"). The objective section is {"type": "<name>"} and nothing else.
// The inputs are the params x0, x1, ..., x{N-1} of the search space, in
// that order: numeric (float or int), unconditional. Branin needs exactly
// x0, x1 and Hartmann6 exactly x0..x5; the N-D functions take N from the
// contiguous run x0..x{N-1} (N >= 1, Rosenbrock N >= 2), and an x<k> after a
// gap is an error. Other params are allowed and ignored. Breaking a rule
// throws ConfigError naming "space" (a missing input) or "space.x<i>" (a
// wrong or extra one) and the rule. The objective returns f(x) of the trial's
// values (ints read as doubles).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hps {

// Branin (Branin-Hoo) function, 2-D (Dixon and Szegő, "The global
// optimization problem: an introduction", 1978):
//   f(x) = a (x1 - b x0^2 + c x0 - r)^2 + s (1 - t) cos(x0) + s
//   a = 1, b = 5.1 / (4 pi^2), c = 5 / pi, r = 6, s = 10, t = 1 / (8 pi).
// Domain: x0 in [-5, 10], x1 in [0, 15].
// Global minimum s t = 5 / (4 pi) = 0.397887... at three points:
// (-pi, 12.275), (pi, 2.275) and (3 pi, 2.475) = (9.42478..., 2.475).
// Throws Error unless x.size() == 2.
double branin(std::span<const double> x);

// Hartmann 6-D function (Dixon and Szegő, 1978, after Hartmann, 1972;
// the unscaled form, not the rescaled one of Picheny et al., 2013):
//   f(x) = -sum_{i=1..4} alpha_i exp(-sum_{j=1..6} A_ij (x_j - P_ij)^2)
// with alpha = (1.0, 1.2, 3.0, 3.2) and the 4x6 matrices A and P of the
// reference (P given as 1e-4 * integers).
// Domain: x in [0, 1]^6.
// Global minimum -3.32237 at
// (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573).
// Throws Error unless x.size() == 6.
double hartmann6(std::span<const double> x);

// Styblinski-Tang function, N-D (Styblinski and Tang, "Experiments in
// nonconvex optimization: stochastic approximation with function
// smoothing and simulated annealing", Neural Networks 3, 1990):
//   f(x) = 1/2 sum_{i} (x_i^4 - 16 x_i^2 + 5 x_i)
// Domain: x in [-5, 5]^N.
// Global minimum -39.16617 N (more exactly -39.166165703771 N) at
// x_i = -2.903534 for every i.
// Throws Error if x is empty (N >= 1).
double styblinski_tang(std::span<const double> x);

// Rosenbrock function, N-D (Rosenbrock, "An automatic method for finding
// the greatest or least value of a function", The Computer Journal 3, 1960;
// the chained N-D form):
//   f(x) = sum_{i=0..N-2} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2
// Domain: x in [-5, 10]^N.
// Global minimum 0 at x_i = 1 for every i.
// Throws Error if x.size() < 2.
double rosenbrock(std::span<const double> x);

// Ackley function, N-D (Ackley, "A connectionist machine for genetic
// hillclimbing", 1987; N-D form of Bäck, 1996):
//   f(x) = -a exp(-b sqrt(1/N sum x_i^2)) - exp(1/N sum cos(c x_i)) + a + e
//   a = 20, b = 0.2, c = 2 pi.
// Domain: x in [-32.768, 32.768]^N.
// Global minimum 0 at x = 0 (computed in doubles it is a few 1e-16).
// Throws Error if x is empty (N >= 1).
double ackley(std::span<const double> x);

// A description of one synthetic function, for benches and the objective
// registry. Entries are immutable; the table is built once.
struct SyntheticFunction {
  std::string name;               // registry type name, e.g. "branin"
  std::string description;        // one line, e.g. "Branin, 2-D, min 0.397887"
  std::size_t dimension = 0;      // the exact dimension, or 0 for any N >= min_dimension
  std::size_t min_dimension = 1;  // smallest N accepted (== dimension when fixed)
  // Domain per coordinate. For a fixed dimension: one entry per coordinate;
  // for N-D functions (dimension 0): one entry, used for every coordinate.
  std::vector<double> low;
  std::vector<double> high;
  // One global minimizer, in the same layout as low/high.
  std::vector<double> minimizer;
  // The global minimum for a fixed dimension; for N-D functions whose
  // minimum grows with N (minimum_per_coordinate true) the minimum per
  // coordinate, else the minimum for every N. The published value, with its
  // rounding (hartmann6 -3.32237, styblinski_tang -39.16617), except Branin's,
  // which is exact (5 / (4 pi)).
  double minimum = 0;
  bool minimum_per_coordinate = false;
  // The function itself.
  double (*function)(std::span<const double> x) = nullptr;

  // Whether n coordinates are accepted by `function`.
  bool accepts_dimension(std::size_t n) const {
    return dimension != 0 ? n == dimension : n >= min_dimension;
  }
  // Domain bounds of coordinate i (i < dimension for fixed-dimension
  // functions; any i for N-D ones). Throws Error for i out of range.
  double low_at(std::size_t i) const;
  double high_at(std::size_t i) const;
  // The known global minimum value for n coordinates. Throws Error if
  // !accepts_dimension(n).
  double known_minimum(std::size_t n) const;
  // A known global minimizer with n coordinates. Throws Error if
  // !accepts_dimension(n).
  std::vector<double> known_minimizer(std::size_t n) const;
};

// The table of all synthetic functions, sorted by name: ackley, branin,
// hartmann6, rosenbrock, styblinski_tang.
const std::vector<SyntheticFunction>& synthetic_functions();

// The table entry named `name`, or nullptr.
const SyntheticFunction* find_synthetic_function(std::string_view name);

}  // namespace hps
