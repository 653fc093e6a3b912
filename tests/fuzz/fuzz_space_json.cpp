// libFuzzer target: a whole space.json text, read as `hpsearch run` reads it
// before any trial runs (cli/run_command.cpp): parse_json_text() (with its
// depth limit, search/json_util.h), StudyConfig::from_json(), then the
// sampler, pruner and objective factories.
//
// Checks, for every input:
//  - only hps::Error (ConfigError) is thrown: no nlohmann exception, no
//    std::out_of_range, no crash, no UB, no leak;
//  - a parsed document is never nested deeper than kMaxJsonDepth;
//  - an accepted space reads back from its own to_json() to the same JSON;
//  - the configured sampler's first kTrials trials (with made-up values)
//    are valid assignments of the space (SearchSpace::check()).
// Run: make test-fuzz, or build/fuzz/tests/fuzz/fuzz_space_json CORPUS_DIR
// (FUZZ_VERBOSE=1 prints why a config was refused).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/factory.h"
#include "objectives/objective.h"
#include "search/errors.h"
#include "search/json_util.h"
#include "search/sampler.h"
#include "search/search_space.h"
#include "search/trial.h"

namespace {

// Trials sampled per accepted config: past the TPE startup trials when the
// config asks for few of them.
constexpr int kTrials = 8;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_space_json: %s\n", what);
  std::abort();
}

// Nesting depth of arrays and objects (a scalar is 0); stops counting past
// `limit` so that a too-deep document cannot exhaust the stack here.
std::size_t depth(const hps::Json& j, std::size_t limit) {
  if (!j.is_structured() || limit == 0) return j.is_structured() ? 1 : 0;
  std::size_t deepest = 0;
  for (const auto& child : j) deepest = std::max(deepest, depth(child, limit - 1));
  return deepest + 1;
}

// Samples kTrials trials one after another, each COMPLETE with a made-up
// value before the next, and checks every assignment against the space.
void sample_trials(const hps::StudyConfig& config, hps::Sampler& sampler) {
  std::vector<hps::TrialPtr> trials;
  for (int i = 0; i < kTrials; ++i) {
    auto trial = std::make_shared<hps::FrozenTrial>();
    trial->trial_id = i;
    trial->number = i;
    trial->state = hps::TrialState::kRunning;
    trials.push_back(trial);
    hps::Params params;
    hps::SamplingContext ctx{config.direction, trials, *trial};
    sampler.sample(ctx, config.space, params);
    if (std::string error = config.space.check(params); !error.empty()) {
      std::fprintf(stderr, "fuzz_space_json: trial %d: %s\n", i, error.c_str());
      fail("the sampler gave an assignment outside the space");
    }
    auto done = std::make_shared<hps::FrozenTrial>(*trial);
    done->params = params;
    for (const auto& [name, value] : params)
      done->distributions.emplace(name, config.space.find(name)->distribution);
    done->state = hps::TrialState::kComplete;
    done->value = static_cast<double>((i * 7) % 5) - 1.5;
    trials.back() = done;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  hps::Json doc;
  try {
    doc = hps::parse_json_text(text, "space.json");
  } catch (const hps::ConfigError&) {
    return 0;
  }
  if (depth(doc, hps::kMaxJsonDepth + 1) > hps::kMaxJsonDepth)
    fail("parse_json_text() accepted JSON deeper than kMaxJsonDepth");
  try {
    hps::StudyConfig config = hps::StudyConfig::from_json(doc);
    std::shared_ptr<hps::Sampler> sampler = hps::make_sampler(config.sampler);
    (void)hps::make_pruner(config.pruner);
    hps::validate_objective(config.objective, config.space);

    const hps::Json space = config.space.to_json();
    hps::SearchSpace back;
    try {
      back = hps::SearchSpace::from_json(space);
    } catch (const hps::Error& e) {
      std::fprintf(stderr, "fuzz_space_json: %s\n", e.what());
      fail("a space's to_json() does not read back");
    }
    if (back.to_json() != space) fail("a space's to_json() reads back to another space");
    sample_trials(config, *sampler);
  } catch (const hps::Error& e) {
    if (std::getenv("FUZZ_VERBOSE")) std::fprintf(stderr, "fuzz_space_json: %s\n", e.what());
  }
  return 0;
}
