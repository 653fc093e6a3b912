// Private to SqliteStorage: WAL checkpoints on a thread of their own
// (SqliteOptions::background_checkpoint).
//
// A checkpoint copies the write-ahead log into the database file, with its
// fsyncs; SQLite's automatic checkpoint runs it on the writing call after
// its commit. WalCheckpoints replaces that (sqlite3_wal_hook): after each
// commit it looks at the WAL's size and, once per `checkpoint_pages` new
// pages, asks a Checkpointer thread with a connection of its own for a
// passive checkpoint, so the writer does not wait for it. If the WAL reaches
// 8 x checkpoint_pages (the thread cannot keep up, or a long reader pins old
// frames) the writer checkpoints itself, so the WAL stays bounded.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace hps::sqlite {

// Copies the WAL into the database file on its own thread and connection
// (SQLITE_CHECKPOINT_PASSIVE: it never blocks the writer or readers, and the
// writer restarts the WAL from its beginning once all of it is copied).
class Checkpointer {
 public:
  // Starts the thread; its connection opens `path` on the first request.
  // Throws std::system_error if no thread can be started.
  explicit Checkpointer(std::string path);
  // Stops the thread (after the checkpoint running, if any) and closes its
  // connection.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Asks for a checkpoint (cheap when one is already asked for or running).
  void request();
  // Checkpoints that copied frames so far.
  std::int64_t completed() const { return completed_.load(); }

  // A checkpoint on the writer's connection, after the thread's current
  // one (if any) ends, so that it is not refused as busy.
  void checkpoint_here(sqlite3* writer, const char* name);

 private:
  void run();

  std::string path_;
  std::mutex running_;  // held while a checkpoint of this process runs
  std::mutex mutex_;
  std::condition_variable wake_;
  bool pending_ = false;
  bool quit_ = false;
  std::atomic<std::int64_t> completed_{0};
  std::thread thread_;  // last: starts after the members above exist
};

// The checkpoint policy of one writing connection: install() registers it
// as the connection's WAL hook (replacing SQLite's automatic checkpoint).
// The Checkpointer thread starts on the first checkpoint needed.
class WalCheckpoints {
 public:
  // `checkpoint_pages` >= 1: the WAL growth (pages) that asks for a
  // checkpoint.
  WalCheckpoints(std::string path, int checkpoint_pages);
  ~WalCheckpoints();
  WalCheckpoints(const WalCheckpoints&) = delete;
  WalCheckpoints& operator=(const WalCheckpoints&) = delete;

  // Makes this object `db`'s WAL hook; it must outlive db's use.
  void install(sqlite3* db);
  // Checkpoints by the thread that copied frames so far (0 if none ran).
  std::int64_t completed() const;

 private:
  // sqlite3_wal_hook: called by the writing thread after each commit with
  // the WAL's size in pages.
  static int on_commit(void* arg, sqlite3* db, const char* name, int pages);
  void after_commit(sqlite3* db, const char* name, int pages);

  std::string path_;
  int threshold_;
  std::unique_ptr<Checkpointer> checkpointer_;
  int last_wal_pages_ = 0;      // the WAL's size after the last commit
  int next_checkpoint_at_ = 0;  // WAL size that asks for the next checkpoint
};

}  // namespace hps::sqlite
