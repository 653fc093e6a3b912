#include "search/trial.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace hps {

const char* to_string(TrialState state) {
  switch (state) {
    case TrialState::kWaiting:
      return "WAITING";
    case TrialState::kRunning:
      return "RUNNING";
    case TrialState::kComplete:
      return "COMPLETE";
    case TrialState::kPruned:
      return "PRUNED";
    case TrialState::kFail:
      return "FAIL";
  }
  return "?";
}

std::optional<TrialState> parse_trial_state(const std::string& text) {
  std::string up;
  for (char c : text) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (TrialState s : {TrialState::kWaiting, TrialState::kRunning, TrialState::kComplete,
                       TrialState::kPruned, TrialState::kFail})
    if (up == to_string(s)) return s;
  return std::nullopt;
}

std::optional<double> FrozenTrial::duration_s() const {
  if (!datetime_start || !datetime_complete) return std::nullopt;
  return std::chrono::duration<double>(*datetime_complete - *datetime_start).count();
}

std::optional<std::pair<std::int64_t, double>> FrozenTrial::last_intermediate() const {
  if (intermediate_values.empty()) return std::nullopt;
  return *intermediate_values.rbegin();
}

bool FrozenTrial::was_retried() const {
  return state == TrialState::kFail && system_attrs.is_object() &&
         system_attrs.contains(kAttrRetriedAs);
}

bool FrozenTrial::budget_excluded() const {
  return state == TrialState::kFail && system_attrs.is_object() &&
         system_attrs.contains(kAttrBudgetExcluded);
}

bool FrozenTrial::is_warm_start() const {
  return system_attrs.is_object() && system_attrs.contains(kAttrWarmStart);
}

std::string format_iso8601(TimePoint t) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  long frac = static_cast<long>(us % 1000000);
  if (frac < 0) {
    frac += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

namespace {
Json number_or_string(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

// `v` with every non-finite float inside it as number_or_string gives it.
Json nonfinite_as_strings(const Json& v) {
  if (v.is_number_float()) return number_or_string(v.get<double>());
  if (!v.is_structured()) return v;
  Json out = v;
  for (auto& e : out) e = nonfinite_as_strings(e);
  return out;
}
}  // namespace

Json trial_to_json(const FrozenTrial& t) {
  Json j;
  j["number"] = t.number;
  j["state"] = to_string(t.state);
  j["value"] = t.value ? number_or_string(*t.value) : Json();
  j["params"] = Json::object();
  for (const auto& [k, v] : t.params) j["params"][k] = v;
  j["distributions"] = Json::object();
  for (const auto& [k, d] : t.distributions) j["distributions"][k] = d.to_json();
  j["intermediate_values"] = Json::object();
  for (const auto& [step, v] : t.intermediate_values)
    j["intermediate_values"][std::to_string(step)] = number_or_string(v);
  j["user_attrs"] = nonfinite_as_strings(t.user_attrs);
  j["system_attrs"] = nonfinite_as_strings(t.system_attrs);
  j["datetime_start"] = t.datetime_start ? Json(format_iso8601(*t.datetime_start)) : Json();
  j["datetime_complete"] =
      t.datetime_complete ? Json(format_iso8601(*t.datetime_complete)) : Json();
  auto d = t.duration_s();
  j["duration_s"] = d ? Json(*d) : Json();
  j["worker"] = t.worker;
  j["fail_reason"] = t.fail_reason;
  return j;
}

}  // namespace hps
