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
      // QMC (algorithms/qmc_sampler.h), both sequences, and as TPE's startup
      // design (scrambled: unscrambled points do not depend on the seed,
      // which SameSeedSameSequence asks for; tests/qmc_sampler_test.cpp
      // covers them).
      sampler_from_config("qmc_sobol", Json{{"type", "qmc"}}),
      sampler_from_config("qmc_halton", Json{{"type", "qmc"}, {"sequence", "halton"}}),
      sampler_from_config("tpe_sobol_startup", Json{{"type", "tpe"}, {"startup", "sobol"}}),
      // Grid (algorithms/grid_sampler.h): listed values for the continuous
      // and huge params (a declared space's grid) and for every param (the
      // define-by-run product grid), two or more per param so that every
      // param varies.
      sampler_from_config("grid", Json::parse(R"({"type": "grid", "values": {
        "f": [-3.0, 7.0], "f_log": [1e-05, 0.01], "f_step": [0.1, 0.7],
        "f_nondiv": [64.0, 224.0], "f_single": [0.5], "f_huge": [-1e308, 1e308],
        "i": [-5, 5], "i_log": [1, 1024], "i_step": [1, 5], "i_nondiv": [0, 9],
        "i_single": [7], "i_big": [-9007199254740992, 9007199254740992],
        "cat": [null, 1.0, "relu"], "cat_single": ["only"],
        "ord": [16, 128], "ord_str": ["low", "high"], "ord_single": [3.5],
        "opt": ["adam", "sgd", null], "momentum": [0.0, 0.9], "beta": [0.5, 0.9],
        "nesterov": [true, false], "dampening": [1, 4], "width2": [8, 64]}})")),
  };
  return all;
}

}  // namespace hps::testsupport
