#include "algorithms/tpe_history.h"

#include <algorithm>
#include <string>

#include "algorithms/buffer_pool.h"

namespace hps::tpe {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The observation of finished trial `t` (number `number`), scored by its
// slot `s`.
Observation finished_observation(const FrozenTrial* t, std::int64_t number, std::size_t s,
                                 const Slot& slot, double sign, std::vector<std::string>& sources) {
  Observation o;
  o.trial = t;
  o.slot = static_cast<std::ptrdiff_t>(s);
  o.finished = true;
  o.rank.value = slot.has_value ? sign * slot.value : kInf;
  o.rank.tier = slot.state == TrialState::kComplete ? 0 : 1;
  o.rank.depth = slot.depth;
  o.rank.number = number;
  if (!slot.warm_source.empty()) {
    auto it = std::find(sources.begin(), sources.end(), slot.warm_source);
    o.task = static_cast<std::size_t>(it - sources.begin()) + 1;
    if (it == sources.end()) sources.push_back(slot.warm_source);
  }
  return o;
}

// The observation of RUNNING trial `t` (number `number`) as a liar.
Observation liar_observation(const FrozenTrial* t, std::int64_t number) {
  Observation o;
  o.trial = t;
  o.slot = -1;
  o.finished = false;
  o.rank.value = kInf;
  o.rank.tier = 2;
  o.rank.number = number;
  return o;
}

// Adds finished trial `t` (COMPLETE or PRUNED) to `h`.
void add_finished(const TrialPtr& t, double sign, TpeSampler::Cache& cache, History& h,
                  std::vector<std::string>& sources) {
  std::size_t s = cache.slot(t);
  const Slot& slot = cache.slots[s];
  h.tried.add(t->params, slot.params_hash);
  if (!slot.usable) return;
  h.obs.push_back(finished_observation(t.get(), t->number, s, slot, sign, sources));
  ++h.n_finished;
  if (t->state == TrialState::kComplete) ++h.n_complete;
}

// Adds RUNNING trial `t` to `h` (as a liar if `liar`).
void add_running(const TrialPtr& t, bool liar, History& h) {
  h.tried.add(t->params);
  if (liar) h.obs.push_back(liar_observation(t.get(), t->number));
}

// Sets h.obs_of_slot from h.obs.
void index_slots(const TpeSampler::Cache& cache, History& h) {
  h.obs_of_slot = pooled<std::ptrdiff_t>(cache.slots.size(), -1);
  for (std::size_t i = 0; i < h.obs.size(); ++i)
    if (h.obs[i].slot >= 0)
      h.obs_of_slot[static_cast<std::size_t>(h.obs[i].slot)] = static_cast<std::ptrdiff_t>(i);
}

// prepare_history() from the records the cache keeps of ctx.view: one pass
// over compact records, no trial touched but the liars.
History history_from_view(const SamplingContext& ctx, TpeSampler::Cache& cache, bool liar) {
  ViewState& state = cache.view_state(*ctx.view);
  state.history.sync(*ctx.view, cache);
  const std::vector<TrialPtr>& trials = ctx.view->trials();
  const std::vector<ViewHistory::Record>& records = state.history.records();
  History h;
  h.obs = pool<Observation>().take(records.size());
  const double sign = ctx.direction == StudyDirection::kMaximize ? -1.0 : 1.0;
  const std::int64_t exclude = ctx.trial.number;
  std::vector<std::string> sources;  // earlier studies, in order met
  for (std::size_t i = 0; i < records.size(); ++i) {
    const ViewHistory::Record& r = records[i];
    if (r.number == exclude) continue;
    if (r.kind == ViewHistory::Kind::kFinished) {
      const Slot& slot = cache.slots[r.slot];
      if (!slot.usable) continue;
      h.obs.push_back(finished_observation(trials[i].get(), r.number, r.slot, slot, sign, sources));
      ++h.n_finished;
      if (slot.state == TrialState::kComplete) ++h.n_complete;
    } else if (r.kind == ViewHistory::Kind::kRunning && liar) {
      h.obs.push_back(liar_observation(trials[i].get(), r.number));
    }
  }
  h.n_tasks = 1 + sources.size();
  index_slots(cache, h);
  h.index = &state.index;
  h.exclude = exclude;
  return h;
}

}  // namespace

History::~History() {
  pool<Observation>().give(obs);
  pool<std::ptrdiff_t>().give(obs_of_slot);
}

History prepare_history(const SamplingContext& ctx, TpeSampler::Cache& cache, bool liar) {
  if (ctx.view && &ctx.view->trials() == &ctx.trials) return history_from_view(ctx, cache, liar);
  History h;
  h.obs = pool<Observation>().take(ctx.trials.size());
  h.tried.reserve(ctx.trials.size());
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
  index_slots(cache, h);
  return h;
}

}  // namespace hps::tpe
