#include "algorithms/grid_sampler.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <utility>

#include "search/json_util.h"
#include "search/util/hash.h"
#include "search/util/random.h"

namespace hps {

namespace {

constexpr std::uint32_t kInactive = std::numeric_limits<std::uint32_t>::max();

// The values a param takes in the grid: the listed ones (checked against
// the distribution), or every value of a finite distribution.
std::vector<Json> axis_values(const ParamSpec& spec, const GridOptions& options) {
  const Distribution& d = spec.distribution;
  const std::string path = join_path("sampler.values", spec.name);
  if (auto it = options.values.find(spec.name); it != options.values.end()) {
    std::vector<Json> out;
    for (const Json& listed : it->second) {
      if (!d.contains(listed))
        throw ConfigError(path, "value " + quoted_value(listed) +
                                    " is not in the param's distribution " +
                                    quoted_value(d.to_json()));
      // An int param's value as an integer: 1.0 is the value 1 (listed
      // twice with 1, and stored as the int the param's trials hold).
      const Json v =
          d.kind() == DistributionKind::kInt ? d.to_external(d.to_internal(listed)) : listed;
      for (const Json& seen : out)
        if (same_json_scalar(seen, v))
          throw ConfigError(path, "lists the value " + quoted_value(listed) + " twice");
      out.push_back(v);
    }
    return out;
  }
  const std::uint64_t n = d.cardinality();
  if (n == 0)
    throw ConfigError(path,
                      "a continuous float param needs a list of values for the grid (or a "
                      "\"step\" in the space)");
  if (n > options.max_points)
    throw ConfigError(path, "the param has " + std::to_string(n) +
                                " values, more than sampler.max_points (" +
                                std::to_string(options.max_points) + "); list the values to try");
  std::vector<Json> out;
  out.reserve(n);
  if (d.is_indexed()) return d.choices();
  for (std::uint64_t k = 0; k < n; ++k) {
    // Grid points low + k*step (int: step 1 or more; log ints: every int).
    const double step = d.step() > 0 ? d.step() : 1.0;
    out.push_back(d.to_external(d.low() + static_cast<double>(k) * step));
  }
  return out;
}

}  // namespace

// The points of one grid: per param (in the space's order) its values, and
// per point the index of each param's value (kInactive when inactive).
// Points are found by their cells through an open-addressing table (a
// million points: 16 MB, no allocation per point).
struct GridSampler::Grid {
  std::vector<std::string> names;
  std::vector<std::vector<Json>> axes;
  std::vector<std::uint32_t> cells;  // n_points x names.size()
  std::vector<std::size_t> slots;    // point + 1 per used slot, 0 = free
  std::vector<std::size_t> order;    // the shuffled order in which points are tried

