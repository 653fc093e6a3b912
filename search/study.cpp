#include "search/study.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "algorithms/random_sampler.h"
#include "search/util/host.h"

namespace hps {

// ------------------------------------------------------------------ Trial

Trial::Trial(TrialBackend* backend, std::int64_t trial_id, std::int64_t number, Params params,
             std::map<std::string, Distribution> distributions, Params fixed,
             const SearchSpace* space, std::atomic<bool>* interrupt)
    : backend_(backend),
      trial_id_(trial_id),
      number_(number),
      params_(std::move(params)),
      distributions_(std::move(distributions)),
      fixed_(std::move(fixed)),
      space_(space),
      interrupt_(interrupt) {}

void Trial::check_interrupt() const {
  if (interrupt_ && interrupt_->load()) throw Interrupted();
}

Json Trial::suggest(const std::string& name, const Distribution& distribution) {
  if (space_) {
    if (const ParamSpec* spec = space_->find(name)) {
      if (!(spec->distribution == distribution))
        throw Error("suggest '" + name + "': " + distribution.to_json().dump() +
                    " does not agree with the declared space " +
                    spec->distribution.to_json().dump());
      if (!params_.count(name))
        throw Error("suggest '" + name + "': the param is inactive in trial " +
                    std::to_string(number_) + " (its condition on '" +
                    (spec->condition ? spec->condition->parent : std::string("?")) +
                    "' does not hold)");
    }
  }
  auto it = params_.find(name);
  if (it != params_.end()) {
    auto d = distributions_.find(name);
    if (d != distributions_.end() && !(d->second == distribution))
      throw Error("suggest '" + name + "': " + distribution.to_json().dump() +
                  " differs from the distribution it was first suggested with " +
                  d->second.to_json().dump());
    return it->second;
  }
  Json value = backend_->suggest(*this, name, distribution);
  record_param(name, value, distribution);
  return value;
}

void Trial::record_param(const std::string& name, const Json& value, const Distribution& d) {
  params_[name] = value;
  distributions_.insert_or_assign(name, d);
  fixed_.erase(name);
}

double Trial::suggest_float(const std::string& name, double low, double high, SuggestOptions opt) {
  auto d = Distribution::make_float(low, high, opt.log, opt.step, name);
  return suggest(name, d).get<double>();
}

std::int64_t Trial::suggest_int(const std::string& name, std::int64_t low, std::int64_t high,
                                SuggestOptions opt) {
  std::int64_t step = 1;
  if (opt.step) {
    if (*opt.step != std::floor(*opt.step))
      throw ConfigError(join_path(name, "step"), "must be an integer for suggest_int");
    step = static_cast<std::int64_t>(*opt.step);
  }
  auto d = Distribution::make_int(low, high, opt.log, step, name);
  Json v = suggest(name, d);
  return v.is_number_integer() ? v.get<std::int64_t>() : static_cast<std::int64_t>(v.get<double>());
}

Json Trial::suggest_categorical(const std::string& name, std::vector<Json> choices) {
  return suggest(name, Distribution::make_categorical(std::move(choices), name));
}

const Json& Trial::param(const std::string& name) const {
  auto it = params_.find(name);
  if (it == params_.end())
    throw Error("trial " + std::to_string(number_) + " has no param '" + name +
                "' (inactive or never suggested)");
  return it->second;
}

bool Trial::report(std::int64_t step, double value) {
  check_interrupt();
  if (step < 0) throw Error("report: step must be >= 0, got " + std::to_string(step));
  bool stored = backend_->report(*this, step, value);
  if (!stored) {
    spdlog::warn("trial {}: step {} was already reported; keeping the first value", number_, step);
    return false;
  }
  last_step_ = step;
  last_value_ = value;
  return true;
}

bool Trial::should_prune() {
  check_interrupt();
  if (!last_step_) return false;
  return backend_->should_prune(*this);
}

void Trial::set_user_attr(const std::string& key, const Json& value) {
  backend_->set_user_attr(*this, key, value);
}

// ------------------------------------------------------------------ Study

std::string default_worker_name() { return util::host_name() + ":" + std::to_string(getpid()); }

struct Study::Impl : TrialBackend {
  std::shared_ptr<Storage> storage;
  std::int64_t study_id = -1;
  std::string name;
  StudyDirection direction = StudyDirection::kMinimize;
  std::shared_ptr<Sampler> sampler;
  std::shared_ptr<Pruner> pruner;
  std::optional<SearchSpace> space;
  std::string worker;
  std::mutex sampler_mu;
  std::atomic<bool>* interrupt = nullptr;

