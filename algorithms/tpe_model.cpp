#include "algorithms/tpe_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "algorithms/buffer_pool.h"
#include "algorithms/random_sampler.h"
#include "search/util/random.h"

namespace hps::tpe {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The candidate with the largest log l(x) - log g(x) (the first on ties;
// l = 0 never wins, g = 0 always does): Bergstra et al. 2011, section 4.
std::size_t best_candidate(const std::vector<double>& ll, const std::vector<double>& lg) {
  std::size_t best = 0;
  double best_score = -kInf;
  for (std::size_t j = 0; j < ll.size(); ++j) {
    double s = ll[j] == -kInf ? -kInf : (lg[j] == -kInf ? kInf : ll[j] - lg[j]);
    if (j == 0 || s > best_score) {
      best = j;
      best_score = s;
    }
  }
  return best;
}

// Merges the liars (RUNNING trials: no slot, always in the above group) at
// positions `liars` of the above group into `ao`, the above group's order
// along dimension d.
void merge_liars(std::vector<std::size_t> liars, const std::vector<double>& above_x,
                 std::size_t n_dims, std::size_t d, std::vector<std::size_t>& ao) {
  if (liars.empty()) return;
  auto less = [&](std::size_t a, std::size_t b) {
    double va = above_x[a * n_dims + d], vb = above_x[b * n_dims + d];
    return va < vb || (va == vb && a < b);
  };
  std::sort(liars.begin(), liars.end(), less);
  std::vector<std::size_t> merged(ao.size() + liars.size());
  std::merge(ao.begin(), ao.end(), liars.begin(), liars.end(), merged.begin(), less);
  ao = std::move(merged);
}

}  // namespace

EstimatorOptions estimator_options(const TpeOptions& o) {
  EstimatorOptions e;
  e.consider_prior = o.consider_prior;
  e.prior_weight = o.prior_weight;
  e.consider_magic_clip = o.consider_magic_clip.value_or(true);
  e.consider_endpoints = o.consider_endpoints;
  e.bandwidth = o.bandwidth.value_or(BandwidthRule::kNeighbor);
  e.bandwidth_factor = o.bandwidth_factor.value_or(1.0);
  e.min_bandwidth_factor = o.min_bandwidth_factor.value_or(0.0);
  e.min_bandwidth_cells = o.min_bandwidth_cells.value_or(0.0);
  e.equal_heights = o.equal_kernel_heights.value_or(false);
  e.categorical_kernel = o.categorical_kernel;
  return e;
}

EstimatorOptions TpeModel::group_estimator_options(const std::vector<DimensionSpec>& dims) const {
  EstimatorOptions e = eopt_;
  if (options_.bandwidth) return e;
  std::size_t categorical = 0;
  for (const DimensionSpec& d : dims)
    if (d.kind == DimensionSpec::Kind::kCategorical) ++categorical;
  if (2 * categorical > dims.size() && categorical < dims.size())
    e.bandwidth = BandwidthRule::kRange;
  return e;
}

void TpeModel::index_observations() const {
  if (indexed_) return;
  indexed_ = true;
  obs_slot_ = pool<std::ptrdiff_t>().take(h_.obs.size());
  obs_finished_ = pool<char>().take(h_.obs.size());
  for (const Observation& o : h_.obs) {
    obs_slot_.push_back(o.slot);
    obs_finished_.push_back(o.finished ? 1 : 0);
  }
}

const std::vector<double>& TpeModel::values(const std::string& name, const Distribution& d) {
  for (const auto& m : memo_)
    if (m->name == name && m->distribution == d) return m->values;
  TpeSampler::Cache::Column& col = cache_.column(name, d);
  index_observations();
  auto m = std::make_unique<Memo>(Memo{name, d, pooled<double>(h_.obs.size()), 0});
  const double* cv = col.values.data();
  for (std::size_t i = 0; i < h_.obs.size(); ++i) {
    const std::ptrdiff_t slot = obs_slot_[i];
    const double v = slot >= 0 ? cv[static_cast<std::size_t>(slot)]
                               : TpeSampler::Cache::internal_value(*h_.obs[i].trial, name, d);
    m->values[i] = v;
    m->n_nan += std::isnan(v) ? std::size_t{1} : std::size_t{0};
  }
  memo_.push_back(std::move(m));
  return memo_.back()->values;
}

TpeModel::Selection TpeModel::select(const std::vector<const std::vector<double>*>& cols) const {
  const std::size_t n = h_.obs.size();
  index_observations();
  // Columns of values() without a NaN: every observation is present.
  const bool all = std::all_of(cols.begin(), cols.end(), [&](const std::vector<double>* c) {
    return std::any_of(memo_.begin(), memo_.end(),
                       [&](const auto& m) { return &m->values == c && m->n_nan == 0; });
  });
  Selection sel;
  sel.present = pool<std::size_t>().take(n);
  sel.finished = pool<std::size_t>().take(n);
  if (all && all_selected_) {
    sel.present.assign(all_present_.begin(), all_present_.end());
    sel.finished.assign(all_finished_.begin(), all_finished_.end());
    return sel;
  }
  for (std::size_t i = 0; i < n; ++i) {
    bool ok = std::none_of(cols.begin(), cols.end(),
                           [&](const std::vector<double>* c) { return std::isnan((*c)[i]); });
    if (!ok) continue;
    sel.present.push_back(i);
    if (obs_finished_[i]) sel.finished.push_back(i);
  }
  if (all) {
    all_present_ = pool<std::size_t>().take(n);
    all_finished_ = pool<std::size_t>().take(n);
    all_present_.assign(sel.present.begin(), sel.present.end());
    all_finished_.assign(sel.finished.begin(), sel.finished.end());
    all_selected_ = true;
  }
  return sel;
}

std::vector<char> TpeModel::split_of(std::vector<std::size_t>& finished, bool branch) const {
  const TpeGamma& gamma = branch && options_.branch_gamma ? *options_.branch_gamma : options_.gamma;
  std::size_t n_below =
      options_.gamma_function ? options_.gamma_function(finished.size()) : gamma(finished.size());
  n_below = std::min(n_below, finished.size());
  std::vector<char> below(h_.obs.size(), 0);
  if (n_below > 0) {
    auto mid = finished.begin() + static_cast<std::ptrdiff_t>(n_below);
    std::nth_element(finished.begin(), mid - 1, finished.end(), [&](std::size_t a, std::size_t b) {
      return better(h_.obs[a].rank, h_.obs[b].rank);
    });
    // nth_element puts the n_below best before `mid` (in any order).
    for (auto it = finished.begin(); it != mid; ++it) below[*it] = 1;
  }
  return below;
}

const std::vector<char>& TpeModel::split(Selection& sel) {
  // The split is the same for every param present in all observations:
  // compute it once per call.
  const bool all = sel.present.size() == h_.obs.size();
  if (all && !all_below_.empty()) return all_below_;
  std::vector<char>& out = all ? all_below_ : split_;
  // Only branch_gamma tells a conditional history apart (and gamma_function
  // replaces it): skip the O(n) check of every trial's param names otherwise.
  const bool branch_rule = options_.branch_gamma && !options_.gamma_function;
  out = split_of(sel.finished, all && branch_rule && conditional_history());
  return out;
}

bool TpeModel::conditional_history() {
  if (conditional_ >= 0) return conditional_ == 1;
  const Params* first = nullptr;
  conditional_ = 0;
  for (const Observation& o : h_.obs) {
    if (!o.finished) continue;
    if (!first) {
      first = &o.trial->params;
      continue;
    }
    const Params& p = o.trial->params;
    if (p.size() != first->size() ||
        !std::equal(p.begin(), p.end(), first->begin(),
                    [](const auto& a, const auto& b) { return a.first == b.first; })) {
      conditional_ = 1;
      break;
    }
  }
  return conditional_ == 1;
}

void TpeModel::neighbor_orders(const std::vector<std::string>& names,
                               const std::vector<Distribution>& dists,
                               const std::vector<DimensionSpec>& dims, const Selection& sel,
                               const std::vector<char>& is_below,
                               const std::vector<double>& above_x,
                               std::vector<std::vector<std::size_t>>& below_orders,
                               std::vector<std::vector<std::size_t>>& above_orders) const {
  const std::size_t n_dims = names.size();
  // Per cache slot, where its observation goes: 0 nowhere (absent, or not
  // in this call), k > 0 position k - 1 of the above group, k < 0 position
  // -k - 1 of the below group. One small array read per sorted slot (the
  // walk below visits slots in value order, i.e. at random).
  std::vector<std::int32_t> tag = pooled<std::int32_t>(h_.obs_of_slot.size(), 0);
  const PooledScope<std::int32_t> keep_tag(tag);
  std::vector<std::size_t> liars;  // positions in the above group
  std::size_t ib = 0, ia = 0;
  for (std::size_t i : sel.present) {
    const bool below = is_below[i] != 0;
    const std::size_t p = below ? ib++ : ia++;
    const std::ptrdiff_t slot = obs_slot_[i];
    if (slot < 0) {
      liars.push_back(p);
      continue;
    }
    const auto k = static_cast<std::int32_t>(p) + 1;
    tag[static_cast<std::size_t>(slot)] = below ? -k : k;
  }
  for (std::size_t d = 0; d < n_dims; ++d) {
    if (dims[d].kind == DimensionSpec::Kind::kCategorical) continue;
    const TpeSampler::Cache::Column& col = cache_.column(names[d], dists[d]);
    auto& bo = below_orders[d];
    auto& ao = above_orders[d];
    bo = pool<std::size_t>().take(ib);
    ao = pool<std::size_t>().take(ia);
    for (std::size_t slot : col.sorted) {
      const std::int32_t k = slot < tag.size() ? tag[slot] : 0;
      if (k > 0)
        ao.push_back(static_cast<std::size_t>(k - 1));
      else if (k < 0)
        bo.push_back(static_cast<std::size_t>(-k - 1));
    }
    merge_liars(liars, above_x, n_dims, d, ao);
  }
}

void TpeModel::estimate(const std::vector<std::string>& names,
                        const std::vector<Distribution>& dists,
                        const std::vector<const std::vector<double>*>& cols, const Selection& sel,
                        const std::vector<char>& is_below, std::unique_ptr<ParzenEstimator>& below,
                        std::unique_ptr<ParzenEstimator>& above, std::size_t& nb, std::size_t& na,
                        std::unique_ptr<ParzenEstimator>* promising,
                        std::unique_ptr<AboveInputs>* defer) const {
  const std::size_t n_dims = names.size();
  std::vector<double> below_x, above_x = pool<double>().take(sel.present.size() * n_dims);
  const PooledScope<double> keep_above_x(above_x);
  nb = 0;
  na = 0;
  for (std::size_t i : sel.present) {
    auto& dst = is_below[i] ? below_x : above_x;
    for (std::size_t d = 0; d < n_dims; ++d) dst.push_back((*cols[d])[i]);
    (is_below[i] ? nb : na)++;
  }
  std::vector<DimensionSpec> dims;
  dims.reserve(dists.size());
  for (const auto& d : dists) dims.push_back(DimensionSpec::from(d));
  const EstimatorOptions eopt = group_estimator_options(dims);
  const std::vector<double>& wb = group_weights(nb);
  const std::vector<double>& wa = group_weights(na);
  std::vector<std::vector<std::size_t>> below_orders(n_dims), above_orders(n_dims);
  if (eopt.bandwidth == BandwidthRule::kNeighbor)
    neighbor_orders(names, dists, dims, sel, is_below, above_x, below_orders, above_orders);
  struct GiveOrders {
    std::vector<std::vector<std::size_t>>& b;
    std::vector<std::vector<std::size_t>>& a;
    ~GiveOrders() {
      for (auto* list : {&b, &a})
        for (auto& v : *list) pool<std::size_t>().give(v);
    }
  } give_orders{below_orders, above_orders};
  // The normalizers kept in the cache's columns, by slot (liars: none),
  // for several dimensions: a one-dimensional above group is fitted near
  // its candidates only (log_pdf_at), and keeping the normalizers of a
  // one-dimensional below group did not pay (measured: bench/tpe_latency).
  NormalizerMemos below_memos, above_memos;
  std::vector<std::ptrdiff_t> below_slots, above_slots;
  const PooledScope<std::ptrdiff_t> keep_below_slots(below_slots), keep_above_slots(above_slots);
  if (n_dims > 1 && std::max(nb, na) >= ParzenEstimator::kMemoMinKernels) {
    index_observations();
    below_slots = pool<std::ptrdiff_t>().take(nb);
    above_slots = pool<std::ptrdiff_t>().take(na);
    for (std::size_t i : sel.present)
      (is_below[i] ? below_slots : above_slots).push_back(obs_slot_[i]);
    std::vector<NormalizerMemo*> by_dim(n_dims, nullptr);
    for (std::size_t d = 0; d < n_dims; ++d)
      if (dims[d].kind != DimensionSpec::Kind::kCategorical)
        by_dim[d] = &cache_.column(names[d], dists[d]).normalizers;
    below_memos = {below_slots, by_dim};
    above_memos = {above_slots, std::move(by_dim)};
  }
  below = std::make_unique<ParzenEstimator>(dims, below_x, wb, eopt, &below_orders, &below_memos);
  EstimatorOptions above_opt = eopt;
  above_opt.density_only = true;  // g(x) is only evaluated
  if (defer && n_dims == 1 && dims[0].kind != DimensionSpec::Kind::kCategorical) {
    auto in = std::make_unique<AboveInputs>();
    in->dims = dims;
    in->x = std::move(above_x);
    in->weights = &wa;
    in->log_weights = group_log_weights(na);
    in->orders = std::move(above_orders);
    above_orders.assign(n_dims, {});
    in->options = above_opt;
    *defer = std::move(in);
  } else {
    above = std::make_unique<ParzenEstimator>(dims, above_x, wa, above_opt, &above_orders,
                                              &above_memos);
  }
  if (promising && nb > 0) {
    // The paper's promising density: the below group alone, kernels at
    // least a tenth of the domain wide.
    EstimatorOptions p = eopt;
    p.consider_prior = false;
    p.min_bandwidth_factor = std::max(p.min_bandwidth_factor, 0.1);
    *promising = std::make_unique<ParzenEstimator>(dims, below_x, wb, p, &below_orders);
  }
}

TpeModel::Fitted TpeModel::fit(const std::vector<std::string>& names,
                               const std::vector<Distribution>& dists) {
  const std::size_t n_dims = names.size();
  std::vector<const std::vector<double>*> cols;
  cols.reserve(n_dims);
  for (std::size_t d = 0; d < n_dims; ++d) cols.push_back(&values(names[d], dists[d]));
  Selection sel = select(cols);
  const PooledScope<std::size_t> keep_present(sel.present), keep_finished(sel.finished);
  Fitted f;
  if (sel.finished.empty()) {
    f.random = true;
    return f;
  }
  if (h_.n_tasks > 1 && options_.warm_start_weighting == TpeWarmStartWeighting::kSimilarity) {
    fit_tasks(names, dists, cols, sel, f);
    return f;
  }
  const std::vector<char>& is_below = split(sel);
  std::size_t nb = 0, na = 0;
  estimate(names, dists, cols, sel, is_below, f.below, f.above, nb, na, nullptr, &f.above_inputs);
  if (n_dims >= 2 && (options_.marginal_mixture_auto || options_.marginal_mixture_select ||
                      options_.marginal_mixture.value_or(0.0) > 0)) {
    f.marginal_weight = options_.marginal_mixture.value_or(0.0);
    if (options_.marginal_mixture_auto || options_.marginal_mixture_select) {
      std::vector<DimensionSpec> dims;
      dims.reserve(n_dims);
      for (const auto& d : dists) dims.push_back(DimensionSpec::from(d));
      std::vector<double> below_x;
      if (options_.marginal_mixture_auto)
        for (std::size_t i : sel.present)
          if (is_below[i])
            for (std::size_t d = 0; d < n_dims; ++d) below_x.push_back((*cols[d])[i]);
      f.marginal_weight = options_.marginal_mixture_auto ? fit_marginal_weight(dims, below_x)
                          : select_product(names, dims, cols, sel) ? 1.0
                                                                   : 0.0;
      // "select" chose the joint model: draw as without the option.
      if (f.marginal_weight == 0) return f;
    }
    // The product of the params' own estimators, from the same split.
    f.marginal_below.resize(n_dims);
    f.marginal_above.resize(n_dims);
    for (std::size_t d = 0; d < n_dims; ++d) {
      std::size_t nb1 = 0, na1 = 0;
      estimate({names[d]}, {dists[d]}, {cols[d]}, sel, is_below, f.marginal_below[d],
               f.marginal_above[d], nb1, na1, nullptr, nullptr);
    }
  }
  return f;
}

void TpeModel::fit_tasks(const std::vector<std::string>& names,
                         const std::vector<Distribution>& dists,
                         const std::vector<const std::vector<double>*>& cols, const Selection& sel,
                         Fitted& f) const {
  std::vector<Selection> per(h_.n_tasks);
  for (std::size_t i : sel.present) per[h_.obs[i].task].present.push_back(i);
  for (std::size_t i : sel.finished) per[h_.obs[i].task].finished.push_back(i);
  f.tasks.resize(h_.n_tasks);
  std::vector<std::size_t> nb(h_.n_tasks, 0), na(h_.n_tasks, 0);
  std::vector<std::unique_ptr<ParzenEstimator>> promising(h_.n_tasks);
  double n_present_tasks = 0;
  for (std::size_t t = 0; t < h_.n_tasks; ++t) {
    // The new study is a task even without observations of these params.
    if (t > 0 && per[t].present.empty()) continue;
    n_present_tasks += 1;
    if (per[t].present.empty()) continue;
    std::vector<char> is_below = split_of(per[t].finished);
    estimate(names, dists, cols, per[t], is_below, f.tasks[t].below, f.tasks[t].above, nb[t], na[t],
             &promising[t]);
  }
  // Task weights w_t from the similarities s_t (Watanabe et al. 2023).
  std::vector<double> w(h_.n_tasks, 0.0);
  double sum_s = 0;
  for (std::size_t t = 1; t < h_.n_tasks; ++t) {
    if (per[t].present.empty()) continue;
    double s = 1.0;
    if (promising[0] && promising[t]) s = similarity(*promising[0], *promising[t], dists);
    f.tasks[t].similarity = s;
    w[t] = s / n_present_tasks;
    sum_s += s;
  }
  w[0] = 1.0 - sum_s / n_present_tasks;
  double zb = 0, za = 0;
  for (std::size_t t = 0; t < h_.n_tasks; ++t) {
    zb += w[t] * static_cast<double>(nb[t]);
    za += w[t] * static_cast<double>(na[t]);
  }
  for (std::size_t t = 0; t < h_.n_tasks; ++t) {
    TaskPart& part = f.tasks[t];
    part.below_weight = zb > 0 ? w[t] * static_cast<double>(nb[t]) / zb : 0.0;
    part.above_weight = za > 0 ? w[t] * static_cast<double>(na[t]) / za : 0.0;
    if (part.below_weight <= 0) part.below.reset();
    if (part.above_weight <= 0) part.above.reset();
  }
  // A side without any weight (no observation in it): the prior alone.
  std::vector<DimensionSpec> dims;
  dims.reserve(dists.size());
  for (const auto& d : dists) dims.push_back(DimensionSpec::from(d));
  if (!(zb > 0)) {
    f.tasks[0].below = std::make_unique<ParzenEstimator>(dims, std::span<const double>(),
                                                         std::span<const double>(), eopt_);
    f.tasks[0].below_weight = 1.0;
  }
  if (!(za > 0)) {
    f.tasks[0].above = std::make_unique<ParzenEstimator>(dims, std::span<const double>(),
                                                         std::span<const double>(), eopt_);
    f.tasks[0].above_weight = 1.0;
  }
}

double TpeModel::similarity(const ParzenEstimator& a, const ParzenEstimator& b,
                            const std::vector<Distribution>& dists) {
  const std::size_t n_dims = dists.size();
  std::mt19937_64 rng(0x73696D696C6172ULL);  // fixed: the same history, the same estimate
  std::vector<double> points(kSimilaritySamples * n_dims);
  for (std::size_t k = 0; k < kSimilaritySamples; ++k)
    for (std::size_t d = 0; d < n_dims; ++d)
      points[k * n_dims + d] = RandomSampler::draw(rng, dists[d]);
  const auto top = static_cast<std::size_t>(
      std::max(1.0, std::floor(kSimilarityTop * static_cast<double>(kSimilaritySamples))));
  auto top_set = [&](const ParzenEstimator& e) {
    std::vector<double> lp(kSimilaritySamples);
    e.log_pdf(points, lp);
    std::vector<std::size_t> idx(kSimilaritySamples);
    for (std::size_t k = 0; k < idx.size(); ++k) idx[k] = k;
    std::nth_element(
        idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(top - 1), idx.end(),
        [&](std::size_t x, std::size_t y) { return lp[x] > lp[y] || (lp[x] == lp[y] && x < y); });
    std::vector<char> in(kSimilaritySamples, 0);
    for (std::size_t k = 0; k < top; ++k) in[idx[k]] = 1;
    return in;
  };
  const std::vector<char> in_a = top_set(a), in_b = top_set(b);
  std::size_t both = 0;
  for (std::size_t k = 0; k < kSimilaritySamples; ++k)
    if (in_a[k] && in_b[k]) ++both;
  return static_cast<double>(both) / static_cast<double>(2 * top - both);
}

std::vector<double> TpeModel::weights(std::size_t m) const {
  std::vector<double> w = pooled<double>(m, 1.0);
  if (options_.weights == TpeWeights::kOldDecay && m > options_.weights_window) {
    std::size_t r = m - options_.weights_window;
    for (std::size_t j = 0; j < r; ++j)
      w[j] = static_cast<double>(j + 1) / static_cast<double>(r + 1);
  }
  return w;
}

std::vector<double> TpeModel::draw(const Fitted& f, const std::vector<Distribution>& dists,
                                   std::mt19937_64& rng) const {
  std::vector<double> out(dists.size());
  if (f.random) {
    for (std::size_t d = 0; d < dists.size(); ++d) out[d] = RandomSampler::draw(rng, dists[d]);
    return out;
  }
  if (!f.tasks.empty()) return draw_mixture(f, dists.size(), rng);
  if (!f.marginal_below.empty()) return draw_marginal_mixture(f, dists.size(), rng);
  const std::size_t nc = options_.n_ei_candidates;
  std::vector<double> cand;
  f.below->sample(rng, nc, cand);
  std::vector<double> ll(nc), lg(nc);
  f.below->log_pdf(cand, ll);
  if (f.above_inputs && !f.drawn) {
    const AboveInputs& in = *f.above_inputs;
    ParzenEstimator::log_pdf_at(
        in.dims, in.x, *in.weights, in.options, &in.orders, cand, lg,
        in.log_weights ? std::span<const double>(*in.log_weights) : std::span<const double>());
  } else {
    if (!f.above) {
      const AboveInputs& in = *f.above_inputs;
      f.above =
          std::make_unique<ParzenEstimator>(in.dims, in.x, *in.weights, in.options, &in.orders);
    }
    f.above->log_pdf(cand, lg);
  }
  f.drawn = true;
  const std::size_t best = best_candidate(ll, lg);
  std::copy_n(cand.begin() + static_cast<std::ptrdiff_t>(best * dists.size()), dists.size(),
              out.begin());
  return out;
}

double TpeModel::fit_marginal_weight(const std::vector<DimensionSpec>& dims,
                                     const std::vector<double>& below_x) const {
  const std::size_t n_dims = dims.size();
  const std::size_t m = below_x.size() / n_dims;
  constexpr double kStart = 0.5;
  if (m < 2) return kStart;  // nothing to compare: the even mixture
  const std::vector<double>& w = group_weights(m);
  // Leave-one-out log densities of each below observation under the joint
  // estimator (lj) and the product of the marginals (lp).
  std::vector<double> lj(m), lp(m, 0.0), rest, rest_w, one(1), point(n_dims);
  for (std::size_t i = 0; i < m; ++i) {
    rest.clear();
    rest_w.clear();
    for (std::size_t k = 0; k < m; ++k) {
      if (k == i) continue;
      rest.insert(rest.end(), below_x.begin() + static_cast<std::ptrdiff_t>(k * n_dims),
                  below_x.begin() + static_cast<std::ptrdiff_t>((k + 1) * n_dims));
      rest_w.push_back(w[k]);
    }
    std::copy_n(below_x.begin() + static_cast<std::ptrdiff_t>(i * n_dims), n_dims, point.begin());
    ParzenEstimator(dims, rest, rest_w, eopt_).log_pdf(point, std::span<double>(&lj[i], 1));
    std::vector<double> col(m - 1);
    for (std::size_t d = 0; d < n_dims; ++d) {
      for (std::size_t k = 0; k < m - 1; ++k) col[k] = rest[k * n_dims + d];
      ParzenEstimator({dims[d]}, col, rest_w, eopt_)
          .log_pdf(std::span<const double>(&point[d], 1), one);
      lp[i] += one[0];
    }
  }
  // EM for the weight a of the product: a <- mean of the responsibilities.
  double a = kStart;
  for (int it = 0; it < 200; ++it) {
    double sum = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const double x = std::log(a) + lp[i], y = std::log1p(-a) + lj[i];
      const double hi = std::max(x, y);
      sum += hi == -kInf ? 0.5 : std::exp(x - hi) / (std::exp(x - hi) + std::exp(y - hi));
    }
    const double next = std::clamp(sum / static_cast<double>(m), 0.01, 0.99);
    const bool done = std::abs(next - a) < 1e-4;
    a = next;
    if (done) break;
  }
  return a;
}

