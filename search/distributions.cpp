#include "search/distributions.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string_view>

#include "search/printable.h"

namespace hps {

namespace {

constexpr double kMaxExactInt = 9007199254740992.0;  // 2^53

std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

bool is_scalar(const Json& v) {
  return v.is_null() || v.is_boolean() || v.is_number() || v.is_string();
}

// Grid points are indexed by exact doubles: at most 2^53 steps.
constexpr double kMaxSteps = kMaxExactInt;

// Number of whole steps from low that stay <= high (float grids). A point
// within floating error of high counts: the tolerance is relative to the
// magnitude of the bounds (low + k*step is computed at that magnitude) and
// never more than a millionth of a step. Needs (high - low) / step <= 2^53.
std::uint64_t steps_in_range(double low, double high, double step) {
  double k = std::floor((high - low) / step);
  if (!(k >= 0)) k = 0;
  const double tol = std::min(std::max(std::fabs(low), std::fabs(high)) * 1e-12, step * 1e-6);
  if (low + (k + 1) * step <= high + tol) k += 1;
  while (k > 0 && low + k * step > high + tol) k -= 1;
  return static_cast<std::uint64_t>(k);
}

void check_choices(const std::vector<Json>& choices, const std::string& path, const char* what) {
  if (choices.empty()) throw ConfigError(path, std::string(what) + " must not be empty");
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (!is_scalar(choices[i]))
      throw ConfigError(path, std::string(what) + "[" + std::to_string(i) +
                                  "] must be a JSON scalar (null, bool, number or string), got " +
                                  choices[i].type_name());
    if (choices[i].is_number_float() && !std::isfinite(choices[i].get<double>()))
      throw ConfigError(path, std::string(what) + "[" + std::to_string(i) + "] must be finite");
    for (std::size_t j = 0; j < i; ++j)
      if (same_json_scalar(choices[i], choices[j]))
        throw ConfigError(path,
                          std::string(what) + " has a duplicate: " + quoted_value(choices[i]));
  }
}

}  // namespace

const char* to_string(DistributionKind kind) {
  switch (kind) {
    case DistributionKind::kFloat:
      return "float";
    case DistributionKind::kInt:
      return "int";
    case DistributionKind::kCategorical:
      return "categorical";
    case DistributionKind::kOrdinal:
      return "ordinal";
  }
  return "?";
}

bool same_json_scalar(const Json& a, const Json& b) {
  if (a.is_null() || b.is_null()) return a.is_null() && b.is_null();
  if (a.is_boolean() || b.is_boolean())
    return a.is_boolean() && b.is_boolean() && a.get<bool>() == b.get<bool>();
  if (a.is_string() || b.is_string())
    return a.is_string() && b.is_string() &&
           a.get_ref<const std::string&>() == b.get_ref<const std::string&>();
  if (a.is_number_float() != b.is_number_float()) return false;
  if (a.is_number_float()) return a.get<double>() == b.get<double>();
  if (a.is_number_integer() && b.is_number_integer()) {
    bool au = a.is_number_unsigned(), bu = b.is_number_unsigned();
    if (au && bu) return a.get<std::uint64_t>() == b.get<std::uint64_t>();
    if (!au && !bu) return a.get<std::int64_t>() == b.get<std::int64_t>();
    // Mixed signedness: equal only when both are non-negative and equal.
    std::int64_t s = au ? b.get<std::int64_t>() : a.get<std::int64_t>();
    std::uint64_t u = au ? a.get<std::uint64_t>() : b.get<std::uint64_t>();
    return s >= 0 && static_cast<std::uint64_t>(s) == u;
  }
  return a == b;
}

