// Tests of WriterLock (search/writer_lock.h): one holder per study, the
// holder named, released when its process dies however it dies.
#include "search/writer_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "search/sqlite_storage.h"
#include "search/study.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

using ::testing::HasSubstr;
using testsupport::TempDir;

WriterLockHolder me(const std::string& study) {
  WriterLockHolder h;
  h.host = "testhost";
  h.pid = static_cast<std::int64_t>(::getpid());
  h.study = study;
  return h;
}

TEST(WriterLockTest, SecondHolderIsRefusedAndTheFirstIsNamed) {
  TempDir dir("writer_lock");
  const std::string store = dir.file("a.db");
  WriterLock first = WriterLock::acquire(store, 1, me("s"));
  ASSERT_TRUE(first.held());
  first.set_endpoint("tcp://127.0.0.1:5555");
  try {
    WriterLock second = WriterLock::acquire(store, 1, me("s"));
    FAIL() << "taken twice";
  } catch (const WriterLockBusy& e) {
    EXPECT_THAT(e.what(), HasSubstr("being run by another coordinator"));
    EXPECT_THAT(e.what(), HasSubstr("testhost:" + std::to_string(::getpid())));
    EXPECT_THAT(e.what(), HasSubstr("tcp://127.0.0.1:5555"));
    ASSERT_TRUE(e.holder());
    EXPECT_EQ(e.holder()->pid, ::getpid());
    EXPECT_GT(e.holder()->since, 0);
  }
  // Another study of the same store is independent.
  WriterLock other = WriterLock::acquire(store, 2, me("t"));
  EXPECT_TRUE(other.held());
  // Released: free for the next one, and nobody is named any more.
  first.release();
  EXPECT_FALSE(WriterLock::query(store, 1));
  WriterLock again = WriterLock::acquire(store, 1, me("s"));
  EXPECT_TRUE(again.held());
}

TEST(WriterLockTest, QueryNamesTheHolderAndCreatesNothing) {
  TempDir dir("writer_lock");
  const std::string store = dir.file("a.db");
  EXPECT_FALSE(WriterLock::query(store, 1));
  EXPECT_FALSE(std::filesystem::exists(WriterLock::lock_path(store)));
  WriterLock lock = WriterLock::acquire(store, 1, me("s\x1b[2J"));
  auto holder = WriterLock::query(store, 1);
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->host, "testhost");
  EXPECT_EQ(holder->pid, ::getpid());
  EXPECT_EQ(holder->study, "s\x1b[2J");
  holder->host = "evil\n\x1b[2J";
  EXPECT_THAT(holder->describe(), HasSubstr("evil\\n\\x1b[2J"));  // escaped when printed
  struct stat st {};
  ASSERT_EQ(::stat(WriterLock::lock_path(store).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(WriterLockTest, LockDiesWithItsProcessEvenByKill9) {
  TempDir dir("writer_lock");
  const std::string store = dir.file("a.db");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    WriterLock lock = WriterLock::acquire(store, 7, me("s"));
    char c = 'r';
    (void)!::write(ready[1], &c, 1);
    while (true) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  auto holder = WriterLock::query(store, 7);
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->pid, child);
  EXPECT_THROW(WriterLock::acquire(store, 7, me("s")), WriterLockBusy);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(WriterLock::query(store, 7));
  EXPECT_TRUE(WriterLock::acquire(store, 7, me("s")).held());
}

TEST(WriterLockTest, ManyThreadsRacingGetExactlyOneHolder) {
  TempDir dir("writer_lock");
  const std::string store = dir.file("a.db");
  constexpr int kThreads = 16;
  std::atomic<int> go{0}, held{0}, busy{0};
  std::vector<WriterLock> locks(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      while (go.load() == 0) std::this_thread::yield();
      try {
        locks[static_cast<std::size_t>(i)] = WriterLock::acquire(store, 1, me("s"));
        ++held;
      } catch (const WriterLockBusy&) {
        ++busy;
      }
    });
  go = 1;
  for (auto& t : threads) t.join();
  EXPECT_EQ(held.load(), 1);
  EXPECT_EQ(busy.load(), kThreads - 1);
}

// A lock file planted as a symbolic link (dangling, or to a file of the
// user's) or as something other than a file is refused naming the lock file
// and the rule, by lock_file_refusal() (which looks only) and by acquire();
// the link's target is neither made nor written.
TEST(WriterLockTest, APlantedLinkOrFolderAsTheLockFileIsRefusedNamingTheRule) {
  TempDir dir("writer_lock");
  const std::string store = dir.file("a.db");
  const std::string lock = WriterLock::lock_path(store);
  EXPECT_EQ(WriterLock::lock_file_refusal(store), "");  // none yet
  std::filesystem::create_symlink(dir.file("target"), lock);
  EXPECT_THAT(WriterLock::lock_file_refusal(store),
              HasSubstr("the writer lock file is a symbolic link: refused"));
  try {
    WriterLock::acquire(store, 1, me("s"));
    FAIL() << "a link was followed";
  } catch (const WriterLockBusy&) {
    FAIL() << "busy";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(lock + ": the writer lock file is a symbolic link: refused"));
    EXPECT_THAT(e.what(), HasSubstr("remove it"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("target")));
  // hpsearch status asks the lock too: a link is not followed there either
  // (a planted link to another study's lock file would show its coordinator).
  const std::string other = dir.file("other.db");
  WriterLock held = WriterLock::acquire(other, 1, me("other"));
  std::filesystem::remove(lock);
  std::filesystem::create_symlink(WriterLock::lock_path(other), lock);
  ASSERT_TRUE(WriterLock::query(other, 1).has_value());
  try {
    (void)WriterLock::query(store, 1);
    FAIL() << "status followed a planted link to another lock file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(lock + ": the writer lock file is a symbolic link: refused"));
  }
  const std::string mine = dir.write("mine", "keep");
  std::filesystem::remove(lock);
  std::filesystem::create_symlink(mine, lock);
  EXPECT_THROW(WriterLock::acquire(store, 1, me("s")), Error);
  EXPECT_EQ(testsupport::read_file(mine), "keep");
  std::filesystem::remove(lock);
  std::filesystem::create_directory(lock);
  EXPECT_THAT(WriterLock::lock_file_refusal(store), HasSubstr("is not a regular file"));
  EXPECT_THROW((void)WriterLock::query(store, 1), Error);
  try {
    WriterLock::acquire(store, 1, me("s"));
    FAIL() << "a folder was taken as the lock file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(lock + ": the writer lock file is not a regular file"));
  }
}

