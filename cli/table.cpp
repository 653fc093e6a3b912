#include "cli/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace hps::cli {

namespace {

bool looks_numeric(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end && *end == '\0';
}

// Display width of UTF-8 text: counts code points (good enough for tables).
std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string Table::render() const {
  std::vector<std::size_t> w(header_.size(), 0);
  for (std::size_t i = 0; i < header_.size(); ++i) w[i] = width(header_[i]);
  for (const auto& r : rows_)
    for (std::size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], width(r[i]));
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& r, bool header) {
    std::string text;
    for (std::size_t i = 0; i < w.size(); ++i) {
      std::string cell = i < r.size() ? r[i] : "";
      std::string pad(w[i] - std::min(w[i], width(cell)), ' ');
      bool right = !header && looks_numeric(cell);
      text += right ? pad + cell : cell + (i + 1 < w.size() ? pad : "");
      if (i + 1 < w.size()) text += "  ";
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out << text << '\n';
  };
  line(header_, true);
  std::string rule;
  for (std::size_t i = 0; i < w.size(); ++i) {
    rule += std::string(w[i], '-');
    if (i + 1 < w.size()) rule += "  ";
  }
  out << rule << '\n';
  for (const auto& r : rows_) line(r, false);
  return out.str();
}

std::string Table::render_csv() const {
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& r) {
    for (std::size_t i = 0; i < header_.size(); ++i) {
      if (i) out << ',';
      out << csv_field(i < r.size() ? r[i] : "");
    }
    out << "\r\n";
  };
  line(header_);
  for (const auto& r : rows_) line(r);
  return out.str();
}

std::string format_value(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.10g}", v);
}

namespace {

// Whether a string cell would read as another JSON type (a number, true,
// false, null, inf, nan) or hide blanks, so it must be shown quoted.
bool looks_like_other_type(const std::string& s) {
  if (s.empty() || s.front() == ' ' || s.back() == ' ' || s.front() == '"') return true;
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* word :
       {"true", "false", "null", "nan", "inf", "-inf", "+inf", "infinity", "-infinity"})
    if (lower == word) return true;
  char* end = nullptr;
  (void)std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

}  // namespace

std::string format_param(const Json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return looks_like_other_type(s) ? Json(s).dump() : s;
  }
  if (v.is_number_float()) {
    std::string out = format_value(v.get<double>());
    // A float always shows it is one: 1.0, not 1 (the int's cell).
    if (out.find_first_of(".eni") == std::string::npos) out += ".0";
    return out;
  }
  return v.dump();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return fmt::format("{:.1f}s", s);
  const long long total = std::llround(s);
  long long h = total / 3600, m = (total % 3600) / 60, sec = total % 60;
  if (h > 0) return fmt::format("{}h{:02d}m{:02d}s", h, m, sec);
  return fmt::format("{}m{:02d}s", m, sec);
}

}  // namespace hps::cli
