// GridSampler: every combination of the params' values, once each, in a
// seeded shuffled order (grid search; Bergstra & Bengio 2012, section 1,
// as the baseline random search is compared to; Optuna's GridSampler is
// the model for the behaviour).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "search/sampler.h"

namespace hps {

struct GridOptions {
  // The order in which the points are tried is a permutation drawn from
  // this seed (nullopt: std::random_device). The same seed gives the same
  // order on every platform, so a resumed study continues it.
  std::optional<std::uint64_t> seed;
  // Values of a param to try instead of all of its distribution's values,
  // by param name: required for a float param without a step (continuous),
  // optional for the others. Each value must be in the param's
  // distribution (checked when the grid is built).
  std::map<std::string, std::vector<Json>> values;
  // The most points a grid may have; a bigger one is refused when the grid
  // is built (ConfigError naming sampler.max_points).
  std::uint64_t max_points = 1'000'000;

  // Reads {"type": "grid", "seed": S, "values": {"lr": [0.001, 0.01]},
  // "max_points": N} (the "sampler" section of space.json). Throws
  // ConfigError naming the field (path.values.lr: "must be a non-empty
  // array of scalars", path.max_points: "must be >= 1").
  static GridOptions from_json(const Json& config, const std::string& path = "sampler");

  // The options as a "sampler" section, every default resolved, as a run
  // uses them ({"type": "grid", "max_points": 1000000, "values": {...}});
  // "seed" only when one is set (without one, each run draws its own).
  Json to_json() const;
};

// The grid of a declared search space is the set of its *active*
// assignments: for each param in the space's order, every value of the
// param (or of GridOptions::values) when the param is active given the
// values before it; an inactive conditional param adds no points. An int,
// stepped float, categorical or ordinal param contributes all its values; a
// float without a step needs GridOptions::values (ConfigError
// "sampler.values.NAME: a continuous float param needs a list of values ..."
// otherwise).
//
// sample() gives the trial the first point of the shuffled order that no
// other trial of the study holds (any state: a FAIL or PRUNED point is not
// tried again by the sampler; a lost trial is retried by the study's retry
// queue, not here) and that agrees with the params already fixed (enqueued
// values). When none is left it throws SearchSpaceExhausted: the study
// stops as done. Trials whose params are not a point of the grid (another
// space, enqueued values off the grid) take no point.
//
// Define-by-run (sample_independent, no declared space): the grid is the
// product of GridOptions::values (required: ConfigError otherwise), in a
// seeded order (an affine permutation of the point indices over values
// shuffled per param; not materialized, so max_points does not apply); the
// first suggest call of a trial picks its point, the later ones read it. A
// param not listed in values is an Error naming it. Conditional params are
// whatever the code suggests: a finished trial holds every point that
// agrees with the listed params it has (a trial that suggested none holds
// none).
//
// Cost per trial: a declared space's grid looks up each finished trial's
// point once (O(params)), then O(trials) per call; define-by-run checks
// the finished trials' params against each candidate (O(trials x params)).
// O(points) to build a declared space's grid, once per space. Thread-safe.
class GridSampler : public Sampler {
 public:
  explicit GridSampler(GridOptions options = {});
  ~GridSampler() override;

  void sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) override;
  double sample_independent(const SamplingContext& ctx, const std::string& name,
                            const Distribution& distribution) override;
  std::string name() const override { return "grid"; }
  // Builds the grid of `space` (kept for sample()): throws ConfigError as
  // described above (a continuous param without values, values of a param
  // the space lacks or outside its distribution, more than max_points).
  void check_space(const SearchSpace& space) override;

  // The number of points of the grid of `space` (building it: may throw
  // ConfigError as above). For messages and tests.
  std::uint64_t grid_size(const SearchSpace& space);

 private:
  struct Grid;
  struct ProductGrid;
  struct Taken;
  std::shared_ptr<const Grid> grid_for(const SearchSpace& space);
  std::size_t take_define_by_run_point(const SamplingContext& ctx, const ProductGrid& grid);

  GridOptions options_;
  std::uint64_t seed_;
  std::mutex mutex_;
  std::string space_key_;  // the space the cached grid was built for
  std::shared_ptr<const Grid> grid_;
  std::unique_ptr<Taken> taken_;
  std::shared_ptr<const ProductGrid> product_;
  // Define-by-run: the point each trial (by id and number) took, and how
  // far along the order every point is known to be taken.
  std::map<std::pair<std::int64_t, std::int64_t>, std::uint64_t> dbr_points_;
  std::uint64_t dbr_cursor_ = 0;
};

}  // namespace hps
