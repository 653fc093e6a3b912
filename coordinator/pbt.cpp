// Coordinator::Impl: Population Based Training (CoordinatorOptions::pbt;
// the decisions are algorithms/pbt.h, the settings search/pbt_options.h).
//
// Each member is a chain of trials, told apart by the system attr pbt
// (kAttrPbt). The first `population` trials start the members (the
// scheduler's initial_params first, enqueued, then the sampler's). When a
// member reports an interval boundary and ranks in the bottom quantile, its
// trial is answered "prune" (it ends PRUNED, pbt.exploited set) and a new
// WAITING trial continues the member: the explored params of a donor of
// the top quantile, its own lineage folder holding a copy of the donor's
// newest snapshot, resumed_from {"trial": donor, "step": S}, so its runner
// restores that snapshot (HPSEARCH_RESUME_STEP=S) and its curve takes the
// donor's values up to S (lifecycle::start_resumed_trial). A member not
// exploited keeps its process running. Everything is read from the store
// (the mirror), so a restarted coordinator carries on: each decision's
// draws are seeded by (seed, trial, step), not by the order of decisions.
#include "algorithms/pbt.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "coordinator/coordinator_impl.h"
#include "search/checkpoints.h"
#include "search/printable.h"

namespace hps {

namespace {

namespace fs = std::filesystem;

const Json* pbt_attr(const FrozenTrial& t) {
  auto it = t.system_attrs.find(kAttrPbt);
  return it != t.system_attrs.end() && it->is_object() ? &*it : nullptr;
}

std::int64_t int_field(const Json& attr, const char* key, std::int64_t fallback) {
  auto it = attr.find(key);
  return it != attr.end() && it->is_number_integer() ? it->get<std::int64_t>() : fallback;
}

// Whether the trial's chain ends with it: exploited or stopped.
bool is_stopped(const FrozenTrial& t) {
  const Json* a = pbt_attr(t);
  return a && (a->contains("exploited") || a->contains("stopped"));
}

// Copies <root>/lineage-<from>/snapshot-<step> and its manifest into
// <root>/lineage-<to> (made owner-only). Snapshots are never written in
// place (a newer one hard-links the unchanged files of the older), so the
// copy is made of hard links, with a plain copy where linking fails.
void copy_snapshot_between(const std::string& root, std::int64_t from, std::int64_t to,
                           std::int64_t step) {
  checkpoints::LineageFolder target(root, to);  // checks and makes the folder
  const std::string name = "snapshot-" + std::to_string(step);
  const fs::path src = fs::path(checkpoints::lineage_path(root, from));
  const fs::path dst = fs::path(target.path());
  fs::remove_all(dst / name);
  try {
    fs::copy(src / name, dst / name,
             fs::copy_options::recursive | fs::copy_options::create_hard_links |
                 fs::copy_options::copy_symlinks);
  } catch (const fs::filesystem_error&) {
    fs::remove_all(dst / name);
    fs::copy(src / name, dst / name, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  }
  fs::copy_file(src / (name + ".manifest"), dst / (name + ".manifest"),
                fs::copy_options::overwrite_existing);
}

}  // namespace

// At start: the initial members of a new study enqueued; a WAITING retry of
// a trial whose chain ended (exploited or stopped, then left RUNNING by a
// coordinator that was killed) ended PRUNED: its member continues in its
// successor.
void Coordinator::Impl::pbt_setup() {
  if (!options.pbt) return;
  if (options.checkpoint_root.empty() || !options.artifacts.checkpoints)
    throw ConfigError("scheduler",
                      "PBT needs checkpoints: artifacts.checkpoints on and a checkpoint folder "
                      "the workers share (hpsearch run sets <study>.logs/checkpoints)");
  if (gang_mode)
    throw ConfigError("scheduler", "PBT with multi-process trials (resources) is not supported");
  // No seed (neither the scheduler's nor the sampler's): a new one per run.
  if (!options.pbt->seed) options.pbt->seed = std::random_device{}();
  storage.run_in_transaction([&] {
    if (mirror.trials().empty()) {
      std::int64_t member = 0;
      for (const Params& p : options.pbt->initial_params) {
        Json attrs = Json::object();
        attrs[kAttrPbt] = {{"member", member++},
                           {"generation", 0},
                           {"parent", nullptr},
                           {"donor", nullptr},
                           {"start_step", 0}};
        mirror.append(study.enqueue_trial(p, attrs));
      }
    }
    for (const TrialPtr& t : mirror.trials()) {
      if (t->state != TrialState::kWaiting) continue;
      auto r = t->system_attrs.find(kAttrRetryOf);
      if (r == t->system_attrs.end() || !r->is_number_integer()) continue;
      const auto of = r->get<std::int64_t>();
      if (of < 0 || of >= static_cast<std::int64_t>(mirror.trials().size())) continue;
      if (!is_stopped(mirror.at(of))) continue;
      storage.set_trial_state(t->trial_id, TrialState::kPruned, std::nullopt, "");
      mirror.refresh(t->number);
    }
  });
}

// The members started so far (distinct pbt.member values).
std::int64_t Coordinator::Impl::pbt_members() const {
  std::set<std::int64_t> members;
  for (const TrialPtr& t : mirror.trials())
    if (const Json* a = pbt_attr(*t)) members.insert(int_field(*a, "member", -1));
  return static_cast<std::int64_t>(members.size());
}

// Steps the population trained: each trial's reported steps after its
// start step.
std::int64_t Coordinator::Impl::pbt_steps_trained() const {
  std::int64_t n = 0;
  for (const TrialPtr& t : mirror.trials()) {
    const Json* a = pbt_attr(*t);
    if (!a || t->was_retried()) continue;
    const std::int64_t start = int_field(*a, "start_step", 0);
    for (const auto& [step, v] : t->intermediate_values)
      if (step > start) ++n;
  }
  return n;
}

// Whether no new trial may start: every member started (and none waits to
// continue), or budget_steps reached.
bool Coordinator::Impl::pbt_done() const {
  if (!options.pbt) return false;
  if (options.pbt->budget_steps && pbt_steps_trained() >= *options.pbt->budget_steps) return true;
  return pbt_members() >= options.pbt->population;
}

// A trial just dispatched: a first trial gets a new member's attr; a retry
// carries the attr of the trial it retries.
void Coordinator::Impl::pbt_tag(const TrialPtr& t) {
  if (!options.pbt || pbt_attr(*t)) return;
  Json attr;
  auto r = t->system_attrs.find(kAttrRetryOf);
  if (r != t->system_attrs.end() && r->is_number_integer()) {
    const auto of = r->get<std::int64_t>();
    if (of >= 0 && of < static_cast<std::int64_t>(mirror.trials().size()))
      if (const Json* a = pbt_attr(mirror.at(of))) attr = *a;
  }
  if (attr.is_null())
    attr = {{"member", pbt_members()},
            {"generation", 0},
            {"parent", nullptr},
            {"donor", nullptr},
            {"start_step", 0}};
  attr.erase("exploited");
  attr.erase("stopped");
  storage.set_trial_system_attr(t->trial_id, kAttrPbt, attr);
  mirror.refresh(t->number);
}

// Whether trial `number` was ended by the scheduler (its later reports are
// answered "prune" and not stored).
bool Coordinator::Impl::pbt_stopped(std::int64_t number) const {
  return options.pbt && is_stopped(mirror.at(number));
}

void Coordinator::Impl::pbt_mark(const FrozenTrial& t, const char* key, const Json& value) {
  Json attr = pbt_attr(t) ? *pbt_attr(t) : Json::object();
  attr[key] = value;
  storage.set_trial_system_attr(t.trial_id, kAttrPbt, attr);
  mirror.refresh(t.number);
}

// Trial `number` reported `step` (stored): whether it stops here (max_steps,
// budget_steps, or exploited: its successor queued).
bool Coordinator::Impl::pbt_on_report(std::int64_t number, std::int64_t step) {
  const PbtOptions& o = *options.pbt;
  const FrozenTrial& t = mirror.at(number);
  const Json* attr = pbt_attr(t);
  if (!attr) return false;
  if (step >= o.max_steps) {
    pbt_mark(t, "stopped", "max_steps");
    return true;
  }
  if (o.budget_steps && pbt_steps_trained() >= *o.budget_steps) {
    pbt_mark(t, "stopped", "budget_steps");
    return true;
  }
  if (!pbt::is_boundary(step, o)) return false;
  const std::int64_t member = int_field(*attr, "member", -1);
  // Each member's value at `step` (or its newest before it), and the trial
  // that holds it (a donor's newest snapshot must still be there).
  std::map<std::int64_t, pbt::MemberReport> latest;
  std::map<std::int64_t, const FrozenTrial*> holder;
  for (const TrialPtr& p : mirror.trials()) {
    const Json* a = pbt_attr(*p);
    if (!a || p->intermediate_values.empty() || p->was_retried()) continue;
    const std::int64_t m = int_field(*a, "member", -1);
    if (m < 0) continue;
    // Another member counts while its trial runs on, with a snapshot to copy.
    if (m != member &&
        (p->state != TrialState::kRunning || is_stopped(*p) || !checkpoints::snapshot_step(*p)))
      continue;
    // Its value at this step, or at its newest step before it (a member
    // ahead is judged where this one stands: one that restarted from a
    // snapshot is not always behind).
    auto at = p->intermediate_values.upper_bound(step);
    if (at == p->intermediate_values.begin()) continue;
    --at;
    latest[m] = {m, at->first, at->second};
    holder[m] = p.get();
  }
  std::vector<pbt::MemberReport> reports;
  reports.reserve(latest.size());
  for (const auto& [m, r] : latest) reports.push_back(r);
  std::seed_seq seq{*o.seed, static_cast<std::uint64_t>(number), static_cast<std::uint64_t>(step)};
  std::mt19937_64 rng(seq);
  const std::optional<std::int64_t> donor_member =
      pbt::choose_donor(reports, member, direction, o, rng);
  if (!donor_member || *donor_member == member) return false;
  const FrozenTrial& donor = *holder.at(*donor_member);
  const std::optional<std::int64_t> donor_step = checkpoints::snapshot_step(donor);
  if (!donor_step) return false;
  const Params params = pbt::explore(space, donor.params, o, rng);
  const auto successor = static_cast<std::int64_t>(mirror.trials().size());
  try {
    copy_snapshot_between(options.checkpoint_root, checkpoints::lineage_of(donor), successor,
                          *donor_step);
  } catch (const std::exception& e) {
    spdlog::warn(
        "coordinator: PBT: trial {} not exploited at step {}: copying trial {}'s "
        "snapshot of step {} failed: {}",
        number, step, donor.number, *donor_step, printable(e.what()));
    checkpoints::remove_lineage(options.checkpoint_root, successor);
    return false;
  }
  Json attrs = Json::object();
  attrs[kAttrPbt] = {{"member", member},
                     {"generation", int_field(*attr, "generation", 0) + 1},
                     {"parent", number},
                     {"donor", donor.number},
                     {"start_step", *donor_step}};
  attrs[checkpoints::kAttrResumedFrom] = {{"trial", donor.number}, {"step", *donor_step}};
  TrialPtr next = study.enqueue_trial(params, attrs);
  mirror.append(next);
  if (next->number != successor)  // never: the coordinator is the store's only writer
    spdlog::warn("coordinator: PBT: trial {} was expected to be number {}", next->number,
                 successor);
  pbt_mark(mirror.at(number), "exploited", Json{{"step", step}, {"successor", next->number}});
  spdlog::info(
      "coordinator: PBT: member {} (trial {}) at step {} exploits trial {} (step {}); "
      "continues as trial {}",
      member, number, step, donor.number, *donor_step, next->number);
  return true;
}

}  // namespace hps
