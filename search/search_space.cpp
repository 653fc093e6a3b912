#include "search/search_space.h"

#include <algorithm>
#include <set>

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
    if (!parent) throw ConfigError(wpath, "unknown parent param '" + spec.condition->parent + "'");
    if (spec.condition->values.empty()) throw ConfigError(wpath, "needs at least one value");
    for (Json& v : spec.condition->values) {
      if (!parent->distribution.contains(v))
        throw ConfigError(
            wpath, "value " + v.dump() + " is not a possible value of '" + parent->name + "'");
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
      throw ConfigError(join_path(spath, "reference"), "must be > 0");
    if (spec.scale_with->rule != "sqrt" && spec.scale_with->rule != "linear")
      throw ConfigError(join_path(spath, "rule"),
                        "must be \"sqrt\" or \"linear\", got \"" + spec.scale_with->rule + "\"");
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

SearchSpace SearchSpace::from_json(const Json& space, const std::string& path) {
  if (!space.is_object()) throw ConfigError(path, "must be an object of params");
  // Parse every spec first, then add them parents-first.
  std::vector<ParamSpec> specs;
  for (const auto& [name, spec] : space.items()) {
    std::string ppath = join_path(path, name);
    ParamSpec p{name, Distribution::from_json(spec, ppath), std::nullopt, std::nullopt};
    if (auto w = spec.find("when"); w != spec.end()) {
      std::string wpath = join_path(ppath, "when");
      if (!w->is_object() || w->size() != 1)
        throw ConfigError(
            wpath, "must be an object with exactly one parent, like {\"optimizer\": \"sgd\"}");
      Condition c;
      c.parent = w->begin().key();
      const Json& vals = w->begin().value();
      if (vals.is_array()) {
        c.values.assign(vals.begin(), vals.end());
      } else {
        c.values.push_back(vals);
      }
      if (c.values.empty())
        throw ConfigError(join_path(wpath, c.parent), "needs at least one value");
      p.condition = std::move(c);
    }
    if (auto s = spec.find("scale_with"); s != spec.end()) {
      std::string spath = join_path(ppath, "scale_with");
      check_keys(*s, spath, {"param", "reference", "rule"});
      ScaleWith sw;
      sw.param = require_string(*s, spath, "param");
      sw.reference = require_number(*s, spath, "reference");
      sw.rule = optional_string(*s, spath, "rule").value_or("sqrt");
      p.scale_with = std::move(sw);
    }
    specs.push_back(std::move(p));
  }
  // nlohmann's object keeps keys sorted; keep that order, parents first.
  SearchSpace out;
  std::set<std::string> added;
  while (added.size() < specs.size()) {
    bool progress = false;
    for (auto& p : specs) {
      if (added.count(p.name)) continue;
      if (p.condition && !added.count(p.condition->parent)) {
        bool parent_exists = std::any_of(specs.begin(), specs.end(), [&](const ParamSpec& q) {
          return q.name == p.condition->parent;
        });
        if (!parent_exists)
          throw ConfigError(
              join_path(join_path(join_path(path, p.name), "when"), p.condition->parent),
              "unknown parent param '" + p.condition->parent + "'");
        continue;
      }
      out.add(p);
      added.insert(p.name);
      progress = true;
    }
    if (!progress) {
      for (auto& p : specs)
        if (!added.count(p.name))
          throw ConfigError(join_path(join_path(path, p.name), "when"),
                            "conditions form a cycle through '" + p.name + "'");
    }
  }
  for (const auto& p : out.params_) {
    if (!p.scale_with) continue;
    std::string spath = join_path(join_path(join_path(path, p.name), "scale_with"), "param");
    const ParamSpec* other = out.find(p.scale_with->param);
    if (!other) throw ConfigError(spath, "unknown param '" + p.scale_with->param + "'");
    if (other->distribution.is_indexed())
      for (const Json& v : other->distribution.choices())
        if (!v.is_number() || !(v.get<double>() > 0))
          throw ConfigError(spath, "'" + other->name + "' must take only positive numbers");
    if (other->distribution.is_numeric() && !(other->distribution.low() > 0))
      throw ConfigError(spath, "'" + other->name + "' must take only positive numbers");
  }
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
  throw ConfigError(path, "must be \"minimize\" or \"maximize\", got \"" + text + "\"");
}

namespace {

void require_type(const Json& doc, const char* section) {
  auto it = doc.find(section);
  if (it == doc.end()) return;
  if (!it->is_object()) throw ConfigError(section, "must be an object with a \"type\"");
  require_string(*it, section, "type");
}

}  // namespace

StudyConfig StudyConfig::from_json(const Json& doc) {
  if (!doc.is_object()) throw ConfigError("", "the top level of space.json must be an object");
  check_keys(doc, "", {"study", "sampler", "pruner", "budget", "objective", "space"});
  StudyConfig c;
  c.source = doc;
  auto study = doc.find("study");
  if (study == doc.end())
    throw ConfigError("study", "is required ({\"name\": ..., \"direction\": ...})");
  check_keys(*study, "study", {"name", "direction", "storage"});
  c.name = require_string(*study, "study", "name");
  if (c.name.empty()) throw ConfigError("study.name", "must not be empty");
  if (c.name.size() > kMaxStudyNameBytes)
    throw ConfigError("study.name", "must be at most " + std::to_string(kMaxStudyNameBytes) +
                                        " bytes, got " + std::to_string(c.name.size()));
  c.direction = parse_direction(optional_string(*study, "study", "direction").value_or("minimize"),
                                "study.direction");
  c.storage = optional_string(*study, "study", "storage").value_or(c.name + ".db");
  if (c.storage.empty()) throw ConfigError("study.storage", "must not be empty");

  require_type(doc, "sampler");
  require_type(doc, "pruner");
  if (doc.contains("sampler"))
    c.sampler = doc["sampler"];
  else
    c.sampler = Json{{"type", "random"}};
  if (doc.contains("pruner"))
    c.pruner = doc["pruner"];
  else
    c.pruner = Json{{"type", "none"}};

  if (auto b = doc.find("budget"); b != doc.end()) {
    check_keys(*b, "budget", {"n_trials", "timeout_s"});
    c.budget.n_trials = optional_int(*b, "budget", "n_trials");
    if (c.budget.n_trials && *c.budget.n_trials <= 0)
      throw ConfigError("budget.n_trials",
                        "must be > 0, got " + std::to_string(*c.budget.n_trials));
    c.budget.timeout_s = optional_number(*b, "budget", "timeout_s");
    if (c.budget.timeout_s && !(*c.budget.timeout_s > 0))
      throw ConfigError("budget.timeout_s", "must be > 0 (seconds)");
  }

  auto obj = doc.find("objective");
  if (obj == doc.end()) throw ConfigError("objective", "is required ({\"type\": ...})");
  require_type(doc, "objective");
  c.objective = *obj;

  auto space = doc.find("space");
  if (space == doc.end()) throw ConfigError("space", "is required (an object of params)");
  c.space = SearchSpace::from_json(*space, "space");
  return c;
}

StudyConfig StudyConfig::from_file(const std::string& file) {
  return from_json(read_json_file(file));
}

}  // namespace hps
