#include "algorithms/tpe_cache.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "algorithms/tried_points.h"
#include "search/trial_lifecycle.h"

namespace hps {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool same_value(const std::optional<double>& x, const std::optional<double>& y) {
  if (x.has_value() != y.has_value()) return false;
  if (!x) return true;
  return std::bit_cast<std::uint64_t>(*x) == std::bit_cast<std::uint64_t>(*y);
}

// The score of a PRUNED trial: the value at the deepest step it reported
// (depth minus that step), else its own value below any pruned trial that
// reported a step.
void score_pruned(const FrozenTrial& t, tpe::Slot& s) {
  s.usable = true;
  for (auto r = t.intermediate_values.rbegin(); r != t.intermediate_values.rend(); ++r) {
    if (!std::isnan(r->second)) {
      s.has_value = true;
      s.value = r->second;
      s.depth = -static_cast<double>(r->first);
      return;
    }
  }
  if (t.value && !std::isnan(*t.value)) {
    s.has_value = true;
    s.value = *t.value;
  }
  s.depth = kInf;  // no step reported: below any pruned trial that reported one
}

// A new slot for finished trial `t`.
tpe::Slot make_slot(const TrialPtr& t) {
  tpe::Slot s;
  s.trial = t;
  s.state = t->state;
  if (t->state == TrialState::kComplete) {
    if (t->value && !std::isnan(*t->value)) {
      s.usable = true;
      s.has_value = true;
      s.value = *t->value;
    }
  } else if (t->state == TrialState::kPruned) {
    score_pruned(*t, s);
  }
  s.params_hash = hash_params(t->params);
  if (t->is_warm_start()) {
    const Json& w = t->system_attrs[kAttrWarmStart];
    auto text = [&](const char* key) {
      return w.is_object() && w.contains(key) && w[key].is_string() ? w[key].get<std::string>()
                                                                    : std::string();
    };
    s.warm_source = text("storage") + "\n" + text("study");
  }
  return s;
}

}  // namespace

bool TpeSampler::Cache::same_trial(const FrozenTrial& a, const FrozenTrial& b) {
  if (&a == &b) return true;
  const auto& ia = a.intermediate_values;
  const auto& ib = b.intermediate_values;
  if (ia.size() != ib.size()) return false;
  if (!ia.empty() && (ia.rbegin()->first != ib.rbegin()->first ||
                      !same_value(ia.rbegin()->second, ib.rbegin()->second)))
    return false;
  return a.number == b.number && a.state == b.state && same_value(a.value, b.value) &&
         a.datetime_complete == b.datetime_complete && a.params.size() == b.params.size();
}

std::size_t TpeSampler::Cache::slot(const TrialPtr& t) {
  auto it = slot_of.find(t->trial_id);
  if (it != slot_of.end() && same_trial(*slots[it->second].trial, *t)) return it->second;
  if (it != slot_of.end()) {
    // Another trial under a known id (a caller may reuse ids): refresh the
    // slot in place.
    refresh_slot(it->second, t);
    return it->second;
  }
  const std::size_t at = add_slot(t);
  slot_of.emplace(t->trial_id, at);
  return at;
}

std::size_t TpeSampler::Cache::add_slot(const TrialPtr& t) {
  slots.push_back(make_slot(t));
  return slots.size() - 1;
}

void TpeSampler::Cache::refresh_slot(std::size_t at, const TrialPtr& t) {
  slots[at] = make_slot(t);
  for (auto& c : columns) {
    if (c->values.size() <= at) continue;
    auto pos = std::find(c->sorted.begin(), c->sorted.end(), at);
    if (pos != c->sorted.end()) c->sorted.erase(pos);
    c->values[at] = internal_value(*t, c->name, c->distribution);
    insert_sorted(*c, at);
  }
}

bool TpeSampler::Cache::slot_holds(std::size_t at, const TrialPtr& t) const {
  const Slot& a = slots[at];
  if (a.trial == t) return true;
  const Slot b = make_slot(t);
  return a.state == b.state && a.usable == b.usable && a.has_value == b.has_value &&
         std::bit_cast<std::uint64_t>(a.value) == std::bit_cast<std::uint64_t>(b.value) &&
         std::bit_cast<std::uint64_t>(a.depth) == std::bit_cast<std::uint64_t>(b.depth) &&
         a.params_hash == b.params_hash && a.warm_source == b.warm_source &&
         a.trial->number == t->number && same_params(a.trial->params, t->params);
}

TpeSampler::Cache::Column& TpeSampler::Cache::find_column(const std::string& name,
                                                          const Distribution& d) {
  auto& list = columns_of[name];
  for (Column* c : list)
    if (c->distribution == d) return *c;
  columns.push_back(std::make_unique<Column>(Column{name, d, {}, {}, {}}));
  list.push_back(columns.back().get());
  return *columns.back();
}

