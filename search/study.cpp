#include "search/study.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "search/checkpoints.h"
#include "search/printable.h"
#include "search/sampling_context.h"
#include "search/trial_lifecycle.h"
#include "search/trial_view.h"
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
        throw Error("suggest '" + printable_excerpt(name) + "': " + distribution.to_json().dump() +
                    " does not agree with the declared space " +
                    spec->distribution.to_json().dump());
      if (!params_.count(name))
        throw Error("suggest '" + printable_excerpt(name) + "': the param is inactive in trial " +
                    std::to_string(number_) + " (its condition on '" +
                    (spec->condition ? spec->condition->parent : std::string("?")) +
                    "' does not hold)");
    }
  }
  // The enqueued values are the backend's to apply (Study::Impl, or the
  // coordinator for a Worker's trial).
  auto s = lifecycle::suggest_param(params_, distributions_, Params{}, name, distribution,
                                    [&] { return backend_->suggest(*this, name, distribution); });
  if (s.is_new) record_param(name, s.value, distribution);
  return s.value;
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

Json Trial::param(const std::string& name) const {
  auto it = params_.find(name);
  if (it == params_.end())
    throw Error("trial " + std::to_string(number_) + " has no param '" + printable_excerpt(name) +
                "' (inactive or never suggested)");
  return it->second;
}

const std::string& Trial::checkpoint_dir() const {
  static const std::string kNone;
  return checkpoint_ ? checkpoint_->work_dir() : kNone;
}

void Trial::set_checkpoint(std::shared_ptr<checkpoints::LineageFolder> folder,
                           std::optional<std::int64_t> resume_step) {
  checkpoint_ = std::move(folder);
  resume_step_ = checkpoint_ ? resume_step : std::nullopt;
  snapshot_step_.reset();
}

void Trial::upload_artifact(const std::filesystem::path& file_or_folder) {
  if (!artifacts_)
    throw Error("upload_artifact: trial " + std::to_string(number_) +
                " has no artifact folder (a Study needs StudyOptions::artifact_root; "
                "`hpsearch run` and hps::Worker give one)");
  artifacts_->upload(file_or_folder.string());
}

const std::string& Trial::artifact_dir() const {
  static const std::string kNone;
  return artifacts_ ? artifacts_->path() : kNone;
}

void Trial::set_artifact_folder(std::shared_ptr<checkpoints::ArtifactFolder> folder) {
  artifacts_ = std::move(folder);
}

void Trial::drop_unused_checkpoint() {
  if (checkpoint_) checkpoint_->remove_if_unused();
}