  std::size_t n_points() const { return names.empty() ? 0 : cells.size() / names.size(); }
  std::uint32_t cell(std::size_t point, std::size_t param) const {
    return cells[point * names.size() + param];
  }
  std::uint64_t hash_of(const std::uint32_t* first) const {
    std::uint64_t h = 0x67726964ULL;
    for (std::size_t i = 0; i < names.size(); ++i) h = util::splitmix64(h ^ first[i]);
    return h;
  }
  void add_point(const std::vector<std::uint32_t>& cell, std::uint64_t max_points) {
    if (n_points() >= max_points)
      throw ConfigError("sampler.max_points", "the grid has more than " +
                                                  std::to_string(max_points) +
                                                  " points; list fewer values per param");
    cells.insert(cells.end(), cell.begin(), cell.end());
  }
  // Fills `slots` once every point is added (at most half of them used).
  void index_points() {
    std::size_t size = 2;
    while (size < 2 * n_points()) size *= 2;
    slots.assign(size, 0);
    for (std::size_t point = 0; point < n_points(); ++point) {
      std::size_t at = hash_of(&cells[point * names.size()]) & (size - 1);
      while (slots[at] != 0) at = (at + 1) & (size - 1);
      slots[at] = point + 1;
    }
  }
  // The point whose cells are `cell`, if there is one.
  std::optional<std::size_t> find_point(const std::vector<std::uint32_t>& cell) const {
    if (slots.empty()) return std::nullopt;
    const std::size_t mask = slots.size() - 1;
    for (std::size_t at = hash_of(cell.data()) & mask; slots[at] != 0; at = (at + 1) & mask) {
      const std::size_t point = slots[at] - 1;
      if (std::equal(cell.begin(), cell.end(), &cells[point * names.size()])) return point;
    }
    return std::nullopt;
  }
  void shuffle(std::uint64_t seed) {
    order.resize(n_points());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    util::SplitMix64 rng(util::splitmix64(seed ^ 0x67726964ULL));  // "grid"
    for (std::size_t i = order.size(); i > 1; --i)                 // Fisher-Yates
      std::swap(order[i - 1], order[util::uniform_below(rng, i)]);
  }
  // The index of `value` among param i's values, if it is one of them.
  std::optional<std::uint32_t> index_on_axis(std::size_t i, const Json& value) const {
    const auto& axis = axes[i];
    auto pos = std::find_if(axis.begin(), axis.end(),
                            [&](const Json& v) { return same_json_scalar(v, value); });
    if (pos == axis.end()) return std::nullopt;
    return static_cast<std::uint32_t>(pos - axis.begin());
  }
  // The point `params` holds, if it holds one.
  std::optional<std::size_t> point_held(const Params& params) const {
    std::vector<std::uint32_t> cell(names.size(), kInactive);
    for (std::size_t i = 0; i < names.size(); ++i) {
      auto it = params.find(names[i]);
      if (it == params.end()) continue;
      auto k = index_on_axis(i, it->second);
      if (!k) return std::nullopt;
      cell[i] = *k;
    }
    return find_point(cell);
  }
  // Whether `point` agrees with the values fixed in `params` that are on
  // the grid (an off-grid fixed value constrains nothing here).
  bool agrees(std::size_t point, const Params& params) const {
    for (std::size_t i = 0; i < names.size(); ++i) {
      auto it = params.find(names[i]);
      if (it == params.end()) continue;
      auto k = index_on_axis(i, it->second);
      if (k && cell(point, i) != *k) return false;
    }
    return true;
  }
};

// What the trials of a study hold of a declared space's grid. A finished
// trial's params never change, so its point is looked up once (by trial id
// and number: a sampler shared by studies of different storages may see an
// id again); points before `cursor` in the order are all held by finished
// trials.
struct GridSampler::Taken {
  std::map<std::pair<std::int64_t, std::int64_t>, std::optional<std::size_t>> finished;
  std::vector<bool> by_finished;
  std::size_t cursor = 0;
};

namespace {

// The first point of `grid`'s order that no trial other than `self` holds
// and that agrees with `params`. Throws SearchSpaceExhausted when none is.
template <class Grid, class Taken>
std::size_t next_point(const Grid& grid, Taken& taken, const std::vector<TrialPtr>& trials,
                       std::int64_t self, const Params& params) {
  if (taken.by_finished.size() != grid.n_points()) taken.by_finished.assign(grid.n_points(), false);
  std::vector<std::size_t> held_now;  // by trials still RUNNING or WAITING
  for (const auto& t : trials) {
    if (t->trial_id == self) continue;
    if (!is_finished(t->state)) {
      if (auto p = grid.point_held(t->params)) held_now.push_back(*p);
      continue;
    }
    auto [it, added] = taken.finished.try_emplace({t->trial_id, t->number});
    if (!added) continue;
    it->second = grid.point_held(t->params);
    if (it->second) taken.by_finished[*it->second] = true;
  }
  while (taken.cursor < grid.order.size() && taken.by_finished[grid.order[taken.cursor]])
    ++taken.cursor;
  for (std::size_t i = taken.cursor; i < grid.order.size(); ++i) {
    const std::size_t p = grid.order[i];
    if (!taken.by_finished[p] && grid.agrees(p, params) &&
        std::find(held_now.begin(), held_now.end(), p) == held_now.end())
      return p;
  }
  throw SearchSpaceExhausted("search space exhausted: all " + std::to_string(grid.n_points()) +
                             " points of the grid were tried (any state) or are running");
}

}  // namespace

// The grid of define-by-run studies: the product of the listed values,
// never materialized. Point i of the order is (a*i + b) mod n (a coprime to
// n), its digits (mixed radix over the params) mapped through a seeded
// shuffle of each param's values.
struct GridSampler::ProductGrid {
  std::vector<std::string> names;
  std::vector<std::vector<Json>> axes;  // each param's values, shuffled
  std::uint64_t n = 1;
  std::uint64_t a = 1, b = 0;

