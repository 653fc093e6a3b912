// Tests of TpeSampler's view path (SamplingContext::view, algorithms/
// tpe_cache.h ViewHistory and ViewIndex): a sampler given the study's
// TrialView suggests exactly what a sampler given the same trials without a
// view suggests, on randomized histories with every trial state (COMPLETE,
// PRUNED with and without steps, FAIL, retried FAIL, RUNNING liars,
// enqueued WAITING), after rollbacks that reset the view, on a storage
// without a change feed, and for one sampler shared by several views.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "algorithms/tpe_sampler.h"
#include "search/storage.h"
#include "search/trial_view.h"
#include "search/util/random.h"

namespace hps {
namespace {

// An in-memory storage without a change feed: a TrialView over it reads
// every trial on each sync (new snapshots count as changes).
class NoFeedStorage : public InMemoryStorage {
 public:
  std::optional<TrialChanges> trial_changes(std::int64_t, std::uint64_t) override {
    return std::nullopt;
  }
};

SearchSpace mixed_space() {
  return SearchSpace::from_json(Json::parse(R"({
    "x":  {"type": "float", "low": -3, "high": 3},
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": true},
    "n":  {"type": "int", "low": 1, "high": 8},
    "c":  {"type": "categorical", "choices": ["a", "b", "c"]},
    "k":  {"type": "float", "low": 0, "high": 1, "step": 0.25, "when": {"c": "a"}}
  })"));
}

double objective(const Params& p) {
  const double x = p.at("x").get<double>();
  const double lr = p.at("lr").get<double>();
  double v = (x - 1) * (x - 1) + std::abs(std::log10(lr) + 2) + 0.1 * p.at("n").get<double>();
  if (p.at("c") == "a") v += p.at("k").get<double>();
  if (p.at("c") == "c") v += 0.5;
  return v;
}

TpeOptions options(bool multivariate, bool group) {
  TpeOptions o;
  o.seed = 17;
  o.n_startup_trials = 6;
  o.multivariate = multivariate;
  o.group = group;
  return o;
}

// One study being driven at random, its trials asked of two samplers: one
// given the view, one given the same trials without it.
class Driver {
 public:
  // `fresh_views`: a new TrialView for every suggestion (as a new Study
  // over the same storage each time would pass).
  Driver(std::shared_ptr<Storage> storage, StudyDirection direction, std::uint64_t seed,
         bool fresh_views = false)
      : storage_(std::move(storage)),
        direction_(direction),
        rng_(seed),
        fresh_views_(fresh_views),
        view_(std::make_unique<TrialView>()) {
    study_ = storage_->create_study("s" + std::to_string(seed), direction, Json::object());
    for (const ParamSpec& spec : space_.params()) dists_.emplace(spec.name, spec.distribution);
  }

  // One random step: new trials (sampled by both samplers and compared),
  // finished ones, enqueued ones, rolled-back writes. Returns the two
  // suggestions when one was made.
  std::optional<std::pair<Params, Params>> step(TpeSampler& with_view, TpeSampler& without) {
    const std::uint64_t op = rng_() % 20;
    if (op == 0) {  // a rolled-back write: the view starts over
      EXPECT_THROW(storage_->run_in_transaction([&] {
        storage_->create_trial(study_, NewTrial{});
        throw std::runtime_error("roll back");
      }),
                   std::runtime_error);
      return std::nullopt;
    }
    if (op == 1 && !done_.empty()) {  // an enqueued trial with a tried point
      NewTrial w;
      w.state = TrialState::kWaiting;
      w.system_attrs[kAttrFixedParams] = Json(done_[rng_() % done_.size()]);
      storage_->create_trial(study_, w);
      return std::nullopt;
    }
    if (op <= 4 && !open_.empty()) {  // an older RUNNING trial finishes
      const std::size_t k = rng_() % open_.size();
      finish(open_[k].first, open_[k].second);
      open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(k));
      return std::nullopt;
    }
    TrialPtr t = storage_->create_trial(study_, NewTrial{});
    if (fresh_views_) view_ = std::make_unique<TrialView>();
    view_->sync(*storage_, study_);
    const int n_workers = rng_() % 3 == 0 ? 3 : 1;  // the constant liar on or off
    SamplingContext a{direction_, view_->trials(), *t, n_workers};
    a.view = view_.get();
    SamplingContext b{direction_, view_->trials(), *t, n_workers};
    Params pa, pb;
    with_view.sample(a, space_, pa);
    without.sample(b, space_, pb);
    for (const auto& [name, value] : pa)
      storage_->set_trial_param(t->trial_id, name, value, dists_.at(name));
    if (rng_() % 4 == 0)
      open_.emplace_back(t->trial_id, pa);  // stays RUNNING for a while
    else
      finish(t->trial_id, pa);
    return std::make_pair(pa, pb);
  }

