// User artifacts (search/checkpoints.h ArtifactFolder; docs "Keep files from
// a trial"): files a trial keeps apart from its checkpoints. The embedded
// API (Trial::upload_artifact) and its errors; a command objective that
// writes into HPSEARCH_ARTIFACT_DIR, with a local worker (in place) and a
// remote one that shares no folder with the coordinator (uploaded through
// it); a folder over artifacts.max_artifact_bytes (a warning, the trial
// keeps its value); retention leaves user artifacts alone; `hpsearch
// artifacts` lists them and `artifacts get` copies them, verified, and
// refuses a crafted manifest.
//
// HPSEARCH_TEST_CLI=/path/to/hpsearch runs the CLI parts against another build.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/random_sampler.h"
#include "search/checkpoints.h"
#include "search/errors.h"
#include "search/storage.h"
#include "search/study.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using testsupport::ProcessResult;
using testsupport::read_file;
using testsupport::TempDir;

std::string cli_path() {
  const char* other = std::getenv("HPSEARCH_TEST_CLI");
  return other && *other ? other : HPSEARCH_CLI_PATH;
}

ProcessResult cli(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {cli_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return testsupport::run_process(argv, dir.path().string());
}

// The error text of `fn`, or "" when it does not throw Error.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A study "emb" in <dir>/emb.db whose trials keep their artifacts where
// `hpsearch artifacts` looks: <dir>/emb.logs/artifacts.
Study embedded_study(const TempDir& dir, std::uint64_t max_artifact_bytes = 1 << 20) {
  StudyOptions o;
  o.sampler = std::make_shared<RandomSampler>(1);
  o.artifact_root = dir.file("emb.logs/artifacts");
  o.max_artifact_bytes = max_artifact_bytes;
  return Study::load_if_exists(open_storage(dir.file("emb.db")), "emb", StudyDirection::kMinimize,
                               std::move(o));
}

TEST(UserArtifacts, EmbeddedUploadIsListedAndFetchedWithItsChecksumsVerified) {
  TempDir dir("user_artifacts");
  dir.write("model.txt", "weights 1 2 3\n");
  fs::create_directories(dir.file("plots/epochs"));
  dir.write("plots/loss.csv", "1,0.5\n2,0.25\n");
  dir.write("plots/epochs/3.csv", "3,0.125\n");
  Study study = embedded_study(dir);
  study.optimize(
      [&](Trial& t) {
        EXPECT_FALSE(t.artifact_dir().empty());
        t.upload_artifact(dir.file("model.txt"));
        t.upload_artifact(dir.file("plots"));
        // Files the trial writes into its folder itself are kept too.
        std::ofstream(fs::path(t.artifact_dir()) / "notes.txt") << "written in place\n";
        return 1.0;
      },
      {.n_trials = 1});
  auto trial = study.trials().at(0);
  ASSERT_EQ(trial->state, TrialState::kComplete);
  const std::uint64_t bytes = 14 + 13 + 8 + 17;
  EXPECT_EQ(trial->system_attrs.value(checkpoints::kAttrArtifacts, Json()),
            Json({{"files", 4}, {"bytes", bytes}}));
  const std::string folder = dir.file("emb.logs/artifacts/trial-0");
  struct stat st {};
  ASSERT_EQ(::stat(folder.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);  // owner-only
  EXPECT_TRUE(fs::exists(folder + ".manifest"));

  ProcessResult list = cli(dir, {"artifacts", "emb.db", "--format", "json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  Json rows = Json::parse(list.out);
  ASSERT_EQ(rows.size(), 1u) << list.out;
  EXPECT_EQ(rows[0]["user_artifacts"]["files"], 4);
  EXPECT_EQ(rows[0]["user_artifacts"]["bytes"], bytes);
  EXPECT_EQ(rows[0]["user_artifacts"]["folder_exists"], true);
  EXPECT_TRUE(rows[0]["checkpoint_step"].is_null());
  ProcessResult table = cli(dir, {"artifacts", "emb.db"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("User artifacts"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("Checkpoint snapshots"), std::string::npos) << table.out;

  ProcessResult get = cli(dir, {"artifacts", "get", "emb.db", "--trial", "0", "-o", "out"});
  ASSERT_EQ(get.exit_code, 0) << get.out << get.err;
  EXPECT_EQ(read_file(dir.file("out/model.txt")), "weights 1 2 3\n");
  EXPECT_EQ(read_file(dir.file("out/plots/loss.csv")), "1,0.5\n2,0.25\n");
  EXPECT_EQ(read_file(dir.file("out/plots/epochs/3.csv")), "3,0.125\n");
  EXPECT_EQ(read_file(dir.file("out/notes.txt")), "written in place\n");
  // A file already there is refused (nothing copied) unless --overwrite.
  dir.write("out/model.txt", "mine");
  ProcessResult again = cli(dir, {"artifacts", "get", "emb.db", "--trial", "0", "-o", "out"});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("exists: refused"), std::string::npos) << again.err;
  EXPECT_EQ(read_file(dir.file("out/model.txt")), "mine");
  ProcessResult over =
      cli(dir, {"artifacts", "get", "emb.db", "--trial", "0", "-o", "out", "--overwrite"});
  ASSERT_EQ(over.exit_code, 0) << over.err;
  EXPECT_EQ(read_file(dir.file("out/model.txt")), "weights 1 2 3\n");

  // A damaged file is found by its checksum.
  { std::ofstream(folder + "/model.txt", std::ios::trunc) << "weights 9 9 9\n"; }
  ProcessResult damaged = cli(dir, {"artifacts", "get", "emb.db", "--trial", "0", "-o", "out2"});
  EXPECT_NE(damaged.exit_code, 0);
  EXPECT_NE(damaged.err.find("model.txt"), std::string::npos) << damaged.err;
  EXPECT_NE(damaged.err.find("damaged"), std::string::npos) << damaged.err;
  EXPECT_FALSE(fs::exists(dir.file("out2/model.txt")));
}

TEST(UserArtifacts, UploadArtifactRefusesWhatItDocuments) {
  TempDir dir("user_artifacts");
  dir.write("small.txt", "0123456789");
  dir.write("big.bin", std::string(200, 'b'));
  fs::create_directories(dir.file("with_link"));
  dir.write("with_link/a.txt", "a");
  fs::create_symlink(dir.file("small.txt"), dir.file("with_link/l"));
  fs::create_symlink(dir.file("small.txt"), dir.file("link.txt"));
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  Study study = embedded_study(dir, 100);
  Trial t = study.ask();
  EXPECT_NE(error_of([&] { t.upload_artifact(dir.file("absent.txt")); }).find("missing"),
            std::string::npos);
  EXPECT_NE(error_of([&] { t.upload_artifact(dir.file("link.txt")); }).find("symbolic link"),
            std::string::npos);
  EXPECT_NE(error_of([&] { t.upload_artifact(dir.file("with_link")); }).find("symbolic link"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              t.upload_artifact(dir.file("fifo"));
            }).find("neither a regular file nor a folder"),
            std::string::npos);
  const std::string over = error_of([&] { t.upload_artifact(dir.file("big.bin")); });
  EXPECT_NE(over.find("artifacts.max_artifact_bytes"), std::string::npos) << over;
  t.upload_artifact(dir.file("small.txt"));
  // Nothing of the refused uploads was copied.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(t.artifact_dir()))
    names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"small.txt"});
  study.tell(t, 0.5);
  auto done = study.trials().at(0);
  EXPECT_EQ(done->system_attrs.value(checkpoints::kAttrArtifacts, Json()),
            Json({{"files", 1}, {"bytes", 10}}));

  // A Study without an artifact root gives trials no folder.
  Study plain =
      Study::load_if_exists(open_storage(dir.file("plain.db")), "plain", StudyDirection::kMinimize);
  Trial p = plain.ask();
  EXPECT_TRUE(p.artifact_dir().empty());
  EXPECT_NE(error_of([&] {
              p.upload_artifact(dir.file("small.txt"));
            }).find("StudyOptions::artifact_root"),
            std::string::npos);
}

// A manifest edited to name a path outside the folder, or a link, is
// refused by `artifacts get` before anything is copied.
TEST(UserArtifacts, GetRefusesACraftedManifest) {
  TempDir dir("user_artifacts");
  dir.write("model.txt", "m");
  Study study = embedded_study(dir);
  study.optimize(
      [&](Trial& t) {
        t.upload_artifact(dir.file("model.txt"));
        return 1.0;
      },
      {.n_trials = 1});
  const std::string manifest = dir.file("emb.logs/artifacts/trial-0.manifest");
  Json m = Json::parse(read_file(manifest));
  ASSERT_EQ(m["files"].size(), 1u) << m.dump();
  for (const char* path : {"../x", "/tmp/x", "a/../../x"}) {
    Json crafted = m;
    crafted["files"][0]["path"] = path;
    { std::ofstream(manifest, std::ios::trunc) << crafted.dump(); }
    ProcessResult get = cli(dir, {"artifacts", "get", "emb.db", "--trial", "0", "-o", "out"});
    EXPECT_NE(get.exit_code, 0) << path;
    EXPECT_NE(get.err.find("not a plain relative path"), std::string::npos) << path << get.err;
    EXPECT_FALSE(fs::exists(dir.file("x")));
    EXPECT_FALSE(fs::exists(dir.file("out/model.txt")));
  }
  Json with_link = m;
  with_link["files"].push_back({{"path", "l"}, {"kind", "link"}, {"target", "/etc/passwd"}});
  { std::ofstream(manifest, std::ios::trunc) << with_link.dump(); }
  fs::create_symlink("/etc/passwd", dir.file("emb.logs/artifacts/trial-0/l"));
  ProcessResult get = cli(dir, {"artifacts", "get", "emb.db", "--trial", "0", "-o", "out"});
  EXPECT_NE(get.exit_code, 0);
  EXPECT_NE(get.err.find("link entry 'l' leads outside (to '/etc/passwd'): refused"),
            std::string::npos)
      << get.err;
  EXPECT_FALSE(fs::exists(dir.file("out/l")));
  // A link that stays inside is still no user artifact.
  with_link["files"].back()["target"] = "model.txt";
  { std::ofstream(manifest, std::ios::trunc) << with_link.dump(); }
  fs::remove(dir.file("emb.logs/artifacts/trial-0/l"));
  fs::create_symlink("model.txt", dir.file("emb.logs/artifacts/trial-0/l"));
  get = cli(dir, {"artifacts", "get", "emb.db", "--trial", "0", "-o", "out"});
  EXPECT_NE(get.exit_code, 0);
  EXPECT_NE(get.err.find("symbolic link: refused"), std::string::npos) << get.err;
  EXPECT_FALSE(fs::exists(dir.file("out/l")));
}

// ------------------------------------------------------------ command objectives

// Checkpoints each epoch (so retention has a lineage to remove), then
// leaves a prediction file of `size` extra bytes, a plot in a subfolder
// and a symbolic link (never kept) in HPSEARCH_ARTIFACT_DIR, also given as
// {artifact_dir}.
constexpr const char* kTrainPy = R"(import json, os, sys
art = os.environ["HPSEARCH_ARTIFACT_DIR"]
assert sys.argv[1] == art, (sys.argv[1], art)
size = int(sys.argv[2])
ck = os.environ["HPSEARCH_CHECKPOINT_DIR"]
x = json.loads(os.environ["HPSEARCH_PARAMS"])["x"]
for epoch in (1, 2):
    with open(os.path.join(ck, "state.json"), "w") as f:
        json.dump({"epoch": epoch}, f)
    print("hpsearch: " + json.dumps({"step": epoch, "value": x / epoch}), flush=True)
os.makedirs(os.path.join(art, "plots"), exist_ok=True)
with open(os.path.join(art, "pred.txt"), "w") as f:
    f.write("x=%r\n" % x + "p" * size)
with open(os.path.join(art, "plots", "curve.csv"), "w") as f:
    f.write("2,%r\n" % (x / 2))
os.symlink("/etc/passwd", os.path.join(art, "passwd"))
print("hpsearch: " + json.dumps({"value": x / 2}), flush=True)
)";

std::string space(int n_trials, int extra_bytes, const Json& artifacts = Json()) {
  Json doc = {
      {"study", {{"name", "art"}, {"direction", "minimize"}, {"storage", "art.db"}}},
      {"sampler", {{"type", "random"}, {"seed", 5}}},
      {"budget", {{"n_trials", n_trials}}},
      {"objective",
       {{"type", "command"},
        {"argv", {"/usr/bin/python3", "train.py", "{artifact_dir}", std::to_string(extra_bytes)}},
        {"grace_s", 2}}},
      {"space", {{"x", {{"type", "float"}, {"low", 1}, {"high", 2}}}}}};
  if (!artifacts.is_null()) doc["artifacts"] = artifacts;
  return doc.dump();
}

Json trials(const TempDir& dir) {
  ProcessResult r = cli(dir, {"trials", "art.db", "--format", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out, nullptr, false);
  return j.is_array() ? j : Json::array();
}

// What `x` makes the program write into pred.txt with `extra` bytes.
std::string prediction(const Json& trial, int extra) {
  const double x = trial["params"]["x"].get<double>();
  // Python's repr of a float: the shortest text that reads back the same.
  std::string text = fmt::format("{}", x);
  return "x=" + text + "\n" + std::string(static_cast<std::size_t>(extra), 'p');
}

// Local workers write in place; retention (keep_best 0) removes every
// lineage folder but never the user artifacts.
TEST(UserArtifactsCommand, ALocalProgramsFilesAreKeptInPlaceAndRetentionLeavesThem) {
  TempDir dir("user_artifacts_cmd");
  dir.write("train.py", kTrainPy);
  dir.write("space.json", space(2, 10, Json{{"keep_best", 0}}));
  ProcessResult r = cli(dir, {"run", "space.json", "--workers", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  Json t = trials(dir);
  ASSERT_EQ(t.size(), 2u);
  for (const Json& trial : t) {
    const int n = trial["number"].get<int>();
    ASSERT_EQ(trial["state"], "COMPLETE") << trial.dump(1);
    const std::string folder = dir.file("art.logs/artifacts/trial-" + std::to_string(n));
    // pred.txt and plots/curve.csv; the link was not kept.
    EXPECT_EQ(trial["system_attrs"]["artifacts"]["files"], 2) << trial.dump(1);
    EXPECT_EQ(read_file(folder + "/pred.txt"), prediction(trial, 10));
    EXPECT_TRUE(fs::exists(folder + "/plots/curve.csv"));
    EXPECT_FALSE(fs::exists(fs::symlink_status(folder + "/passwd")));
    // Retention removed the lineage's checkpoints and says so.
    EXPECT_EQ(trial["system_attrs"]["checkpoint"].value("deleted", false), true) << trial.dump(1);
    EXPECT_FALSE(fs::exists(checkpoints::lineage_path(dir.file("art.logs/checkpoints"), n)));
  }
  ProcessResult get = cli(dir, {"artifacts", "get", "art.db", "--trial", "1", "-o", "out"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(read_file(dir.file("out/pred.txt")), prediction(t[1], 10));
}

TEST(UserArtifactsCommand, AFolderOverTheLimitGivesAWarningAndTheTrialKeepsItsValue) {
  TempDir dir("user_artifacts_cmd");
  dir.write("train.py", kTrainPy);
  dir.write("space.json", space(1, 500, Json{{"max_artifact_bytes", 100}}));
  ProcessResult r = cli(dir, {"run", "space.json", "--workers", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  Json t = trials(dir);
  ASSERT_EQ(t.size(), 1u);
  ASSERT_EQ(t[0]["state"], "COMPLETE") << t[0].dump(1);
  EXPECT_EQ(t[0]["value"].get<double>(), t[0]["params"]["x"].get<double>() / 2);
  const std::string warning = t[0]["user_attrs"].value("artifact_warning", std::string());
  EXPECT_NE(warning.find("artifacts.max_artifact_bytes"), std::string::npos) << t[0].dump(1);
  EXPECT_FALSE(t[0]["system_attrs"].contains("artifacts"));
  EXPECT_FALSE(fs::exists(dir.file("art.logs/artifacts/trial-0")));
  ProcessResult list = cli(dir, {"artifacts", "art.db"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("not kept"), std::string::npos) << list.out;
}

// A worker that shares no folder with the coordinator (its own --log-dir,
// so its checkpoint root holds no coordinator token): the artifacts are
// uploaded through the coordinator before the trial ends, then the
// worker's copy is removed.
TEST(UserArtifactsCommand, ARemoteWorkersArtifactsArriveAtTheCoordinator) {
  TempDir dir("user_artifacts_cmd");
  dir.write("train.py", kTrainPy);
  dir.write("space.json", space(1, 3000000));  // 3 MB: several pieces
  const std::string endpoint = "ipc://" + dir.file("sock");
  testsupport::BackgroundProcess run(
      {cli_path(), "run", "space.json", "--workers", "0", "--bind", endpoint}, dir.path().string(),
      dir.file("run.out"), dir.file("run.err"));
  testsupport::BackgroundProcess worker(
      {cli_path(), "worker", "--connect", endpoint, "--log-dir", dir.file("A"), "--allow-command"},
      dir.path().string(), dir.file("a.out"), dir.file("a.err"));
  ProcessResult r = run.wait();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << read_file(dir.file("a.err"));
  worker.wait();
  Json t = trials(dir);
  ASSERT_EQ(t.size(), 1u);
  ASSERT_EQ(t[0]["state"], "COMPLETE") << t[0].dump(1);
  EXPECT_FALSE(t[0]["user_attrs"].contains("artifact_warning")) << t[0].dump(1);
  EXPECT_EQ(t[0]["system_attrs"]["artifacts"]["files"], 2) << t[0].dump(1);
  EXPECT_NE(read_file(dir.file("a.err")).find("uploading its artifacts"), std::string::npos)
      << read_file(dir.file("a.err"));
  EXPECT_EQ(read_file(dir.file("art.logs/artifacts/trial-0/pred.txt")), prediction(t[0], 3000000));
  EXPECT_TRUE(fs::exists(dir.file("art.logs/artifacts/trial-0.manifest")));
  EXPECT_FALSE(fs::exists(dir.file("A/artifacts/trial-0")));
  ProcessResult get = cli(dir, {"artifacts", "get", "art.db", "--trial", "0", "-o", "out"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(read_file(dir.file("out/plots/curve.csv")),
            read_file(dir.file("art.logs/artifacts/trial-0/plots/curve.csv")));
}

}  // namespace
}  // namespace hps
