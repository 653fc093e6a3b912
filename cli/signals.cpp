#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "cli/commands.h"
#include "objectives/child_process.h"

namespace hps::cli {

namespace {
std::atomic<bool> g_stop{false};
volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_announce = 1;

void on_signal(int sig) {
  if (g_signal != 0) {  // second signal: leave at once, with no program left behind
    hps::kill_child_process_groups();
    _exit(128 + sig);
  }
  g_signal = sig;
  g_stop.store(true);
  if (!g_announce) return;
  const char msg[] =
      "\nhpsearch: stopping: no new trials; running trials are stopped and marked (press Ctrl-C "
      "again to quit now)\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}
}  // namespace

std::atomic<bool>* install_stop_handlers(bool announce) {
  g_announce = announce ? 1 : 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A hang-up (the ssh session of a login node dropped) stops as SIGTERM
  // does: running trials are marked and queued again, the study resumable.
  sigaction(SIGHUP, &sa, nullptr);
  return &g_stop;
}

int stop_signal() { return g_signal; }

void ignore_sigpipe() {
  struct sigaction sa {};
  sa.sa_handler = SIG_IGN;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGPIPE, &sa, nullptr);
}

}  // namespace hps::cli
