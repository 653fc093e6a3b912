#include "tests/support/sampler_factories.h"

#include "algorithms/factory.h"

namespace hps::testsupport {

NamedSamplerFactory sampler_from_config(std::string name, Json config) {
  return NamedSamplerFactory{std::move(name), [config](std::uint64_t seed) {
                               return make_sampler(config, seed);
                             }};
}

const std::vector<NamedSamplerFactory>& sampler_factories() {
  static const std::vector<NamedSamplerFactory> all = {
      sampler_from_config("random", Json{{"type", "random"}}),
      // One line per sampler or mode, e.g.:
      // sampler_from_config("tpe_multivariate", Json{{"type", "tpe"}, {"multivariate", true}}),
  };
  return all;
}

}  // namespace hps::testsupport
