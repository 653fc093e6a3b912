// Plain-text tables and number formatting for the CLI.
#pragma once

#include <string>
#include <vector>

#include "search/json_util.h"

namespace hps::cli {

// A table printed with aligned columns; numbers right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Renders with two spaces between columns and a rule under the header.
  std::string render() const;
  // RFC 4180 CSV (quotes fields containing , " or newlines).
  std::string render_csv() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// A table written row by row, for output too long to hold in memory (the
// trials of a large study). Text: give every row to widen() first (a first
// pass), then write header_lines() and row_line() of each row; the output
// is that of Table::render() over the same rows. CSV needs no first pass:
// csv_line() of the header, then of each row, is Table::render_csv().
class TableWriter {
 public:
  // Columns start as wide as their header cell.
  explicit TableWriter(std::vector<std::string> header);
  // Widens column `column` to fit `cell` (display width in code points).
  void widen(std::size_t column, const std::string& cell);
  void widen(const std::vector<std::string>& row);
  // Widens column `column` to at least `width` code points.
  void widen_to(std::size_t column, std::size_t width);
  // The header line and the rule under it.
  std::string header_lines() const;
  // One row, padded to the widths (numeric cells right-aligned).
  std::string row_line(const std::vector<std::string>& row) const;
  // One RFC 4180 CSV line (\r\n-terminated) of the header's column count.
  std::string csv_line(const std::vector<std::string>& row) const;
  const std::vector<std::string>& header() const { return header_; }
  // Where column `column` starts in a text line (row_line): the widths of
  // the columns before it plus two spaces after each, in code points.
  std::size_t column_start(std::size_t column) const;

 private:
  std::string line(const std::vector<std::string>& row, bool is_header) const;

  std::vector<std::string> header_;
  std::vector<std::size_t> widths_;
};

// Display width of UTF-8 text as tables count it: code points.
std::size_t display_width(const std::string& s);

// A double with up to 10 significant digits ("0.397887", "inf", "nan"),
// or, `exact`, the shortest text that reads back as the same double
// ("0.39788735772973816"; for CSV, where values are data, not display).
std::string format_value(double v, bool exact = false);
// A JSON param or attr value for a table cell, so that 1, 1.0 and "1" read
// differently: integers, booleans and null as JSON; floats always with a
// decimal point or exponent ("1.0", "0.25", "1e-05", "inf", "nan");
// strings unquoted, unless they would read as another type or hide blanks
// ("\"1\"", "\"inf\"", "\"true\"", "\"\""). `exact`: floats as
// format_value(v, true).
std::string format_param(const Json& v, bool exact = false);
// The longest duration format_duration spells out: 100 years (of 365.25
// days), in seconds. A time budget may be longer (`budget.timeout_s` takes
// any number > 0, up to 1.8e308).
inline constexpr double kMaxSpelledSeconds = 100 * 365.25 * 86400;

// Seconds as "1h02m03s", "4m05s" or "12.3s"; "more than 100 years" from
// kMaxSpelledSeconds up (the hours would overflow a 64-bit count past
// about 9.2e18 s); "?" when negative or not finite.
std::string format_duration(double seconds);
// A duration the user set (a budget's timeout_s), exactly: whole seconds
// from a minute up to kMaxSpelledSeconds as format_duration ("1m30s",
// "1h00m00s"), else the shortest text that reads back as the same double
// ("0.15s", "30s", "90.5s", "1e+20s").
std::string format_set_seconds(double seconds);

}  // namespace hps::cli
