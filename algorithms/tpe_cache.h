// TpeSampler's cache (private; not installed): per finished trial, a slot
// with its score, and per (param, distribution) a column of internal values
// with the slots sorted by value. Finished trials never change, so a slot is
// computed once per trial: without a view, per trial id (a sampler shared
// by studies of different storages may see an id again for another trial,
// which same_trial() tells apart); with a view (SamplingContext::view), per
// trial number of that view (ViewState). Also the joint draws of
// define-by-run trials being sampled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "algorithms/parzen_estimator.h"
#include "algorithms/tpe_sampler.h"
#include "search/trial_view.h"

namespace hps {

namespace tpe {

// One finished trial as the model sees it. Finished trials never change, so
// a slot is computed once per trial id.
struct Slot {
  TrialPtr trial;
  TrialState state = TrialState::kComplete;
  bool usable = false;     // enters the model (COMPLETE with a value, PRUNED)
  bool has_value = false;  // PRUNED without any value ranks last
  double value = std::numeric_limits<double>::infinity();  // raw value (COMPLETE) or value at the
                                                           // deepest step (PRUNED)
  double depth = 0;             // minus the deepest step reported (PRUNED)
  std::size_t params_hash = 0;  // hps::hash_params(trial->params)
  // A warm-start trial (FrozenTrial::is_warm_start): its source, "STORAGE
  // \n STUDY" from its warm_start attr (one task per earlier study); empty
  // for the study's own trials.
  std::string warm_source;
};

// The internal values of one (param, distribution) for every slot: NaN
// where the param was absent or outside the distribution.
struct Column {
  std::string name;
  Distribution distribution;
  std::vector<double> values;
  // Slots with a value, sorted by (value, trial number): kept up to date
  // as slots are added, so that a call needs no O(n log n) sort.
  std::vector<std::size_t> sorted;
  // The normalizers of the kernels of this column's slots, kept between
  // calls (TpeModel::estimate passes them to the estimators it fits).
  NormalizerMemo normalizers;
};

// What TpeSampler keeps of a TrialView (SamplingContext::view) between
// calls: per trial its point (tried::counts_as_tried's rule) and whether it
// is a usable COMPLETE trial, updated from TrialView::changed_since, so that
// a startup trial (fewer COMPLETE trials than n_startup_trials) costs
// O(changes) instead of a pass over the history. It answers what
// prepare_history()'s History answers for that: n_complete and is_taken.
class ViewIndex {
 public:
  // Brings the index up to `view`: the trials changed since the last call,
  // or all of them when `view` is another view or cannot say.
  void sync(const TrialView& view);
  // COMPLETE trials with a value (History::n_complete), trial `exclude`
  // (the one being sampled) left out.
  std::size_t n_complete(std::int64_t exclude) const;
  // Whether a trial other than `exclude` tried exactly the params `p`
  // (History::is_taken).
  bool is_taken(const Params& p, std::int64_t exclude) const;

 private:
  struct Entry {
    TrialPtr trial;                    // keeps `point` alive
    bool complete = false;             // COMPLETE with a value that is not NaN
    const Params* point = nullptr;     // tried point, or null
    std::size_t hash = 0;              // hash_params(*point)
    std::unique_ptr<Params> enqueued;  // a WAITING trial's enqueued params
  };
  void put(const TrialPtr& t);
  void drop(std::int64_t number);
  void rebuild(const TrialView& view);

  std::uint64_t view_id_ = 0;
  std::uint64_t version_ = 0;
  std::unordered_map<std::int64_t, Entry> entries_;  // by trial number
  std::unordered_multimap<std::size_t, std::int64_t> by_hash_;
  std::size_t n_complete_ = 0;
};

// What TpeSampler keeps of a TrialView for prepare_history() between calls:
// per trial of the view (by its position in view.trials(), which is number
// order) whether it is finished or RUNNING and its cache slot, updated from
// TrialView::changed_since (O(changes)). A call then builds its History
// from these records in one pass that touches no trial (no slot lookup by
// id, no hashing of params), and answers "was this point tried?" from the
// ViewIndex kept beside them.
class ViewHistory {
 public:
  enum class Kind : std::uint8_t {
    kOther,     // WAITING or FAIL: never an observation
    kFinished,  // COMPLETE or PRUNED: `slot` holds its score
    kRunning,   // a liar when the constant liar is on
  };
  static constexpr std::size_t kNoSlot = std::numeric_limits<std::size_t>::max();
  struct Record {
    std::int64_t number = std::numeric_limits<std::int64_t>::min();  // none yet
    Kind kind = Kind::kOther;
    // The cache slot of this number's trial (kept while the trial is not
    // finished, so that a trial finished again after a rollback reuses it).
    std::size_t slot = kNoSlot;
  };

  // Brings the records up to `view`: the trials changed since the last
  // call, or all of them (slots of unchanged finished trials kept) when the
  // view cannot say or its trials moved (an insertion before the end). A
  // finished trial whose slot does not hold it (another trial under its
  // number after a rollback) gets another slot: slots of the view path are
  // never changed in place (Cache::slot_of_snapshot shares them).
  void sync(const TrialView& view, TpeSampler::Cache& cache);
  // One record per trial of the view, in view.trials() order.
  const std::vector<Record>& records() const { return records_; }

