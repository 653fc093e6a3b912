// TrialView and TrialChangeLog: see trial_view.h.
#include "search/trial_view.h"

#include <algorithm>
#include <atomic>

namespace hps {

namespace {

std::atomic<std::uint64_t> g_next_view_id{1};

bool by_number(const TrialPtr& t, std::int64_t number) { return t->number < number; }

}  // namespace

// ------------------------------------------------------------------ TrialChangeLog

void TrialChangeLog::record(std::uint64_t version, std::int64_t number, std::size_t n_trials) {
  entries_.emplace_back(version, number);
  if (entries_.size() > 2 * n_trials + 1024) {
    auto half = entries_.begin() + static_cast<std::ptrdiff_t>(entries_.size() / 2);
    base_ = std::prev(half)->first;
    entries_.erase(entries_.begin(), half);
  }
}

void TrialChangeLog::reset(std::uint64_t version) {
  base_ = version;
  entries_.clear();
}

std::optional<std::vector<std::int64_t>> TrialChangeLog::changed_since(
    std::uint64_t version) const {
  if (version < base_) return std::nullopt;
  auto first = std::upper_bound(
      entries_.begin(), entries_.end(), version,
      [](std::uint64_t v, const std::pair<std::uint64_t, std::int64_t>& e) { return v < e.first; });
  std::vector<std::int64_t> numbers;
  numbers.reserve(static_cast<std::size_t>(entries_.end() - first));
  for (auto it = first; it != entries_.end(); ++it) numbers.push_back(it->second);
  std::sort(numbers.begin(), numbers.end());
  numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
  return numbers;
}

TrialChanges TrialChangeLog::changes(const std::vector<TrialPtr>& trials, std::uint64_t version,
                                     std::uint64_t current) const {
  TrialChanges out;
  out.version = current;
  auto numbers = changed_since(version);
  if (!numbers) {
    out.reset = true;
    out.trials = trials;
    return out;
  }
  out.trials.reserve(numbers->size());
  for (std::int64_t n : *numbers) {
    auto pos = find_trial_number(trials, n);
    if (pos != trials.end()) out.trials.push_back(*pos);
  }
  return out;
}

std::vector<TrialPtr>::const_iterator find_trial_number(const std::vector<TrialPtr>& trials,
                                                        std::int64_t number) {
  if (number >= 0 && static_cast<std::size_t>(number) < trials.size()) {
    auto at = trials.begin() + static_cast<std::ptrdiff_t>(number);
    if ((*at)->number == number) return at;
  }
  auto pos = std::lower_bound(trials.begin(), trials.end(), number, by_number);
  if (pos != trials.end() && (*pos)->number == number) return pos;
  return trials.end();
}

// ------------------------------------------------------------------ TrialView

TrialView::TrialView() : id_(g_next_view_id.fetch_add(1)) { log_.reset(version_); }

void TrialView::sync(Storage& storage, std::int64_t study_id) {
  if (auto changes = storage.trial_changes(study_id, storage_version_)) {
    apply(*changes);
    return;
  }
  // No change log: read everything, note the snapshots that differ.
  std::vector<TrialPtr> all = storage.get_all_trials(study_id, {});
  bool same_numbers = all.size() >= trials_.size();
  for (std::size_t i = 0; same_numbers && i < trials_.size(); ++i)
    same_numbers = all[i]->number == trials_[i]->number;
  if (!same_numbers) {
    replace_all(std::move(all));
    return;
  }
  bool changed = false;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i < trials_.size() && all[i] == trials_[i]) continue;
    if (!changed) ++version_;
    changed = true;
    log_.record(version_, all[i]->number, all.size());
  }
  trials_ = std::move(all);
}

void TrialView::replace_all(std::vector<TrialPtr> trials) {
  trials_ = std::move(trials);
  ++version_;
  log_.reset(version_);
}

void TrialView::apply(const TrialChanges& changes) {
  storage_version_ = changes.version;
  if (changes.reset) {
    replace_all(changes.trials);
    return;
  }
  if (changes.trials.empty()) return;
  ++version_;
  for (const TrialPtr& t : changes.trials) {
    if (trials_.empty() || trials_.back()->number < t->number) {
      trials_.push_back(t);
    } else if (auto found = find_trial_number(trials_, t->number); found != trials_.end()) {
      trials_[static_cast<std::size_t>(found - trials_.cbegin())] = t;
    } else {
      trials_.insert(std::lower_bound(trials_.begin(), trials_.end(), t->number, by_number), t);
    }
    log_.record(version_, t->number, trials_.size());
  }
}

std::optional<std::vector<std::int64_t>> TrialView::changed_since(std::uint64_t version) const {
  if (version > version_) return std::nullopt;
  return log_.changed_since(version);
}

}  // namespace hps