bool Trial::report(std::int64_t step, double value) {
  check_interrupt();
  if (step < 0) throw Error("report: step must be >= 0, got " + std::to_string(step));
  // The checkpoint of this step is written (the rule for programs): copy it
  // before the store hears of the step, so a retry never finds a step
  // recorded whose snapshot is missing.
  snapshot_step_.reset();
  if (checkpoint_) {
    checkpoints::LineageFolder::Snapshot snap = checkpoint_->snapshot(step);
    if (snap.taken)
      snapshot_step_ = step;
    else if (!snap.why.empty())
      spdlog::warn("trial {}: no checkpoint snapshot at step {}: {}", number_, step, snap.why);
    if (!snap.skipped.empty())
      spdlog::warn("trial {}: the checkpoint snapshot of step {} leaves out: {}", number_, step,
                   snap.skipped);
  }
  bool stored = backend_->report(*this, step, value);
  // The store names this step's snapshot now: the older ones can go.
  if (snapshot_step_) checkpoint_->keep_only(*snapshot_step_);
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
  std::string checkpoint_root;             // StudyOptions::checkpoint_root
  checkpoints::ArtifactOptions artifacts;  // StudyOptions::artifacts
  std::string artifact_root;               // StudyOptions::artifact_root
  std::uint64_t max_artifact_bytes = 0;
  // Guards the sampler and `view` (held while a sampler or pruner reads it).
  std::mutex sampler_mu;
  // The study's trials, updated from the storage's change feed before each
  // sampler or pruner call (O(changes); a storage without a feed is read
  // whole, TrialView::sync).
  TrialView view;
  std::atomic<bool>* interrupt = nullptr;

  // Returns fn(ctx) with a SamplingContext for `current` (under sampler_mu),
  // one worker: the view synced, then the rule of
  // search/sampling_context.h (the view, or what the pruner lets the sampler
  // see).
  template <class F>
  auto with_sampling_context(const FrozenTrial& current, F&& fn) {
    view.sync(*storage, study_id);
    using Result = decltype(fn(std::declval<const SamplingContext&>()));
    if constexpr (std::is_void_v<Result>) {
      hps::with_sampling_context(direction, view, *pruner, current, 1, fn);
    } else {
      std::optional<Result> out;
      hps::with_sampling_context(direction, view, *pruner, current, 1,
                                 [&](const SamplingContext& ctx) { out.emplace(fn(ctx)); });
      return std::move(*out);
    }
  }

  Json suggest(Trial& trial, const std::string& pname, const Distribution& d) override {
    auto s = lifecycle::suggest_param(
        trial.params(), trial.distributions(), trial.fixed_params(), pname, d, [&] {
          std::lock_guard lock(sampler_mu);
          auto snapshot = storage->get_trial(trial.trial_id());
          FrozenTrial current = *snapshot;
          current.params = trial.params();
          return with_sampling_context(current, [&](const SamplingContext& ctx) {
            return d.to_external(sampler->sample_independent(ctx, pname, d));
          });
        });
    if (s.is_new) storage->set_trial_param(trial.trial_id(), pname, s.value, d);
    return s.value;
  }

  bool report(Trial& trial, std::int64_t step, double value) override {
    bool stored = false;
    storage->run_in_transaction([&] {
      stored = storage->set_trial_intermediate_value(trial.trial_id(), step, value);
      if (trial.snapshot_step() == step)
        storage->set_trial_system_attr(trial.trial_id(), checkpoints::kAttrCheckpoint,
                                       checkpoints::checkpoint_attr(step));
    });
    return stored;
  }

  bool should_prune(Trial& trial) override {
    if (!pruner->prunes()) return false;  // NopPruner: no need to read the history
    auto snapshot = storage->get_trial(trial.trial_id());
    std::lock_guard lock(sampler_mu);
    view.sync(*storage, study_id);
    PruningContext ctx{direction, view.trials(), *snapshot, trial.last_step().value_or(0),
                       storage.get()};
    return pruner->prune(ctx);
  }

  void set_user_attr(Trial& trial, const std::string& key, const Json& value) override {
    storage->set_trial_user_attr(trial.trial_id(), key, value);
  }
};

namespace {

// A declared space the sampler cannot sample is refused before the study
// is created (Sampler::check_space).
void check_sampler_space(const StudyOptions& options) {
  if (options.sampler && options.space) options.sampler->check_space(*options.space);
}

std::shared_ptr<Study::Impl> make_impl(std::shared_ptr<Storage> storage, std::int64_t study_id,
                                       StudyOptions options) {
  if (!storage) throw Error("Study: storage must not be null");
  auto impl = std::make_shared<Study::Impl>();
  StudyInfo info = storage->get_study(study_id);
  impl->storage = std::move(storage);
  impl->study_id = study_id;
  impl->name = info.name;
  impl->direction = info.direction;
  impl->sampler = options.sampler ? options.sampler : make_default_sampler();
  impl->pruner = options.pruner ? options.pruner : std::make_shared<NopPruner>();
  impl->space = std::move(options.space);
  impl->worker = options.worker.empty() ? default_worker_name() : options.worker;
  impl->checkpoint_root = options.artifacts.checkpoints ? std::move(options.checkpoint_root) : "";
  impl->artifacts = options.artifacts;
  impl->artifact_root = std::move(options.artifact_root);
  impl->max_artifact_bytes = options.max_artifact_bytes;
  return impl;
}

}  // namespace

Study Study::create(std::shared_ptr<Storage> storage, const std::string& name,
                    StudyDirection direction, StudyOptions options, const Json& config) {
  if (!storage) throw Error("Study: storage must not be null");
  check_sampler_space(options);
  auto id = storage->create_study(name, direction, config);
  return Study(make_impl(std::move(storage), id, std::move(options)));
}

