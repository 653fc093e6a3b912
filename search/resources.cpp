#include "search/resources.h"

#include <algorithm>
#include <cmath>

#include "search/errors.h"
#include "search/printable.h"

namespace hps {

namespace {

constexpr std::string_view kPath = "resources";

// An integer value of a size param, or nullopt for any other JSON value.
std::optional<std::int64_t> integer_of(const Json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 1e15)
      return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

// Checks that param `name` of `space` can size a trial: an int param, or
// an ordinal/categorical one whose values are all integers, each in [1,
// kMaxProcesses].
void check_size_param(const SearchSpace& space, const std::string& name) {
  const std::string field = "resources.processes.param";
  const ParamSpec* spec = space.find(name);
  if (!spec)
    throw ConfigError(field, "names no param of the space, got '" + printable_excerpt(name) + "'");
  const Distribution& d = spec->distribution;
  const std::string range = "[1, " + std::to_string(TrialResources::kMaxProcesses) + "]";
  if (d.kind() == DistributionKind::kFloat)
    throw ConfigError(field, "param '" + printable_excerpt(name) +
                                 "' is a float; the number of processes needs an int param or an "
                                 "ordinal/categorical param of integers");
  if (d.kind() == DistributionKind::kInt) {
    if (d.low() < 1 || d.grid_high() > TrialResources::kMaxProcesses)
      throw ConfigError(field, "param '" + printable_excerpt(name) + "' must have values in " +
                                   range + ", got [" +
                                   std::to_string(static_cast<std::int64_t>(d.low())) + ", " +
                                   std::to_string(static_cast<std::int64_t>(d.grid_high())) + "]");
    return;
  }
  for (const Json& c : d.choices()) {
    const std::optional<std::int64_t> n = integer_of(c);
    if (!n || *n < 1 || *n > TrialResources::kMaxProcesses)
      throw ConfigError(field, "param '" + printable_excerpt(name) +
                                   "': every value must be an integer in " + range + ", got " +
                                   quoted_value(c));
  }
}

}  // namespace

void TrialResources::validate() const {
  if (processes < 1 || processes > kMaxProcesses)
    throw ConfigError("resources.processes", "must be an integer from 1 to " +
                                                 std::to_string(kMaxProcesses) + ", got " +
                                                 std::to_string(processes));
  if (!(rendezvous_timeout_s > 0) || !std::isfinite(rendezvous_timeout_s))
    throw ConfigError("resources.rendezvous_timeout_s",
                      "must be > 0 (seconds)" + got_number(rendezvous_timeout_s));
}

TrialResources TrialResources::from_json(const Json& section, const SearchSpace& space) {
  TrialResources r;
  if (section.is_null()) return r;
  check_keys(section, kPath, {"processes", "rendezvous_timeout_s"});
  if (auto p = section.find("processes"); p != section.end()) {
    if (p->is_object()) {
      const std::string path = "resources.processes";
      check_keys(*p, path, {"param"});
      r.processes_param = require_string(*p, path, "param");
      check_size_param(space, r.processes_param);
    } else {
      r.processes = static_cast<int>(
          *optional_int_in(section, kPath, "processes", 1, kMaxProcesses, "{\"param\": NAME}"));
    }
  }
  if (auto t = optional_number(section, kPath, "rendezvous_timeout_s")) r.rendezvous_timeout_s = *t;
  r.validate();
  return r;
}

int TrialResources::size_of(const Params& params) const {
  if (processes_param.empty()) return processes;
  auto it = params.find(processes_param);
  if (it == params.end()) return 1;
  const std::optional<std::int64_t> n = integer_of(it->second);
  if (!n) return 1;
  return static_cast<int>(std::clamp<std::int64_t>(*n, 1, kMaxProcesses));
}

int TrialResources::max_size(const SearchSpace& space) const {
  if (processes_param.empty()) return processes;
  const ParamSpec* spec = space.find(processes_param);
  if (!spec) return 1;
  const Distribution& d = spec->distribution;
  std::int64_t most = 1;
  if (d.kind() == DistributionKind::kInt) {
    most = static_cast<std::int64_t>(d.grid_high());
  } else {
    for (const Json& c : d.choices())
      if (auto n = integer_of(c)) most = std::max(most, *n);
  }
  return static_cast<int>(std::clamp<std::int64_t>(most, 1, kMaxProcesses));
}

}  // namespace hps
