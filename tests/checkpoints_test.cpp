// Tests of search/checkpoints.h: a lineage's folder (snapshots, restore,
// damaged or planted snapshots), the retry attrs and carried intermediate
// values (search/trial_lifecycle.h), retention, and a Study whose
// interrupted trial continues from its checkpoint.
#include "search/checkpoints.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "search/errors.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/trial_lifecycle.h"
#include "tests/support/temp_dir.h"

namespace hps::checkpoints {
namespace {

namespace fs = std::filesystem;
using testsupport::read_file;
using testsupport::TempDir;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

ino_t inode(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

// ------------------------------------------------------------ LineageFolder

TEST(LineageFolderTest, RestoresTheFilesAsTheyWereAtTheReportedStep) {
  TempDir dir("ckpt");
  const std::string root = dir.file("checkpoints");
  LineageFolder f(root, 7);
  EXPECT_EQ(f.path(), fs::absolute(lineage_path(root, 7)).lexically_normal().string());
  ASSERT_EQ(f.prepare(std::nullopt).resume_step, std::nullopt);
  const fs::path work = f.work_dir();
  write(work / "model.pt", "weights at 3");
  write(work / "sub/opt.pt", "optimizer at 3");
  fs::create_symlink("model.pt", work / "latest");
  auto s3 = f.snapshot(3);
  ASSERT_TRUE(s3.taken) << s3.why;
  // The program goes on: step 4's files are half written when it is lost.
  write(work / "model.pt", "weights at 4 (half");
  write(work / "extra.tmp", "junk");
  fs::remove_all(work / "sub");

  LineageFolder again(root, 7);
  Prepared p = again.prepare(3);
  EXPECT_EQ(p.resume_step, 3);
  EXPECT_EQ(p.warning, "");
  EXPECT_EQ(read_file((work / "model.pt").string()), "weights at 3");
  EXPECT_EQ(read_file((work / "sub/opt.pt").string()), "optimizer at 3");
  EXPECT_FALSE(fs::exists(work / "extra.tmp"));
  EXPECT_TRUE(fs::is_symlink(work / "latest"));
  EXPECT_EQ(fs::read_symlink(work / "latest"), "model.pt");
  // The restored files are copies: writing them leaves the snapshot alone.
  write(work / "model.pt", "changed");
  EXPECT_EQ(read_file((fs::path(again.path()) / "snapshot-3/model.pt").string()), "weights at 3");
  // Owner-only.
  struct stat st {};
  ASSERT_EQ(::stat(again.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(LineageFolderTest, UnchangedFilesAreLinkedAndOldSnapshotsGo) {
  TempDir dir("ckpt");
  LineageFolder f(dir.file("c"), 0);
  f.prepare(std::nullopt);
  const fs::path work = f.work_dir(), lineage = f.path();
  write(work / "data.bin", std::string(100000, 'd'));
  write(work / "model.pt", "m1");
  ASSERT_TRUE(f.snapshot(1).taken);
  write(work / "model.pt", "m2");
  ASSERT_TRUE(f.snapshot(2).taken);
  EXPECT_EQ(inode(lineage / "snapshot-1/data.bin"), inode(lineage / "snapshot-2/data.bin"));
  EXPECT_NE(inode(lineage / "snapshot-1/model.pt"), inode(lineage / "snapshot-2/model.pt"));
  EXPECT_EQ(f.snapshot_steps(), (std::vector<std::int64_t>{1, 2}));
  f.keep_only(2);
  EXPECT_EQ(f.snapshot_steps(), (std::vector<std::int64_t>{2}));
  EXPECT_FALSE(fs::exists(lineage / "snapshot-1.manifest"));
  EXPECT_EQ(read_file((lineage / "snapshot-2/data.bin").string()), std::string(100000, 'd'));
  LineageFolder g(dir.file("c"), 0);
  EXPECT_EQ(g.prepare(2).resume_step, 2);
  EXPECT_EQ(read_file((work / "model.pt").string()), "m2");
}

TEST(LineageFolderTest, AnEmptyFolderIsNotSnapshot) {
  TempDir dir("ckpt");
  LineageFolder f(dir.file("c"), 1);
  f.prepare(std::nullopt);
  auto s = f.snapshot(1);
  EXPECT_FALSE(s.taken);
  EXPECT_EQ(s.why, "");
  EXPECT_TRUE(f.snapshot_steps().empty());
}

TEST(LineageFolderTest, DamagedSnapshotsStartFromScratchNamingTheFile) {
  TempDir dir("ckpt");
  const std::string root = dir.file("c");
  struct Case {
    std::string name;
    std::function<void(const fs::path& lineage)> damage;
    std::string expected;  // in the warning
  };
  const std::vector<Case> cases = {
      {"truncated", [](const fs::path& l) { fs::resize_file(l / "snapshot-5/model.pt", 3); },
       "model.pt: 3 bytes, the manifest says 8 (truncated?)"},
      {"flipped byte", [](const fs::path& l) { write(l / "snapshot-5/model.pt", "weightsX"); },
       "damaged"},
      {"file removed", [](const fs::path& l) { fs::remove(l / "snapshot-5/model.pt"); },
       "model.pt: missing"},
      {"file added", [](const fs::path& l) { write(l / "snapshot-5/planted", "x"); },
       "planted: not in the manifest"},
      {"manifest garbage", [](const fs::path& l) { write(l / "snapshot-5.manifest", "{]"); },
       "snapshot-5.manifest"},
      {"manifest of another step",
       [](const fs::path& l) { write(l / "snapshot-5.manifest", R"({"step": 4, "files": []})"); },
       "not a manifest of step 5"},
      {"manifest escapes",
       [](const fs::path& l) {
         write(l / "snapshot-5.manifest",
               R"({"step": 5, "files": [{"path": "../../x", "kind": "dir"}]})");
       },
       "not a plain relative path"},
      {"snapshot gone", [](const fs::path& l) { fs::remove_all(l / "snapshot-5"); }, "missing"},
      {"snapshot is a link",
       [](const fs::path& l) {
         fs::rename(l / "snapshot-5", l / "elsewhere");
         fs::create_directory_symlink(l / "elsewhere", l / "snapshot-5");
       },
       "symbolic link"},
  };
  std::int64_t lineage = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LineageFolder f(root, ++lineage);
    f.prepare(std::nullopt);
    write(fs::path(f.work_dir()) / "model.pt", "weights!");
    ASSERT_TRUE(f.snapshot(5).taken);
    write(fs::path(f.work_dir()) / "model.pt", "later");
    c.damage(f.path());
    Prepared p = LineageFolder(root, lineage).prepare(5);
    EXPECT_EQ(p.resume_step, std::nullopt);
    EXPECT_NE(p.warning.find(c.expected), std::string::npos) << p.warning;
    EXPECT_TRUE(fs::is_directory(f.work_dir()));
    EXPECT_TRUE(fs::is_empty(f.work_dir())) << "a run from scratch gets an empty folder";
  }
}

TEST(LineageFolderTest, LimitsAndPlantedLinksAreRefused) {
  TempDir dir("ckpt");
  const std::string root = dir.file("c");
  {
    LineageFolder f(root, 1, /*max_snapshot_bytes=*/10);
    f.prepare(std::nullopt);
    write(fs::path(f.work_dir()) / "big", std::string(11, 'b'));
    auto s = f.snapshot(1);
    EXPECT_FALSE(s.taken);
    EXPECT_NE(s.why.find("over 10 (artifacts.max_snapshot_bytes)"), std::string::npos) << s.why;
    EXPECT_TRUE(f.snapshot_steps().empty());
  }
  {
    // work/ replaced by a link to another folder: never followed.
    LineageFolder f(root, 2);
    f.prepare(std::nullopt);
    fs::create_directories(dir.file("victim"));
    write(dir.path() / "victim/secret", "s");
    fs::remove_all(f.work_dir());
    fs::create_directory_symlink(dir.file("victim"), f.work_dir());
    auto s = f.snapshot(1);
    EXPECT_FALSE(s.taken);
    EXPECT_NE(s.why.find("symbolic link"), std::string::npos) << s.why;
    // prepare() replaces the link with a folder; the target is untouched.
    LineageFolder(root, 2).prepare(std::nullopt);
    EXPECT_FALSE(fs::is_symlink(f.work_dir()));
    EXPECT_EQ(read_file((dir.path() / "victim/secret").string()), "s");
  }
  {
    // The lineage folder itself replaced by a link: refused.
    fs::create_directories(dir.file("other"));
    fs::create_directory_symlink(dir.file("other"), lineage_path(root, 3));
    EXPECT_THROW(LineageFolder(root, 3), Error);
  }
}

// What a snapshot leaves out, named once: a link that leads outside work/
// (absolute, or climbing out through ".."), a FIFO, a name that is not
// UTF-8. A link that stays inside is kept and restored as a link. A
// manifest that names a link leading outside (crafted, or from a peer) is
// refused when restoring: the retry starts from scratch.
// Folders nested deeper than kMaxTreeDepth: the snapshot is not taken and
// says why (the walk runs while the program is paused; a deep chain would
// make it cost depth x entries); the earlier snapshot stays the resume
// point. A tree just within the limit is kept whole.
TEST(LineageFolderTest, FoldersNestedTooDeepAreRefusedNamingThePath) {
  TempDir dir("ckpt");
  LineageFolder f(dir.file("c"), 4);
  f.prepare(std::nullopt);
  const fs::path work = f.work_dir();
  fs::path deep = work;
  for (int i = 0; i < checkpoints::kMaxTreeDepth - 1; ++i) deep /= "d";
  fs::create_directories(deep);
  write(deep / "leaf", "x");  // at depth kMaxTreeDepth - 1: kept
  auto ok = f.snapshot(1);
  ASSERT_TRUE(ok.taken) << ok.why;
  fs::create_directories(deep / "d");
  write(deep / "d" / "leaf", "y");  // one level more: refused
  auto refused = f.snapshot(2);
  EXPECT_FALSE(refused.taken);
  EXPECT_NE(refused.why.find("folders nested deeper than " +
                             std::to_string(checkpoints::kMaxTreeDepth) + " levels"),
            std::string::npos)
      << refused.why;
  EXPECT_EQ(f.snapshot_steps(), std::vector<std::int64_t>{1});
}

TEST(LineageFolderTest, LinksLeadingOutsideAndSpecialFilesAreLeftOutAndNamed) {
  TempDir dir("ckpt");
  const std::string root = dir.file("c");
  LineageFolder f(root, 4);
  f.prepare(std::nullopt);
  const fs::path work = f.work_dir();
  write(work / "model.pt", "m");
  fs::create_directories(work / "sub");
  fs::create_symlink("../model.pt", work / "sub/last.pt");  // inside: kept
  fs::create_symlink("/etc/passwd", work / "abs");
  fs::create_symlink("../../../victim", work / "sub/up");
  ASSERT_EQ(::mkfifo((work / "fifo").c_str(), 0600), 0);
  write(work / std::string("bad\xff\xfe"
                           "name"),
        "x");
  auto s = f.snapshot(1);
  ASSERT_TRUE(s.taken) << s.why;
  for (const char* named :
       {"abs: a symbolic link that leads outside the folder (to '/etc/passwd')",
        "sub/up: a symbolic link that leads outside", "fifo: not a regular file",
        "bad\xef\xbf\xbd\xef\xbf\xbd"
        "name: its name is not UTF-8"})
    EXPECT_NE(s.skipped.find(named), std::string::npos) << named << " in " << s.skipped;
  EXPECT_EQ(s.skipped.find("last.pt"), std::string::npos) << s.skipped;
  const std::string manifest = read_file(f.path() + "/snapshot-1.manifest");
  EXPECT_NE(manifest.find("sub/last.pt"), std::string::npos);
  EXPECT_EQ(manifest.find("abs"), std::string::npos);
  EXPECT_EQ(manifest.find("fifo"), std::string::npos);
  // Named once: the next step's snapshot says nothing new.
  auto again = f.snapshot(2);
  ASSERT_TRUE(again.taken);
  EXPECT_EQ(again.skipped, "");
  f.keep_only(2);
  {
    LineageFolder g(root, 4);
    ASSERT_EQ(g.prepare(2).resume_step, 2);
    EXPECT_TRUE(fs::is_symlink(work / "sub/last.pt"));
    EXPECT_EQ(read_file((work / "sub/last.pt").string()), "m");
    EXPECT_FALSE(fs::exists(fs::symlink_status(work / "abs")));
  }
  // A manifest naming a link that leads outside: refused, from scratch.
  std::string text = read_file(f.path() + "/snapshot-2.manifest");
  const std::string inside = "\"target\":\"../model.pt\"";
  const std::size_t at = text.find(inside);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, inside.size(), "\"target\":\"../../../../victim\"");
  fs::remove(f.path() + "/snapshot-2.manifest");
  write(fs::path(f.path()) / "snapshot-2.manifest", text);
  ::chmod((f.path() + "/snapshot-2.manifest").c_str(), 0600);
  LineageFolder h(root, 4);
  const Prepared p = h.prepare(2);
  EXPECT_FALSE(p.resume_step);
  EXPECT_NE(p.warning.find("link entry 'sub/last.pt' leads outside"), std::string::npos)
      << p.warning;
}

// ------------------------------------------------------------ options

TEST(ArtifactOptionsTest, ReadsTheSectionAndNamesBadFields) {
  ArtifactOptions d = ArtifactOptions::from_json(Json());
  EXPECT_EQ(d.keep_best, 3);
  EXPECT_FALSE(d.keep_pruned);
  ArtifactOptions o = ArtifactOptions::from_json(
      Json{{"keep_best", 0}, {"keep_failed", true}, {"max_snapshot_bytes", 1000}});
  EXPECT_EQ(o.keep_best, 0);
  EXPECT_TRUE(o.keep_failed);
  EXPECT_EQ(o.max_snapshot_bytes, 1000u);
  auto message = [](const Json& j) {
    try {
      ArtifactOptions::from_json(j);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(Json{{"keep_best", -1}}).find("artifacts.keep_best"), std::string::npos);
  EXPECT_NE(message(Json{{"keep_pruned", 1}}).find("artifacts.keep_pruned"), std::string::npos);
  EXPECT_NE(message(Json{{"max_snapshot_bytes", 0}}).find("artifacts.max_snapshot_bytes"),
            std::string::npos);
  EXPECT_NE(message(Json{{"keep_bset", 1}}).find("unknown key"), std::string::npos);
  EXPECT_NE(message(Json(5)).find("artifacts"), std::string::npos);
}

// ------------------------------------------------------------ retries and values

TEST(LineageAttrsTest, ARetryOfATrialLostBeforeItsRestoreTakesTheValuesOfTheTrialBefore) {
  auto storage = open_storage(":memory:");
  const std::int64_t sid = storage->create_study("s", StudyDirection::kMinimize, Json());
  NewTrial init;
  TrialPtr t0 = storage->create_trial(sid, init);
  for (int s = 1; s <= 6; ++s) storage->set_trial_intermediate_value(t0->trial_id, s, 10.0 - s);
  storage->set_trial_system_attr(t0->trial_id, kAttrCheckpoint, checkpoint_attr(5));
  storage->set_trial_state(t0->trial_id, TrialState::kFail, std::nullopt, "worker lost");
  lifecycle::queue_retry(*storage, sid, *storage->get_trial(t0->trial_id),
                         lifecycle::RetryCause::kWorkerLost);
  // Trial 1 is lost right after its dispatch: never restored, no values.
  TrialPtr c1 = storage->claim_waiting_trial(sid, "w");
  storage->set_trial_state(c1->trial_id, TrialState::kFail, std::nullopt, "coordinator restarted");
  TrialPtr r2 = lifecycle::queue_retry(*storage, sid, *storage->get_trial(c1->trial_id),
                                       lifecycle::RetryCause::kStale);
  EXPECT_EQ(r2->system_attrs[kAttrResumedFrom], (Json{{"trial", 1}, {"step", 5}}));
  TrialPtr c2 = storage->claim_waiting_trial(sid, "w");
  c2 = lifecycle::start_resumed_trial(*storage, sid, c2, true);
  // Steps 1..5 of trial 0, which trial 1 was to continue.
  ASSERT_EQ(c2->intermediate_values.size(), 5u);
  EXPECT_EQ(c2->intermediate_values.at(1), 9.0);
  EXPECT_EQ(c2->intermediate_values.at(5), 5.0);
}

TEST(LineageAttrsTest, ARetryContinuesTheLineageFromItsNewestSnapshot) {
  auto storage = open_storage(":memory:");
  const std::int64_t sid = storage->create_study("s", StudyDirection::kMinimize, Json());
  NewTrial init;
  TrialPtr t0 = storage->create_trial(sid, init);
  for (int s = 1; s <= 6; ++s) storage->set_trial_intermediate_value(t0->trial_id, s, 10.0 - s);
  storage->set_trial_system_attr(t0->trial_id, kAttrCheckpoint, checkpoint_attr(5));
  storage->set_trial_state(t0->trial_id, TrialState::kFail, std::nullopt, "worker lost");
  TrialPtr r1 = lifecycle::queue_retry(*storage, sid, *storage->get_trial(t0->trial_id),
                                       lifecycle::RetryCause::kWorkerLost);
  EXPECT_EQ(lineage_of(*r1), 0);
  EXPECT_EQ(resume_step_of(*r1), 5);
  EXPECT_EQ(r1->system_attrs[kAttrResumedFrom], (Json{{"trial", 0}, {"step", 5}}));
  EXPECT_TRUE(r1->intermediate_values.empty()) << "a WAITING trial has no values";

  TrialPtr claimed = storage->claim_waiting_trial(sid, "w");
  EXPECT_TRUE(claimed->intermediate_values.empty()) << "nothing is carried before the restore";
  EXPECT_FALSE(continued_trial(*claimed));
  claimed = lifecycle::start_resumed_trial(*storage, sid, claimed, true);
  // Steps 1..5 (the snapshot's), not step 6 (reported after it).
  ASSERT_EQ(claimed->intermediate_values.size(), 5u);
  EXPECT_EQ(claimed->intermediate_values.at(5), 5.0);
  EXPECT_EQ(claimed->intermediate_values.count(6), 0u);
  EXPECT_EQ(claimed->system_attrs[kAttrResumedFrom],
            (Json{{"trial", 0}, {"step", 5}, {"restored", true}}));
  EXPECT_EQ(continued_trial(*claimed), 0);

  // Lost again before its next report: the next retry still starts at 5,
  // in the same lineage.
  storage->set_trial_state(claimed->trial_id, TrialState::kFail, std::nullopt, "worker lost");
  TrialPtr r2 = lifecycle::queue_retry(*storage, sid, *storage->get_trial(claimed->trial_id),
                                       lifecycle::RetryCause::kStale);
  EXPECT_EQ(lineage_of(*r2), 0);
  EXPECT_EQ(r2->system_attrs[kAttrResumedFrom], (Json{{"trial", 1}, {"step", 5}}));

  // Its snapshot cannot be used: nothing carried, resumed_from says why,
  // and a retry of it starts from scratch (not from the unusable step 5).
  TrialPtr c2 = storage->claim_waiting_trial(sid, "w");
  ASSERT_EQ(c2->number, r2->number);
  c2 = lifecycle::start_resumed_trial(*storage, sid, c2, false, "snapshot-5/a: truncated");
  EXPECT_TRUE(c2->intermediate_values.empty());
  EXPECT_EQ(
      c2->system_attrs[kAttrResumedFrom],
      (Json{
          {"trial", 1}, {"step", 5}, {"restored", false}, {"warning", "snapshot-5/a: truncated"}}));
  EXPECT_FALSE(continued_trial(*c2));
  EXPECT_FALSE(resume_step_of(*c2));
  EXPECT_FALSE(snapshot_step(*c2));
  storage->set_trial_state(c2->trial_id, TrialState::kFail, std::nullopt, "worker lost");
  TrialPtr r2b = lifecycle::queue_retry(*storage, sid, *storage->get_trial(c2->trial_id),
                                        lifecycle::RetryCause::kWorkerLost);
  EXPECT_EQ(lineage_of(*r2b), 0);
  EXPECT_FALSE(r2b->system_attrs.contains(kAttrResumedFrom));

  // A trial without a snapshot: a retry from scratch, in its lineage.
  TrialPtr plain = storage->create_trial(sid, init);
  storage->set_trial_state(plain->trial_id, TrialState::kFail, std::nullopt, "worker lost");
  TrialPtr r3 = lifecycle::queue_retry(*storage, sid, *storage->get_trial(plain->trial_id),
                                       lifecycle::RetryCause::kWorkerLost);
  EXPECT_EQ(lineage_of(*r3), plain->number);
  EXPECT_FALSE(r3->system_attrs.contains(kAttrResumedFrom));
}

TEST(LineageAttrsTest, ARetrysSnapshotSupersedesItsPredecessors) {
  auto trial = [](std::int64_t n, std::optional<std::int64_t> retry_of, std::int64_t step) {
    auto t = std::make_shared<FrozenTrial>();
    t->number = n;
    if (retry_of) t->system_attrs["retry_of"] = *retry_of;
    t->system_attrs[kAttrCheckpoint] = checkpoint_attr(step);
    return TrialPtr(t);
  };
  std::vector<TrialPtr> trials = {trial(0, std::nullopt, 3), trial(1, std::nullopt, 2),
                                  trial(2, 0, 5), trial(3, 2, 7)};
  auto v = superseded_by(trials, *trials[3]);
  ASSERT_EQ(v.size(), 2u);  // trials 2 and 0, not trial 1 (another lineage)
  EXPECT_EQ(v[0]->number, 2);
  EXPECT_EQ(v[1]->number, 0);
  // Already marked, or the same step: not again.
  auto marked = std::make_shared<FrozenTrial>(*trials[0]);
  marked->system_attrs[kAttrCheckpoint]["deleted"] = true;
  trials[0] = marked;
  EXPECT_EQ(superseded_by(trials, *trials[3]).size(), 1u);
  EXPECT_TRUE(superseded_by(trials, *trial(4, 3, 7)).size() == 1u);  // trial 2 only (3 has step 7)
}

// ------------------------------------------------------------ retention

TEST(RetentionTest, KeepsTheBestKCompleteAndDropsPrunedAndFailed) {
  auto trial = [](std::int64_t n, TrialState s, std::optional<double> v, bool snapshot) {
    auto t = std::make_shared<FrozenTrial>();
    t->number = n;
    t->state = s;
    t->value = v;
    if (snapshot) t->system_attrs[kAttrCheckpoint] = checkpoint_attr(3);
    return TrialPtr(t);
  };
  std::vector<TrialPtr> trials = {
      trial(0, TrialState::kComplete, 0.5, true), trial(1, TrialState::kComplete, 0.1, true),
      trial(2, TrialState::kComplete, 0.9, true), trial(3, TrialState::kPruned, 0.7, true),
      trial(4, TrialState::kFail, std::nullopt, true)};
  ArtifactOptions keep2;
  keep2.keep_best = 2;
  auto victims = retention_victims(trials, *trials[2], StudyDirection::kMinimize, keep2);
  ASSERT_EQ(victims.size(), 1u);
  EXPECT_EQ(victims[0]->number, 2);  // the worst of three
  victims = retention_victims(trials, *trials[2], StudyDirection::kMaximize, keep2);
  ASSERT_EQ(victims.size(), 1u);
  EXPECT_EQ(victims[0]->number, 1);  // maximizing, 0.1 is the worst
  EXPECT_EQ(retention_victims(trials, *trials[3], StudyDirection::kMinimize, keep2).size(), 1u);
  EXPECT_EQ(retention_victims(trials, *trials[4], StudyDirection::kMinimize, keep2).size(), 1u);
  ArtifactOptions keep_all;
  keep_all.keep_pruned = keep_all.keep_failed = true;
  EXPECT_TRUE(retention_victims(trials, *trials[3], StudyDirection::kMinimize, keep_all).empty());
  EXPECT_TRUE(retention_victims(trials, *trials[4], StudyDirection::kMinimize, keep_all).empty());
  // Deleted snapshots are not counted again.
  auto gone = std::make_shared<FrozenTrial>(*trials[2]);
  gone->system_attrs[kAttrCheckpoint]["deleted"] = true;
  trials[2] = gone;
  EXPECT_TRUE(retention_victims(trials, *trials[0], StudyDirection::kMinimize, keep2).empty());
  EXPECT_EQ(snapshot_step(*gone), std::nullopt);
}

// ------------------------------------------------------------ a Study

TEST(StudyCheckpointTest, AnInterruptedTrialContinuesFromItsLastReportedStep) {
  TempDir dir("ckpt_study");
  auto storage = open_storage(":memory:");
  StudyOptions so;
  so.checkpoint_root = dir.file("checkpoints");
  Study study = Study::create(storage, "s", StudyDirection::kMinimize, so);
  std::atomic<bool> stop{false};
  std::vector<std::int64_t> epochs_run;
  std::vector<std::optional<std::int64_t>> resumes;
  auto objective = [&](Trial& t) {
    const fs::path state = fs::path(t.checkpoint_dir()) / "state.txt";
    resumes.push_back(t.resume_step());
    double loss = 1.0;
    std::int64_t start = 1;
    if (t.resume_step()) {
      std::ifstream in(state);
      in >> start >> loss;
      EXPECT_EQ(start, *t.resume_step());
      ++start;
    }
    for (std::int64_t epoch = start; epoch <= 8; ++epoch) {
      epochs_run.push_back(epoch);
      loss *= 0.5;
      std::ofstream(state, std::ios::trunc) << epoch << " " << loss;
      if (epoch == 5 && !t.resume_step()) stop = true;  // Ctrl-C during epoch 5's report
      t.report(epoch, loss);
    }
    return loss;
  };
  OptimizeOptions oo;
  oo.n_trials = 1;
  oo.stop = &stop;
  study.optimize(objective, oo);
  stop = false;
  study.optimize(objective, {.n_trials = 1});
  auto trials = study.trials();
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0]->state, TrialState::kFail);
  EXPECT_EQ(trials[1]->state, TrialState::kComplete);
  // Step 5 was not stored (interrupted), so the retry restarts after step 4.
  EXPECT_EQ(trials[1]->system_attrs[kAttrResumedFrom],
            (Json{{"trial", 0}, {"step", 4}, {"restored", true}}));
  EXPECT_EQ(resumes, (std::vector<std::optional<std::int64_t>>{std::nullopt, 4}));
  EXPECT_EQ(epochs_run, (std::vector<std::int64_t>{1, 2, 3, 4, 5, 5, 6, 7, 8}));
  ASSERT_EQ(trials[1]->intermediate_values.size(), 8u);
  EXPECT_EQ(*trials[1]->value, 1.0 / 256);  // as an uninterrupted run
  for (std::int64_t s = 1; s <= 8; ++s)
    EXPECT_EQ(trials[1]->intermediate_values.at(s), std::ldexp(1.0, static_cast<int>(-s)));
}

// An embedded Study keeps the folders a coordinator keeps: the best
// keep_best COMPLETE trials' and an interrupted trial's (its retry continues
// there); a PRUNED trial's, a failed trial's and a COMPLETE trial that fell
// out of the best go, and the store marks each of those deleted.
TEST(StudyCheckpointTest, RetentionKeepsTheBestAndMarksWhatItRemoved) {
  TempDir dir("ckpt_study_retention");
  auto storage = open_storage(":memory:");
  StudyOptions so;
  so.checkpoint_root = dir.file("checkpoints");
  so.artifacts.keep_best = 2;
  Study study = Study::create(storage, "s", StudyDirection::kMinimize, so);
  std::atomic<bool> stop{false};
  // Trial n: value 10 - n (later trials better), except trial 2, pruned,
  // trial 3, which throws, and trial 6, interrupted in its step 2.
  auto objective = [&](Trial& t) -> double {
    std::ofstream(fs::path(t.checkpoint_dir()) / "state.txt") << t.number();
    const double v = 10.0 - static_cast<double>(t.number());
    t.report(1, v);
    if (t.number() == 6) {
      stop = true;  // Ctrl-C during step 2's report
      t.report(2, v);
    }
    if (t.number() == 2) throw TrialPruned();
    if (t.number() == 3) throw std::runtime_error("broken");
    return v;
  };
  OptimizeOptions oo;
  oo.n_trials = 7;
  oo.stop = &stop;
  oo.catch_exceptions = true;
  study.optimize(objective, oo);
  auto trials = study.trials();
  ASSERT_EQ(trials.size(), 8u);  // 0..6 and the retry of 6 (WAITING)
  auto folder_exists = [&](std::size_t number) {
    return fs::exists(lineage_path(so.checkpoint_root, lineage_of(*trials[number])));
  };
  auto marked_deleted = [&](std::size_t number) {
    const Json& attr = trials[number]->system_attrs.at(kAttrCheckpoint);
    return attr.value("deleted", false);
  };
  for (std::size_t n : {0u, 1u, 2u, 3u}) {
    EXPECT_FALSE(folder_exists(n)) << "trial " << n;
    EXPECT_TRUE(marked_deleted(n)) << "trial " << n;
  }
  for (std::size_t n : {4u, 5u, 6u}) {  // the best two, and the interrupted one
    EXPECT_TRUE(folder_exists(n)) << "trial " << n;
    EXPECT_FALSE(marked_deleted(n)) << "trial " << n;
  }
  EXPECT_EQ(trials[2]->state, TrialState::kPruned);
  EXPECT_EQ(trials[3]->state, TrialState::kFail);
  EXPECT_EQ(trials[6]->state, TrialState::kFail);
  EXPECT_EQ(trials[7]->state, TrialState::kWaiting);
}

}  // namespace
}  // namespace hps::checkpoints