Study Study::load(std::shared_ptr<Storage> storage, const std::string& name, StudyOptions options) {
  if (!storage) throw Error("Study: storage must not be null");
  auto id = storage->find_study(name);
  if (!id) throw StorageError("no study named '" + printable_excerpt(name) + "' in the storage");
  return Study(make_impl(std::move(storage), *id, std::move(options)));
}

Study Study::load_if_exists(std::shared_ptr<Storage> storage, const std::string& name,
                            StudyDirection direction, StudyOptions options, const Json& config) {
  if (!storage) throw Error("Study: storage must not be null");
  check_sampler_space(options);
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
    throw StorageError("study '" + printable_excerpt(name) + "' exists with direction " +
                       to_string(info.direction) + ", not " + to_string(direction));
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
  Params fixed = lifecycle::fixed_params_of(*t);
  Params params = t->params;
  std::map<std::string, Distribution> dists = t->distributions;
  if (s.space) {
    Params chosen = params;
    // Enqueued values that fit the declared space condition the sampler.
    lifecycle::apply_fixed_params(*s.space, fixed, chosen);
    {
      std::lock_guard lock(s.sampler_mu);
      try {
        s.with_sampling_context(
            *t, [&](const SamplingContext& ctx) { s.sampler->sample(ctx, *s.space, chosen); });
      } catch (...) {
        s.storage->set_trial_state(t->trial_id, TrialState::kFail, std::nullopt, "sampler failed");
        throw;
      }
      // Stored before the next thread samples, so that it sees these params
      // (else two threads may get the same point).
      s.storage->run_in_transaction([&] {
        for (const ParamSpec* spec :
             lifecycle::store_new_params(*s.storage, t->trial_id, *s.space, params, chosen)) {
          params[spec->name] = chosen.at(spec->name);
          dists.insert_or_assign(spec->name, spec->distribution);
          fixed.erase(spec->name);
        }
      });
    }
  }
  Trial trial(impl_.get(), t->trial_id, t->number, std::move(params), std::move(dists),
              std::move(fixed), s.space ? &*s.space : nullptr, s.interrupt);
  if (!s.artifact_root.empty()) {
    try {
      trial.set_artifact_folder(std::make_shared<checkpoints::ArtifactFolder>(
          s.artifact_root, t->number, s.max_artifact_bytes));
    } catch (const std::exception& e) {
      spdlog::warn("trial {}: no artifact folder: {}", t->number, e.what());
      s.storage->set_trial_user_attr(t->trial_id, checkpoints::kAttrArtifactWarning, e.what());
    }
  }
  const std::optional<std::int64_t> resume = checkpoints::resume_step_of(*t);
  if (!s.checkpoint_root.empty()) {
    auto folder = std::make_shared<checkpoints::LineageFolder>(s.checkpoint_root,
                                                               checkpoints::lineage_of(*t));
    checkpoints::Prepared p = folder->prepare(resume);
    if (!p.warning.empty())
      spdlog::warn("trial {}: starts from scratch, not from its checkpoint: {}", t->number,
                   p.warning);
    trial.set_checkpoint(std::move(folder), p.resume_step);
    // A retry's curve continues only when its folder holds the snapshot.
    if (resume)
      lifecycle::start_resumed_trial(*s.storage, s.study_id, t, p.resume_step == resume, p.warning);
  } else if (resume) {
    lifecycle::start_resumed_trial(*s.storage, s.study_id, t, false,
                                   "this study has no checkpoint folder "
                                   "(StudyOptions::checkpoint_root is empty)");
  }
  return trial;
}

TrialPtr Study::tell(Trial& trial, double value) {
  return tell(trial, TrialState::kComplete, value);  // NaN: FAIL (lifecycle::resolve_end)
}

