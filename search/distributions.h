// Parameter distributions: the domain of one hyperparameter.
//
// Every distribution has an *internal* representation, a double, used by
// samplers, and an *external* value, the JSON value the objective sees:
//   float        internal = the value itself (linear scale; samplers apply
//                log themselves through is_log())
//   int          internal = the value itself, as a double
//   categorical  internal = index into choices (0 .. n-1)
//   ordinal      internal = index into values (0 .. n-1); neighbouring
//                indices are neighbouring values, so models over the index
//                share information between neighbours
// to_external() maps any double to a value that contains() accepts: it rounds
// to the step grid (or to the nearest integer index) and clamps into bounds,
// after rounding, so a quantized value is never below low nor above high.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "search/json_util.h"

namespace hps {

enum class DistributionKind { kFloat, kInt, kCategorical, kOrdinal };

// "float", "int", "categorical", "ordinal".
const char* to_string(DistributionKind kind);

class Distribution {
 public:
  // Float on [low, high]. log: sample on a log scale (needs low > 0, no step).
  // step: quantization; values are low + k*step <= high (a step that does not
  // divide the range is allowed: the largest value is the last grid point not
  // above high). low == high is a single-value distribution.
  // Throws ConfigError(path, rule) naming the rule broken: "low <= high",
  // "log scale needs low > 0", "log and step cannot be combined",
  // "step must be > 0", finite bounds, and at most 2^53 grid points (a step
  // too small for the range).
  static Distribution make_float(double low, double high, bool log = false,
                                 std::optional<double> step = std::nullopt,
                                 const std::string& path = "");
  // Integer on [low, high] with step >= 1 (default 1); log needs low >= 1 and
  // step 1. Bounds must lie within +-2^53 (they are stored as doubles).
  static Distribution make_int(std::int64_t low, std::int64_t high, bool log = false,
                               std::int64_t step = 1, const std::string& path = "");
  // Categorical over JSON scalars (null, bool, number, string); types are
  // kept exactly (1 and 1.0 and "1" and true are different choices).
  // Rejects empty choices, non-scalars and duplicates.
  static Distribution make_categorical(std::vector<Json> choices, const std::string& path = "");
  // Ordered values (JSON scalars); same rules as categorical.
  static Distribution make_ordinal(std::vector<Json> values, const std::string& path = "");

  // Parses {"type": "float"|"int"|"categorical"|"ordinal", ...} as in
  // space.json (keys low, high, log, step, choices, values). Unknown keys are
  // rejected (with "did you mean"). Throws ConfigError naming path.key.
  static Distribution from_json(const Json& spec, const std::string& path);
  // The same shape from_json() reads; round-trips exactly.
  Json to_json() const;

  DistributionKind kind() const { return kind_; }
  bool is_numeric() const {
    return kind_ == DistributionKind::kFloat || kind_ == DistributionKind::kInt;
  }
  // Categorical or ordinal: internal value is an index.
  bool is_indexed() const { return !is_numeric(); }
  double low() const { return low_; }    // numeric only
  double high() const { return high_; }  // numeric only
  bool is_log() const { return log_; }
  // Step of the grid; 0 when continuous (float without step).
  double step() const { return step_; }
  // Largest value on the grid (== high when step divides the range).
  double grid_high() const { return grid_high_; }
  const std::vector<Json>& choices() const { return choices_; }  // indexed only
  // Number of distinct values; 0 means infinitely many (continuous float).
  std::uint64_t cardinality() const;
  bool single_value() const;

  // Maps any finite internal double to a valid external value (rounds and
  // clamps; NaN maps to low / index 0). Always contains(result) == true.
  Json to_external(double internal) const;
  // External value to internal. Throws Error if !contains(value).
  double to_internal(const Json& value) const;
  // Whether `value` is a member of this distribution: right JSON type, in
  // bounds, on the grid; for indexed kinds, equal (type and value) to one of
  // the choices.
  bool contains(const Json& value) const;
  // Index of `value` among choices, or -1 (indexed kinds; exact type match).
  int index_of(const Json& value) const;

