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

// A double with up to 10 significant digits ("0.397887", "inf", "nan").
std::string format_value(double v);
// A JSON param or attr value for a table cell, so that 1, 1.0 and "1" read
// differently: integers, booleans and null as JSON; floats always with a
// decimal point or exponent ("1.0", "0.25", "1e-05", "inf", "nan");
// strings unquoted, unless they would read as another type or hide blanks
// ("\"1\"", "\"inf\"", "\"true\"", "\"\"").
std::string format_param(const Json& v);
// Seconds as "1h02m03s", "4m05s" or "12.3s".
std::string format_duration(double seconds);

}  // namespace hps::cli
