#include "algorithms/tpe_sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>
#include <unordered_set>

#include "algorithms/random_sampler.h"
#include "search/util/hash.h"
#include "search/util/random.h"

namespace hps {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// A finite space with at most this many points is enumerated to find an
// untried point (or to tell that none is left).
constexpr double kMaxEnumerate = 1e6;
// Joint draws kept for define-by-run trials that are still being sampled.
constexpr std::size_t kMaxPending = 256;

using util::splitmix64;

// The seed of one suggestion's random numbers.
std::uint64_t stream_seed(std::uint64_t seed, std::int64_t number, std::uint64_t salt) {
  return splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(number) ^ splitmix64(salt)));
}

// FNV-1a, so that the salt of a param name is the same on every platform.
std::uint64_t hash_name(const std::string& s) { return util::fnv1a64(s); }

std::size_t hash_params(const Params& params) {
  std::size_t h = params.size();
  for (const auto& [name, value] : params) {
    std::size_t v = std::hash<std::string>{}(name)*31u + std::hash<Json>{}(value);
    h = (h ^ v) * 0x100000001b3ULL + 0x9E3779B97F4A7C15ULL;
  }
  return h;
}

bool same_params(const Params& a, const Params& b) {
  if (a.size() != b.size()) return false;
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib) {
    if (ia->first != ib->first || !same_json_scalar(ia->second, ib->second)) return false;
  }
  return true;
}

// Ranking key: lower is better. value is signed so that lower is better;
// tier 0 COMPLETE, 1 PRUNED, 2 liar; depth is minus the deepest step.
struct Rank {
  double value = kInf;
  int tier = 0;
  double depth = 0;
  std::int64_t number = 0;
};

bool better(const Rank& a, const Rank& b) {
  if (a.value != b.value) return a.value < b.value;
  if (a.tier != b.tier) return a.tier < b.tier;
  if (a.depth != b.depth) return a.depth < b.depth;
  return a.number < b.number;
}

// Throws ConfigError(field, "must be one of 'a', 'b', got 'x'").
[[noreturn]] void bad_choice(const std::string& field, std::initializer_list<const char*> names,
                             const std::string& got) {
  std::string rule = "must be one of ";
  bool first = true;
  for (const char* n : names) {
    if (!first) rule += ", ";
    first = false;
    rule += '\'';
    rule += n;
    rule += '\'';
  }
  rule += ", got '";
  rule += got;
  rule += '\'';
  throw ConfigError(field, rule);
}

tpe::EstimatorOptions estimator_options(const TpeOptions& o) {
  tpe::EstimatorOptions e;
  e.consider_prior = o.consider_prior;
  e.prior_weight = o.prior_weight;
  e.consider_magic_clip = o.consider_magic_clip.value_or(true);
  e.consider_endpoints = o.consider_endpoints;
  e.bandwidth = o.bandwidth;
  e.bandwidth_factor = o.bandwidth_factor.value_or(1.0);
  e.min_bandwidth_factor = o.min_bandwidth_factor.value_or(0.0);
  e.equal_heights = o.equal_kernel_heights.value_or(false);
  return e;
}

// The internal value of a single-value distribution.
double single_internal(const Distribution& d) { return d.is_indexed() ? 0.0 : d.low(); }

}  // namespace

// ---------------------------------------------------------------- options

std::size_t TpeGamma::operator()(std::size_t n) const {
  double x = static_cast<double>(n);
  double g = std::ceil(rule == Rule::kLinear ? factor * x : factor * std::sqrt(x));
  std::size_t k = g <= 0 ? 0 : static_cast<std::size_t>(g);
  return std::min({k, cap, n});
}

const char* to_string(TpeWeights weights) {
  return weights == TpeWeights::kUniform ? "uniform" : "old_decay";
}

const char* to_string(tpe::BandwidthRule rule) {
  switch (rule) {
    case tpe::BandwidthRule::kNeighbor:
      return "neighbor";
    case tpe::BandwidthRule::kScott:
      return "scott";
    case tpe::BandwidthRule::kRange:
      return "range";
  }
  return "?";
}