  // Same kind and parameters.
  bool operator==(const Distribution& other) const;

 private:
  Distribution() = default;
  void finish_numeric();

  DistributionKind kind_ = DistributionKind::kFloat;
  double low_ = 0, high_ = 0, step_ = 0, grid_high_ = 0;
  bool log_ = false;
  std::vector<Json> choices_;
};

// Exact equality of two JSON scalars including their type: 1 != 1.0 != true.
// Integers compare by value whatever their JSON number type: a 3 stored as
// signed (number_integer, as Distribution::to_external gives an int param)
// equals a 3 read back as unsigned (number_unsigned, as a JSON parser or a
// storage gives it).
bool same_json_scalar(const Json& a, const Json& b);

// A hash consistent with same_json_scalar: scalars it calls equal hash
// equal (an integer hashes by its value, not its JSON number type; 0.0 and
// -0.0 hash equal). The one hash of param values: every duplicate check
// goes through it (hash_params in search_space.h). Not for arrays or
// objects (they hash by their dump).
std::size_t hash_json_scalar(const Json& value);

// Param name -> distribution, shared copy-on-write. Copies share one
// immutable std::map (a study's trials nearly always have the same
// distributions, so a store that loads 1,000,000 trials keeps one map, not
// one per trial: about 140 bytes and one allocation per param per trial
// saved). Reads have std::map's meaning and cost; a write (emplace,
// insert_or_assign, clear) to a map that another DistributionMap shares
// copies it first, so a copy never sees a later write to another copy.
// Not safe for concurrent writes to one object (as std::map); copies may be
// read and written from different threads.
class DistributionMap {
 public:
  using Map = std::map<std::string, Distribution>;
  using value_type = Map::value_type;
  using const_iterator = Map::const_iterator;
  using iterator = Map::const_iterator;

  DistributionMap() = default;
  DistributionMap(Map map);  // NOLINT(google-explicit-constructor): a map is one
  DistributionMap(std::initializer_list<value_type> init);

  // The map (an empty one when nothing was added).
  const Map& map() const;
  operator const Map&() const { return map(); }  // NOLINT(google-explicit-constructor)

  const_iterator begin() const { return map().begin(); }
  const_iterator end() const { return map().end(); }
  const_iterator find(const std::string& name) const { return map().find(name); }
  std::size_t count(const std::string& name) const { return map().count(name); }
  std::size_t size() const { return map().size(); }
  bool empty() const { return map().empty(); }
  // Throws std::out_of_range when `name` is absent (as std::map::at).
  const Distribution& at(const std::string& name) const { return map().at(name); }

  // std::map's emplace; copies a shared map first.
  template <typename... Args>
  std::pair<const_iterator, bool> emplace(Args&&... args) {
    auto [it, inserted] = writable().emplace(std::forward<Args>(args)...);
    return {it, inserted};
  }
  // As emplace; the hint is only a hint, ignored when the map is made or
  // copied first (the hint then points into another map).
  template <typename... Args>
  const_iterator emplace_hint(const_iterator hint, Args&&... args) {
    if (!map_ || shared()) return emplace(std::forward<Args>(args)...).first;
    return writable().emplace_hint(hint, std::forward<Args>(args)...);
  }
  std::pair<const_iterator, bool> insert_or_assign(const std::string& name,
                                                   const Distribution& distribution);
  void clear() { map_.reset(); }

  // Whether both use the very same map (a copy of the other, not written
  // since).
  bool shares_map_with(const DistributionMap& other) const { return map_ == other.map_; }

  friend bool operator==(const DistributionMap& a, const DistributionMap& b) {
    return a.map_ == b.map_ || a.map() == b.map();
  }
  friend bool operator!=(const DistributionMap& a, const DistributionMap& b) { return !(a == b); }

 private:
  bool shared() const { return map_ && map_.use_count() > 1; }
  Map& writable();  // the map, copied first if shared, made if absent

  std::shared_ptr<Map> map_;
};

}  // namespace hps
