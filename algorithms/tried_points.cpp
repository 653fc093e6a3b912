#include "algorithms/tried_points.h"

#include <algorithm>
#include <limits>

#include "algorithms/buffer_pool.h"
#include "search/trial_lifecycle.h"
#include "search/util/random.h"

namespace hps::tried {

namespace {

// Visits every assignment of the (finite) space that extends `fixed`,
// calling visit(params) at each complete one.
template <typename Visit>
void enumerate(const SearchSpace& space, std::size_t index, Params& params, const Params& fixed,
               Visit& visit) {
  const auto& specs = space.params();
  while (index < specs.size() &&
         (fixed.count(specs[index].name) || !SearchSpace::is_active(specs[index], params)))
    ++index;
  if (index == specs.size()) {
    visit(params);
    return;
  }
  const ParamSpec& spec = specs[index];
  const std::uint64_t c = spec.distribution.cardinality();
  for (std::uint64_t k = 0; k < c; ++k) {
    double internal =
        spec.distribution.is_indexed()
            ? static_cast<double>(k)
            : spec.distribution.low() + static_cast<double>(k) * spec.distribution.step();
    params[spec.name] = spec.distribution.to_external(internal);
    enumerate(space, index + 1, params, fixed, visit);
  }
  params.erase(spec.name);
}

}  // namespace

bool counts_as_tried(const FrozenTrial& t) {
  switch (t.state) {
    case TrialState::kComplete:
    case TrialState::kRunning:
    case TrialState::kPruned:
      return true;
    case TrialState::kFail:
      return !t.was_retried();
    case TrialState::kWaiting:
      return true;
  }
  return false;
}

TriedPoints::~TriedPoints() { tpe::pool<Point>().give(points_); }

void TriedPoints::reserve(std::size_t n) {
  if (points_.capacity() >= n) return;
  std::vector<Point> more = tpe::pool<Point>().take(n);
  more.assign(points_.begin(), points_.end());
  tpe::pool<Point>().give(points_);
  points_ = std::move(more);
}

void TriedPoints::add(const Params& params, std::size_t hash) {
  points_.push_back({hash, &params});
  sorted_ = false;
}

void TriedPoints::add_trial(const FrozenTrial& t) {
  if (!counts_as_tried(t)) return;
  if (t.state != TrialState::kWaiting) {
    add(t.params);
    return;
  }
  Params enqueued = lifecycle::fixed_params_of(t);
  if (enqueued.empty()) return;
  owned_.push_back(std::move(enqueued));
  add(owned_.back());
}

bool TriedPoints::contains(const Params& p) const {
  const std::size_t hash = hash_params(p);
  if (!sorted_ && ++queries_ <= kLinearQueries) {
    for (const Point& q : points_)
      if (q.hash == hash && same_params(*q.params, p)) return true;
    return false;
  }
  if (!sorted_) {
    std::sort(points_.begin(), points_.end(),
              [](const Point& a, const Point& b) { return a.hash < b.hash; });
    sorted_ = true;
  }
  auto lo = std::lower_bound(points_.begin(), points_.end(), hash,
                             [](const Point& q, std::size_t h) { return q.hash < h; });
  for (auto it = lo; it != points_.end() && it->hash == hash; ++it)
    if (same_params(*it->params, p)) return true;
  return false;
}

TriedPoints tried_points(const SamplingContext& ctx) {
  TriedPoints tried;
  tried.reserve(ctx.trials.size());
  for (const TrialPtr& t : ctx.trials)
    if (t && t->number != ctx.trial.number) tried.add_trial(*t);
  return tried;
}

bool all_discrete(const SearchSpace& space, const Params& params) {
  for (const auto& spec : space.params())
    if (params.count(spec.name) && spec.distribution.cardinality() == 0) return false;
  return true;
}

double space_size(const SearchSpace& space, const Params& fixed) {
  double n = 1;
  for (const auto& spec : space.params()) {
    if (fixed.count(spec.name)) continue;
    std::uint64_t c = spec.distribution.cardinality();
    if (c == 0) return std::numeric_limits<double>::infinity();
    n *= static_cast<double>(c);
  }
  return n;
}

Params untried_point(const SearchSpace& space, const Params& fixed, const TriedPoints& tried,
                     std::mt19937_64& rng) {
  return untried_point(
      space, fixed, [&](const Params& p) { return tried.contains(p); }, rng);
}

Params untried_point(const SearchSpace& space, const Params& fixed,
                     const std::function<bool(const Params&)>& is_tried, std::mt19937_64& rng) {
  Params chosen;
  std::uint64_t untried = 0, total = 0;
  Params work = fixed;
  auto visit = [&](const Params& candidate) {
    ++total;
    if (is_tried(candidate)) return;
    ++untried;
    // Reservoir sampling: each untried point is chosen with equal chance.
    if (util::uniform01(rng) * static_cast<double>(untried) < 1.0) chosen = candidate;
  };
  enumerate(space, 0, work, fixed, visit);
  if (untried == 0) {
    std::string what = "search space exhausted: all ";
    what += std::to_string(total);
    what += " points were tried (COMPLETE, PRUNED, FAIL or RUNNING)";
    throw SearchSpaceExhausted(what);
  }
  return chosen;
}

}  // namespace hps::tried
