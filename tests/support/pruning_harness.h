// Test helper for pruners: a study in an InMemoryStorage where trials are
// scripted learning curves, and a way to ask a pruner about each report as
// a coordinator would (fresh snapshots, storage for bookkeeping).
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "search/pruner.h"
#include "search/storage.h"

namespace hps::testing {

class PruningHarness {
 public:
  explicit PruningHarness(StudyDirection direction,
                          std::shared_ptr<Storage> storage = std::make_shared<InMemoryStorage>())
      : direction_(direction), storage_(std::move(storage)) {
    study_id_ = storage_->create_study("pruning", direction, Json());
  }

  StudyDirection direction() const { return direction_; }
  Storage& storage() { return *storage_; }
  std::int64_t study_id() const { return study_id_; }

  // +1 for minimize, -1 for maximize: scripted curves are written for
  // minimize and multiplied by sign() so both directions see mirror images.
  double sign() const { return direction_ == StudyDirection::kMaximize ? -1.0 : 1.0; }

  // A trial that already ran: `curve` (step -> value, before sign()), then
  // ended in `state` (COMPLETE takes its last value). Values are stored as
  // given, not judged by any pruner.
  TrialPtr add_finished(const std::map<std::int64_t, double>& curve,
                        TrialState state = TrialState::kComplete) {
    auto t = storage_->create_trial(study_id_, NewTrial{});
    for (const auto& [step, v] : curve)
      storage_->set_trial_intermediate_value(t->trial_id, step, sign() * v);
    std::optional<double> value;
    if (state == TrialState::kComplete) {
      // The objective value: the last value, or 0 if there is none (or NaN).
      value = curve.empty() ? 0.0 : sign() * curve.rbegin()->second;
      if (std::isnan(*value)) value = 0.0;
    }
    storage_->set_trial_state(t->trial_id, state, value,
                              state == TrialState::kFail ? "scripted" : "");
    return storage_->get_trial(t->trial_id);
  }

  // A new RUNNING trial.
  TrialPtr start() { return storage_->create_trial(study_id_, NewTrial{}); }

  // Stores `value` (before sign()) at `step` for trial `t` and asks `pruner`
  // with fresh snapshots, as a coordinator does for each report.
  bool report(Pruner& pruner, const TrialPtr& t, std::int64_t step, double value) {
    storage_->set_trial_intermediate_value(t->trial_id, step, sign() * value);
    return ask(pruner, t, step);
  }

  // Asks `pruner` about trial `t` at `step` without storing anything new.
  bool ask(Pruner& pruner, const TrialPtr& t, std::int64_t step) {
    auto snapshot = storage_->get_trial(t->trial_id);
    auto trials = storage_->get_all_trials(study_id_);
    PruningContext ctx{direction_, trials, *snapshot, step, storage_.get()};
    return pruner.prune(ctx);
  }

  // Runs a whole curve (step -> value, before sign()) through `pruner` as a
  // new trial: stops at the first prune decision (the trial ends PRUNED) or
  // ends COMPLETE. Returns the step it was pruned at, nullopt if completed.
  std::optional<std::int64_t> run(Pruner& pruner, const std::map<std::int64_t, double>& curve) {
    auto t = start();
    for (const auto& [step, v] : curve) {
      if (report(pruner, t, step, v)) {
        storage_->set_trial_state(t->trial_id, TrialState::kPruned, sign() * v);
        return step;
      }
    }
    storage_->set_trial_state(t->trial_id, TrialState::kComplete,
                              curve.empty() ? 0.0 : sign() * curve.rbegin()->second);
    return std::nullopt;
  }

  TrialPtr get(const TrialPtr& t) { return storage_->get_trial(t->trial_id); }

 private:
  StudyDirection direction_;
  std::shared_ptr<Storage> storage_;
  std::int64_t study_id_ = -1;
};

// A flat curve: `value` at steps first..last.
inline std::map<std::int64_t, double> flat(double value, std::int64_t first, std::int64_t last) {
  std::map<std::int64_t, double> c;
  for (std::int64_t s = first; s <= last; ++s) c[s] = value;
  return c;
}

}  // namespace hps::testing