  ProductGrid(const GridOptions& options, std::uint64_t seed) {
    if (options.values.empty())
      throw ConfigError("sampler.values",
                        "the grid sampler needs a declared search space, or the values of each "
                        "param in sampler.values for suggest calls");
    util::SplitMix64 rng(util::splitmix64(seed ^ 0x6462722d67726964ULL));  // "dbr-grid"
    for (const auto& [name, values] : options.values) {
      names.push_back(name);
      std::vector<Json> axis = values;
      for (std::size_t i = axis.size(); i > 1; --i)
        std::swap(axis[i - 1], axis[util::uniform_below(rng, i)]);
      if (n > (std::uint64_t{1} << 62) / axis.size())
        throw ConfigError("sampler.values", "the grid has more than 2^62 points");
      n *= axis.size();
      axes.push_back(std::move(axis));
    }
    b = util::uniform_below(rng, n);
    do {
      a = 1 + util::uniform_below(rng, n);
    } while (std::gcd(a, n) != 1);
  }
  std::uint64_t point_at(std::uint64_t i) const {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(a) * i + b) % n);
  }
  std::size_t digit(std::uint64_t point, std::size_t param) const {
    for (std::size_t k = 0; k < param; ++k) point /= axes[k].size();
    return static_cast<std::size_t>(point % axes[param].size());
  }
  // Whether `params` has a listed param.
  bool holds_any(const Params& params) const {
    return std::any_of(names.begin(), names.end(),
                       [&](const std::string& name) { return params.count(name) > 0; });
  }
  // Whether `point` agrees with every listed param `params` has.
  bool agrees(std::uint64_t point, const Params& params) const {
    for (std::size_t k = 0; k < names.size(); ++k) {
      const std::size_t size = axes[k].size();
      auto it = params.find(names[k]);
      if (it != params.end() && !same_json_scalar(axes[k][point % size], it->second)) return false;
      point /= size;
    }
    return true;
  }
};

GridOptions GridOptions::from_json(const Json& config, const std::string& path) {
  check_keys(config, path, {"type", "seed", "values", "max_points"});
  GridOptions o;
  o.seed = optional_seed(config, path);
  if (auto max = optional_int(config, path, "max_points")) {
    require_at_least(join_path(path, "max_points"), *max, 1);
    o.max_points = static_cast<std::uint64_t>(*max);
  }
  if (config.contains("values")) {
    const Json& values = config["values"];
    if (!values.is_object())
      throw ConfigError(path + ".values", "must be an object: param name -> array of values, got " +
                                              quoted_value(values));
    for (const auto& [name, list] : values.items()) {
      const std::string where = join_path(path + ".values", name);
      if (!list.is_array() || list.empty())
        throw ConfigError(where, "must be a non-empty array of scalars, got " + quoted_value(list));
      std::vector<Json> out;
      for (const Json& v : list) {
        if (v.is_structured())
          throw ConfigError(
              where, "must be a non-empty array of scalars, got an element " + quoted_value(v));
        out.push_back(v);
      }
      o.values.emplace(name, std::move(out));
    }
  }
  return o;
}

Json GridOptions::to_json() const {
  Json j = {{"type", "grid"}, {"max_points", max_points}, {"values", Json::object()}};
  for (const auto& [name, list] : values) j["values"][name] = list;
  if (seed) j["seed"] = *seed;
  return j;
}

GridSampler::GridSampler(GridOptions options)
    : options_(std::move(options)), seed_(options_.seed ? *options_.seed : util::entropy_seed()) {}

GridSampler::~GridSampler() = default;

std::shared_ptr<const GridSampler::Grid> GridSampler::grid_for(const SearchSpace& space) {
  std::string key = space.to_json().dump();
  if (grid_ && key == space_key_) return grid_;
  taken_ = std::make_unique<Taken>();
  for (const auto& [name, values] : options_.values)
    if (!space.find(name))
      throw ConfigError(join_path("sampler.values", name), "no param of that name in the space");
  auto grid = std::make_shared<Grid>();
  const auto& specs = space.params();
  for (const auto& spec : specs) {
    grid->names.push_back(spec.name);
    grid->axes.push_back(axis_values(spec, options_));
  }
  // Which values of its parent make each conditional param active
  // (SearchSpace::is_active on the parent's axis; parents come first).
  constexpr std::size_t kNoParent = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> parent(specs.size(), kNoParent);
  std::vector<std::vector<bool>> active_on(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].condition) continue;
    for (std::size_t p = 0; p < i; ++p)
      if (specs[p].name == specs[i].condition->parent) parent[i] = p;
    if (parent[i] == kNoParent) continue;  // never active (no such parent before it)
    for (const Json& v : grid->axes[parent[i]])
      active_on[i].push_back(SearchSpace::is_active(specs[i], Params{{specs[parent[i]].name, v}}));
  }
  auto is_active = [&](std::size_t i, const std::vector<std::uint32_t>& cell) {
    if (!specs[i].condition) return true;
    if (parent[i] == kNoParent || cell[parent[i]] == kInactive) return false;
    return static_cast<bool>(active_on[i][cell[parent[i]]]);
  };
  // Every active assignment, parents before children (the space's order).
  std::vector<std::uint32_t> cell(specs.size(), kInactive);
  auto visit = [&](auto& self, std::size_t i) -> void {
    if (i == specs.size()) {
      grid->add_point(cell, options_.max_points);
      return;
    }
    if (!is_active(i, cell)) {
      cell[i] = kInactive;
      self(self, i + 1);
      return;
    }
    const auto& axis = grid->axes[i];
    for (std::size_t k = 0; k < axis.size(); ++k) {
      cell[i] = static_cast<std::uint32_t>(k);
      self(self, i + 1);
    }
    cell[i] = kInactive;
  };
  if (!specs.empty()) visit(visit, 0);
  grid->index_points();
  grid->shuffle(seed_);
  grid_ = std::move(grid);
  space_key_ = std::move(key);
  return grid_;
}

