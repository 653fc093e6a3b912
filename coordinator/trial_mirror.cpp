#include "coordinator/trial_mirror.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "search/trial_lifecycle.h"

namespace hps {

TrialMirror::TrialMirror(Storage& storage, std::int64_t study_id, StudyDirection direction,
                         std::string study_name)
    : storage_(storage),
      study_id_(study_id),
      direction_(direction),
      study_name_(std::move(study_name)) {}

void TrialMirror::load() {
  trials_ = storage_.get_all_trials(study_id_, {});
  waiting_.clear();
  finished_ = 0;
  best_.reset();
  for (std::size_t i = 0; i < trials_.size(); ++i) {
    if (trials_[i]->number != static_cast<std::int64_t>(i))
      throw StorageError("study '" + study_name_ + "': trial numbers are not contiguous at " +
                         std::to_string(i));
    note(trials_[i]);
  }
}

// Bookkeeping for a trial read from the store (load or refresh).
void TrialMirror::note(const TrialPtr& t) {
  if (t->state == TrialState::kWaiting) waiting_.insert(t->number);
  if (t->counts_as_finished()) ++finished_;
  if (lifecycle::is_best_candidate(*t) &&
      (!best_ || lifecycle::ranks_before(direction_, *t, *best_)))
    best_ = t;
}

TrialPtr TrialMirror::refresh(std::int64_t number) {
  TrialPtr old = trials_.at(static_cast<std::size_t>(number));
  TrialPtr now = storage_.get_trial(old->trial_id);
  if (old->counts_as_finished()) --finished_;
  if (old->state == TrialState::kWaiting) waiting_.erase(number);
  trials_[static_cast<std::size_t>(number)] = now;
  note(now);
  return now;
}

void TrialMirror::append(const TrialPtr& t) {
  if (t->number != static_cast<std::int64_t>(trials_.size())) {
    // Another writer created trials meanwhile; read everything again.
    spdlog::warn("study '{}': another process added trials; reloading", study_name_);
    load();
    return;
  }
  trials_.push_back(t);
  note(t);
}

void TrialMirror::replace_claimed(const TrialPtr& t) {
  waiting_.erase(t->number);
  trials_.at(static_cast<std::size_t>(t->number)) = t;
}

}  // namespace hps