void TpeOptions::validate(const std::string& path) const {
  auto fail = [&](const char* key, const std::string& rule) {
    throw ConfigError(join_path(path, key), rule);
  };
  if (n_ei_candidates < 1) fail("n_ei_candidates", "must be >= 1");
  if (!(gamma.factor > 0) || !std::isfinite(gamma.factor))
    fail("gamma.factor", "must be a finite number > 0");
  if (gamma.rule == TpeGamma::Rule::kLinear && gamma.factor > 1)
    fail("gamma.factor", "must be <= 1 for the linear rule");
  if (gamma.cap < 1) fail("gamma.cap", "must be >= 1");
  if (!(prior_weight > 0) || !std::isfinite(prior_weight))
    fail("prior_weight", "must be a finite number > 0");
  if (min_bandwidth_factor && !(*min_bandwidth_factor >= 0 && *min_bandwidth_factor <= 1))
    fail("min_bandwidth_factor", "must be in [0, 1]");
  if (bandwidth_factor && (!(*bandwidth_factor > 0) || !std::isfinite(*bandwidth_factor)))
    fail("bandwidth_factor", "must be a finite number > 0");
  if (weights_window < 1) fail("weights_window", "must be >= 1");
  if (group && !multivariate) fail("group", "needs multivariate: true");
  if (duplicate_retries < 1) fail("duplicate_retries", "must be >= 1");
}

TpeOptions TpeOptions::resolved() const {
  TpeOptions o = *this;
  if (!o.consider_magic_clip) o.consider_magic_clip = !multivariate;
  if (!o.min_bandwidth_factor) o.min_bandwidth_factor = multivariate ? 0.04 : 0.0;
  if (!o.equal_kernel_heights) o.equal_kernel_heights = !multivariate;
  if (!o.bandwidth_factor) o.bandwidth_factor = multivariate ? 0.7 : 1.0;
  return o;
}

TpeOptions TpeOptions::from_json(const Json& config, const std::string& path) {
  check_keys(config, path,
             {"type", "seed", "n_startup_trials", "n_ei_candidates", "gamma", "prior_weight",
              "consider_prior", "consider_endpoints", "consider_magic_clip", "min_bandwidth_factor",
              "equal_kernel_heights", "bandwidth", "bandwidth_factor", "weights", "weights_window",
              "multivariate", "group", "constant_liar", "duplicate_retries"});
  TpeOptions o;
  auto count = [&](const Json& obj, const std::string& p, const char* key, std::size_t& out) {
    if (auto v = optional_int(obj, p, key)) {
      if (*v < 0) {
        std::string rule = "must be >= 0, got ";
        rule += std::to_string(*v);
        throw ConfigError(join_path(p, key), rule);
      }
      out = static_cast<std::size_t>(*v);
    }
  };
  if (auto seed = optional_int(config, path, "seed")) {
    if (*seed < 0) throw ConfigError(join_path(path, "seed"), "must be >= 0");
    o.seed = static_cast<std::uint64_t>(*seed);
  }
  count(config, path, "n_startup_trials", o.n_startup_trials);
  count(config, path, "n_ei_candidates", o.n_ei_candidates);
  if (auto it = config.find("gamma"); it != config.end()) {
    const std::string gp = join_path(path, "gamma");
    if (!it->is_object())
      throw ConfigError(
          gp, "must be an object {\"rule\": \"linear\"|\"sqrt\", \"factor\": x, \"cap\": n}");
    check_keys(*it, gp, {"rule", "factor", "cap"});
    if (auto rule = optional_string(*it, gp, "rule")) {
      if (*rule == "linear")
        o.gamma.rule = TpeGamma::Rule::kLinear;
      else if (*rule == "sqrt")
        o.gamma.rule = TpeGamma::Rule::kSqrt;
      else
        bad_choice(join_path(gp, "rule"), {"linear", "sqrt"}, *rule);
    }
    if (auto f = optional_number(*it, gp, "factor")) o.gamma.factor = *f;
    count(*it, gp, "cap", o.gamma.cap);
  }
  if (auto v = optional_number(config, path, "prior_weight")) o.prior_weight = *v;
  if (auto v = optional_bool(config, path, "consider_prior")) o.consider_prior = *v;
  if (auto v = optional_bool(config, path, "consider_endpoints")) o.consider_endpoints = *v;
  if (auto v = optional_bool(config, path, "consider_magic_clip")) o.consider_magic_clip = *v;
  if (auto v = optional_number(config, path, "min_bandwidth_factor")) o.min_bandwidth_factor = *v;
  if (auto v = optional_bool(config, path, "equal_kernel_heights")) o.equal_kernel_heights = *v;
  if (auto v = optional_string(config, path, "bandwidth")) {
    if (*v == "neighbor")
      o.bandwidth = tpe::BandwidthRule::kNeighbor;
    else if (*v == "scott")
      o.bandwidth = tpe::BandwidthRule::kScott;
    else if (*v == "range")
      o.bandwidth = tpe::BandwidthRule::kRange;
    else
      bad_choice(join_path(path, "bandwidth"), {"neighbor", "scott", "range"}, *v);
  }
  if (auto v = optional_number(config, path, "bandwidth_factor")) o.bandwidth_factor = *v;
  if (auto v = optional_string(config, path, "weights")) {
    if (*v == "uniform")
      o.weights = TpeWeights::kUniform;
    else if (*v == "old_decay")
      o.weights = TpeWeights::kOldDecay;
    else
      bad_choice(join_path(path, "weights"), {"uniform", "old_decay"}, *v);
  }
  count(config, path, "weights_window", o.weights_window);
  if (auto v = optional_bool(config, path, "multivariate")) o.multivariate = *v;
  if (auto v = optional_bool(config, path, "group")) o.group = *v;
  if (auto v = optional_bool(config, path, "constant_liar")) o.constant_liar = *v;
  count(config, path, "duplicate_retries", o.duplicate_retries);
  o.validate(path);
  return o;
}

