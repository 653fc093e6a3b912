// Helpers shared by the pruners of algorithms/: direction-aware comparison,
// reading a trial's learning curve, the warm-up/interval gate and a stable
// hash. Pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "search/pruner.h"

namespace hps::pruning {

// True if `a` is strictly better than `b` for `direction` (minimize: a < b;
// maximize: a > b). False when either is NaN.
bool is_better(StudyDirection direction, double a, double b);

// The better of the two (NaN loses to any number).
double better_of(StudyDirection direction, double a, double b);

// The trial's intermediate value at exactly `step`, if reported.
std::optional<double> value_at(const FrozenTrial& trial, std::int64_t step);

// The best non-NaN intermediate value at steps <= `up_to`; nullopt if there
// is none.
std::optional<double> best_value_up_to(const FrozenTrial& trial, StudyDirection direction,
                                       std::int64_t up_to);

// The warm-up and interval gate of Optuna's MedianPruner documentation:
// false if step < n_warmup_steps; otherwise true only for the first step the
// trial reported in its interval, the intervals being [w + k*i, w + (k+1)*i)
// for w = n_warmup_steps and i = interval_steps (k = 0, 1, ...). With
// interval_steps = 1 every step after the warm-up passes; with irregular
// steps (1, 5, 6, ...) the first report in each interval passes.
// Requires n_warmup_steps >= 0 and interval_steps >= 1.
bool passes_warmup_and_interval(const FrozenTrial& trial, std::int64_t step,
                                std::int64_t n_warmup_steps, std::int64_t interval_steps);

// The q-th percentile (q in [0, 100]) of `values` with linear interpolation
// between closest ranks (numpy's default): sorted v, position q/100*(n-1).
// `values` must be non-empty and free of NaN; it is sorted in place.
double percentile(std::vector<double>& values, double q);

// base * factor^exponent, saturating at INT64_MAX. base >= 1, factor >= 2,
// exponent >= 0. At most 64 multiplications whatever the exponent.
std::int64_t saturating_power(std::int64_t base, std::int64_t factor, std::int64_t exponent);

// A well-mixed 64-bit hash of (seed, value): SplitMix64's output for the
// state seed * gamma + value (util::splitmix64 in search/util/random.h;
// Steele, Lea & Flood 2014, "Fast splittable pseudorandom number
// generators"). The same on every platform and build.
std::uint64_t mix_hash(std::uint64_t seed, std::uint64_t value);

}  // namespace hps::pruning