namespace {

// Log densities of the rows `self` (leave-one-out: each row under the
// estimators fitted to the other rows) and of the rows `other` (under the
// estimators fitted to all of `self`), for the joint estimator (j) and the
// product of the marginals (p).
struct CrossDensities {
  std::vector<double> self_j, self_p, other_j, other_p;
};

CrossDensities cross_densities(const std::vector<DimensionSpec>& dims,
                               const std::vector<double>& self, const std::vector<double>& w,
                               const std::vector<double>& other, const EstimatorOptions& eopt) {
  const std::size_t n_dims = dims.size();
  const std::size_t m = self.size() / n_dims, o = other.size() / n_dims;
  CrossDensities c;
  c.self_j.assign(m, 0.0);
  c.self_p.assign(m, 0.0);
  c.other_j.assign(o, 0.0);
  c.other_p.assign(o, 0.0);
  std::vector<double> rest, rest_w, col, pts, lp;
  auto densities = [&](std::span<const double> rows, std::span<const double> rw,
                       std::span<const double> points, double* joint, double* prod) {
    const std::size_t k = points.size() / n_dims;
    lp.resize(k);
    ParzenEstimator(dims, rows, rw, eopt).log_pdf(points, std::span<double>(lp.data(), k));
    for (std::size_t i = 0; i < k; ++i) joint[i] = lp[i];
    const std::size_t r = rows.size() / n_dims;
    for (std::size_t d = 0; d < n_dims; ++d) {
      col.resize(r);
      for (std::size_t q = 0; q < r; ++q) col[q] = rows[q * n_dims + d];
      pts.resize(k);
      for (std::size_t i = 0; i < k; ++i) pts[i] = points[i * n_dims + d];
      ParzenEstimator({dims[d]}, col, rw, eopt).log_pdf(pts, std::span<double>(lp.data(), k));
      for (std::size_t i = 0; i < k; ++i) prod[i] += lp[i];
    }
  };
  if (o > 0) densities(self, w, other, c.other_j.data(), c.other_p.data());
  for (std::size_t i = 0; i < m; ++i) {
    rest.clear();
    rest_w.clear();
    for (std::size_t k = 0; k < m; ++k) {
      if (k == i) continue;
      rest.insert(rest.end(), self.begin() + static_cast<std::ptrdiff_t>(k * n_dims),
                  self.begin() + static_cast<std::ptrdiff_t>((k + 1) * n_dims));
      rest_w.push_back(w[k]);
    }
    densities(rest, rest_w, std::span<const double>(self.data() + i * n_dims, n_dims), &c.self_j[i],
              &c.self_p[i]);
  }
  return c;
}

}  // namespace

