// Tests of `hpsearch validate` and `hpsearch run --dry-run` (cli/plan.cpp),
// run as child processes in a temporary directory: the plan, nothing
// created, bad files, the differences from an existing study (and run's
// own warning on a changed space), --try-output and its "did you mean".
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "search/json_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testsupport::ProcessResult;
using testsupport::TempDir;

// A command objective study over lr (log scale), optimizer and momentum
// (only with sgd); its program reports a final value at once. TPE and
// median pruner with their defaults.
Json space_doc() {
  return Json::parse(R"({
    "study": {"name": "demo", "direction": "minimize", "storage": "demo.db"},
    "sampler": {"type": "tpe", "seed": 7},
    "pruner": {"type": "median"},
    "budget": {"n_trials": 2},
    "objective": {"type": "command",
                  "argv": ["/bin/sh", "-c", "echo 'hpsearch: {{\"value\": 1}}'", "x", "--lr", "{lr}",
                           "--momentum", "{momentum?}"],
                  "env": {"OPT": "{optimizer}"},
                  "metrics": {"name": "val_loss"}},
    "space": {
      "lr": {"type": "float", "low": 0.001, "high": 0.1, "log": true},
      "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
      "momentum": {"type": "float", "low": 0.0, "high": 0.9, "when": {"optimizer": "sgd"}}
    }
  })");
}

class ValidateTest : public ::testing::Test {
 protected:
  ProcessResult cli(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {HPSEARCH_CLI_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return testsupport::run_process(argv, dir_.path().string());
  }
  void write_space(const Json& doc, const std::string& name = "space.json") const {
    dir_.write(name, doc.dump(2));
  }
  // The names in the test's directory.
  std::set<std::string> entries() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_.path()))
      out.insert(e.path().filename().string());
    return out;
  }
  TempDir dir_{"validate"};
};

