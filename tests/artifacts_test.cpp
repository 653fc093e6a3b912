// Snapshots that travel (coordinator/artifact_store.h, protocol ArtifactPut
// / ArtifactGet), seen from the coordinator: a worker here is a raw DEALER
// socket in this process (tests/support/raw_worker.h) that sends what a
// real worker would, and what it never would (a piece for a trial it does
// not hold, a damaged piece, a snapshot over the study's limit). The
// end-to-end case (two `hpsearch worker` processes in different folders, a
// retry that downloads the snapshot) is in long_trials_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <zmq.hpp>

#include "algorithms/random_sampler.h"
#include "coordinator/artifact_store.h"
#include "coordinator/coordinator.h"
#include "protocol/protocol.h"
#include "search/checkpoints.h"
#include "search/storage.h"
#include "search/study.h"
#include "search/util/hash.h"
#include "tests/support/raw_worker.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
namespace proto = hps::protocol;
using testsupport::RawWorker;

Study open_study(const std::string& path) {
  StudyOptions o;
  o.sampler = std::make_shared<RandomSampler>(3);
  o.space = SearchSpace::from_json(Json::parse(R"({"x": {"type": "float", "low": 0, "high": 1}})"));
  return Study::load_if_exists(open_storage(path), "artifacts", StudyDirection::kMinimize,
                               std::move(o));
}

class ArtifactTransfer : public ::testing::Test {
 protected:
  // A snapshot of step `step` taken by a worker in its own root, holding
  // one file of `bytes` bytes; returns its reader.
  std::unique_ptr<checkpoints::SnapshotReader> worker_snapshot(std::int64_t step,
                                                               std::size_t bytes) {
    checkpoints::LineageFolder folder(dir_.file("worker-root"), 0);
    folder.prepare(std::nullopt);
    std::string block(251, '\0');  // a period of (i * 7919) % 251, repeated
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>((i * 7919) % 251);
    std::string data;
    data.reserve(bytes);
    while (data.size() < bytes) data.append(block, 0, std::min(block.size(), bytes - data.size()));
    std::ofstream(fs::path(folder.work_dir()) / "model.bin", std::ios::binary) << data;
    EXPECT_TRUE(folder.snapshot(step).taken);
    model_ = data;
    return std::make_unique<checkpoints::SnapshotReader>(folder.path(), step);
  }
  proto::ArtifactPut piece(const checkpoints::SnapshotReader& r, std::int64_t number,
                           std::uint64_t offset) {
    proto::ArtifactPut p;
    p.number = number;
    p.step = r.step();
    p.offset = offset;
    p.total = r.total();
    p.manifest_bytes = r.manifest_bytes();
    p.data = r.read(offset, proto::kMaxArtifactChunkBytes);
    p.checksum = util::xxh3_64(p.data);
    return p;
  }
  CoordinatorOptions options() const {
    CoordinatorOptions co;
    co.checkpoint_root = root();
    return co;
  }
  std::string root() const { return dir_.file("root"); }
  std::string lineage0() const { return checkpoints::lineage_path(root(), 0); }
  Json checkpoint_attr(Study& study, std::int64_t number) {
    auto t = study.storage().get_trial_by_number(study.study_id(), number);
    return t->system_attrs.value(checkpoints::kAttrCheckpoint, Json());
  }
  bool any_partial_upload() const {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(lineage0(), ec))
      if (e.path().filename().string().rfind(".tmp-", 0) == 0) return true;
    return false;
  }

  testsupport::TempDir dir_{"artifacts"};
  zmq::context_t ctx_;
  std::string model_;
};

