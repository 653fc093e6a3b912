// Tests of FileWatch (search/file_watch.h) and of a SqliteStorage whose
// file is deleted or replaced while it is open: no commit succeeds after.
#include "search/file_watch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "search/errors.h"
#include "search/sqlite_storage.h"
#include "search/study.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using ::testing::HasSubstr;
using testsupport::TempDir;

TEST(FileWatchTest, NoticesDeletionAndReplacement) {
  TempDir dir("file_watch");
  const std::string path = dir.write("f", "x");
  FileWatch watch(path);
  EXPECT_NO_THROW(watch.check());
  dir.write("g", "y");
  std::filesystem::rename(dir.file("g"), path);
  try {
    watch.check();
    FAIL() << "replacement not noticed";
  } catch (const StorageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("replaced"));
  }
  std::filesystem::remove(path);
  try {
    watch.check();
    FAIL() << "deletion not noticed";
  } catch (const StorageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("deleted"));
  }
  EXPECT_THROW(FileWatch(dir.file("missing")), StorageError);
}

TEST(FileWatchTest, RelativePathSurvivesAChangeOfDirectory) {
  TempDir dir("file_watch");
  dir.write("f", "x");
  const auto before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  FileWatch watch("f");
  std::filesystem::current_path(before);
  EXPECT_NO_THROW(watch.check());
  EXPECT_EQ(watch.path(), "f");
}

TEST(FileWatchTest, StorageRefusesToCommitIntoADeletedFile) {
  TempDir dir("file_watch");
  const std::string db = dir.file("s.db");
  auto storage = std::make_shared<SqliteStorage>(db);
  Study study = Study::create(storage, "s", StudyDirection::kMinimize);
  study.enqueue_trial({{"x", 1.0}});
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix);
  try {
    study.enqueue_trial({{"x", 2.0}});
    FAIL() << "committed into a deleted file";
  } catch (const StorageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("deleted"));
  }
  EXPECT_THROW(storage->run_in_transaction([&] {
    study.enqueue_trial({{"x", 3.0}});
  }),
               StorageError);
}

}  // namespace
}  // namespace hps
