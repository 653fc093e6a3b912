// Seeded random numbers that are the same on every platform and standard
// library. Private to hpsearch: not installed.
//
// The std:: engines (std::mt19937_64) are specified bit for bit, but the
// std:: distributions (uniform_real_distribution, normal_distribution,
// uniform_int_distribution, ...) are not: their outputs differ between
// libstdc++, libc++ and MSVC. Whatever hpsearch promises to reproduce from a
// seed (the random sampler's and TPE's trials, data splits) therefore draws
// with the functions below, which use the generator's bits only.
//
// Every draw takes a 64-bit uniform random bit generator `Rng` (min() == 0,
// max() == 2^64 - 1): SplitMix64 below or std::mt19937_64.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>

namespace hps::util {

// A generator of 64 uniformly random bits per call.
template <class Rng>
concept Bits64 = requires(Rng& rng) {
  { rng() } -> std::same_as<std::uint64_t>;
}
&&Rng::min() == 0 && Rng::max() == std::numeric_limits<std::uint64_t>::max();

// SplitMix64's increment: 2^64 / phi, rounded to odd (the "golden gamma").
inline constexpr std::uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// The SplitMix64 output for the state x + kGoldenGamma (Steele, Lea, Flood,
// "Fast Splittable Pseudorandom Number Generators", OOPSLA 2014, section 3;
// the constants of Vigna's splitmix64.c, David Stafford's "Mix13"). A
// bijection on 64-bit words whose outputs for nearby inputs look unrelated:
// used to mix seeds (seed, trial number, param) into a stream seed and as a
// 64-bit hash. splitmix64(x) == SplitMix64(x)(); splitmix64(0) ==
// 0xe220a8397b1dcdaf.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += kGoldenGamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The SplitMix64 generator (Steele, Lea, Flood 2014): one 64-bit word of
// state, so a stream per (trial, param) costs nothing to seed
// (std::mt19937_64 fills 312 words). Period 2^64. Meets
// UniformRandomBitGenerator. Seeded with 1234567 its first outputs are
// 6457827717110365317, 3203168211198807973, 9817491932198370423 (the
// reference splitmix64.c).
class SplitMix64 {
 public:
  using result_type = std::uint64_t;
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }
  constexpr result_type operator()() noexcept {
    const std::uint64_t x = state_;
    state_ += kGoldenGamma;
    return splitmix64(x);
  }

 private:
  std::uint64_t state_;
};

// A seed from std::random_device (64 bits from two 32-bit draws): for a
// sampler given no seed. Not reproducible by design.
inline std::uint64_t entropy_seed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

// A uniform double in [0, 1): the top 53 bits of one draw times 2^-53, so
// every multiple of 2^-53 in [0, 1) is equally likely (Vigna, "xoshiro /
// xoroshiro generators and the PRNG shootout", section "Generating uniform
// doubles in the unit interval"). One call of rng.
template <Bits64 Rng>
double uniform01(Rng& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// A uniform integer in [0, n), n >= 1 (n == 0 is treated as 1), without
// bias: Lemire, "Fast Random Integer Generation in an Interval", ACM TOMACS
// 29(1), 2019, algorithm 5 (the 128-bit product's high word; a draw whose
// low word falls below 2^64 mod n is rejected). Usually one call of rng; at
// most 2 expected. For a 64-bit generator this is the algorithm libstdc++
// (GCC >= 11) uses in std::uniform_int_distribution, so the values match it
// there.
template <Bits64 Rng>
std::uint64_t uniform_below(Rng& rng, std::uint64_t n) {
  if (n <= 1) return 0;
#if defined(__SIZEOF_INT128__)
  __extension__ using U128 = unsigned __int128;
  U128 product = static_cast<U128>(rng()) * n;
  auto low = static_cast<std::uint64_t>(product);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    while (low < threshold) {
      product = static_cast<U128>(rng()) * n;
      low = static_cast<std::uint64_t>(product);
    }
  }
  return static_cast<std::uint64_t>(product >> 64);
#else
  // The same algorithm with the 64 x 64 -> 128-bit product by halves.
  auto mul = [](std::uint64_t a, std::uint64_t b, std::uint64_t& lo) {
    const std::uint64_t a0 = a & 0xffffffffULL, a1 = a >> 32;
    const std::uint64_t b0 = b & 0xffffffffULL, b1 = b >> 32;
    const std::uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    const std::uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffULL) + (p10 & 0xffffffffULL);
    lo = (mid << 32) | (p00 & 0xffffffffULL);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  };
  std::uint64_t low = 0;
  std::uint64_t high = mul(rng(), n, low);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (low < threshold) high = mul(rng(), n, low);
  }
  return high;
#endif
}

// A uniform integer in [0, n), n >= 1 (n == 0 is treated as 1), without
// bias, by the modulo method of OpenBSD's arc4random_uniform: draws below
// 2^64 mod n are rejected so that the accepted range is a multiple of n,
// then r mod n. Slower than uniform_below() (a division per draw) and gives
// other values: kept for the seeded data split (objectives/idx.h
// split_indices), whose stored trial results depend on it.
template <Bits64 Rng>
std::uint64_t uniform_below_by_modulo(Rng& rng, std::uint64_t n) {
  if (n <= 1) return 0;
  const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

// A uniform double between low and high (low <= high, both finite):
// low + u (high - low) with u = uniform01(rng); when the width overflows
// (e.g. [-1e308, 1e308]) low (1 - u) + high u instead. Rounding may give
// high itself. One call of rng.
template <Bits64 Rng>
double uniform_real(Rng& rng, double low, double high) {
  const double u = uniform01(rng);
  const double width = high - low;
  if (!std::isfinite(width)) return low * (1 - u) + high * u;
  return low + u * width;
}

// A standard normal variate: Marsaglia's polar method (Marsaglia, Bray, "A
// Convenient Method for Generating Normal Variables", SIAM Review 6(3),
// 1964). Uses two uniform01() draws per try, 1.27 tries on average, and
// returns one of the pair (the other is dropped, so the result depends only
// on the draws of this call).
template <Bits64 Rng>
double standard_normal(Rng& rng) {
  for (;;) {
    const double u = 2.0 * uniform01(rng) - 1.0;
    const double v = 2.0 * uniform01(rng) - 1.0;
    const double s = u * u + v * v;
    if (s > 0 && s < 1) return u * std::sqrt(-2.0 * std::log(s) / s);
  }
}

// A categorical choice by weight: the index i of the first cumulative weight
// cumulative[i] > u, u = uniform01(rng), clamped to the last index (the
// cumulative weights are normalized, non-decreasing, ending at (about) 1).
// For equally likely choices use uniform_below(). `cumulative` must not be
// empty. One call of rng.
template <Bits64 Rng>
std::size_t weighted_index(Rng& rng, std::span<const double> cumulative) {
  const double u = uniform01(rng);
  const auto i = static_cast<std::size_t>(
      std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
  return std::min(i, cumulative.size() - 1);
}

}  // namespace hps::util
