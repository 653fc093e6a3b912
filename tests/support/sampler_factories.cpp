#include "tests/support/sampler_factories.h"

#include "algorithms/factory.h"

namespace hps::testsupport {

NamedSamplerFactory sampler_from_config(std::string name, Json config) {
  return NamedSamplerFactory{std::move(name),
                             [config](std::uint64_t seed) { return make_sampler(config, seed); }};
}

const std::vector<NamedSamplerFactory>& sampler_factories() {
  static const std::vector<NamedSamplerFactory> all = {
      sampler_from_config("random", Json{{"type", "random"}}),
      // TPE in every mode (algorithms/tpe_sampler.h).
      sampler_from_config("tpe", Json{{"type", "tpe"}, {"multivariate", false}}),
      sampler_from_config("tpe_multivariate", Json{{"type", "tpe"}, {"multivariate", true}}),
      sampler_from_config("tpe_group",
                          Json{{"type", "tpe"}, {"multivariate", true}, {"group", true}}),
      sampler_from_config("tpe_constant_liar",
                          Json{{"type", "tpe"}, {"multivariate", true}, {"constant_liar", true}}),
      sampler_from_config("tpe_univariate_liar_scott", Json{{"type", "tpe"},
                                                            {"multivariate", false},
                                                            {"constant_liar", true},
                                                            {"bandwidth", "scott"},
                                                            {"consider_endpoints", true},
                                                            {"weights", "uniform"}}),
  };
  return all;
}

}  // namespace hps::testsupport
