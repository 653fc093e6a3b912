// Optuna's RDB schema: export and import (see optuna_rdb.h).
#include "search/sqlite/optuna_rdb.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <system_error>
#include <vector>

#include "search/json_util.h"
#include "search/printable.h"
#include "search/private_files.h"
#include "search/search_space.h"
#include "search/sqlite/statement.h"
#include "search/study_name.h"
#include "search/writer_lock.h"

namespace hps::sqlite {
namespace {

namespace fs = std::filesystem;

constexpr const char* kConfigAttr = "hpsearch:config";
constexpr const char* kWorkerAttr = "hpsearch:worker";
constexpr const char* kFailReasonAttr = "hpsearch:fail_reason";
constexpr const char* kOrdinalAttr = "hpsearch:ordinal";  // names of the ordinal params

// The DDL of Optuna 3.1's tables (models.py as SQLAlchemy creates them on
// SQLite), but for the three untyped float value columns (see the header).
constexpr const char* kOptunaSchema = R"sql(
CREATE TABLE studies (
  study_id INTEGER NOT NULL,
  study_name VARCHAR(512) NOT NULL,
  PRIMARY KEY (study_id)
);
CREATE UNIQUE INDEX ix_studies_study_name ON studies (study_name);
CREATE TABLE version_info (
  version_info_id INTEGER NOT NULL,
  schema_version INTEGER,
  library_version VARCHAR(256),
  PRIMARY KEY (version_info_id),
  CHECK (version_info_id=1)
);
CREATE TABLE study_directions (
  study_direction_id INTEGER NOT NULL,
  direction VARCHAR(8) NOT NULL,
  study_id INTEGER NOT NULL,
  objective INTEGER NOT NULL,
  PRIMARY KEY (study_direction_id),
  UNIQUE (study_id, objective),
  FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE study_user_attributes (
  study_user_attribute_id INTEGER NOT NULL,
  study_id INTEGER,
  "key" VARCHAR(512),
  value_json TEXT,
  PRIMARY KEY (study_user_attribute_id),
  UNIQUE (study_id, "key"),
  FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE study_system_attributes (
  study_system_attribute_id INTEGER NOT NULL,
  study_id INTEGER,
  "key" VARCHAR(512),
  value_json TEXT,
  PRIMARY KEY (study_system_attribute_id),
  UNIQUE (study_id, "key"),
  FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE trials (
  trial_id INTEGER NOT NULL,
  number INTEGER,
  study_id INTEGER,
  state VARCHAR(8) NOT NULL,
  datetime_start DATETIME,
  datetime_complete DATETIME,
  PRIMARY KEY (trial_id),
  FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE trial_user_attributes (
  trial_user_attribute_id INTEGER NOT NULL,
  trial_id INTEGER,
  "key" VARCHAR(512),
  value_json TEXT,
  PRIMARY KEY (trial_user_attribute_id),
  UNIQUE (trial_id, "key"),
  FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_system_attributes (
  trial_system_attribute_id INTEGER NOT NULL,
  trial_id INTEGER,
  "key" VARCHAR(512),
  value_json TEXT,
  PRIMARY KEY (trial_system_attribute_id),
  UNIQUE (trial_id, "key"),
  FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_params (
  param_id INTEGER NOT NULL,
  trial_id INTEGER,
  param_name VARCHAR(512),
  param_value,
  distribution_json TEXT,
  PRIMARY KEY (param_id),
  UNIQUE (trial_id, param_name),
  FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_values (
  trial_value_id INTEGER NOT NULL,
  trial_id INTEGER NOT NULL,
  objective INTEGER NOT NULL,
  value,
  value_type VARCHAR(7) NOT NULL,
  PRIMARY KEY (trial_value_id),
  UNIQUE (trial_id, objective),
  FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_intermediate_values (
  trial_intermediate_value_id INTEGER NOT NULL,
  trial_id INTEGER NOT NULL,
  step INTEGER NOT NULL,
  intermediate_value,
  intermediate_value_type VARCHAR(7) NOT NULL,
  PRIMARY KEY (trial_intermediate_value_id),
  UNIQUE (trial_id, step),
  FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_heartbeats (
  trial_heartbeat_id INTEGER NOT NULL,
  trial_id INTEGER NOT NULL,
  heartbeat DATETIME NOT NULL,
  PRIMARY KEY (trial_heartbeat_id),
  UNIQUE (trial_id),
  FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE alembic_version (
  version_num VARCHAR(32) NOT NULL,
  CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
)sql";

// A sqlite3 handle closed on scope exit.
class Db {
 public:
  Db(const std::string& path, int flags) {
    int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
    if (rc != SQLITE_OK) {
      std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
      sqlite3_close(db_);
      db_ = nullptr;
      throw StorageError(path + ": cannot open: " + msg);
    }
  }
  ~Db() { sqlite3_close(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  sqlite3* get() const { return db_; }
  void exec(const char* sql, const std::string& path) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      throw StorageError(path + ": " + msg);
    }
  }

 private:
  sqlite3* db_ = nullptr;
};

const char* state_name(TrialState s) { return to_string(s); }  // same names as Optuna

std::string format_datetime(TimePoint t) {
  // format_iso8601 gives "YYYY-MM-DDTHH:MM:SS.ffffffZ"; SQLAlchemy's SQLite
  // DATETIME is "YYYY-MM-DD HH:MM:SS.ffffff".
  std::string s = format_iso8601(t);
  s[10] = ' ';
  s.pop_back();
  return s;
}

std::optional<TimePoint> parse_datetime(const std::string& text, const std::string& where) {
  int y, mo, d, h, mi, sec;
  char frac[16] = {0};
  int n = std::sscanf(text.c_str(), "%4d-%2d-%2d%*1[ T]%2d:%2d:%2d.%9[0-9]", &y, &mo, &d, &h, &mi,
                      &sec, frac);
  if (n < 6) throw ConfigError(where, "cannot read the time '" + printable_excerpt(text) + "'");
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  std::int64_t us = 0;
  if (n == 7) {
    std::string f = std::string(frac).substr(0, 6);
    f.resize(6, '0');
    us = std::stoll(f);
  }
  const std::int64_t secs = timegm(&tm);
  return TimePoint(
      std::chrono::duration_cast<Clock::duration>(std::chrono::microseconds(secs * 1000000 + us)));
}

// Optuna's distribution_json of `d`.
Json optuna_distribution(const Distribution& d) {
  switch (d.kind()) {
    case DistributionKind::kFloat:
      return {{"name", "FloatDistribution"},
              {"attributes",
               {{"low", d.low()},
                {"high", d.high()},
                {"log", d.is_log()},
                {"step", d.step() > 0 ? Json(d.step()) : Json()}}}};
    case DistributionKind::kInt:
      return {{"name", "IntDistribution"},
              {"attributes",
               {{"low", static_cast<std::int64_t>(d.low())},
                {"high", static_cast<std::int64_t>(d.high())},
                {"log", d.is_log()},
                {"step", static_cast<std::int64_t>(d.step() > 0 ? d.step() : 1)}}}};
    case DistributionKind::kCategorical:
    case DistributionKind::kOrdinal:
      return {{"name", "CategoricalDistribution"}, {"attributes", {{"choices", d.choices()}}}};
  }
  return Json();
}

void bind_float_or_null(Statement& st, int i, double v) {
  if (std::isfinite(v))
    st.bind(i, v);
  else
    st.bind_null(i);
}

const char* value_type(double v) {
  if (std::isnan(v)) return "NAN";
  if (std::isinf(v)) return v > 0 ? "INF_POS" : "INF_NEG";
  return "FINITE";
}

void insert_attrs(sqlite3* db, const char* table, const char* id_col, std::int64_t id,
                  const Json& attrs) {
  Statement st(db, std::string("INSERT INTO ") + table + " (" + id_col +
                       ", \"key\", value_json) VALUES (?1, ?2, ?3)");
  for (const auto& [k, v] : attrs.items()) {
    st.bind(1, id);
    st.bind(2, k);
    st.bind(3, dump_json_nonfinite(v));
    st.step();
    st.reset();
  }
}

}  // namespace

namespace {

void bind_opt_time(Statement& st, int i, const std::optional<TimePoint>& t) {
  if (t)
    st.bind(i, format_datetime(*t));
  else
    st.bind_null(i);
}

// The distribution of a param as Optuna needs one: the trial's, else the
// study space's. Throws StorageError naming the trial and param.
const Distribution& param_distribution(const FrozenTrial& t, const std::string& name,
                                       const std::optional<SearchSpace>& space) {
  if (auto it = t.distributions.find(name); it != t.distributions.end()) return it->second;
  if (space)
    if (const ParamSpec* spec = space->find(name)) return spec->distribution;
  throw StorageError("trial " + std::to_string(t.number) + " param '" + printable_excerpt(name) +
                     "': no distribution stored (Optuna needs one per param)");
}

// The trial's system attrs with hpsearch's own fields (worker, fail reason,
// which params are ordinals) added under "hpsearch:" keys.
Json export_system_attrs(const FrozenTrial& t) {
  Json sys = t.system_attrs;
  if (!t.worker.empty()) sys[kWorkerAttr] = t.worker;
  if (!t.fail_reason.empty()) sys[kFailReasonAttr] = t.fail_reason;
  Json ordinals = Json::array();
  for (const auto& [name, d] : t.distributions)
    if (d.kind() == DistributionKind::kOrdinal && t.params.count(name)) ordinals.push_back(name);
  if (!ordinals.empty()) sys[kOrdinalAttr] = ordinals;
  return sys;
}

// Writes one study into a new Optuna file, one table at a time.
class OptunaWriter {
 public:
  explicit OptunaWriter(sqlite3* db)
      : db_(db),
        trial_(db,
               "INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete) "
               "VALUES (?1, 1, ?2, ?3, ?4)"),
        value_(db,
               "INSERT INTO trial_values (trial_id, objective, value, value_type) "
               "VALUES (?1, 0, ?2, ?3)"),
        inter_(db,
               "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, "
               "intermediate_value_type) VALUES (?1, ?2, ?3, ?4)"),
        param_(db,
               "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) "
               "VALUES (?1, ?2, ?3, ?4)") {}

  void study(const StudyInfo& info) {
    Statement st(db_,
                 "INSERT INTO version_info (version_info_id, schema_version, library_version) "
                 "VALUES (1, ?1, ?2)");
    st.bind(1, kOptunaSchemaVersion);
    st.bind(2, kOptunaLibraryVersion);
    st.step();
    Statement av(db_, "INSERT INTO alembic_version (version_num) VALUES (?1)");
    av.bind(1, kOptunaAlembicRevision);
    av.step();
    Statement s(db_, "INSERT INTO studies (study_id, study_name) VALUES (1, ?1)");
    s.bind(1, info.name);
    s.step();
    Statement dir(
        db_, "INSERT INTO study_directions (direction, study_id, objective) VALUES (?1, 1, 0)");
    dir.bind(1, info.direction == StudyDirection::kMaximize ? "MAXIMIZE" : "MINIMIZE");
    dir.step();
    insert_attrs(db_, "study_user_attributes", "study_id", 1, info.user_attrs);
    Json sys = info.system_attrs;
    if (!info.config.is_null()) sys[kConfigAttr] = info.config;
    insert_attrs(db_, "study_system_attributes", "study_id", 1, sys);
  }

  void trial(const FrozenTrial& t, const std::optional<SearchSpace>& space) {
    trial_.bind(1, t.number);
    trial_.bind(2, state_name(t.state));
    bind_opt_time(trial_, 3, t.datetime_start);
    bind_opt_time(trial_, 4, t.datetime_complete);
    trial_.step();
    trial_.reset();
    const std::int64_t id = sqlite3_last_insert_rowid(db_);
    if (t.value) {
      value_.bind(1, id);
      bind_float_or_null(value_, 2, *t.value);
      value_.bind(3, value_type(*t.value));
      value_.step();
      value_.reset();
    }
    for (const auto& [step, v] : t.intermediate_values) {
      inter_.bind(1, id);
      inter_.bind(2, step);
      bind_float_or_null(inter_, 3, v);
      inter_.bind(4, value_type(v));
      inter_.step();
      inter_.reset();
    }
    for (const auto& [name, value] : t.params) param(t, id, name, value, space);
    insert_attrs(db_, "trial_user_attributes", "trial_id", id, t.user_attrs);
    insert_attrs(db_, "trial_system_attributes", "trial_id", id, export_system_attrs(t));
  }

 private:
  void param(const FrozenTrial& t, std::int64_t id, const std::string& name, const Json& value,
             const std::optional<SearchSpace>& space) {
    const Distribution& d = param_distribution(t, name, space);
    double internal = 0;
    try {
      internal = d.to_internal(value);
    } catch (const Error& e) {
      throw StorageError("trial " + std::to_string(t.number) + " param '" +
                         printable_excerpt(name) + "': " + e.what());
    }
    param_.bind(1, id);
    param_.bind(2, name);
    param_.bind(3, internal);
    param_.bind(4, optuna_distribution(d).dump());
    param_.step();
    param_.reset();
  }

  sqlite3* db_;
  Statement trial_, value_, inter_, param_;
};

std::optional<SearchSpace> study_space(const Json& config) {
  if (!config.is_object() || !config.contains("space")) return std::nullopt;
  try {
    return SearchSpace::from_json(config["space"]);
  } catch (const Error&) {
    return std::nullopt;  // only a fallback for params stored without a distribution
  }
}

}  // namespace

void export_optuna(Storage& storage, std::int64_t study_id, const std::string& path, bool force) {
  std::error_code ec;
  if (path.empty()) throw ConfigError("-o", "must name a file");
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw ConfigError("-o", "'" + parent.string() + "' is not a folder that exists");
  if (fs::exists(path, ec)) {
    // Never the store itself, even with --force: that would replace the
    // study with its export.
    const std::string source = storage_file(storage);
    if (!source.empty() && fs::equivalent(path, source, ec))
      throw ConfigError(
          "-o", "'" + path + "' is the study's own storage; write the export to another file");
    if (fs::is_directory(path, ec))
      throw ConfigError("-o", "'" + path + "' is a directory; name a file");
    if (!force) throw ConfigError("-o", "'" + path + "' exists; pass --force to replace it");
  }
  StudyInfo info = storage.get_study(study_id);
  // The export carries the study's settings: a study whose stored ones
  // cannot be read (a store edited by hand) is refused, not exported
  // without them.
  if (!info.config_error.empty())
    throw StoreRefused("study '" + printable_excerpt(info.name) +
                       "': its stored settings cannot be read (" + info.config_error +
                       "); nothing was exported");
  auto trials = storage.get_all_trials(study_id);
  const std::optional<SearchSpace> space = study_space(info.config);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  fs::remove(tmp, ec);
  try {
    // Owner-only, as the store (search/private_files.h): the export holds
    // the study's space.json, a command objective's env included.
    try {
      create_private_file(tmp);
    } catch (const Error& e) {
      throw ConfigError("-o", e.what());
    }
    {
      Db db(tmp, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
      db.exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; BEGIN;", tmp);
      db.exec(kOptunaSchema, tmp);
      OptunaWriter writer(db.get());
      writer.study(info);
      for (const auto& t : trials) writer.trial(*t, space);
      db.exec("COMMIT", tmp);
    }
    fs::rename(tmp, path);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

namespace {

// Reads the study of an Optuna file into memory, checked.
struct OptunaStudy {
  StudyDirection direction = StudyDirection::kMinimize;
  Json config;
  Json user_attrs = Json::object();
  Json system_attrs = Json::object();
  std::vector<NewTrial> trials;
};

Json parse_attr(const std::string& text, const std::string& where) {
  try {
    if (json_too_deep_at(text) != std::string_view::npos) throw ConfigError(where, "too deep");
    return parse_json_nonfinite(text);
  } catch (const Json::exception& e) {
    throw ConfigError(where, std::string("invalid JSON: ") + e.what());
  }
}

Json read_attrs(sqlite3* db, const char* table, const char* id_col, std::int64_t id,
                const std::string& where) {
  Statement st(db, std::string("SELECT \"key\", value_json FROM ") + table + " WHERE " + id_col +
                       " = ?1 ORDER BY \"key\"");
  st.bind(1, id);
  Json out = Json::object();
  while (st.step()) {
    std::string key = st.text(0);
    std::string at = where;
    at.append(" attr '").append(key).append("'");
    out[key] = parse_attr(st.text(1), at);
  }
  return out;
}

double read_float(Statement& st, int col, const std::string& type, const std::string& where) {
  if (type == "INF_POS") return std::numeric_limits<double>::infinity();
  if (type == "INF_NEG") return -std::numeric_limits<double>::infinity();
  if (type == "NAN") return std::numeric_limits<double>::quiet_NaN();
  if (type != "FINITE")
    throw ConfigError(where, "unknown value type '" + printable_excerpt(type) + "'");
  if (st.type(col) != SQLITE_FLOAT && st.type(col) != SQLITE_INTEGER)
    throw ConfigError(where, "a FINITE value is not a number");
  return st.real(col);
}

double num(const Json& attrs, const char* key, const std::string& where) {
  if (!attrs.contains(key)) throw ConfigError(where + "." + key, "is required (a number)");
  if (!attrs[key].is_number())
    throw ConfigError(where + "." + key, "must be a number, got " + quoted_value(attrs[key]));
  return attrs[key].get<double>();
}

std::int64_t integer(const Json& attrs, const char* key, const std::string& where) {
  if (!attrs.contains(key)) throw ConfigError(where + "." + key, "is required (an integer)");
  if (!attrs[key].is_number_integer())
    throw ConfigError(where + "." + key, "must be an integer, got " + quoted_value(attrs[key]));
  return attrs[key].get<std::int64_t>();
}

// An Optuna distribution_json as a hpsearch Distribution, or ConfigError
// naming `where`. Legacy (pre-3.0) distribution names are mapped too.
Distribution from_optuna(const std::string& text, const std::string& where) {
  Json j = parse_attr(text, where);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() ||
      !j.contains("attributes") || !j["attributes"].is_object())
    throw ConfigError(where, "distribution_json is not {\"name\": ..., \"attributes\": {...}}");
  const std::string name = j["name"].get<std::string>();
  const Json& a = j["attributes"];
  auto flag = [&](const char* key) {
    return a.contains(key) && a[key].is_boolean() && a[key].get<bool>();
  };
  auto opt_step = [&]() -> std::optional<double> {
    if (!a.contains("step") || a["step"].is_null()) return std::nullopt;
    return num(a, "step", where);
  };
  if (name == "FloatDistribution")
    return Distribution::make_float(num(a, "low", where), num(a, "high", where), flag("log"),
                                    opt_step(), where);
  if (name == "UniformDistribution")
    return Distribution::make_float(num(a, "low", where), num(a, "high", where), false,
                                    std::nullopt, where);
  if (name == "LogUniformDistribution")
    return Distribution::make_float(num(a, "low", where), num(a, "high", where), true, std::nullopt,
                                    where);
  if (name == "DiscreteUniformDistribution")
    return Distribution::make_float(num(a, "low", where), num(a, "high", where), false,
                                    num(a, "q", where), where);
  if (name == "IntDistribution" || name == "IntUniformDistribution" ||
      name == "IntLogUniformDistribution") {
    std::int64_t step = a.contains("step") ? integer(a, "step", where) : 1;
    return Distribution::make_int(integer(a, "low", where), integer(a, "high", where),
                                  flag("log") || name == "IntLogUniformDistribution", step, where);
  }
  if (name == "CategoricalDistribution") {
    if (!a.contains("choices")) throw ConfigError(where + ".choices", "is required (an array)");
    if (!a["choices"].is_array())
      throw ConfigError(where + ".choices", "must be an array, got " + quoted_value(a["choices"]));
    std::vector<Json> choices(a["choices"].begin(), a["choices"].end());
    return Distribution::make_categorical(std::move(choices), where);
  }
  throw ConfigError(where, "distribution '" + printable_excerpt(name) +
                               "' is not supported (hpsearch has FloatDistribution, "
                               "IntDistribution and CategoricalDistribution)");
}

void require_optuna_tables(sqlite3* db, const std::string& path) {
  std::set<std::string> tables;
  try {
    Statement st(db, "SELECT name FROM sqlite_master WHERE type = 'table'");
    while (st.step()) tables.insert(st.text(0));
  } catch (const StorageError&) {
    if (sqlite3_errcode(db) == SQLITE_NOTADB)
      throw ConfigError(path, "not a SQLite database (file is not a database)");
    throw;
  }
  for (const char* t :
       {"studies", "study_directions", "trials", "trial_params", "trial_values",
        "trial_intermediate_values", "trial_user_attributes", "trial_system_attributes",
        "study_user_attributes", "study_system_attributes", "version_info"})
    if (!tables.count(t))
      throw ConfigError(path, std::string("not an Optuna storage (it has no table '") + t + "')");
  Statement v(db, "SELECT schema_version FROM version_info");
  if (!v.step() || v.type(0) != SQLITE_INTEGER)
    throw ConfigError(path, "not an Optuna storage (version_info has no schema_version)");
  if (v.int64(0) < kOptunaSchemaVersion)
    throw ConfigError(path, "Optuna schema version " + std::to_string(v.int64(0)) +
                                " is older than 12 (Optuna 3.0); run `optuna storage upgrade "
                                "--storage sqlite:///" +
                                path + "` first");
}

// The study named `name`, or with an empty `name` the file's only study
// (`name` is then set to its name).
std::int64_t find_optuna_study(sqlite3* db, const std::string& path, std::string& name) {
  if (!name.empty()) {
    Statement st(db, "SELECT study_id FROM studies WHERE study_name = ?1");
    st.bind(1, name);
    if (st.step()) return st.int64(0);
  }
  std::vector<std::string> all_names;
  std::size_t n_studies = 0;
  std::int64_t only_id = -1;
  std::string only_name;
  Statement st(db, "SELECT study_id, study_name FROM studies ORDER BY study_id");
  while (st.step()) {
    ++n_studies;
    only_id = st.int64(0);
    only_name = st.text(1);
    all_names.push_back(only_name);
  }
  const std::string names = n_studies == 0 ? "" : study_name_list(all_names);
  if (name.empty()) {
    if (n_studies == 1) {
      name = only_name;
      return only_id;
    }
    throw ConfigError("--study", n_studies == 0
                                     ? path + " holds no study"
                                     : path + " holds " + std::to_string(n_studies) + " studies (" +
                                           names + "); name one with --study");
  }
  throw ConfigError("--study",
                    "no study named '" + printable_excerpt(name) + "' in " + path +
                        (names.empty() ? " (it holds none)" : " (it holds " + names + ")"));
}

StudyDirection read_direction(sqlite3* db, std::int64_t sid, const std::string& name) {
  Statement st(db, "SELECT direction FROM study_directions WHERE study_id = ?1 ORDER BY objective");
  st.bind(1, sid);
  std::vector<std::string> dirs;
  while (st.step()) dirs.push_back(st.text(0));
  if (dirs.size() != 1)
    throw ConfigError("--study", "study '" + printable_excerpt(name) + "' has " +
                                     std::to_string(dirs.size()) +
                                     " objectives; hpsearch imports single-objective studies only");
  if (dirs[0] == "MAXIMIZE") return StudyDirection::kMaximize;
  if (dirs[0] == "MINIMIZE" || dirs[0] == "NOT_SET") return StudyDirection::kMinimize;
  throw ConfigError("--study", "study '" + printable_excerpt(name) + "': unknown direction '" +
                                   printable_excerpt(dirs[0]) + "'");
}

// A param row's value in hpsearch's external form, checked against `d`.
Json external_value(Statement& params, const Distribution& d, const std::string& pwhere) {
  if (params.type(1) != SQLITE_FLOAT && params.type(1) != SQLITE_INTEGER)
    throw ConfigError(pwhere, "param_value is not a number");
  const double internal = params.real(1);
  Json value;
  if (d.is_indexed()) {
    if (internal != std::floor(internal) || internal < 0 ||
        internal >= static_cast<double>(d.choices().size()))
      throw ConfigError(pwhere, "param_value is not an index of the choices");
    value = d.choices()[static_cast<std::size_t>(internal)];
  } else if (d.kind() == DistributionKind::kInt) {
    if (internal != std::floor(internal) || std::fabs(internal) > 9007199254740992.0)
      throw ConfigError(pwhere, "param_value of an IntDistribution is not an integer");
    value = static_cast<std::int64_t>(internal);
  } else {
    value = internal;
  }
  if (!d.contains(value))
    throw ConfigError(pwhere, "value " + value.dump() + " is not in its distribution");
  return value;
}

// Takes hpsearch's own fields out of an imported trial's system attrs (see
// export_system_attrs); an Optuna FAIL trial's "fail_reason" is its reason.
void take_hpsearch_attrs(NewTrial& t, const std::string& where) {
  Json& sys = t.system_attrs;
  if (sys.contains(kWorkerAttr) && sys[kWorkerAttr].is_string()) {
    t.worker = sys[kWorkerAttr].get<std::string>();
    sys.erase(kWorkerAttr);
  }
  if (sys.contains(kFailReasonAttr) && sys[kFailReasonAttr].is_string()) {
    t.fail_reason = sys[kFailReasonAttr].get<std::string>();
    sys.erase(kFailReasonAttr);
  } else if (t.state == TrialState::kFail && sys.contains("fail_reason") &&
             sys["fail_reason"].is_string()) {
    t.fail_reason = sys["fail_reason"].get<std::string>();
  }
  if (!sys.contains(kOrdinalAttr) || !sys[kOrdinalAttr].is_array()) return;
  // An ordinal exported by hpsearch comes back as the ordinal it was.
  for (const auto& n : sys[kOrdinalAttr]) {
    if (!n.is_string()) continue;
    auto it = t.distributions.find(n.get<std::string>());
    if (it == t.distributions.end() || it->second.kind() != DistributionKind::kCategorical)
      continue;
    const std::string name = it->first;
    std::string what = where;
    what += " param '" + name + "'";
    t.distributions.insert_or_assign(name, Distribution::make_ordinal(it->second.choices(), what));
  }
  sys.erase(kOrdinalAttr);
}

// Reads the trials of an Optuna study, one at a time, checked.
class OptunaTrialReader {
 public:
  explicit OptunaTrialReader(sqlite3* db)
      : db_(db),
        values_(db, "SELECT objective, value, value_type FROM trial_values WHERE trial_id = ?1"),
        inter_(db,
               "SELECT step, intermediate_value, intermediate_value_type FROM "
               "trial_intermediate_values WHERE trial_id = ?1 ORDER BY step"),
        params_(db,
                "SELECT param_name, param_value, distribution_json FROM trial_params WHERE "
                "trial_id = ?1 ORDER BY param_name") {}

  // The trial of row (trial_id, number, state, datetime_start,
  // datetime_complete) of `trials`.
  NewTrial read(Statement& trials, const std::string& where) {
    const std::int64_t tid = trials.int64(0);
    NewTrial t;
    auto state = parse_trial_state(trials.text(2));
    if (!state)
      throw ConfigError(where, "unknown state '" + printable_excerpt(trials.text(2)) + "'");
    t.state = *state;
    if (trials.type(3) == SQLITE_TEXT && t.state != TrialState::kWaiting)
      t.datetime_start = parse_datetime(trials.text(3), where + " datetime_start");
    if (trials.type(4) == SQLITE_TEXT && is_finished(t.state))
      t.datetime_complete = parse_datetime(trials.text(4), where + " datetime_complete");
    read_values(t, tid, where);
    read_params(t, tid, where);
    t.user_attrs = read_attrs(db_, "trial_user_attributes", "trial_id", tid, where + " user");
    t.system_attrs = read_attrs(db_, "trial_system_attributes", "trial_id", tid, where + " system");
    take_hpsearch_attrs(t, where);
    if (t.state == TrialState::kComplete && (!t.value || std::isnan(*t.value)))
      throw ConfigError(where, "is COMPLETE without a value");
    return t;
  }

 private:
  void read_values(NewTrial& t, std::int64_t tid, const std::string& where) {
    Use v(values_);
    v->bind(1, tid);
    while (v->step()) {
      if (v->int64(0) != 0)
        throw ConfigError(where, "has a value for objective " + std::to_string(v->int64(0)) +
                                     "; hpsearch imports single-objective studies only");
      t.value = read_float(v.get(), 1, v->text(2), where + " value");
    }
    if (t.state == TrialState::kWaiting) return;
    Use in(inter_);
    in->bind(1, tid);
    while (in->step())
      t.intermediate_values[in->int64(0)] =
          read_float(in.get(), 1, in->text(2),
                     where + " intermediate value at step " + printable_excerpt(in->text(0)));
  }

  void read_params(NewTrial& t, std::int64_t tid, const std::string& where) {
    Use p(params_);
    p->bind(1, tid);
    while (p->step()) {
      const std::string pname = p->text(0);
      std::string pwhere = where;
      pwhere.append(" param '").append(printable_excerpt(pname)).append("'");
      Distribution d = from_optuna(p->text(2), pwhere);
      t.params[pname] = external_value(p.get(), d, pwhere);
      t.distributions.emplace(pname, std::move(d));
    }
  }

  sqlite3* db_;
  Statement values_, inter_, params_;
};

OptunaStudy read_optuna_study(sqlite3* db, const std::string& path, std::string& name) {
  const std::int64_t sid = find_optuna_study(db, path, name);
  OptunaStudy out;
  out.direction = read_direction(db, sid, name);
  const std::string swhere = "study '" + printable_excerpt(name) + "'";
  out.user_attrs = read_attrs(db, "study_user_attributes", "study_id", sid, swhere + " user");
  out.system_attrs = read_attrs(db, "study_system_attributes", "study_id", sid, swhere + " system");
  if (out.system_attrs.contains(kConfigAttr)) {
    out.config = out.system_attrs[kConfigAttr];
    out.system_attrs.erase(kConfigAttr);
  }
  Statement trials(db,
                   "SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials "
                   "WHERE study_id = ?1 ORDER BY number");
  OptunaTrialReader reader(db);
  trials.bind(1, sid);
  std::int64_t expected = 0;
  while (trials.step()) {
    const std::int64_t number = trials.type(1) == SQLITE_INTEGER ? trials.int64(1) : -1;
    const std::string where = "trial " + std::to_string(number);
    if (number != expected)
      throw ConfigError(
          where, "trial numbers must run 0, 1, 2, ... (expected " + std::to_string(expected) + ")");
    ++expected;
    out.trials.push_back(reader.read(trials, where));
  }
  return out;
}

}  // namespace

OptunaImport import_optuna(const std::string& path, const std::string& source_study,
                           Storage& target, const std::optional<std::string>& as_name) {
  std::string study_name = source_study;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw ConfigError(path, "no such Optuna storage file");
  OptunaStudy study;
  {
    Db db(path, SQLITE_OPEN_READONLY);
    require_optuna_tables(db.get(), path);
    db.exec("BEGIN", path);  // one consistent snapshot
    study = read_optuna_study(db.get(), path, study_name);
    db.exec("COMMIT", path);
  }
  const std::string name = as_name.value_or(study_name);
  if (as_name) {
    check_study_name(name, "--as");
  } else {
    try {
      check_study_name(name, "--as");
    } catch (const ConfigError& e) {
      // e.what() is "--as: <the rule broken>".
      const std::string rule = std::string(e.what()).substr(std::string("--as: ").size());
      throw ConfigError("--as", "the Optuna study's name cannot be a hpsearch study name (it " +
                                    rule + "); pass --as NEW_NAME");
    }
  }
  if (target.find_study(name))
    throw ConfigError(
        as_name ? "--as" : "--study",
        "the target storage already holds a study named '" + name + "' (pass --as NEW_NAME)");
  OptunaImport out;
  target.run_in_transaction([&] {
    out.study_id = target.create_study(name, study.direction, study.config);
    for (const auto& [k, v] : study.user_attrs.items())
      target.set_study_user_attr(out.study_id, k, v);
    for (const auto& [k, v] : study.system_attrs.items())
      target.set_study_system_attr(out.study_id, k, v);
    for (const auto& t : study.trials) target.create_trial(out.study_id, t);
  });
  out.n_trials = study.trials.size();
  out.study_name = study_name;
  return out;
}

}  // namespace hps::sqlite
