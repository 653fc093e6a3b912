// Hand-over from `hpsearch` (built without LibTorch, so that its processes
// start in milliseconds) to its sibling `hpsearch-torch` (the same program
// with the LibTorch objectives) when a study needs them. See cli/commands.h.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "objectives/objective.h"

namespace hps::cli {

namespace {
int g_argc = 0;
char** g_argv = nullptr;
}  // namespace

void remember_program_args(int argc, char** argv) {
  g_argc = argc;
  g_argv = argv;
}

bool needs_torch(const Json& objective) {
  if (!objective.is_object()) return false;
  auto t = objective.find("type");
  return t != objective.end() && t->is_string() && t->get<std::string>().rfind("torch.", 0) == 0;
}

void exec_torch_sibling(const char* why) {
  // The registry decides: a program that registered the LibTorch objectives
  // (main() of hpsearch-torch) runs them itself.
  const std::vector<std::string> types = objective_type_names();
  if (std::any_of(types.begin(), types.end(),
                  [](const std::string& t) { return t.rfind("torch.", 0) == 0; }))
    return;
  if (g_argv == nullptr || g_argc < 1) return;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return;
  const std::filesystem::path sibling = self.parent_path() / "hpsearch-torch";
  if (access(sibling.c_str(), X_OK) != 0) {
    spdlog::debug("{}: no {} to hand over to", why, sibling.string());
    return;
  }
  spdlog::debug("{}: handing over to {}", why, sibling.string());
  std::vector<char*> args(g_argv, g_argv + g_argc);
  args.push_back(nullptr);
  execv(sibling.c_str(), args.data());
  spdlog::warn("{}: cannot start {}: {}", why, sibling.string(), std::strerror(errno));
}

}  // namespace hps::cli
