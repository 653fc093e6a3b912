// Small helpers shared by the benchmark programs (header-only; not a
// benchmark itself).
#pragma once

#include <stdlib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "search/trial.h"

namespace hps::bench {

// Where the repository keeps Optuna's reference script (next to the
// repository: ../shared/bench/optuna_reference.py).
inline std::string default_optuna_script() {
  return std::string(HPSEARCH_SOURCE_DIR) + "/../shared/bench/optuna_reference.py";
}

// Runs a command and returns the JSON objects it prints, one per line
// (other lines are ignored). Throws std::runtime_error if it cannot start or
// exits non-zero.
inline std::vector<nlohmann::json> run_json_lines(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot run: " + command);
  std::vector<nlohmann::json> out;
  std::string line;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), pipe.get())) {
    line += buf.data();
    if (line.empty() || line.back() != '\n') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));
    line.clear();
  }
  int rc = pclose(pipe.release());
  if (rc != 0)
    throw std::runtime_error("command failed (status " + std::to_string(rc) + "): " + command);
  return out;
}

// Reads a file of JSON lines (a saved reference run).
inline std::vector<nlohmann::json> read_json_lines(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

// "2026-11-29" (UTC).
inline std::string today() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// "AMD EPYC, 2 cores, Linux 6.1" (CPU model from /proc/cpuinfo).
inline std::string machine_description() {
  std::string model = "unknown CPU";
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) model = line.substr(pos + 2);
      break;
    }
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  utsname u{};
  uname(&u);
  return model + ", " + std::to_string(cores) + " cores, " + u.sysname + " " + u.release;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

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
    if (t->datetime_complete && (!last || *t->datetime_complete > *last))
      last = t->datetime_complete;
  }
  if (!first || !last) return 0.0;
  return std::chrono::duration<double>(*last - *first).count();
}

}  // namespace hps::bench