void TpeSampler::Cache::sort_new_slots(Column& col, std::size_t first_new) const {
  if (slots.size() - first_new <= kBulkColumnFill) {
    for (std::size_t i = first_new; i < slots.size(); ++i) insert_sorted(col, i);
    return;
  }
  // Many new slots (a fresh sampler on a long history, a new param): one
  // sort, O(n log n), rather than n inserts into a vector, O(n^2). The
  // (value, trial number) order is total, so the result is the same. The
  // keys are gathered first, so that a comparison reads no trial
  // (sorted_before() reads each slot's trial number through its trial).
  struct Key {
    double value;
    std::int64_t number;
    std::size_t slot;
  };
  std::vector<Key> keys;
  keys.reserve(col.sorted.size() + (slots.size() - first_new));
  for (std::size_t i : col.sorted) keys.push_back({col.values[i], slots[i].trial->number, i});
  for (std::size_t i = first_new; i < slots.size(); ++i)
    if (!std::isnan(col.values[i])) keys.push_back({col.values[i], slots[i].trial->number, i});
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.value != b.value) return a.value < b.value;
    return a.number < b.number || (a.number == b.number && a.slot < b.slot);
  });
  col.sorted.clear();
  for (const Key& k : keys) col.sorted.push_back(k.slot);
}

TpeSampler::Cache::Column& TpeSampler::Cache::column(const std::string& name,
                                                     const Distribution& d) {
  Column& col = find_column(name, d);
  const std::size_t first_new = col.values.size();
  for (std::size_t i = first_new; i < slots.size(); ++i)
    col.values.push_back(internal_value(*slots[i].trial, name, d));
  sort_new_slots(col, first_new);
  return col;
}

void TpeSampler::Cache::fill_columns(const std::vector<const ParamSpec*>& params) {
  // Only the columns that lack many slots; the others are brought up to
  // date by column() as usual.
  std::vector<Column*> bulk;
  std::vector<std::size_t> first;
  for (const ParamSpec* p : params) {
    Column& col = find_column(p->name, p->distribution);
    if (slots.size() - col.values.size() <= kBulkColumnFill) continue;
    bulk.push_back(&col);
    first.push_back(col.values.size());
  }
  if (bulk.empty()) return;
  const std::size_t from = *std::min_element(first.begin(), first.end());
  for (std::size_t i = from; i < slots.size(); ++i) {
    const FrozenTrial& t = *slots[i].trial;
    for (std::size_t c = 0; c < bulk.size(); ++c)
      if (i >= first[c])
        bulk[c]->values.push_back(internal_value(t, bulk[c]->name, bulk[c]->distribution));
  }
  for (std::size_t c = 0; c < bulk.size(); ++c) sort_new_slots(*bulk[c], first[c]);
}

bool TpeSampler::Cache::sorted_before(const Column& col, std::size_t a, std::size_t b) const {
  const double va = col.values[a], vb = col.values[b];
  if (va != vb) return va < vb;
  const std::int64_t na = slots[a].trial->number, nb = slots[b].trial->number;
  return na < nb || (na == nb && a < b);
}

void TpeSampler::Cache::insert_sorted(Column& col, std::size_t slot) const {
  if (std::isnan(col.values[slot])) return;
  auto at =
      std::upper_bound(col.sorted.begin(), col.sorted.end(), slot,
                       [&](std::size_t a, std::size_t b) { return sorted_before(col, a, b); });
  col.sorted.insert(at, slot);
}

// ------------------------------------------------------------------ ViewIndex

