#include <signal.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "objectives/child_process.h"
#include "protocol/zmq_util.h"

namespace hps::cli {

namespace {
std::atomic<bool> g_stop{false};
volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_announce = 1;
// remove_on_quit(): the socket files a second signal removes, each with its
// device and inode (the file this process bound, not one another process
// put there since), and whether its folder goes too (the coordinator's
// private folder). Filled in before `used` counts them.
struct QuitFile {
  char path[sizeof(sockaddr_un::sun_path)] = {};
  char folder[sizeof(sockaddr_un::sun_path)] = {};  // "" to keep the folder
  dev_t dev = 0;
  ino_t ino = 0;
};
QuitFile g_quit[2];
volatile sig_atomic_t g_quit_used = 0;

void on_signal(int sig) {
  if (g_signal != 0) {  // second signal: leave at once, with no program left behind
    hps::kill_child_process_groups();
    // lstat, unlink and rmdir are async-signal-safe.
    for (sig_atomic_t i = 0; i < g_quit_used; ++i) {
      const QuitFile& f = g_quit[i];
      if (zmq_util::unlink_if_same_file(f.path, f.dev, f.ino) && f.folder[0] != '\0')
        (void)::rmdir(f.folder);  // only if empty
    }
    _exit(128 + sig);
  }
  g_signal = sig;
  g_stop.store(true);
  if (!g_announce) return;
  const char msg[] =
      "\nhpsearch: stopping: no new trials; running trials are stopped and marked (press Ctrl-C, "
      "or send the signal, again to quit now)\n";
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

void remove_on_quit(const std::string& endpoint, bool with_folder) {
  if (endpoint.rfind("ipc://", 0) != 0 || g_quit_used >= 2) return;
  const std::string path = endpoint.substr(6);
  QuitFile& f = g_quit[g_quit_used];
  struct stat st {};
  if (path.size() >= sizeof f.path || ::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
    return;
  f.dev = st.st_dev;
  f.ino = st.st_ino;
  std::memcpy(f.path, path.c_str(), path.size() + 1);
  const std::size_t slash = path.rfind('/');
  if (with_folder && slash != std::string::npos && slash > 0)
    std::memcpy(f.folder, path.c_str(), slash);  // f.folder is zero-filled
  g_quit_used = g_quit_used + 1;
}

void ignore_sigpipe() {
  struct sigaction sa {};
  sa.sa_handler = SIG_IGN;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGPIPE, &sa, nullptr);
}

}  // namespace hps::cli