bool product_classifies_better(const std::vector<DimensionSpec>& dims,
                               const std::vector<double>& below_x,
                               const std::vector<double>& below_w,
                               const std::vector<double>& above_x,
                               const std::vector<double>& above_w,
                               const EstimatorOptions& options) {
  const std::size_t n_dims = dims.size();
  if (n_dims < 2) return false;
  const std::size_t nb = below_x.size() / n_dims, na = above_x.size() / n_dims;
  if (nb < 2 || na < 2 || nb + na < kSelectMinObservations) return false;
  for (const DimensionSpec& d : dims)
    if (d.kind == DimensionSpec::Kind::kCategorical) return false;
  const CrossDensities l = cross_densities(dims, below_x, below_w, above_x, options);
  const CrossDensities g = cross_densities(dims, above_x, above_w, below_x, options);
  const double prior = std::log(static_cast<double>(nb) / static_cast<double>(na));
  // Log-likelihood of the below/above labels under each model's
  // classifier P(below | x) = sigmoid(log l - log g + log(nb / na)).
  auto log_sigmoid = [](double z) {
    return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z));
  };
  double lj = 0, lp = 0;
  for (std::size_t i = 0; i < nb; ++i) {
    lj += log_sigmoid(l.self_j[i] - g.other_j[i] + prior);
    lp += log_sigmoid(l.self_p[i] - g.other_p[i] + prior);
  }
  for (std::size_t i = 0; i < na; ++i) {
    lj += log_sigmoid(-(l.other_j[i] - g.self_j[i] + prior));
    lp += log_sigmoid(-(l.other_p[i] - g.self_p[i] + prior));
  }
  // The product's gain in label log-likelihood, in nats per observation
  // and param.
  const double gain = (lp - lj) / static_cast<double>((nb + na) * n_dims);
  return gain > kSelectMinGain;  // false for NaN
}

