// TrialView: a study's trials kept by a reader and brought up to date from
// the storage's change feed (Storage::trial_changes), so that a reader that
// looks at the history often (Study::ask, a pruner check, the coordinator's
// dispatch) pays O(changes) per look, not a copy of every trial. Samplers
// get it in SamplingContext::view and can update their own per-trial caches
// from TrialView::changed_since() instead of rescanning.
//
//   TrialView view;
//   view.sync(storage, study_id);             // after others' writes
//   for (const TrialPtr& t : view.trials()) ...
//
// TrialChangeLog is the bounded log of changed trial numbers that the feed's
// implementations (CachingStorage, InMemoryStorage) and TrialView share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "search/storage.h"
#include "search/trial.h"

namespace hps {

// Which trials of one study changed at which version: versions come from a
// counter of the owner (ascending); readers pass the version they saw.
class TrialChangeLog {
 public:
  // Records that trial `number` changed at `version` (> every version
  // recorded before). Bounded: when the log holds many more entries than
  // `n_trials` (the study's trial count), its older half goes, and readers
  // that are that far behind start over.
  void record(std::uint64_t version, std::int64_t number, std::size_t n_trials);
  // Readers that saw a version below `version` must start over (the
  // history was loaded or rolled back at it).
  void reset(std::uint64_t version);
  // The numbers of the trials changed after `version`, ascending, each
  // once; nullopt when that reader must start over (its version is below
  // the last reset or trimmed away).
  std::optional<std::vector<std::int64_t>> changed_since(std::uint64_t version) const;
  // The changes after `version` as Storage::trial_changes gives them:
  // `trials` is the study's history in number order, `current` the owner's
  // version now.
  TrialChanges changes(const std::vector<TrialPtr>& trials, std::uint64_t version,
                       std::uint64_t current) const;

 private:
  std::uint64_t base_ = 0;
  std::vector<std::pair<std::uint64_t, std::int64_t>> entries_;  // (version, number)
};

// The position of trial `number` in `trials` (number order), or
// trials.end() when absent: O(1) when numbers are contiguous from 0, else
// a binary search.
std::vector<TrialPtr>::const_iterator find_trial_number(const std::vector<TrialPtr>& trials,
                                                        std::int64_t number);

class TrialView {
 public:
  TrialView();
  TrialView(const TrialView&) = delete;
  TrialView& operator=(const TrialView&) = delete;

  // Brings the view up to date: storage.trial_changes() applied (O(changes)),
  // or, when the storage keeps no change log (nullopt), every trial read
  // again with get_all_trials() (O(n); a trial counts as changed when its
  // snapshot pointer differs). Use one storage and study per view. Throws
  // StorageError as the storage does (absent study).
  void sync(Storage& storage, std::int64_t study_id);
  // Applies one answer of Storage::trial_changes (what sync() does).
  void apply(const TrialChanges& changes);

  // The study's trials in number order, any state.
  const std::vector<TrialPtr>& trials() const { return trials_; }
  // Unique among the views of this process (never reused): a sampler's
  // cache built from one view is not mistaken for another's.
  std::uint64_t id() const { return id_; }
  // Raised by each sync() that changed something; starts at 1.
  std::uint64_t version() const { return version_; }
  // The numbers of the trials added or replaced after view version
  // `version`, ascending, each once; nullopt when the reader must rebuild
  // from trials() (a reset of the view, or a version too old or unknown).
  std::optional<std::vector<std::int64_t>> changed_since(std::uint64_t version) const;

 private:
  void replace_all(std::vector<TrialPtr> trials);

  std::uint64_t id_;
  std::uint64_t version_ = 1;
  std::uint64_t storage_version_ = 0;  // what the storage's feed gave last
  std::vector<TrialPtr> trials_;
  TrialChangeLog log_;
};

}  // namespace hps
