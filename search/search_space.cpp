#include "search/search_space.h"

#include <algorithm>
#include <functional>
#include <set>

#include "search/checkpoints.h"
#include "search/pbt_options.h"
#include "search/printable.h"
#include "search/resources.h"
#include "search/study_name.h"

namespace hps {

SearchSpace& SearchSpace::add(ParamSpec spec) {
  const std::string path = join_path("space", spec.name);
  if (spec.name.empty()) throw ConfigError("space", "param names must not be empty");
  if (find(spec.name)) throw ConfigError(path, "duplicate param name");
  if (spec.condition) {
    const ParamSpec* parent = find(spec.condition->parent);
    std::string wpath = join_path(join_path(path, "when"), spec.condition->parent);
    if (spec.condition->parent == spec.name)
      throw ConfigError(wpath, "a param cannot depend on itself");
    if (!parent)
      throw ConfigError(wpath,
                        "unknown parent param '" + printable_excerpt(spec.condition->parent) + "'");
    if (spec.condition->values.empty()) throw ConfigError(wpath, "needs at least one value");
    // A float without a step takes any real in [low, high]: a trial would
    // (almost) never draw the value named, and the param would never be
    // active. Its values can be named on a grid (a step), or when it has
    // one value (low = high).
    const Distribution& pd = parent->distribution;
    if (pd.kind() == DistributionKind::kFloat && pd.step() == 0 && !pd.single_value())
      throw ConfigError(wpath, "'" + printable_excerpt(parent->name) +
                                   "' is a float without a step, so a trial almost never draws " +
                                   quoted_value(spec.condition->values.front()) + " and '" +
                                   printable_excerpt(spec.name) +
                                   "' would never be active; condition on a categorical, ordinal "
                                   "or int param, or give '" +
                                   printable_excerpt(parent->name) + "' a step");
    for (Json& v : spec.condition->values) {
      if (!parent->distribution.contains(v))
        throw ConfigError(wpath, "value " + quoted_value(v) + " is not a possible value of '" +
                                     printable_excerpt(parent->name) + "'");
      // is_active() compares JSON types too: write a numeric value as the
      // parent's sampled values are (integers for int, floats on the grid
      // for float), so "when": {"n": 2.0} or {"scale": 1} can hold.
      if (parent->distribution.is_numeric())
        v = parent->distribution.to_external(parent->distribution.to_internal(v));
    }
  }
  if (spec.scale_with) {
    std::string spath = join_path(path, "scale_with");
    if (!spec.distribution.is_numeric())
      throw ConfigError(spath, "only float and int params can be scaled");
    if (!(spec.scale_with->reference > 0))
      throw ConfigError(join_path(spath, "reference"),
                        "must be > 0" + got_number(spec.scale_with->reference));
    if (spec.scale_with->rule != "sqrt" && spec.scale_with->rule != "linear")
      throw ConfigError(join_path(spath, "rule"), "must be \"sqrt\" or \"linear\", got \"" +
                                                      printable_excerpt(spec.scale_with->rule) +
                                                      "\"");
    if (spec.scale_with->param == spec.name)
      throw ConfigError(join_path(spath, "param"), "a param cannot scale with itself");
  }
  params_.push_back(std::move(spec));
  return *this;
}

const ParamSpec* SearchSpace::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

bool same_params(const Params& a, const Params& b) {
  if (a.size() != b.size()) return false;
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib)
    if (ia->first != ib->first || !same_json_scalar(ia->second, ib->second)) return false;
  return true;
}

std::size_t hash_params(const Params& params) {
  std::size_t h = params.size();
  for (const auto& [name, value] : params) {
    const std::size_t v = std::hash<std::string>{}(name)*31u + hash_json_scalar(value);
    h = (h ^ v) * 0x100000001b3ULL + 0x9E3779B97F4A7C15ULL;
  }
  return h;
}

bool SearchSpace::is_active(const ParamSpec& spec, const Params& params) {
  if (!spec.condition) return true;
  auto it = params.find(spec.condition->parent);
  if (it == params.end()) return false;
  for (const Json& v : spec.condition->values)
    if (same_json_scalar(v, it->second)) return true;
  return false;
}

std::string SearchSpace::check(const Params& params) const {
  for (const auto& [name, value] : params)
    if (!find(name)) return "param '" + name + "' is not in the search space";
  for (const auto& spec : params_) {
    auto it = params.find(spec.name);
    bool active = is_active(spec, params);
    if (active && it == params.end()) return "param '" + spec.name + "' is missing";
    if (!active && it != params.end())
      return "param '" + spec.name + "' is inactive (its condition on '" + spec.condition->parent +
             "' does not hold) but has a value";
    if (active && !spec.distribution.contains(it->second))
      return "param '" + spec.name + "': value " + it->second.dump() + " is not in " +
             spec.distribution.to_json().dump();
  }
  return "";
}

