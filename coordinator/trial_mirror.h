// TrialMirror: the coordinator's view of its study's trials (a TrialView,
// search/trial_view.h) with what the coordinator asks of it often: the
// WAITING numbers, the count of finished trials (the budget's) and the best
// trial. After each write the coordinator makes, the view is brought up to
// date from the storage's change feed (Storage::trial_changes, O(changes):
// the store's own history cache, CachingStorage, is the one copy of the
// trials; the view shares its snapshots), and the bookkeeping follows the
// changed trials only. A storage without a change feed (a user's own
// Storage) gets the written trial read back (get_trial) instead, so no step
// reads the whole history. Samplers get the view itself
// (SamplingContext::view). Private to the coordinator (not installed).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "search/storage.h"
#include "search/trial_view.h"

namespace hps {

class TrialMirror {
 public:
  // `study_name` only names the study in errors and logs.
  TrialMirror(Storage& storage, std::int64_t study_id, StudyDirection direction,
              std::string study_name);

  // Reads every trial of the study again. Throws StorageError if the trial
  // numbers are not 0, 1, 2, ... (as after every later update).
  void load();
  // After a write to trial `number`: the view brought up to date; returns
  // the trial's snapshot now.
  TrialPtr refresh(std::int64_t number);
  // After the store created trial `t` (create_trial's answer); reads
  // everything again if another writer created trials meanwhile.
  void append(const TrialPtr& t);
  // After the store claimed WAITING trial `t` (claim_waiting_trial's
  // answer: no longer WAITING).
  void replace_claimed(const TrialPtr& t);

  // The view (its trials in number order, any state), for samplers.
  const TrialView& view() const { return view_; }
  const std::vector<TrialPtr>& trials() const { return view_.trials(); }
  // Trial `number`. Throws std::out_of_range if there is none.
  const FrozenTrial& at(std::int64_t number) const { return *ptr(number); }
  const TrialPtr& ptr(std::int64_t number) const {
    return view_.trials().at(static_cast<std::size_t>(number));
  }

  // WAITING trial numbers.
  const std::set<std::int64_t>& waiting() const { return waiting_; }
  // Trials that count as finished (FrozenTrial::counts_as_finished).
  std::int64_t finished() const { return finished_; }
  // The best trial so far (lifecycle::ranks_before), or null.
  const TrialPtr& best() const { return best_; }

 private:
  // What the bookkeeping counted of one trial.
  enum Mark : std::uint8_t { kCountedWaiting = 1, kCountedFinished = 2 };

  // Brings the view up to date: from the feed, or by applying `written`
  // (a snapshot just read or returned by the store) without one.
  void update(const TrialPtr& written);
  // Bookkeeping for the trials the view changed since it was last seen.
  void follow_view();
  // Bookkeeping from scratch (after a reset of the view).
  void recount();
  void count(const TrialPtr& t);
  void uncount(std::int64_t number);
  void rescan_best();

  Storage& storage_;
  std::int64_t study_id_;
  StudyDirection direction_;
  std::string study_name_;
  bool has_feed_ = false;  // the storage keeps a change feed
  TrialView view_;
  std::uint64_t seen_ = 0;           // the view version the bookkeeping follows
  std::vector<std::uint8_t> marks_;  // by trial number: Mark bits
  std::set<std::int64_t> waiting_;
  std::int64_t finished_ = 0;
  TrialPtr best_;
};

}  // namespace hps
