// Tests of the owner-only file helpers (search/private_files.h) and of the
// modes of what a SqliteStorage creates.
#include "search/private_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "search/sqlite_storage.h"
#include "search/study.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using testsupport::TempDir;

unsigned mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 0777;
}

// Sets the umask for the scope (a permissive one, as on most machines).
class Umask {
 public:
  explicit Umask(mode_t mask) : old_(::umask(mask)) {}
  ~Umask() { ::umask(old_); }

 private:
  mode_t old_;
};

TEST(PrivateFilesTest, NewFilesAndFoldersAreOwnerOnlyExistingOnesKeepTheirMode) {
  Umask umask(022);
  TempDir dir("private");
  const std::string file = dir.file("f");
  EXPECT_TRUE(create_private_file(file));
  EXPECT_EQ(mode_of(file), 0600u);
  ::chmod(file.c_str(), 0640);
  EXPECT_FALSE(create_private_file(file));
  EXPECT_EQ(mode_of(file), 0640u);

  const std::string nested = dir.file("a/b/c");
  create_private_directories(nested);
  EXPECT_EQ(mode_of(dir.file("a")), 0700u);
  EXPECT_EQ(mode_of(dir.file("a/b")), 0700u);
  EXPECT_EQ(mode_of(nested), 0700u);
  ::chmod(nested.c_str(), 0750);
  create_private_directories(nested);
  EXPECT_EQ(mode_of(nested), 0750u);

  int fd = open_private_append(nested + "/log");
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_EQ(mode_of(nested + "/log"), 0600u);

  EXPECT_THROW(create_private_directories(file + "/x"), Error);
  EXPECT_THROW(create_private_file(dir.file("missing/f")), Error);
}

TEST(PrivateFilesTest, NewStoreAndItsWalAndShmAreOwnerOnly) {
  Umask umask(022);
  TempDir dir("private");
  const std::string db = dir.file("s.db");
  auto storage = std::make_shared<SqliteStorage>(db);
  Study study = Study::create(storage, "s", StudyDirection::kMinimize);
  study.enqueue_trial({{"x", 1.0}});  // a write: the WAL exists now
  EXPECT_EQ(mode_of(db), 0600u);
  EXPECT_EQ(mode_of(db + "-wal"), 0600u);
  EXPECT_EQ(mode_of(db + "-shm"), 0600u);
}

TEST(PrivateFilesTest, ExistingStoreKeepsItsMode) {
  Umask umask(022);
  TempDir dir("private");
  const std::string db = dir.file("s.db");
  { SqliteStorage first(db); }
  ::chmod(db.c_str(), 0640);
  SqliteStorage again(db);
  again.create_study("s", StudyDirection::kMinimize, Json());
  EXPECT_EQ(mode_of(db), 0640u);
}

}  // namespace
}  // namespace hps
