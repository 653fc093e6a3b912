// Tests of the owner-only file helpers (search/private_files.h) and of the
// modes of what a SqliteStorage creates.
#include "search/private_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "search/sqlite_storage.h"
#include "search/study.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using testsupport::read_file;
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

  int fd = open_private_append(nested + "/log", "the log", "the test's lines would be appended to");
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_EQ(mode_of(nested + "/log"), 0600u);

  EXPECT_THROW(create_private_directories(file + "/x"), Error);
  EXPECT_THROW(create_private_file(dir.file("missing/f")), Error);
}

// open_private_append refuses, before writing anything, what
// written_file_refusal refuses (the rule of a store's files): a symbolic
// link, a hard link (a file with another name), a FIFO (not waited on), a
// folder; the error names the file and the rule. A file of its own opens.
TEST(PrivateFilesTest, AppendRefusesLinksHardLinksFifosAndFolders) {
  TempDir dir("private");
  const std::string victim = dir.write("victim", "the victim's bytes");
  const auto error_of = [&](const std::string& path) -> std::string {
    try {
      ::close(open_private_append(path, "the log", "the test's lines would be appended to"));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  fs::create_symlink(victim, dir.file("sym.log"));
  EXPECT_EQ(error_of(dir.file("sym.log")),
            dir.file("sym.log") +
                ": the log is a symbolic link: refused (never followed: the test's lines would be "
                "appended to whatever it points to); remove it (hpsearch makes the log itself, "
                "owner-only)");
  fs::create_hard_link(victim, dir.file("hard.log"));
  EXPECT_EQ(error_of(dir.file("hard.log")),
            dir.file("hard.log") +
                ": the log has 2 hard links: refused (another name for a file the test's lines "
                "would be appended to); remove it (hpsearch makes the log itself, owner-only)");
  ASSERT_EQ(::mkfifo(dir.file("fifo.log").c_str(), 0600), 0);
  EXPECT_NE(error_of(dir.file("fifo.log"))
                .find(": the log is not a regular file (a folder, FIFO or "
                      "device): refused"),
            std::string::npos);
  fs::create_directory(dir.file("dir.log"));
  EXPECT_NE(error_of(dir.file("dir.log")).find("dir.log: the log is not a regular file"),
            std::string::npos);
  EXPECT_EQ(read_file(victim), "the victim's bytes");
  EXPECT_EQ(error_of(dir.file("own.log")), "");
  EXPECT_EQ(error_of(dir.file("own.log")), "");  // again: its one name, appended to
}

// A symbolic link to a missing file, planted where a store is to be made
// (a shared folder, another user's link), is not followed: nothing is made
// at its target, which would get the umask's mode (0644, readable by
// others) instead of 0600. The store (SqliteStorage) is refused naming the
// path and the rule.
TEST(PrivateFilesTest, ADanglingLinkIsRefusedNotFollowed) {
  Umask umask(022);
  TempDir dir("private");
  const std::string link = dir.file("s.db");
  const std::string target = dir.file("elsewhere.db");
  std::filesystem::create_symlink(target, link);
  EXPECT_EQ(dangling_link_refusal(dir.file("nothing")), "");
  EXPECT_NE(
      dangling_link_refusal(link).find("is a symbolic link to a missing file (" + target + ")"),
      std::string::npos);
  try {
    create_private_file(link);
    FAIL() << "a dangling link was followed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(link + ": is a symbolic link to a missing file"),
              std::string::npos)
        << e.what();
  }
  try {
    SqliteStorage store(link);
    FAIL() << "a store was made through a dangling link";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("is a symbolic link to a missing file"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(target)) << "made with mode " << mode_of(target);
  // A link to an existing file is that file: used, its mode kept.
  ASSERT_TRUE(create_private_file(target));
  EXPECT_EQ(dangling_link_refusal(link), "");
  EXPECT_FALSE(create_private_file(link));
  EXPECT_EQ(mode_of(target), 0600u);
}

// A store path that is a symbolic link to an existing empty file (say a
// link planted in a shared folder to an empty file of the user's that
// others can read) is not made a store there: the store would keep that
// file's mode (0644) instead of 0600. A link to an existing store works.
TEST(PrivateFilesTest, ALinkToAnEmptyFileIsNotMadeAStore) {
  Umask umask(022);
  TempDir dir("private");
  const std::string victim = dir.write("notes", "");
  ASSERT_EQ(::chmod(victim.c_str(), 0644), 0);
  const std::string link = dir.file("s.db");
  std::filesystem::create_symlink(victim, link);
  auto refused = store_files_refusal(link);
  ASSERT_TRUE(refused);
  EXPECT_NE(
      refused->message().find(link + ": is a symbolic link to an empty file (" + victim + ")"),
      std::string::npos)
      << refused->message();
  try {
    SqliteStorage store(link);
    FAIL() << "a store was made through a link to an empty file";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link to an empty file"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(std::filesystem::file_size(victim), 0u);
  EXPECT_EQ(mode_of(victim), 0644u);
  EXPECT_FALSE(std::filesystem::exists(victim + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(victim + "-shm"));
  // A link to an existing store is that store.
  const std::string real = dir.file("real.db");
  {
    SqliteStorage store(real);
    store.create_study("s", StudyDirection::kMinimize, Json());
  }
  const std::string to_real = dir.file("to-real.db");
  std::filesystem::create_symlink(real, to_real);
  EXPECT_FALSE(store_files_refusal(to_real));
  SqliteStorage again(to_real);
  EXPECT_TRUE(again.find_study("s"));
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

// The text of the StorageError that opening a SqliteStorage at `db` throws
// ("no error" if it opens).
std::string storage_error_of(const std::string& db) {
  try {
    SqliteStorage store(db);
  } catch (const StorageError& e) {
    return e.what();
  }
  return "no error";
}

// An attacker who can write the folder plants <store>-wal / -shm /
// -journal as a symbolic link (to a victim file), a hard link, a FIFO or a
// folder: store_files_refusal names the file and the rule, SqliteStorage
// throws that text before it makes or writes anything (no store is made,
// the victim is byte-identical), and the same holds beside an existing
// store. A regular -wal of this user (an interrupted study's) is SQLite's
// own and opens.
TEST(PrivateFilesTest, PlantedWalShmOrJournalLinksFifosAndFoldersAreRefusedBeforeAnythingIsMade) {
  TempDir dir("private");
  const std::string db = dir.file("s.db");
  const std::string victim = dir.write("victim", "the victim's bytes");
  EXPECT_FALSE(store_files_refusal(db).has_value());
  const auto expect_refused = [&](const std::string& file, const std::string& rule) {
    auto refused = store_files_refusal(db);
    ASSERT_TRUE(refused.has_value()) << file;
    EXPECT_EQ(refused->file, file);
    EXPECT_NE(refused->rule.find(rule), std::string::npos) << refused->rule;
    EXPECT_EQ(storage_error_of(db), refused->message());
    EXPECT_EQ(read_file(victim), "the victim's bytes");
  };
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    const std::string file = db + suffix;
    fs::create_symlink(victim, file);
    expect_refused(file, std::string("the store's ") + suffix +
                             " file is a symbolic link: refused (never followed");
    EXPECT_FALSE(fs::exists(db)) << "a refused open made the store";
    fs::remove(file);
    fs::create_hard_link(victim, file);
    expect_refused(file, "file has 2 hard links: refused");
    fs::remove(file);
    ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
    expect_refused(file, "file is not a regular file (a folder, FIFO or device): refused");
    fs::remove(file);
    fs::create_directory(file);
    expect_refused(file, "file is not a regular file");
    fs::remove(file);
  }
  EXPECT_FALSE(fs::exists(db));

  // Beside an existing store: refused too, the store's trials kept.
  {
    auto storage = std::make_shared<SqliteStorage>(db);
    Study study = Study::create(storage, "s", StudyDirection::kMinimize);
    study.enqueue_trial({{"x", 1.0}});
  }
  fs::create_symlink(victim, db + "-shm");
  expect_refused(db + "-shm", "-shm file is a symbolic link: refused");
  fs::remove(db + "-shm");
  // A store named through a link: the files beside the file it names.
  fs::create_symlink(db, dir.file("link.db"));
  fs::create_symlink(victim, db + "-wal");
  auto through_link = store_files_refusal(dir.file("link.db"));
  ASSERT_TRUE(through_link.has_value());
  EXPECT_EQ(through_link->file, fs::canonical(db).string() + "-wal");
  fs::remove(db + "-wal");

  // A regular -wal of this user (a copy of a live one) is SQLite's own.
  {
    auto storage = std::make_shared<SqliteStorage>(db);
    Study study = Study::load(storage, "s");
    study.enqueue_trial({{"x", 2.0}});
    fs::copy_file(db + "-wal", dir.file("kept-wal"));
  }
  fs::copy_file(dir.file("kept-wal"), db + "-wal", fs::copy_options::overwrite_existing);
  EXPECT_FALSE(store_files_refusal(db).has_value());
  EXPECT_EQ(storage_error_of(db), "no error");
  EXPECT_EQ(read_file(victim), "the victim's bytes");
}

// Files of a store planted by another user (who can write the folder): an
// empty store, a -wal, chowned to uid 65534 (nobody), and a store others
// may write (0666) are refused, even as root (st_uid against the effective
// uid), before anything is written: owner and mode kept. A store of this
// user that its group may write (0664, a shared group folder) is kept.
TEST(PrivateFilesTest, StoreFilesOfAnotherUserOrWritableByOthersAreRefused) {
  TempDir dir("private");
  const std::string db = dir.file("s.db");
  EXPECT_EQ(study_file_owner_refusal(::geteuid(), 0100600), "");
  EXPECT_EQ(study_file_owner_refusal(::geteuid(), 0100664), "");
  EXPECT_NE(study_file_owner_refusal(::geteuid(), 0100666)
                .find("writable by others (mode 0666): refused"),
            std::string::npos);
  EXPECT_NE(study_file_owner_refusal(::geteuid() + 1, 0100600).find("owned by uid "),
            std::string::npos);
  { SqliteStorage made(db); }
  ASSERT_EQ(::chmod(db.c_str(), 0664), 0);
  EXPECT_FALSE(store_files_refusal(db).has_value());
  EXPECT_EQ(storage_error_of(db), "no error");
  EXPECT_EQ(mode_of(db), 0664u);
  ASSERT_EQ(::chmod(db.c_str(), 0666), 0);
  auto open_to_all = store_files_refusal(db);
  ASSERT_TRUE(open_to_all.has_value());
  EXPECT_EQ(open_to_all->message(),
            db + ": the store is writable by others (mode 0666): refused (anyone could change the "
                 "study, and the commands its objective runs); chmod o-w it");
  EXPECT_EQ(storage_error_of(db), open_to_all->message());
  fs::remove(db);

  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot make a file of another uid";
  const uid_t nobody = 65534;
  // An empty store planted 0666 by another user.
  const std::string planted = dir.write("planted.db", "");
  ASSERT_EQ(::chmod(planted.c_str(), 0666), 0);
  ASSERT_EQ(::chown(planted.c_str(), nobody, nobody), 0);
  const std::string error = storage_error_of(planted);
  EXPECT_NE(error.find(planted + ": the store is owned by uid 65534, not by this user (uid 0): "
                                 "refused"),
            std::string::npos)
      << error;
  struct stat st {};
  ASSERT_EQ(::stat(planted.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, nobody);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(mode_of(planted), 0666u);
  // A regular -wal of another user beside this user's store.
  { SqliteStorage made(db); }
  const std::string wal = dir.write("s.db-wal", "");
  ASSERT_EQ(::chown(wal.c_str(), nobody, nobody), 0);
  EXPECT_NE(storage_error_of(db).find(wal + ": the store's -wal file is owned by uid 65534"),
            std::string::npos)
      << storage_error_of(db);
  EXPECT_EQ(fs::file_size(wal), 0u);
}

// Runs `body(dir)` in a child process as uid and gid 65534, with `dir` a
// fresh /tmp folder (named after `label`) owned by that uid: root writes any
// file whatever its mode, so read-only files are tested as another user.
// Returns the child's exit code: what `body` returned, 3 when it could not
// change uid, 30 when it threw (printed), -1 when it did not exit. The
// folder is removed afterwards (made writable first).
int exit_code_as_nobody(const std::string& label,
                        const std::function<int(const std::string& dir)>& body) {
  std::string pattern = "/tmp/hps-" + label + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return -1;
  const std::string dir = pattern;
  const uid_t nobody = 65534;
  if (::chown(dir.c_str(), nobody, nobody) != 0) return -1;
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    int code = 3;
    try {
      if (::setgid(nobody) == 0 && ::setuid(nobody) == 0) code = body(dir);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      code = 30;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  const bool waited = child > 0 && ::waitpid(child, &status, 0) == child;
  ::chmod(dir.c_str(), 0755);
  fs::remove_all(dir);
  return waited && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs /bin/sh -c `command` (stderr into stdout); its exit status, or -1
// when it did not exit; `output` gets what it printed.
int shell(const std::string& command, std::string& output) {
  output.clear();
  FILE* out = ::popen((command + " 2>&1").c_str(), "r");
  if (!out) return -1;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, out)) output += buffer;
  const int status = ::pclose(out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A store its owner made read-only (0400) and read: SQLite leaves a -shm
// (and -wal) with the store's mode, 0400. Once the owner makes the store
// writable again, opening it gives them owner write back, so the next write
// works (it failed with "attempt to write a readonly database"); while the
// store is read-only they are left as they are. Run as uid 65534 in a
// child process: root writes any file whatever its mode.
TEST(PrivateFilesTest, AStoreMadeWritableAgainMendsTheSidecarsItsReadLeftReadOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot run a child as another uid";
  const int code = exit_code_as_nobody("mend", [](const std::string& dir) {
    const std::string db = dir + "/s.db";
    std::int64_t study = 0;
    {
      SqliteStorage made(db);
      study = made.create_study("s", StudyDirection::kMinimize, Json());
      NewTrial t;
      t.state = TrialState::kComplete;
      t.value = 1.0;
      made.create_trial(study, t);
    }
    if (::chmod(db.c_str(), 0400) != 0) return 4;
    for (int read = 0; read < 2; ++read) {
      SqliteStorage reader(db);
      if (reader.get_all_trials(study, {}).size() != 1) return 5;
    }
    // What the reads left: read-only, as the store (not mended while it is).
    if (mode_of(db + "-shm") != 0400) return 10;
    // run and resume refuse it naming its mode (exit 2), not with SQLite's
    // "attempt to write a readonly database" (exit 1) at the first write.
    if (read_only_store_refusal(db).find("the store is read-only for this user (mode 0400)") ==
        std::string::npos)
      return 11;
    if (::access(HPSEARCH_CLI_PATH, X_OK) == 0) {  // a build folder this uid may reach
      const std::string space = dir + "/space.json";
      std::ofstream(space) << Json{{"study", {{"name", "s"}, {"storage", db}}},
                                   {"budget", {{"n_trials", 3}}},
                                   {"objective", {{"type", "sleep"}}},
                                   {"space", {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}}}}}}
                                  .dump();
      std::string text;
      const int status =
          shell(std::string(HPSEARCH_CLI_PATH) + " run " + space + " --workers 1", text);
      if (status != 2 ||
          text.find("the store is read-only for this user (mode 0400)") == std::string::npos) {
        std::fprintf(stderr, "child: run said: %s\n", text.c_str());
        return 12;
      }
    }
    if (::chmod(db.c_str(), 0600) != 0) return 6;
    if (!read_only_store_refusal(db).empty()) return 13;
    {
      SqliteStorage writer(db);
      NewTrial t;
      t.state = TrialState::kComplete;
      t.value = 2.0;
      writer.create_trial(study, t);
      if (writer.get_all_trials(study, {}).size() != 2) return 20;
    }
    if (mode_of(db + "-shm") != 0600 && fs::exists(db + "-shm")) return 21;
    return 0;
  });
  EXPECT_EQ(code, 0)
      << "10: the reads left no read-only -shm; 11/12: a read-only store not refused as such "
         "(12: by `hpsearch run`); 13: refused once writable; 20/21: the write after chmod 0600 "
         "did not work or "
         "left the -shm read-only; 30: an exception (printed above)";
}

// A store this user may write (0600) in a folder it may not (0555): run and
// resume refuse it with exit 2 naming the folder and its mode (SQLite makes
// the -wal and -shm files there), before anything is written; they exited 1
// with SQLite's "attempt to write a readonly database". So is a new store
// in such a folder. Run as uid 65534 in a child process: root writes any
// folder whatever its mode.
TEST(PrivateFilesTest, AStoreInAFolderThisUserMayNotWriteIsRefusedByRunAndResume) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot run a child as another uid";
  if (::access(HPSEARCH_CLI_PATH, X_OK) != 0) GTEST_SKIP() << "no hpsearch executable";
  const int exit_code = exit_code_as_nobody("rodir", [](const std::string& dir) {
    const std::string db = dir + "/s.db";
    int code = 0;
    const std::string space = dir + "/space.json";
    std::ofstream(space) << Json{{"study", {{"name", "s"}, {"storage", db}}},
                                 {"budget", {{"n_trials", 2}}},
                                 {"objective", {{"type", "sleep"}, {"seconds", 0.01}}},
                                 {"space", {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}}}}}}
                                .dump();
    const std::string cli = std::string(HPSEARCH_CLI_PATH);
    std::string text;
    if (shell(cli + " run " + space + " --workers 1", text) != 0) {
      std::fprintf(stderr, "child: the first run said: %s\n", text.c_str());
      return 4;
    }
    if (::chmod(dir.c_str(), 0555) != 0 || mode_of(db) != 0600) return 5;
    const std::string rule = "the store's folder '" + dir +
                             "' is read-only for this user (mode 0555): run and resume write "
                             "there too (SQLite makes the store's -wal and -shm files beside "
                             "it, the coordinator its .lock file); make the folder writable "
                             "(chmod u+w '" +
                             dir + "')";
    if (read_only_store_refusal(db).find(rule) == std::string::npos) code = 10;
    const std::string before = read_file(db);
    for (const auto& [command, what] :
         {std::pair<std::string, std::string>{" run " + space + " --n-trials 4", "study.storage"},
          {" resume " + db + " --n-trials 4", "STORAGE"},
          {" run " + space + " --storage " + dir + "/new.db", "--storage"}}) {
      const int status = shell(cli + command, text);
      if (code == 0 && (status != 2 || text.find(what + ": " + rule) == std::string::npos)) {
        std::fprintf(stderr, "child: `hpsearch%s` exited %d: %s\n", command.c_str(), status,
                     text.c_str());
        code = 11;
      }
    }
    // A read command cannot make the WAL index there either: it says why.
    const int read = shell(cli + " status " + db, text);
    if (code == 0 &&
        (read != 2 || text.find(db + ": cannot be read by this user: its folder '" + dir +
                                "' (mode 0555) is read-only for this user, "
                                "and SQLite makes the store's WAL index") == std::string::npos)) {
      std::fprintf(stderr, "child: `hpsearch status` exited %d: %s\n", read, text.c_str());
      code = 14;
    }
    if (read_file(db) != before) code = 12;
    if (fs::exists(dir + "/new.db")) code = 13;
    if (::chmod(dir.c_str(), 0755) != 0) code = 6;
    return code;
  });
  EXPECT_EQ(exit_code, 0)
      << "4: the first run failed; 10: read_only_store_refusal said nothing of the folder; 11: "
         "run or resume did not refuse it with exit 2 naming the folder (printed above); 12: the "
         "store was written; 13: a new store was made; 14: status did not say why it cannot "
         "read it (printed above); 30: an exception (printed above)";
}

