// libFuzzer target: protocol::decode() on any byte string (protocol/protocol.h).
//
// Checks, for every input:
//  - decode() and decode_disconnect_any_version() throw nothing but
//    ProtocolError (VersionMismatch included);
//  - decoding allocates at most kAllocFactor bytes per frame byte plus
//    kAllocSlack in all (counted by a sanitizer malloc hook), so a short
//    frame cannot make either side allocate what its length fields claim;
//  - a decoded message encodes to a frame of the same size, and that frame
//    decodes and encodes again to the same bytes.
// Run: make test-fuzz, or build/fuzz/tests/fuzz/fuzz_protocol CORPUS_DIR.
#include <sanitizer/allocator_interface.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/protocol.h"

namespace {

namespace protocol = hps::protocol;

constexpr std::size_t kAllocFactor = 64;
constexpr std::size_t kAllocSlack = 64 << 10;

// Bytes allocated while `armed` (a decode is running on this thread).
std::atomic<bool> armed{false};
std::atomic<std::size_t> allocated{0};

void on_malloc(const volatile void*, std::size_t size) {
  if (armed.load(std::memory_order_relaxed)) allocated.fetch_add(size, std::memory_order_relaxed);
}
void on_free(const volatile void*) {}

[[noreturn]] void fail(const char* what, std::size_t size) {
  std::fprintf(stderr, "fuzz_protocol: %s (frame of %zu bytes)\n", what, size);
  std::abort();
}

// Decodes `frame`, checking the allocation bound; nullopt on ProtocolError.
std::optional<protocol::Message> decode_counted(std::string_view frame) {
  std::optional<protocol::Message> out;
  allocated = 0;
  armed = true;
  try {
    out = protocol::decode(frame);
  } catch (const protocol::ProtocolError&) {
  }
  (void)protocol::decode_disconnect_any_version(frame);
  armed = false;
  if (allocated > kAllocFactor * frame.size() + kAllocSlack) {
    std::fprintf(stderr, "fuzz_protocol: decoding allocated %zu bytes\n", allocated.load());
    fail("decode allocated more than the frame allows", frame.size());
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view frame(reinterpret_cast<const char*>(data), size);
  std::optional<protocol::Message> message = decode_counted(frame);
  if (!message) return 0;

  // Round trip: the same size (every field has one encoding, except the
  // unused double of a Complete without a value), then a fixed point.
  std::string once = protocol::encode(*message);
  if (once.size() != frame.size()) fail("re-encoded frame has another size", size);
  std::optional<protocol::Message> again = decode_counted(once);
  if (!again) fail("a re-encoded frame does not decode", size);
  if (again->index() != message->index()) fail("message type changed on re-encoding", size);
  if (protocol::encode(*again) != once) fail("encode(decode(encode(m))) != encode(m)", size);
  return 0;
}
