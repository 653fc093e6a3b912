// What one TpeSampler call sees of the study (private; not installed): the
// observations in trial-number order with their ranks (COMPLETE trials by
// value; PRUNED ones by the value at their deepest step; with the constant
// liar, RUNNING trials as the worst), and the points already tried
// (algorithms/tried_points.h), for the duplicate check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "algorithms/tpe_cache.h"
#include "algorithms/tried_points.h"

namespace hps::tpe {

// Ranking key: lower is better. value is signed so that lower is better;
// tier 0 COMPLETE, 1 PRUNED, 2 liar; depth is minus the deepest step.
struct Rank {
  double value = std::numeric_limits<double>::infinity();
  int tier = 0;
  double depth = 0;
  std::int64_t number = 0;
};

// Whether a ranks before b (value, then tier, depth, trial number).
inline bool better(const Rank& a, const Rank& b) {
  if (a.value != b.value) return a.value < b.value;
  if (a.tier != b.tier) return a.tier < b.tier;
  if (a.depth != b.depth) return a.depth < b.depth;
  return a.number < b.number;
}

// One observation of this call, in trial-number order.
struct Observation {
  const FrozenTrial* trial = nullptr;
  std::ptrdiff_t slot = -1;  // -1: a RUNNING trial (a liar)
  bool finished = false;     // COMPLETE or PRUNED (else a liar)
  // 0: the study's own trial; k >= 1: a warm-start trial of the k-th
  // earlier study met (History::n_tasks).
  std::size_t task = 0;
  Rank rank;
};

// Everything a call needs from the history.
struct History {
  History() = default;
  History(History&&) = default;
  History& operator=(History&&) = default;
  // Hands obs and obs_of_slot back to this thread's pool (buffer_pool.h).
  ~History();

  std::vector<Observation> obs;
  // For each cache slot, the index of its observation in obs, or -1.
  std::vector<std::ptrdiff_t> obs_of_slot;
  std::size_t n_complete = 0;
  std::size_t n_finished = 0;
  // 1 + the number of earlier studies that warm-start trials come from.
  std::size_t n_tasks = 1;
  // The points tried (tried::counts_as_tried), for the duplicate check:
  // `tried` without a view; with one, the view's index (`index`, trial
  // `exclude` left out), kept up to date across calls.
  tried::TriedPoints tried;
  const ViewIndex* index = nullptr;
  std::int64_t exclude = 0;

  // Whether the params `p` were tried.
  bool is_taken(const Params& p) const {
    return index ? index->is_taken(p, exclude) : tried.contains(p);
  }
};

// The history of ctx's trials (the trial being sampled left out), scoring
// finished trials through `cache`; `liar`: RUNNING trials are observations.
// With ctx.view (and ctx.trials its trials) it is built from the cache's
// records of that view (ViewHistory, O(changes) to update) in one pass over
// compact records; otherwise from every trial (a slot lookup by trial id
// and the params hashed into `tried`, per trial). Both give the same
// History (observations, ranks, counts, tasks, tried points).
History prepare_history(const SamplingContext& ctx, TpeSampler::Cache& cache, bool liar);

}  // namespace hps::tpe