  Json suggest(Trial& trial, const std::string& pname, const Distribution& d) override {
    Json value;
    auto f = trial.fixed_params().find(pname);
    if (f != trial.fixed_params().end() && d.contains(f->second)) {
      value = d.to_external(d.to_internal(f->second));
    } else {
      std::lock_guard lock(sampler_mu);
      auto snapshot = storage->get_trial(trial.trial_id());
      FrozenTrial current = *snapshot;
      current.params = trial.params();
      auto trials = pruner->trials_for_sampler(current, storage->get_all_trials(study_id));
      SamplingContext ctx{direction, trials, current};
      value = d.to_external(sampler->sample_independent(ctx, pname, d));
    }
    storage->set_trial_param(trial.trial_id(), pname, value, d);
    return value;
  }

  bool report(Trial& trial, std::int64_t step, double value) override {
    return storage->set_trial_intermediate_value(trial.trial_id(), step, value);
  }

  bool should_prune(Trial& trial) override {
    auto snapshot = storage->get_trial(trial.trial_id());
    auto trials = storage->get_all_trials(study_id);
    PruningContext ctx{direction, trials, *snapshot, trial.last_step().value_or(0), storage.get()};
    return pruner->prune(ctx);
  }

  void set_user_attr(Trial& trial, const std::string& key, const Json& value) override {
    storage->set_trial_user_attr(trial.trial_id(), key, value);
  }

