#include "objectives/command_report.h"

#include <cctype>
#include <cmath>
#include <limits>

namespace hps {

namespace {

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// "status" and "reason" (persistent mode's end of a trial).
std::string parse_status(const Json& j, CommandReport& out) {
  if (j.contains("status")) {
    const Json& s = j["status"];
    if (!s.is_string() || (s.get<std::string>() != "pruned" && s.get<std::string>() != "fail" &&
                           s.get<std::string>() != "done"))
      return "\"status\" must be \"pruned\", \"fail\" or \"done\"";
    out.status = s.get<std::string>();
    if (j.contains("step")) return "\"status\" ends a trial and cannot come with \"step\"";
  }
  if (j.contains("reason")) {
    if (out.status != "fail") return "\"reason\" goes with \"status\": \"fail\" only";
    if (!j["reason"].is_string()) return "\"reason\" must be a string";
    out.reason = j["reason"].get<std::string>();
  }
  return "";
}

// An integer >= 0 ("step", "number"); a float with an integer value below
// 9e15 is accepted. Returns "" or what is wrong.
std::string parse_integer(const Json& s, const std::string& key, std::optional<std::int64_t>& out) {
  if (s.is_number_unsigned()) {
    if (s.get<std::uint64_t>() >
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return "\"" + key + "\" is too large";
    out = static_cast<std::int64_t>(s.get<std::uint64_t>());
  } else if (s.is_number_integer()) {
    out = s.get<std::int64_t>();
  } else if (s.is_number_float() && std::floor(s.get<double>()) == s.get<double>() &&
             std::abs(s.get<double>()) < 9e15) {
    out = static_cast<std::int64_t>(s.get<double>());
  } else {
    return "\"" + key + "\" must be an integer";
  }
  if (*out < 0) return "\"" + key + "\" must be >= 0";
  return "";
}

}  // namespace

std::string parse_command_report(std::string_view text, CommandReport& out) {
  if (json_too_deep_at(text) != std::string_view::npos) return "JSON nested too deeply";
  Json j;
  try {
    // Python's NaN, Infinity and -Infinity are read as those floats, so a
    // non-finite attr stays a float (not the string "nan").
    j = parse_json_nonfinite(text);
  } catch (const Json::exception&) {
    return "not valid JSON";
  }
  if (!j.is_object()) return "not a JSON object";
  for (const auto& [k, v] : j.items()) {
    if (k != "step" && k != "value" && k != "attrs" && k != "status" && k != "reason" &&
        k != "number")
      return "unknown key '" + k + "' (known: step, value, attrs, status, reason, number)";
  }
  if (j.contains("number")) {
    std::string error = parse_integer(j["number"], "number", out.number);
    if (!error.empty()) return error;
  }
  if (std::string error = parse_status(j, out); !error.empty()) return error;
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
    std::string error = parse_integer(j["step"], "step", out.step);
    if (!error.empty()) return error;
    if (!out.value) return "an intermediate report needs \"value\" with \"step\"";
  }
  if (j.contains("attrs")) {
    if (!j["attrs"].is_object()) return "\"attrs\" must be an object";
    out.attrs = j["attrs"];
  }
  if (!out.value && out.attrs.is_null() && out.status.empty())
    return "needs \"value\" (and \"step\" for an intermediate value)";
  return "";
}

}  // namespace hps
