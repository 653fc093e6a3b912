// TpeSampler (algorithms/tpe_sampler.h). Its parts, one concept per file:
//   tpe_options.cpp     TpeOptions and TpeGamma
//   tpe_cache.h         per-trial slots and per-param columns kept across calls
//   tpe_history.h       the observations and taken params of one call
//   tpe_model.h         the below/above estimators and the draw
//   tried_points.h      (shared) the tried points; an untried one of a finite space
// This file makes suggestions from them: groups of params, attempts,
// define-by-run joint draws.
#include "algorithms/tpe_sampler.h"

#include <map>
#include <random>

#include "algorithms/random_sampler.h"
#include "algorithms/tpe_cache.h"
#include "algorithms/tpe_history.h"
#include "algorithms/tpe_model.h"
#include "algorithms/tried_points.h"
#include "search/util/hash.h"
#include "search/util/random.h"

namespace hps {

namespace {

using tpe::History;
using tpe::TpeModel;
using util::splitmix64;

// Joint draws kept for define-by-run trials that are still being sampled.
constexpr std::size_t kMaxPending = 256;

// The seed of one suggestion's random numbers.
std::uint64_t stream_seed(std::uint64_t seed, std::int64_t number, std::uint64_t salt) {
  return splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(number) ^ splitmix64(salt)));
}

// FNV-1a, so that the salt of a param name is the same on every platform.
std::uint64_t hash_name(const std::string& s) { return util::fnv1a64(s); }

// The internal value of a single-value distribution.
double single_internal(const Distribution& d) { return d.is_indexed() ? 0.0 : d.low(); }

// Joint groups (multivariate) of a declared space: lists of indices into
// space.params(), and for each param its group (or -1: univariate).
struct Groups {
  std::vector<std::vector<std::size_t>> members;
  std::vector<std::ptrdiff_t> group_of;
};

// Params not yet in `params` are grouped by the set of finished
// observations they are present in (options.group), or all those present
// in every finished observation form one group; groups of one are
// univariate.
Groups make_groups(const TpeOptions& options, TpeModel& model, const History& h,
                   const SearchSpace& space, const Params& params) {
  Groups g;
  g.group_of.assign(space.size(), -1);
  std::map<std::pair<std::size_t, std::uint64_t>, std::size_t> by_signature;
  for (std::size_t i = 0; i < space.size(); ++i) {
    const ParamSpec& spec = space.params()[i];
    if (params.count(spec.name) || spec.distribution.single_value()) continue;
    auto sig = model.presence(spec.name, spec.distribution, options.group);
    if (sig.first == 0) continue;
    if (!options.group) {
      if (sig.first != h.n_finished) continue;
      sig = {0, 0};
    }
    auto [it, fresh] = by_signature.emplace(sig, g.members.size());
    if (fresh) g.members.emplace_back();
    g.members[it->second].push_back(i);
  }
  for (std::size_t k = 0; k < g.members.size(); ++k)
    if (g.members[k].size() >= 2)
      for (std::size_t i : g.members[k]) g.group_of[i] = static_cast<std::ptrdiff_t>(k);
  return g;
}

// One sample() call: draws every active param of the space, an attempt at
// a time, until the params are no duplicate.
class SampleCall {
 public:
  SampleCall(TpeModel& model, const SearchSpace& space, Groups groups)
      : model_(model), space_(space), groups_(std::move(groups)) {}

  // Params drawn by one attempt: `fixed` plus a value for each param that
  // is active; `sampled` tells whether any param was drawn.
  Params attempt(const Params& fixed, bool use_tpe, std::mt19937_64& rng, bool& sampled) {
    Params p = fixed;
    pending_.clear();
    group_done_.assign(groups_.members.size(), 0);
    sampled = false;
    for (std::size_t i = 0; i < space_.size(); ++i) {
      const ParamSpec& spec = space_.params()[i];
      if (p.count(spec.name) || !SearchSpace::is_active(spec, p)) continue;
      sampled = true;
      p[spec.name] = spec.distribution.to_external(internal_value(i, use_tpe, rng));
    }
    return p;
  }

 private:
  // The internal value of param i of the space.
  double internal_value(std::size_t i, bool use_tpe, std::mt19937_64& rng) {
    const ParamSpec& spec = space_.params()[i];
    const Distribution& d = spec.distribution;
    if (d.single_value()) return single_internal(d);
    if (!use_tpe) return RandomSampler::draw(rng, d);
    if (groups_.group_of[i] >= 0) return joint_value(i, rng);
    const auto& fitted = model_.univariate(spec.name, d);
    return model_.draw(fitted, {d}, rng)[0];
  }

