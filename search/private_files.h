// Owner-only files: what hpsearch creates to hold a study (the store, its
// -wal/-shm files, the writer lock file, trial logs and their folders) is
// created readable and writable by its owner only (files 0600, folders
// 0700), whatever the process umask, because it holds the objective's
// environment (API tokens) and the coordinator's endpoint.
//
// Files and folders that already exist are left as they are: a mode the
// user set on purpose (a shared group folder, say) is kept.
//
// SQLite creates a database's -wal and -shm files with the mode of the
// database file itself, so a store created here owner-only has private
// -wal and -shm files too.
#pragma once

#include <string>

namespace hps {

// Mode of a new private file / folder.
constexpr unsigned kPrivateFileMode = 0600;
constexpr unsigned kPrivateDirMode = 0700;

// Creates `path` as an empty file with mode 0600 if nothing exists there;
// an existing file (or a symbolic link to one) is left untouched. Returns
// true if the file was created now. Throws Error naming the path and the
// system's reason (no such folder, permission denied, too many open files)
// if it can neither be created nor found.
bool create_private_file(const std::string& path);

// Creates the folder `path` and any missing parents with mode 0700 (as
// `mkdir -p -m 0700`, for every folder it creates); existing folders are
// left untouched. Throws Error naming the folder and the system's reason if
// a folder cannot be created or a path component is not a folder.
void create_private_directories(const std::string& path);

// Opens `path` for appending (O_APPEND | O_CLOEXEC), creating it with mode
// 0600 if it is missing. Returns the descriptor, or -1 with errno set (as
// open(2)).
int open_private_append(const std::string& path);

}  // namespace hps