// ------------------------------------------------------------------ OwnerOnlyFolder

// Writes `text` as the whole file `name` of `folder`.
void replace_with(const OwnerOnlyFolder& folder, const std::string& name, const std::string& text) {
  folder.replace_file(name, [&](const std::function<void(const void*, std::size_t)>& sink) {
    sink(text.data(), text.size());
  });
}

// The message of the Error that `f` throws ("no error" if none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(OwnerOnlyFolderTest, AWriteNeverFollowsALinkPlantedAtTheFileOrItsTemporaryName) {
  Umask umask(022);
  TempDir dir("owner_only");
  const std::string victim = dir.write("victim", "the victim's data");
  const OwnerOnlyFolder folder(dir.file("ckpt"), true);
  EXPECT_EQ(mode_of(dir.file("ckpt")), 0700u);
  EXPECT_EQ(folder.path(), fs::canonical(dir.file("ckpt")).string());
  fs::create_symlink(victim, dir.file("ckpt/trial-0.pt.tmp"));
  fs::create_symlink(victim, dir.file("ckpt/trial-0.pt"));

  replace_with(folder, "trial-0.pt", "weights");
  EXPECT_EQ(read_file(victim), "the victim's data");
  EXPECT_EQ(fs::symlink_status(victim).type(), fs::file_type::regular);
  const std::string file = dir.file("ckpt/trial-0.pt");
  EXPECT_EQ(fs::symlink_status(file).type(), fs::file_type::regular);
  EXPECT_EQ(read_file(file), "weights");
  EXPECT_EQ(mode_of(file), 0600u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(file + ".tmp")));
  EXPECT_EQ(folder.read_file("trial-0.pt", 100), "weights");

  // remove() unlinks a link, not its target.
  fs::create_symlink(victim, dir.file("ckpt/trial-1.pt"));
  EXPECT_FALSE(folder.is_regular_file("trial-1.pt"));
  EXPECT_TRUE(folder.remove("trial-1.pt"));
  EXPECT_EQ(read_file(victim), "the victim's data");
  EXPECT_FALSE(folder.remove("trial-1.pt"));
  EXPECT_TRUE(contains(error_of([&] { replace_with(folder, "../escape", "x"); }),
                       "is not a plain file name"));
  EXPECT_FALSE(fs::exists(dir.file("escape")));

  // A write error leaves no temporary file and keeps the old file.
  EXPECT_TRUE(contains(error_of([&] {
                         folder.replace_file(
                             "trial-0.pt",
                             [](const std::function<void(const void*, std::size_t)>& sink) {
                               sink("par", 3);
                               throw Error("disk full");
                             });
                       }),
                       "disk full"));
  EXPECT_EQ(read_file(file), "weights");
  EXPECT_FALSE(fs::exists(fs::symlink_status(file + ".tmp")));
}

