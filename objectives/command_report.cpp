#include "objectives/command_report.h"

#include <cctype>
#include <cmath>
#include <limits>

namespace hps {

namespace {

// Replaces Python's json.dumps literals NaN, Infinity, -Infinity (outside of
// strings) by the strings "nan", "inf", "-inf".
std::string normalize_literals(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
    } else if (text.substr(i, 3) == "NaN") {
      out += "\"nan\"";
      i += 2;
    } else if (text.substr(i, 8) == "Infinity") {
      out += "\"inf\"";
      i += 7;
    } else if (text.substr(i, 9) == "-Infinity") {
      out += "\"-inf\"";
      i += 8;
    } else {
      out += c;
    }
  }
  return out;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

std::string parse_command_report(std::string_view text, CommandReport& out) {
  if (json_too_deep_at(text) != std::string_view::npos) return "JSON nested too deeply";
  Json j = Json::parse(normalize_literals(text), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return "not valid JSON";
  if (!j.is_object()) return "not a JSON object";
  for (const auto& [k, v] : j.items()) {
    if (k != "step" && k != "value" && k != "attrs")
      return "unknown key '" + k + "' (known: step, value, attrs)";
  }
  if (j.contains("value")) {
    const Json& v = j["value"];
    if (v.is_number()) {
      out.value = v.get<double>();
    } else if (v.is_string()) {
      std::string s = lower(v.get<std::string>());
      if (s == "nan")
        out.value = std::numeric_limits<double>::quiet_NaN();
      else if (s == "inf" || s == "infinity" || s == "+inf")
        out.value = std::numeric_limits<double>::infinity();
      else if (s == "-inf" || s == "-infinity")
        out.value = -std::numeric_limits<double>::infinity();
      else
        return "\"value\" must be a number, \"nan\", \"inf\" or \"-inf\"";
    } else {
      return "\"value\" must be a number, \"nan\", \"inf\" or \"-inf\"";
    }
  }
  if (j.contains("step")) {
    const Json& s = j["step"];
    if (s.is_number_unsigned()) {
      if (s.get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return "\"step\" is too large";
      out.step = static_cast<std::int64_t>(s.get<std::uint64_t>());
    } else if (s.is_number_integer()) {
      out.step = s.get<std::int64_t>();
    } else if (s.is_number_float() && std::floor(s.get<double>()) == s.get<double>() &&
               std::abs(s.get<double>()) < 9e15) {
      out.step = static_cast<std::int64_t>(s.get<double>());
    } else {
      return "\"step\" must be an integer";
    }
    if (*out.step < 0) return "\"step\" must be >= 0";
    if (!out.value) return "an intermediate report needs \"value\" with \"step\"";
  }
  if (j.contains("attrs")) {
    if (!j["attrs"].is_object()) return "\"attrs\" must be an object";
    out.attrs = j["attrs"];
  }
  if (!out.value && out.attrs.is_null())
    return "needs \"value\" (and \"step\" for an intermediate value)";
  return "";
}

}  // namespace hps