std::size_t select_checkpoint(std::size_t n) {
  if (n < kSelectMinObservations) return 0;
  std::size_t c = kSelectMinObservations;
  for (;;) {
    const std::size_t next = c + std::max<std::size_t>(kSelectMinStep, c / kSelectStepDivisor);
    if (next > n) return c;
    c = next;
  }
}

bool TpeModel::select_product(const std::vector<std::string>& names,
                              const std::vector<DimensionSpec>& dims,
                              const std::vector<const std::vector<double>*>& cols,
                              const Selection& sel) const {
  for (const DimensionSpec& d : dims)
    if (d.kind == DimensionSpec::Kind::kCategorical) return false;
  // The finished observations in the history's order; the decision is
  // taken on the first `c` of them (a checkpoint), so it is the same
  // whenever the same trials have finished, whichever calls came before.
  std::vector<std::size_t> finished;
  for (std::size_t i : sel.present)
    if (h_.obs[i].finished) finished.push_back(i);
  const std::size_t c = select_checkpoint(finished.size());
  if (c == 0) return false;
  finished.resize(c);
  const FrozenTrial* last = h_.obs[finished.back()].trial;
  std::string key;
  for (const std::string& n : names) (key += n) += '\n';
  key += std::to_string(c) + '\n' + std::to_string(last ? last->trial_id : -1) + '\n' +
         std::to_string(last ? last->number : -1);
  if (auto it = cache_.product_choice.find(key); it != cache_.product_choice.end())
    return it->second;
  std::vector<std::size_t> order = finished;  // split_of reorders its argument
  const std::vector<char> is_below = split_of(order);
  // The most recent kSelectMaxRows of them.
  const std::size_t first = c > kSelectMaxRows ? c - kSelectMaxRows : 0;
  const std::size_t n_dims = dims.size();
  std::vector<double> below_x, above_x;
  for (std::size_t r = first; r < c; ++r) {
    const std::size_t i = finished[r];
    for (std::size_t d = 0; d < n_dims; ++d)
      (is_below[i] ? below_x : above_x).push_back((*cols[d])[i]);
  }
  const bool product =
      product_classifies_better(dims, below_x, group_weights(below_x.size() / n_dims), above_x,
                                group_weights(above_x.size() / n_dims), eopt_);
  if (cache_.product_choice.size() >= TpeSampler::Cache::kMaxProductChoices)
    cache_.product_choice.clear();
  cache_.product_choice.emplace(std::move(key), product);
  return product;
}