TEST_F(ValidateTest, ValidFilePrintsThePlanWithDefaultsResolvedAndCreatesNothing) {
  write_space(space_doc());
  const std::set<std::string> before = entries();
  ProcessResult r = cli({"validate", "space.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("space.json: valid"));
  EXPECT_THAT(r.out, HasSubstr("the storage does not exist yet: run would create it"));
  // Params with their distributions, conditions included.
  EXPECT_THAT(r.out, HasSubstr("lr         float [0.001, 0.1] log"));
  EXPECT_THAT(r.out, HasSubstr("momentum   float [0, 0.9] when optimizer = 'sgd'"));
  EXPECT_THAT(r.out, HasSubstr("optimizer  categorical ['adam', 'sgd']"));
  // The sampler's and pruner's defaults, as they would be used.
  EXPECT_THAT(r.out, HasSubstr("Sampler: tpe\n  "));
  EXPECT_THAT(r.out, HasSubstr("n_ei_candidates=24"));
  EXPECT_THAT(r.out, HasSubstr("seed=7"));
  EXPECT_THAT(r.out, HasSubstr("Pruner: median\n  interval_steps=1, n_min_trials=1, "
                               "n_startup_trials=5, n_warmup_steps=0\n"));
  // An example command line, labelled as one, with its placeholders filled.
  EXPECT_THAT(r.out, HasSubstr("example only: trial 0 of a new study"));
  EXPECT_THAT(r.out, HasSubstr("argv: /bin/sh -c 'echo '\\''hpsearch: {\"value\": 1}'\\''' x"));
  EXPECT_THAT(r.out, HasSubstr("--lr 0."));
  EXPECT_THAT(r.out, HasSubstr("env HPSEARCH_TRIAL_NUMBER=0"));
  EXPECT_THAT(r.out, HasSubstr("env OPT="));
  EXPECT_THAT(r.out, HasSubstr("metrics: {\"name\":\"val_loss\"}"));
  EXPECT_THAT(r.out, HasSubstr("Budget: n_trials=2, timeout_s=none, max_failed_trials=none, "
                               "fail_fast=true (a run stops when its first 2 finished "
                               "trials all fail)"));
  EXPECT_THAT(r.out, HasSubstr("Artifacts:\n  checkpoints=true"));
  EXPECT_EQ(entries(), before);  // no store, no log folder, no lock

  // run --dry-run: the same plan, nothing started or created.
  ProcessResult dry = cli({"run", "space.json", "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(dry.out, r.out);
  EXPECT_EQ(entries(), before);
}

TEST_F(ValidateTest, JsonFormatHoldsTheResolvedSettings) {
  Json doc = space_doc();
  doc.erase("pruner");
  doc["sampler"] = {{"type", "random"}};
  write_space(doc);
  ProcessResult r = cli({"validate", "space.json", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json plan = Json::parse(r.out);
  EXPECT_EQ(plan["valid"], true);
  EXPECT_EQ(plan["accepted"], true);
  EXPECT_EQ(plan["sampler"], Json({{"type", "random"}, {"seed", nullptr}}));
  EXPECT_EQ(plan["pruner"], Json({{"type", "none"}}));
  EXPECT_EQ(plan["study"]["run"], "create");
  ASSERT_EQ(plan["space"].size(), 3U);
  EXPECT_EQ(plan["space"][0]["name"], "lr");
  EXPECT_EQ(plan["space"][0]["distribution"]["log"], true);
  const Json& example = plan["objective"]["example"];
  const double lr = example["params"]["lr"].get<double>();
  EXPECT_GE(lr, 0.001);
  EXPECT_LE(lr, 0.1);
  EXPECT_EQ(example["env"]["OPT"], example["params"]["optimizer"]);
  EXPECT_EQ(plan["budget"]["n_trials"], 2);
}

// A program that would not start says so, with what to write instead:
// a script named without './' (looked up on PATH only), one that is not
// executable, one that is missing; nothing is said of one that starts. A
// trial that runs it fails with the same advice.
TEST_F(ValidateTest, AProgramThatWouldNotStartIsNamedWithWhatToWriteInstead) {
  Json doc = space_doc();
  dir_.write("train.py", "print('hpsearch: {\"value\": 1}')\n");
  auto warning_for = [&](const Json& argv) {
    doc["objective"]["argv"] = argv;
    write_space(doc);
    ProcessResult r = cli({"validate", "space.json", "--format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Json::parse(r.out)["objective"]["example"].value("warning", "");
  };
  EXPECT_THAT(warning_for({"train.py", "--lr", "{lr}"}),
              AllOf(HasSubstr("objective.argv[0]: 'train.py' is not on PATH"),
                    HasSubstr("not in the program's folder, where it is"),
                    HasSubstr("write './train.py'"), HasSubstr("[\"python3\", \"train.py\"")));
  EXPECT_THAT(warning_for({"./train.py"}),
              AllOf(HasSubstr("'./train.py' is not executable: chmod +x it"),
                    HasSubstr("[\"python3\", \"./train.py\"")));
  EXPECT_THAT(warning_for({"./missing.py"}), HasSubstr("'./missing.py': no such file"));
  EXPECT_EQ(warning_for({"/usr/bin/python3", "train.py"}), "");
  EXPECT_EQ(warning_for({"python3", "train.py"}), "");
  fs::permissions(dir_.path() / "train.py", fs::perms::owner_exec, fs::perm_options::add);
  EXPECT_EQ(warning_for({"./train.py"}), "");

  doc["objective"]["argv"] = {"train.py"};
  doc["budget"] = {{"n_trials", 1}};
  write_space(doc);
  ProcessResult run = cli({"run", "space.json", "--workers", "1"});
  EXPECT_NE(run.exit_code, 0);
  ProcessResult trials = cli({"trials", "demo.db", "--format", "json"});
  ASSERT_EQ(trials.exit_code, 0) << trials.err;
  const Json t = Json::parse(trials.out);
  ASSERT_EQ(t.size(), 1U);
  EXPECT_THAT(t[0]["fail_reason"].get<std::string>(),
              AllOf(HasSubstr("cannot run 'train.py'"), HasSubstr("write './train.py'")));
}

// A space.json given to a read command where its store belongs: the error
// names the store it declares; any other non-store file keeps the plain
// error. Nothing is created.
TEST_F(ValidateTest, AReadCommandGivenASpaceJsonNamesItsStore) {
  write_space(space_doc());
  dir_.write("other.json", "{\"a\": 1}");
  const std::set<std::string> before = entries();
  for (const char* command : {"status", "best", "trials"}) {
    ProcessResult r = cli({command, "space.json"});
    EXPECT_EQ(r.exit_code, 2) << command;
    EXPECT_THAT(r.err, HasSubstr("STORAGE: space.json is a space.json, not a store: give its "
                                 "study's store, demo.db (study.storage)"))
        << command;
  }
  ProcessResult other = cli({"status", "other.json"});
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_THAT(other.err, HasSubstr("is not a SQLite database (no SQLite header)"));
  EXPECT_EQ(entries(), before);
}

// artifacts.path whose folder does not exist (a typo, a share that is not
// mounted) is refused by validate and run alike, and nothing is made; one
// whose parent exists is fine (its last level is made by run).
TEST_F(ValidateTest, AnArtifactsPathOnAMissingFolderIsRefused) {
  Json doc = space_doc();
  doc["artifacts"] = {{"path", "no-such-share/ckpt"}};
  write_space(doc);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"validate", "space.json"},
        std::vector<std::string>{"run", "space.json", "--workers", "1"}}) {
    ProcessResult r = cli(args);
    EXPECT_EQ(r.exit_code, 2) << args[0];
    EXPECT_THAT(r.err, AllOf(HasSubstr("artifacts.path: '"), HasSubstr("no-such-share/ckpt"),
                             HasSubstr("neither it nor its folder")))
        << args[0];
    EXPECT_FALSE(fs::exists(dir_.path() / "no-such-share"));
  }
  doc["artifacts"] = {{"path", "ckpt"}};
  write_space(doc);
  EXPECT_EQ(cli({"validate", "space.json"}).exit_code, 0);
}

TEST_F(ValidateTest, BadFileIsRefusedNamingTheField) {
  Json doc = space_doc();
  doc["space"]["lr"]["low"] = 0;  // log scale needs low > 0
  write_space(doc);
  const std::set<std::string> before = entries();
  ProcessResult r = cli({"validate", "space.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("space.lr"));
  EXPECT_THAT(r.out, Not(HasSubstr("valid")));

  doc = space_doc();
  doc["pruner"] = {{"type", "median"}, {"n_startup_trial", 3}};
  write_space(doc);
  r = cli({"run", "space.json", "--dry-run"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("pruner.n_startup_trial: unknown key (did you mean "
                               "'n_startup_trials'?)"));
  EXPECT_EQ(entries(), before);
}

TEST_F(ValidateTest, ExistingStudyDifferencesParamByParam) {
  write_space(space_doc());
  ProcessResult run = cli({"run", "space.json", "--workers", "1"});
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;

  ProcessResult same = cli({"validate", "space.json"});
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_THAT(same.out, HasSubstr("the study exists (2 trials, 2 finished): run would continue"));
  EXPECT_THAT(same.out, HasSubstr("no difference from the settings stored with it"));

  Json doc = space_doc();
  doc["space"]["lr"]["low"] = 0.0001;
  doc["space"].erase("momentum");
  doc["objective"]["argv"][4] = "--lr={lr}";
  doc["objective"]["argv"].erase(5);
  doc["objective"]["argv"].erase(5);
  doc["objective"]["argv"].erase(5);
  doc["space"]["batch"] = {{"type", "ordinal"}, {"values", {16, 32}}};
  doc["sampler"]["seed"] = 8;
  write_space(doc, "changed.json");
  const std::set<std::string> before = entries();
  ProcessResult r = cli({"validate", "changed.json", "--storage", "demo.db"});
  // A changed objective: run would refuse it (exit 2), naming the field.
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("run would REFUSE it"));
  EXPECT_THAT(r.out, HasSubstr("space.batch: added (ordinal [16, 32])"));
  EXPECT_THAT(r.out, HasSubstr("space.lr: float [0.001, 0.1] log -> float [0.0001, 0.1] log"));
  EXPECT_THAT(r.out,
              HasSubstr("space.momentum: removed (was float [0, 0.9] when optimizer = 'sgd')"));
  EXPECT_THAT(r.out, HasSubstr("objective.argv: "));
  EXPECT_THAT(r.out, HasSubstr("sampler.seed: 7 -> 8"));
  EXPECT_THAT(r.err, HasSubstr("objective: differs from the objective stored with study 'demo'"));
  EXPECT_EQ(entries(), before);

  // The objective as stored: run would continue, warning on the space.
  doc["objective"] = space_doc()["objective"];
  doc["space"]["momentum"] = space_doc()["space"]["momentum"];
  write_space(doc, "changed.json");
  r = cli({"validate", "changed.json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("run would continue it"));
  EXPECT_THAT(r.out, Not(HasSubstr("space.momentum")));

  // run's own warning on the changed space says the same, param by param.
  doc["budget"]["n_trials"] = 3;
  write_space(doc, "changed.json");
  ProcessResult again = cli({"run", "changed.json", "--workers", "1"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("the search space differs from the one stored with the study "
                                   "(space.batch: added (ordinal [16, 32]); space.lr: float "
                                   "[0.001, 0.1] log -> float [0.0001, 0.1] log)"));

  // Now stored: no difference left in the space.
  r = cli({"validate", "changed.json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("no difference from the settings stored with it"));
}

TEST_F(ValidateTest, ChangedDirectionIsRefusedAsRunRefusesIt) {
  write_space(space_doc());
  ASSERT_EQ(cli({"run", "space.json", "--workers", "1"}).exit_code, 0);
  Json doc = space_doc();
  doc["study"]["direction"] = "maximize";
  write_space(doc);
  ProcessResult r = cli({"validate", "space.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("study.direction: 'minimize' -> 'maximize'"));
  EXPECT_THAT(r.err, HasSubstr("study.direction: study 'demo' in demo.db was created to minimize"));
  ProcessResult run = cli({"run", "space.json", "--workers", "1"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("study.direction"));
}

// While a coordinator runs the study: validate reads the store, says so,
// and leaves the run alone.
TEST_F(ValidateTest, WorksWhileACoordinatorRunsTheStudy) {
  Json doc = space_doc();
  doc["objective"] = {{"type", "sleep"}, {"seconds", 60}, {"steps", 2}};
  doc["budget"]["n_trials"] = 1;
  write_space(doc);
  testsupport::BackgroundProcess run({HPSEARCH_CLI_PATH, "run", "space.json", "--workers", "1"},
                                     dir_.path().string(), dir_.file("run.out"),
                                     dir_.file("run.err"));
  ProcessResult r;
  ASSERT_TRUE(testsupport::wait_until([&] {
    r = cli({"validate", "space.json"});
    return r.out.find("a coordinator runs it now") != std::string::npos;
  })) << r.out
      << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("no difference from the settings stored with it"));
  EXPECT_TRUE(run.running());
  // The run stops as usual (Ctrl-C), its study intact.
  run.send_signal(SIGINT);
  ASSERT_TRUE(testsupport::wait_until([&] { return !run.running(); }));
  r = cli({"validate", "space.json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("a coordinator runs it now")));
  EXPECT_THAT(r.out, HasSubstr("no difference from the settings stored with it"));
}

TEST_F(ValidateTest, TryOutputPrintsStepsValuesAndAttrs) {
  Json doc = space_doc();
  doc["objective"]["metrics"] = {{"name", "val_loss"}, {"attrs", {"acc"}}};
  write_space(doc);
  dir_.write("out.txt",
             "loading data\n"
             "epoch 1 loss=0.9 val_loss=0.52 acc=0.80\n"
             "epoch 2 loss=0.7 val_loss=0.47 acc=0.85\n"
             "epoch 3 loss=0.6 val_loss=0.41 acc=0.88\n");
  ProcessResult r = cli({"validate", "space.json", "--try-output", "out.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("Try output out.txt (read by objective.metrics):\n"
                               "  step 1: 0.52\n  step 2: 0.47\n  step 3: 0.41\n"
                               "  final value: 0.41\n  attr acc = 0.88\n"));

  ProcessResult json =
      cli({"validate", "space.json", "--try-output", "out.txt", "--format", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json t = Json::parse(json.out)["try_output"];
  ASSERT_EQ(t["steps"].size(), 3U);
  EXPECT_EQ(t["steps"][1]["step"], 2);
  EXPECT_EQ(t["steps"][1]["value"], 0.47);
  EXPECT_EQ(t["final_value"], 0.41);
}

TEST_F(ValidateTest, TryOutputReadsReportLinesAndMetricsFiles) {
  Json doc = space_doc();
  doc["objective"].erase("metrics");
  write_space(doc);
  dir_.write("out.txt",
             "hpsearch: {\"step\": 1, \"value\": 0.5}\n"
             "hpsearch: {\"value\": 0.25, \"attrs\": {\"epochs\": 1}}\n");
  ProcessResult r = cli({"validate", "space.json", "--try-output", "out.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(read by report lines):\n  step 1: 0.5\n  final value: 0.25\n"
                               "  attr epochs = 1\n"));

  doc["objective"]["metrics"] = {{"name", "val_los"},
                                 {"source", {{"file", "{trial_dir}/metrics.csv"}}}};
  doc["objective"]["argv"] = {"/bin/sh", "-c", "true", "{trial_dir}"};
  write_space(doc);
  dir_.write("metrics.csv", "epoch,val_loss\n1,0.5\n");
  r = cli({"validate", "space.json", "--try-output", "metrics.csv"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("no column 'val_los' in its header (epoch, val_loss) "
                               "(did you mean 'val_loss'?)"));
}

TEST_F(ValidateTest, TryOutputWithAMetricNameTypoSaysDidYouMean) {
  Json doc = space_doc();
  doc["objective"]["metrics"] = {{"name", "val_los"}};
  write_space(doc);
  dir_.write("out.txt", "epoch 1 loss=0.9 val_loss=0.52\nepoch 2 loss=0.7 val_loss=0.47\n");
  ProcessResult r = cli({"validate", "space.json", "--try-output", "out.txt"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("no intermediate value"));
  EXPECT_THAT(r.out, HasSubstr("no final value: metric 'val_los' (objective.metrics.name) was "
                               "never seen"));
  EXPECT_THAT(r.out, HasSubstr("names seen with a number: 'loss', 'val_loss' (did you mean "
                               "'val_loss'?)"));

  // Not a command objective, or no such file: named errors.
  r = cli({"validate", "space.json", "--try-output", "missing.txt"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--try-output: cannot read 'missing.txt'"));
  r = cli({"validate", "space.json", "--try-output", "."});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--try-output: '.' is a folder, not a file"));
  doc["objective"] = {{"type", "branin"}};
  doc["space"] = {{"x0", {{"type", "float"}, {"low", -5}, {"high", 10}}},
                  {"x1", {{"type", "float"}, {"low", 0}, {"high", 15}}}};
  write_space(doc);
  r = cli({"validate", "space.json", "--try-output", "out.txt"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--try-output: reads the output of a \"command\" objective; this "
                               "study's objective.type is 'branin'"));
}

}  // namespace
}  // namespace hps