  // Param i's value from its group's joint draw (drawn at the group's
  // first param in this attempt).
  double joint_value(std::size_t i, std::mt19937_64& rng) {
    auto g = static_cast<std::size_t>(groups_.group_of[i]);
    if (!group_done_[g]) {
      group_done_[g] = 1;
      std::vector<std::string> names;
      std::vector<Distribution> dists;
      for (std::size_t j : groups_.members[g]) {
        names.push_back(space_.params()[j].name);
        dists.push_back(space_.params()[j].distribution);
      }
      auto it = joint_fits_.find(g);
      if (it == joint_fits_.end()) it = joint_fits_.emplace(g, model_.fit(names, dists)).first;
      std::vector<double> x = model_.draw(it->second, dists, rng);
      for (std::size_t m = 0; m < groups_.members[g].size(); ++m)
        pending_[groups_.members[g][m]] = x[m];
    }
    return pending_.at(i);
  }

  TpeModel& model_;
  const SearchSpace& space_;
  Groups groups_;
  std::map<std::size_t, TpeModel::Fitted> joint_fits_;
  std::map<std::size_t, double> pending_;  // space index -> joint internal value
  std::vector<char> group_done_;
};

// The joint draw of define-by-run trial ctx.trial: on its first suggest,
// every param shared by all finished observations (as recorded in the
// newest one) is drawn jointly and kept until the trial's later suggests
// ask for them.
const TpeSampler::Cache::PendingJoint& joint_draw(TpeSampler::Cache& cache, std::uint64_t seed,
                                                  const SamplingContext& ctx, const History& h,
                                                  TpeModel& model) {
  using Cache = TpeSampler::Cache;
  const Cache::PendingKey key{
      ctx.trial.trial_id, ctx.trial.number,
      ctx.trial.datetime_start ? ctx.trial.datetime_start->time_since_epoch().count() : 0};
  auto it = cache.pending.find(key);
  if (it != cache.pending.end()) return it->second;
  Cache::PendingJoint joint;
  const FrozenTrial* newest = nullptr;
  for (auto o = h.obs.rbegin(); o != h.obs.rend(); ++o)
    if (o->finished) {
      newest = o->trial;
      break;
    }
  for (const auto& [pname, pdist] : newest->distributions) {
    if (ctx.trial.params.count(pname) || pdist.single_value()) continue;
    if (model.presence(pname, pdist, false).first != h.n_finished) continue;
    joint.names.push_back(pname);
    joint.distributions.push_back(pdist);
  }
  if (joint.names.size() >= 2) {
    std::mt19937_64 jrng(stream_seed(seed, ctx.trial.number, 0x6A6F696E74ULL));
    auto fitted = model.fit(joint.names, joint.distributions);
    joint.values = model.draw(fitted, joint.distributions, jrng);
  } else {
    joint.names.clear();
    joint.distributions.clear();
  }
  // The oldest are dropped first, so the new one stays.
  while (cache.pending.size() >= kMaxPending) cache.pending.erase(cache.pending.begin());
  return cache.pending.emplace(key, std::move(joint)).first->second;
}

// The COMPLETE trials ctx's history has (History::n_complete) from the
// cache's view index, kept up to date from ctx.view (O(changes)); nullopt
// without a view (then prepare_history() counts them).
std::optional<std::size_t> complete_in_view(const SamplingContext& ctx, TpeSampler::Cache& cache) {
  if (!ctx.view || &ctx.view->trials() != &ctx.trials) return std::nullopt;
  return cache.view_state(*ctx.view).index.n_complete(ctx.trial.number);
}

// TpeSampler::sample's startup branch with the view index answering "was
// this point tried?" instead of a History: the same draws in the same
// order. False when every try gave a tried point (then the full path,
// which makes the same draws, looks for an untried one).
bool sample_startup_from_view(const TpeOptions& options, std::uint64_t seed, QmcSampler* design,
                              TpeSampler::Cache& cache, const SamplingContext& ctx,
                              const SearchSpace& space, Params& params) {
  const tpe::ViewIndex& index = cache.view_state(*ctx.view).index;
  const Params fixed = params;
  if (design) {
    Params q = fixed;
    design->add_point(ctx.trial.number, space, q);
    if (!index.is_taken(q, ctx.trial.number)) {
      params = std::move(q);
      return true;
    }
  }
  const History none;
  TpeModel model(options, cache, none);  // not used by random draws
  Groups groups;
  groups.group_of.assign(space.size(), -1);
  SampleCall call(model, space, std::move(groups));
  for (std::size_t attempt = 0; attempt < 2 * options.duplicate_retries; ++attempt) {
    std::mt19937_64 rng(stream_seed(seed, ctx.trial.number, attempt));
    bool sampled = false;
    Params p = call.attempt(fixed, false, rng, sampled);
    if (!sampled || !index.is_taken(p, ctx.trial.number)) {
      params = std::move(p);
      return true;
    }
  }
  return false;
}

}  // namespace

TpeSampler::TpeSampler(const TpeOptions& options)
    : options_(options.resolved()), cache_(std::make_unique<Cache>()) {
  options_.validate();
  seed_ = options_.seed ? *options_.seed : util::entropy_seed();
  if (options_.startup) {
    QmcOptions q;
    q.sequence = *options_.startup;
    // Seeded from the TPE seed, or fixed without one: the design must be
    // the same sequence after a resume (see QmcOptions::seed).
    if (options_.seed) q.seed = util::splitmix64(*options_.seed ^ 0x7374617274757000ULL);
    startup_design_ = std::make_unique<QmcSampler>(q);
  }
}

