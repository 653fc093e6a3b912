// TrialMirror: the coordinator's copy of its study's trials, a vector by
// trial number, kept up to date from the store after each write (so no
// step reads the whole history), with what the coordinator asks of it
// often: the WAITING numbers, the count of finished trials (the budget's)
// and the best trial. Private to the coordinator (not installed).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "search/storage.h"

namespace hps {

class TrialMirror {
 public:
  // `study_name` only names the study in errors and logs.
  TrialMirror(Storage& storage, std::int64_t study_id, StudyDirection direction,
              std::string study_name);

  // Reads every trial of the study again. Throws StorageError if the trial
  // numbers are not 0, 1, 2, ...
  void load();
  // Replaces the copy of trial `number` with the store's snapshot.
  TrialPtr refresh(std::int64_t number);
  // Appends a trial the store just created (reloads everything if another
  // writer created trials meanwhile).
  void append(const TrialPtr& t);
  // Replaces the copy of a trial with a snapshot the caller read (a claimed
  // WAITING trial: no longer WAITING).
  void replace_claimed(const TrialPtr& t);

  // The trials, by number; a provisional trial may be pushed for the
  // sampler to see and must be popped before any other call.
  std::vector<TrialPtr>& trials() { return trials_; }
  const std::vector<TrialPtr>& trials() const { return trials_; }
  const FrozenTrial& at(std::int64_t number) const {
    return *trials_.at(static_cast<std::size_t>(number));
  }
  const TrialPtr& ptr(std::int64_t number) const {
    return trials_.at(static_cast<std::size_t>(number));
  }

  // WAITING trial numbers.
  const std::set<std::int64_t>& waiting() const { return waiting_; }
  // Trials that count as finished (FrozenTrial::counts_as_finished).
  std::int64_t finished() const { return finished_; }
  // The best trial so far (lifecycle::ranks_before), or null.
  const TrialPtr& best() const { return best_; }

 private:
  void note(const TrialPtr& t);

  Storage& storage_;
  std::int64_t study_id_;
  StudyDirection direction_;
  std::string study_name_;
  std::vector<TrialPtr> trials_;
  std::set<std::int64_t> waiting_;
  std::int64_t finished_ = 0;
  TrialPtr best_;
};

}  // namespace hps
