#include "search/trial_lifecycle.h"

#include <cmath>

#include "search/checkpoints.h"
#include "search/json_util.h"

namespace hps::lifecycle {

// ------------------------------------------------------------ tell rules

TrialEnd resolve_end(TrialState state, std::optional<double> value, std::string fail_reason,
                     const std::function<std::optional<double>()>& last_intermediate) {
  if (!is_finished(state)) throw Error("tell: state must be COMPLETE, PRUNED or FAIL");
  if (state == TrialState::kComplete) {
    if (!value) throw Error("tell: COMPLETE needs a value");
    if (std::isnan(*value)) state = TrialState::kFail;
  }
  if (state == TrialState::kPruned && !value && last_intermediate) value = last_intermediate();
  TrialEnd end;
  end.state = state;
  if (state == TrialState::kFail) {
    end.fail_reason = fail_reason.empty() ? kReasonNaN : std::move(fail_reason);
  } else if (value && !std::isnan(*value)) {
    end.value = value;
  }
  return end;
}

// ------------------------------------------------------------ outcomes

Outcome run_objective(const Objective& objective, Trial& trial) {
  Outcome out;
  try {
    out.value = objective(trial);
    out.kind = OutcomeKind::kValue;
  } catch (const TrialPruned&) {
    out.kind = OutcomeKind::kPruned;
  } catch (const Interrupted&) {
    out.kind = OutcomeKind::kInterrupted;
  } catch (...) {
    // Any exception, std:: or not (a thrown int must not escape a thread).
    out.kind = OutcomeKind::kException;
    out.error = std::current_exception();
    out.message = "exception of a type not derived from std::exception";
    try {
      throw;
    } catch (const std::exception& e) {
      out.message = e.what();
      if (out.message.empty()) out.message = "exception";
    } catch (...) {
    }
  }
  return out;
}

TrialEnd requested_end(const Outcome& outcome) {
  TrialEnd end;
  switch (outcome.kind) {
    case OutcomeKind::kValue:
      end.state = TrialState::kComplete;
      end.value = outcome.value;
      break;
    case OutcomeKind::kPruned:
      end.state = TrialState::kPruned;
      break;
    case OutcomeKind::kInterrupted:
      end.state = TrialState::kFail;
      end.fail_reason = kReasonInterrupted;
      break;
    case OutcomeKind::kException:
      end.state = TrialState::kFail;
      end.fail_reason = outcome.message;
      break;
  }
  return end;
}

// ------------------------------------------------------------ enqueued params

Params fixed_params_of(const FrozenTrial& trial) {
  Params fixed;
  if (auto it = trial.system_attrs.find(kAttrFixedParams);
      it != trial.system_attrs.end() && it->is_object())
    for (const auto& [k, v] : it->items()) fixed[k] = v;
  return fixed;
}

Json fixed_params_attr(const Params& params) {
  Json fixed = Json::object();
  for (const auto& [k, v] : params) fixed[k] = v;
  return fixed;
}

void check_enqueued_params(const SearchSpace& space, const Params& params) {
  Params normalized;  // as samplers give values, for is_active()
  for (const auto& [k, v] : params) {
    const ParamSpec* spec = space.find(k);
    if (!spec) throw ConfigError(join_path("params", k), "is not in the search space");
    if (!spec->distribution.contains(v))
      throw ConfigError(join_path("params", k),
                        "value " + v.dump() + " is not in " + spec->distribution.to_json().dump());
    normalized[k] = spec->distribution.to_external(spec->distribution.to_internal(v));
  }
  // A value whose parent is given too but does not activate it could
  // never be used.
  for (const auto& spec : space.params()) {
    if (!spec.condition || !normalized.count(spec.name) ||
        !normalized.count(spec.condition->parent) || SearchSpace::is_active(spec, normalized))
      continue;
    throw ConfigError(join_path("params", spec.name),
                      "is inactive: its condition on '" + spec.condition->parent +
                          "' does not hold for the enqueued value " +
                          normalized.at(spec.condition->parent).dump());
  }
}

void apply_fixed_params(const SearchSpace& space, const Params& fixed, Params& chosen) {
  if (fixed.empty()) return;
  for (const auto& spec : space.params()) {
    auto f = fixed.find(spec.name);
    if (f != fixed.end() && !chosen.count(spec.name) && SearchSpace::is_active(spec, chosen) &&
        spec.distribution.contains(f->second))
      chosen[spec.name] = spec.distribution.to_external(spec.distribution.to_internal(f->second));
  }
}

Params pending_fixed_params(const Params& fixed, const Params& params) {
  Params rest;
  for (const auto& [k, v] : fixed)
    if (!params.count(k)) rest[k] = v;
  return rest;
}

std::vector<const ParamSpec*> store_new_params(Storage& storage, std::int64_t trial_id,
                                               const SearchSpace& space, const Params& existing,
                                               const Params& chosen) {
  std::vector<const ParamSpec*> stored;
  for (const auto& spec : space.params()) {
    auto it = chosen.find(spec.name);
    if (it == chosen.end() || existing.count(spec.name)) continue;
    storage.set_trial_param(trial_id, spec.name, it->second, spec.distribution);
    stored.push_back(&spec);
  }
  return stored;
}

// ------------------------------------------------------------ retries

const char* to_string(RetryCause cause) {
  switch (cause) {
    case RetryCause::kWorkerLost:
      return "worker_lost";
    case RetryCause::kWorkerStopped:
      return "worker_stopped";
    case RetryCause::kInterrupted:
      return "interrupted";
    case RetryCause::kStale:
      return "stale";
  }
  return "?";
}

std::optional<RetryCause> parse_retry_cause(const std::string& text) {
  for (auto c : {RetryCause::kWorkerLost, RetryCause::kWorkerStopped, RetryCause::kInterrupted,
                 RetryCause::kStale})
    if (text == to_string(c)) return c;
  return std::nullopt;
}

bool counts_against_retry_limit(RetryCause cause) { return cause == RetryCause::kWorkerLost; }

TrialPtr queue_retry(Storage& storage, std::int64_t study_id, const FrozenTrial& failed,
                     RetryCause cause) {
  Json fixed = fixed_params_attr(failed.params);
  // Enqueued values the failed trial had not asked for yet.
  for (const auto& [k, v] : fixed_params_of(failed))
    if (!fixed.contains(k)) fixed[k] = v;
  NewTrial init;
  init.state = TrialState::kWaiting;
  init.system_attrs = Json{{kAttrRetryOf, failed.number},
                           {kAttrRetryCause, to_string(cause)},
                           {kAttrFixedParams, fixed},
                           {checkpoints::kAttrLineage, checkpoints::lineage_of(failed)}};
  // The retry continues from the lineage's newest snapshot, if there is one.
  if (auto step = checkpoints::snapshot_step(failed))
    init.system_attrs[checkpoints::kAttrResumedFrom] =
        Json{{"trial", failed.number}, {"step", *step}};
  TrialPtr t;
  storage.run_in_transaction([&] {
    t = storage.create_trial(study_id, init);
    storage.set_trial_system_attr(failed.trial_id, kAttrRetriedAs, t->number);
  });
  return t;
}

TrialPtr start_resumed_trial(Storage& storage, std::int64_t study_id, const TrialPtr& claimed,
                             bool restored, const std::string& warning) {
  if (!claimed) return claimed;
  auto it = claimed->system_attrs.find(checkpoints::kAttrResumedFrom);
  auto step = checkpoints::resume_step_of(*claimed);
  if (it == claimed->system_attrs.end() || !step || !it->contains("trial") ||
      !(*it)["trial"].is_number_integer())
    return claimed;
  Json attr = *it;
  attr["restored"] = restored;
  if (!restored) {
    attr["warning"] = warning;
    storage.set_trial_system_attr(claimed->trial_id, checkpoints::kAttrResumedFrom, attr);
    return storage.get_trial(claimed->trial_id);
  }
  const std::int64_t from = (*it)["trial"].get<std::int64_t>();
  TrialPtr source =
      from >= 0 && from < claimed->number ? storage.get_trial_by_number(study_id, from) : nullptr;
  // A source that was itself to start from this snapshot but ended before
  // its restore took effect (no "restored" yet: lost right after its
  // dispatch) holds none of the values up to the step: they are those of
  // the trial it was to continue (a retry's, or a PBT donor's).
  for (std::size_t hops = 0; source && hops < 10000; ++hops) {
    auto r = source->system_attrs.find(checkpoints::kAttrResumedFrom);
    if (r == source->system_attrs.end() || !r->is_object() || r->contains("restored")) break;
    auto t = r->find("trial");
    auto s = r->find("step");
    if (t == r->end() || s == r->end() || !t->is_number_integer() || !s->is_number_integer() ||
        s->get<std::int64_t>() != *step)
      break;
    const auto n = t->get<std::int64_t>();
    if (n < 0 || n >= source->number) break;
    source = storage.get_trial_by_number(study_id, n);
  }
  storage.run_in_transaction([&] {
    storage.set_trial_system_attr(claimed->trial_id, checkpoints::kAttrResumedFrom, attr);
    if (!source) return;
    for (const auto& [s, v] : source->intermediate_values) {
      if (s > *step) break;
      if (!claimed->intermediate_values.count(s))
        storage.set_trial_intermediate_value(claimed->trial_id, s, v);
    }
  });
  return storage.get_trial(claimed->trial_id);
}

namespace {

// Whether the retry `t` (a trial with retry_of) counts against the limit;
// `retried` is the trial it retries.
bool retry_counts(const FrozenTrial& t, const FrozenTrial& retried) {
  auto it = t.system_attrs.find(kAttrRetryCause);
  if (it != t.system_attrs.end() && it->is_string()) {
    auto cause = parse_retry_cause(it->get<std::string>());
    return !cause || counts_against_retry_limit(*cause);  // unknown (newer) causes count
  }
  // Written before retry_cause existed: the rule of those versions.
  return retried.fail_reason.rfind("worker", 0) == 0;
}

}  // namespace

int retry_depth(const std::vector<TrialPtr>& trials, std::int64_t number) {
  const auto n = static_cast<std::int64_t>(trials.size());
  if (number < 0 || number >= n) return 0;
  int depth = 0;
  const FrozenTrial* t = trials[static_cast<std::size_t>(number)].get();
  for (int guard = 0; guard < 1000; ++guard) {
    auto it = t->system_attrs.find(kAttrRetryOf);
    if (it == t->system_attrs.end() || !it->is_number_integer()) break;
    std::int64_t prev = it->get<std::int64_t>();
    if (prev < 0 || prev >= n) break;
    const FrozenTrial* retried = trials[static_cast<std::size_t>(prev)].get();
    if (retry_counts(*t, *retried)) ++depth;
    t = retried;
  }
  return depth;
}

// ------------------------------------------------------------ best trial

bool is_best_candidate(const FrozenTrial& trial) {
  return trial.state == TrialState::kComplete && trial.value && !std::isnan(*trial.value) &&
         !trial.is_warm_start();
}

bool ranks_before(StudyDirection direction, const FrozenTrial& a, const FrozenTrial& b) {
  const double va = *a.value, vb = *b.value;
  if (va != vb) return direction == StudyDirection::kMaximize ? va > vb : va < vb;
  return a.number < b.number;
}

TrialPtr best_trial(StudyDirection direction, const std::vector<TrialPtr>& trials) {
  TrialPtr best;
  for (const auto& t : trials)
    if (is_best_candidate(*t) && (!best || ranks_before(direction, *t, *best))) best = t;
  return best;
}

// ------------------------------------------------------------ define-by-run

Suggested suggest_param(const Params& params,
                        const std::map<std::string, Distribution>& distributions,
                        const Params& fixed, const std::string& name,
                        const Distribution& distribution, const std::function<Json()>& sample) {
  if (auto it = params.find(name); it != params.end()) {
    auto d = distributions.find(name);
    if (d != distributions.end() && !(d->second == distribution))
      throw Error("suggest '" + name + "': " + distribution.to_json().dump() +
                  " differs from the distribution it was first suggested with " +
                  d->second.to_json().dump());
    return {it->second, false};
  }
  if (auto f = fixed.find(name); f != fixed.end() && distribution.contains(f->second))
    return {distribution.to_external(distribution.to_internal(f->second)), true};
  return {sample(), true};
}

}  // namespace hps::lifecycle