TEST(OwnerOnlyFolderTest, AFolderSwappedForALinkAfterItWasOpenedIsNotFollowed) {
  TempDir dir("owner_only");
  const OwnerOnlyFolder folder(dir.file("ckpt"), true);
  fs::create_directory(dir.file("elsewhere"));
  fs::rename(dir.file("ckpt"), dir.file("moved"));
  fs::create_directory_symlink(dir.file("elsewhere"), dir.file("ckpt"));
  replace_with(folder, "trial-0.pt", "weights");
  EXPECT_TRUE(fs::is_empty(dir.file("elsewhere")));
  EXPECT_EQ(read_file(dir.file("moved/trial-0.pt")), "weights");
}

TEST(OwnerOnlyFolderTest, FoldersOthersCanWriteOrOwnOrThatAreLinksAreRefused) {
  Umask umask(0);
  TempDir dir("owner_only");
  fs::create_directory(dir.file("open"));
  ::chmod(dir.file("open").c_str(), 0777);
  std::string e = error_of([&] { OwnerOnlyFolder f(dir.file("open"), true); });
  EXPECT_TRUE(contains(e, dir.file("open") + ": writable by group or others (mode 0777): refused"))
      << e;
  ::chmod(dir.file("open").c_str(), 0770);
  e = error_of([&] { OwnerOnlyFolder f(dir.file("open"), false); });
  EXPECT_TRUE(contains(e, "(mode 0770)")) << e;
  ::chmod(dir.file("open").c_str(), 0755);  // readable by others, writable by the owner only
  EXPECT_EQ(error_of([&] { OwnerOnlyFolder f(dir.file("open"), false); }), "no error");

  // A link as the folder (to a good folder of the user's: still refused).
  fs::create_directory_symlink(dir.file("open"), dir.file("link"));
  e = error_of([&] { OwnerOnlyFolder f(dir.file("link"), true); });
  EXPECT_TRUE(contains(e, dir.file("link") + ": is a symbolic link: refused")) << e;
  e = error_of([&] { OwnerOnlyFolder f(dir.file("link") + "/", true); });
  EXPECT_TRUE(contains(e, "is a symbolic link")) << e;
  // A file, a missing folder without `create`.
  (void)dir.write("file", "x");
  EXPECT_TRUE(contains(error_of([&] { OwnerOnlyFolder f(dir.file("file"), false); }),
                       "cannot open the folder"));
  EXPECT_TRUE(contains(error_of([&] { OwnerOnlyFolder f(dir.file("missing"), false); }),
                       "cannot open the folder"));
  EXPECT_FALSE(fs::exists(dir.file("missing")));
  EXPECT_NE(error_of([&] { OwnerOnlyFolder f(dir.file("file/sub"), true); }), "no error");

  // Owned by another uid (only root can give a folder away).
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot make a folder of another uid";
  fs::create_directory(dir.file("theirs"));
  ::chmod(dir.file("theirs").c_str(), 0700);
  ASSERT_EQ(::chown(dir.file("theirs").c_str(), 4242, 4242), 0);
  e = error_of([&] { OwnerOnlyFolder f(dir.file("theirs"), true); });
  EXPECT_TRUE(contains(e, dir.file("theirs") + ": owned by uid 4242, not by this user (uid 0)"))
      << e;
}

