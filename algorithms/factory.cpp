#include "algorithms/factory.h"

#include "algorithms/random_sampler.h"

namespace hps {

namespace {

[[noreturn]] void unknown_type(const std::string& path, const std::string& type,
                               std::initializer_list<std::string_view> known) {
  std::string rule = "unknown type '" + type + "'";
  std::string best;
  std::size_t best_d = 99;
  std::string list;
  for (auto k : known) {
    std::size_t d = edit_distance(type, k);
    if (d < best_d) { best_d = d; best = std::string(k); }
    if (!list.empty()) list += ", ";
    list += k;
  }
  if (best_d <= std::max<std::size_t>(2, type.size() / 3)) rule += " (did you mean '" + best + "'?)";
  rule += "; known types: " + list;
  throw ConfigError(path + ".type", rule);
}

std::optional<std::uint64_t> read_seed(const Json& config, const std::string& path) {
  auto seed = optional_int(config, path, "seed");
  if (seed && *seed < 0) throw ConfigError(path + ".seed", "must be >= 0");
  if (seed) return static_cast<std::uint64_t>(*seed);
  return std::nullopt;
}

}  // namespace

std::shared_ptr<Sampler> make_sampler(const Json& config, std::optional<std::uint64_t> seed_override) {
  const std::string path = "sampler";
  std::string type = require_string(config, path, "type");
  if (type == "random") {
    check_keys(config, path, {"type", "seed"});
    auto seed = read_seed(config, path);
    if (seed_override) seed = seed_override;
    return std::make_shared<RandomSampler>(seed);
  }
  unknown_type(path, type, {"random"});
}

std::shared_ptr<Pruner> make_pruner(const Json& config) {
  const std::string path = "pruner";
  std::string type = require_string(config, path, "type");
  if (type == "none") {
    check_keys(config, path, {"type"});
    return std::make_shared<NopPruner>();
  }
  unknown_type(path, type, {"none"});
}

}  // namespace hps