namespace {

// "when": {"parent": value or [values]} of the param at `ppath`.
Condition parse_condition(const Json& when, const std::string& ppath) {
  std::string wpath = join_path(ppath, "when");
  if (!when.is_object() || when.size() != 1)
    throw ConfigError(
        wpath, "must be an object with exactly one parent, like {\"optimizer\": \"sgd\"}, got " +
                   quoted_value(when));
  Condition c;
  c.parent = when.begin().key();
  const Json& vals = when.begin().value();
  if (vals.is_array()) {
    c.values.assign(vals.begin(), vals.end());
  } else {
    c.values.push_back(vals);
  }
  if (c.values.empty()) throw ConfigError(join_path(wpath, c.parent), "needs at least one value");
  return c;
}

// "scale_with": {"param": ..., "reference": ..., "rule": ...} of the param at
// `ppath` (its values are checked by SearchSpace::add()).
ScaleWith parse_scale_with(const Json& scale_with, const std::string& ppath) {
  std::string spath = join_path(ppath, "scale_with");
  check_keys(scale_with, spath, {"param", "reference", "rule"});
  ScaleWith sw;
  sw.param = require_string(scale_with, spath, "param");
  sw.reference = require_number(scale_with, spath, "reference");
  sw.rule = optional_string(scale_with, spath, "rule").value_or("sqrt");
  return sw;
}

// One param of the "space" object: its distribution, "when" and
// "scale_with".
ParamSpec parse_param(const std::string& name, const Json& spec, const std::string& path) {
  std::string ppath = join_path(path, name);
  ParamSpec p{name, Distribution::from_json(spec, ppath), std::nullopt, std::nullopt};
  if (auto w = spec.find("when"); w != spec.end()) p.condition = parse_condition(*w, ppath);
  if (auto s = spec.find("scale_with"); s != spec.end()) p.scale_with = parse_scale_with(*s, ppath);
  return p;
}

// Throws ConfigError unless `spec`'s parent is one of `specs`.
void check_parent_declared(const ParamSpec& spec, const std::vector<ParamSpec>& specs,
                           const std::string& path) {
  const std::string& parent = spec.condition->parent;
  bool declared =
      std::any_of(specs.begin(), specs.end(), [&](const ParamSpec& q) { return q.name == parent; });
  if (!declared)
    throw ConfigError(join_path(join_path(join_path(path, spec.name), "when"), parent),
                      "unknown parent param '" + printable_excerpt(parent) + "'");
}

// `specs` (in name order) added parents first, each pass adding those whose
// parent is in already. Throws ConfigError on an unknown parent or a cycle.
SearchSpace add_parents_first(const std::vector<ParamSpec>& specs, const std::string& path) {
  SearchSpace out;
  std::set<std::string> added;
  while (added.size() < specs.size()) {
    bool progress = false;
    for (const auto& p : specs) {
      if (added.count(p.name)) continue;
      if (p.condition && !added.count(p.condition->parent)) {
        check_parent_declared(p, specs, path);
        continue;
      }
      out.add(p);
      added.insert(p.name);
      progress = true;
    }
    if (progress) continue;
    for (const auto& p : specs)
      if (!added.count(p.name))
        throw ConfigError(join_path(join_path(path, p.name), "when"),
                          "conditions form a cycle through '" + printable_excerpt(p.name) + "'");
  }
  return out;
}

// Each "scale_with" names a param of `space` that takes only positive numbers.
void check_scale_with_params(const SearchSpace& space, const std::string& path) {
  for (const auto& p : space.params()) {
    if (!p.scale_with) continue;
    std::string spath = join_path(join_path(join_path(path, p.name), "scale_with"), "param");
    const ParamSpec* other = space.find(p.scale_with->param);
    if (!other)
      throw ConfigError(spath, "unknown param '" + printable_excerpt(p.scale_with->param) + "'");
    const Distribution& d = other->distribution;
    bool positive = d.is_numeric()
                        ? d.low() > 0
                        : std::all_of(d.choices().begin(), d.choices().end(), [](const Json& v) {
                            return v.is_number() && v.get<double>() > 0;
                          });
    if (!positive)
      throw ConfigError(spath,
                        "'" + printable_excerpt(other->name) + "' must take only positive numbers");
  }
}

}  // namespace