  // Queues a new WAITING trial with the params of `failed`, linking both.
  void retry(const FrozenTrial& failed) {
    storage->run_in_transaction([&] {
      Json fixed = Json::object();
      for (const auto& [k, v] : failed.params) fixed[k] = v;
      NewTrial init;
      init.state = TrialState::kWaiting;
      init.system_attrs = Json{{kAttrRetryOf, failed.number}, {kAttrFixedParams, fixed}};
      auto t = storage->create_trial(study_id, init);
      storage->set_trial_system_attr(failed.trial_id, kAttrRetriedAs, t->number);
    });
  }
};

namespace {

std::shared_ptr<Study::Impl> make_impl(std::shared_ptr<Storage> storage, std::int64_t study_id,
                                       StudyOptions options) {
  if (!storage) throw Error("Study: storage must not be null");
  auto impl = std::make_shared<Study::Impl>();
  StudyInfo info = storage->get_study(study_id);
  impl->storage = std::move(storage);
  impl->study_id = study_id;
  impl->name = info.name;
  impl->direction = info.direction;
  impl->sampler = options.sampler ? options.sampler : std::make_shared<RandomSampler>();
  impl->pruner = options.pruner ? options.pruner : std::make_shared<NopPruner>();
  impl->space = std::move(options.space);
  impl->worker = options.worker.empty() ? default_worker_name() : options.worker;
  return impl;
}

bool better(StudyDirection dir, double a, double b) {
  return dir == StudyDirection::kMaximize ? a > b : a < b;
}

}  // namespace

Study Study::create(std::shared_ptr<Storage> storage, const std::string& name,
                    StudyDirection direction, StudyOptions options, const Json& config) {
  if (!storage) throw Error("Study: storage must not be null");
  auto id = storage->create_study(name, direction, config);
  return Study(make_impl(std::move(storage), id, std::move(options)));
}

Study Study::load(std::shared_ptr<Storage> storage, const std::string& name, StudyOptions options) {
  if (!storage) throw Error("Study: storage must not be null");
  auto id = storage->find_study(name);
  if (!id) throw StorageError("no study named '" + name + "' in the storage");
  return Study(make_impl(std::move(storage), *id, std::move(options)));
}

Study Study::load_if_exists(std::shared_ptr<Storage> storage, const std::string& name,
                            StudyDirection direction, StudyOptions options, const Json& config) {
  if (!storage) throw Error("Study: storage must not be null");
  auto id = storage->find_study(name);
  if (!id) {
    try {
      id = storage->create_study(name, direction, config);
    } catch (const StorageError&) {
      id = storage->find_study(name);  // created by another process meanwhile
      if (!id) throw;
    }
  }
  StudyInfo info = storage->get_study(*id);
  if (info.direction != direction)
    throw StorageError("study '" + name + "' exists with direction " + to_string(info.direction) +
                       ", not " + to_string(direction));
  return Study(make_impl(std::move(storage), *id, std::move(options)));
}

const std::string& Study::name() const { return impl_->name; }
std::int64_t Study::study_id() const { return impl_->study_id; }
StudyDirection Study::direction() const { return impl_->direction; }
Storage& Study::storage() const { return *impl_->storage; }
const std::shared_ptr<Storage>& Study::storage_ptr() const { return impl_->storage; }
const std::optional<SearchSpace>& Study::space() const { return impl_->space; }
Sampler& Study::sampler() const { return *impl_->sampler; }
Pruner& Study::pruner() const { return *impl_->pruner; }

Trial Study::ask() {
  auto& s = *impl_;
  TrialPtr t = s.storage->claim_waiting_trial(s.study_id, s.worker);
  if (!t) {
    NewTrial init;
    init.worker = s.worker;
    t = s.storage->create_trial(s.study_id, init);
  }
  Params fixed;
  if (auto it = t->system_attrs.find(kAttrFixedParams);
      it != t->system_attrs.end() && it->is_object())
    for (const auto& [k, v] : it->items()) fixed[k] = v;
  Params params = t->params;
  std::map<std::string, Distribution> dists = t->distributions;
  if (s.space) {
    Params chosen = params;
    // Enqueued values that fit the declared space condition the sampler.
    for (const auto& spec : s.space->params()) {
      auto f = fixed.find(spec.name);
      if (f != fixed.end() && !chosen.count(spec.name) && SearchSpace::is_active(spec, chosen) &&
          spec.distribution.contains(f->second))
        chosen[spec.name] = spec.distribution.to_external(spec.distribution.to_internal(f->second));
    }
    {
      std::lock_guard lock(s.sampler_mu);
      auto trials = s.pruner->trials_for_sampler(*t, s.storage->get_all_trials(s.study_id));
      SamplingContext ctx{s.direction, trials, *t};
      try {
        s.sampler->sample(ctx, *s.space, chosen);
      } catch (...) {
        s.storage->set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, "sampler failed");
        throw;
      }
    }
    s.storage->run_in_transaction([&] {
      for (const auto& spec : s.space->params()) {
        auto it = chosen.find(spec.name);
        if (it == chosen.end() || params.count(spec.name)) continue;
        s.storage->set_trial_param(t->trial_id, spec.name, it->second, spec.distribution);
        params[spec.name] = it->second;
        dists.insert_or_assign(spec.name, spec.distribution);
        fixed.erase(spec.name);
      }
    });
  }
  return Trial(impl_.get(), t->trial_id, t->number, std::move(params), std::move(dists),
               std::move(fixed), s.space ? &*s.space : nullptr, s.interrupt);
}