TEST(WriterLockTest, AStoreNamedThroughALinkOrAHardLinkCannotHaveASecondCoordinator) {
  TempDir dir("writer_lock");
  const std::string store = dir.write("real.db", "");
  const std::string link = dir.file("link.db");
  std::filesystem::create_symlink(store, link);
  // One lock file however the store is named: the link's is the file's.
  EXPECT_EQ(WriterLock::lock_path(link), std::filesystem::canonical(store).string() + ".lock");
  {
    WriterLock held = WriterLock::acquire(store, 1, me("s"));
    EXPECT_THROW(WriterLock::acquire(link, 1, me("s")), WriterLockBusy);
    EXPECT_TRUE(WriterLock::query(link, 1).has_value());
  }
  EXPECT_FALSE(std::filesystem::exists(link + ".lock"));
  // A hard link is another name with no link to resolve: refused.
  EXPECT_EQ(WriterLock::store_refusal(store), "");
  const std::string other = dir.file("other.db");
  std::filesystem::create_hard_link(store, other);
  EXPECT_THAT(WriterLock::store_refusal(other), HasSubstr("the store has 2 hard links"));
  try {
    WriterLock::acquire(other, 1, me("s"));
    FAIL() << "a hard-linked store was locked";
  } catch (const WriterLockBusy&) {
    FAIL() << "busy";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(other + ": the store has 2 hard links"));
  }
}

TEST(WriterLockTest, AHardLinkPlantedAsTheLockFileIsRefusedAndNotWritten) {
  TempDir dir("writer_lock");
  const std::string store = dir.file("h.db");
  const std::string victim = dir.write("victim.txt", "precious");
  std::filesystem::create_hard_link(victim, WriterLock::lock_path(store));
  EXPECT_THAT(WriterLock::lock_file_refusal(store), HasSubstr("has 2 hard links: refused"));
  EXPECT_THROW(WriterLock::acquire(store, 1, me("s")), Error);
  EXPECT_THROW((void)WriterLock::query(store, 1), Error);
  EXPECT_EQ(testsupport::read_file(victim), "precious");
}

// A regular <store>.lock planted by another user (uid 65534, mode 0666) is
// refused by lock_file_refusal(), acquire() and query(), even as root, and
// nothing is written into it (no holder line); so is one of this user that
// others may write (they could take the lock before the coordinator does).
TEST(WriterLockTest, ALockFileOfAnotherUserOrWritableByOthersIsRefusedAndNotWritten) {
  TempDir dir("writer_lock");
  const std::string store = dir.file("o.db");
  const std::string lock = dir.write("o.db.lock", "");
  ASSERT_EQ(::chmod(lock.c_str(), 0666), 0);
  EXPECT_THAT(WriterLock::lock_file_refusal(store),
              HasSubstr("the writer lock file is writable by others (mode 0666): refused"));
  EXPECT_THROW(WriterLock::acquire(store, 1, me("s")), Error);
  EXPECT_EQ(std::filesystem::file_size(lock), 0u);
  ASSERT_EQ(::chmod(lock.c_str(), 0644), 0);
  EXPECT_EQ(WriterLock::lock_file_refusal(store), "");

  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot make a file of another uid";
  ASSERT_EQ(::chmod(lock.c_str(), 0666), 0);
  ASSERT_EQ(::chown(lock.c_str(), 65534, 65534), 0);
  EXPECT_THAT(WriterLock::lock_file_refusal(store),
              HasSubstr("the writer lock file is owned by uid 65534, not by this user (uid 0): "
                        "refused"));
  try {
    WriterLock::acquire(store, 1, me("s"));
    FAIL() << "another user's lock file was taken";
  } catch (const WriterLockBusy&) {
    FAIL() << "busy";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(lock + ": the writer lock file is owned by uid 65534"));
  }
  EXPECT_THROW((void)WriterLock::query(store, 1), Error);
  EXPECT_EQ(std::filesystem::file_size(lock), 0u);
  struct stat st {};
  ASSERT_EQ(::stat(lock.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
}

TEST(WriterLockTest, OnlyFileBackedStudiesAreLocked) {
  TempDir dir("writer_lock");
  auto file_storage = std::make_shared<SqliteStorage>(dir.file("s.db"));
  Study on_file = Study::create(file_storage, "s", StudyDirection::kMinimize);
  EXPECT_EQ(storage_file(*file_storage), dir.file("s.db"));
  WriterLock lock = lock_study_for_writing(on_file);
  EXPECT_TRUE(lock.held());
  EXPECT_THROW(lock_study_for_writing(on_file), WriterLockBusy);

  auto memory = std::make_shared<SqliteStorage>(":memory:");
  Study in_memory = Study::create(memory, "m", StudyDirection::kMinimize);
  EXPECT_EQ(storage_file(*memory), "");
  EXPECT_FALSE(lock_study_for_writing(in_memory).held());
}

}  // namespace
}  // namespace hps