SearchSpace SearchSpace::from_json(const Json& space, const std::string& path) {
  if (!space.is_object())
    throw ConfigError(path, "must be an object of params, got " + quoted_value(space));
  // Parse every spec first, then add them parents-first.
  std::vector<ParamSpec> specs;
  for (const auto& [name, spec] : space.items()) specs.push_back(parse_param(name, spec, path));
  // nlohmann's object keeps keys sorted; keep that order, parents first.
  SearchSpace out = add_parents_first(specs, path);
  check_scale_with_params(out, path);
  return out;
}

Json SearchSpace::to_json() const {
  Json j = Json::object();
  for (const auto& p : params_) {
    Json d = p.distribution.to_json();
    if (p.condition) {
      Json vals =
          p.condition->values.size() == 1 ? p.condition->values[0] : Json(p.condition->values);
      d["when"] = Json{{p.condition->parent, vals}};
    }
    if (p.scale_with)
      d["scale_with"] = Json{{"param", p.scale_with->param},
                             {"reference", p.scale_with->reference},
                             {"rule", p.scale_with->rule}};
    j[p.name] = d;
  }
  return j;
}

const char* to_string(StudyDirection direction) {
  return direction == StudyDirection::kMaximize ? "maximize" : "minimize";
}

StudyDirection parse_direction(const std::string& text, const std::string& path) {
  if (text == "minimize") return StudyDirection::kMinimize;
  if (text == "maximize") return StudyDirection::kMaximize;
  const std::string best = nearest_name(text, {"minimize", "maximize"});
  throw ConfigError(path, "must be \"minimize\" or \"maximize\", got " + quoted_value(Json(text)) +
                              (best.empty() ? "" : " (did you mean \"" + best + "\"?)"));
}

namespace {

// The longest study.storage: Linux's PATH_MAX, with its NUL (a longer path
// cannot be opened: "File name too long").
constexpr std::size_t kMaxStoragePathBytes = 4095;

void require_type(const Json& doc, const char* section) {
  auto it = doc.find(section);
  if (it == doc.end()) return;
  if (!it->is_object())
    throw ConfigError(section, "must be an object with a \"type\", got " + quoted_value(*it));
  require_type_field(*it, section);
}

}  // namespace

WarmStartConfig WarmStartConfig::from_json(const Json& section) {
  if (!section.is_object())
    throw ConfigError("warm_start", "must be an object {\"storage\": FILE, \"study\": NAME}, got " +
                                        std::string(section.type_name()));
  check_keys(section, "warm_start", {"storage", "study"});
  WarmStartConfig w;
  if (!section.contains("storage"))
    throw ConfigError("warm_start.storage", "is required (the earlier study's SQLite file)");
  w.storage = require_string(section, "warm_start", "storage");
  if (w.storage.empty()) throw ConfigError("warm_start.storage", "must not be empty");
  w.study = optional_string(section, "warm_start", "study").value_or("");
  if (section.contains("study") && w.study.empty())
    throw ConfigError("warm_start.study", "must not be empty (omit it to take the only study)");
  return w;
}

void check_study_name(const std::string& name, const std::string& field) {
  if (name.empty()) throw ConfigError(field, "must not be empty");
  if (name.size() > kMaxStudyNameBytes)
    throw ConfigError(field, "must be at most " + std::to_string(kMaxStudyNameBytes) +
                                 " bytes, got " + std::to_string(name.size()));
  for (std::size_t at = 0; at < name.size(); ++at) {
    const auto u = static_cast<unsigned char>(name[at]);
    if (u < 0x20 || u == 0x7f)
      throw ConfigError(field, "must not contain control characters (" +
                                   printable(std::string_view(&name[at], 1)) + " at byte " +
                                   std::to_string(at) + ")");
  }
  for (std::size_t at = 0; at < name.size();) {
    const std::size_t len = utf8_sequence_length(name, at);
    if (len == 0)
      throw ConfigError(field, "must be valid UTF-8 (byte " + std::to_string(at) + " is not)");
    // A character that printable() escapes (a C1 control, a bidirectional
    // override or isolate, a zero-width character) would print as other
    // text than it is, or not at all.
    const std::string_view ch(name.data() + at, len);
    if (const std::string shown = printable(ch); shown != ch)
      throw ConfigError(
          field, "must not contain control, bidirectional or zero-width characters (" + shown +
                     " at byte " + std::to_string(at) + ")");
    at += len;
  }
}

std::string study_name_list(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < kMaxListedStudyNames; ++i)
    out += (i == 0 ? "'" : ", '") + printable_excerpt(names[i]) + "'";
  if (names.size() > kMaxListedStudyNames)
    out += ", ... (" + std::to_string(names.size() - kMaxListedStudyNames) + " more)";
  return out;
}

