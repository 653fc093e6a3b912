#include "cli/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "search/printable.h"

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
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
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

TableWriter::TableWriter(std::vector<std::string> header) : header_(std::move(header)) {
  widths_.reserve(header_.size());
  for (const auto& h : header_) widths_.push_back(width(printable(h)));
}

void TableWriter::widen(std::size_t column, const std::string& cell) {
  if (column < widths_.size()) widths_[column] = std::max(widths_[column], width(printable(cell)));
}

void TableWriter::widen_to(std::size_t column, std::size_t w) {
  if (column < widths_.size()) widths_[column] = std::max(widths_[column], w);
}

std::size_t display_width(const std::string& s) { return width(s); }

void TableWriter::widen(const std::vector<std::string>& row) {
  for (std::size_t i = 0; i < row.size(); ++i) widen(i, row[i]);
}

std::string TableWriter::line(const std::vector<std::string>& r, bool is_header) const {
  const auto& w = widths_;
  std::string text;
  for (std::size_t i = 0; i < w.size(); ++i) {
    // Text tables go to terminals: control characters in a cell (a user
    // attr's key or value, a name from an imported file) are escaped.
    std::string cell = i < r.size() ? printable(r[i]) : "";
    std::string pad(w[i] - std::min(w[i], width(cell)), ' ');
    bool right = !is_header && looks_numeric(cell);
    text += right ? pad + cell : cell + (i + 1 < w.size() ? pad : "");
    if (i + 1 < w.size()) text += "  ";
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text + '\n';
}

std::size_t TableWriter::column_start(std::size_t column) const {
  std::size_t start = 0;
  for (std::size_t i = 0; i < column && i < widths_.size(); ++i) start += widths_[i] + 2;
  return start;
}

std::string TableWriter::header_lines() const {
  std::string rule;
  for (std::size_t i = 0; i < widths_.size(); ++i) {
    rule += std::string(widths_[i], '-');
    if (i + 1 < widths_.size()) rule += "  ";
  }
  return line(header_, true) + rule + '\n';
}

std::string TableWriter::row_line(const std::vector<std::string>& row) const {
  return line(row, false);
}

std::string TableWriter::csv_line(const std::vector<std::string>& r) const {
  std::string out;
  for (std::size_t i = 0; i < header_.size(); ++i) {
    if (i) out += ',';
    out += csv_field(i < r.size() ? r[i] : "");
  }
  return out + "\r\n";
}

std::string Table::render() const {
  TableWriter w(header_);
  for (const auto& r : rows_) w.widen(r);
  std::string out = w.header_lines();
  for (const auto& r : rows_) out += w.row_line(r);
  return out;
}

std::string Table::render_csv() const {
  TableWriter w(header_);
  std::string out = w.csv_line(header_);
  for (const auto& r : rows_) out += w.csv_line(r);
  return out;
}

std::string format_value(double v, bool exact) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return exact ? fmt::format("{}", v) : fmt::format("{:.10g}", v);
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

std::string format_param(const Json& v, bool exact) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return looks_like_other_type(s) ? Json(s).dump() : s;
  }
  if (v.is_number_float()) {
    std::string out = format_value(v.get<double>(), exact);
    // A float always shows it is one: 1.0, not 1 (the int's cell).
    if (out.find_first_of(".eni") == std::string::npos) out += ".0";
    return out;
  }
  return v.dump();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s >= kMaxSpelledSeconds) return "more than 100 years";
  if (s < 60) return fmt::format("{:.1f}s", s);
  const long long total = std::llround(s);
  long long h = total / 3600, m = (total % 3600) / 60, sec = total % 60;
  if (h > 0) return fmt::format("{}h{:02d}m{:02d}s", h, m, sec);
  return fmt::format("{}m{:02d}s", m, sec);
}

std::string format_set_seconds(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s >= 60 && s < kMaxSpelledSeconds && s == std::floor(s))
    return format_duration(s);   // whole seconds: exact
  return fmt::format("{}s", s);  // the shortest round trip
}

}  // namespace hps::cli