TrialPtr Study::tell(Trial& trial, double value) {
  if (std::isnan(value))
    return tell(trial, TrialState::kFail, std::nullopt, "objective returned NaN");
  return tell(trial, TrialState::kComplete, value);
}

TrialPtr Study::tell(Trial& trial, TrialState state, std::optional<double> value,
                     const std::string& fail_reason) {
  auto& s = *impl_;
  if (!is_finished(state)) throw Error("tell: state must be COMPLETE, PRUNED or FAIL");
  if (state == TrialState::kComplete) {
    if (!value) throw Error("tell: COMPLETE needs a value");
    if (std::isnan(*value)) {
      state = TrialState::kFail;
      value.reset();
    }
  }
  if (state == TrialState::kPruned && !value) {
    auto snapshot = s.storage->get_trial(trial.trial_id());
    if (auto last = snapshot->last_intermediate(); last && !std::isnan(last->second))
      value = last->second;
  }
  if (state == TrialState::kPruned && value && std::isnan(*value)) value.reset();
  std::string reason = fail_reason;
  if (state == TrialState::kFail && reason.empty()) reason = "objective returned NaN";
  if (!s.storage->set_trial_state(trial.trial_id(), state,
                                  state == TrialState::kFail ? std::nullopt : value, reason))
    throw Error("tell: trial " + std::to_string(trial.number()) + " is already finished");
  return s.storage->get_trial(trial.trial_id());
}

void Study::optimize(const Objective& objective, const OptimizeOptions& options) {
  if (options.n_jobs < 1) throw ConfigError("n_jobs", "must be >= 1");
  if (options.n_trials && *options.n_trials < 0) throw ConfigError("n_trials", "must be >= 0");
  auto& s = *impl_;
  s.interrupt = options.stop;
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::int64_t> started{0};
  std::atomic<bool> halt{false};
  std::mutex mu;  // guards first_error and callbacks
  std::exception_ptr first_error;

  auto run_one = [&](Trial& trial) {
    TrialPtr done;
    try {
      double v = objective(trial);
      done = tell(trial, v);
    } catch (const TrialPruned&) {
      done = tell(trial, TrialState::kPruned);
    } catch (const Interrupted&) {
      s.storage->run_in_transaction([&] {
        done = tell(trial, TrialState::kFail, std::nullopt, "interrupted");
        s.retry(*done);
      });
    } catch (...) {
      // Any exception, std:: or not (a thrown int must not escape a thread).
      std::string msg = "exception of a type not derived from std::exception";
      try {
        throw;
      } catch (const std::exception& e) {
        msg = e.what();
        if (msg.empty()) msg = "exception";
      } catch (...) {
      }
      done = tell(trial, TrialState::kFail, std::nullopt, msg);
      spdlog::warn("trial {} failed: {}", trial.number(), msg);
      if (!options.catch_exceptions) {
        std::lock_guard lock(mu);
        if (!first_error) first_error = std::current_exception();
        halt = true;
      }
    }
    if (options.callback && done) {
      std::lock_guard lock(mu);
      options.callback(*done);
    }
  };

  auto loop = [&] {
    while (!halt) {
      if (options.stop && options.stop->load()) break;
      if (options.timeout_s) {
        double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (elapsed >= *options.timeout_s) break;
      }
      if (options.n_trials && started.fetch_add(1) >= *options.n_trials) break;
      std::optional<Trial> trial;
      try {
        trial.emplace(ask());
      } catch (const SearchSpaceExhausted& e) {
        spdlog::info("{}", e.what());
        halt = true;
        break;
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first_error) first_error = std::current_exception();
        halt = true;
        break;
      }
      try {
        run_one(*trial);
      } catch (...) {
        // The store failed while ending the trial: stop, report it.
        std::lock_guard lock(mu);
        if (!first_error) first_error = std::current_exception();
        halt = true;
        break;
      }
    }
  };

  if (options.n_jobs == 1) {
    loop();
  } else {
    std::vector<std::thread> threads;
    for (int i = 0; i < options.n_jobs; ++i) threads.emplace_back(loop);
    for (auto& t : threads) t.join();
  }
  s.interrupt = nullptr;
  if (first_error) std::rethrow_exception(first_error);
}