Json TpeOptions::to_json() const {
  const TpeOptions r = resolved();
  const TpeOptions& o = r;
  Json j = {
      {"type", "tpe"},
      {"n_startup_trials", n_startup_trials},
      {"n_ei_candidates", n_ei_candidates},
      {"gamma",
       {{"rule", gamma.rule == TpeGamma::Rule::kLinear ? "linear" : "sqrt"},
        {"factor", gamma.factor},
        {"cap", gamma.cap}}},
      {"prior_weight", prior_weight},
      {"consider_prior", consider_prior},
      {"consider_endpoints", consider_endpoints},
      {"consider_magic_clip", *o.consider_magic_clip},
      {"min_bandwidth_factor", *o.min_bandwidth_factor},
      {"equal_kernel_heights", *o.equal_kernel_heights},
      {"bandwidth", to_string(bandwidth)},
      {"bandwidth_factor", *o.bandwidth_factor},
      {"weights", to_string(weights)},
      {"weights_window", weights_window},
      {"multivariate", multivariate},
      {"group", group},
      {"constant_liar", constant_liar},
      {"duplicate_retries", duplicate_retries},
  };
  if (seed) j["seed"] = *seed;
  return j;
}

// ---------------------------------------------------------------- caches

// One finished trial as the model sees it. Finished trials never change, so
// a slot is computed once per trial id.
struct Slot {
  TrialPtr trial;
  TrialState state = TrialState::kComplete;
  bool usable = false;     // enters the model (COMPLETE with a value, PRUNED)
  bool has_value = false;  // PRUNED without any value ranks last
  double value = kInf;     // raw value (COMPLETE) or value at the deepest step (PRUNED)
  double depth = 0;        // minus the deepest step reported (PRUNED)
  std::size_t params_hash = 0;
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
};

struct PendingJoint {
  std::vector<std::string> names;
  std::vector<Distribution> distributions;
  std::vector<double> values;
};

struct TpeSampler::Cache {
  std::vector<Slot> slots;
  std::unordered_map<std::int64_t, std::size_t> slot_of;  // trial id -> slot
  std::vector<std::unique_ptr<Column>> columns;
  std::unordered_map<std::string, std::vector<Column*>> columns_of;  // by name
  // Define-by-run joint draws by (trial id, number, start time): the start
  // time tells apart trials of different studies that share ids.
  using PendingKey = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
  std::map<PendingKey, PendingJoint> pending;

  static double internal_value(const FrozenTrial& t, const std::string& name,
                               const Distribution& d) {
    auto it = t.params.find(name);
    if (it == t.params.end() || !d.contains(it->second)) return kNaN;
    return d.to_internal(it->second);
  }

  // Whether two snapshots with the same trial id are the same finished
  // trial. Ids are unique within a storage; a sampler shared by studies of
  // different storages may see an id again for another trial, which this
  // tells apart by number, state, value, completion time and sizes (cheap:
  // no JSON is compared).
  static bool same_trial(const FrozenTrial& a, const FrozenTrial& b) {
    if (&a == &b) return true;
    auto same_value = [](const std::optional<double>& x, const std::optional<double>& y) {
      if (x.has_value() != y.has_value()) return false;
      if (!x) return true;
      return std::bit_cast<std::uint64_t>(*x) == std::bit_cast<std::uint64_t>(*y);
    };
    const auto& ia = a.intermediate_values;
    const auto& ib = b.intermediate_values;
    if (ia.size() != ib.size()) return false;
    if (!ia.empty() && (ia.rbegin()->first != ib.rbegin()->first ||
                        !same_value(ia.rbegin()->second, ib.rbegin()->second)))
      return false;
    return a.number == b.number && a.state == b.state && same_value(a.value, b.value) &&
           a.datetime_complete == b.datetime_complete && a.params.size() == b.params.size();
  }