std::vector<double> TpeModel::draw_marginal_mixture(const Fitted& f, std::size_t n_dims,
                                                    std::mt19937_64& rng) const {
  // l = (1 - a) l_joint + a prod_d l_d, g likewise: a share a of the
  // candidates from the product of the marginals (stratified), the rest
  // from the joint estimator, all scored by the mixtures' log l - log g.
  const double a = f.marginal_weight;
  const std::size_t nc = options_.n_ei_candidates;
  const auto n_marg = static_cast<std::size_t>(std::lround(a * static_cast<double>(nc)));
  std::vector<double> cand, one;
  f.below->sample(rng, nc - n_marg, cand);
  cand.resize(nc * n_dims);
  for (std::size_t d = 0; d < n_dims; ++d) {
    f.marginal_below[d]->sample(rng, n_marg, one);
    for (std::size_t j = 0; j < n_marg; ++j) cand[(nc - n_marg + j) * n_dims + d] = one[j];
  }
  if (!f.above) {
    const AboveInputs& in = *f.above_inputs;
    f.above = std::make_unique<ParzenEstimator>(in.dims, in.x, *in.weights, in.options, &in.orders);
  }
  f.drawn = true;
  auto mixture = [&](const ParzenEstimator& joint,
                     const std::vector<std::unique_ptr<ParzenEstimator>>& marginals) {
    std::vector<double> lj(nc), lm(nc, 0.0), lp(nc), col(nc);
    joint.log_pdf(cand, lj);
    for (std::size_t d = 0; d < n_dims; ++d) {
      for (std::size_t j = 0; j < nc; ++j) col[j] = cand[j * n_dims + d];
      marginals[d]->log_pdf(col, lp);
      for (std::size_t j = 0; j < nc; ++j) lm[j] += lp[j];
    }
    for (std::size_t j = 0; j < nc; ++j) {
      const double terms[2] = {a < 1 ? std::log1p(-a) + lj[j] : -kInf, std::log(a) + lm[j]};
      lj[j] = log_sum_exp(terms);
    }
    return lj;
  };
  const std::vector<double> ll = mixture(*f.below, f.marginal_below);
  const std::vector<double> lg = mixture(*f.above, f.marginal_above);
  const std::size_t best = best_candidate(ll, lg);
  return {cand.begin() + static_cast<std::ptrdiff_t>(best * n_dims),
          cand.begin() + static_cast<std::ptrdiff_t>((best + 1) * n_dims)};
}

