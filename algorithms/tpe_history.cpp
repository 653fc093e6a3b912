#include "algorithms/tpe_history.h"

#include <algorithm>
#include <string>

namespace hps::tpe {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Adds finished trial `t` (COMPLETE or PRUNED) to `h`.
void add_finished(const TrialPtr& t, double sign, TpeSampler::Cache& cache, History& h,
                  std::vector<std::string>& sources) {
  std::size_t s = cache.slot(t);
  const Slot& slot = cache.slots[s];
  const bool complete = t->state == TrialState::kComplete;
  h.tried.add(t->params, slot.params_hash);
  if (!slot.usable) return;
  Observation o;
  o.trial = t.get();
  o.slot = static_cast<std::ptrdiff_t>(s);
  o.finished = true;
  o.rank.value = slot.has_value ? sign * slot.value : kInf;
  o.rank.tier = complete ? 0 : 1;
  o.rank.depth = slot.depth;
  o.rank.number = t->number;
  if (!slot.warm_source.empty()) {
    auto it = std::find(sources.begin(), sources.end(), slot.warm_source);
    o.task = static_cast<std::size_t>(it - sources.begin()) + 1;
    if (it == sources.end()) sources.push_back(slot.warm_source);
  }
  h.obs.push_back(o);
  ++h.n_finished;
  if (complete) ++h.n_complete;
}

// Adds RUNNING trial `t` to `h` (as a liar if `liar`).
void add_running(const TrialPtr& t, bool liar, History& h) {
  h.tried.add(t->params);
  if (!liar) return;
  Observation o;
  o.trial = t.get();
  o.slot = -1;
  o.finished = false;
  o.rank.value = kInf;
  o.rank.tier = 2;
  o.rank.number = t->number;
  h.obs.push_back(o);
}

}  // namespace

History prepare_history(const SamplingContext& ctx, TpeSampler::Cache& cache, bool liar) {
  History h;
  h.obs.reserve(ctx.trials.size());
  const double sign = ctx.direction == StudyDirection::kMaximize ? -1.0 : 1.0;
  std::vector<std::string> sources;  // earlier studies, in order met
  for (const TrialPtr& t : ctx.trials) {
    if (!t || t->number == ctx.trial.number) continue;
    if (t->state == TrialState::kComplete || t->state == TrialState::kPruned)
      add_finished(t, sign, cache, h, sources);
    else if (t->state == TrialState::kRunning)
      add_running(t, liar, h);
    else
      h.tried.add_trial(*t);  // FAIL (unless retried) and enqueued WAITING
  }
  h.n_tasks = 1 + sources.size();
  h.obs_of_slot.assign(cache.slots.size(), -1);
  for (std::size_t i = 0; i < h.obs.size(); ++i)
    if (h.obs[i].slot >= 0)
      h.obs_of_slot[static_cast<std::size_t>(h.obs[i].slot)] = static_cast<std::ptrdiff_t>(i);
  return h;
}

}  // namespace hps::tpe