std::size_t hash_json_scalar(const Json& v) {
  // Each type gets its own salt so that, e.g., 1, true and "1" differ.
  constexpr std::size_t kMix = 0x9E3779B97F4A7C15ULL;
  if (v.is_null()) return 0x6E756C6CULL;
  if (v.is_boolean()) return v.get<bool>() ? 0x74727565ULL : 0x66616C73ULL;
  if (v.is_string()) return std::hash<std::string>{}(v.get_ref<const std::string&>()) ^ kMix;
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == 0.0) d = 0.0;  // -0.0 == 0.0
    return std::hash<double>{}(d)*31u + 0x666CULL;
  }
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    // An unsigned value that a signed one can hold hashes as that signed one.
    if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return std::hash<std::int64_t>{}(static_cast<std::int64_t>(u)) * 31u + 0x696EULL;
    return std::hash<std::uint64_t>{}(u)*31u + 0x756EULL;
  }
  if (v.is_number_integer())
    return std::hash<std::int64_t>{}(v.get<std::int64_t>()) * 31u + 0x696EULL;
  return std::hash<std::string>{}(v.dump());
}

Distribution Distribution::make_float(double low, double high, bool log, std::optional<double> step,
                                      const std::string& path) {
  if (!std::isfinite(low)) throw ConfigError(join_path(path, "low"), "must be finite");
  if (!std::isfinite(high)) throw ConfigError(join_path(path, "high"), "must be finite");
  if (low > high)
    throw ConfigError(path, "needs low <= high, got low = " + num(low) + ", high = " + num(high));
  if (log && step)
    throw ConfigError(join_path(path, "step"), "log scale and step cannot be combined");
  if (log && !(low > 0))
    throw ConfigError(join_path(path, "low"), "log scale needs low > 0, got low = " + num(low));
  if (step && !(std::isfinite(*step) && *step > 0))
    throw ConfigError(join_path(path, "step"), "must be > 0, got " + num(*step));
  if (step && !((high - low) / *step <= kMaxSteps))
    throw ConfigError(join_path(path, "step"),
                      "too small for the range: more than 2^53 grid points in [" + num(low) + ", " +
                          num(high) + "] with step " + num(*step));
  Distribution d;
  d.kind_ = DistributionKind::kFloat;
  d.low_ = low;
  d.high_ = high;
  d.log_ = log;
  d.step_ = step.value_or(0.0);
  d.finish_numeric();
  return d;
}

Distribution Distribution::make_int(std::int64_t low, std::int64_t high, bool log,
                                    std::int64_t step, const std::string& path) {
  // Compared as integers: 2^53 + 1 rounds to 2^53 as a double.
  constexpr std::int64_t kLimit = std::int64_t{1} << 53;
  auto in_range = [](std::int64_t v) { return v <= kLimit && v >= -kLimit; };
  if (!in_range(low))
    throw ConfigError(join_path(path, "low"), "must be within +-2^53, got " + std::to_string(low));
  if (!in_range(high))
    throw ConfigError(join_path(path, "high"),
                      "must be within +-2^53, got " + std::to_string(high));
  if (low > high)
    throw ConfigError(path, "needs low <= high, got low = " + std::to_string(low) +
                                ", high = " + std::to_string(high));
  if (step <= 0)
    throw ConfigError(join_path(path, "step"), "must be > 0, got " + std::to_string(step));
  if (log && step != 1)
    throw ConfigError(join_path(path, "step"), "log scale and step cannot be combined");
  if (log && low < 1)
    throw ConfigError(join_path(path, "low"),
                      "log scale needs low > 0, got low = " + std::to_string(low));
  Distribution d;
  d.kind_ = DistributionKind::kInt;
  d.low_ = static_cast<double>(low);
  d.high_ = static_cast<double>(high);
  d.log_ = log;
  d.step_ = static_cast<double>(step);
  d.finish_numeric();
  return d;
}

void Distribution::finish_numeric() {
  if (step_ > 0) {
    if (kind_ == DistributionKind::kInt) {
      auto lo = static_cast<std::int64_t>(low_), hi = static_cast<std::int64_t>(high_),
           st = static_cast<std::int64_t>(step_);
      const std::int64_t n_steps = (hi - lo) / st;  // whole steps that fit
      grid_high_ = static_cast<double>(lo + n_steps * st);
    } else {
      grid_high_ =
          std::min(high_, low_ + static_cast<double>(steps_in_range(low_, high_, step_)) * step_);
    }
  } else {
    grid_high_ = high_;
  }
}

