#include "report/page_data.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "algorithms/study_setup.h"
#include "search/checkpoints.h"
#include "search/json_util.h"
#include "search/trial_lifecycle.h"

namespace hps::report {

void PageOptions::validate() const {
  if (max_points < 1) throw ConfigError("report.max_points", "must be >= 1");
  if (max_parcoords < 1) throw ConfigError("report.max_parcoords", "must be >= 1");
  if (max_slice_points < 1) throw ConfigError("report.max_slice_points", "must be >= 1");
  if (max_curves < 1) throw ConfigError("report.max_curves", "must be >= 1");
  if (max_timeline < 1) throw ConfigError("report.max_timeline", "must be >= 1");
  require_at_least("report.contour_bins", contour_bins, 2);
  importance.validate();
}

namespace {

double seconds(TimePoint t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

Json number_or_null(double x) { return std::isfinite(x) ? Json(x) : Json(); }

Json time_or_null(const std::optional<TimePoint>& t) { return t ? Json(seconds(*t)) : Json(); }

// A scalar as the page shows it: strings without quotes, the rest as JSON.
std::string label(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// A choice of `d` as the page shows it: label(), but strings in JSON quotes
// when two choices would otherwise look the same (1 and "1", true and
// "true": types are kept, so they are different choices).
std::string choice_label(const Distribution& d, const Json& v) {
  if (!v.is_string() || !d.is_indexed()) return label(v);
  std::string plain = label(v);
  for (const auto& c : d.choices())
    if (!c.is_string() && label(c) == plain) return v.dump();
  return plain;
}

Json value_text(const std::optional<double>& v) {
  if (!v || std::isfinite(*v)) return Json();
  return std::isnan(*v) ? "nan" : (*v > 0 ? "inf" : "-inf");
}

// The param's plotting coordinate: the value for numeric kinds, the index
// for indexed ones; null if not a member.
Json coordinate(const Distribution& d, const Json& v) {
  if (d.is_indexed()) {
    int i = d.index_of(v);
    return i < 0 ? Json() : Json(i);
  }
  return v.is_number() ? v : Json();
}

Json param_info(const ParamSpec& spec) {
  const Distribution& d = spec.distribution;
  Json p{{"name", spec.name}, {"kind", to_string(d.kind())}, {"log", d.is_log()}};
  if (d.is_numeric()) {
    p["low"] = d.low();
    p["high"] = d.grid_high();
    p["step"] = d.step();
  } else {
    Json labels = Json::array();
    for (const auto& c : d.choices()) labels.push_back(choice_label(d, c));
    p["labels"] = labels;
  }
  p["when"] = Json();
  if (spec.condition) {
    Json vals = Json::array();
    for (const auto& v : spec.condition->values) vals.push_back(label(v));
    p["when"] = Json{{spec.condition->parent, vals}};
  }
  p["scale_with"] = Json();
  if (spec.scale_with)
    p["scale_with"] = Json{{"param", spec.scale_with->param},
                           {"reference", spec.scale_with->reference},
                           {"rule", spec.scale_with->rule}};
  return p;
}

// The steps of the pruner's rungs, up to max_step.
Json rungs(const Json& config, std::int64_t max_step) {
  Json out = Json::array();
  if (!config.is_object() || !config.contains("pruner") || !config["pruner"].is_object())
    return out;
  const Json& p = config["pruner"];
  std::string type = p.value("type", std::string());
  auto num = [&](const char* key, std::int64_t def) {
    return p.contains(key) && p[key].is_number_integer() ? p[key].get<std::int64_t>() : def;
  };
  std::int64_t eta = num("reduction_factor", type == "hyperband" ? 3 : 4);
  if (eta < 2) return out;
  std::int64_t r = 0, limit = max_step;
  if (type == "asha") {
    if (!p.contains("min_resource") || !p["min_resource"].is_number_integer()) return out;
    r = p["min_resource"].get<std::int64_t>();
    for (std::int64_t s = num("min_early_stopping_rate", 0); s > 0 && r <= limit; --s) r *= eta;
  } else if (type == "hyperband") {
    r = num("min_resource", 1);
    limit = std::min(limit, num("max_resource", limit));
  } else {
    return out;
  }
  for (; r >= 1 && r <= limit; r *= eta) out.push_back(r);
  return out;
}

// Up to `limit` of `items` (already ordered best first): the best tenth of
// the limit, then an even stride over the rest. Returned in input order.
std::vector<std::size_t> pick(std::size_t n, std::size_t limit) {
  std::vector<std::size_t> idx;
  if (n <= limit) {
    for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  std::size_t head = std::max<std::size_t>(1, limit / 10);
  for (std::size_t i = 0; i < head; ++i) idx.push_back(i);
  std::size_t rest = limit - head;
  double stride = static_cast<double>(n - head) / static_cast<double>(rest);
  for (std::size_t k = 0; k < rest; ++k)
    idx.push_back(head + static_cast<std::size_t>(static_cast<double>(k) * stride));
  return idx;
}

// A contour axis: `bins` cells over the param's range (or one per value of
// a discrete param with at most `bins` values).
struct Axis {
  const ParamSpec* spec = nullptr;
  std::size_t cells = 0;
  bool discrete = false;
  Json json;
  std::optional<std::size_t> cell(const Json& value) const {
    const Distribution& d = spec->distribution;
    if (!d.contains(value)) return std::nullopt;
    if (discrete) {
      if (d.is_indexed()) return static_cast<std::size_t>(d.index_of(value));
      double step = d.step() > 0 ? d.step() : 1.0;
      double k = std::round((value.get<double>() - d.low()) / step);
      return std::min(cells - 1, static_cast<std::size_t>(std::max(0.0, k)));
    }
    double u = *unit_position(d, value);
    return std::min(cells - 1, static_cast<std::size_t>(u * static_cast<double>(cells)));
  }
};

Axis make_axis(const ParamSpec& spec, int bins) {
  Axis a;
  a.spec = &spec;
  const Distribution& d = spec.distribution;
  Json centers = Json::array();
  std::string type = d.is_log() ? "log" : "linear";
  if (d.is_indexed()) {
    a.discrete = true;
    for (const auto& c : d.choices()) centers.push_back(choice_label(d, c));
    type = "category";
  } else if (d.cardinality() != 0 && d.cardinality() <= static_cast<std::uint64_t>(bins)) {
    a.discrete = true;
    double step = d.step() > 0 ? d.step() : 1.0;
    for (std::uint64_t k = 0; k < d.cardinality(); ++k)
      centers.push_back(d.low() + static_cast<double>(k) * step);
  } else {
    double lo = d.is_log() ? std::log(d.low()) : d.low();
    double hi = d.is_log() ? std::log(d.grid_high()) : d.grid_high();
    for (int k = 0; k < bins; ++k) {
      double x = lo + (hi - lo) * (k + 0.5) / bins;
      centers.push_back(d.is_log() ? std::exp(x) : x);
    }
  }
  a.cells = centers.size();
  a.json = Json{{"param", spec.name}, {"type", type}, {"centers", centers}};
  return a;
}

}  // namespace

SearchSpace study_space(const StudyInfo& info, const std::vector<TrialPtr>& trials) {
  if (info.config.is_object() && info.config.contains("space") &&
      info.config["space"].is_object()) {
    try {
      return SearchSpace::from_json(info.config["space"]);
    } catch (const ConfigError&) {
      // A stored space that breaks a rule (a store edited by hand; the
      // page names it: settings_error): the trials' own distributions.
    }
  }
  std::map<std::string, Distribution> seen;
  for (const auto& t : trials)
    for (const auto& [name, d] : t->distributions) seen.insert_or_assign(name, d);
  SearchSpace space;
  for (const auto& [name, d] : seen) space.add(name, d);
  return space;
}

std::optional<double> effective_value(const ParamSpec& spec, const Params& params) {
  if (!spec.scale_with) return std::nullopt;
  auto base = params.find(spec.name);
  auto with = params.find(spec.scale_with->param);
  if (base == params.end() || with == params.end() || !base->second.is_number() ||
      !with->second.is_number())
    return std::nullopt;
  double v =
      base->second.get<double>() * std::pow(with->second.get<double>() / spec.scale_with->reference,
                                            spec.scale_with->exponent());
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

Json trial_record(const FrozenTrial& t, const SearchSpace& space, bool with_curve) {
  Json p = Json::object();
  for (const auto& [name, v] : t.params) {
    const ParamSpec* spec = space.find(name);
    if (spec) p[name] = coordinate(spec->distribution, v);
  }
  Json r{{"n", t.number},
         {"s", to_string(t.state)},
         {"v", t.value ? number_or_null(*t.value) : Json()},
         {"vt", value_text(t.value)},
         {"p", std::move(p)},
         {"t0", time_or_null(t.datetime_start)},
         {"t1", time_or_null(t.datetime_complete)},
         {"w", t.worker},
         {"fr", t.fail_reason},
         {"ivn", t.intermediate_values.size()}};
  if (with_curve) {
    Json iv = Json::array();
    for (const auto& [step, v] : t.intermediate_values)
      iv.push_back(Json::array({step, number_or_null(v)}));
    r["iv"] = std::move(iv);
    // A retry that continued an earlier trial from its checkpoint: the
    // step it resumed after (marked on its curve).
    if (checkpoints::continued_trial(t))
      if (auto rs = checkpoints::resume_step_of(t)) r["rs"] = *rs;
  }
  return r;
}

namespace {

// "a is better than b" for the study's direction.
struct Better {
  double sign = 1.0;  // -1 when maximizing
  bool operator()(double a, double b) const { return sign * a < sign * b; }
};

// best_by_number and best_by_time, over every COMPLETE trial.
void add_best_so_far(Json& out, const std::vector<const FrozenTrial*>& complete,
                     const Better& better) {
  {
    // Appends [x, best] each time the best so far improves and once more at the
    // last trial, so the step line reaches the end of the axis. A plain double
    // and a flag, not std::optional: GCC's -Wmaybe-uninitialized misreads the
    // optional at -O1 (the TSan build).
    auto best_steps = [&](const std::vector<const FrozenTrial*>& order, auto x_of) {
      Json steps = Json::array();
      bool have = false;
      double best = 0.0;
      for (const auto* t : order) {
        if (!have || better(*t->value, best)) {
          have = true;
          best = *t->value;
          if (std::isfinite(best)) steps.push_back(Json::array({x_of(t), best}));
        }
      }
      if (have && std::isfinite(best)) steps.push_back(Json::array({x_of(order.back()), best}));
      return steps;
    };
    const Json by_number =
        best_steps(complete, [](const FrozenTrial* t) { return Json(t->number); });
    std::vector<const FrozenTrial*> timed;
    for (const auto* t : complete)
      if (t->datetime_complete) timed.push_back(t);
    std::stable_sort(timed.begin(), timed.end(), [](const auto* a, const auto* b) {
      return *a->datetime_complete < *b->datetime_complete;
    });
    const Json by_time = best_steps(
        timed, [](const FrozenTrial* t) { return Json(seconds(*t->datetime_complete)); });
    out["best_by_number"] = by_number;
    out["best_by_time"] = by_time;
  }
}

// Contour of the two most important params (declared order when none has
// an importance yet): the best value in each cell.
void add_contour(Json& out, const SearchSpace& space, const Importances& imp,
                 const std::vector<const FrozenTrial*>& complete, const PageOptions& options,
                 const Better& better) {
  out["contour"] = Json();
  if (space.size() >= 2) {
    std::vector<std::string> names;
    for (const auto& v : imp.values)
      if (v.importance > 0) names.push_back(v.param);
    if (names.size() < 2) names = {space.params()[0].name, space.params()[1].name};
    Axis ax = make_axis(*space.find(names[0]), options.contour_bins);
    Axis ay = make_axis(*space.find(names[1]), options.contour_bins);
    std::vector<std::vector<std::optional<double>>> cells(
        ay.cells, std::vector<std::optional<double>>(ax.cells));
    for (const auto* t : complete) {
      if (!std::isfinite(*t->value)) continue;
      auto xi = t->params.find(names[0]);
      auto yi = t->params.find(names[1]);
      if (xi == t->params.end() || yi == t->params.end()) continue;
      auto cx = ax.cell(xi->second);
      auto cy = ay.cell(yi->second);
      if (!cx || !cy) continue;
      auto& c = cells[*cy][*cx];
      if (!c || better(*t->value, *c)) c = *t->value;
    }
    Json z = Json::array();
    for (const auto& row : cells) {
      Json r = Json::array();
      for (const auto& c : row) r.push_back(c ? Json(*c) : Json());
      z.push_back(r);
    }
    out["contour"] = Json{{"x", ax.json}, {"y", ay.json}, {"z", z}};
  }
}

// Timeline: the most recently started trials, one row per worker.
void add_timeline(Json& out, Json& downsampled, const std::vector<TrialPtr>& trials,
                  const PageOptions& options) {
  {
    std::vector<const FrozenTrial*> started;
    for (const auto& t : trials)  // warm-start copies ran in an earlier study
      if (t->datetime_start && !t->is_warm_start()) started.push_back(t.get());
    std::stable_sort(started.begin(), started.end(), [](const auto* a, const auto* b) {
      return *a->datetime_start < *b->datetime_start;
    });
    std::size_t first =
        started.size() > options.max_timeline ? started.size() - options.max_timeline : 0;
    std::map<std::string, std::size_t> worker_index;
    std::vector<std::string> workers;
    Json rows = Json::array();
    for (std::size_t i = first; i < started.size(); ++i) {
      const FrozenTrial* t = started[i];
      std::string w = t->worker.empty() ? "(unknown)" : t->worker;
      auto [it, fresh] = worker_index.emplace(w, workers.size());
      if (fresh) workers.push_back(w);
      rows.push_back(
          Json::array({it->second, seconds(*t->datetime_start), time_or_null(t->datetime_complete),
                       to_string(t->state), t->number}));
    }
    out["timeline"] = Json{{"workers", workers},
                           {"rows", std::move(rows)},
                           {"shown", started.size() - first},
                           {"total", started.size()}};
    if (first > 0) downsampled["timeline"] = Json::array({started.size() - first, started.size()});
  }
}

// Top trials, with the effective value of scale_with params.
void add_top(Json& out, const std::vector<const FrozenTrial*>& ranked, const SearchSpace& space,
             const PageOptions& options) {
  {
    Json top = Json::array();
    for (std::size_t i = 0; i < ranked.size() && i < options.top_k; ++i) {
      const FrozenTrial* t = ranked[i];
      Json ps = Json::object(), eff = Json::object();
      for (const auto& [name, v] : t->params) {
        const ParamSpec* spec = space.find(name);
        ps[name] = spec ? choice_label(spec->distribution, v) : label(v);
      }
      for (const auto& spec : space.params())
        if (auto e = effective_value(spec, t->params)) eff[spec.name] = *e;
      top.push_back(Json{{"n", t->number},
                         {"v", number_or_null(*t->value)},
                         {"vt", value_text(t->value)},
                         {"params", ps},
                         {"effective", eff},
                         {"attrs", t->user_attrs}});
    }
    out["top"] = top;
  }
}

// The options in force for a study of `n_trials`: no cap at or below
// downsample_above, so a small study keeps one mark per trial everywhere.
PageOptions caps_for(const PageOptions& given, std::size_t n_trials) {
  given.validate();
  PageOptions o = given;
  if (n_trials <= given.downsample_above) {
    const std::size_t all = std::numeric_limits<std::size_t>::max();
    o.max_points = o.max_slice_points = o.max_parcoords = o.max_curves = o.max_timeline = all;
  }
  return o;
}

Json build_page_data_with(const StudyInfo& info, const std::vector<TrialPtr>& trials,
                          const PageOptions& given_options, const Importances* given) {
  const PageOptions options = caps_for(given_options, trials.size());
  const SearchSpace space = study_space(info, trials);
  const double sign = info.direction == StudyDirection::kMaximize ? -1.0 : 1.0;
  const Better better{sign};
  Json out;
  out["version"] = 1;
  out["generated"] = format_iso8601(Clock::now());
  out["study"] = Json{{"name", info.name}, {"direction", to_string(info.direction)}};
  out["settings"] = info.config;
  // Stored settings that could not be read or break a rule
  // (stored_settings_error): the page says so instead of showing them as
  // what the study runs with, or "no stored space.json".
  if (std::string why = stored_settings_error(info); !why.empty())
    out["settings_error"] = std::move(why);
  Json params = Json::array();
  for (const auto& spec : space.params()) params.push_back(param_info(spec));
  out["params"] = params;

  Json counts = Json::object();
  for (TrialState st : {TrialState::kComplete, TrialState::kPruned, TrialState::kFail,
                        TrialState::kRunning, TrialState::kWaiting})
    counts[to_string(st)] = 0;
  // COMPLETE with a non-NaN value, warm-start copies of an earlier study
  // excepted (lifecycle::is_best_candidate: not trials of this objective).
  std::vector<const FrozenTrial*> complete;
  std::vector<const FrozenTrial*> curved;  // trials with intermediate values
  std::int64_t max_step = 0;
  // Trials continued by a retry from their checkpoint: the retry carries
  // their curve, so it is drawn once (the retry's).
  std::set<std::int64_t> continued;
  for (const auto& t : trials)
    if (auto from = checkpoints::continued_trial(*t)) continued.insert(*from);
  for (const auto& t : trials) {
    counts[to_string(t->state)] = counts[to_string(t->state)].get<std::int64_t>() + 1;
    if (lifecycle::is_best_candidate(*t)) complete.push_back(t.get());
    if (!t->intermediate_values.empty() && !continued.count(t->number)) {
      curved.push_back(t.get());
      max_step = std::max(max_step, t->intermediate_values.rbegin()->first);
    }
  }
  out["counts"] = counts;
  out["n_trials"] = trials.size();
  Json downsampled = Json::object();

  // Best so far, by number and by completion time, over every COMPLETE trial.
  add_best_so_far(out, complete, better);

  // The COMPLETE trials of the dense plots, best first, then by number.
  std::vector<const FrozenTrial*> ranked = complete;
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](const auto* a, const auto* b) { return better(*a->value, *b->value); });
  std::set<std::int64_t> point_numbers;
  for (std::size_t i : pick(ranked.size(), options.max_points))
    point_numbers.insert(ranked[i]->number);
  if (ranked.size() > options.max_points)
    downsampled["points"] = Json::array({point_numbers.size(), ranked.size()});
  // Parallel coordinates, slice and contour points: fewer still, picked
  // the same way among the trials of the history (best first).
  {
    std::vector<const FrozenTrial*> shown;
    for (const auto* t : ranked)
      if (point_numbers.count(t->number)) shown.push_back(t);
    auto subset = [&](const char* key, const char* cut_key, std::size_t limit) {
      out[key] = Json();
      if (shown.size() <= limit) return;
      std::vector<std::int64_t> numbers;
      for (std::size_t i : pick(shown.size(), limit)) numbers.push_back(shown[i]->number);
      std::sort(numbers.begin(), numbers.end());
      downsampled[cut_key] = Json::array({numbers.size(), ranked.size()});
      out[key] = Json(numbers);
    };
    subset("parcoords_numbers", "parcoords", options.max_parcoords);
    subset("slice_numbers", "slices", options.max_slice_points);
  }
  // Curves: best by value (COMPLETE) or by last intermediate value first.
  std::vector<const FrozenTrial*> curve_rank = curved;
  auto curve_key = [&](const FrozenTrial* t) {
    double v = t->value ? *t->value : t->intermediate_values.rbegin()->second;
    return std::isnan(v) ? std::numeric_limits<double>::infinity() : sign * v;
  };
  std::stable_sort(curve_rank.begin(), curve_rank.end(),
                   [&](const auto* a, const auto* b) { return curve_key(a) < curve_key(b); });
  std::set<std::int64_t> curve_numbers;
  for (std::size_t i : pick(curve_rank.size(), options.max_curves))
    curve_numbers.insert(curve_rank[i]->number);
  if (curve_rank.size() > options.max_curves)
    downsampled["curves"] = Json::array({curve_numbers.size(), curve_rank.size()});

  // Trial records: every trial of a study within the limits; else those in
  // a sample plus every trial that is not COMPLETE up to max_points.
  const bool cut = ranked.size() > options.max_points || trials.size() > options.max_points;
  Json records = Json::array();
  std::size_t others = 0;
  for (const auto& t : trials) {
    bool in_points = point_numbers.count(t->number) > 0;
    bool in_curves = curve_numbers.count(t->number) > 0;
    bool keep = !cut || in_points || in_curves ||
                (t->state != TrialState::kComplete && others++ < options.max_points);
    if (keep) records.push_back(trial_record(*t, space, in_curves));
  }
  out["trials"] = std::move(records);
  out["history_numbers"] =
      Json(std::vector<std::int64_t>(point_numbers.begin(), point_numbers.end()));
  out["curve_numbers"] =
      Json(std::vector<std::int64_t>(curve_numbers.begin(), curve_numbers.end()));
  out["rungs"] = rungs(info.config, max_step);

  // Importances (every trial).
  const Importances imp =
      given ? *given : ped_anova_importances(trials, space, info.direction, options.importance);
  Json values = Json::array();
  for (const auto& v : imp.values)
    values.push_back(Json{{"param", v.param},
                          {"importance", v.importance},
                          {"divergence", v.divergence},
                          {"n_trials", v.n_trials}});
  out["importance"] = Json{{"method", imp.method},     {"source", imp.source}, {"note", imp.note},
                           {"n_trials", imp.n_trials}, {"n_top", imp.n_top},   {"values", values}};

  add_contour(out, space, imp, complete, options, better);
  add_timeline(out, downsampled, trials, options);
  add_top(out, ranked, space, options);
  out["downsampled"] = downsampled;
  out["downsample_above"] = given_options.downsample_above;
  return out;
}

}  // namespace

Json build_page_data(const StudyInfo& info, const std::vector<TrialPtr>& trials,
                     const PageOptions& options) {
  return build_page_data_with(info, trials, options, nullptr);
}

Json build_page_data(const StudyInfo& info, const std::vector<TrialPtr>& trials,
                     const PageOptions& options, const Importances& importances) {
  return build_page_data_with(info, trials, options, &importances);
}

std::uint64_t complete_trials_digest(const std::vector<TrialPtr>& trials) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a 64-bit offset basis
  auto mix = [&h](std::uint64_t x) {
    for (int i = 0; i < 8; ++i) {
      h ^= (x >> (8 * i)) & 0xffU;
      h *= 1099511628211ULL;  // FNV prime
    }
  };
  for (const auto& t : trials) {
    if (t->state != TrialState::kComplete) continue;
    mix(static_cast<std::uint64_t>(t->number));
    double v = t->value ? *t->value : std::numeric_limits<double>::quiet_NaN();
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    mix(bits);
  }
  return h;
}

std::int64_t TrialRevisions::update(const std::vector<TrialPtr>& trials) {
  for (const auto& t : trials) {
    std::string sig =
        std::to_string(static_cast<int>(t->state)) + "|" +
        (t->value ? std::to_string(*t->value) : "-") + "|" +
        std::to_string(t->intermediate_values.size()) + "|" + std::to_string(t->params.size()) +
        "|" + (t->datetime_complete ? std::to_string(seconds(*t->datetime_complete)) : "-") + "|" +
        t->worker;
    Entry& e = by_number_[t->number];
    if (e.signature != sig || !e.trial) {
      e.signature = std::move(sig);
      e.revision = ++revision_;
    }
    e.trial = t;
  }
  return revision_;
}

std::vector<TrialPtr> TrialRevisions::changed_since(std::int64_t since) const {
  std::vector<TrialPtr> out;
  for (const auto& [n, e] : by_number_)
    if (e.revision > since) out.push_back(e.trial);
  return out;
}

}  // namespace hps::report