void GridSampler::check_space(const SearchSpace& space) {
  if (space.empty()) return;
  std::lock_guard lock(mutex_);
  (void)grid_for(space);
}

std::uint64_t GridSampler::grid_size(const SearchSpace& space) {
  std::lock_guard lock(mutex_);
  return grid_for(space)->n_points();
}

void GridSampler::sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) {
  if (space.empty()) return;  // nothing to sample (sampler.values is not checked)
  // Params that fix every active param (a retry of a lost or interrupted
  // trial, enqueued with the params it had; a trial enqueued whole) are run
  // as given: the grid picks nothing, even for a point that a finished
  // trial holds (the interrupted trial itself).
  const bool all_fixed =
      std::all_of(space.params().begin(), space.params().end(), [&](const ParamSpec& spec) {
        return params.count(spec.name) > 0 || !SearchSpace::is_active(spec, params);
      });
  if (all_fixed) return;
  std::lock_guard lock(mutex_);
  std::shared_ptr<const Grid> grid = grid_for(space);
  const std::size_t point = next_point(*grid, *taken_, ctx.trials, ctx.trial.trial_id, params);
  for (std::size_t i = 0; i < space.params().size(); ++i) {
    const ParamSpec& spec = space.params()[i];
    if (params.count(spec.name) || !SearchSpace::is_active(spec, params)) continue;
    const std::uint32_t k = grid->cell(point, i);
    // Inactive in the point but active here: an off-grid fixed value changed
    // which params are active; such a param takes its first value.
    params[spec.name] = grid->axes[i][k == kInactive ? 0 : k];
  }
}

std::size_t GridSampler::take_define_by_run_point(const SamplingContext& ctx,
                                                  const ProductGrid& grid) {
  // Forget the points of trials that ended (their params now hold them);
  // the points of RUNNING trials are the ones noted here (their params may
  // not all be suggested yet).
  for (const auto& t : ctx.trials)
    if (is_finished(t->state)) dbr_points_.erase({t->trial_id, t->number});
  std::vector<const Params*> holders;
  for (const auto& t : ctx.trials)
    if (is_finished(t->state) && t->trial_id != ctx.trial.trial_id && grid.holds_any(t->params))
      holders.push_back(&t->params);
  auto taken = [&](std::uint64_t point) {
    for (const auto& [trial, p] : dbr_points_)
      if (p == point) return true;
    return std::any_of(holders.begin(), holders.end(),
                       [&](const Params* held) { return grid.agrees(point, *held); });
  };
  // Points before the cursor are taken (taken points stay taken); a point
  // that only disagrees with this trial's fixed values stays free for others.
  while (dbr_cursor_ < grid.n && taken(grid.point_at(dbr_cursor_))) ++dbr_cursor_;
  for (std::uint64_t i = dbr_cursor_; i < grid.n; ++i) {
    const std::uint64_t point = grid.point_at(i);
    if (grid.agrees(point, ctx.trial.params) && !taken(point)) return point;
  }
  throw SearchSpaceExhausted("search space exhausted: all " + std::to_string(grid.n) +
                             " points of the grid (sampler.values) were tried or are running");
}

double GridSampler::sample_independent(const SamplingContext& ctx, const std::string& name,
                                       const Distribution& distribution) {
  std::lock_guard lock(mutex_);
  if (!product_) product_ = std::make_shared<const ProductGrid>(options_, seed_);
  const ProductGrid& grid = *product_;
  auto pos = std::find(grid.names.begin(), grid.names.end(), name);
  if (pos == grid.names.end())
    throw Error("grid sampler: param '" + name +
                "' is not in sampler.values (list the values of every param suggested)");
  const auto param = static_cast<std::size_t>(pos - grid.names.begin());
  const auto me = std::make_pair(ctx.trial.trial_id, ctx.trial.number);
  auto mine = dbr_points_.find(me);
  if (mine == dbr_points_.end())
    mine = dbr_points_.emplace(me, take_define_by_run_point(ctx, grid)).first;
  const Json& value = grid.axes[param][grid.digit(mine->second, param)];
  if (!distribution.contains(value))
    throw ConfigError(join_path("sampler.values", name),
                      "value " + quoted_value(value) +
                          " is not in the distribution of the suggest "
                          "call " +
                          quoted_value(distribution.to_json()));
  return distribution.to_internal(value);
}

}  // namespace hps
