#include "coordinator/descriptor_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

namespace hps {

DescriptorWatch::DescriptorWatch(std::chrono::milliseconds interval) : interval_(interval) {
  probe_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

DescriptorWatch::~DescriptorWatch() {
  if (probe_fd_ >= 0) ::close(probe_fd_);
}

bool DescriptorWatch::poll(std::chrono::steady_clock::time_point now) {
  if (probe_fd_ < 0 || now < next_probe_) return exhausted_;
  next_probe_ = now + interval_;
  int fd = ::fcntl(probe_fd_, F_DUPFD_CLOEXEC, 0);
  const bool out = fd < 0 && (errno == EMFILE || errno == ENFILE);
  if (fd >= 0) ::close(fd);
  if (out) {
    ++exhausted_probes_;
    if (!exhausted_ || now - last_warning_ >= std::chrono::seconds(30)) {
      struct rlimit rl {};
      ::getrlimit(RLIMIT_NOFILE, &rl);
      spdlog::warn(
          "coordinator: out of file descriptors (limit {}, ulimit -n): new connections "
          "are not accepted until some close; the study goes on with the workers already "
          "connected. Too many idle or unknown connections? Raise the limit or close them.",
          rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_cur));
      last_warning_ = now;
    }
  } else if (exhausted_) {
    spdlog::info("coordinator: file descriptors are available again");
  }
  exhausted_ = out;
  return exhausted_;
}

}  // namespace hps