  // The slot of a finished trial, created on first sight.
  std::size_t slot(const TrialPtr& t) {
    auto it = slot_of.find(t->trial_id);
    if (it != slot_of.end() && same_trial(*slots[it->second].trial, *t)) return it->second;
    Slot s;
    s.trial = t;
    s.state = t->state;
    if (t->state == TrialState::kComplete) {
      if (t->value && !std::isnan(*t->value)) {
        s.usable = true;
        s.has_value = true;
        s.value = *t->value;
      }
    } else if (t->state == TrialState::kPruned) {
      s.usable = true;
      bool found = false;
      for (auto r = t->intermediate_values.rbegin(); r != t->intermediate_values.rend(); ++r) {
        if (!std::isnan(r->second)) {
          s.has_value = true;
          s.value = r->second;
          s.depth = -static_cast<double>(r->first);
          found = true;
          break;
        }
      }
      if (!found) {
        if (t->value && !std::isnan(*t->value)) {
          s.has_value = true;
          s.value = *t->value;
        }
        s.depth = kInf;  // no step reported: below any pruned trial that reported one
      }
    }
    s.params_hash = hash_params(t->params);
    if (it != slot_of.end()) {
      // Seen before in another state (cannot happen for a finished trial,
      // but a caller may reuse ids): refresh it in place.
      // Another trial under a known id: refresh the slot in place.
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

  // The column of (name, distribution), filled for every slot.
  Column& column(const std::string& name, const Distribution& d) {
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
    for (std::size_t i = col->values.size(); i < slots.size(); ++i) {
      col->values.push_back(internal_value(*slots[i].trial, name, d));
      insert_sorted(*col, i);
    }
    return *col;
  }

  void insert_sorted(Column& col, std::size_t slot) const {
    const double v = col.values[slot];
    if (std::isnan(v)) return;
    const std::int64_t number = slots[slot].trial->number;
    auto at = std::upper_bound(col.sorted.begin(), col.sorted.end(), slot,
                               [&](std::size_t, std::size_t b) {
                                 double vb = col.values[b];
                                 return v < vb || (v == vb && number < slots[b].trial->number);
                               });
    col.sorted.insert(at, slot);
  }
};

namespace {

// One observation of this call, in trial-number order.
struct Observation {
  const FrozenTrial* trial = nullptr;
  std::ptrdiff_t slot = -1;  // -1: a RUNNING trial (a liar)
  bool finished = false;     // COMPLETE or PRUNED (else a liar)
  Rank rank;
};

// Everything a call needs from the history.
struct History {
  std::vector<Observation> obs;
  // For each cache slot, the index of its observation in obs, or -1.
  std::vector<std::ptrdiff_t> obs_of_slot;
  std::size_t n_complete = 0;
  std::size_t n_finished = 0;
  // Params of COMPLETE and RUNNING trials, for the duplicate check.
  std::vector<std::pair<std::size_t, const Params*>> taken;

  bool is_taken(const Params& p) const {
    std::size_t h = hash_params(p);
    for (const auto& [th, tp] : taken)
      if (th == h && same_params(*tp, p)) return true;
    return false;
  }
};

}  // namespace

// ---------------------------------------------------------------- the model

namespace {

class TpeModel {
 public:
  TpeModel(const TpeOptions& options, TpeSampler::Cache& cache, const History& history)
      : options_(options), cache_(cache), h_(history), eopt_(estimator_options(options)) {}

  // Internal values of the param `name` for each observation (NaN: absent),
  // computed once per call.
  const std::vector<double>& values(const std::string& name, const Distribution& d) {
    for (const auto& m : memo_)
      if (m->name == name && m->distribution == d) return m->values;
    Column& col = cache_.column(name, d);
    auto m = std::make_unique<Memo>(Memo{name, d, std::vector<double>(h_.obs.size())});
    for (std::size_t i = 0; i < h_.obs.size(); ++i) {
      const Observation& o = h_.obs[i];
      m->values[i] = o.slot >= 0 ? col.values[static_cast<std::size_t>(o.slot)]
                                 : TpeSampler::Cache::internal_value(*o.trial, name, d);
    }
    memo_.push_back(std::move(m));
    return memo_.back()->values;
  }

  // A fitted pair of estimators over some params.
  struct Fitted {
    std::unique_ptr<tpe::ParzenEstimator> below, above;
    bool random = false;  // no finished observation: draw at random
  };

  // Fits l and g for the params `names` (distributions `dists`), using the
  // observations where all of them are present.
  Fitted fit(const std::vector<std::string>& names, const std::vector<Distribution>& dists) {
    const std::size_t n_dims = names.size();
    std::vector<const std::vector<double>*> cols;
    cols.reserve(n_dims);
    for (std::size_t d = 0; d < n_dims; ++d) cols.push_back(&values(names[d], dists[d]));
    const std::size_t n = h_.obs.size();
    std::vector<std::size_t> present, finished;
    present.reserve(n);
    finished.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      bool ok = true;
      for (std::size_t d = 0; d < n_dims && ok; ++d) ok = !std::isnan((*cols[d])[i]);
      if (!ok) continue;
      present.push_back(i);
      if (h_.obs[i].finished) finished.push_back(i);
    }
    Fitted f;
    if (finished.empty()) {
      f.random = true;
      return f;
    }
    // The split is the same for every param present in all observations:
    // compute it once per call.
    const bool all = present.size() == n;
    if (!all || all_below_.empty()) {
      std::size_t n_below = options_.gamma_function ? options_.gamma_function(finished.size())
                                                    : options_.gamma(finished.size());
      n_below = std::min(n_below, finished.size());
      std::vector<char> below(n, 0);
      if (n_below > 0) {
        auto mid = finished.begin() + static_cast<std::ptrdiff_t>(n_below);
        std::nth_element(
            finished.begin(), mid - 1, finished.end(),
            [&](std::size_t a, std::size_t b) { return better(h_.obs[a].rank, h_.obs[b].rank); });
        // nth_element puts the n_below best before `mid` (in any order).
        for (auto it = finished.begin(); it != mid; ++it) below[*it] = 1;
      }
      if (!all)
        split_ = std::move(below);
      else
        all_below_ = std::move(below);
    }
    const std::vector<char>& is_below = all ? all_below_ : split_;
    std::vector<double> below_x, above_x;
    above_x.reserve(present.size() * n_dims);
    std::size_t nb = 0, na = 0;
    for (std::size_t i : present) {
      auto& dst = is_below[i] ? below_x : above_x;
      for (std::size_t d = 0; d < n_dims; ++d) dst.push_back((*cols[d])[i]);
      (is_below[i] ? nb : na)++;
    }
    std::vector<tpe::DimensionSpec> dims;
    for (const auto& d : dists) dims.push_back(tpe::DimensionSpec::from(d));
    std::vector<double> wb = weights(nb), wa = weights(na);
    std::vector<std::vector<std::size_t>> below_orders(n_dims), above_orders(n_dims);
    if (eopt_.bandwidth == tpe::BandwidthRule::kNeighbor) {
      // Each group's observations sorted by value per numeric dimension,
      // read off the cached sorted columns in O(n).
      std::vector<std::ptrdiff_t> pos(n, -1);  // index within its group
      std::size_t ib = 0, ia = 0;
      for (std::size_t i : present) pos[i] = static_cast<std::ptrdiff_t>(is_below[i] ? ib++ : ia++);
      for (std::size_t d = 0; d < n_dims; ++d) {
        if (dims[d].kind == tpe::DimensionSpec::Kind::kCategorical) continue;
        const Column& col = cache_.column(names[d], dists[d]);
        auto& bo = below_orders[d];
        auto& ao = above_orders[d];
        bo.reserve(nb);
        ao.reserve(na);
        for (std::size_t slot : col.sorted) {
          std::ptrdiff_t i = slot < h_.obs_of_slot.size() ? h_.obs_of_slot[slot] : -1;
          if (i < 0 || pos[static_cast<std::size_t>(i)] < 0) continue;
          auto ui = static_cast<std::size_t>(i);
          (is_below[ui] ? bo : ao).push_back(static_cast<std::size_t>(pos[ui]));
        }
        // Liars (no slot) are in the above group: merge them in.
        std::vector<std::size_t> liars;
        for (std::size_t i : present)
          if (h_.obs[i].slot < 0) liars.push_back(static_cast<std::size_t>(pos[i]));
        if (liars.empty()) continue;
        auto less = [&](std::size_t a, std::size_t b) {
          double va = above_x[a * n_dims + d], vb = above_x[b * n_dims + d];
          return va < vb || (va == vb && a < b);
        };
        std::sort(liars.begin(), liars.end(), less);
        std::vector<std::size_t> merged(ao.size() + liars.size());
        std::merge(ao.begin(), ao.end(), liars.begin(), liars.end(), merged.begin(), less);
        ao = std::move(merged);
      }
    }
    f.below = std::make_unique<tpe::ParzenEstimator>(dims, below_x, wb, eopt_, &below_orders);
    f.above = std::make_unique<tpe::ParzenEstimator>(dims, above_x, wa, eopt_, &above_orders);
    return f;
  }

  // Weights of a group of m observations in trial-number order.
  std::vector<double> weights(std::size_t m) const {
    std::vector<double> w(m, 1.0);
    if (options_.weights == TpeWeights::kOldDecay && m > options_.weights_window) {
      std::size_t r = m - options_.weights_window;
      for (std::size_t j = 0; j < r; ++j)
        w[j] = static_cast<double>(j + 1) / static_cast<double>(r + 1);
    }
    return w;
  }

  // The best of n_ei_candidates draws from l (internal values).
  std::vector<double> draw(const Fitted& f, const std::vector<Distribution>& dists,
                           std::mt19937_64& rng) const {
    std::vector<double> out(dists.size());
    if (f.random) {
      for (std::size_t d = 0; d < dists.size(); ++d) out[d] = RandomSampler::draw(rng, dists[d]);
      return out;
    }
    const std::size_t nc = options_.n_ei_candidates;
    std::vector<double> cand;
    f.below->sample(rng, nc, cand);
    std::vector<double> ll(nc), lg(nc);
    f.below->log_pdf(cand, ll);
    f.above->log_pdf(cand, lg);
    std::size_t best = 0;
    double best_score = -kInf;
    for (std::size_t j = 0; j < nc; ++j) {
      double s = ll[j] == -kInf ? -kInf : (lg[j] == -kInf ? kInf : ll[j] - lg[j]);
      if (j == 0 || s > best_score) {
        best = j;
        best_score = s;
      }
    }
    std::copy_n(cand.begin() + static_cast<std::ptrdiff_t>(best * dists.size()), dists.size(),
                out.begin());
    return out;
  }

  // Univariate: a fitted model per (name, distribution), built once per call.
  const Fitted& univariate(const std::string& name, const Distribution& d) {
    for (auto& [key, f] : uni_)
      if (key.first == name && key.second == d) return f;
    uni_.emplace_back(std::make_pair(name, d), fit({name}, {d}));
    return uni_.back().second;
  }

  // For each param: the number of finished observations it is present in
  // and a hash of that set (the "signature" used to group params).
  std::pair<std::size_t, std::uint64_t> presence(const std::string& name, const Distribution& d) {
    const std::vector<double>& v = values(name, d);
    std::size_t count = 0;
    std::uint64_t sig = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!h_.obs[i].finished || std::isnan(v[i])) continue;
      ++count;
      sig += splitmix64(static_cast<std::uint64_t>(h_.obs[i].trial->trial_id));
    }
    return {count, sig};
  }

