// libFuzzer target: a whole space.json text, read as `hpsearch run` reads it
// before any trial runs (cli/run_command.cpp): parse_json_text() (with its
// depth limit, search/json_util.h), StudyConfig::from_json(), then the
// sampler, pruner and objective factories.
//
// Checks, for every input:
//  - only hps::Error (ConfigError) is thrown: no nlohmann exception, no
//    std::out_of_range, no crash, no UB, no leak;
//  - a parsed document is never nested deeper than kMaxJsonDepth;
//  - an accepted space reads back from its own to_json() to the same JSON.
// Run: make test-fuzz, or build/fuzz/tests/fuzz/fuzz_space_json CORPUS_DIR.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "algorithms/factory.h"
#include "objectives/objective.h"
#include "search/errors.h"
#include "search/json_util.h"
#include "search/search_space.h"

namespace {

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
    (void)hps::make_sampler(config.sampler);
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
  } catch (const hps::Error&) {
  }
  return 0;
}
