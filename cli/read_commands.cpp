// hpsearch best | trials | studies: read a study without running it.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "cli/commands.h"
#include "cli/table.h"
#include "search/printable.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/trial_lifecycle.h"
#include "search/util/storage_url.h"
#include "search/writer_lock.h"

namespace hps::cli {

std::shared_ptr<Storage> open_existing(const std::string& path) {
  if (util::StorageUrl url = util::parse_storage_url(path);
      !url.in_memory && !std::filesystem::exists(url.path))
    throw ConfigError(path, "no such storage file");
  return open_storage(path);
}

// The study named, or the only study in the storage.
std::int64_t pick_study(Storage& storage, const std::optional<std::string>& name,
                        const std::string& path) {
  if (name) {
    auto id = storage.find_study(*name);
    if (!id) throw ConfigError("--study", "no study named '" + *name + "' in " + path);
    return *id;
  }
  auto studies = storage.list_studies();
  if (studies.empty()) throw ConfigError(path, "the storage holds no study");
  if (studies.size() > 1) {
    std::string names;
    for (const auto& s : studies) names += (names.empty() ? "" : ", ") + ("'" + s.name + "'");
    throw ConfigError("--study", "the storage holds several studies (" + names + "); name one");
  }
  return studies[0].study_id;
}

int best_command(const ReadOptions& o) {
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  auto study = Study::load(storage, storage->get_study(id).name);
  TrialPtr best;
  try {
    best = study.best_trial();
  } catch (const Error& e) {
    std::cerr << "hpsearch: " << e.what() << "\n";
    return kExitFailure;
  }
  if (o.format == "json") {
    std::cout << trial_to_json(*best).dump(2) << "\n";
    return kExitOk;
  }
  Table t({"field", "value"});
  t.add_row({"trial", std::to_string(best->number)});
  t.add_row({"value", format_value(*best->value)});
  for (const auto& [k, v] : best->params) t.add_row({"param " + k, format_param(v)});
  for (const auto& [k, v] : best->user_attrs.items()) t.add_row({"attr " + k, format_param(v)});
  std::cout << t.render();
  return kExitOk;
}

int trials_command(const ReadOptions& o) {
  if (o.format != "table" && o.format != "csv" && o.format != "json")
    throw ConfigError("--format", "must be table, csv or json, got '" + o.format + "'");
  std::vector<TrialState> states;
  if (o.state) {
    auto s = parse_trial_state(*o.state);
    if (!s) throw ConfigError("--state", "must be WAITING, RUNNING, COMPLETE, PRUNED or FAIL");
    states.push_back(*s);
  }
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  auto trials = storage->get_all_trials(id, states);
  if (o.format == "json") {
    Json arr = Json::array();
    for (const auto& t : trials) arr.push_back(trial_to_json(*t));
    std::cout << arr.dump(2) << "\n";
    return kExitOk;
  }
  std::set<std::string> names, attrs;
  for (const auto& t : trials) {
    for (const auto& [k, v] : t->params) names.insert(k);
    for (const auto& [k, v] : t->user_attrs.items()) attrs.insert(k);
  }
  std::vector<std::string> header = {"number", "state", "value", "duration_s"};
  for (const auto& n : names) header.push_back(n);
  for (const auto& a : attrs) header.push_back("attr " + a);  // user attrs, after the params
  header.push_back("worker");
  header.push_back("fail_reason");
  Table table(header);
  for (const auto& t : trials) {
    std::vector<std::string> row = {std::to_string(t->number), to_string(t->state),
                                    t->value ? format_value(*t->value) : "",
                                    t->duration_s() ? fmt::format("{:.3f}", *t->duration_s()) : ""};
    for (const auto& n : names) {
      auto it = t->params.find(n);
      row.push_back(it == t->params.end() ? "" : format_param(it->second));
    }
    for (const auto& a : attrs)
      row.push_back(t->user_attrs.contains(a) ? printable(format_param(t->user_attrs[a])) : "");
    row.push_back(printable(t->worker));  // text from workers: no control characters
    row.push_back(printable(t->fail_reason));
    table.add_row(std::move(row));
  }
  std::cout << (o.format == "csv" ? table.render_csv() : table.render());
  return kExitOk;
}

int studies_command(const ReadOptions& o) {
  auto storage = open_existing(o.storage);
  Table table({"study", "direction", "trials", "complete", "best"});
  Json arr = Json::array();
  for (const auto& info : storage->list_studies()) {
    auto study = Study::load(storage, info.name);
    auto trials = study.trials();
    std::int64_t complete = 0;
    for (const auto& t : trials) complete += t->state == TrialState::kComplete;
    std::string best;
    std::optional<double> best_v;
    try {
      best_v = study.best_value();
      best = format_value(*best_v);
    } catch (const Error&) {
    }
    table.add_row({info.name, to_string(info.direction), std::to_string(trials.size()),
                   std::to_string(complete), best});
    arr.push_back(Json{{"name", info.name},
                       {"direction", to_string(info.direction)},
                       {"n_trials", trials.size()},
                       {"n_complete", complete},
                       {"best_value", best_v ? Json(*best_v) : Json()}});
  }
  if (o.format == "json")
    std::cout << arr.dump(2) << "\n";
  else
    std::cout << (o.format == "csv" ? table.render_csv() : table.render());
  return kExitOk;
}

namespace {

// The trials of a study counted by state, how many count as finished
// (Trial::counts_as_finished) and the best trial (lifecycle::best_trial).
struct TrialTally {
  std::map<TrialState, std::int64_t> counts;
  std::int64_t finished = 0;
  TrialPtr best;