 private:
  const TpeOptions& options_;
  TpeSampler::Cache& cache_;
  const History& h_;
  tpe::EstimatorOptions eopt_;
  std::vector<std::pair<std::pair<std::string, Distribution>, Fitted>> uni_;
  struct Memo {
    std::string name;
    Distribution distribution;
    std::vector<double> values;
  };
  std::vector<std::unique_ptr<Memo>> memo_;
  std::vector<char> all_below_;  // the split when every observation takes part
  std::vector<char> split_;      // the split of the latest fit() otherwise
};

History prepare_history(const SamplingContext& ctx, TpeSampler::Cache& cache, bool liar) {
  History h;
  h.obs.reserve(ctx.trials.size());
  const double sign = ctx.direction == StudyDirection::kMaximize ? -1.0 : 1.0;
  for (const TrialPtr& t : ctx.trials) {
    if (!t || t->number == ctx.trial.number) continue;
    if (t->state == TrialState::kComplete || t->state == TrialState::kPruned) {
      std::size_t s = cache.slot(t);
      const Slot& slot = cache.slots[s];
      if (t->state == TrialState::kComplete) h.taken.emplace_back(slot.params_hash, &t->params);
      if (!slot.usable) continue;
      Observation o;
      o.trial = t.get();
      o.slot = static_cast<std::ptrdiff_t>(s);
      o.finished = true;
      o.rank.value = slot.has_value ? sign * slot.value : kInf;
      o.rank.tier = t->state == TrialState::kComplete ? 0 : 1;
      o.rank.depth = slot.depth;
      o.rank.number = t->number;
      h.obs.push_back(o);
      ++h.n_finished;
      if (t->state == TrialState::kComplete) ++h.n_complete;
    } else if (t->state == TrialState::kRunning) {
      h.taken.emplace_back(hash_params(t->params), &t->params);
      if (!liar) continue;
      Observation o;
      o.trial = t.get();
      o.slot = -1;
      o.finished = false;
      o.rank.value = kInf;
      o.rank.tier = 2;
      o.rank.number = t->number;
      h.obs.push_back(o);
    }
  }
  h.obs_of_slot.assign(cache.slots.size(), -1);
  for (std::size_t i = 0; i < h.obs.size(); ++i)
    if (h.obs[i].slot >= 0)
      h.obs_of_slot[static_cast<std::size_t>(h.obs[i].slot)] = static_cast<std::ptrdiff_t>(i);
  return h;
}

