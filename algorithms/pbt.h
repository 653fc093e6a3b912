// Population Based Training: the exploit and explore decisions, as pure
// functions of the members' latest reports (the coordinator runs them:
// coordinator/pbt.cpp; settings: search/pbt_options.h).
//
// Jaderberg et al. 2017, "Population Based Training of Neural Networks",
// arXiv:1711.09846. Section 3: a population of members trains at once;
// every `perturbation_interval` steps a member is judged (ready), and if it
// ranks in the bottom quantile of the population it *exploits* a member of
// the top quantile (truncation selection: copies its weights, here its
// checkpoint snapshot, and its hyperparameters) and *explores* (perturbs
// the copied hyperparameters by a random factor, or resamples them from the
// prior). Appendix A: the toy problem (tests/pbt_test.cpp). The quantile,
// resample probability and factors follow Ray Tune's
// PopulationBasedTraining (ceil(population * quantile) members, at most
// half of them).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "search/params.h"
#include "search/pbt_options.h"
#include "search/search_space.h"

namespace hps::pbt {

// A member's latest report: its value at its deepest reported step.
struct MemberReport {
  std::int64_t member = 0;  // the member's index, 0 .. population - 1
  std::int64_t step = 0;    // its deepest reported step (counted over its whole chain)
  double value = 0.0;       // the value reported there (NaN: ranks last)
};

// The bottom and top quantiles of `reports` (one per member; any order),
// as member indices, each of `quantile_size` members (fewer when fewer than
// 2 * quantile_size members reported: then both are empty, nothing is
// decided yet). Ranked by value in `direction` (NaN ranks worst; among
// equal values `judged`, if given, ranks last, the others by member index,
// the lower better). `top` is best first, `bottom` worst first.
struct Quantiles {
  std::vector<std::int64_t> top;
  std::vector<std::int64_t> bottom;
};
Quantiles quantiles(const std::vector<MemberReport>& reports, StudyDirection direction,
                    std::int64_t quantile_size, std::optional<std::int64_t> judged = std::nullopt);

// Whether a report of `step` is an interval boundary where `options` judge
// the member: a positive multiple of perturbation_interval below max_steps.
bool is_boundary(std::int64_t step, const PbtOptions& options);

// The exploit decision for `member` (asynchronous PBT: the coordinator
// passes each member's value at `member`'s step, or its newest before it):
// when it is in the bottom quantile of `reports` (ranked as `judged`: a
// member only as good as another counts as worse, so members that tie,
// as the paper's toy members do at every step, do not stall), the
// donor it copies, drawn uniformly from the top quantile with `rng`;
// nullopt otherwise (it keeps training). `reports` must hold `member`'s.
std::optional<std::int64_t> choose_donor(const std::vector<MemberReport>& reports,
                                         std::int64_t member, StudyDirection direction,
                                         const PbtOptions& options, std::mt19937_64& rng);

// Explore: the params of a new trial from the donor's `params`. For each
// param of `space` active given the params chosen so far (parents first):
//  - with probability options.resample_probability, or when the donor has
//    no value for it (a conditional param that becomes active), a value
//    drawn from its distribution (uniform; log-uniform on a log scale);
//  - else float and int: the value times a factor drawn uniformly from
//    options.perturbation_factors (on a log scale too: log(value) moves
//    by log(factor)), rounded to the step grid (ints: to an integer; when
//    rounding would leave an int unchanged it moves one step the factor's
//    way) and clamped within [low, high]. A float of 0 changes only by
//    resampling;
//  - ordinal: the neighbouring value, the next for a factor > 1, the
//    previous for a factor < 1, and inward at either end;
//  - categorical (no order): another choice, drawn uniformly.
// Inactive params are left out. Every value returned is contained in its
// distribution. Deterministic for a given `rng` state.
Params explore(const SearchSpace& space, const Params& params, const PbtOptions& options,
               std::mt19937_64& rng);

}  // namespace hps::pbt
