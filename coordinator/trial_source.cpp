#include "coordinator/trial_source.h"

#include <spdlog/spdlog.h>

#include "search/sampling_context.h"
#include "search/trial_lifecycle.h"

namespace hps {

TrialSource::TrialSource(Study& study, TrialMirror& mirror, const SearchSpace& space)
    : study_(study), storage_(study.storage()), mirror_(mirror), space_(space) {}

void TrialSource::with_sampling_context(const FrozenTrial& t, int n_workers,
                                        const std::function<void(const SamplingContext&)>& f) {
  hps::with_sampling_context(study_.direction(), mirror_.view(), study_.pruner(), t, n_workers, f);
}

std::optional<TrialSource::Dispatch> TrialSource::next(const std::string& worker, int n_workers,
                                                       std::vector<TrialPtr>& ended) {
  if (!mirror_.waiting().empty()) return claim_waiting(worker, n_workers, ended);
  return create_new(worker, n_workers);
}

std::optional<TrialSource::Dispatch> TrialSource::claim_waiting(const std::string& worker,
                                                                int n_workers,
                                                                std::vector<TrialPtr>& ended) {
  TrialPtr t = storage_.claim_waiting_trial(study_.study_id(), worker);
  if (!t) {  // the store disagrees: read it again
    mirror_.load();
    return create_new(worker, n_workers);
  }
  // A retry that continues an earlier trial takes its curve up to the
  // snapshot once its worker restored it (Coordinator on_restored).
  mirror_.replace_claimed(t);
  Dispatch out;
  out.fixed = lifecycle::fixed_params_of(*t);
  Params chosen = t->params;
  lifecycle::apply_fixed_params(space_, out.fixed, chosen);
  try {
    with_sampling_context(*t, n_workers, [&](const SamplingContext& ctx) {
      study_.sampler().sample(ctx, space_, chosen);
    });
  } catch (const SearchSpaceExhausted& e) {
    exhausted_ = true;
    storage_.set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, e.what());
    ended.push_back(mirror_.refresh(t->number));
    return std::nullopt;
  }
  lifecycle::store_new_params(storage_, t->trial_id, space_, t->params, chosen);
  out.trial = mirror_.refresh(t->number);
  return out;
}

std::optional<TrialSource::Dispatch> TrialSource::create_new(const std::string& worker,
                                                             int n_workers) {
  // The new trial as the sampler sees it: RUNNING, not yet stored (it is
  // created with its params in one write), so absent from ctx.trials.
  FrozenTrial provisional;
  provisional.number = static_cast<std::int64_t>(mirror_.trials().size());
  provisional.state = TrialState::kRunning;
  provisional.worker = worker;
  provisional.datetime_start = Clock::now();
  Params chosen;
  try {
    with_sampling_context(provisional, n_workers, [&](const SamplingContext& ctx) {
      study_.sampler().sample(ctx, space_, chosen);
    });
  } catch (const SearchSpaceExhausted& e) {
    exhausted_ = true;
    spdlog::info("coordinator: {}", e.what());
    return std::nullopt;
  }
  NewTrial init;
  init.state = TrialState::kRunning;
  init.worker = worker;
  for (auto it = chosen.begin(); it != chosen.end();) {
    if (const ParamSpec* spec = space_.find(it->first)) {
      init.distributions.emplace_hint(init.distributions.end(), it->first, spec->distribution);
      ++it;
    } else {
      it = chosen.erase(it);  // not a param of the space: not stored
    }
  }
  init.params = std::move(chosen);
  // Trials nearly always have the distributions of the one before: share
  // that map (one per study in memory, not one per trial).
  if (init.distributions == last_distributions_)
    init.distributions = last_distributions_;
  else
    last_distributions_ = init.distributions;
  Dispatch out;
  out.trial = storage_.create_trial(study_.study_id(), init);
  mirror_.append(out.trial);
  return out;
}

Json TrialSource::suggest(std::int64_t number, const std::string& name,
                          const Distribution& distribution, int n_workers) {
  const FrozenTrial& t = mirror_.at(number);
  auto suggested = lifecycle::suggest_param(
      t.params, t.distributions, lifecycle::fixed_params_of(t), name, distribution, [&] {
        Json value;
        with_sampling_context(t, n_workers, [&](const SamplingContext& ctx) {
          value = distribution.to_external(
              study_.sampler().sample_independent(ctx, name, distribution));
        });
        return value;
      });
  if (suggested.is_new) {
    storage_.set_trial_param(t.trial_id, name, suggested.value, distribution);
    mirror_.refresh(number);
  }
  return suggested.value;
}

}  // namespace hps
