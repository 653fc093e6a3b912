// A temporary directory for one test, removed with everything in it when
// the object is destroyed.
#pragma once

#include <filesystem>
#include <string>

namespace hps::testsupport {

class TempDir {
 public:
  // Creates a fresh directory under the system temp directory whose name
  // starts with "hps_" and contains `label`, the process id and a counter.
  // Throws std::filesystem::filesystem_error if it cannot be created.
  explicit TempDir(const std::string& label = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // path() / name, as a string.
  std::string file(const std::string& name) const;
  // Writes `text` to path() / name (replacing it) and returns the path.
  std::string write(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

// The whole content of a file ("" if it cannot be read).
std::string read_file(const std::string& path);

}  // namespace hps::testsupport
