// The samplers the sampler conformance suite (tests/sampler_conformance_test.cpp)
// runs over. Adding a sampler, or another mode of one, is one line in
// sampler_factories.cpp: every conformance test then runs on it too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "search/json_util.h"
#include "search/sampler.h"

namespace hps::testsupport {

struct NamedSamplerFactory {
  // Test name suffix: letters, digits and '_' only (GoogleTest's rule).
  std::string name;
  // A new sampler seeded with `seed` (same seed, same draws).
  std::function<std::shared_ptr<Sampler>(std::uint64_t seed)> make;
};

// A factory that builds the sampler from a space.json "sampler" section,
// e.g. {"type": "tpe", "n_startup_trials": 5}, through make_sampler() with
// the seed as override.
NamedSamplerFactory sampler_from_config(std::string name, Json config);

// Every sampler under test, in a fixed order.
const std::vector<NamedSamplerFactory>& sampler_factories();

}  // namespace hps::testsupport
