// Tests of search/sqlite/optuna_rdb.h (export to and import from Optuna's
// RDB schema) without Optuna: the round trip through the file and every
// error path (bad file, not an Optuna storage, unknown study, unsupported
// distribution, multi-objective study, existing output, existing target).
// tests/optuna_interop_test.py checks the same files with Optuna itself.
// Also the non-finite attr encoding of the store (search/sqlite/codec.h).
#include "search/sqlite/optuna_rdb.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "search/sqlite_storage.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using testsupport::TempDir;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Runs SQL on a file directly (to damage an exported file).
void sql(const std::string& file, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, text.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

class OptunaRdbTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }

  // A small study: a float, an int with step, a categorical, an ordinal;
  // one COMPLETE, one PRUNED, one FAIL trial.
  std::int64_t make_study(Storage& s) {
    auto id = s.create_study("s", StudyDirection::kMaximize, Json::object());
    auto x = Distribution::make_float(-1, 1);
    auto k = Distribution::make_int(0, 8, false, 2);
    auto c = Distribution::make_categorical({Json("a"), Json(1), Json(1.0), Json(nullptr)});
    auto o = Distribution::make_ordinal({Json(16), Json(32)});
    for (int i = 0; i < 3; ++i) {
      NewTrial init;
      init.params = {
          {"x", Json(i == 0 ? -0.0 : 0.5)}, {"k", Json(2 * i)}, {"c", Json(1.0)}, {"o", Json(32)}};
      init.distributions = {{"x", x}, {"k", k}, {"c", c}, {"o", o}};
      init.worker = "w:1";
      auto t = s.create_trial(id, init);
      s.set_trial_intermediate_value(t->trial_id, 0, i == 1 ? kNaN : kInf);
      s.set_trial_user_attr(t->trial_id, "f", kInf);
      s.set_trial_state(t->trial_id,
                        i == 0   ? TrialState::kComplete
                        : i == 1 ? TrialState::kPruned
                                 : TrialState::kFail,
                        i == 0 ? std::optional<double>(-kInf) : std::nullopt, "why");
    }
    return id;
  }

  TempDir dir_;
};

TEST_F(OptunaRdbTest, RoundTripKeepsEveryTrial) {
  SqliteStorage src(path("a.db"));
  auto id = make_study(src);
  sqlite::export_optuna(src, id, path("o.db"), false);
  SqliteStorage dst(path("b.db"));
  auto r = sqlite::import_optuna(path("o.db"), "s", dst, std::string("copy"));
  EXPECT_EQ(r.n_trials, 3u);
  auto a = src.get_all_trials(id);
  auto b = dst.get_all_trials(r.study_id);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(trial_to_json(*a[i]).dump(), trial_to_json(*b[i]).dump());
    EXPECT_EQ(a[i]->params, b[i]->params);  // same JSON types
    for (const auto& [k, d] : a[i]->distributions) EXPECT_TRUE(d == b[i]->distributions.at(k)) << k;
  }
  EXPECT_TRUE(std::signbit(b[0]->params.at("x").get<double>()));
  EXPECT_TRUE(b[0]->params.at("c").is_number_float());
  EXPECT_EQ(dst.get_study(r.study_id).direction, StudyDirection::kMaximize);
  EXPECT_TRUE(b[2]->user_attrs["f"].is_number_float());
  EXPECT_EQ(b[2]->fail_reason, "why");
  EXPECT_EQ(b[2]->worker, "w:1");
}

