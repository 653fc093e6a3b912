#include "tests/support/temp_dir.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace hps::testsupport {

TempDir::TempDir(const std::string& label) {
  static std::atomic<int> counter{0};
  std::string safe;
  for (char c : label) safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  for (;;) {
    path_ = std::filesystem::temp_directory_path() /
            ("hps_" + safe + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    if (std::filesystem::create_directory(path_)) break;  // false: it existed, try the next name
  }
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::file(const std::string& name) const { return (path_ / name).string(); }

std::string TempDir::write(const std::string& name, const std::string& text) const {
  std::string p = file(name);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + p);
  return p;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace hps::testsupport
