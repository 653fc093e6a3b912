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
  Slot s = make_slot(t);
  if (it != slot_of.end()) {
    // Another trial under a known id (a caller may reuse ids): refresh the
    // slot in place.
    const std::size_t at = it->second;
    slots[at] = std::move(s);
    for (auto& c : columns) {
      if (c->values.size() <= at) continue;
      auto pos = std::find(c->sorted.begin(), c->sorted.end(), at);
      if (pos != c->sorted.end()) c->sorted.erase(pos);
      c->values[at] = internal_value(*t, c->name, c->distribution);
      insert_sorted(*c, at);
    }
    return at;
  }
  slots.push_back(std::move(s));
  slot_of.emplace(t->trial_id, slots.size() - 1);
  return slots.size() - 1;
}

TpeSampler::Cache::Column& TpeSampler::Cache::column(const std::string& name,
                                                     const Distribution& d) {
  Column* col = nullptr;
  auto& list = columns_of[name];
  for (Column* c : list) {
    if (c->distribution == d) {
      col = c;
      break;
    }
  }
  if (!col) {
    columns.push_back(std::make_unique<Column>(Column{name, d, {}, {}}));
    col = columns.back().get();
    list.push_back(col);
  }
  const std::size_t first_new = col->values.size();
  for (std::size_t i = first_new; i < slots.size(); ++i)
    col->values.push_back(internal_value(*slots[i].trial, name, d));
  if (slots.size() - first_new <= kBulkColumnFill) {
    for (std::size_t i = first_new; i < slots.size(); ++i) insert_sorted(*col, i);
  } else {
    // Many new slots (a fresh sampler on a long history, a new param): one
    // sort, O(n log n), rather than n inserts into a vector, O(n^2). The
    // (value, trial number) order is total, so the result is the same.
    for (std::size_t i = first_new; i < slots.size(); ++i)
      if (!std::isnan(col->values[i])) col->sorted.push_back(i);
    std::sort(col->sorted.begin(), col->sorted.end(),
              [&](std::size_t a, std::size_t b) { return sorted_before(*col, a, b); });
  }
  return *col;
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

}  // namespace tpe

}  // namespace hps
