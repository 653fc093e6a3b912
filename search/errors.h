// Error types raised by hpsearch. Every message names the field or object it
// concerns and the rule that was broken.
#pragma once

#include <stdexcept>
#include <string>

namespace hps {

// Base class of every error hpsearch raises on purpose. A NUL byte in the
// message is kept as the four characters "\x00" (as printable() writes it,
// search/printable.h): what() is a C string, so a NUL from a user's text (a
// key or value of space.json or of a stored document) would end the message
// there and lose the rest, the rule included.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(escape_nul(what)) {}
  explicit Error(const char* what) : std::runtime_error(what) {}

 private:
  static std::string escape_nul(const std::string& text) {
    if (text.find('\0') == std::string::npos) return text;
    std::string out;
    out.reserve(text.size() + 8);
    for (char c : text) {
      if (c == '\0')
        out += "\\x00";
      else
        out += c;
    }
    return out;
  }
};

// Bad configuration: space.json, a distribution, an options struct.
// `path()` is the dotted location of the offending field ("space.lr.low"),
// what() is "<path>: <rule>".
class ConfigError : public Error {
 public:
  ConfigError(std::string path, const std::string& rule)
      : Error(path.empty() ? rule : path + ": " + rule), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The store could not be read or written (SQLite error, unknown schema
// version, missing study, ...). The store is left unchanged when this is
// thrown from a write (every write is one transaction).
class StorageError : public Error {
 public:
  using Error::Error;
};

// The store may not be opened as it is, and nothing in it was changed: a
// file of another program, a schema newer than this build's, an older
// schema this build would upgrade while a coordinator may run one of its
// studies (one runs, or its writer lock cannot be asked), files planted
// beside it (private_files.h). Bad input or state, as a ConfigError is, not
// a failure of the store: the CLI exits 2 on it, as on a ConfigError.
class StoreRefused : public StorageError {
 public:
  using StorageError::StorageError;
};

// Thrown from an objective (or by Trial::report()/should_prune() users) to end
// the trial as PRUNED. Not derived from Error: it is control flow.
class TrialPruned : public std::exception {
 public:
  const char* what() const noexcept override { return "trial pruned"; }
};

// Thrown by Trial methods when the run was interrupted (Ctrl-C): the trial
// ends as FAIL("interrupted") and is queued again on resume.
class Interrupted : public std::exception {
 public:
  const char* what() const noexcept override { return "interrupted"; }
};

}  // namespace hps