Json sampler_section(const Json& doc) {
  if (doc.is_object() && doc.contains("sampler")) return doc["sampler"];
  return Json{{"type", "random"}};
}

Budget Budget::from_json(const Json& section) {
  check_keys(section, "budget", {"n_trials", "timeout_s", "max_failed_trials", "fail_fast"});
  Budget b;
  b.n_trials = optional_int(section, "budget", "n_trials");
  if (b.n_trials && *b.n_trials <= 0)
    throw ConfigError("budget.n_trials", "must be > 0, got " + std::to_string(*b.n_trials));
  b.timeout_s = optional_number(section, "budget", "timeout_s");
  if (b.timeout_s && !(*b.timeout_s > 0))
    throw ConfigError("budget.timeout_s", "must be > 0 (seconds)" + got_number(*b.timeout_s));
  b.max_failed_trials = optional_int(section, "budget", "max_failed_trials");
  if (b.max_failed_trials && *b.max_failed_trials < 1)
    throw ConfigError("budget.max_failed_trials",
                      "must be >= 1, got " + std::to_string(*b.max_failed_trials));
  b.fail_fast = optional_bool(section, "budget", "fail_fast").value_or(true);
  return b;
}

StudyConfig StudyConfig::from_json(const Json& doc) {
  if (!doc.is_object())
    throw ConfigError(
        "", "the top level of space.json must be an object, got " + std::string(doc.type_name()));
  check_keys(doc, "",
             {"$schema", "study", "sampler", "pruner", "budget", "objective", "space", "warm_start",
              "artifacts", "resources", "scheduler"});
  // "$schema": the JSON Schema an editor checks the file with; ignored here.
  if (auto s = doc.find("$schema"); s != doc.end() && !s->is_string())
    throw ConfigError(
        join_path("", "$schema"),
        "must be a string (the path or URL of space.schema.json), got " + quoted_value(*s));
  StudyConfig c;
  c.source = doc;
  auto study = doc.find("study");
  if (study == doc.end())
    throw ConfigError("study", "is required ({\"name\": ..., \"direction\": ...})");
  check_keys(*study, "study", {"name", "direction", "storage"});
  c.name = require_string(*study, "study", "name");
  check_study_name(c.name, "study.name");
  c.direction = parse_direction(optional_string(*study, "study", "direction").value_or("minimize"),
                                "study.direction");
  c.storage = optional_string(*study, "study", "storage").value_or(c.name + ".db");
  if (c.storage.empty()) throw ConfigError("study.storage", "must not be empty");
  if (c.storage.size() > kMaxStoragePathBytes)
    throw ConfigError("study.storage", "must be at most " + std::to_string(kMaxStoragePathBytes) +
                                           " bytes (a file path or storage URL), got " +
                                           printable_excerpt(c.storage));

  require_type(doc, "sampler");
  require_type(doc, "pruner");
  c.sampler = sampler_section(doc);
  if (doc.contains("pruner"))
    c.pruner = doc["pruner"];
  else
    c.pruner = Json{{"type", "none"}};

  if (auto b = doc.find("budget"); b != doc.end()) c.budget = Budget::from_json(*b);

  auto obj = doc.find("objective");
  if (obj == doc.end()) throw ConfigError("objective", "is required ({\"type\": ...})");
  require_type(doc, "objective");
  c.objective = *obj;

  auto space = doc.find("space");
  if (space == doc.end()) throw ConfigError("space", "is required (an object of params)");
  c.space = SearchSpace::from_json(*space, "space");
  if (auto w = doc.find("warm_start"); w != doc.end())
    c.warm_start = WarmStartConfig::from_json(*w);
  if (auto a = doc.find("artifacts"); a != doc.end()) {
    checkpoints::ArtifactOptions::from_json(*a);  // throws ConfigError("artifacts.<field>")
    c.artifacts = *a;
  }
  if (auto r = doc.find("resources"); r != doc.end()) {
    TrialResources::from_json(*r, c.space);  // throws ConfigError("resources.<field>")
    c.resources = *r;
  }
  if (auto s = doc.find("scheduler"); s != doc.end() && !s->is_null()) {
    // throws ConfigError("scheduler.<field>"), or naming the section PBT rules out
    pbt_options_of(*s, c.space, c.pruner, c.artifacts, c.budget.n_trials.has_value());
    // read again from `source` (scheduler_section, search/pbt_options.h)
  }
  return c;
}

StudyConfig StudyConfig::from_file(const std::string& file) {
  return from_json(read_json_file(file));
}

}  // namespace hps