TpeSampler::~TpeSampler() = default;

void TpeSampler::set_n_workers(int n_workers) {
  std::lock_guard lock(mu_);
  n_workers_ = n_workers;
}

bool TpeSampler::constant_liar_active() const { return options_.constant_liar || n_workers_ > 1; }

std::string TpeSampler::plan_budget(std::int64_t max_complete) {
  std::lock_guard lock(mu_);
  max_complete_ = max_complete;
  const auto startup = static_cast<std::int64_t>(options_.startup_trials(max_complete_));
  if (max_complete > startup) return {};
  return "TPE sampler: the budget allows at most " + std::to_string(max_complete) +
         " COMPLETE trial" + (max_complete == 1 ? "" : "s") +
         ", at or below n_startup_trials = " + std::to_string(startup) +
         (options_.n_startup_trials ? "" : " (\"auto\")") +
         (options_.startup ? std::string(", so every trial is a point of the startup design (") +
                                 to_string(*options_.startup) + "), never modelled"
                           : std::string(", so every trial is drawn at random (a random search)")) +
         "; raise the budget or lower sampler.n_startup_trials";
}

std::size_t TpeSampler::startup_trials() const {
  std::lock_guard lock(mu_);
  return options_.startup_trials(max_complete_);
}

void TpeSampler::sample(const SamplingContext& ctx, const SearchSpace& space, Params& params) {
  std::lock_guard lock(mu_);
  const std::size_t n_startup = options_.startup_trials(max_complete_);
  if (auto complete = complete_in_view(ctx, *cache_);
      complete && *complete < n_startup &&
      sample_startup_from_view(options_, seed_, startup_design_.get(), *cache_, ctx, space, params))
    return;
  const History h = tpe::prepare_history(ctx, *cache_, constant_liar_active() || ctx.n_workers > 1);
  const bool startup = h.n_complete < n_startup;
  if (!startup) {
    // A fresh sampler on a long history: the params' columns in one pass.
    std::vector<const ParamSpec*> specs;
    for (const ParamSpec& spec : space.params())
      if (!params.count(spec.name) && !spec.distribution.single_value()) specs.push_back(&spec);
    cache_->fill_columns(specs);
  }
  TpeModel model(options_, *cache_, h);
  Groups groups;
  if (!startup && options_.multivariate)
    groups = make_groups(options_, model, h, space, params);
  else
    groups.group_of.assign(space.size(), -1);
  SampleCall call(model, space, std::move(groups));

  const Params fixed = params;
  if (startup && startup_design_) {
    // The design's point, unless it repeats a tried point: then the draws below.
    Params q = fixed;
    startup_design_->add_point(ctx.trial.number, space, q);
    if (!h.is_taken(q)) {
      params = std::move(q);
      return;
    }
  }
  const std::size_t retries = options_.duplicate_retries;
  Params p;
  for (std::size_t attempt = 0; attempt < 2 * retries; ++attempt) {
    std::mt19937_64 rng(stream_seed(seed_, ctx.trial.number, attempt));
    bool sampled = false;
    p = call.attempt(fixed, !startup && attempt < retries, rng, sampled);
    if (!sampled || !h.is_taken(p)) {
      params = std::move(p);
      return;
    }
  }
  // Every try gave a duplicate: look for an untried point of a finite space.
  if (tried::space_size(space, fixed) <= tried::kMaxEnumerate) {
    std::mt19937_64 rng(stream_seed(seed_, ctx.trial.number, ~0ULL));
    params = tried::untried_point(
        space, fixed, [&](const Params& q) { return h.is_taken(q); }, rng);
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
  const std::size_t n_startup = options_.startup_trials(max_complete_);
  if (auto complete = complete_in_view(ctx, *cache_); complete && *complete < n_startup) {
    std::mt19937_64 rng(stream_seed(seed_, ctx.trial.number, hash_name(name)));
    return startup_design_ ? startup_design_->sample_independent(ctx, name, distribution)
                           : RandomSampler::draw(rng, distribution);
  }
  const History h = tpe::prepare_history(ctx, *cache_, constant_liar_active() || ctx.n_workers > 1);
  std::mt19937_64 rng(stream_seed(seed_, ctx.trial.number, hash_name(name)));
  if (h.n_complete < n_startup)
    return startup_design_ ? startup_design_->sample_independent(ctx, name, distribution)
                           : RandomSampler::draw(rng, distribution);
  TpeModel model(options_, *cache_, h);
  if (options_.multivariate && h.n_finished > 0) {
    const Cache::PendingJoint& joint = joint_draw(*cache_, seed_, ctx, h, model);
    for (std::size_t m = 0; m < joint.names.size(); ++m)
      if (joint.names[m] == name && joint.distributions[m] == distribution) return joint.values[m];
  }
  return model.draw(model.univariate(name, distribution), {distribution}, rng)[0];
}

}  // namespace hps