// The caller's hint ends each refusal (what its user should do depends on
// who names the folder); without one the refusal names no remedy.
TEST(OwnerOnlyFolderTest, TheCallersHintEndsEachRefusal) {
  Umask umask(0);
  TempDir dir("owner_only");
  fs::create_directory(dir.file("open"));
  ::chmod(dir.file("open").c_str(), 0777);
  std::string e = error_of([&] { OwnerOnlyFolder f(dir.file("open"), false, "remove it"); });
  EXPECT_TRUE(contains(e, "(mode 0777): refused (")) << e;
  EXPECT_TRUE(e.size() > 11 && e.substr(e.size() - 11) == "; remove it") << e;
  fs::create_directory(dir.file("mine"));
  ::chmod(dir.file("mine").c_str(), 0700);
  fs::create_directory_symlink(dir.file("mine"), dir.file("link"));
  e = error_of([&] { OwnerOnlyFolder f(dir.file("link"), true, "name the folder it points to"); });
  EXPECT_TRUE(contains(e, "is a symbolic link: refused (")) << e;
  EXPECT_TRUE(contains(e, "; name the folder it points to")) << e;
  e = error_of([&] { OwnerOnlyFolder f(dir.file("link"), true); });
  EXPECT_FALSE(contains(e, "points to")) << e;
  EXPECT_EQ(e.back(), ')') << e;
}

