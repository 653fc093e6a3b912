// hpsearch best | trials | studies: read a study without running it.
#include <filesystem>
#include <iostream>
#include <set>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/table.h"
#include "search/storage.h"
#include "search/study.h"

namespace hps::cli {

namespace {

std::shared_ptr<Storage> open_existing(const std::string& path) {
  if (path != ":memory:" && !std::filesystem::exists(path))
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
    row.push_back(t->worker);
    row.push_back(t->fail_reason);
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
  if (o.format == "json") std::cout << arr.dump(2) << "\n";
  else std::cout << (o.format == "csv" ? table.render_csv() : table.render());
  return kExitOk;
}

}  // namespace hps::cli