  std::int64_t count(TrialState state) const {
    auto it = counts.find(state);
    return it == counts.end() ? 0 : it->second;
  }
};

TrialTally tally_trials(const std::vector<TrialPtr>& trials, StudyDirection direction) {
  TrialTally tally;
  for (const auto& t : trials) {
    tally.counts[t->state]++;
    if (t->counts_as_finished()) ++tally.finished;
  }
  tally.best = lifecycle::best_trial(direction, trials);  // warm-start trials excepted
  return tally;
}

// The study config's budget.n_trials, if it is there and an integer.
std::optional<std::int64_t> budget_n_trials(const Json& config) {
  if (!config.is_object() || !config.contains("budget") || !config["budget"].is_object())
    return std::nullopt;
  const Json& b = config["budget"];
  if (!b.contains("n_trials") || !b["n_trials"].is_number_integer()) return std::nullopt;
  return b["n_trials"].get<std::int64_t>();
}

// Whether a coordinator runs the study: its writer lock says so
// (search/writer_lock.h); the "coordinator" attr only describes the last one.
// A store without a lock file was never locked: no coordinator of this
// version runs it.
struct LockAnswer {
  std::optional<WriterLockHolder> holder;  // who holds the lock now
  bool asked = false;                      // whether the lock could be asked
  std::string note;                        // why it could not, for the status line
};

LockAnswer ask_writer_lock(Storage& storage, std::int64_t study_id) {
  LockAnswer answer;
  std::string file = storage_file(storage);
  if (file.empty()) return answer;
  try {
    answer.holder = WriterLock::query(file, study_id);
    answer.asked = true;
  } catch (const Error& e) {
    answer.note = fmt::format(" (cannot ask the writer lock: {})", e.what());
  }
  return answer;
}

// The coordinator as status shows it: the lock's answer, the "coordinator"
// attr it last wrote, one line of text, and its workers table (only when the
// attr is the lock holder's, so the table is current).
struct CoordinatorStatus {
  LockAnswer lock;
  Json attr;
  std::string line;
  Json workers = Json::array();
};

// The status line of a study whose writer lock nobody holds, from the last
// coordinator's attr (`coord`, an object).
std::string unlocked_coordinator_line(const Json& coord, const LockAnswer& lock, double now) {
  double age = now - coord.value("updated", 0.0);
  std::string where =
      fmt::format("{}:{} at {}", coord.value("host", "?"), coord.value("pid", std::int64_t{0}),
                  coord.value("endpoint", "?"));
  if (!coord.value("running", false))
    return fmt::format("not running (last run by {}, {}; {} ago)", where,
                       coord.value("done_reason", std::string("ended")), format_duration(age));
  if (lock.asked)
    return fmt::format(
        "not running (the coordinator {} ended without recording its end, e.g. killed, "
        "last update {} ago; hpsearch resume continues the study)",
        where, format_duration(age));
  return fmt::format("unknown: last update by {} {} ago{}", where, format_duration(age), lock.note);
}

CoordinatorStatus coordinator_status(Storage& storage, std::int64_t study_id,
                                     const StudyInfo& info) {
  CoordinatorStatus st;
  st.lock = ask_writer_lock(storage, study_id);
  st.attr = info.system_attrs.value("coordinator", Json());
  double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  const Json& coord = st.attr;
  if (const auto& holder = st.lock.holder) {
    bool same = coord.is_object() && coord.value("pid", std::int64_t{0}) == holder->pid &&
                coord.value("host", std::string()) == holder->host;
    double age = same ? now - coord.value("updated", 0.0) : 0.0;
    st.line = fmt::format(
        "running ({}{})", holder->describe(),
        same ? fmt::format("; status updated {} ago", format_duration(age)) : std::string());
    if (same && coord.contains("workers") && coord["workers"].is_array())
      st.workers = coord["workers"];
  } else if (!coord.is_object()) {
    st.line = "never run by a coordinator";
  } else {
    st.line = unlocked_coordinator_line(coord, st.lock, now);
  }
  return st;
}

// Everything `hpsearch status` shows of one study.
struct StudyStatus {
  StudyInfo info;
  std::vector<TrialPtr> trials;
  TrialTally tally;
  std::optional<std::int64_t> budget;
  CoordinatorStatus coordinator;
};

void print_status_json(const StudyStatus& s) {
  const auto& holder = s.coordinator.lock.holder;
  Json out;
  out["study"] = s.info.name;
  out["direction"] = to_string(s.info.direction);
  out["counts"] = Json::object();
  for (TrialState st : {TrialState::kWaiting, TrialState::kRunning, TrialState::kComplete,
                        TrialState::kPruned, TrialState::kFail})
    out["counts"][to_string(st)] = s.tally.count(st);
  out["finished"] = s.tally.finished;
  out["n_trials"] = s.budget ? Json(*s.budget) : Json();
  out["best"] = s.tally.best ? trial_to_json(*s.tally.best) : Json();
  out["coordinator"] = s.coordinator.attr;
  out["coordinator_running"] = holder                     ? Json(true)
                               : s.coordinator.lock.asked ? Json(false)
                                                          : Json();
  if (holder)
    out["writer_lock"] = Json{{"host", holder->host},
                              {"pid", holder->pid},
                              {"since", holder->since},
                              {"endpoint", holder->endpoint}};
  std::cout << out.dump(2) << "\n";
}

// One row of the workers table: the worker's trial, and from the store's
// RUNNING trial of that number (taken out of `running`) how long it runs and
// its last report.
std::vector<std::string> worker_row(const Json& w, std::map<std::int64_t, TrialPtr>& running) {
  std::string trial = "idle", since, last;
  if (w.contains("trial") && w["trial"].is_number_integer()) {
    std::int64_t n = w["trial"].get<std::int64_t>();
    trial = std::to_string(n);
    if (auto it = running.find(n); it != running.end()) {
      const FrozenTrial& t = *it->second;
      if (t.datetime_start)
        since = format_duration(
            std::chrono::duration<double>(Clock::now() - *t.datetime_start).count());
      if (auto li = t.last_intermediate())
        last = fmt::format("step {}: {}", li->first, format_value(li->second));
      running.erase(it);
    }
  }
  return {printable(w.value("name", "?")),
          printable(w.value("host", "?")),
          std::to_string(w.value("pid", std::int64_t{0})),
          printable(w.value("device", "?")),
          trial,
          since,
          last};
}

// What each worker runs now: the coordinator's workers table, with the
// RUNNING trials of the store; then the RUNNING trials no worker claims.
void print_workers(const StudyStatus& s) {
  std::map<std::int64_t, TrialPtr> running;
  for (const auto& t : s.trials)
    if (t->state == TrialState::kRunning) running[t->number] = t;
  const Json& workers = s.coordinator.workers;
  if (!workers.empty()) {
    Table table({"worker", "host", "pid", "device", "trial", "running for", "last report"});
    for (const auto& w : workers) table.add_row(worker_row(w, running));
    std::cout << "\nWorkers (" << workers.size() << "):\n" << table.render();
  }
  if (!running.empty()) {
    Table table({"RUNNING trial", "worker", "started"});
    for (const auto& [n, t] : running)
      table.add_row({std::to_string(n), printable(t->worker),
                     t->datetime_start ? format_iso8601(*t->datetime_start) : ""});
    std::cout << "\n" << table.render();
  }
}

void print_status_text(const StudyStatus& s, const std::string& storage_name) {
  std::cout << fmt::format("Study '{}' ({}) in {}\n", s.info.name, to_string(s.info.direction),
                           storage_name);
  std::string by_state;
  for (TrialState st : {TrialState::kComplete, TrialState::kPruned, TrialState::kFail,
                        TrialState::kRunning, TrialState::kWaiting})
    by_state +=
        fmt::format("{}{} {}", by_state.empty() ? "" : ", ", s.tally.count(st), to_string(st));
  std::cout << fmt::format("Trials: {} ({}); finished {}{}\n", s.trials.size(), by_state,
                           s.tally.finished,
                           s.budget ? fmt::format(" of {}", *s.budget) : std::string());
  if (const auto& best = s.tally.best)
    std::cout << fmt::format("Best: trial {}, value {}\n", best->number,
                             format_value(*best->value));
  else
    std::cout << "Best: no COMPLETE trial yet\n";
  std::cout << "Coordinator: " << s.coordinator.line << "\n";
  print_workers(s);
}

}  // namespace

int status_command(const ReadOptions& o) {
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  StudyStatus s;
  s.info = storage->get_study(id);
  s.trials = storage->get_all_trials(id, {});
  s.tally = tally_trials(s.trials, s.info.direction);
  s.budget = budget_n_trials(s.info.config);
  s.coordinator = coordinator_status(*storage, id, s.info);
  if (o.format == "json")
    print_status_json(s);
  else
    print_status_text(s, o.storage);
  return kExitOk;
}

}  // namespace hps::cli
