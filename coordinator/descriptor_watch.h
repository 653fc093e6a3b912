// DescriptorWatch: tells when this process is out of file descriptors, so
// that the coordinator says so instead of failing later with a misleading
// error ("unable to open database file").
//
// Every accepted connection costs the coordinator one descriptor, whether
// it is a worker or an idle TCP connection, and ZeroMQ accepts as long as
// the process has descriptors (it has no limit of its own). When none is
// left, ZeroMQ's accept fails with EMFILE and keeps failing, silently,
// until a connection closes; everything else of the coordinator goes on
// (its store is opened up front and SQLite needs no new file during a run:
// search/sqlite_storage.cpp). The watch probes once per interval whether
// one more descriptor can be had (a dup of a descriptor it keeps) and logs
// a warning when the process runs out (again at most every 30 s while it
// lasts) and a note when descriptors are free again.
#pragma once

#include <chrono>
#include <cstdint>

namespace hps {

class DescriptorWatch {
 public:
  // `interval`: how often poll() probes. Keeps one descriptor (/dev/null)
  // open for the probes; without it (open failed) poll() does nothing.
  explicit DescriptorWatch(std::chrono::milliseconds interval = std::chrono::milliseconds(1000));
  ~DescriptorWatch();
  DescriptorWatch(const DescriptorWatch&) = delete;
  DescriptorWatch& operator=(const DescriptorWatch&) = delete;

  // Probes if `interval` passed since the last probe; logs changes. Returns
  // whether the process was out of descriptors at the last probe.
  bool poll(std::chrono::steady_clock::time_point now);

  // Whether the last probe found no descriptor free.
  bool exhausted() const { return exhausted_; }
  // Probes that found no descriptor free, since construction.
  std::int64_t exhausted_probes() const { return exhausted_probes_; }

 private:
  int probe_fd_ = -1;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point next_probe_{};
  std::chrono::steady_clock::time_point last_warning_{};
  bool exhausted_ = false;
  std::int64_t exhausted_probes_ = 0;
};

}  // namespace hps