// Number of points of a finite space (an upper bound with conditions), or
// +inf when a param is continuous.
double space_size(const SearchSpace& space, const Params& fixed) {
  double n = 1;
  for (const auto& spec : space.params()) {
    if (fixed.count(spec.name)) continue;
    std::uint64_t c = spec.distribution.cardinality();
    if (c == 0) return kInf;
    n *= static_cast<double>(c);
  }
  return n;
}

// Visits every assignment of the (finite) space that extends `fixed`,
// calling visit(params) at each complete one.
template <typename Visit>
void enumerate(const SearchSpace& space, std::size_t index, Params& params, const Params& fixed,
               Visit& visit) {
  const auto& specs = space.params();
  while (index < specs.size() &&
         (fixed.count(specs[index].name) || !SearchSpace::is_active(specs[index], params)))
    ++index;
  if (index == specs.size()) {
    visit(params);
    return;
  }
  const ParamSpec& spec = specs[index];
  const std::uint64_t c = spec.distribution.cardinality();
  for (std::uint64_t k = 0; k < c; ++k) {
    double internal =
        spec.distribution.is_indexed()
            ? static_cast<double>(k)
            : spec.distribution.low() + static_cast<double>(k) * spec.distribution.step();
    params[spec.name] = spec.distribution.to_external(internal);
    enumerate(space, index + 1, params, fixed, visit);
  }
  params.erase(spec.name);
}

}  // namespace

