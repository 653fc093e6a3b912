// Small hash functions that give the same value on every platform, standard
// library and build (unlike std::hash). Private to hpsearch: not installed.
#pragma once

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace hps::util {

// 64-bit FNV-1a of the bytes of `bytes` (Fowler, Noll, Vo; offset basis
// 0xcbf29ce484222325, prime 0x100000001b3; IETF draft-eastlake-fnv,
// section 2). Not cryptographic; used where a hash of a name or a text seeds
// random numbers or is compared across processes (param names, a study's
// config). fnv1a64("") == 0xcbf29ce484222325, fnv1a64("a") ==
// 0xaf63dc4c8601ec8c, fnv1a64("foobar") == 0x85944171f73967e8.
inline constexpr std::uint64_t kFnv1a64Basis = 0xcbf29ce484222325ULL;

// FNV-1a 64 continued from hash `h` over `bytes`: a stream's pieces in
// order, starting from kFnv1a64Basis, give fnv1a64 of the whole.
constexpr std::uint64_t fnv1a64_continue(std::uint64_t h, std::string_view bytes) noexcept {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

constexpr std::uint64_t fnv1a64(std::string_view bytes) noexcept {
  return fnv1a64_continue(kFnv1a64Basis, bytes);
}

// 64-bit XXH3 of `bytes` (xxHash by Yann Collet, Debian's libxxhash;
// specification: xxHash's doc/xxhash_spec.md, "XXH3"), seed 0. Not
// cryptographic; about 30x faster than fnv1a64 on large inputs: the
// checksums of checkpoint snapshots (their manifests) and of the pieces
// that travel between a worker and the coordinator. xxh3_64("") ==
// 0x2d06800538d394c2.
inline std::uint64_t xxh3_64(std::string_view bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

// xxh3_64 of bytes given in pieces: update() each piece in order, then
// digest() (which may be called at any time; it does not end the stream).
class Xxh3Stream {
 public:
  Xxh3Stream() noexcept { XXH3_64bits_reset(&state_); }
  void update(const void* data, std::size_t size) noexcept {
    XXH3_64bits_update(&state_, data, size);
  }
  std::uint64_t digest() const noexcept { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_{};
};

// `h` as 16 lower-case hex digits (the text form manifests store).
inline std::string hex64(std::uint64_t h) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace hps::util
