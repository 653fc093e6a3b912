// hpsearch best | trials | studies: read a study without running it.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "algorithms/factory.h"
#include "algorithms/grid_sampler.h"
#include "algorithms/qmc_sampler.h"
#include "algorithms/study_setup.h"
#include "algorithms/tpe_sampler.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "search/pbt_options.h"
#include "search/printable.h"
#include "search/private_files.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/study_name.h"
#include "search/trial_lifecycle.h"
#include "search/util/storage_url.h"
#include "search/warm_start.h"
#include "search/writer_lock.h"

namespace hps::cli {

namespace {

// The store a space.json names (its study.storage, or "<name>.db"), or ""
// when `path` is not a readable space.json (at most 1 MiB is read).
std::string store_of_space_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) ||
      std::filesystem::file_size(path, ec) > (1u << 20))
    return "";
  try {
    return StudyConfig::from_file(path).storage;
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

std::shared_ptr<Storage> open_existing(const std::string& path) {
  // Read commands never create or change a store (an empty file stays
  // empty, a FIFO is not opened).
  util::StorageUrl url = util::parse_storage_url(path);
  if (url.in_memory) return open_storage(path);
  try {
    util::check_existing_store_file(url.path, "STORAGE");
  } catch (const ConfigError& e) {
    // A space.json given where its store belongs (`hpsearch status
    // space.json`): name the store it declares.
    const std::string store = store_of_space_file(url.path);
    if (store.empty()) throw;
    throw ConfigError("STORAGE", printable_excerpt(url.path) +
                                     " is a space.json, not a store: give its study's store, " +
                                     printable_excerpt(store) + " (study.storage)");
  }
  try {
    return open_storage(path);
  } catch (const StorageError&) {
    // SQLite reads a WAL-mode store through its WAL index (the -shm file),
    // which it makes beside the store when no one has it open: a folder
    // this user may not write fails that with "attempt to write a readonly
    // database" (or "unable to open database file").
    const std::string folder = unwritable_store_folder(url.path);
    if (folder.empty()) throw;
    throw StoreRefused(url.path + ": cannot be read by this user: its folder " + folder +
                       " is read-only for this user, and SQLite makes the store's WAL index "
                       "(its -shm file) beside it to read it; make the folder writable, run "
                       "the command as its owner, or copy the store to a folder you may write");
  }
}

// The study named, or the only study in the storage.
std::int64_t pick_study(Storage& storage, const std::optional<std::string>& name,
                        const std::string& path) {
  if (name) {
    auto id = storage.find_study(*name);
    if (!id)
      throw ConfigError("--study",
                        "no study named '" + printable_excerpt(*name) + "' in " + printable(path));
    return *id;
  }
  auto studies = storage.list_studies();
  if (studies.empty()) throw ConfigError(path, "the storage holds no study");
  if (studies.size() > 1) {
    std::vector<std::string> names;
    names.reserve(studies.size());
    for (const auto& s : studies) names.push_back(s.name);
    throw ConfigError(
        "--study", "the storage holds several studies (" + study_name_list(names) + "); name one");
  }
  return studies[0].study_id;
}

void print_error(std::string_view what) {
  std::cerr << "hpsearch: error: " << printable(what) << "\n";
}

std::string json_output(const Json& value) {
  return value.dump(2, ' ', true, Json::error_handler_t::replace);
}

std::string no_best_trial_yet(std::int64_t complete) {
  if (complete <= 0) return "no COMPLETE trial yet";
  return "no COMPLETE trial of its own yet (its " + std::to_string(complete) + " COMPLETE trial" +
         (complete == 1 ? " is a warm-start copy" : "s are warm-start copies") +
         " of an earlier study, never the best)";
}

namespace {

// The schedule of the best trial of a PBT study (search/pbt_options.h,
// kAttrPbt): the trials whose params trained its state, first to last, each
// with the step it started from: its pbt.donor back to a first trial
// (start step 0). Empty for a trial without the attr.
std::vector<TrialPtr> pbt_schedule(Storage& storage, std::int64_t study_id, const TrialPtr& best) {
  std::vector<TrialPtr> chain;
  if (!best->system_attrs.contains(kAttrPbt)) return chain;
  const std::vector<TrialPtr> all = storage.get_all_trials(study_id);
  TrialPtr t = best;
  while (t && chain.size() <= all.size()) {  // bounded: a store edited into a cycle ends
    chain.push_back(t);
    const Json& a = t->system_attrs.value(kAttrPbt, Json::object());
    const Json donor = a.is_object() ? a.value("donor", Json()) : Json();
    if (!donor.is_number_integer()) break;
    const auto n = donor.get<std::int64_t>();
    if (n < 0 || n >= static_cast<std::int64_t>(all.size()) ||
        all[static_cast<std::size_t>(n)]->number != n)
      break;
    t = all[static_cast<std::size_t>(n)];
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

std::int64_t pbt_start_step(const FrozenTrial& t) {
  const Json& a = t.system_attrs.value(kAttrPbt, Json::object());
  const Json s = a.is_object() ? a.value("start_step", Json()) : Json();
  return s.is_number_integer() ? s.get<std::int64_t>() : 0;
}

}  // namespace

int best_command(const ReadOptions& o) {
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  TrialPtr best = storage->best_trial(id);  // an indexed query, not a full load
  if (!best) {
    std::cerr << "hpsearch: study '" << printable_excerpt(storage->get_study(id).name) << "' has "
              << no_best_trial_yet(storage->count_trials_by_state(id).count(TrialState::kComplete))
              << "\n";
    return kExitFailure;
  }
  // PBT: the params by step that trained the best trial's state.
  const std::vector<TrialPtr> schedule = pbt_schedule(*storage, id, best);
  if (o.format == "json") {
    Json out = trial_to_json(*best);
    if (!schedule.empty()) {
      out["schedule"] = Json::array();
      for (const TrialPtr& s : schedule) {
        Json params = Json::object();
        for (const auto& [k, v] : s->params) params[k] = v;
        out["schedule"].push_back(
            {{"start_step", pbt_start_step(*s)}, {"trial", s->number}, {"params", params}});
      }
    }
    std::cout << json_output(out) << "\n";
    return kExitOk;
  }
  Table t({"field", "value"});
  t.add_row({"trial", std::to_string(best->number)});
  const bool csv = o.format == "csv";  // data: floats that read back exactly
  t.add_row({"value", format_value(*best->value, csv)});
  for (const auto& [k, v] : best->params)
    t.add_row({"param " + k, printable(format_param(v, csv))});
  for (const auto& [k, v] : best->user_attrs.items())
    t.add_row({"attr " + k, printable(format_param(v, csv))});
  for (const TrialPtr& s : schedule) {
    std::string params;
    for (const auto& [k, v] : s->params)
      params += (params.empty() ? "" : ", ") + k + "=" + printable(format_param(v, csv));
    t.add_row({"schedule from step " + std::to_string(pbt_start_step(*s)),
               "trial " + std::to_string(s->number) + ": " + params});
  }
  std::cout << (csv ? t.render_csv() : t.render());
  return kExitOk;
}

namespace {

// A flag's value as a whole number (parse_whole_number); ConfigError naming
// the flag otherwise.
std::int64_t parse_count_flag(const std::string& flag, const std::string& text) {
  std::string error;
  auto v = parse_whole_number<std::int64_t>(text, error);
  if (!v) throw ConfigError(flag, error);
  return *v;
}

// The trial query of `hpsearch trials`' flags; ConfigError naming the flag.
TrialQuery trials_query(const ReadOptions& o) {
  TrialQuery q;
  if (o.state) {
    std::string rest = *o.state;
    for (std::size_t start = 0; start <= rest.size();) {
      std::size_t comma = rest.find(',', start);
      std::string word = rest.substr(start, comma == std::string::npos ? comma : comma - start);
      auto s = parse_trial_state(word);
      if (!s)
        throw ConfigError("--state",
                          "must be WAITING, RUNNING, COMPLETE, PRUNED or FAIL (or "
                          "several, comma-separated), got '" +
                              word + "'");
      q.states.push_back(*s);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (o.limit) q.limit = parse_count_flag("--limit", *o.limit);
  if (o.since) q.since_number = parse_count_flag("--since", *o.since);
  if (o.sort == "value")
    q.order = TrialOrder::kValue;
  else if (o.sort != "number")
    throw ConfigError("--sort", "must be number or value, got '" + o.sort + "'");
  return q;
}

// Writes the trials as a JSON array, one trial at a time: the text of
// dump(2) of the whole array (the format trials always had).
void write_trials_json(Storage& storage, std::int64_t id, const TrialQuery& q) {
  bool first = true;
  storage.read_trials(id, q, [&](const TrialPtr& t) {
    std::string text = json_output(trial_to_json(*t));
    std::string indented = first ? "[\n  " : ",\n  ";
    indented.reserve(text.size() * 11 / 10 + 8);
    for (char c : text) {
      indented += c;
      if (c == '\n') indented += "  ";  // raw newlines occur only between tokens
    }
    std::cout << indented;
    first = false;
  });
  std::cout << (first ? "[]\n" : "\n]\n");
}

// The cells of one trial's row: the fixed columns, then by param and by
// user attr name, then worker and fail reason.
struct TrialCells {
  std::vector<std::string> head;  // number, state, value, duration_s
  std::map<std::string, std::string> params, attrs;
  std::vector<std::string> tail;  // worker, fail_reason (table: its first line)
  // Table: the fail reason's next lines (a traceback), each printable().
  std::vector<std::string> reason_lines;
};

// The cells of trial `t` for a text table, or for CSV (`csv`): a fail
// reason of several lines (a program's traceback) keeps its line breaks,
// as real ones inside the quoted CSV field (RFC 4180), and in a table as
// its first line in the row and the others in reason_lines, which
// write_trials_table prints under the row; every other control character
// stays escaped (printable_lines).
TrialCells trial_cells(const FrozenTrial& t, bool csv) {
  TrialCells c;
  // CSV is data: every float in the shortest form that reads back exactly.
  c.head = {std::to_string(t.number), to_string(t.state),
            t.value ? format_value(*t.value, csv) : "",
            t.duration_s() ? fmt::format("{:.3f}", *t.duration_s()) : ""};
  // Params and attrs alike: control characters (a newline) escaped.
  for (const auto& [k, v] : t.params) c.params[k] = printable(format_param(v, csv));
  // A queued trial (enqueued, or a retry) shows the params it will run with.
  if (t.state == TrialState::kWaiting && t.params.empty())
    for (const auto& [k, v] : lifecycle::fixed_params_of(t))
      c.params[k] = printable(format_param(v, csv));
  for (const auto& [k, v] : t.user_attrs.items()) c.attrs[k] = printable(format_param(v, csv));
  std::string reason = printable_lines(t.fail_reason, "");  // text from workers
  if (const std::size_t first_end = reason.find('\n'); !csv && first_end != std::string::npos) {
    for (std::size_t from = first_end + 1; from <= reason.size();) {
      const std::size_t to = std::min(reason.find('\n', from), reason.size());
      c.reason_lines.push_back(reason.substr(from, to - from));
      from = to + 1;
    }
    reason.erase(first_end);
  }
  c.tail = {printable(t.worker), std::move(reason)};
  return c;
}

// The columns of a trials table: the fixed ones, the params and user attrs
// seen (by name), worker, fail_reason; and each column's widest cell.
struct TrialColumns {
  std::vector<std::size_t> head_w, tail_w;
  std::map<std::string, std::size_t> params, attrs;  // name -> widest cell

  void add(const TrialCells& c) {
    auto widen = [](std::size_t& w, const std::string& cell) {
      w = std::max(w, display_width(cell));
    };
    head_w.resize(c.head.size());
    tail_w.resize(c.tail.size());
    for (std::size_t i = 0; i < c.head.size(); ++i) widen(head_w[i], c.head[i]);
    for (std::size_t i = 0; i < c.tail.size(); ++i) widen(tail_w[i], c.tail[i]);
    for (const auto& [k, v] : c.params) widen(params[k], v);
    for (const auto& [k, v] : c.attrs) widen(attrs[k], v);
  }
  std::vector<std::string> header() const {
    std::vector<std::string> h = {"number", "state", "value", "duration_s"};
    for (const auto& [n, w] : params) h.push_back(n);
    for (const auto& [a, w] : attrs) h.push_back("attr " + a);  // user attrs, after the params
    h.push_back("worker");
    h.push_back("fail_reason");
    return h;
  }
  std::vector<std::size_t> widths() const {
    std::vector<std::size_t> w = head_w;
    for (const auto& [n, width] : params) w.push_back(width);
    for (const auto& [a, width] : attrs) w.push_back(width);
    w.insert(w.end(), tail_w.begin(), tail_w.end());
    return w;
  }
  std::vector<std::string> row(const TrialCells& c) const {
    std::vector<std::string> r = c.head;
    for (const auto& [n, w] : params) {
      auto it = c.params.find(n);
      r.push_back(it == c.params.end() ? "" : it->second);
    }
    for (const auto& [a, w] : attrs) {
      auto it = c.attrs.find(a);
      r.push_back(it == c.attrs.end() ? "" : it->second);
    }
    r.insert(r.end(), c.tail.begin(), c.tail.end());
    return r;
  }
};

// Table and CSV: a first pass finds the columns and their widths, a second
// writes the rows as it reads them; each holds one batch of trials and one
// row at a time. (While a coordinator adds trials, the second pass may see
// trials the first did not: their rows are written, cells of new params
// left out, wider cells unpadded.)
void write_trials_table(Storage& storage, std::int64_t id, const TrialQuery& q, bool csv) {
  TrialColumns columns;
  storage.read_trials(id, q, [&](const TrialPtr& t) { columns.add(trial_cells(*t, csv)); });
  TableWriter writer(columns.header());
  if (csv) {
    std::cout << writer.csv_line(writer.header());
  } else {
    auto widths = columns.widths();  // empty when no trial was read
    for (std::size_t i = 0; i < widths.size(); ++i) writer.widen_to(i, widths[i]);
    std::cout << writer.header_lines();
  }
  // A fail reason's next lines, under the row, from the fail_reason column.
  const std::string reason_indent(writer.column_start(writer.header().size() - 1), ' ');
  storage.read_trials(id, q, [&](const TrialPtr& t) {
    const TrialCells cells = trial_cells(*t, csv);
    auto row = columns.row(cells);
    std::cout << (csv ? writer.csv_line(row) : writer.row_line(row));
    for (const std::string& line : cells.reason_lines) std::cout << reason_indent << line << '\n';
  });
}

}  // namespace

int trials_command(const ReadOptions& o) {
  if (o.format != "table" && o.format != "csv" && o.format != "json")
    throw ConfigError("--format", "must be table, csv or json, got '" + o.format + "'");
  TrialQuery q = trials_query(o);
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  if (o.format == "json")
    write_trials_json(*storage, id, q);
  else
    write_trials_table(*storage, id, q, o.format == "csv");
  std::cout.flush();
  return kExitOk;
}

int studies_command(const ReadOptions& o) {
  auto storage = open_existing(o.storage);
  Table table({"study", "direction", "trials", "complete", "best"});
  Json arr = Json::array();
  for (const auto& [info, counts] : storage->list_study_summaries()) {
    std::string best;
    std::optional<double> best_v;
    if (TrialPtr b = storage->best_trial(info.study_id)) {
      best_v = *b->value;
      best = format_value(*best_v);
    }
    std::int64_t complete = counts.count(TrialState::kComplete);
    table.add_row({info.name, to_string(info.direction), std::to_string(counts.total()),
                   std::to_string(complete), best});
    arr.push_back(Json{{"name", info.name},
                       {"direction", to_string(info.direction)},
                       {"n_trials", counts.total()},
                       {"n_complete", complete},
                       {"best_value", best_v ? Json(*best_v) : Json()}});
  }
  if (o.format == "json")
    std::cout << json_output(arr) << "\n";
  else
    std::cout << (o.format == "csv" ? table.render_csv() : table.render());
  return kExitOk;
}

namespace {

// The budget stored with the study (its config's "budget" section, the
// last run's --n-trials and --timeout included); none when it has no such
// section or the section breaks a rule (stored_settings_error says which).
Budget stored_budget(const Json& config) {
  if (!config.is_object() || !config.contains("budget")) return {};
  try {
    return Budget::from_json(config["budget"]);
  } catch (const ConfigError&) {
    return {};
  }
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
  // Multi-process trials waiting for idle workers (trial -> processes).
  std::map<std::int64_t, int> waiting_for_workers;
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
    if (same && coord.contains("waiting_for_workers") && coord["waiting_for_workers"].is_array())
      for (const Json& w : coord["waiting_for_workers"])
        if (w.is_object() && w.contains("trial") && w["trial"].is_number_integer() &&
            w.contains("processes") && w["processes"].is_number_integer())
          st.waiting_for_workers[w["trial"].get<std::int64_t>()] = w["processes"].get<int>();
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
  TrialCounts counts;             // by state, and finished (an indexed count)
  TrialPtr best;                  // lifecycle::best_trial's answer (an indexed query)
  std::vector<TrialPtr> running;  // the RUNNING trials
  Budget budget;                  // stored_budget: n_trials, timeout_s (a run's --timeout)
  std::string settings_error;     // stored_settings_error, "" when the settings are valid
  Json sampler;                   // sampler_settings
  // TPE's startup size in effect (startup_in_effect), when the settings are
  // valid and the sampler is TPE.
  std::optional<std::size_t> startup_trials;
  std::string startup_reason;  // how "auto" sized it: "5 for a budget of 40 trials"
  CoordinatorStatus coordinator;
};

// The study's sampler settings as a run of it uses them: TPE's, grid's and
// QMC's options with every default resolved (TpeOptions::to_json:
// "bandwidth": "auto", the multivariate defaults...; GridOptions::to_json,
// QmcOptions::to_json), random's stored "sampler" section ({"type":
// "random"} when the stored document has none, as a run); null when the
// study has no stored document (made through the C++ API), and {"error":
// why} when they cannot be shown (a store edited by hand: a sampler section
// a run refuses, a document that is not an object or does not parse at
// all), `why` naming the row and column, with its control characters
// escaped (printable()): status still answers.
Json sampler_settings(const StudyInfo& info) {
  if (info.config.is_null() && info.config_error.empty()) return Json();
  if (!info.config.is_object()) return Json{{"error", printable(stored_settings_error(info))}};
  Json section = sampler_section(info.config);
  try {
    auto sampler = make_sampler(section);
    if (const auto* tpe = dynamic_cast<const TpeSampler*>(sampler.get()))
      return tpe->options().to_json();
    const std::string type = section["type"].get<std::string>();  // make_sampler checked it
    if (type == "grid") return GridOptions::from_json(section).to_json();
    if (type == "qmc") return QmcOptions::from_json(section).to_json();
    return section;
  } catch (const std::exception& e) {
    return Json{{"error", printable(stored_settings_where(info) + e.what())}};
  }
}

// TPE's startup size for a run of study `s` (s.sampler and s.budget set):
// TpeOptions::startup_trials of the study's trial budget as run and resume
// tell it to the sampler (budget.n_trials and the warm-start copies, which
// count as COMPLETE trials), with how "auto" sized it in s.startup_reason.
// Nothing when the settings are not valid or the sampler is not TPE.
void startup_in_effect(StudyStatus& s) {
  if (!s.settings_error.empty() || !s.sampler.is_object() || s.sampler.value("type", "") != "tpe")
    return;
  const TpeOptions options = TpeOptions::from_json(sampler_section(s.info.config), "sampler");
  const std::int64_t copies = warm_start_copies(s.info);
  std::optional<std::int64_t> max_complete;
  if (s.budget.n_trials) max_complete = *s.budget.n_trials + copies;
  s.startup_trials = options.startup_trials(max_complete);
  if (!max_complete)
    s.startup_reason = fmt::format("{} without a trial budget", *s.startup_trials);
  else
    s.startup_reason = fmt::format(
        "{} for a budget of {} trial{}{}", *s.startup_trials, *s.budget.n_trials,
        *s.budget.n_trials == 1 ? "" : "s",
        copies == 0 ? std::string()
                    : fmt::format(" and {} warm-start cop{}", copies, copies == 1 ? "y" : "ies"));
}

// The study's pruner section as stored ({"type": "none"} when it has none,
// as a run), or null when the study has no stored settings or they are not
// valid (the Sampler line says so).
Json pruner_section(const StudyStatus& s) {
  if (!s.settings_error.empty() || !s.info.config.is_object()) return Json();
  const auto it = s.info.config.find("pruner");
  if (it == s.info.config.end() || !it->is_object()) return Json{{"type", "none"}};
  return *it;
}

// A setting as status shows it in a few words: strings bare, other JSON
// values as JSON (objects and arrays cut short).
std::string setting_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

// The sampler in a few words: its type and main settings ("TPE: seed 1,
// n_startup_trials auto (5 for a budget of 40 trials), multivariate, no
// constant liar"); every setting with status --verbose or --format json.
std::string sampler_summary(const StudyStatus& s) {
  const Json& sampler = s.sampler;
  const std::string type = sampler.value("type", std::string("?"));
  std::vector<std::string> parts;
  const auto add = [&](const char* key) {
    const auto it = sampler.find(key);
    if (it != sampler.end() && !it->is_null())
      parts.push_back(std::string(key) + " " + setting_text(*it));
  };
  if (type == "tpe") {
    add("seed");
    if (sampler.value("n_startup_trials", Json()) == "auto" && s.startup_trials)
      parts.push_back("n_startup_trials auto (" + s.startup_reason + ")");
    else
      add("n_startup_trials");
    parts.push_back(sampler.value("multivariate", false) ? "multivariate" : "univariate");
    if (sampler.value("constant_liar", false)) parts.push_back("constant liar");
  } else if (type == "qmc") {
    add("sequence");
    add("scramble");
    add("seed");
  } else if (type == "grid") {
    add("seed");
    add("max_points");
  } else {
    add("seed");
  }
  std::string name = type == "tpe" ? "TPE" : type == "qmc" ? "QMC" : type;
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : ", ") + p;
  return text.empty() ? name : name + ": " + text;
}

// The pruner in a few words: its type, the settings the study gives it
// (the others are the defaults: docs/concepts/pruners.md) and how many
// trials it pruned ("median: n_startup_trials 4, n_warmup_steps 2; pruned
// 3 trials").
std::string pruner_summary(const StudyStatus& s, const Json& pruner) {
  const std::string type = pruner.value("type", std::string("none"));
  std::string text;
  for (const auto& [key, value] : pruner.items())
    if (key != "type") text += (text.empty() ? "" : ", ") + key + " " + setting_text(value);
  const std::int64_t pruned = s.counts.count(TrialState::kPruned);
  if (type == "none") return "none (no trial is pruned)";
  return type + (text.empty() ? " (default settings)" : ": " + text) +
         fmt::format("; pruned {} trial{}", pruned, pruned == 1 ? "" : "s");
}

void print_status_json(const StudyStatus& s) {
  const auto& holder = s.coordinator.lock.holder;
  Json out;
  out["study"] = s.info.name;
  out["direction"] = to_string(s.info.direction);
  out["counts"] = Json::object();
  for (TrialState st : {TrialState::kWaiting, TrialState::kRunning, TrialState::kComplete,
                        TrialState::kPruned, TrialState::kFail})
    out["counts"][to_string(st)] = s.counts.count(st);
  out["finished"] = s.counts.finished;
  out["n_trials"] = s.budget.n_trials ? Json(*s.budget.n_trials) : Json();
  out["timeout_s"] = s.budget.timeout_s ? Json(*s.budget.timeout_s) : Json();
  out["best"] = s.best ? trial_to_json(*s.best) : Json();
  out["sampler"] = s.sampler;
  out["startup_trials_in_effect"] = s.startup_trials ? Json(*s.startup_trials) : Json();
  out["pruner"] = pruner_section(s);
  out["pruned"] = s.counts.count(TrialState::kPruned);
  out["settings_error"] = s.settings_error.empty() ? Json() : Json(printable(s.settings_error));
  out["coordinator"] = s.coordinator.attr;
  out["coordinator_running"] = holder                     ? Json(true)
                               : s.coordinator.lock.asked ? Json(false)
                                                          : Json();
  if (holder)
    out["writer_lock"] = Json{{"host", holder->host},
                              {"pid", holder->pid},
                              {"since", holder->since},
                              {"endpoint", holder->endpoint}};
  std::cout << json_output(out) << "\n";
}

// One row of the workers table. Its trial comes from the store, like the
// RUNNING list below it: the RUNNING trial recorded with this worker's name
// (taken out of `running`), the one the coordinator's record names if the
// store has several, with how long it runs and its last report; "idle" when
// the store has none. The record itself is rewritten at most once per
// status_interval_s (1 s), while every trial is committed as it starts and
// ends: its trial numbers would lag the store's during a fast run (a worker
// shown idle that the RUNNING list shows with a trial). Which workers are
// connected still comes from the record: one that connected since its last
// write is missing from the table, and its trial is in the RUNNING list.
// A rank of a multi-process trial ("rank" in the record) shows the trial
// with its rank; the store names rank 0's worker, so a rank > 0 takes its
// trial from the record.
std::vector<std::string> worker_row(const Json& w, std::map<std::int64_t, TrialPtr>& running,
                                    const std::map<std::int64_t, TrialPtr>& all_running) {
  const std::string name = w.value("name", "?");
  std::optional<std::int64_t> recorded;
  if (w.contains("trial") && w["trial"].is_number_integer())
    recorded = w["trial"].get<std::int64_t>();
  std::optional<int> rank;
  if (w.contains("rank") && w["rank"].is_number_integer()) rank = w["rank"].get<int>();
  auto mine = running.end();
  for (auto it = running.begin(); it != running.end(); ++it) {
    if (it->second->worker != name) continue;
    if (mine == running.end() || it->first == recorded) mine = it;
  }
  std::string trial = "idle", since, last;
  if (rank && *rank > 0 && recorded) {
    trial = std::to_string(*recorded) + " (rank " + std::to_string(*rank) + ")";
    if (auto it = all_running.find(*recorded); it != all_running.end()) {
      const FrozenTrial& t = *it->second;
      if (t.datetime_start)
        since = format_duration(
            std::chrono::duration<double>(Clock::now() - *t.datetime_start).count());
    }
  } else if (mine != running.end()) {
    const FrozenTrial& t = *mine->second;
    trial = std::to_string(mine->first) + (rank ? " (rank " + std::to_string(*rank) + ")" : "");
    if (t.datetime_start)
      since =
          format_duration(std::chrono::duration<double>(Clock::now() - *t.datetime_start).count());
    if (auto li = t.last_intermediate())
      last = fmt::format("step {}: {}", li->first, format_value(li->second));
    running.erase(mine);
  }
  // Trials waiting on the worker for this one to end (prefetch).
  std::string next;
  if (w.contains("prefetched") && w["prefetched"].is_array())
    for (const auto& n : w["prefetched"]) {
      if (!n.is_number_integer()) continue;
      auto it = running.find(n.get<std::int64_t>());
      if (it == running.end() || it->second->worker != name) continue;
      next += (next.empty() ? "" : ", ") + std::to_string(it->first);
      running.erase(it);
    }
  if (!next.empty()) trial += " (next: " + next + ")";
  // Its CUDA_VISIBLE_DEVICES as the worker reported it (local pools set it
  // per worker; Slurm per task); "-" when unset (a record of an older
  // coordinator has none).
  std::string gpus = "-";
  if (w.contains("gpus") && w["gpus"].is_string() && !w["gpus"].get<std::string>().empty())
    gpus = printable(w["gpus"].get<std::string>());
  return {printable(name),
          printable(w.value("host", "?")),
          std::to_string(w.value("pid", std::int64_t{0})),
          printable(w.value("device", "?")),
          gpus,
          trial,
          since,
          last};
}

// What each worker runs now: the coordinator's workers table, their trials
// from the store's RUNNING trials; then the RUNNING trials no listed worker
// runs.
void print_workers(const StudyStatus& s) {
  std::map<std::int64_t, TrialPtr> running;
  for (const auto& t : s.running) running[t->number] = t;
  const std::map<std::int64_t, TrialPtr> all_running = running;
  // A multi-process trial that waits for idle workers runs on none yet.
  for (const auto& [n, processes] : s.coordinator.waiting_for_workers) {
    running.erase(n);
    std::cout << "\nTrial " << n << " waits for " << processes
              << " idle workers (resources.processes)\n";
  }
  const Json& workers = s.coordinator.workers;
  if (!workers.empty()) {
    Table table({"worker", "host", "pid", "device", "GPUs", "trial", "running for", "last report"});
    for (const auto& w : workers) table.add_row(worker_row(w, running, all_running));
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

// `verbose`: every sampler setting (the TPE internals), as one JSON line.
void print_status_text(const StudyStatus& s, const std::string& storage_name, bool verbose) {
  std::cout << fmt::format("Study '{}' ({}) in {}\n", printable_excerpt(s.info.name),
                           to_string(s.info.direction), printable(storage_name));
  std::string by_state;
  for (TrialState st : {TrialState::kComplete, TrialState::kPruned, TrialState::kFail,
                        TrialState::kRunning, TrialState::kWaiting})
    by_state +=
        fmt::format("{}{} {}", by_state.empty() ? "" : ", ", s.counts.count(st), to_string(st));
  std::cout << fmt::format(
      "Trials: {} ({}); finished {}{}{}\n", s.counts.total(), by_state, s.counts.finished,
      s.budget.n_trials ? fmt::format(" of {}", *s.budget.n_trials) : std::string(),
      s.budget.timeout_s
          ? fmt::format("; timeout {} a run", format_set_seconds(*s.budget.timeout_s))
          : std::string());
  if (const auto& best = s.best)
    std::cout << fmt::format("Best: trial {}, value {}\n", best->number,
                             format_value(*best->value));
  else
    std::cout << "Best: " << no_best_trial_yet(s.counts.count(TrialState::kComplete)) << "\n";
  const std::string not_valid = "the stored settings are not valid: ";
  Json sampler = s.sampler;
  if (sampler.contains("error")) {
    std::cout << "Sampler: " << not_valid << printable(sampler["error"].get<std::string>()) << "\n";
  } else if (!sampler.is_null()) {
    std::cout << "Sampler: " << printable(sampler_summary(s)) << "\n";
    if (const Json pruner = pruner_section(s); !pruner.is_null())
      std::cout << "Pruner: " << printable(pruner_summary(s, pruner)) << "\n";
    if (verbose) {
      if (sampler.value("n_startup_trials", Json()) == "auto" && s.startup_trials)
        sampler["n_startup_trials"] = "auto (" + s.startup_reason + ")";
      std::cout << "Sampler settings: "
                << printable(sampler.dump(-1, ' ', false, Json::error_handler_t::replace)) << "\n";
    }
  }
  // The rule the stored settings break, unless the sampler line said it.
  if (const std::string why = printable(s.settings_error);
      !why.empty() && !(sampler.contains("error") && sampler["error"] == why))
    std::cout << "Settings: " << not_valid << why << "\n";
  std::cout << "Coordinator: " << s.coordinator.line << "\n";
  print_workers(s);
}

}  // namespace

int status_command(const ReadOptions& o) {
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  StudyStatus s;
  s.info = storage->get_study(id);
  // Indexed queries: status never loads the history.
  s.counts = storage->count_trials_by_state(id);
  s.best = storage->best_trial(id);
  TrialQuery running;
  running.states = {TrialState::kRunning};
  storage->read_trials(id, running, [&](const TrialPtr& t) { s.running.push_back(t); });
  s.budget = stored_budget(s.info.config);
  s.settings_error = stored_settings_error(s.info);
  s.sampler = sampler_settings(s.info);
  startup_in_effect(s);
  s.coordinator = coordinator_status(*storage, id, s.info);
  if (o.format == "json")
    print_status_json(s);
  else
    print_status_text(s, o.storage, o.verbose);
  return kExitOk;
}

}  // namespace hps::cli
