// QmcSampler: quasi-Monte Carlo search, the points of a low-discrepancy
// sequence (Sobol or Halton) in place of independent random draws, so that
// a small budget covers the space more evenly than random search
// (Bergstra & Bengio 2012, section 5, "quasi-random" sets; Optuna's
// QMCSampler and SciPy's scipy.stats.qmc are the models for the behaviour).
//
// Sequences:
//   sobol   Sobol (1967) in base 2 with the direction numbers of Joe & Kuo,
//           "Constructing Sobol sequences with better two-dimensional
//           projections", SIAM J. Sci. Comput. 30, 2008, as Boost.Random
//           ships them (boost/random/sobol.hpp: up to 3,667 dimensions).
//           Point n is the n-th point of the sequence in gray-code order,
//           point 0 the origin (as scipy.stats.qmc.Sobol).
//   halton  Halton (1960): dimension d is the radical inverse of n in the
//           d-th prime base (2, 3, 5, ...). Any number of dimensions (the
//           points of high dimensions are less even).
// Scrambling (default on, as in SciPy): Sobol by a random linear matrix
// scramble and a random digital shift (Matousek 1998, "On the
// L2-discrepancy for anchored boxes", J. Complexity 14; Owen 2003,
// "Variance with alternative scramblings of digital nets", ACM TOMACS 13,
// section 2: the LMS + digital shift that SciPy uses); Halton by a random
// linear scramble of the digits per dimension and digit position, digit x
// -> (a x + c) mod b with random a in 1..b-1 and c in 0..b-1 (Matousek
// 1998, section 4; a subfamily of the random digit permutations of Owen
// 2017, "A randomized Halton algorithm in R", arXiv:1706.02808, that needs
// two numbers per digit instead of a table of b). A scrambled sequence keeps
// its evenness, is random as a whole (no point sits on the bounds by
// construction) and differs per seed; unscrambled, the points are the
// textbook ones and the seed does not matter.
//
// Dimensions: a declared space gives each param one dimension, the param's
// index in the space (conditional params included: an inactive param's
// coordinate is unused). Define-by-run suggest calls (no declared space)
// take the params of the study's first COMPLETE trial as the space, one
// dimension each in name order, as Optuna's QMCSampler does; a param
// outside it (and every param before a trial is COMPLETE) is drawn as
// RandomSampler would. Both are read from the history, so a restarted
// sampler uses the same dimensions.
//
// Trial n takes point n (its trial number), so a value is a function of
// (sequence, scramble, seed, trial number, dimension): the same on every
// platform, whatever the order of the calls, the threads or a restart; a
// resumed study continues the sequence.
//
// A coordinate u in [0, 1) becomes an internal value as RandomSampler's
// draws do (QmcSampler::from_unit): floats low + u (high - low), log floats
// on the log scale, stepped and int params over cells of equal width around
// their grid points, categorical and ordinal params over equal shares of
// [0, 1).
//
// No repeats in finite spaces (declared spaces, sample()): when every
// value is from a finite distribution and the point is a tried point (the
// rule of algorithms/tried_points.h), the trial is drawn as RandomSampler
// would (which draws again and then picks an untried point; it throws
// SearchSpaceExhausted when none is left). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/random_sampler.h"
#include "search/sampler.h"

namespace hps {

enum class QmcSequence { kSobol, kHalton };

// "sobol", "halton".
const char* to_string(QmcSequence sequence);
// Parses "sobol" or "halton"; throws ConfigError(path, ...) otherwise,
// listing the known names.
QmcSequence parse_qmc_sequence(const std::string& name, const std::string& path);

struct QmcOptions {
  QmcSequence sequence = QmcSequence::kSobol;
  // Randomize the sequence (see above). Default on.
  bool scramble = true;
  // Seed of the scrambling and of the duplicate fallback. nullopt means 0,
  // not a random seed: the scramble must be the same in every process that
  // samples the study (a resumed run, several coordinators), or the points
  // stop being one low-discrepancy sequence. Another seed gives another
  // scramble.
  std::optional<std::uint64_t> seed;

  // Reads {"type": "qmc", "sequence": "sobol"|"halton", "scramble": bool,
  // "seed": S} (the "sampler" section of space.json). Throws ConfigError
  // naming the field (path.sequence: "must be one of sobol, halton";
  // path.seed: "must be >= 0"; unknown keys).
  static QmcOptions from_json(const Json& config, const std::string& path = "sampler");

  // The options as a "sampler" section, every default resolved, as a run
  // uses them: {"type": "qmc", "sequence": "sobol", "scramble": true,
  // "seed": 0} (no seed reads as 0, see seed).
  Json to_json() const;
};

// The points of one scrambled or plain sequence: coordinates in [0, 1).
// Thread-safe.
class QmcPoints {
 public:
  // seed: the scrambling's (ignored when !scramble).
  QmcPoints(QmcSequence sequence, bool scramble, std::uint64_t seed);
  ~QmcPoints();
  QmcPoints(const QmcPoints&) = delete;
  QmcPoints& operator=(const QmcPoints&) = delete;

  // Coordinates 0 .. n_dims-1 of point `index` (index >= 0), each in
  // [0, 1). Throws ConfigError("sampler.sequence", ...) for a Sobol point of
  // more than 3,667 dimensions (Boost's table), naming halton as the way out.
  std::vector<double> point(std::uint64_t index, std::size_t n_dims);

  // The most dimensions of the sequence (Sobol: 3,667; Halton: 100,000, a
  // bound of this implementation).
  std::size_t max_dims() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class QmcSampler : public Sampler {
 public:
  explicit QmcSampler(QmcOptions options = {});

  // Fills every active param of `space` from point ctx.trial.number (see
  // above). Throws SearchSpaceExhausted when a finite space has no untried
  // point; ConfigError for a Sobol space of more than 3,667 params.
  void sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) override;
  // Coordinate of point ctx.trial.number in the dimension of `name` (see
  // above: the first COMPLETE trial's params), or a random draw.
  double sample_independent(const SamplingContext& ctx, const std::string& name,
                            const Distribution& distribution) override;
  std::string name() const override { return "qmc"; }
  // Refuses a space with more params than the sequence has dimensions.
  void check_space(const SearchSpace& space) override;

  // Point `number` of the sequence for `space`, without the duplicate
  // check: the active params not already in `params` are added (TPE's
  // startup design uses it, then checks duplicates its own way).
  void add_point(std::int64_t number, const SearchSpace& space, Params& params);

  // Maps u in [0, 1) to an internal value of `distribution` (see above).
  static double from_unit(const Distribution& distribution, double u);

 private:
  QmcOptions options_;
  std::uint64_t seed_;
  QmcPoints points_;
  RandomSampler fallback_;
};

}  // namespace hps