TrialPtr Study::enqueue_trial(const Params& params, const Json& system_attrs) {
  auto& s = *impl_;
  if (s.space) {
    Params normalized;  // as samplers give values, for is_active()
    for (const auto& [k, v] : params) {
      const ParamSpec* spec = s.space->find(k);
      if (!spec) throw ConfigError(join_path("params", k), "is not in the search space");
      if (!spec->distribution.contains(v))
        throw ConfigError(join_path("params", k), "value " + v.dump() + " is not in " +
                                                      spec->distribution.to_json().dump());
      normalized[k] = spec->distribution.to_external(spec->distribution.to_internal(v));
    }
    // A value whose parent is given too but does not activate it could
    // never be used.
    for (const auto& spec : s.space->params()) {
      if (!spec.condition || !normalized.count(spec.name) ||
          !normalized.count(spec.condition->parent) || SearchSpace::is_active(spec, normalized))
        continue;
      throw ConfigError(join_path("params", spec.name),
                        "is inactive: its condition on '" + spec.condition->parent +
                            "' does not hold for the enqueued value " +
                            normalized.at(spec.condition->parent).dump());
    }
  }
  Json fixed = Json::object();
  for (const auto& [k, v] : params) fixed[k] = v;
  NewTrial init;
  init.state = TrialState::kWaiting;
  init.system_attrs = system_attrs.is_object() ? system_attrs : Json::object();
  init.system_attrs[kAttrFixedParams] = fixed;
  return s.storage->create_trial(s.study_id, init);
}

TrialPtr Study::best_trial() const {
  TrialPtr best;
  for (const auto& t : impl_->storage->get_all_trials(impl_->study_id, {TrialState::kComplete})) {
    if (!t->value || std::isnan(*t->value)) continue;
    if (!best || better(impl_->direction, *t->value, *best->value)) best = t;
  }
  if (!best) throw Error("study '" + impl_->name + "' has no COMPLETE trial yet");
  return best;
}

double Study::best_value() const { return *best_trial()->value; }

std::vector<TrialPtr> Study::trials(const std::vector<TrialState>& states) const {
  return impl_->storage->get_all_trials(impl_->study_id, states);
}

std::int64_t Study::n_finished() const {
  std::int64_t n = 0;
  for (const auto& t : trials())
    if (t->counts_as_finished()) ++n;
  return n;
}

void Study::set_user_attr(const std::string& key, const Json& value) {
  impl_->storage->set_study_user_attr(impl_->study_id, key, value);
}

Json Study::user_attrs() const { return impl_->storage->get_study(impl_->study_id).user_attrs; }

int Study::fail_stale_trials(const std::string& reason, bool all) {
  auto& s = *impl_;
  std::string host = default_worker_name();
  host = host.substr(0, host.rfind(':'));
  int n = 0;
  for (const auto& t : s.storage->get_all_trials(s.study_id, {TrialState::kRunning})) {
    bool stale = all;
    if (!stale) {
      auto colon = t->worker.rfind(':');
      if (colon != std::string::npos && t->worker.substr(0, colon) == host) {
        char* end = nullptr;
        long pid = std::strtol(t->worker.c_str() + colon + 1, &end, 10);
        if (end && *end == '\0' && pid > 0 && pid != static_cast<long>(getpid()) &&
            kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH)
          stale = true;
      }
    }
    if (!stale) continue;
    s.storage->run_in_transaction([&] {
      if (!s.storage->set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, reason)) return;
      s.retry(*s.storage->get_trial(t->trial_id));
      ++n;
    });
  }
  return n;
}

}  // namespace hps