TEST_F(OptunaRdbTest, ExportRefusesAnExistingOutputUnlessForced) {
  SqliteStorage src(path("a.db"));
  auto id = make_study(src);
  { std::ofstream(path("o.db")) << "keep me"; }
  EXPECT_NE(error_of([&] { sqlite::export_optuna(src, id, path("o.db"), false); }).find("--force"),
            std::string::npos);
  std::ifstream in(path("o.db"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me");
  sqlite::export_optuna(src, id, path("o.db"), true);
  SqliteStorage dst(path("b.db"));
  EXPECT_EQ(sqlite::import_optuna(path("o.db"), "s", dst, std::nullopt).n_trials, 3u);
  for (const auto& e : fs::directory_iterator(dir_.path()))  // no temporary file left
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

// The export never replaces the store it reads, not even with --force (it
// did: the study was replaced by its Optuna copy), nor a directory.
TEST_F(OptunaRdbTest, ExportRefusesItsOwnStorageAndADirectory) {
  auto src = open_storage(path("a.db"));
  auto id = make_study(*src);
  EXPECT_NE(error_of([&] {
              sqlite::export_optuna(*src, id, path("a.db"), true);
            }).find("is the study's own storage"),
            std::string::npos);
  EXPECT_EQ(src->get_all_trials(id).size(), 3u);
  fs::create_directory(path("adir"));
  EXPECT_NE(
      error_of([&] { sqlite::export_optuna(*src, id, path("adir"), true); }).find("is a directory"),
      std::string::npos);
  // -o named: empty, or in a folder that does not exist.
  EXPECT_EQ(error_of([&] { sqlite::export_optuna(*src, id, "", true); }), "-o: must name a file");
  EXPECT_NE(error_of([&] {
              sqlite::export_optuna(*src, id, path("nodir/x.db"), true);
            }).find("-o: '" + path("nodir") + "' is not a folder that exists"),
            std::string::npos);
}

// The export holds the study's space.json (a command objective's env
// too): it is owner-only like the store, whatever the umask.
TEST_F(OptunaRdbTest, ExportIsOwnerOnly) {
  SqliteStorage src(path("a.db"));
  auto id = make_study(src);
  const mode_t old_mask = ::umask(022);
  sqlite::export_optuna(src, id, path("o.db"), false);
  ::umask(old_mask);
  struct stat st {};
  ASSERT_EQ(::stat(path("o.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  SqliteStorage dst(path("b.db"));
  EXPECT_EQ(sqlite::import_optuna(path("o.db"), "s", dst, std::nullopt).n_trials, 3u);
}

// `hpsearch import` that fails leaves no store behind where there was none
// (it left an empty store), and an existing store as it was.
TEST_F(OptunaRdbTest, AFailedImportCommandLeavesNoNewStore) {
  { std::ofstream(path("junk.bin")) << std::string(4096, 'j'); }
  auto r = testsupport::run_process(
      {HPSEARCH_CLI_PATH, "import", path("junk.bin"), "--study", "x", "--into", path("new.db")},
      dir_.path().string());
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(fs::exists(path("new.db")));
  EXPECT_FALSE(fs::exists(path("new.db.lock")));
  {
    SqliteStorage src(path("a.db"));
    make_study(src);
  }
  r = testsupport::run_process(
      {HPSEARCH_CLI_PATH, "import", path("junk.bin"), "--study", "x", "--into", path("a.db")},
      dir_.path().string());
  EXPECT_NE(r.exit_code, 0);
  SqliteStorage kept(path("a.db"));
  EXPECT_EQ(kept.list_studies().size(), 1u);
  // A study name longer than study.name allows is refused.
  sqlite::export_optuna(kept, *kept.find_study("s"), path("o.db"), false);
  SqliteStorage dst(path("b.db"));
  EXPECT_NE(error_of([&] {
              sqlite::import_optuna(path("o.db"), "s", dst, std::string(300, 'n'));
            }).find("--as: must be at most 255 bytes"),
            std::string::npos);
  // An Optuna study whose own name breaks the rule needs --as (the message
  // says so, and does not print the name: it may hold control characters).
  fs::copy_file(path("o.db"), path("long.db"));
  sql(path("long.db"),
      "UPDATE studies SET study_name = '" + std::string(300, 'l') +
          "'; INSERT INTO studies (study_id, study_name) VALUES (7, 'x' || char(27) || '[2J'); "
          "INSERT INTO study_directions (direction, study_id, objective) "
          "VALUES ('MINIMIZE', 7, 0)");
  std::string too_long = error_of(
      [&] { sqlite::import_optuna(path("long.db"), std::string(300, 'l'), dst, std::nullopt); });
  EXPECT_NE(too_long.find("--as: the Optuna study's name cannot be a hpsearch study name (it must "
                          "be at most 255 bytes"),
            std::string::npos)
      << too_long;
  EXPECT_NE(too_long.find("pass --as NEW_NAME"), std::string::npos) << too_long;
  std::string control =
      error_of([&] { sqlite::import_optuna(path("long.db"), "x\x1b[2J", dst, std::nullopt); });
  EXPECT_NE(control.find("must not contain control characters"), std::string::npos) << control;
  EXPECT_EQ(control.find('\x1b'), std::string::npos);
  EXPECT_EQ(dst.list_studies().size(), 0u);
}

TEST_F(OptunaRdbTest, ImportWithoutAStudyNameTakesTheOnlyStudyAndRefusesSeveral) {
  SqliteStorage src(path("a.db"));
  auto id = make_study(src);
  sqlite::export_optuna(src, id, path("o.db"), false);
  fs::copy_file(path("o.db"), path("two.db"));
  sql(path("two.db"), "INSERT INTO studies (study_name) VALUES ('second')");
  fs::copy_file(path("o.db"), path("none.db"));
  sql(path("none.db"), "DELETE FROM studies");

  SqliteStorage dst(path("b.db"));
  auto result = sqlite::import_optuna(path("o.db"), "", dst, std::nullopt);
  EXPECT_EQ(result.study_name, "s");
  ASSERT_TRUE(dst.find_study("s").has_value());
  EXPECT_EQ(dst.get_all_trials(*dst.find_study("s")).size(), src.get_all_trials(id).size());

  std::string several = error_of([&] { sqlite::import_optuna(path("two.db"), "", dst, "x"); });
  EXPECT_NE(several.find("--study"), std::string::npos) << several;
  EXPECT_NE(several.find("holds 2 studies ('s', 'second')"), std::string::npos) << several;
  std::string none = error_of([&] { sqlite::import_optuna(path("none.db"), "", dst, "y"); });
  EXPECT_NE(none.find("holds no study"), std::string::npos) << none;
  EXPECT_FALSE(dst.find_study("x").has_value());
  EXPECT_FALSE(dst.find_study("y").has_value());
}

TEST_F(OptunaRdbTest, ImportErrorsNameTheProblemAndStoreNothing) {
  SqliteStorage src(path("a.db"));
  auto id = make_study(src);
  sqlite::export_optuna(src, id, path("o.db"), false);
  SqliteStorage dst(path("b.db"));
  auto import = [&](const std::string& file, const std::string& study) {
    return error_of([&] { sqlite::import_optuna(file, study, dst, std::nullopt); });
  };
  EXPECT_NE(import(path("missing.db"), "s").find("no such Optuna storage file"), std::string::npos);
  { std::ofstream(path("text.db")) << "this is not a database, just some text.............."; }
  EXPECT_NE(import(path("text.db"), "s").find("not a SQLite database"), std::string::npos);
  EXPECT_NE(import(path("a.db"), "s").find("not an Optuna storage (it has no table"),
            std::string::npos)
      << import(path("a.db"), "s");
  std::string unknown = import(path("o.db"), "nope");
  EXPECT_NE(unknown.find("no study named 'nope'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("'s'"), std::string::npos) << unknown;  // lists the studies there

  fs::copy_file(path("o.db"), path("dist.db"));
  sql(path("dist.db"),
      "UPDATE trial_params SET distribution_json = "
      "'{\"name\": \"FancyDistribution\", \"attributes\": {}}' WHERE param_name = 'k' AND "
      "trial_id = 2");
  std::string dist = import(path("dist.db"), "s");
  EXPECT_NE(dist.find("trial 1 param 'k'"), std::string::npos) << dist;
  EXPECT_NE(dist.find("'FancyDistribution' is not supported"), std::string::npos) << dist;

  fs::copy_file(path("o.db"), path("value.db"));
  sql(path("value.db"), "UPDATE trial_params SET param_value = 3 WHERE param_name = 'k'");
  EXPECT_NE(import(path("value.db"), "s").find("param 'k'"), std::string::npos);

  fs::copy_file(path("o.db"), path("mo.db"));
  sql(path("mo.db"),
      "INSERT INTO study_directions (direction, study_id, objective) VALUES ('MINIMIZE', 1, 1)");
  EXPECT_NE(import(path("mo.db"), "s").find("2 objectives"), std::string::npos);

  fs::copy_file(path("o.db"), path("old.db"));
  sql(path("old.db"), "UPDATE version_info SET schema_version = 11");
  EXPECT_NE(import(path("old.db"), "s").find("optuna storage upgrade"), std::string::npos);

  EXPECT_TRUE(dst.list_studies().empty());  // none of these stored anything
  sqlite::import_optuna(path("o.db"), "s", dst, std::nullopt);
  std::string again = import(path("o.db"), "s");
  EXPECT_NE(again.find("already holds a study named 's'"), std::string::npos) << again;
  EXPECT_EQ(dst.list_studies().size(), 1u);
}

TEST(SqliteAttrTypes, NonFiniteFloatAttrsReadBackAsFloats) {
  TempDir dir;
  const std::string file = (dir.path() / "t.db").string();
  std::int64_t trial_id;
  {
    SqliteStorage s(file);
    auto id = s.create_study("s", StudyDirection::kMinimize, Json());
    trial_id = s.create_trial(id, NewTrial{})->trial_id;
    s.set_trial_user_attr(trial_id, "inf", kInf);
    s.set_trial_user_attr(trial_id, "ninf", -kInf);
    s.set_trial_user_attr(trial_id, "nan", kNaN);
    s.set_trial_user_attr(trial_id, "str", "inf");
    s.set_trial_user_attr(trial_id, "nested", Json{{"v", Json::array({kNaN, "NaN", 1.0, 1})}});
    s.set_study_user_attr(id, "inf", kInf);
  }
  SqliteStorage s(file);  // read back from the file, not from a snapshot
  auto t = s.get_trial(trial_id);
  const Json& a = t->user_attrs;
  ASSERT_TRUE(a["inf"].is_number_float());
  EXPECT_EQ(a["inf"].get<double>(), kInf);
  EXPECT_EQ(a["ninf"].get<double>(), -kInf);
  ASSERT_TRUE(a["nan"].is_number_float());
  EXPECT_TRUE(std::isnan(a["nan"].get<double>()));
  EXPECT_EQ(a["str"], Json("inf"));
  const Json& v = a["nested"]["v"];
  EXPECT_TRUE(v[0].is_number_float() && std::isnan(v[0].get<double>()));
  EXPECT_EQ(v[1], Json("NaN"));
  EXPECT_TRUE(v[2].is_number_float());
  EXPECT_TRUE(v[3].is_number_integer());
  EXPECT_EQ(s.list_studies()[0].user_attrs["inf"].get<double>(), kInf);
}

TEST(JsonNonfinite, WritesPythonLiteralsAndReadsThemBack) {
  Json v = {{"a", kInf}, {"b", Json::array({-kInf, kNaN, "NaN Infinity", 0.1})}, {"c", 1}};
  std::string text = dump_json_nonfinite(v);
  EXPECT_EQ(text, R"({"a":Infinity,"b":[-Infinity,NaN,"NaN Infinity",0.1],"c":1})");
  Json back = parse_json_nonfinite(text);
  EXPECT_EQ(back["a"].get<double>(), kInf);
  EXPECT_EQ(back["b"][0].get<double>(), -kInf);
  EXPECT_TRUE(std::isnan(back["b"][1].get<double>()));
  EXPECT_EQ(back["b"][2], Json("NaN Infinity"));
  EXPECT_EQ(back["b"][3].get<double>(), 0.1);
  EXPECT_TRUE(back["c"].is_number_integer());
  // Finite values: exactly dump(); a literal that only looks like the
  // stand-in number is read as the number it is.
  EXPECT_EQ(dump_json_nonfinite(Json{{"x", 1.5}}), (Json{{"x", 1.5}}.dump()));
  Json zeros = parse_json_nonfinite("[NaN, 0.01, 0.02, -0.02, 0.001]");
  EXPECT_TRUE(std::isnan(zeros[0].get<double>()));
  EXPECT_EQ(zeros[1].get<double>(), 0.01);
  EXPECT_EQ(zeros[2].get<double>(), 0.02);
  EXPECT_EQ(zeros[3].get<double>(), -0.02);
  EXPECT_EQ(zeros[4].get<double>(), 0.001);
  EXPECT_THROW(parse_json_nonfinite("[NaNa]"), Json::exception);
  EXPECT_THROW(parse_json_nonfinite("[Inf]"), Json::exception);
}

}  // namespace
}  // namespace hps