TrialPtr Study::tell(Trial& trial, TrialState state, std::optional<double> value,
                     const std::string& fail_reason) {
  auto& s = *impl_;
  // The trial's user artifacts: complete, with their manifest, before the
  // store names them (and before the trial is finished).
  if (auto folder = trial.artifact_folder();
      folder &&
      !s.storage->get_trial(trial.trial_id())->system_attrs.contains(checkpoints::kAttrArtifacts)) {
    try {
      const checkpoints::ArtifactSummary kept = folder->finish();
      if (kept.files > 0)
        s.storage->set_trial_system_attr(trial.trial_id(), checkpoints::kAttrArtifacts,
                                         kept.to_json());
    } catch (const std::exception& e) {
      spdlog::warn("trial {}: its artifacts are not kept: {}", trial.number(), e.what());
      s.storage->set_trial_user_attr(trial.trial_id(), checkpoints::kAttrArtifactWarning, e.what());
    }
  }
  lifecycle::TrialEnd end =
      lifecycle::resolve_end(state, value, fail_reason, [&]() -> std::optional<double> {
        auto last = s.storage->get_trial(trial.trial_id())->last_intermediate();
        if (!last) return std::nullopt;
        return last->second;
      });
  if (!s.storage->set_trial_state(trial.trial_id(), end.state, end.value, end.fail_reason))
    throw Error("tell: trial " + std::to_string(trial.number()) + " is already finished");
  if (end.state != TrialState::kFail) apply_retention(trial.number());
  return s.storage->get_trial(trial.trial_id());
}

void Study::apply_retention(std::int64_t number) {
  auto& s = *impl_;
  if (s.checkpoint_root.empty()) return;
  // The change-fed view (O(changes) to bring up to date), not a read of
  // the whole history at each tell.
  std::vector<TrialPtr> trials;
  {
    std::lock_guard lock(s.sampler_mu);
    s.view.sync(*s.storage, s.study_id);
    trials = s.view.trials();
  }
  const auto ended = std::find_if(trials.begin(), trials.end(),
                                  [&](const TrialPtr& t) { return t && t->number == number; });
  if (ended == trials.end() || !is_finished((*ended)->state)) return;
  for (const FrozenTrial* v :
       checkpoints::retention_victims(trials, **ended, s.direction, s.artifacts)) {
    checkpoints::remove_lineage(s.checkpoint_root, checkpoints::lineage_of(*v));
    s.storage->set_trial_system_attr(v->trial_id, checkpoints::kAttrCheckpoint,
                                     checkpoints::deleted_checkpoint_attr(*v));
  }
}

namespace {

// One Study::optimize() call: each of n_jobs threads asks for a trial,
// runs the objective and tells the result until the budget, the timeout,
// a stop request or an error ends the run.
class OptimizeRun {
 public:
  OptimizeRun(Study& study, const Objective& objective, const OptimizeOptions& options)
      : study_(study), objective_(objective), options_(options) {}

  // Runs the threads; rethrows the first error (an objective's exception
  // without catch_exceptions, or the store's).
  void run() {
    if (options_.n_jobs == 1) {
      loop();
    } else {
      std::vector<std::thread> threads;
      threads.reserve(static_cast<std::size_t>(options_.n_jobs));
      for (int i = 0; i < options_.n_jobs; ++i) threads.emplace_back([this] { loop(); });
      for (auto& t : threads) t.join();
    }
    if (first_error_) std::rethrow_exception(first_error_);
  }

 private:
  // Whether the next trial may start (budget, timeout, stop request).
  bool may_start() {
    if (options_.stop && options_.stop->load()) return false;
    if (options_.timeout_s) {
      double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      if (elapsed >= *options_.timeout_s) return false;
    }
    return !options_.n_trials || started_.fetch_add(1) < *options_.n_trials;
  }

  // Keeps the first error and stops every thread.
  void fail(std::exception_ptr error) {
    std::lock_guard lock(mu_);
    if (!first_error_) first_error_ = std::move(error);
    halt_ = true;
  }

  void loop() {
    while (!halt_ && may_start()) {
      std::optional<Trial> trial;
      try {
        trial.emplace(study_.ask());
      } catch (const SearchSpaceExhausted& e) {
        spdlog::info("{}", e.what());
        halt_ = true;
        break;
      } catch (...) {
        fail(std::current_exception());
        break;
      }
      try {
        run_one(*trial);
      } catch (...) {
        // The store failed while ending the trial: stop, report it.
        fail(std::current_exception());
        break;
      }
    }
  }