Distribution Distribution::make_categorical(std::vector<Json> choices, const std::string& path) {
  check_choices(choices, join_path(path, "choices"), "choices");
  Distribution d;
  d.kind_ = DistributionKind::kCategorical;
  d.choices_ = std::move(choices);
  return d;
}

Distribution Distribution::make_ordinal(std::vector<Json> values, const std::string& path) {
  check_choices(values, join_path(path, "values"), "values");
  Distribution d;
  d.kind_ = DistributionKind::kOrdinal;
  d.choices_ = std::move(values);
  return d;
}

Distribution Distribution::from_json(const Json& spec, const std::string& path) {
  if (!spec.is_object())
    throw ConfigError(
        path, "must be an object like {\"type\": \"float\", \"low\": 0, \"high\": 1}, got " +
                  quoted_value(spec));
  std::string type = require_type_field(spec, path);
  if (type == "float") {
    check_keys(spec, path, {"type", "low", "high", "log", "step", "when", "scale_with"});
    double low = require_number(spec, path, "low");
    double high = require_number(spec, path, "high");
    bool log = optional_bool(spec, path, "log").value_or(false);
    auto step = optional_number(spec, path, "step");
    return make_float(low, high, log, step, path);
  }
  if (type == "int") {
    check_keys(spec, path, {"type", "low", "high", "log", "step", "when", "scale_with"});
    auto low = require_int(spec, path, "low");
    auto high = require_int(spec, path, "high");
    bool log = optional_bool(spec, path, "log").value_or(false);
    auto step = optional_int(spec, path, "step").value_or(1);
    return make_int(low, high, log, step, path);
  }
  if (type == "categorical" || type == "ordinal") {
    const char* key = type == "categorical" ? "choices" : "values";
    check_keys(spec, path, {"type", key, "when", "scale_with"});
    auto it = spec.find(key);
    if (it == spec.end()) throw ConfigError(join_path(path, key), "is required (an array)");
    if (!it->is_array())
      throw ConfigError(join_path(path, key), "must be an array, got " + quoted_value(*it));
    std::vector<Json> values(it->begin(), it->end());
    return type == "categorical" ? make_categorical(std::move(values), path)
                                 : make_ordinal(std::move(values), path);
  }
  std::string rule = "unknown type '" + printable_excerpt(type) + "'";
  std::string best;
  std::size_t best_d = 99;
  // A distance is at least the difference in length: a huge type (a store
  // edited by hand) is near none of them.
  for (const char* t : {"float", "int", "categorical", "ordinal"}) {
    if (type.size() > std::string_view(t).size() + 3) continue;
    std::size_t dd = edit_distance(type, t);
    if (dd < best_d) {
      best_d = dd;
      best = t;
    }
  }
  if (best_d <= 3) rule += " (did you mean '" + best + "'?)";
  rule += "; known types: float, int, categorical, ordinal";
  throw ConfigError(join_path(path, "type"), rule);
}

Json Distribution::to_json() const {
  Json j;
  j["type"] = to_string(kind_);
  switch (kind_) {
    case DistributionKind::kFloat:
      j["low"] = low_;
      j["high"] = high_;
      if (log_) j["log"] = true;
      if (step_ > 0) j["step"] = step_;
      break;
    case DistributionKind::kInt:
      j["low"] = static_cast<std::int64_t>(low_);
      j["high"] = static_cast<std::int64_t>(high_);
      if (log_) j["log"] = true;
      if (step_ != 1) j["step"] = static_cast<std::int64_t>(step_);
      break;
    case DistributionKind::kCategorical:
      j["choices"] = choices_;
      break;
    case DistributionKind::kOrdinal:
      j["values"] = choices_;
      break;
  }
  return j;
}

