// Helpers shared by the benchmark programs (header only: bench/*.cpp each
// become one executable).
#pragma once

#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/trial.h"

namespace hps::bench {

// A scratch directory, removed at the end unless keep is set.
class TempDir {
 public:
  explicit TempDir(const char* prefix) {
    std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    if (!keep) std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  bool keep = false;

 private:
  std::filesystem::path path_;
};

// Seconds from the first trial's start to the last trial's end.
inline double span_s(const std::vector<TrialPtr>& trials) {
  std::optional<TimePoint> first, last;
  for (const auto& t : trials) {
    if (t->datetime_start && (!first || *t->datetime_start < *first)) first = t->datetime_start;
    if (t->datetime_complete && (!last || *t->datetime_complete > *last)) last = t->datetime_complete;
  }
  if (!first || !last) return 0.0;
  return std::chrono::duration<double>(*last - *first).count();
}

// Runs a command and returns the JSON objects it printed, one per line
// (other lines are skipped). Empty if it could not run.
inline std::vector<nlohmann::json> run_json_lines(const std::string& command) {
  std::vector<nlohmann::json> out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  char line[65536];
  while (std::fgets(line, sizeof line, p)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  pclose(p);
  return out;
}

}  // namespace hps::bench
