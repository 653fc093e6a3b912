// Warm start (search/warm_start.h): trials of an earlier study in a real
// SQLite file enter a new study as prior observations.
#include "search/warm_start.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/factory.h"
#include "report/importance.h"
#include "report/page_data.h"
#include "search/errors.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/trial_lifecycle.h"
#include "tests/support/older_stores.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using testsupport::run_process;
using testsupport::TempDir;

SearchSpace space_2d(double low = -5, double high = 5) {
  SearchSpace s;
  s.add("x", Distribution::make_float(low, high));
  s.add("y", Distribution::make_float(low, high));
  return s;
}

StudyOptions options_for(const SearchSpace& space, std::uint64_t seed = 1,
                         int n_startup_trials = 10) {
  StudyOptions o;
  o.space = space;
  o.sampler = make_sampler(
      Json{{"type", "tpe"}, {"seed", seed}, {"n_startup_trials", n_startup_trials}}, seed);
  return o;
}

double bowl(double x, double y, double cx, double cy) {
  return (x - cx) * (x - cx) + (y - cy) * (y - cy);
}

// An earlier study "old" in `path`: n COMPLETE trials of a bowl centred at
// (2, -1), plus one FAIL and one PRUNED trial.
void make_old_study(const std::string& path, int n, const SearchSpace& space = space_2d()) {
  auto storage = open_storage(path);
  Study old = Study::create(storage, "old", StudyDirection::kMinimize, options_for(space, 7));
  old.optimize(
      [](Trial& t) {
        return bowl(t.param("x").get<double>(), t.param("y").get<double>(), 2.0, -1.0);
      },
      {.n_trials = n});
  Trial failed = old.ask();
  old.tell(failed, TrialState::kFail, std::nullopt, "boom");
  Trial pruned = old.ask();
  old.tell(pruned, TrialState::kPruned, 1.0);
}

std::vector<TrialPtr> warm_trials(const Study& study) {
  std::vector<TrialPtr> out;
  for (const auto& t : study.trials())
    if (t->is_warm_start()) out.push_back(t);
  return out;
}

class WarmStartTest : public ::testing::Test {
 protected:
  std::string old_db() const { return dir_.file("old.db"); }
  std::string new_db() const { return dir_.file("new.db"); }
  TempDir dir_{"warm_start"};
};

TEST_F(WarmStartTest, CopiesCompleteTrialsMarkedAndOutsideTheBudget) {
  make_old_study(old_db(), 12);
  auto storage = open_storage(new_db());
  Study study =
      Study::create(storage, "new", StudyDirection::kMinimize, options_for(space_2d(), 3));
  WarmStartSummary s = warm_start(study, {.storage = old_db(), .study = "old"}, new_db());
  EXPECT_FALSE(s.already_done);
  EXPECT_EQ(s.copied, 12);
  EXPECT_EQ(s.left_out(), 0);
  EXPECT_EQ(s.message(), "warm start: 12 trials from old in " + old_db() +
                             "; 0 left out (0 out of bounds, 0 missing params, 0 without a value)");

  auto old_trials = open_storage(old_db())->get_all_trials(
      *open_storage(old_db())->find_study("old"), {TrialState::kComplete});
  std::vector<TrialPtr> warm = warm_trials(study);
  ASSERT_EQ(warm.size(), 12u);
  for (std::size_t i = 0; i < warm.size(); ++i) {
    const FrozenTrial& w = *warm[i];
    EXPECT_EQ(w.state, TrialState::kComplete);
    EXPECT_EQ(w.params, old_trials[i]->params);
    EXPECT_EQ(w.value, old_trials[i]->value);
    EXPECT_EQ(w.system_attrs[kAttrWarmStart],
              (Json{{"storage", old_db()}, {"study", "old"}, {"trial", old_trials[i]->number}}));
    EXPECT_FALSE(w.counts_as_finished());
    EXPECT_FALSE(lifecycle::is_best_candidate(w));
  }
  EXPECT_EQ(study.n_finished(), 0);
  EXPECT_THROW((void)study.best_trial(), Error);  // warm trials are never the best

  // The budget: 5 new trials besides the 12 warm ones.
  study.optimize(
      [](Trial& t) {
        return bowl(t.param("x").get<double>(), t.param("y").get<double>(), 2.5, -1.0);
      },
      {.n_trials = 5});
  EXPECT_EQ(study.trials().size(), 17u);
  EXPECT_EQ(study.n_finished(), 5);
  EXPECT_FALSE(study.best_trial()->is_warm_start());
  EXPECT_EQ(warm_trials(study).size(), 12u);

  // The report: importances and the timeline count this study's 5 trials
  // only (the copies ran in the earlier study, for another objective).
  const std::vector<TrialPtr> all = study.trials();
  EXPECT_EQ(report::ped_anova_importances(all, space_2d(), StudyDirection::kMinimize, {}).n_trials,
            5);
  const Json page = report::build_page_data(storage->get_study(study.study_id()), all, {});
  EXPECT_EQ(page["timeline"]["total"], 5) << page["timeline"].dump();
}

