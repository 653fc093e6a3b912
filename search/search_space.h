// SearchSpace: the declared params of a study, and StudyConfig: the whole
// space.json file (study, sampler, pruner, budget, objective, space,
// warm_start).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "search/distributions.h"
#include "search/json_util.h"
#include "search/params.h"

namespace hps {

// Params (search/params.h): external param values of one trial, by name.
// Inactive params are absent.

// Whether two trials' params are the same point: the same names, each value
// same_json_scalar-equal (so an int stored as signed equals the same int
// read back unsigned). The one comparison of every duplicate check.
bool same_params(const Params& a, const Params& b);
// A hash consistent with same_params (built on hash_json_scalar).
std::size_t hash_params(const Params& params);

// "when": {"parent": value or [values]}: the param is active only when the
// parent param is active and has one of `values` (compared by JSON type and
// value, so null, false, 0 and "0" are distinct). For a numeric parent,
// SearchSpace::add() rewrites each value as the parent's distribution gives
// it (to_external), so 2.0 matches an int parent's 2 and 1 a float's 1.0.
// A float parent needs a step (values on its grid can be drawn; any real in
// [low, high] almost never is) or low = high: SearchSpace::add() refuses a
// continuous one.
struct Condition {
  std::string parent;
  std::vector<Json> values;
};

// "scale_with": {"param": "batch_size", "reference": 64, "rule": "sqrt"}:
// the sampled value is a base value at `reference`; the value used is
// base * (param / reference)^p with p = 0.5 ("sqrt") or 1 ("linear").
struct ScaleWith {
  std::string param;
  double reference = 1.0;
  std::string rule = "sqrt";
  double exponent() const { return rule == "linear" ? 1.0 : 0.5; }
};

struct ParamSpec {
  std::string name;
  Distribution distribution;
  std::optional<Condition> condition;
  std::optional<ScaleWith> scale_with;
};

class SearchSpace {
 public:
  SearchSpace() = default;

  // Adds a param. Parents named by a condition must be added first (so the
  // order is always a valid sampling order). Throws ConfigError on a duplicate
  // name, an unknown parent, or a condition value the parent cannot take
  // (or almost never draws: a float parent without a step, Condition).
  SearchSpace& add(ParamSpec spec);
  SearchSpace& add(const std::string& name, Distribution distribution) {
    return add(ParamSpec{name, std::move(distribution), std::nullopt, std::nullopt});
  }

  // Parses the "space" object of space.json. Params may be listed in any
  // order; the result is in name order, moved so that parents come before
  // their children. Errors name "space.<param>.<field>"; a cycle of
  // conditions is an error.
  static SearchSpace from_json(const Json& space, const std::string& path = "space");
  Json to_json() const;

  // Params in sampling order (every parent before its children).
  const std::vector<ParamSpec>& params() const { return params_; }
  const ParamSpec* find(const std::string& name) const;
  bool empty() const { return params_.empty(); }
  std::size_t size() const { return params_.size(); }

  // Whether `spec` is active given the values sampled so far (parents first).
  static bool is_active(const ParamSpec& spec, const Params& params);

  // Checks that `params` is a valid assignment: every active param present
  // and contained in its distribution, no inactive or unknown param.
  // Returns an empty string when valid, else a message naming the param.
  std::string check(const Params& params) const;

 private:
  std::vector<ParamSpec> params_;
};

enum class StudyDirection { kMinimize, kMaximize };
const char* to_string(StudyDirection direction);
// "minimize" / "maximize"; throws ConfigError(path, "must be \"minimize\" or
// \"maximize\", got \"x\"") otherwise, with " (did you mean \"minimize\"?)" for a
// near miss such as "minimise" (nearest_name, json_util.h).
StudyDirection parse_direction(const std::string& text, const std::string& path);

// The budget of a study. Counts finished trials (COMPLETE, PRUNED, and FAIL
// that were not retried). The failure rules (max_failed_trials, fail_fast)
// count the trials of one run; coordinator/run_limits.h applies them.
struct Budget {
  std::optional<std::int64_t> n_trials{};  // default: none (run until timeout/stop)
  std::optional<double> timeout_s{};       // seconds of wall time per run; default none
  // A run dispatches no new trial once this many of its trials ended FAIL
  // (>= 1; default none: no limit).
  std::optional<std::int64_t> max_failed_trials{};
  // A run stops when its first min(5, n_trials) finished trials all ended
  // FAIL (the objective looks broken). Default true.
  bool fail_fast = true;

  // Parses the "budget" section of a space.json document (an object of the
  // fields above; n_trials > 0, timeout_s > 0 seconds, max_failed_trials >=
  // 1). Throws ConfigError naming the field ("budget.n_trials: must be > 0,
  // got -5"), or "budget: must be an object".
  static Budget from_json(const Json& section);
};

// The "warm_start" section of space.json: an earlier study whose COMPLETE
// trials enter the new study as prior observations (search/warm_start.h).
struct WarmStartConfig {
  // warm_start.storage (required, not empty): the earlier study's SQLite
  // file, a path or "sqlite:///PATH" (open_storage's URLs; not "memory").
  std::string storage;
  // warm_start.study: the earlier study's name; "" (the default) takes the
  // only study of `storage` (an error if it holds several).
  std::string study;

  // Parses {"storage": ..., "study": ...}. Throws ConfigError naming
  // "warm_start", "warm_start.storage" or "warm_start.study" (not an
  // object, an unknown key, a missing or empty storage, a non-string).
  static WarmStartConfig from_json(const Json& section);
};

// Longest study name accepted in space.json (bytes of UTF-8): names appear
// in file names, log directories and worker command lines.
inline constexpr std::size_t kMaxStudyNameBytes = 255;

// The "sampler" section of a space.json document `doc`, or the default
// sampler's, {"type": "random"}, when it has none (not validated: the
// caller builds the sampler, e.g. make_sampler, which raises ConfigError).
Json sampler_section(const Json& doc);

// The parsed space.json. Sections that later components interpret (sampler,
// pruner, objective) are kept as JSON and validated by their factories,
// which report errors under "sampler.", "pruner." and "objective.".
struct StudyConfig {
  std::string name;                                      // study.name (required, any UTF-8)
  StudyDirection direction = StudyDirection::kMinimize;  // study.direction
  std::string storage;                                   // study.storage; default "<name>.db";
                                                         // a relative path is relative to the
                                                         // current directory
  Json sampler = Json::object();                         // {"type": "random"|"tpe", ...}
  Json pruner = Json::object();                          // {"type": "none"|...}
  Budget budget;
  Json objective = Json::object();  // {"type": ..., ...}
  SearchSpace space;
  // warm_start: an earlier study to start from; nullopt (the default): none.
  std::optional<WarmStartConfig> warm_start{};
  // artifacts: checkpoint retention and limits (checkpoints::ArtifactOptions
  // in search/checkpoints.h reads it); null (the default): defaults.
  Json artifacts{};
  // resources: the processes (ranks) of each trial (search/resources.h;
  // TrialResources::from_json reads it); null (the default): one.
  Json resources{};
  Json source;  // the whole file as read

  // Parses and validates the structure of a whole space.json document.
  // Throws ConfigError naming the field ("space.lr.low: ..."). A top-level
  // "$schema" (a string: the JSON Schema the file follows, for editors;
  // search/space.schema.json) is accepted and ignored; any other type there
  // throws ConfigError("[\"$schema\"]", "must be a string ...") (the key
  // as join_path() writes it).
  static StudyConfig from_json(const Json& document);
  // read_json_file() + from_json().
  static StudyConfig from_file(const std::string& file);
};

}  // namespace hps