TEST(OwnerOnlyFolderTest, ReadRefusesLinksFifosOpenFilesForeignFilesAndOversizedFiles) {
  Umask umask(0);
  TempDir dir("owner_only");
  const OwnerOnlyFolder folder(dir.file("ckpt"), true);
  const std::string victim = dir.write("secret", "not a checkpoint");
  fs::create_symlink(victim, dir.file("ckpt/link.pt"));
  std::string e = error_of([&] { (void)folder.read_file("link.pt", 100); });
  EXPECT_TRUE(contains(e, folder.path() + "/link.pt: is a symbolic link: refused")) << e;

  ASSERT_EQ(::mkfifo(dir.file("ckpt/fifo.pt").c_str(), 0600), 0);
  e = error_of([&] { (void)folder.read_file("fifo.pt", 100); });  // does not block
  EXPECT_TRUE(contains(e, "fifo.pt: not a regular file")) << e;

  replace_with(folder, "big.pt", "");
  fs::resize_file(dir.file("ckpt/big.pt"), std::uintmax_t{1} << 40);  // sparse, 1 TiB
  e = error_of([&] { (void)folder.read_file("big.pt", 1000); });
  EXPECT_TRUE(contains(e, "big.pt: 1099511627776 bytes, more than the 1000 expected: refused"))
      << e;

  replace_with(folder, "open.pt", "weights");
  ::chmod(dir.file("ckpt/open.pt").c_str(), 0666);
  e = error_of([&] { (void)folder.read_file("open.pt", 100); });
  EXPECT_TRUE(contains(e, "open.pt: writable by group or others (mode 0666): refused")) << e;
  ::chmod(dir.file("ckpt/open.pt").c_str(), 0644);
  EXPECT_EQ(folder.read_file("open.pt", 100), "weights");
  EXPECT_TRUE(contains(error_of([&] { (void)folder.read_file("missing.pt", 100); }),
                       "missing.pt: no such file on this machine"));

  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot make a file of another uid";
  ASSERT_EQ(::chown(dir.file("ckpt/open.pt").c_str(), 4242, 4242), 0);
  e = error_of([&] { (void)folder.read_file("open.pt", 100); });
  EXPECT_TRUE(contains(e, "open.pt: owned by uid 4242, not by this user (uid 0)")) << e;
}

}  // namespace
}  // namespace hps