std::vector<double> TpeModel::draw_mixture(const Fitted& f, std::size_t n_dims,
                                           std::mt19937_64& rng) const {
  // n_ei_candidates from each task's l_t (as the paper's code), so that the
  // new study's own good region is always among the candidates.
  std::vector<double> cand, one;
  for (const TaskPart& p : f.tasks) {
    if (!p.below || !(p.below_weight > 0)) continue;
    p.below->sample(rng, options_.n_ei_candidates, one);
    cand.insert(cand.end(), one.begin(), one.end());
  }
  const std::size_t nc = cand.size() / n_dims;
  // log of sum_t weight_t * density_t, for each candidate.
  auto mixture_log_pdf = [&](bool below) {
    std::vector<double> acc(nc, -kInf), lp(nc);
    for (const TaskPart& p : f.tasks) {
      const ParzenEstimator* e = below ? p.below.get() : p.above.get();
      const double wt = below ? p.below_weight : p.above_weight;
      if (!e || !(wt > 0)) continue;
      e->log_pdf(cand, lp);
      for (std::size_t j = 0; j < nc; ++j) {
        const double terms[2] = {acc[j], std::log(wt) + lp[j]};
        acc[j] = log_sum_exp(terms);
      }
    }
    return acc;
  };
  const std::vector<double> ll = mixture_log_pdf(true), lg = mixture_log_pdf(false);
  const std::size_t best = best_candidate(ll, lg);
  return {cand.begin() + static_cast<std::ptrdiff_t>(best * n_dims),
          cand.begin() + static_cast<std::ptrdiff_t>((best + 1) * n_dims)};
}

