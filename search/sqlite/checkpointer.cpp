// WAL checkpoints on a thread of their own (see checkpointer.h).
#include "search/sqlite/checkpointer.h"

#include <exception>
#include <utility>

namespace hps::sqlite {

Checkpointer::Checkpointer(std::string path) : path_(std::move(path)), thread_([this] { run(); }) {}

Checkpointer::~Checkpointer() {
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void Checkpointer::request() {
  {
    std::lock_guard lock(mutex_);
    if (pending_) return;
    pending_ = true;
  }
  wake_.notify_one();
}

void Checkpointer::checkpoint_here(sqlite3* writer, const char* name) {
  std::lock_guard running(running_);
  sqlite3_wal_checkpoint_v2(writer, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
}

namespace {

// Opens a connection for checkpoints. A connection checkpoints only once it
// has opened the WAL, which its first read does (SQLite before 3.42 silently
// does nothing otherwise). Null if it cannot (the writer's own fallback
// checkpoints instead).
sqlite3* open_for_checkpoints(const std::string& path) {
  sqlite3* conn = nullptr;
  if (sqlite3_open_v2(path.c_str(), &conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) !=
          SQLITE_OK ||
      sqlite3_exec(conn, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) !=
          SQLITE_OK) {
    sqlite3_close_v2(conn);
    return nullptr;
  }
  return conn;
}

}  // namespace

void Checkpointer::run() {
  sqlite3* conn = nullptr;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return pending_ || quit_; });
      if (quit_) break;
      pending_ = false;
    }
    if (!conn) conn = open_for_checkpoints(path_);
    if (!conn) continue;
    int log = 0, copied = 0;
    int rc = SQLITE_OK;
    {
      std::lock_guard running(running_);
      rc = sqlite3_wal_checkpoint_v2(conn, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
    }
    if (rc == SQLITE_OK && copied > 0) ++completed_;
    // SQLITE_BUSY: another checkpoint runs; the next request retries.
  }
  if (conn) sqlite3_close_v2(conn);
}

WalCheckpoints::WalCheckpoints(std::string path, int checkpoint_pages)
    : path_(std::move(path)), threshold_(checkpoint_pages) {}

WalCheckpoints::~WalCheckpoints() = default;

void WalCheckpoints::install(sqlite3* db) {
  sqlite3_wal_hook(db, &WalCheckpoints::on_commit, this);
}

std::int64_t WalCheckpoints::completed() const {
  return checkpointer_ ? checkpointer_->completed() : 0;
}

int WalCheckpoints::on_commit(void* arg, sqlite3* db, const char* name, int pages) {
  static_cast<WalCheckpoints*>(arg)->after_commit(db, name, pages);
  return SQLITE_OK;
}

void WalCheckpoints::after_commit(sqlite3* db, const char* name, int pages) {
  if (pages < last_wal_pages_ || next_checkpoint_at_ == 0)
    next_checkpoint_at_ = threshold_;  // the WAL restarted from its beginning
  last_wal_pages_ = pages;
  if (pages >= 8 * threshold_) {
    // The thread cannot keep up (or a long reader pins old frames):
    // checkpoint here, as SQLite's automatic checkpoint would.
    if (checkpointer_) {
      checkpointer_->checkpoint_here(db, name);
    } else {
      sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    }
  } else if (pages >= next_checkpoint_at_) {
    // One checkpoint per `threshold_` new pages, as SQLite's own cadence
    // (not one per commit: each costs two fsyncs).
    next_checkpoint_at_ = pages + threshold_;
    try {
      if (!checkpointer_) checkpointer_ = std::make_unique<Checkpointer>(path_);
      checkpointer_->request();
    } catch (const std::exception&) {
      // No thread (resources): checkpoint here instead.
      sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    }
  }
}

}  // namespace hps::sqlite
