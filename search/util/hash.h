// Small hash functions that give the same value on every platform, standard
// library and build (unlike std::hash). Private to hpsearch: not installed.
#pragma once

#include <cstdint>
#include <string_view>

namespace hps::util {

// 64-bit FNV-1a of the bytes of `bytes` (Fowler, Noll, Vo; offset basis
// 0xcbf29ce484222325, prime 0x100000001b3; IETF draft-eastlake-fnv,
// section 2). Not cryptographic; used where a hash of a name or a text seeds
// random numbers or is compared across processes (param names, a study's
// config). fnv1a64("") == 0xcbf29ce484222325, fnv1a64("a") ==
// 0xaf63dc4c8601ec8c, fnv1a64("foobar") == 0x85944171f73967e8.
constexpr std::uint64_t fnv1a64(std::string_view bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace hps::util
