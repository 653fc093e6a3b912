// RandomSampler: independent uniform sampling (Bergstra & Bengio 2012,
// "Random Search for Hyper-Parameter Optimization").
#pragma once

#include <cstdint>
#include <optional>
#include <random>

#include "search/sampler.h"

namespace hps {

// Float params are drawn uniformly on [low, high] (log params uniformly in
// log space); stepped and int params uniformly over their grid points (each
// point equally likely, also on a log scale: uniform in log over the cells
// around the points); categorical and ordinal params uniformly over choices.
// Reproducible: a value is a function of (seed, trial number, param name)
// only, so the same seed gives the same trials whatever the order of the
// calls, the threads, or a restart: a resumed study continues the sequence
// of an uninterrupted run instead of repeating its first trials. The draws
// use the generator's bits only (SplitMix64 streams, 53-bit uniform
// doubles, Lemire's bounded integers), no std:: distribution, so a seed
// gives the same trials with every compiler and standard library (log-scale
// params also go through the C library's log and exp; tests pin the values:
// tests/random_sampler_test.cpp).
// No repeats in finite spaces (declared spaces, sample()): when every
// drawn value is from a finite distribution and the draw is a tried point
// (the rule of algorithms/tried_points.h: a COMPLETE, RUNNING, PRUNED or
// enqueued trial's params, or a FAIL trial's unless it was queued again as a
// retry), it is drawn again (streams salted by the attempt), and after
// kDuplicateRetries draws an untried point of the space is chosen
// uniformly; SearchSpaceExhausted when none is left. A failed or pruned
// configuration is thus never suggested again while untried points remain.
// A draw that repeats no tried point is the plain (seed, number, name) one.
// Define-by-run suggests (sample_independent) are not checked.
// Thread-safe (no mutable state).
class RandomSampler : public Sampler {
 public:
  // Draws before a finite space is enumerated for an untried point.
  static constexpr int kDuplicateRetries = 16;

  // seed: nullopt draws one from std::random_device.
  explicit RandomSampler(std::optional<std::uint64_t> seed = std::nullopt);

  // Samples every active param of `space` as sample_independent() would,
  // drawing again when a finite space's draw is a tried point (see above).
  // Throws SearchSpaceExhausted when a finite space has no untried point.
  void sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) override;

  double sample_independent(const SamplingContext& ctx, const std::string& name,
                            const Distribution& distribution) override;
  std::string name() const override { return "random"; }

  // The same draw, usable by other samplers with their own RNG (TPE's
  // startup trials): an internal value of `distribution`. Portable: the
  // same for the same generator state on every platform.
  static double draw(std::mt19937_64& rng, const Distribution& distribution);

 private:
  std::uint64_t seed_;
};

}  // namespace hps
