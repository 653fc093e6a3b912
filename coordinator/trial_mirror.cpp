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
  if (auto changes = storage_.trial_changes(study_id_, 0)) {
    has_feed_ = true;
    // Version 0 is a first call: a feed answers with every trial (reset).
    // One that answered with changes only is read whole instead.
    if (!changes->reset) changes->trials = storage_.get_all_trials(study_id_, {});
    changes->reset = true;
    view_.apply(*changes);
  } else {
    has_feed_ = false;
    view_.apply(TrialChanges{0, true, storage_.get_all_trials(study_id_, {})});
  }
  recount();
}

void TrialMirror::update(const TrialPtr& written) {
  if (has_feed_) {
    view_.sync(storage_, study_id_);
  } else {
    view_.apply(TrialChanges{0, false, {written}});
  }
  follow_view();
}

TrialPtr TrialMirror::refresh(std::int64_t number) {
  if (has_feed_) {
    update(nullptr);
  } else {
    update(storage_.get_trial(ptr(number)->trial_id));
  }
  return ptr(number);
}

void TrialMirror::append(const TrialPtr& t) {
  if (!has_feed_ && t->number != static_cast<std::int64_t>(trials().size())) {
    // Another writer created trials meanwhile; read everything again.
    spdlog::warn("study '{}': another process added trials; reloading", study_name_);
    load();
    return;
  }
  update(t);
}

void TrialMirror::replace_claimed(const TrialPtr& t) { update(t); }

void TrialMirror::follow_view() {
  auto changed = view_.changed_since(seen_);
  if (!changed) {
    recount();
    return;
  }
  const auto& trials = view_.trials();
  for (std::int64_t number : *changed) {
    const auto at = static_cast<std::size_t>(number);
    if (number < 0 || at >= trials.size() || trials[at]->number != number) {
      recount();  // not contiguous: recount() names the gap
      return;
    }
    if (at < marks_.size()) uncount(number);
    count(trials[at]);
  }
  seen_ = view_.version();
}

void TrialMirror::recount() {
  const auto& trials = view_.trials();
  marks_.assign(trials.size(), 0);
  waiting_.clear();
  finished_ = 0;
  best_.reset();
  for (std::size_t i = 0; i < trials.size(); ++i) {
    if (trials[i]->number != static_cast<std::int64_t>(i))
      throw StorageError("study '" + study_name_ + "': trial numbers are not contiguous at " +
                         std::to_string(i));
    count(trials[i]);
  }
  seen_ = view_.version();
}

// Counts a trial's snapshot (new, or replacing one uncount() took back).
void TrialMirror::count(const TrialPtr& t) {
  const auto at = static_cast<std::size_t>(t->number);
  if (marks_.size() <= at) marks_.resize(at + 1, 0);
  std::uint8_t mark = 0;
  if (t->state == TrialState::kWaiting) {
    waiting_.insert(t->number);
    mark |= kCountedWaiting;
  }
  if (t->counts_as_finished()) {
    ++finished_;
    mark |= kCountedFinished;
  }
  marks_[at] = mark;
  if (best_ && best_->number == t->number) {
    // The best trial written again (an attr): still best unless its value
    // or state changed, which only a rescan can settle.
    if (lifecycle::is_best_candidate(*t) && !lifecycle::ranks_before(direction_, *best_, *t) &&
        !lifecycle::ranks_before(direction_, *t, *best_))
      best_ = t;
    else
      rescan_best();
    return;
  }
  if (lifecycle::is_best_candidate(*t) &&
      (!best_ || lifecycle::ranks_before(direction_, *t, *best_)))
    best_ = t;
}

// Takes back what count() counted of trial `number`'s earlier snapshot.
void TrialMirror::uncount(std::int64_t number) {
  auto& mark = marks_[static_cast<std::size_t>(number)];
  if (mark & kCountedWaiting) waiting_.erase(number);
  if (mark & kCountedFinished) --finished_;
  mark = 0;
}

void TrialMirror::rescan_best() {
  best_.reset();
  for (const TrialPtr& t : view_.trials())
    if (lifecycle::is_best_candidate(*t) &&
        (!best_ || lifecycle::ranks_before(direction_, *t, *best_)))
      best_ = t;
}

}  // namespace hps
