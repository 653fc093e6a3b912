#include "search/study_diff.h"

#include <fmt/format.h>

#include <algorithm>

#include "search/printable.h"
#include "search/search_space.h"

namespace hps {

namespace {

// The longest value change_text quotes in full.
constexpr std::size_t kMaxValueChars = 80;

const Json& member(const Json& object, const std::string& key) {
  static const Json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// The "space" section of `doc` as SearchSpace reads it (defaults dropped,
// numbers in their kind's type), or as written when it does not parse.
Json normalized_space(const Json& doc) {
  const Json& space = member(doc, "space");
  if (!space.is_object()) return space;
  try {
    return SearchSpace::from_json(space).to_json();
  } catch (const Error&) {
    return space;
  }
}

// Adds the differences of `stored` and `now` under `path`: two objects key
// by key, two arrays of one length element by element ("objective.argv[3]"),
// `depth` levels down; anything else as a whole.
void value_changes(const std::string& path, const Json& stored, const Json& now, int depth,
                   std::vector<SettingChange>& out) {
  if (stored == now) return;
  if (depth > 0 && stored.is_array() && now.is_array() && stored.size() == now.size()) {
    for (std::size_t i = 0; i < stored.size(); ++i)
      value_changes(path + "[" + std::to_string(i) + "]", stored[i], now[i], depth - 1, out);
    return;
  }
  if (depth > 0 && stored.is_object() && now.is_object()) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : stored.items()) keys.push_back(key);
    for (const auto& [key, value] : now.items())
      if (!stored.contains(key)) keys.push_back(key);
    std::sort(keys.begin(), keys.end());
    for (const std::string& key : keys)
      value_changes(join_path(path, key), member(stored, key), member(now, key), depth - 1, out);
    return;
  }
  out.push_back({path, stored, now});
}

// Adds the key-by-key differences of sections `stored` and `now` under
// `prefix` ("objective"), and below a key those of its elements or keys
// (value_changes); two sections that are not both objects compare as a
// whole. The space's params stay whole (param_text writes them).
void section_changes(const std::string& prefix, const Json& stored, const Json& now,
                     std::vector<SettingChange>& out) {
  if (stored == now) return;
  if (!stored.is_object() || !now.is_object()) {
    out.push_back({prefix, stored, now});
    return;
  }
  if (prefix != "space") {
    value_changes(prefix, stored, now, 4, out);
    return;
  }
  std::vector<std::string> keys;
  for (const auto& [key, value] : stored.items()) keys.push_back(key);
  for (const auto& [key, value] : now.items())
    if (!stored.contains(key)) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  for (const std::string& key : keys) {
    const Json& before = member(stored, key);
    const Json& after = member(now, key);
    if (before != after) out.push_back({join_path(prefix, key), before, after});
  }
}

std::string cut(const std::string& text) {
  if (text.size() <= kMaxValueChars) return printable(text);
  return printable(text.substr(0, kMaxValueChars)) + "...";
}

// A JSON value as change_text and param_text write it: a string in single
// quotes, anything else as its JSON text.
std::string value_text(const Json& value) {
  if (value.is_string()) return "'" + cut(value.get<std::string>()) + "'";
  // The shortest text that reads back the same, as Python writes it
  // ("0.0001", "1e-05", "0.25"), without a ".0" on whole numbers ("0").
  if (value.is_number_float()) return fmt::format("{}", value.get<double>());
  return cut(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::string list_text(const Json& values) {
  if (!values.is_array()) return value_text(values);
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + value_text(values[i]);
  return out + "]";
}

bool is_space_field(const std::string& field) { return field.rfind("space", 0) == 0; }

}  // namespace

std::vector<SettingChange> settings_changes(const Json& stored, const Json& now) {
  std::vector<SettingChange> out;
  if (!stored.is_object() || !now.is_object()) {
    if (stored != now) out.push_back({"settings", stored, now});
    return out;
  }
  const Json& stored_direction = member(member(stored, "study"), "direction");
  const Json& now_direction = member(member(now, "study"), "direction");
  // An absent direction is the default one.
  const Json before = stored_direction.is_null() ? Json("minimize") : stored_direction;
  const Json after = now_direction.is_null() ? Json("minimize") : now_direction;
  if (before != after) out.push_back({"study.direction", before, after});
  section_changes("space", normalized_space(stored), normalized_space(now), out);
  for (const char* section :
       {"objective", "sampler", "pruner", "budget", "warm_start", "artifacts"})
    section_changes(section, member(stored, section), member(now, section), out);
  return out;
}

std::vector<SettingChange> space_changes(const Json& stored, const Json& now) {
  std::vector<SettingChange> all = settings_changes(stored, now);
  std::vector<SettingChange> out;
  for (SettingChange& c : all)
    if (is_space_field(c.field)) out.push_back(std::move(c));
  return out;
}

std::string param_text(const Json& spec) {
  if (!spec.is_object()) return value_text(spec);
  const std::string type = member(spec, "type").is_string()
                               ? member(spec, "type").get<std::string>()
                               : value_text(member(spec, "type"));
  std::string out = printable(type);
  if (spec.contains("low") || spec.contains("high"))
    out += " [" + value_text(member(spec, "low")) + ", " + value_text(member(spec, "high")) + "]";
  if (member(spec, "log") == Json(true)) out += " log";
  if (const Json& step = member(spec, "step"); !step.is_null()) out += " step " + value_text(step);
  if (const Json& choices = member(spec, "choices"); !choices.is_null())
    out += " " + list_text(choices);
  if (const Json& values = member(spec, "values"); !values.is_null())
    out += " " + list_text(values);
  if (const Json& when = member(spec, "when"); when.is_object()) {
    std::string conditions;
    for (const auto& [parent, values] : when.items())
      conditions += (conditions.empty() ? "" : ", ") + printable(parent) +
                    (values.is_array() ? " in " + list_text(values) : " = " + value_text(values));
    out += " when " + conditions;
  } else if (!when.is_null()) {
    out += " when " + value_text(when);
  }
  if (const Json& scale = member(spec, "scale_with"); scale.is_object()) {
    const Json& rule = member(scale, "rule");
    out +=
        " scale_with " +
        (member(scale, "param").is_string() ? printable(member(scale, "param").get<std::string>())
                                            : value_text(member(scale, "param"))) +
        " (reference " + value_text(member(scale, "reference")) + ", " +
        (rule.is_string() ? printable(rule.get<std::string>()) : std::string("sqrt")) + ")";
  } else if (!scale.is_null()) {
    out += " scale_with " + value_text(scale);
  }
  return out;
}

std::string change_text(const SettingChange& change) {
  const bool param = change.field.rfind("space", 0) == 0 && change.field != "space";
  const auto text = [&](const Json& value) {
    return param ? param_text(value) : value_text(value);
  };
  const std::string field = printable(change.field);
  if (change.stored.is_null()) return field + ": added (" + text(change.now) + ")";
  if (change.now.is_null()) return field + ": removed (was " + text(change.stored) + ")";
  return field + ": " + text(change.stored) + " -> " + text(change.now);
}

std::string changes_text(const std::vector<SettingChange>& changes, const std::string& separator) {
  std::string out;
  for (const SettingChange& c : changes) out += (out.empty() ? "" : separator) + change_text(c);
  return out;
}

}  // namespace hps
