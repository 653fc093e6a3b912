// Builds samplers and pruners from the "sampler" and "pruner" sections of
// space.json. Errors name the field: "sampler.seed: must be an integer".
#pragma once

#include <memory>

#include "search/json_util.h"
#include "search/pruner.h"
#include "search/sampler.h"

namespace hps {

// {"type": "random", "seed": S}, {"type": "tpe", ...} with every option
// of TpeOptions::from_json() (algorithms/tpe_sampler.h), or {"type": "grid",
// "seed": S, "values": {...}, "max_points": N} (GridOptions::from_json(),
// algorithms/grid_sampler.h).
// `seed_override` replaces the seed (the CLI's --seed). Throws ConfigError.
std::shared_ptr<Sampler> make_sampler(const Json& config,
                                      std::optional<std::uint64_t> seed_override = std::nullopt);

// The "pruner" section. Types and fields (defaults in parentheses; see each
// pruner's header for the rule it applies):
//   {"type": "none"}
//   {"type": "median", "n_startup_trials" (5), "n_warmup_steps" (0),
//    "interval_steps" (1), "n_min_trials" (1)}                 percentile_pruner.h
//   {"type": "percentile", "percentile" (required, 0..100), and the median
//    fields}                                                    percentile_pruner.h
//   {"type": "asha", "min_resource" (integer >= 1 or "auto"; "auto"),
//    "reduction_factor" (4), "min_early_stopping_rate" (0)}   successive_halving_pruner.h
//   {"type": "hyperband", "min_resource" (1), "max_resource" (required),
//    "reduction_factor" (3), "seed" (0)}                       hyperband_pruner.h
//   {"type": "threshold", "lower", "upper" (at least one), "n_warmup_steps" (0),
//    "interval_steps" (1)}                                      threshold_pruner.h
//   {"type": "patient", "patience" (required, >= 0), "min_delta" (0),
//    "wrapped_pruner" (optional, a pruner section)}           patient_pruner.h
// Throws ConfigError naming the field: "pruner.reduction_factor: must be >= 2",
// "pruner.wrapped_pruner.type: unknown type ...", unknown keys included.
std::shared_ptr<Pruner> make_pruner(const Json& config);

// The "sampler" section with every default resolved: the settings
// make_sampler(config, seed_override) builds the sampler with, as a section
// of the same form ({"type": "tpe", "n_startup_trials": "auto", "gamma":
// ..., ...}: each option's to_json()). A sampler without a seed has "seed":
// null (a seed is drawn from std::random_device each run). Throws
// ConfigError as make_sampler does.
Json resolved_sampler_section(const Json& config,
                              std::optional<std::uint64_t> seed_override = std::nullopt);

// The "pruner" section with every default resolved, as the pruner built by
// make_pruner(config) uses it ({"type": "median", "n_startup_trials": 5,
// "n_warmup_steps": 0, ...}; a patient pruner's wrapped_pruner resolved
// too; asha's unset min_resource as "auto"). Throws ConfigError as
// make_pruner does.
Json resolved_pruner_section(const Json& config);

}  // namespace hps
