#include "algorithms/pruner_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "search/util/random.h"

namespace hps::pruning {

bool is_better(StudyDirection direction, double a, double b) {
  return direction == StudyDirection::kMaximize ? a > b : a < b;
}

double better_of(StudyDirection direction, double a, double b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return is_better(direction, b, a) ? b : a;
}

std::optional<double> value_at(const FrozenTrial& trial, std::int64_t step) {
  auto it = trial.intermediate_values.find(step);
  if (it == trial.intermediate_values.end()) return std::nullopt;
  return it->second;
}

std::optional<double> best_value_up_to(const FrozenTrial& trial, StudyDirection direction,
                                       std::int64_t up_to) {
  std::optional<double> best;
  for (const auto& [step, value] : trial.intermediate_values) {
    if (step > up_to) break;
    if (std::isnan(value)) continue;
    best = best ? better_of(direction, *best, value) : value;
  }
  return best;
}

bool passes_warmup_and_interval(const FrozenTrial& trial, std::int64_t step,
                                std::int64_t n_warmup_steps, std::int64_t interval_steps) {
  if (step < n_warmup_steps) return false;
  if (interval_steps <= 1) return true;
  // Start of the interval holding `step`.
  std::int64_t start = n_warmup_steps + (step - n_warmup_steps) / interval_steps * interval_steps;
  // The previous report (the deepest step below `step`) must lie before it.
  auto it = trial.intermediate_values.lower_bound(step);
  if (it == trial.intermediate_values.begin()) return true;
  --it;
  return it->first < start;
}

double percentile(std::vector<double>& values, double q) {
  std::sort(values.begin(), values.end());
  const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  if (frac == 0.0 || lo == hi) return values[lo];
  return values[lo] + (values[hi] - values[lo]) * frac;
}

std::int64_t saturating_power(std::int64_t base, std::int64_t factor, std::int64_t exponent) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t result = base;
  for (std::int64_t i = 0; i < exponent; ++i) {
    if (result > kMax / factor) return kMax;
    result *= factor;
  }
  return result;
}

std::uint64_t mix_hash(std::uint64_t seed, std::uint64_t value) {
  return util::splitmix64(seed * util::kGoldenGamma + value);
}

}  // namespace hps::pruning
