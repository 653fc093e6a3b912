// How a child process ended, in words, for logs. Private to hpsearch: not
// installed.
#pragma once

#include <sys/wait.h>

#include <string>

namespace hps::util {

// A waitpid(2) status as "exited with status N", "killed by signal N", or
// "ended (status N)" for anything else.
inline std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "ended (status " + std::to_string(status) + ")";
}

}  // namespace hps::util