// The earlier study's store, of an older schema, is read through an
// upgraded copy in memory: the file is left as it was, so the hpsearch
// that made it can still open it (found by a new-user pass: it was
// upgraded, and the older hpsearch then refused it).
TEST_F(WarmStartTest, AnOlderSourceStoreIsReadAndLeftAsItWas) {
  make_old_study(old_db(), 8);
  testsupport::write_as_v4(old_db());
  testsupport::raw_exec(old_db(), "PRAGMA wal_checkpoint(TRUNCATE)");
  const std::string before = testsupport::read_file(old_db());
  auto storage = open_storage(new_db());
  Study study =
      Study::create(storage, "new", StudyDirection::kMinimize, options_for(space_2d(), 3));
  WarmStartSummary s = warm_start(study, {.storage = old_db(), .study = "old"}, new_db());
  EXPECT_EQ(s.copied, 8);
  EXPECT_EQ(warm_trials(study).size(), 8u);
  EXPECT_EQ(testsupport::read_file(old_db()), before);
}

TEST_F(WarmStartTest, ResumeDoesNotCopyAgain) {
  make_old_study(old_db(), 6);
  {
    auto storage = open_storage(new_db());
    Study study = Study::create(storage, "new", StudyDirection::kMinimize, options_for(space_2d()));
    EXPECT_EQ(warm_start(study, {.storage = old_db(), .study = "old"}, new_db()).copied, 6);
  }
  std::filesystem::remove(old_db());  // a resumed run needs the earlier store no more
  auto storage = open_storage(new_db());
  EXPECT_TRUE(warm_started(*storage, "new"));
  Study study = Study::load(storage, "new", options_for(space_2d()));
  WarmStartSummary again = warm_start(study, {.storage = old_db(), .study = "old"}, new_db());
  EXPECT_TRUE(again.already_done);
  EXPECT_EQ(again.copied, 6);
  EXPECT_EQ(warm_trials(study).size(), 6u);
  // copy_warm_start itself also checks (inside its transaction).
  auto other = std::make_shared<InMemoryStorage>();
  Study source = Study::create(other, "old", StudyDirection::kMinimize, options_for(space_2d()));
  source.optimize([](Trial&) { return 1.0; }, {.n_trials = 2});
  EXPECT_TRUE(copy_warm_start(study, *other, "memory", "old").already_done);
  EXPECT_EQ(warm_trials(study).size(), 6u);
}

TEST(WarmStartSummaryTest, MessageSaysOneTrialInTheSingular) {
  WarmStartSummary s;
  s.storage = "old.db";
  s.study = "old";
  s.copied = 1;
  s.no_value = 1;
  EXPECT_EQ(s.message(),
            "warm start: 1 trial from old in old.db; 1 left out (0 out of bounds, 0 missing "
            "params, 1 without a value)");
  s.already_done = true;
  EXPECT_EQ(s.message(), "warm start: already done (1 trial from old in old.db)");
  s.copied = 0;
  EXPECT_EQ(s.message(), "warm start: already done (0 trials from old in old.db)");
}