TEST_F(ArtifactTransfer, AssignmentsNameTheStoreAndItsTokenFileIsOwnerOnly) {
  Study study = open_study(dir_.file("study.db"));
  Coordinator c(study, Json{{"type", "external"}}, options());
  RawWorker w(ctx_, c.endpoint(), "w1");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->lineage, 0);
  EXPECT_EQ(a->store_id.size(), 32u);
  EXPECT_EQ(a->store_id, checkpoints::read_store_id(root()));
  EXPECT_EQ(fs::path(a->store_root), fs::path(root()));
  struct stat st {};
  ASSERT_EQ(::stat((fs::path(root()) / checkpoints::kStoreIdFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(ArtifactTransfer, AWholeUploadIsInstalledVerifiedAndRecorded) {
  Study study = open_study(dir_.file("study.db"));
  Coordinator c(study, Json{{"type", "external"}}, options());
  RawWorker w(ctx_, c.endpoint(), "w1");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  auto r = worker_snapshot(3, (3u << 20) / 2);  // 1.5 MiB: two pieces
  std::uint64_t offset = 0;
  std::optional<proto::ArtifactPutReply> reply;
  while (offset < r->total()) {
    proto::ArtifactPut p = piece(*r, a->number, offset);
    offset += p.data.size();
    w.send(p);
    reply = w.await<proto::ArtifactPutReply>(c);
    ASSERT_TRUE(reply);
    ASSERT_TRUE(reply->ok) << reply->error;
    EXPECT_EQ(reply->next_offset, offset);
    // Recorded only once the whole snapshot arrived.
    if (offset < r->total()) {
      EXPECT_TRUE(checkpoint_attr(study, 0).is_null());
    }
  }
  EXPECT_TRUE(reply->done);
  EXPECT_EQ(checkpoint_attr(study, 0), Json({{"step", 3}}));
  std::ifstream in(fs::path(lineage0()) / "snapshot-3" / "model.bin", std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, model_);
  EXPECT_FALSE(any_partial_upload());
}

TEST_F(ArtifactTransfer, AnUploadForATrialTheWorkerDoesNotHoldIsRefused) {
  Study study = open_study(dir_.file("study.db"));
  Coordinator c(study, Json{{"type", "external"}}, options());
  RawWorker holder(ctx_, c.endpoint(), "holder");
  auto a = holder.request(c);
  ASSERT_TRUE(a);
  RawWorker other(ctx_, c.endpoint(), "other");
  ASSERT_TRUE(other.await<proto::Welcome>(c));
  auto r = worker_snapshot(2, 1000);
  other.send(piece(*r, a->number, 0));  // the whole snapshot in one piece
  auto reply = other.await<proto::ArtifactPutReply>(c);
  ASSERT_TRUE(reply);
  EXPECT_FALSE(reply->ok);
  EXPECT_FALSE(reply->done);
  EXPECT_NE(reply->error.find("not held by this worker"), std::string::npos) << reply->error;
  EXPECT_TRUE(checkpoint_attr(study, 0).is_null());
  EXPECT_FALSE(fs::exists(fs::path(lineage0()) / "snapshot-2"));
  // Nor may it download the trial's snapshot.
  other.send(proto::ArtifactGet{a->number, 2, 0});
  auto get = other.await<proto::ArtifactGetReply>(c);
  ASSERT_TRUE(get);
  EXPECT_FALSE(get->ok);
  EXPECT_NE(get->error.find("not held by this worker"), std::string::npos) << get->error;
}

TEST_F(ArtifactTransfer, ADamagedOrMisplacedPieceIsRefusedAndThePartialFileRemoved) {
  Study study = open_study(dir_.file("study.db"));
  Coordinator c(study, Json{{"type", "external"}}, options());
  RawWorker w(ctx_, c.endpoint(), "w1");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  auto r = worker_snapshot(4, (3u << 20) / 2);
  proto::ArtifactPut first = piece(*r, a->number, 0);
  w.send(first);
  auto reply = w.await<proto::ArtifactPutReply>(c);
  ASSERT_TRUE(reply && reply->ok) << (reply ? reply->error : "no reply");
  EXPECT_TRUE(any_partial_upload());  // the first piece is on disk
  proto::ArtifactPut second = piece(*r, a->number, first.data.size());
  second.data[10] ^= 0x55;  // damaged in transit; checksum of the original
  w.send(second);
  reply = w.await<proto::ArtifactPutReply>(c);
  ASSERT_TRUE(reply);
  EXPECT_FALSE(reply->ok);
  EXPECT_NE(reply->error.find("checksum mismatch"), std::string::npos) << reply->error;
  EXPECT_FALSE(any_partial_upload());
  EXPECT_TRUE(checkpoint_attr(study, 0).is_null());
  // A piece at the wrong offset: refused too.
  w.send(first);
  ASSERT_TRUE(w.await<proto::ArtifactPutReply>(c)->ok);
  proto::ArtifactPut skip = piece(*r, a->number, first.data.size() + 1);
  w.send(skip);
  reply = w.await<proto::ArtifactPutReply>(c);
  ASSERT_TRUE(reply);
  EXPECT_FALSE(reply->ok);
  EXPECT_NE(reply->error.find("expected offset"), std::string::npos) << reply->error;
  EXPECT_FALSE(any_partial_upload());
  EXPECT_FALSE(fs::exists(fs::path(lineage0()) / "snapshot-4"));
  EXPECT_TRUE(checkpoint_attr(study, 0).is_null());
}

TEST_F(ArtifactTransfer, ASnapshotOverTheStudyLimitIsRefusedWithTheLimitNamed) {
  Study study = open_study(dir_.file("study.db"));
  CoordinatorOptions co = options();
  co.artifacts.max_study_bytes = 1500;
  Coordinator c(study, Json{{"type", "external"}}, co);
  RawWorker w(ctx_, c.endpoint(), "w1");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  auto small = worker_snapshot(1, 1000);  // fits
  w.send(piece(*small, a->number, 0));
  auto reply = w.await<proto::ArtifactPutReply>(c);
  ASSERT_TRUE(reply && reply->done) << (reply ? reply->error : "no reply");
  auto big = worker_snapshot(2, 2000);  // over 1500 bytes
  w.send(piece(*big, a->number, 0));
  reply = w.await<proto::ArtifactPutReply>(c);
  ASSERT_TRUE(reply);
  EXPECT_FALSE(reply->ok);
  EXPECT_NE(reply->error.find("artifacts.max_study_bytes"), std::string::npos) << reply->error;
  // The store still names the snapshot that was kept.
  EXPECT_EQ(checkpoint_attr(study, 0), Json({{"step", 1}}));
  EXPECT_FALSE(fs::exists(fs::path(lineage0()) / "snapshot-2"));
  EXPECT_TRUE(fs::exists(fs::path(lineage0()) / "snapshot-1"));
}

// An upload its worker abandons (it ends the trial, or is lost, after the
// first piece) holds none of max_study_bytes once the trial ended: a later
// trial's snapshot that fits beside what is stored is kept (it was refused
// for the rest of the run: issue #47's attacker, and a worker lost
// mid-upload, did that).
TEST_F(ArtifactTransfer, AnAbandonedUploadReservesNothingOnceItsTrialEnded) {
  Study study = open_study(dir_.file("study.db"));
  CoordinatorOptions co = options();
  co.artifacts.max_study_bytes = 3u << 20;
  Coordinator c(study, Json{{"type", "external"}}, co);
  RawWorker w(ctx_, c.endpoint(), "w1");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  auto two_pieces = worker_snapshot(1, 2u << 20);  // 2 MiB: two pieces
  w.send(piece(*two_pieces, a->number, 0));
  auto reply = w.await<proto::ArtifactPutReply>(c);
  ASSERT_TRUE(reply && reply->ok && !reply->done) << (reply ? reply->error : "no reply");
  w.send(proto::Complete{a->number, false, 1.0, ""});  // the rest never sent
  auto b = w.request(c);
  ASSERT_TRUE(b);
  w.send(piece(*two_pieces, b->number, 0));
  reply = w.await<proto::ArtifactPutReply>(c);
  ASSERT_TRUE(reply);
  EXPECT_TRUE(reply->ok) << reply->error;  // 2 MiB beside nothing stored: fits 3 MiB
}

// A worker that sends pieces without waiting for the replies (a legitimate
// one keeps at most 4 in flight): the coordinator queues at most 16 of its
// pieces on the I/O thread and refuses the others with the rule named, so
// its memory stays bounded; every piece is answered; the worker's next,
// well-behaved upload is kept.
TEST_F(ArtifactTransfer, AWorkerThatFloodsPiecesIsRefusedBeyondItsShare) {
  Study study = open_study(dir_.file("study.db"));
  Coordinator c(study, Json{{"type", "external"}}, options());
  RawWorker w(ctx_, c.endpoint(), "flooder");
  auto a = w.request(c);
  ASSERT_TRUE(a);
  auto r = worker_snapshot(5, 40u << 20);  // 40 pieces of 1 MiB
  constexpr int kPieces = 40;
  for (int i = 0; i < kPieces; ++i)
    w.send(piece(*r, a->number, static_cast<std::uint64_t>(i) * proto::kMaxArtifactChunkBytes));
  int refused = 0;
  int answered = 0;
  for (; answered < kPieces; ++answered) {
    auto reply = w.await<proto::ArtifactPutReply>(c);
    ASSERT_TRUE(reply) << "piece " << answered << " unanswered";
    if (!reply->ok && reply->error.find("in flight from this worker") != std::string::npos)
      ++refused;
  }
  // The I/O thread writes and hashes a piece in about a millisecond; the
  // coordinator's loop takes 40 in far less: more than 16 wait at once.
  EXPECT_GT(refused, 0);
  EXPECT_TRUE(checkpoint_attr(study, 0).is_null()) << "a refused upload is not recorded";
  auto small = worker_snapshot(6, 1000);
  w.send(piece(*small, a->number, 0));
  auto reply = w.await<proto::ArtifactPutReply>(c);
  ASSERT_TRUE(reply && reply->done) << (reply ? reply->error : "no reply");
  EXPECT_EQ(checkpoint_attr(study, 0), Json({{"step", 6}}));
}

// A stream whose manifest names a path outside the snapshot, or a file
// under a link, is refused before anything is written (install_snapshot:
// paths come from the manifest only after these checks).
// The store's I/O thread yields the CPU to the coordinator's loop: it runs
// at nice kArtifactThreadNice (19, the lowest priority; read back from
// /proc/self/task).
TEST(ArtifactStoreThread, RunsAtALowerCpuPriorityThanTheProcess) {
  testsupport::TempDir dir("artifact_store_nice");
  auto nice_of = [](const std::string& stat) {
    // Field 19 (nice) of /proc/<pid>/task/<tid>/stat, counted after the
    // command name's closing parenthesis (field 2 may hold spaces).
    std::istringstream in(stat.substr(stat.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19; ++i) in >> field;
    return std::stoi(field);
  };
  const int base = nice_of(testsupport::read_file("/proc/self/stat"));
  if (base >= kArtifactThreadNice)
    GTEST_SKIP() << "the test runs at nice " << base << ": no room below";
  auto lowered = [&] {
    for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
      const std::string stat = testsupport::read_file((t.path() / "stat").string());
      if (!stat.empty() && nice_of(stat) == kArtifactThreadNice) return true;
    }
    return false;
  };
  EXPECT_FALSE(lowered());  // no thread of this test runs there yet
  ArtifactStore store(dir.file("root"), 1 << 20);
  EXPECT_TRUE(testsupport::wait_until(lowered));
}

TEST(InstallSnapshot, RefusesPathsOutsideTheSnapshotAndFilesUnderALink) {
  testsupport::TempDir dir("install_snapshot");
  checkpoints::LineageFolder folder(dir.file("root"), 0);
  auto install = [&](const Json& files, const std::string& bytes) {
    const std::string manifest = Json{{"step", 1}, {"files", files}}.dump();
    const std::string stream = dir.file("stream");
    std::ofstream(stream, std::ios::binary | std::ios::trunc) << manifest << bytes;
    checkpoints::install_snapshot(folder.path(), 1, stream, manifest.size(), 1 << 20);
  };
  // FNV-1a 64 of "x": a manifest of the format before XXH3 is still verified.
  const std::string hash_of_x = "af63f54c86021707";
  auto expect_refused = [&](const Json& files, const std::string& bytes, const char* why) {
    try {
      install(files, bytes);
      ADD_FAILURE() << "accepted: " << files.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(fs::path(folder.path()) / "snapshot-1"));
    EXPECT_FALSE(fs::exists(dir.file("escaped")));
  };
  Json file{{"kind", "file"}, {"size", 1}, {"fnv1a64", hash_of_x}};
  Json up = file;
  up["path"] = "../../escaped";
  expect_refused(Json::array({up}), "x", "not a plain relative path");
  Json link{{"path", "d"}, {"kind", "link"}, {"target", dir.path().string()}};
  Json under = file;
  under["path"] = "d/escaped";
  expect_refused(Json::array({link, under}), "x", "link entry 'd' leads outside");
  // A link that stays inside is still no folder to write a file under.
  link["target"] = "sub";
  expect_refused(Json::array({Json{{"path", "sub"}, {"kind", "dir"}}, link, under}), "x",
                 "not a folder of the manifest");
  Json ok = file;
  ok["path"] = "model.bin";
  expect_refused(Json::array({ok}), "y", "damaged");          // hash differs
  expect_refused(Json::array({ok}), "xx", "bytes received");  // longer than the manifest says
  install(Json::array({ok}), "x");
  EXPECT_TRUE(fs::exists(fs::path(folder.path()) / "snapshot-1" / "model.bin"));
  EXPECT_TRUE(folder.prepare(1).warning.empty());
}

}  // namespace
}  // namespace hps