  static bool space_exhausted(const std::exception_ptr& error) {
    if (!error) return false;
    try {
      std::rethrow_exception(error);
    } catch (const SearchSpaceExhausted&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  void run_one(Trial& trial) {
    const lifecycle::Outcome outcome = lifecycle::run_objective(objective_, trial);
    trial.drop_unused_checkpoint();
    const lifecycle::TrialEnd asked = lifecycle::requested_end(outcome);
    TrialPtr done;
    if (outcome.kind == lifecycle::OutcomeKind::kInterrupted) {
      study_.storage().run_in_transaction([&] {
        done = study_.tell(trial, asked.state, asked.value, asked.fail_reason);
        lifecycle::queue_retry(study_.storage(), study_.study_id(), *done,
                               lifecycle::RetryCause::kInterrupted);
      });
    } else {
      done = study_.tell(trial, asked.state, asked.value, asked.fail_reason);
    }
    // tell() kept a FAIL trial's folder; the retry (if any) is decided now.
    if (done && done->state == TrialState::kFail) study_.apply_retention(done->number);
    if (outcome.kind == lifecycle::OutcomeKind::kException) {
      if (space_exhausted(outcome.error)) {
        // A suggest call found no untried point (define-by-run): the trial
        // ends FAIL with that reason and the study stops, as when ask() finds
        // none.
        spdlog::info("trial {}: {}", trial.number(), outcome.message);
        halt_ = true;
      } else {
        spdlog::warn("trial {} failed: {}", trial.number(), outcome.message);
        if (!options_.catch_exceptions) fail(outcome.error);
      }
    }
    if (options_.callback && done) {
      std::lock_guard lock(mu_);
      options_.callback(*done);
    }
  }

  Study& study_;
  const Objective& objective_;
  const OptimizeOptions& options_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::atomic<std::int64_t> started_{0};
  std::atomic<bool> halt_{false};
  std::mutex mu_;  // guards first_error_ and callbacks
  std::exception_ptr first_error_;
};

}  // namespace

void Study::optimize(const Objective& objective, const OptimizeOptions& options) {
  if (options.n_jobs < 1) throw ConfigError("n_jobs", "must be >= 1");
  if (options.n_trials && *options.n_trials < 0) throw ConfigError("n_trials", "must be >= 0");
  if (options.n_trials) {
    const auto complete = static_cast<std::int64_t>(trials({TrialState::kComplete}).size());
    const std::string warning = sampler().plan_budget(complete + *options.n_trials);
    if (!warning.empty()) spdlog::warn("{}", warning);
  }
  impl_->interrupt = options.stop;
  try {
    OptimizeRun(*this, objective, options).run();
  } catch (...) {
    impl_->interrupt = nullptr;
    throw;
  }
  impl_->interrupt = nullptr;
}

TrialPtr Study::enqueue_trial(const Params& params, const Json& system_attrs) {
  auto& s = *impl_;
  if (s.space) lifecycle::check_enqueued_params(*s.space, params);
  NewTrial init;
  init.state = TrialState::kWaiting;
  init.system_attrs = system_attrs.is_object() ? system_attrs : Json::object();
  init.system_attrs[kAttrFixedParams] = lifecycle::fixed_params_attr(params);
  return s.storage->create_trial(s.study_id, init);
}

TrialPtr Study::best_trial() const {
  TrialPtr best = lifecycle::best_trial(
      impl_->direction, impl_->storage->get_all_trials(impl_->study_id, {TrialState::kComplete}));
  if (!best)
    throw Error("study '" + printable_excerpt(impl_->name) + "' has no COMPLETE trial yet");
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
      lifecycle::queue_retry(*s.storage, s.study_id, *s.storage->get_trial(t->trial_id),
                             lifecycle::RetryCause::kStale);
      ++n;
    });
  }
  return n;
}

}  // namespace hps
