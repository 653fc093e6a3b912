// Builds samplers and pruners from the "sampler" and "pruner" sections of
// space.json. Errors name the field: "sampler.seed: must be an integer".
#pragma once

#include <memory>

#include "search/json_util.h"
#include "search/pruner.h"
#include "search/sampler.h"

namespace hps {

// {"type": "random", "seed": S} (more types as they are added).
// `seed_override` replaces the seed (the CLI's --seed). Throws ConfigError.
std::shared_ptr<Sampler> make_sampler(const Json& config,
                                      std::optional<std::uint64_t> seed_override = std::nullopt);

// {"type": "none"} (more types as they are added). Throws ConfigError.
std::shared_ptr<Pruner> make_pruner(const Json& config);

}  // namespace hps