 private:
  void put(std::size_t pos, const TrialPtr& t, TpeSampler::Cache& cache);
  void rebuild(const TrialView& view, TpeSampler::Cache& cache);

  std::uint64_t version_ = 0;
  bool synced_ = false;
  std::vector<Record> records_;
};

// What the cache keeps of one view: its ViewIndex and ViewHistory.
struct ViewState {
  std::uint64_t view_id = 0;
  ViewIndex index;
  ViewHistory history;
};

struct PendingJoint {
  std::vector<std::string> names;
  std::vector<Distribution> distributions;
  std::vector<double> values;
};

}  // namespace tpe

struct TpeSampler::Cache {
  using Slot = tpe::Slot;
  using Column = tpe::Column;
  using PendingJoint = tpe::PendingJoint;

  std::vector<Slot> slots;
  std::unordered_map<std::int64_t, std::size_t> slot_of;  // trial id -> slot
  // The view path's slots by snapshot (each slot keeps its snapshot alive,
  // so an address is never reused for another trial). These slots never
  // change once made, so views share them.
  std::unordered_map<const FrozenTrial*, std::size_t> slot_of_snapshot;
  std::vector<std::unique_ptr<Column>> columns;
  std::unordered_map<std::string, std::vector<Column*>> columns_of;  // by name
  // Define-by-run joint draws by (trial id, number, start time): the start
  // time tells apart trials of different studies that share ids.
  using PendingKey = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
  std::map<PendingKey, PendingJoint> pending;
  // The views the last calls came with (SamplingContext::view), most
  // recent last; at most kMaxViews (a sampler shared by several studies).
  std::vector<std::unique_ptr<tpe::ViewState>> views;
  static constexpr std::size_t kMaxViews = 4;
  // TpeOptions::marginal_mixture_select's decisions (TpeModel::select_product)
  // by group, checkpoint and last trial; cleared when it reaches
  // kMaxProductChoices entries.
  std::unordered_map<std::string, bool> product_choice;
  static constexpr std::size_t kMaxProductChoices = 4096;
  // The state kept for `view`, its index synced (O(changes)); created, or
  // the least recent one replaced, for a view not met before. A new view
  // reuses the slots of the snapshots (the same FrozenTrial objects) that
  // other views met (slot_of_snapshot: a new Study over the same storage
  // each time adds no slots); a finished trial met as another snapshot (a
  // storage that reads trials anew, a rollback) gets a new slot, and the old
  // one stays unused until the sampler goes.
  tpe::ViewState& view_state(const TrialView& view);

  // The internal value of param `name` in `t` under `d`: NaN if absent or
  // outside `d`.
  static double internal_value(const FrozenTrial& t, const std::string& name,
                               const Distribution& d) {
    auto it = t.params.find(name);
    if (it == t.params.end() || !d.contains(it->second))
      return std::numeric_limits<double>::quiet_NaN();
    return d.to_internal(it->second);
  }

  // Whether two snapshots with the same trial id are the same finished
  // trial. Ids are unique within a storage; a sampler shared by studies of
  // different storages may see an id again for another trial, which this
  // tells apart by number, state, value, completion time and sizes (cheap:
  // no JSON is compared).
  static bool same_trial(const FrozenTrial& a, const FrozenTrial& b);

  // The slot of a finished trial, created on first sight (by trial id:
  // the path without a view).
  std::size_t slot(const TrialPtr& t);
  // A new slot for finished trial `t` (not indexed by id: the view path
  // keeps it by trial number).
  std::size_t add_slot(const TrialPtr& t);
  // Makes slot `at` hold finished trial `t` (another trial than it held),
  // its column values and sorted places updated (the path without a view).
  void refresh_slot(std::size_t at, const TrialPtr& t);
  // Whether slot `at` holds exactly what a slot of finished trial `t`
  // would (score, params, warm-start source): a new snapshot of the same
  // trial.
  bool slot_holds(std::size_t at, const TrialPtr& t) const;

  // The column of (name, distribution), filled for every slot.
  Column& column(const std::string& name, const Distribution& d);
  // The columns of `params` that lack more than kBulkColumnFill slots (a
  // fresh sampler on a long history) filled in one pass over the slots, a
  // trial's values one after the other (each trial is read once instead of
  // once per param); column() then finds them filled. The same values and
  // orders as column() alone.
  void fill_columns(const std::vector<const ParamSpec*>& params);
  // The column of (name, distribution) as it is (created empty if new).
  Column& find_column(const std::string& name, const Distribution& d);
  // Puts the slots from first_new on into col.sorted (their values filled).
  void sort_new_slots(Column& col, std::size_t first_new) const;

  // Inserts `slot` into col.sorted at its (value, trial number) place.
  void insert_sorted(Column& col, std::size_t slot) const;
  // Whether slot a comes before slot b in col.sorted: by value, then by
  // trial number, then by slot (a total order, so a sort and one insert at
  // a time give the same order).
  bool sorted_before(const Column& col, std::size_t a, std::size_t b) const;
  // Above this many new slots, column() sorts once instead of inserting.
  static constexpr std::size_t kBulkColumnFill = 64;
};

}  // namespace hps
