// Which points of a search space were tried, and the untried ones of a
// finite space (private; not installed). Shared by every sampler's
// duplicate check (TpeSampler, RandomSampler), so that they all follow one
// rule and compare params one way (hps::same_params / hps::hash_params:
// an int read back from a storage as unsigned equals the signed int a
// sampler made).
//
// The rule: a point is tried, and no sampler suggests it again while a
// finite space has an untried point, when a trial with exactly those params
//   - is COMPLETE or RUNNING;
//   - is PRUNED (its configuration was judged not promising; running it
//     again would repeat the same curve);
//   - is FAIL, unless the failure was transient: a FAIL trial that was
//     queued again (system attr retried_as: a lost or stopped worker, an
//     interrupted run, a stale trial) leaves the point to its retry, which
//     is served from the queue (search/trial_lifecycle.h), never by a
//     sampler;
//   - is WAITING with those params enqueued (a queued retry or
//     Study::enqueue_trial): it will run them.
// When every point is tried the space is exhausted (SearchSpaceExhausted).
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <random>
#include <vector>

#include "search/sampler.h"

namespace hps::tried {

// A finite space with at most this many points is enumerated.
inline constexpr double kMaxEnumerate = 1e6;

// Whether trial `t` makes its params a tried point (the rule above).
bool counts_as_tried(const FrozenTrial& t);

// The tried points of a study.
class TriedPoints {
 public:
  TriedPoints() = default;
  TriedPoints(TriedPoints&&) = default;
  TriedPoints& operator=(TriedPoints&&) = default;
  // Hands its array back to this thread's pool (algorithms/buffer_pool.h).
  ~TriedPoints();
  // Room for n points (from this thread's pool: a sampler builds a set of
  // every trial's point per suggestion).
  void reserve(std::size_t n);
  // Adds a point; `params` must outlive this set. `hash`: hash_params(params).
  void add(const Params& params, std::size_t hash);
  void add(const Params& params) { add(params, hash_params(params)); }
  // Adds trial `t`'s point if counts_as_tried(*t) (a WAITING trial's
  // enqueued params are copied). `t` must outlive this set.
  void add_trial(const FrozenTrial& t);
  // Whether exactly the params `p` were tried (same_params). The first
  // kLinearQueries queries scan the points (a sampler asks once or a few
  // times per suggestion); later ones sort the points by hash once and
  // search them (an enumeration of a finite space asks up to
  // kMaxEnumerate times). So a set of n points costs O(n) to build, with no
  // allocation per point. Not for concurrent use (a query may sort).
  bool contains(const Params& p) const;
  std::size_t size() const { return points_.size(); }
  static constexpr std::size_t kLinearQueries = 8;

 private:
  struct Point {
    std::size_t hash;
    const Params* params;
  };
  mutable std::vector<Point> points_;
  mutable std::size_t queries_ = 0;
  mutable bool sorted_ = false;
  std::deque<Params> owned_;  // enqueued params of WAITING trials
};

// The tried points of ctx's trials, the trial being sampled left out.
TriedPoints tried_points(const SamplingContext& ctx);

// Number of points of the space's params not in `fixed` (an upper bound
// with conditions), or +inf when a param is continuous.
double space_size(const SearchSpace& space, const Params& fixed);

// An untried assignment of the (finite) space extending `fixed`, chosen
// uniformly with `rng` (reservoir sampling over an enumeration). Throws
// SearchSpaceExhausted ("search space exhausted: all N points were tried
// (COMPLETE, PRUNED, FAIL or RUNNING)") when every one is in `tried`.
Params untried_point(const SearchSpace& space, const Params& fixed, const TriedPoints& tried,
                     std::mt19937_64& rng);
// The same with "was this point tried?" answered by `is_tried` (a sampler's
// own index of the tried points).
Params untried_point(const SearchSpace& space, const Params& fixed,
                     const std::function<bool(const Params&)>& is_tried, std::mt19937_64& rng);

// Whether every value of `params` that `space` declares is from a finite
// distribution (int, stepped float, categorical, ordinal): only then can a
// draw repeat a point with a chance worth checking.
bool all_discrete(const SearchSpace& space, const Params& params);

}  // namespace hps::tried
