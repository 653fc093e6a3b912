// The settings of Population Based Training (space.json "scheduler":
// {"type": "pbt", ...}; docs "Population Based Training"). The algorithm
// itself is algorithms/pbt.h; the coordinator runs it (coordinator/pbt.cpp).
//
// Jaderberg et al. 2017, "Population Based Training of Neural Networks",
// arXiv:1711.09846, section 3 (exploit and explore), with the settings of
// Ray Tune's PopulationBasedTraining (quantile, resample probability,
// perturbation factors, perturbation interval).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "search/json_util.h"
#include "search/params.h"

namespace hps {

class SearchSpace;

// The system attr of every trial of a PBT study: {"member": m (0 ..
// population - 1), "generation": g (0 for a member's first trial, +1 at
// each exploit), "parent": the trial it replaced or null, "donor": the
// trial whose snapshot it starts from or null, "start_step": that
// snapshot's step (0 for a first trial)}. A retry (lost worker, restart)
// carries its trial's attr. Set by the coordinator on the trial it ends:
// "exploited": {"step": S, "successor": N} (ended PRUNED at step S,
// continued by trial N) or "stopped": "max_steps" | "budget_steps" (ended
// COMPLETE with the value of its last reported step).
inline constexpr const char* kAttrPbt = "pbt";

// When exploits are decided.
enum class PbtMode {
  // Each member is judged alone when it reports an interval boundary (as
  // Ray Tune's default), against the other members' values at that step
  // (their newest before it for those behind; Ray Tune takes the newest,
  // which always ranks a member that just restarted from a snapshot
  // last): no member ever waits for another, so a slow member or worker
  // never idles the rest. The default.
  kAsync,
  // Members wait at each interval boundary until every running member has
  // reached it, then the bottom quantile is exploited at once (the paper's
  // synchronous variant): decisions compare values at the same step and do
  // not depend on timing, at the price of idle workers. Not implemented
  // yet: validate() refuses it.
  kSync,
};

// "async", "sync".
const char* to_string(PbtMode mode);

struct PbtOptions {
  // Members trained at once (the population). Required, >= 2. Each member
  // is a chain of trials; at most this many trials run at once.
  std::int64_t population = 0;
  // Exploit and explore are considered each time a member reports a step
  // that is a multiple of this (reported steps, >= 1, < max_steps).
  // Required. Short intervals copy checkpoints often; long ones let poor
  // members train longer.
  std::int64_t perturbation_interval = 0;
  // The steps each member trains (>= 1). Required. A member's trial that
  // reports step max_steps is stopped there and ends COMPLETE with that
  // step's value.
  std::int64_t max_steps = 0;
  // The fraction of the population in the bottom quantile (exploited) and
  // in the top quantile (donors): ceil(population * quantile), at most
  // half the population. In (0, 0.5]. Default 0.25.
  double quantile = 0.25;
  // The probability that explore draws a param anew from its distribution
  // rather than perturbing the donor's value. In [0, 1]. Default 0.25.
  double resample_probability = 0.25;
  // Explore multiplies a float or int param by one of these, chosen
  // uniformly (ints rounded, every value kept within the bounds; on a log
  // scale the factor applies to the value itself, so 0.8 and 1.2 move it by
  // about -22% and +18% of its log). At least one, each finite and > 0.
  // Default [0.8, 1.2].
  std::vector<double> perturbation_factors{0.8, 1.2};
  PbtMode mode = PbtMode::kAsync;
  // The most steps trained by the whole population (the sum over members),
  // >= 1. Once reached, each running member is stopped at its next report
  // and ends COMPLETE with that value. Default none: population *
  // max_steps.
  std::optional<std::int64_t> budget_steps{};
  // The seed of the exploit and explore draws (donor, factor, resample).
  // Default none: the sampler section's seed if it has one, else a random
  // one per run.
  std::optional<std::uint64_t> seed{};
  // Params of the first members, in order (the rest are drawn by the
  // study's sampler). At most `population`; each checked against the
  // search space as enqueued params are.
  std::vector<Params> initial_params{};

  // The number of members in the bottom (and in the top) quantile:
  // ceil(population * quantile), at most population / 2 and at least 1.
  std::int64_t quantile_size() const;

  // Throws ConfigError naming "scheduler.<field>" and the rule broken.
  void validate() const;

  // Parses the "scheduler" section of space.json (its "type" must be
  // "pbt"); `space`: the study's search space (initial_params are checked
  // against it). Throws ConfigError("scheduler.<field>", rule) for an
  // unknown key, a wrong type or a value out of range.
  static PbtOptions from_json(const Json& section, const SearchSpace& space);
};

// The "scheduler" section of a space.json document (StudyConfig::source),
// or null when it has none.
Json scheduler_section(const Json& doc);

// The PBT settings of a space.json document's parsed parts: nullopt when
// `scheduler` is null (no scheduler). Checks the rules across sections
// too: PBT needs checkpoints (artifacts.checkpoints not false), takes no
// pruner (pruner.type "none" or absent) and no budget.n_trials. Throws
// ConfigError naming the field.
std::optional<PbtOptions> pbt_options_of(const Json& scheduler, const SearchSpace& space,
                                         const Json& pruner, const Json& artifacts,
                                         bool has_n_trials);

}  // namespace hps