namespace tpe {

void ViewIndex::drop(std::int64_t number) {
  auto it = entries_.find(number);
  if (it == entries_.end()) return;
  if (it->second.complete) --n_complete_;
  if (it->second.point) {
    auto [lo, hi] = by_hash_.equal_range(it->second.hash);
    for (auto h = lo; h != hi; ++h) {
      if (h->second == number) {
        by_hash_.erase(h);
        break;
      }
    }
  }
  entries_.erase(it);
}

void ViewIndex::put(const TrialPtr& t) {
  drop(t->number);
  Entry e;
  e.trial = t;
  e.complete = t->state == TrialState::kComplete && t->value && !std::isnan(*t->value);
  if (tried::counts_as_tried(*t)) {
    if (t->state != TrialState::kWaiting) {
      e.point = &t->params;
    } else {
      Params enqueued = lifecycle::fixed_params_of(*t);
      if (!enqueued.empty()) {
        e.enqueued = std::make_unique<Params>(std::move(enqueued));
        e.point = e.enqueued.get();
      }
    }
  }
  if (e.point) {
    e.hash = hash_params(*e.point);
    by_hash_.emplace(e.hash, t->number);
  }
  if (e.complete) ++n_complete_;
  entries_.insert_or_assign(t->number, std::move(e));
}

void ViewIndex::rebuild(const TrialView& view) {
  entries_.clear();
  by_hash_.clear();
  n_complete_ = 0;
  // One allocation of buckets, not a rehash every doubling.
  entries_.reserve(view.trials().size());
  by_hash_.reserve(view.trials().size());
  for (const TrialPtr& t : view.trials())
    if (t) put(t);
}

void ViewIndex::sync(const TrialView& view) {
  std::optional<std::vector<std::int64_t>> changed;
  if (view.id() == view_id_) changed = view.changed_since(version_);
  if (!changed) {
    rebuild(view);
  } else {
    for (std::int64_t number : *changed) {
      auto pos = find_trial_number(view.trials(), number);
      if (pos == view.trials().end())
        drop(number);
      else
        put(*pos);
    }
  }
  view_id_ = view.id();
  version_ = view.version();
}

std::size_t ViewIndex::n_complete(std::int64_t exclude) const {
  auto it = entries_.find(exclude);
  return n_complete_ - (it != entries_.end() && it->second.complete ? 1 : 0);
}

bool ViewIndex::is_taken(const Params& p, std::int64_t exclude) const {
  auto [lo, hi] = by_hash_.equal_range(hash_params(p));
  for (auto it = lo; it != hi; ++it) {
    if (it->second == exclude) continue;
    const Entry& e = entries_.at(it->second);
    if (same_params(*e.point, p)) return true;
  }
  return false;
}

// ------------------------------------------------------------------ ViewHistory

namespace {

bool finished_state(TrialState s) { return s == TrialState::kComplete || s == TrialState::kPruned; }

}  // namespace

void ViewHistory::put(std::size_t pos, const TrialPtr& t, TpeSampler::Cache& cache) {
  Record& r = records_[pos];
  r.number = t->number;
  if (!finished_state(t->state)) {
    r.kind = t->state == TrialState::kRunning ? Kind::kRunning : Kind::kOther;
    return;
  }
  r.kind = Kind::kFinished;
  if (r.slot != kNoSlot && cache.slot_holds(r.slot, t)) return;
  // A slot of this very snapshot (met through another view), or a new one.
  // The view path never changes a slot in place, so views may share them.
  auto it = cache.slot_of_snapshot.find(t.get());
  if (it != cache.slot_of_snapshot.end()) {
    r.slot = it->second;
    return;
  }
  r.slot = cache.add_slot(t);
  cache.slot_of_snapshot.emplace(t.get(), r.slot);
}

void ViewHistory::rebuild(const TrialView& view, TpeSampler::Cache& cache) {
  // Slots by number from the old records, so that the finished trials that
  // did not change keep theirs.
  std::unordered_map<std::int64_t, std::size_t> slot_of_number;
  for (const Record& r : records_)
    if (r.slot != kNoSlot) slot_of_number.emplace(r.number, r.slot);
  const std::vector<TrialPtr>& trials = view.trials();
  records_.assign(trials.size(), Record{});
  cache.slots.reserve(cache.slots.size() + trials.size());
  cache.slot_of_snapshot.reserve(cache.slot_of_snapshot.size() + trials.size());
  for (std::size_t i = 0; i < trials.size(); ++i) {
    if (!trials[i]) continue;
    auto it = slot_of_number.find(trials[i]->number);
    if (it != slot_of_number.end()) records_[i].slot = it->second;
    put(i, trials[i], cache);
  }
}

void ViewHistory::sync(const TrialView& view, TpeSampler::Cache& cache) {
  std::optional<std::vector<std::int64_t>> changed;
  if (synced_) changed = view.changed_since(version_);
  const std::vector<TrialPtr>& trials = view.trials();
  bool ok = changed.has_value() && trials.size() >= records_.size();
  if (ok) {
    const std::size_t old_size = records_.size();
    records_.resize(trials.size());
    for (std::int64_t number : *changed) {
      auto found = find_trial_number(trials, number);
      if (found == trials.end()) {
        ok = false;  // a trial went away: positions moved
        break;
      }
      const auto pos = static_cast<std::size_t>(found - trials.begin());
      if (pos < old_size && records_[pos].number != number) {
        ok = false;  // inserted before the end: positions moved
        break;
      }
      put(pos, *found, cache);
    }
    // Every new position is a changed trial; check that none was missed.
    for (std::size_t i = old_size; ok && i < trials.size(); ++i)
      ok = trials[i] && records_[i].number == trials[i]->number;
  }
  if (!ok) rebuild(view, cache);
  version_ = view.version();
  synced_ = true;
}

}  // namespace tpe

tpe::ViewState& TpeSampler::Cache::view_state(const TrialView& view) {
  auto it = std::find_if(views.begin(), views.end(),
                         [&](const auto& v) { return v->view_id == view.id(); });
  if (it == views.end()) {
    if (views.size() >= kMaxViews) views.erase(views.begin());
    views.push_back(std::make_unique<tpe::ViewState>());
    views.back()->view_id = view.id();
    it = views.end() - 1;
  }
  // Most recent last.
  std::rotate(it, it + 1, views.end());
  tpe::ViewState& state = *views.back();
  state.index.sync(view);
  return state;
}

}  // namespace hps