TpeSampler::TpeSampler(TpeOptions options)
    : options_(options.resolved()), cache_(std::make_unique<Cache>()) {
  options_.validate();
  seed_ = options_.seed
              ? *options_.seed
              : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

TpeSampler::~TpeSampler() = default;

void TpeSampler::set_n_workers(int n_workers) {
  std::lock_guard lock(mu_);
  n_workers_ = n_workers;
}

bool TpeSampler::constant_liar_active() const { return options_.constant_liar || n_workers_ > 1; }

void TpeSampler::sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) {
  std::lock_guard lock(mu_);
  const History h = prepare_history(ctx, *cache_, constant_liar_active() || ctx.n_workers > 1);
  const bool startup = h.n_complete < options_.n_startup_trials;
  TpeModel model(options_, *cache_, h);

  // Joint groups (multivariate): param name -> group index.
  std::vector<std::vector<std::size_t>> groups;  // indices into space.params()
  std::vector<std::ptrdiff_t> group_of(space.size(), -1);
  if (!startup && options_.multivariate) {
    std::map<std::pair<std::size_t, std::uint64_t>, std::size_t> by_signature;
    for (std::size_t i = 0; i < space.size(); ++i) {
      const ParamSpec& spec = space.params()[i];
      if (params.count(spec.name) || spec.distribution.single_value()) continue;
      auto sig = model.presence(spec.name, spec.distribution);
      if (sig.first == 0) continue;
      if (!options_.group) {
        if (sig.first != h.n_finished) continue;
        sig = {0, 0};
      }
      auto [it, fresh] = by_signature.emplace(sig, groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(i);
    }
    for (std::size_t g = 0; g < groups.size(); ++g)
      if (groups[g].size() >= 2)
        for (std::size_t i : groups[g]) group_of[i] = static_cast<std::ptrdiff_t>(g);
  }
  std::map<std::size_t, TpeModel::Fitted> joint_fits;

  const Params fixed = params;
  const std::size_t retries = options_.duplicate_retries;
  Params p;
  for (std::size_t attempt = 0; attempt < 2 * retries; ++attempt) {
    std::mt19937_64 rng(stream_seed(seed_, ctx.trial.number, attempt));
    const bool use_tpe = !startup && attempt < retries;
    p = fixed;
    std::map<std::size_t, double> pending;  // space index -> joint internal value
    std::vector<char> group_done(groups.size(), 0);
    bool sampled = false;
    for (std::size_t i = 0; i < space.size(); ++i) {
      const ParamSpec& spec = space.params()[i];
      const Distribution& d = spec.distribution;
      if (p.count(spec.name) || !SearchSpace::is_active(spec, p)) continue;
      sampled = true;
      double internal;
      if (d.single_value()) {
        internal = single_internal(d);
      } else if (!use_tpe) {
        internal = RandomSampler::draw(rng, d);
      } else if (group_of[i] >= 0) {
        std::size_t g = static_cast<std::size_t>(group_of[i]);
        if (!group_done[g]) {
          group_done[g] = 1;
          std::vector<std::string> names;
          std::vector<Distribution> dists;
          for (std::size_t j : groups[g]) {
            names.push_back(space.params()[j].name);
            dists.push_back(space.params()[j].distribution);
          }
          auto it = joint_fits.find(g);
          if (it == joint_fits.end()) it = joint_fits.emplace(g, model.fit(names, dists)).first;
          std::vector<double> x = model.draw(it->second, dists, rng);
          for (std::size_t m = 0; m < groups[g].size(); ++m) pending[groups[g][m]] = x[m];
        }
        internal = pending.at(i);
      } else {
        const auto& fitted = model.univariate(spec.name, d);
        internal = model.draw(fitted, {d}, rng)[0];
      }
      p[spec.name] = d.to_external(internal);
    }
    if (!sampled || !h.is_taken(p)) {
      params = std::move(p);
      return;
    }
  }

  // Every try gave a duplicate: look for an untried point of a finite space.
  if (space_size(space, fixed) <= kMaxEnumerate) {
    std::mt19937_64 rng(stream_seed(seed_, ctx.trial.number, ~0ULL));
    Params chosen;
    std::uint64_t untried = 0, total = 0;
    Params work = fixed;
    auto visit = [&](const Params& candidate) {
      ++total;
      if (h.is_taken(candidate)) return;
      ++untried;
      // Reservoir sampling: each untried point is chosen with equal chance.
      if (util::uniform01(rng) * static_cast<double>(untried) < 1.0) chosen = candidate;
    };
    enumerate(space, 0, work, fixed, visit);
    if (untried == 0) {
      std::string what = "search space exhausted: all ";
      what += std::to_string(total);
      what += " points were tried (COMPLETE or RUNNING)";
      throw SearchSpaceExhausted(what);
    }
    params = std::move(chosen);
    return;
  }
  // A huge or continuous space where every try collided (practically
  // impossible): keep the last draw.
  params = std::move(p);
}

double TpeSampler::sample_independent(const SamplingContext& ctx, const std::string& name,
                                      const Distribution& distribution) {
  std::lock_guard lock(mu_);
  if (distribution.single_value()) return single_internal(distribution);
  const History h = prepare_history(ctx, *cache_, constant_liar_active() || ctx.n_workers > 1);
  std::mt19937_64 rng(stream_seed(seed_, ctx.trial.number, hash_name(name)));
  if (h.n_complete < options_.n_startup_trials) return RandomSampler::draw(rng, distribution);
  TpeModel model(options_, *cache_, h);

  if (options_.multivariate && h.n_finished > 0) {
    const Cache::PendingKey key{
        ctx.trial.trial_id, ctx.trial.number,
        ctx.trial.datetime_start ? ctx.trial.datetime_start->time_since_epoch().count() : 0};
    auto it = cache_->pending.find(key);
    if (it == cache_->pending.end()) {
      // First suggest of this trial: draw every param shared by all finished
      // observations (as recorded in the newest one) jointly.
      PendingJoint joint;
      const FrozenTrial* newest = nullptr;
      for (auto o = h.obs.rbegin(); o != h.obs.rend(); ++o)
        if (o->finished) {
          newest = o->trial;
          break;
        }
      for (const auto& [pname, pdist] : newest->distributions) {
        if (ctx.trial.params.count(pname) || pdist.single_value()) continue;
        if (model.presence(pname, pdist).first != h.n_finished) continue;
        joint.names.push_back(pname);
        joint.distributions.push_back(pdist);
      }
      if (joint.names.size() >= 2) {
        std::mt19937_64 jrng(stream_seed(seed_, ctx.trial.number, 0x6A6F696E74ULL));
        auto fitted = model.fit(joint.names, joint.distributions);
        joint.values = model.draw(fitted, joint.distributions, jrng);
      } else {
        joint.names.clear();
        joint.distributions.clear();
      }
      it = cache_->pending.emplace(key, std::move(joint)).first;
      while (cache_->pending.size() > kMaxPending) cache_->pending.erase(cache_->pending.begin());
    }
    const PendingJoint& joint = it->second;
    for (std::size_t m = 0; m < joint.names.size(); ++m)
      if (joint.names[m] == name && joint.distributions[m] == distribution) return joint.values[m];
  }
  return model.draw(model.univariate(name, distribution), {distribution}, rng)[0];
}

}  // namespace hps
