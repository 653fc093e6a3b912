// Whole writes to a file descriptor. Private to hpsearch: not installed.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace hps::util {

// Writes all `size` bytes of `data` to `fd`: at byte `offset` of the file
// (pwrite) when given, else at its file position (write). Retries after
// EINTR and short writes. Returns 0, or the errno of the write that failed
// (the file may then hold part of the bytes).
inline int write_all(int fd, const void* data, std::size_t size,
                     std::optional<std::uint64_t> offset = std::nullopt) noexcept {
  const auto* p = static_cast<const char*>(data);
  for (std::size_t done = 0; done < size;) {
    const ssize_t w = offset
                          ? ::pwrite(fd, p + done, size - done, static_cast<off_t>(*offset + done))
                          : ::write(fd, p + done, size - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<std::size_t>(w);
  }
  return 0;
}

}  // namespace hps::util
