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
#include "search/util/storage_url.h"
#include "search/writer_lock.h"

namespace hps::cli {

namespace {

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

}  // namespace

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
  std::set<std::string> names;
  for (const auto& t : trials)
    for (const auto& [k, v] : t->params) names.insert(k);
  std::vector<std::string> header = {"number", "state", "value", "duration_s"};
  for (const auto& n : names) header.push_back(n);
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

int status_command(const ReadOptions& o) {
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  StudyInfo info = storage->get_study(id);
  auto trials = storage->get_all_trials(id, {});
  std::map<TrialState, std::int64_t> counts;
  std::int64_t finished = 0;
  TrialPtr best;
  const bool maximize = info.direction == StudyDirection::kMaximize;
  for (const auto& t : trials) {
    counts[t->state]++;
    if (t->counts_as_finished()) ++finished;
    if (t->state == TrialState::kComplete && t->value && !std::isnan(*t->value) &&
        (!best || (maximize ? *t->value > *best->value : *t->value < *best->value)))
      best = t;
  }
  std::optional<std::int64_t> budget;
  if (info.config.is_object() && info.config.contains("budget") &&
      info.config["budget"].is_object()) {
    const Json& b = info.config["budget"];
    if (b.contains("n_trials") && b["n_trials"].is_number_integer())
      budget = b["n_trials"].get<std::int64_t>();
  }
  Json coord = info.system_attrs.value("coordinator", Json());
  double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  // Whether a coordinator runs the study: its writer lock says so
  // (search/writer_lock.h); the "coordinator" attr only describes the last
  // one. A store without a lock file was never locked: no coordinator of
  // this version runs it.
  std::optional<WriterLockHolder> holder;
  bool lock_asked = false;
  std::string lock_note;
  if (std::string file = storage_file(*storage); !file.empty()) {
    try {
      holder = WriterLock::query(file, id);
      lock_asked = true;
    } catch (const Error& e) {
      lock_note = fmt::format(" (cannot ask the writer lock: {})", e.what());
    }
  }
  std::string coord_line;
  Json workers = Json::array();
  if (holder) {
    bool same = coord.is_object() && coord.value("pid", std::int64_t{0}) == holder->pid &&
                coord.value("host", std::string()) == holder->host;
    double age = same ? now - coord.value("updated", 0.0) : 0.0;
    coord_line = fmt::format(
        "running ({}{})", holder->describe(),
        same ? fmt::format("; status updated {} ago", format_duration(age)) : std::string());
    if (same && coord.contains("workers") && coord["workers"].is_array())
      workers = coord["workers"];
  } else if (!coord.is_object()) {
    coord_line = "never run by a coordinator";
  } else {
    double age = now - coord.value("updated", 0.0);
    std::string where =
        fmt::format("{}:{} at {}", coord.value("host", "?"), coord.value("pid", std::int64_t{0}),
                    coord.value("endpoint", "?"));
    if (!coord.value("running", false)) {
      coord_line =
          fmt::format("not running (last run by {}, {}; {} ago)", where,
                      coord.value("done_reason", std::string("ended")), format_duration(age));
    } else if (lock_asked) {
      coord_line = fmt::format(
          "not running (the coordinator {} ended without recording its end, e.g. killed, "
          "last update {} ago; hpsearch resume continues the study)",
          where, format_duration(age));
    } else {
      coord_line = fmt::format("unknown: last update by {} {} ago{}", where, format_duration(age),
                               lock_note);
    }
  }
  if (o.format == "json") {
    Json out;
    out["study"] = info.name;
    out["direction"] = to_string(info.direction);
    out["counts"] = Json::object();
    for (TrialState st : {TrialState::kWaiting, TrialState::kRunning, TrialState::kComplete,
                          TrialState::kPruned, TrialState::kFail})
      out["counts"][to_string(st)] = counts[st];
    out["finished"] = finished;
    out["n_trials"] = budget ? Json(*budget) : Json();
    out["best"] = best ? trial_to_json(*best) : Json();
    out["coordinator"] = coord;
    out["coordinator_running"] = holder ? Json(true) : lock_asked ? Json(false) : Json();
    if (holder)
      out["writer_lock"] = Json{{"host", holder->host},
                                {"pid", holder->pid},
                                {"since", holder->since},
                                {"endpoint", holder->endpoint}};
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << fmt::format("Study '{}' ({}) in {}\n", info.name, to_string(info.direction),
                           o.storage);
  std::string by_state;
  for (TrialState st : {TrialState::kComplete, TrialState::kPruned, TrialState::kFail,
                        TrialState::kRunning, TrialState::kWaiting})
    by_state += fmt::format("{}{} {}", by_state.empty() ? "" : ", ", counts[st], to_string(st));
  std::cout << fmt::format("Trials: {} ({}); finished {}{}\n", trials.size(), by_state, finished,
                           budget ? fmt::format(" of {}", *budget) : std::string());
  if (best)
    std::cout << fmt::format("Best: trial {}, value {}\n", best->number,
                             format_value(*best->value));
  else
    std::cout << "Best: no COMPLETE trial yet\n";
  std::cout << "Coordinator: " << coord_line << "\n";
  // What each worker runs now: the coordinator's workers table, with the
  // RUNNING trials of the store.
  std::map<std::int64_t, TrialPtr> running;
  for (const auto& t : trials)
    if (t->state == TrialState::kRunning) running[t->number] = t;
  if (!workers.empty()) {
    Table table({"worker", "host", "pid", "device", "trial", "running for", "last report"});
    for (const auto& w : workers) {
      std::string trial = "idle", since, last;
      if (w.contains("trial") && w["trial"].is_number_integer()) {
        std::int64_t n = w["trial"].get<std::int64_t>();
        trial = std::to_string(n);
        auto it = running.find(n);
        if (it != running.end()) {
          const FrozenTrial& t = *it->second;
          if (t.datetime_start)
            since = format_duration(
                std::chrono::duration<double>(Clock::now() - *t.datetime_start).count());
          if (auto li = t.last_intermediate())
            last = fmt::format("step {}: {}", li->first, format_value(li->second));
          running.erase(it);
        }
      }
      table.add_row({printable(w.value("name", "?")), printable(w.value("host", "?")),
                     std::to_string(w.value("pid", std::int64_t{0})),
                     printable(w.value("device", "?")), trial, since, last});
    }
    std::cout << "\nWorkers (" << workers.size() << "):\n" << table.render();
  }
  if (!running.empty()) {
    Table table({"RUNNING trial", "worker", "started"});
    for (const auto& [n, t] : running)
      table.add_row({std::to_string(n), printable(t->worker),
                     t->datetime_start ? format_iso8601(*t->datetime_start) : ""});
    std::cout << "\n" << table.render();
  }
  return kExitOk;
}

}  // namespace hps::cli