const TpeModel::Fitted& TpeModel::univariate(const std::string& name, const Distribution& d) {
  for (auto& [key, f] : uni_)
    if (key.first == name && key.second == d) return f;
  uni_.emplace_back(std::make_pair(name, d), fit({name}, {d}));
  return uni_.back().second;
}

TpeModel::AboveInputs::~AboveInputs() {
  pool<double>().give(x);
  for (auto& v : orders) pool<std::size_t>().give(v);
}

const std::vector<double>& TpeModel::group_weights(std::size_t m) const {
  auto it = weights_memo_.find(m);
  if (it == weights_memo_.end()) it = weights_memo_.emplace(m, weights(m)).first;
  return it->second;
}

const std::vector<double>* TpeModel::group_log_weights(std::size_t m) const {
  auto& [requests, logs] = log_weights_memo_[m];
  if (++requests == 1) {
    const std::vector<double>& w = group_weights(m);
    if (std::all_of(w.begin(), w.end(), [](double x) { return x == 1.0; })) return nullptr;
    logs = pool<double>().take(w.size());
    for (double x : w) logs.push_back(x == 1.0 ? 0.0 : std::log(x));
  }
  return logs.empty() ? nullptr : &logs;
}

TpeModel::~TpeModel() {
  for (auto& m : memo_) pool<double>().give(m->values);
  for (auto& [m, w] : weights_memo_) pool<double>().give(w);
  for (auto& [m, l] : log_weights_memo_) pool<double>().give(l.second);
  pool<std::ptrdiff_t>().give(obs_slot_);
  pool<char>().give(obs_finished_);
  pool<std::size_t>().give(all_present_);
  pool<std::size_t>().give(all_finished_);
}

std::pair<std::size_t, std::uint64_t> TpeModel::presence(const std::string& name,
                                                         const Distribution& d, bool signature) {
  const std::vector<double>& v = values(name, d);
  std::size_t count = 0;
  std::uint64_t sig = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!obs_finished_[i] || std::isnan(v[i])) continue;
    ++count;
    if (!signature) continue;
    // Within one call an observation's index names its trial: hashing it
    // groups params exactly as hashing trial ids would, without touching
    // each trial (a cache miss per trial at large histories).
    sig += util::splitmix64(static_cast<std::uint64_t>(i));
  }
  return {count, sig};
}

}  // namespace hps::tpe