TEST_F(WarmStartTest, LeavesOutTrialsThatDoNotFitAndCountsThem) {
  {
    // Earlier space: x in [-5, 5], y in [-5, 5], z in [0, 1] on some trials.
    auto storage = open_storage(old_db());
    Study old = Study::create(storage, "old", StudyDirection::kMinimize);
    auto add = [&](double x, double y) {
      NewTrial t;
      t.state = TrialState::kComplete;
      t.params = {{"x", x}, {"y", y}};
      t.value = x * x;
      storage->create_trial(old.study_id(), t);
    };
    add(0.5, 0.5);   // fits
    add(1.5, -0.5);  // fits
    add(4.0, 0.0);   // x out of the new bounds
    add(-3.0, 0.0);  // x out of the new bounds
    NewTrial no_y;   // y missing
    no_y.state = TrialState::kComplete;
    no_y.params = {{"x", 0.0}};
    no_y.value = 0.0;
    storage->create_trial(old.study_id(), no_y);
    add(0.25, 0.25);  // fits, but its value is set to NULL below
  }
  {
    // A COMPLETE trial without a value (as another writer may leave one):
    // hpsearch never writes it, so the store is edited directly.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(old_db().c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE trials SET value = NULL WHERE number = 5", nullptr, nullptr,
                           nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto storage = open_storage(new_db());
  Study study =
      Study::create(storage, "new", StudyDirection::kMinimize, options_for(space_2d(-2, 2)));
  WarmStartSummary s = warm_start(study, {.storage = old_db(), .study = "old"}, new_db());
  EXPECT_EQ(s.copied, 2);
  EXPECT_EQ(s.out_of_bounds, 2);
  EXPECT_EQ(s.missing_params, 1);
  EXPECT_EQ(s.no_value, 1);
  EXPECT_EQ(s.left_out(), 4);
  EXPECT_EQ(s.message(), "warm start: 2 trials from old in " + old_db() +
                             "; 4 left out (2 out of bounds, 1 missing params, 1 without a value)");
  const Json attr = storage->get_study(study.study_id()).system_attrs[kAttrWarmStart];
  EXPECT_EQ(attr["copied"], 2);
  EXPECT_EQ(attr["out_of_bounds"], 2);
  EXPECT_EQ(attr["missing_params"], 1);
  EXPECT_EQ(attr["no_value"], 1);
  EXPECT_EQ(attr["left_out"], 4);
}

TEST(WarmStartFitTest, ConditionalsChoicesAndExtraParams) {
  SearchSpace s;
  s.add("opt", Distribution::make_categorical({"adam", "sgd"}));
  s.add(ParamSpec{"momentum", Distribution::make_float(0.0, 0.99), Condition{"opt", {Json("sgd")}},
                  std::nullopt});
  Params fitted;
  // Inactive momentum absent: fits; present under adam: dropped.
  EXPECT_EQ(warm_start_fit(s, {{"opt", "adam"}}, &fitted), WarmStartFit::kFits);
  EXPECT_EQ(warm_start_fit(s, {{"opt", "adam"}, {"momentum", 0.5}, {"extra", 1}}, &fitted),
            WarmStartFit::kFits);
  EXPECT_EQ(fitted, (Params{{"opt", "adam"}}));
  // Active momentum missing, or out of bounds; a choice the new space lacks.
  EXPECT_EQ(warm_start_fit(s, {{"opt", "sgd"}}, &fitted), WarmStartFit::kMissingParam);
  EXPECT_EQ(warm_start_fit(s, {{"opt", "sgd"}, {"momentum", 1.5}}, &fitted),
            WarmStartFit::kOutOfBounds);
  EXPECT_EQ(warm_start_fit(s, {{"opt", "rmsprop"}}, &fitted), WarmStartFit::kOutOfBounds);
  EXPECT_EQ(warm_start_fit(s, {{"opt", "sgd"}, {"momentum", 0.9}}, &fitted), WarmStartFit::kFits);
  EXPECT_EQ(fitted, (Params{{"opt", "sgd"}, {"momentum", 0.9}}));
}

TEST_F(WarmStartTest, ErrorsNameTheField) {
  make_old_study(old_db(), 2);
  auto storage = open_storage(new_db());
  Study study = Study::create(storage, "new", StudyDirection::kMinimize, options_for(space_2d()));
  auto error_of = [&](const WarmStartConfig& c, const std::string& own = "") {
    try {
      (void)warm_start(study, c, own.empty() ? new_db() : own);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string missing = error_of({.storage = dir_.file("nope.db"), .study = "old"});
  EXPECT_NE(missing.find("warm_start.storage"), std::string::npos) << missing;
  EXPECT_NE(missing.find("no such storage file"), std::string::npos) << missing;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("nope.db")));  // not created
  EXPECT_NE(error_of({.storage = "memory", .study = "old"}).find("warm_start.storage"),
            std::string::npos);
  const std::string no_study = error_of({.storage = old_db(), .study = "olde"});
  EXPECT_NE(no_study.find("warm_start.study"), std::string::npos) << no_study;
  EXPECT_NE(no_study.find("'old'"), std::string::npos) << no_study;  // lists what is there
  // The new study itself (same name, same file) is refused.
  Study::create(open_storage(old_db()), "new", StudyDirection::kMinimize);
  const std::string itself = error_of({.storage = old_db(), .study = "new"}, old_db());
  EXPECT_NE(itself.find("is the new study itself"), std::string::npos) << itself;
  // Two studies now: the name is required.
  EXPECT_NE(error_of({.storage = old_db(), .study = ""}).find("is required"), std::string::npos);
  // Another direction.
  Study::create(open_storage(old_db()), "max", StudyDirection::kMaximize);
  EXPECT_NE(error_of({.storage = old_db(), .study = "max"}).find("is to maximize"),
            std::string::npos);
  EXPECT_FALSE(warm_started(*storage, "new"));

  // space.json's section: types and keys.
  auto config_error = [](const Json& section) {
    try {
      (void)WarmStartConfig::from_json(section);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(config_error("old.db").find("warm_start: must be an object"), std::string::npos);
  EXPECT_NE(config_error(Json{{"study", "old"}}).find("warm_start.storage: is required"),
            std::string::npos);
  EXPECT_NE(config_error(Json{{"storage", 3}}).find("warm_start.storage"), std::string::npos);
  EXPECT_NE(config_error(Json{{"storage", "a.db"}, {"study", 1}}).find("warm_start.study"),
            std::string::npos);
  EXPECT_NE(config_error(Json{{"storage", "a.db"}, {"stduy", "x"}}).find("warm_start"),
            std::string::npos);
  const WarmStartConfig ok = WarmStartConfig::from_json(Json{{"storage", "a.db"}});
  EXPECT_EQ(ok.storage, "a.db");
  EXPECT_EQ(ok.study, "");
}

// Files that are no readable store: refused as warm_start.storage (a
// ConfigError, exit 2 in the CLI), and never written: an empty file is not
// made a store, a directory or a text file is not touched.
TEST_F(WarmStartTest, BrokenOrForeignSourceFilesAreRefusedUnwritten) {
  auto storage = open_storage(new_db());
  Study study = Study::create(storage, "new", StudyDirection::kMinimize, options_for(space_2d()));
  auto error_of = [&](const std::string& path) {
    try {
      (void)warm_start(study, {.storage = path, .study = "old"}, new_db());
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  dir_.write("empty.db", "");
  const std::string empty = error_of(dir_.file("empty.db"));
  EXPECT_NE(empty.find("warm_start.storage: is empty"), std::string::npos) << empty;
  EXPECT_EQ(std::filesystem::file_size(dir_.file("empty.db")), 0u);
  EXPECT_FALSE(std::filesystem::exists(dir_.file("empty.db-wal")));

  std::filesystem::create_directory(dir_.file("folder.db"));
  const std::string folder = error_of(dir_.file("folder.db"));
  EXPECT_NE(folder.find("warm_start.storage: is not a regular file"), std::string::npos) << folder;

  const std::string text_content(5000, 'x');
  dir_.write("text.db", text_content);
  const std::string text = error_of(dir_.file("text.db"));
  // Refused by its header before SQLite opens it (the store-file check).
  EXPECT_NE(text.find("warm_start.storage: is not a SQLite database"), std::string::npos) << text;
  EXPECT_EQ(std::filesystem::file_size(dir_.file("text.db")), text_content.size());

  // A store whose trial rows cannot be decoded is refused before anything
  // is copied (the trials are read while checking the source).
  make_old_study(old_db(), 3);
  ASSERT_EQ(run_process({"/usr/bin/sqlite3", old_db(),
                         "UPDATE distributions SET distribution_json = '{bad' "
                         "WHERE distribution_id = (SELECT MIN(distribution_id) FROM "
                         "distributions);"},
                        dir_.path().string())
                .exit_code,
            0);
  const std::string broken = error_of(old_db());
  EXPECT_NE(broken.find("warm_start.storage: cannot read"), std::string::npos) << broken;
  EXPECT_FALSE(warm_started(*storage, "new"));
  EXPECT_TRUE(warm_trials(study).empty());
}

// hpsearch run with warm_start in space.json, --warm-start on the command
// line, a resumed run, and a bad section refused before the store is made.
TEST_F(WarmStartTest, CommandLineRunsTheBudgetBesidesTheWarmTrials) {
  make_old_study(old_db(), 8);
  auto space = [](int n_trials, const Json& warm) {
    Json doc{{"study", {{"name", "new"}, {"direction", "minimize"}, {"storage", "new.db"}}},
             {"sampler", {{"type", "tpe"}, {"seed", 1}}},
             {"budget", {{"n_trials", n_trials}}},
             {"objective", {{"type", "branin"}}},
             {"space",
              {{"x0", {{"type", "float"}, {"low", -5}, {"high", 5}}},
               {"x1", {{"type", "float"}, {"low", -5}, {"high", 5}}}}}};
    if (!warm.is_null()) doc["warm_start"] = warm;
    return doc.dump();
  };
  // Params x, y of the old study do not fit x0, x1: all 8 left out.
  dir_.write("miss.json", space(2, Json{{"storage", "old.db"}, {"study", "old"}}));
  auto r =
      run_process({HPSEARCH_CLI_PATH, "run", "miss.json", "--workers", "1", "--storage", "miss.db"},
                  dir_.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE((r.out + r.err)
                .find("warm start: 0 trials from old in old.db; 8 left out (0 out of "
                      "bounds, 8 missing params, 0 without a value)"),
            std::string::npos)
      << r.out << r.err;

  // A study of x0, x1 to start from.
  {
    SearchSpace s;
    s.add("x0", Distribution::make_float(-5, 5));
    s.add("x1", Distribution::make_float(-5, 5));
    auto storage = open_storage(dir_.file("v1.db"));
    Study v1 = Study::create(storage, "v1", StudyDirection::kMinimize, options_for(s));
    v1.optimize([](Trial& t) { return t.param("x0").get<double>(); }, {.n_trials = 6});
  }
  dir_.write("new.json", space(5, Json()));
  r = run_process(
      {HPSEARCH_CLI_PATH, "run", "new.json", "--workers", "1", "--warm-start", "v1.db:v1"},
      dir_.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("warm start: 6 trials from v1 in v1.db; 0 left out"),
            std::string::npos)
      << r.out << r.err;
  auto count = [&] {
    Study study = Study::load(open_storage(new_db()), "new");
    std::pair<int, int> n{0, 0};  // warm, new
    for (const auto& t : study.trials()) (t->is_warm_start() ? n.first : n.second)++;
    return n;
  };
  EXPECT_EQ(count(), (std::pair<int, int>{6, 5}));
  // Resumed with a larger budget: 3 more new trials, no second copy.
  r = run_process({HPSEARCH_CLI_PATH, "run", "new.json", "--workers", "1", "--warm-start",
                   "v1.db:v1", "--n-trials", "8"},
                  dir_.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(), (std::pair<int, int>{6, 8}));

  // A missing file is refused before the new store is created.
  dir_.write("bad.json", space(2, Json{{"storage", "absent.db"}}));
  r = run_process({HPSEARCH_CLI_PATH, "run", "bad.json", "--storage", "bad.db"},
                  dir_.path().string());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("warm_start.storage"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("bad.db")));
}

TEST_F(WarmStartTest, TpeUsesTheWarmHistory) {
  // 60 earlier trials, most near the optimum (2, -1); TPE with 10 startup trials
  // models from its first new trial on, so its suggestions concentrate near
  // the old optimum, unlike a cold start's (random during startup).
  make_old_study(old_db(), 60);
  double warm_dist = 0, cold_dist = 0;
  const int kSeeds = 16;
  for (int seed = 0; seed < kSeeds; ++seed) {
    const auto useed = static_cast<std::uint64_t>(seed);
    auto warm_store = std::make_shared<InMemoryStorage>();
    Study warm =
        Study::create(warm_store, "new", StudyDirection::kMinimize, options_for(space_2d(), useed));
    ASSERT_EQ(warm_start(warm, {.storage = old_db(), .study = "old"}, "memory").copied, 60);
    Study cold = Study::create(std::make_shared<InMemoryStorage>(), "new",
                               StudyDirection::kMinimize, options_for(space_2d(), useed));
    Trial w = warm.ask();
    Trial c = cold.ask();
    EXPECT_NE(w.params(), c.params());
    warm_dist += std::sqrt(bowl(w.param("x").get<double>(), w.param("y").get<double>(), 2, -1));
    cold_dist += std::sqrt(bowl(c.param("x").get<double>(), c.param("y").get<double>(), 2, -1));
  }
  // Deterministic (fixed seeds); a cold first point is uniform on the square.
  EXPECT_LT(warm_dist, 0.5 * cold_dist)
      << "warm " << warm_dist / kSeeds << " cold " << cold_dist / kSeeds;
}

}  // namespace
}  // namespace hps