 private:
  void finish(std::int64_t id, const Params& p) {
    const double v = objective(p);
    switch (rng_() % 8) {
      case 0:  // PRUNED after some steps (one of them NaN)
        storage_->set_trial_intermediate_value(id, 1, v + 1);
        storage_->set_trial_intermediate_value(id, 2, std::numeric_limits<double>::quiet_NaN());
        storage_->set_trial_state(id, TrialState::kPruned, std::nullopt, "");
        break;
      case 1:  // PRUNED before any step
        storage_->set_trial_state(id, TrialState::kPruned, std::nullopt, "");
        break;
      case 2:  // FAIL, sometimes queued again (retried: its point is free)
        storage_->set_trial_state(id, TrialState::kFail, std::nullopt, "boom");
        if (rng_() % 2) {
          storage_->set_trial_system_attr(id, kAttrRetriedAs, 100000);
          NewTrial w;
          w.state = TrialState::kWaiting;
          w.system_attrs[kAttrFixedParams] = Json(p);
          storage_->create_trial(study_, w);
        }
        break;
      default:
        storage_->set_trial_state(id, TrialState::kComplete, v, "");
        done_.push_back(p);
    }
  }

  std::shared_ptr<Storage> storage_;
  StudyDirection direction_;
  std::mt19937_64 rng_;
  std::int64_t study_ = 0;
  SearchSpace space_ = mixed_space();
  std::map<std::string, Distribution> dists_;
  bool fresh_views_;
  std::unique_ptr<TrialView> view_;
  std::vector<std::pair<std::int64_t, Params>> open_;  // RUNNING trials
  std::vector<Params> done_;                           // COMPLETE points
};

struct Case {
  bool multivariate, group;
  StudyDirection direction;
  bool feed;
  bool fresh_views = false;
};

TEST(TpeViewTest, RandomHistoriesGiveTheSameSuggestionsWithAndWithoutAView) {
  const std::vector<Case> cases = {
      {false, false, StudyDirection::kMinimize, true},
      {true, false, StudyDirection::kMinimize, true},
      {true, true, StudyDirection::kMaximize, true},
      {true, false, StudyDirection::kMinimize, false},
      {false, false, StudyDirection::kMaximize, false},
      {true, false, StudyDirection::kMinimize, true, true},
      {false, false, StudyDirection::kMinimize, true, true},
  };
  std::uint64_t seed = 1;
  for (const Case& c : cases) {
    std::shared_ptr<Storage> storage =
        c.feed ? std::make_shared<InMemoryStorage>() : std::make_shared<NoFeedStorage>();
    Driver d(storage, c.direction, seed++, c.fresh_views);
    TpeSampler with_view(options(c.multivariate, c.group));
    TpeSampler without(options(c.multivariate, c.group));
    int compared = 0;
    for (int i = 0; i < 160; ++i) {
      auto s = d.step(with_view, without);
      if (!s) continue;
      ASSERT_EQ(s->first, s->second)
          << "multivariate " << c.multivariate << " group " << c.group << " feed " << c.feed
          << " fresh views " << c.fresh_views << " step " << i;
      ++compared;
    }
    EXPECT_GE(compared, 80);
  }
}

// One sampler given the views of five studies in turn (more than the cache
// keeps: views are dropped and met again) suggests for each what a sampler
// of its own without a view suggests.
TEST(TpeViewTest, ASamplerSharedByManyViewsSuggestsAsOnePerStudy) {
  for (bool multivariate : {false, true}) {
    TpeSampler shared(options(multivariate, false));
    std::vector<std::unique_ptr<Driver>> drivers;
    std::vector<std::unique_ptr<TpeSampler>> own;
    std::shared_ptr<Storage> first;
    for (std::uint64_t k = 0; k < 5; ++k) {
      // Two studies share a storage (distinct trial ids), the others have
      // their own (the same ids for different trials).
      std::shared_ptr<Storage> storage = k == 1 ? first : std::make_shared<InMemoryStorage>();
      if (k == 0) first = storage;
      drivers.push_back(std::make_unique<Driver>(storage, StudyDirection::kMinimize, 40 + k));
      own.push_back(std::make_unique<TpeSampler>(options(multivariate, false)));
    }
    std::mt19937_64 pick(3);
    int compared = 0;
    for (int i = 0; i < 300; ++i) {
      // Mostly the first two studies, sometimes the others.
      const std::size_t k = pick() % 4 == 0 ? 2 + pick() % 3 : pick() % 2;
      auto s = drivers[k]->step(shared, *own[k]);
      if (!s) continue;
      ASSERT_EQ(s->first, s->second)
          << "multivariate " << multivariate << " study " << k << " step " << i;
      ++compared;
    }
    EXPECT_GE(compared, 150);
  }
}

}  // namespace
}  // namespace hps