std::uint64_t Distribution::cardinality() const {
  if (is_indexed()) return choices_.size();
  if (kind_ == DistributionKind::kInt) {
    // Exact in integers (bounds are within +-2^53).
    auto lo = static_cast<std::int64_t>(low_), hi = static_cast<std::int64_t>(grid_high_),
         st = static_cast<std::int64_t>(step_);
    return static_cast<std::uint64_t>((hi - lo) / st) + 1;
  }
  if (step_ > 0) return steps_in_range(low_, grid_high_, step_) + 1;
  return low_ == high_ ? 1 : 0;
}

bool Distribution::single_value() const { return cardinality() == 1; }

Json Distribution::to_external(double internal) const {
  if (is_indexed()) {
    double n = static_cast<double>(choices_.size());
    double idx = std::isnan(internal) ? 0.0 : std::round(internal);
    idx = std::clamp(idx, 0.0, n - 1);
    return choices_[static_cast<std::size_t>(idx)];
  }
  double v = std::isnan(internal) ? low_ : std::clamp(internal, low_, high_);
  if (step_ > 0) {
    double kmax = std::round((grid_high_ - low_) / step_);
    double k = std::clamp(std::round((v - low_) / step_), 0.0, kmax);
    v = low_ + k * step_;
    v = std::clamp(v, low_, grid_high_);
  }
  if (kind_ == DistributionKind::kInt) return static_cast<std::int64_t>(v);
  return v;
}

int Distribution::index_of(const Json& value) const {
  for (std::size_t i = 0; i < choices_.size(); ++i)
    if (same_json_scalar(choices_[i], value)) return static_cast<int>(i);
  return -1;
}

bool Distribution::contains(const Json& value) const {
  if (is_indexed()) return index_of(value) >= 0;
  if (!value.is_number()) return false;
  double v = value.get<double>();
  if (!std::isfinite(v) || v < low_ || v > high_) return false;
  if (kind_ == DistributionKind::kInt) {
    if (value.is_number_float() && v != std::floor(v)) return false;
  }
  if (step_ > 0) {
    double k = (v - low_) / step_;
    double err = std::fabs(k - std::round(k));
    if (err > 1e-9 * std::max(1.0, std::fabs(k))) return false;
    if (v > grid_high_) return false;
  }
  return true;
}

double Distribution::to_internal(const Json& value) const {
  if (!contains(value))
    throw Error("value " + value.dump() + " is not in the " + std::string(to_string(kind_)) +
                " distribution " + to_json().dump());
  if (is_indexed()) return static_cast<double>(index_of(value));
  return value.get<double>();
}

bool Distribution::operator==(const Distribution& o) const {
  if (kind_ != o.kind_) return false;
  if (is_indexed()) {
    if (choices_.size() != o.choices_.size()) return false;
    for (std::size_t i = 0; i < choices_.size(); ++i)
      if (!same_json_scalar(choices_[i], o.choices_[i])) return false;
    return true;
  }
  return low_ == o.low_ && high_ == o.high_ && log_ == o.log_ && step_ == o.step_;
}

DistributionMap::DistributionMap(Map map)
    : map_(map.empty() ? nullptr : std::make_shared<Map>(std::move(map))) {}

DistributionMap::DistributionMap(std::initializer_list<value_type> init)
    : DistributionMap(Map(init)) {}

const DistributionMap::Map& DistributionMap::map() const {
  static const Map kEmpty;
  return map_ ? *map_ : kEmpty;
}

DistributionMap::Map& DistributionMap::writable() {
  if (!map_)
    map_ = std::make_shared<Map>();
  else if (map_.use_count() > 1)
    map_ = std::make_shared<Map>(*map_);
  return *map_;
}

std::pair<DistributionMap::const_iterator, bool> DistributionMap::insert_or_assign(
    const std::string& name, const Distribution& distribution) {
  auto [it, inserted] = writable().insert_or_assign(name, distribution);
  return {it, inserted};
}

}  // namespace hps
