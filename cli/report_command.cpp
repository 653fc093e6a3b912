// hpsearch report | dashboard: the study's plots as an HTML page, written to
// a file or served (read-only) while the study runs.
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "cli/commands.h"
#include "report/dashboard_guard.h"
#include "report/html.h"
#include "report/page_data.h"
#include "search/errors.h"
#include "search/printable.h"
#include "search/util/storage_url.h"
#include "search/writer_lock.h"

#ifndef HPSEARCH_PLOTLY_JS
#define HPSEARCH_PLOTLY_JS ""
#endif

namespace hps::cli {

namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string load_plotly() {
  return report::load_plotly_js(report::find_plotly_js(self_exe(), HPSEARCH_PLOTLY_JS));
}

// The file `path` names once symbolic links are followed (a report is
// written through a link, not over it); `path` itself when it is not a
// link. Throws ConfigError("-o") on a loop of links.
std::filesystem::path follow_links(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
    // A link of another user (planted in /tmp or a shared folder) is never
    // followed: the report, with the study's config, would go where that
    // user chose, over a file of this user's.
    struct stat lst {};
    if (::lstat(p.c_str(), &lst) == 0 && lst.st_uid != ::geteuid())
      throw ConfigError("-o", "'" + printable(p.string()) +
                                  "' is a symbolic link of another user (uid " +
                                  std::to_string(lst.st_uid) +
                                  "): refused (a planted link would send the report, and the "
                                  "study's config, where that user chose); name another file");
    fs::path target = fs::read_symlink(p, ec);
    if (ec) return p;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  throw ConfigError("-o", "'" + printable(path.string()) + "': too many levels of symbolic links");
}

// Whether `path` is an earlier hpsearch report (what -o may replace), or
// empty: its first 8 KiB hold the page's generator tag, or the title of a
// report written before the tag existed.
bool is_earlier_report(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(8192, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head.empty() ||
         head.find("<meta name=\"generator\" content=\"hpsearch report\">") != std::string::npos ||
         (head.starts_with("<!DOCTYPE html>") &&
          head.find("<h1 id=\"title\">hpsearch report</h1>") != std::string::npos);
}

// Checks the output path (-o) and returns the file to write (links
// followed). Refuses what a report would destroy: a folder, a device, FIFO
// or socket (/dev/null would be replaced by a file), the study's own store
// (or its -wal/-shm/-journal/lock), any SQLite file, and any existing file
// that is not an earlier report (a mistyped `-o space.json`, someone's
// page). Throws ConfigError.
std::string check_report_output(const std::string& output, const std::string& storage) {
  namespace fs = std::filesystem;
  if (output.empty()) throw ConfigError("-o", "needs an output file name");
  const fs::path target = follow_links(output);
  const std::string shown =
      "'" + printable(output) +
      (target == fs::path(output) ? "'" : "' (a link to '" + printable(target.string()) + "')");
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::is_directory(st)) throw ConfigError("-o", shown + " is a folder; name the report's file");
  // The store and the files beside it that SQLite and the writer lock use,
  // existing or not (a report there would break the store or its lock).
  const fs::path out_abs = fs::weakly_canonical(fs::absolute(target, ec), ec);
  const fs::path store_abs = fs::weakly_canonical(fs::absolute(storage, ec), ec);
  const std::string lock = WriterLock::lock_path(store_abs.string());
  for (const std::string& part :
       {store_abs.string(), store_abs.string() + "-wal", store_abs.string() + "-shm",
        store_abs.string() + "-journal", lock})
    if (out_abs == fs::path(part) || fs::equivalent(target, part, ec))
      throw ConfigError("-o", shown +
                                  " is the study's store or one of its files: a report would "
                                  "overwrite it; name an .html file");
  if (!fs::exists(st)) {
    const fs::path parent = target.parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec))
      throw ConfigError("-o", "'" + printable(parent.string()) + "' is not an existing folder");
    return target.string();
  }
  if (!fs::is_regular_file(st))
    throw ConfigError("-o", shown +
                                " is not a regular file (a device, FIFO or socket): a report "
                                "would replace it; name an .html file");
  std::ifstream in(target, std::ios::binary);
  char head[16] = {};
  in.read(head, sizeof head);
  if (in.gcount() == sizeof head &&
      std::string_view(head, sizeof head) == std::string_view("SQLite format 3\0", sizeof head))
    throw ConfigError("-o", shown + " is a SQLite database: a report is not written over it");
  if (!is_earlier_report(target.string()))
    throw ConfigError("-o", shown +
                                " exists and is not an earlier hpsearch report: a report replaces "
                                "only an earlier report; remove the file first or name another "
                                "one");
  return target.string();
}

// Writes `text` to `path` through a new temporary file beside it (O_EXCL:
// never through a link planted there) and a rename, so a reader never sees
// half a report. A replaced report of this user's keeps its mode; a new
// file, or one of another user, is 0600
// (owner-only, as the store: the page holds the study's config, the
// objective's env included). Errors name -o and the reason.
void write_file_atomically(const std::string& path, const std::string& text) {
  auto fail = [&](const std::string& what, int err) {
    const char* why = strerrordesc_np(err);
    throw Error("-o: cannot write '" + printable(what) + "': " + (why ? why : "error"));
  };
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) fail(path, errno);
  struct stat old {};
  // A replaced report of this user's keeps its mode; one of another user
  // (planted with a loose mode) does not.
  const bool replacing = ::stat(path.c_str(), &old) == 0 && old.st_uid == ::geteuid();
  ::fchmod(fd, replacing ? (old.st_mode & 07777) : static_cast<mode_t>(0600));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(path, err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, err);
  }
}

}  // namespace

int report_command(const ReportOptions& o) {
  const std::string output = check_report_output(o.output, o.storage);
  auto t0 = std::chrono::steady_clock::now();
  std::string plotly = load_plotly();
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  StudyInfo info = storage->get_study(id);
  auto trials = storage->get_all_trials(id, {});
  Json data = report::build_page_data(info, trials);
  std::string page = report::render_page(data, plotly);
  write_file_atomically(output, page);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << fmt::format(
      "hpsearch report: wrote {} (study '{}', {} trials, {:.1f} MB, {:.2f} s)\n", o.output,
      printable_excerpt(info.name), trials.size(), static_cast<double>(page.size()) / 1e6, s);
  return kExitOk;
}

namespace {

// Seconds between two importance computations of a running study (the
// costliest aggregate: PED-ANOVA over every COMPLETE trial).
constexpr double kImportanceIntervalS = 5.0;

// The dashboard's view of the study: the page data of the last read of the
// store, and the revision at which each trial and each aggregate (each
// top-level key of the page data but "trials") last changed, so that a
// poll gets only what changed since the revision it has. Thread-safe (one
// lock: concurrent polls wait for one read of the store, not one each).
class LiveStudy {
 public:
  // `file`: the store's SQLite file ("" for an in-memory store).
  LiveStudy(std::shared_ptr<Storage> storage, std::int64_t id, std::string file)
      : storage_(std::move(storage)), id_(id), file_(std::move(file)) {
    if (!file_.empty()) have_identity_ = identity(file_, identity_);
  }

  // The whole page data with "rev" (the page as first served). When the
  // store cannot be read now but was before, the last state with
  // "update_error" (the page shows it); throws when it never was.
  Json full() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string error;
    try {
      refresh();
    } catch (const std::exception& e) {
      if (!built_) throw;
      error = e.what();
    }
    Json d = data_;
    d["rev"] = revisions_.revision();
    if (!error.empty()) d["update_error"] = error;
    return d;
  }

  // What changed since revision `since` (>= 0): {"rev"} and
  //  - "unchanged": true alone when nothing did;
  //  - the whole page data and "reset": true when since is 0 or above the
  //    current revision (a page from before a restart of the dashboard);
  //  - else "trials" (the changed ones, with their curves) and the
  //    aggregates whose value changed after `since`.
  Json changes(std::int64_t since) {
    std::lock_guard<std::mutex> lock(mu_);
    refresh();
    const std::int64_t rev = revisions_.revision();
    if (since == rev) return Json{{"rev", rev}, {"unchanged", true}};
    if (since == 0 || since > rev) {
      Json d = data_;
      d["rev"] = rev;
      d["reset"] = true;
      return d;
    }
    Json out{{"rev", rev}};
    Json changed = Json::array();
    for (const auto& t : revisions_.changed_since(since))
      changed.push_back(report::trial_record(*t, space_, true));
    out["trials"] = std::move(changed);
    for (const auto& [key, a] : aggregates_)
      if (a.revision > since) out[key] = data_[key];
    return out;
  }

 private:
  struct Aggregate {
    std::string text;  // its JSON, to tell a change
    std::int64_t revision = 0;
  };

  // Reads the store; rebuilds the page data when a trial changed or
  // importances are due (the COMPLETE trials changed and the last
  // computation is kImportanceIntervalS old). Throws what the store throws
  // (a corrupt or unreadable file): the previous state is kept.
  void refresh() {
    check_same_file();
    StudyInfo info = storage_->get_study(id_);
    auto trials = storage_->get_all_trials(id_, {});
    const std::int64_t rev = revisions_.update(trials);
    const auto now = std::chrono::steady_clock::now();
    const std::uint64_t digest = report::complete_trials_digest(trials);
    const bool importances_due =
        !have_importances_ ||
        (digest != importances_digest_ &&
         std::chrono::duration<double>(now - importances_at_).count() >= kImportanceIntervalS);
    if (built_ && rev == built_rev_ && !importances_due) return;
    space_ = report::study_space(info, trials);
    if (importances_due) {
      importances_ = report::ped_anova_importances(trials, space_, info.direction,
                                                   report::PageOptions{}.importance);
      have_importances_ = true;
      importances_digest_ = digest;
      importances_at_ = now;
    }
    data_ = report::build_page_data(info, trials, report::PageOptions{}, importances_);
    for (auto& [key, value] : data_.items()) {
      if (key == "trials" || key == "generated") continue;
      std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
      Aggregate& a = aggregates_[key];
      if (a.revision == 0 || a.text != text) {
        a.text = std::move(text);
        a.revision = revisions_.bump();
      }
    }
    built_ = true;
    built_rev_ = revisions_.revision();
  }

  // The file's device and inode; false if it cannot be read.
  static bool identity(const std::string& path, std::pair<dev_t, ino_t>& out) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return false;
    out = {st.st_dev, st.st_ino};
    return true;
  }

  // SQLite keeps reading a deleted (or renamed-over) file through its open
  // descriptor: without this the dashboard would show the old study as if
  // it were live. Throws Error when the path no longer names the file the
  // dashboard opened (the page shows it; the last state stays).
  void check_same_file() const {
    if (file_.empty() || !have_identity_) return;
    std::pair<dev_t, ino_t> now;
    if (!identity(file_, now))
      throw Error("the store " + printable(file_) +
                  " was deleted since the dashboard started: the page shows its last state");
    if (now != identity_)
      throw Error("the store " + printable(file_) +
                  " was replaced by another file since the dashboard started: restart the "
                  "dashboard to see it; the page shows the old file's last state");
  }

  std::mutex mu_;
  std::shared_ptr<Storage> storage_;
  std::int64_t id_;
  std::string file_;
  bool have_identity_ = false;
  std::pair<dev_t, ino_t> identity_{};
  report::TrialRevisions revisions_;
  SearchSpace space_;
  Json data_;
  bool built_ = false;
  std::int64_t built_rev_ = 0;  // the revision data_ was built at
  std::map<std::string, Aggregate> aggregates_;
  // A flag, not std::optional: GCC's -Wmaybe-uninitialized misreads an
  // optional at -O1 (the TSan build).
  bool have_importances_ = false;
  report::Importances importances_;
  std::uint64_t importances_digest_ = 0;
  std::chrono::steady_clock::time_point importances_at_;
};

// Security headers on every response: nothing may frame the page, it
// loads nothing but its own endpoint, no Referer leaves it, other origins
// may not embed its responses; no CORS header, so another origin's page
// cannot read them.
void secure_headers(httplib::Response& res, bool html) {
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cross-Origin-Resource-Policy", "same-origin");
  res.set_header("Content-Security-Policy",
                 html ? std::string(report::kLivePageCsp) + "; frame-ancestors 'none'"
                      : std::string("default-src 'none'; frame-ancestors 'none'"));
}

// After a failed bind: refuses a --host that names no address (does not
// resolve) or an address this machine does not have (EADDRNOTAVAIL),
// naming --host rather than --port. Throws ConfigError; returns when the
// host is fine (the port is the problem).
void check_listen_host(const std::string& host, const std::string& as_given) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0 || !found)
    throw ConfigError("--host", "'" + printable(as_given) + "' is not an address or a name that " +
                                    "resolves here (" + ::gai_strerror(rc) + ")");
  bool can_bind = false;
  for (addrinfo* a = found; a && !can_bind; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    can_bind = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (!can_bind)
    throw ConfigError("--host", "'" + printable(as_given) +
                                    "' is not an address of this machine: cannot listen there");
}

void refuse(httplib::Response& res, int status, const std::string& why) {
  res.status = status;
  res.set_header("Connection", "close");
  res.set_content(why + "\n", "text/plain; charset=utf-8");
}

}  // namespace

int dashboard_command(const DashboardOptions& o) {
  // "[::1]", as URLs write an IPv6 address, is the address ::1.
  const std::string host = o.host.size() > 2 && o.host.front() == '[' && o.host.back() == ']'
                               ? o.host.substr(1, o.host.size() - 2)
                               : o.host;
  if (!is_loopback_host(host) && !o.allow_remote)
    throw ConfigError("--host",
                      "'" + printable(o.host) +
                          "' is not a loopback address; the dashboard shows the whole "
                          "study to whoever reaches it: add --allow-remote to listen there");
  if (o.port < 0 || o.port > 65535) throw ConfigError("--port", "must be in 0..65535");
  if (o.poll_ms < 100) throw ConfigError("--refresh-ms", "must be >= 100");
  std::string plotly = load_plotly();
  auto storage = open_existing(o.storage);
  const std::int64_t id = pick_study(*storage, o.study, o.storage);
  const util::StorageUrl url = util::parse_storage_url(o.storage);
  LiveStudy live(storage, id, url.in_memory ? std::string() : url.path);

  httplib::Server server;
  // Slow or idle clients (slowloris): each read waits at most 2 s, an idle
  // kept-alive connection 2 s; 64 threads, so that a few dozen idle
  // connections do not hold every thread while a page polls. (One thread
  // per connection: a local client opening hundreds of idle connections
  // delays the others by up to 2 s, no more; README: who may do what.)
  server.set_read_timeout(2, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_timeout(2);
  server.set_keep_alive_max_count(100);
  server.set_payload_max_length(std::size_t{64} * 1024);
  server.new_task_queue = [] { return new httplib::ThreadPool(64); };
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which
  // lets a second dashboard bind a port already in use and share its
  // clients (each request answered by either study). Without it, a busy
  // port is an error.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });

  const bool loopback = is_loopback_host(host);
  const std::string bound = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  server.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    secure_headers(res, req.path == "/");
    // Loopback peers only, unless --allow-remote (defence in depth: a
    // loopback address is listened on).
    if (!o.allow_remote && !report::is_loopback_peer(req.remote_addr)) {
      refuse(res, 403, "forbidden: not a loopback peer");
      return httplib::Server::HandlerResponse::Handled;
    }
    // One Host header: two are ambiguous (RFC 9112, section 3.2: 400).
    if (req.get_header_value_count("Host") > 1) {
      refuse(res, 400, "bad request: more than one Host header");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Read-only: GET (and HEAD) only.
    if (req.method != "GET" && req.method != "HEAD") {
      res.set_header("Allow", "GET, HEAD");
      refuse(res, 405, "method not allowed: the dashboard is read-only");
      return httplib::Server::HandlerResponse::Handled;
    }
    // No request body: a GET has none, and refusing one (the connection is
    // closed) keeps a client from making the dashboard read megabytes.
    const std::string length = req.get_header_value("Content-Length");
    if (req.has_header("Transfer-Encoding") ||
        (!length.empty() && length.find_first_not_of('0') != std::string::npos)) {
      refuse(res, 413, "payload too large: the dashboard takes no request body");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Refuse pages reached under another name (DNS rebinding: a page of
    // evil.example whose name now resolves to 127.0.0.1).
    if (!report::host_allowed(req.get_header_value("Host"), bound)) {
      refuse(res, 403, "forbidden host: use http://127.0.0.1 or http://localhost");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server.Get("/", [&](const httplib::Request&, httplib::Response& res) {
    try {
      report::PageMode mode;
      mode.live = true;
      mode.poll_url = "api/data";
      mode.poll_ms = o.poll_ms;
      std::string page = report::render_page(live.full(), plotly, mode);
      res.set_content(page, "text/html; charset=utf-8");
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(std::string("error: ") + e.what() + "\n", "text/plain; charset=utf-8");
    }
  });
  server.Get("/api/data", [&](const httplib::Request& req, httplib::Response& res) {
    std::int64_t since = 0;
    if (req.has_param("since")) {
      auto parsed = report::parse_since(req.get_param_value("since"));
      if (!parsed) {
        res.status = 400;
        res.set_content("since: must be a revision, an integer in 0..2^63-1\n",
                        "text/plain; charset=utf-8");
        return;
      }
      since = *parsed;
    }
    try {
      res.set_content(live.changes(since).dump(-1, ' ', false, Json::error_handler_t::replace),
                      "application/json");
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(std::string("error: ") + e.what() + "\n", "text/plain; charset=utf-8");
    }
  });

  int port = o.port;
  if (port == 0) {
    port = server.bind_to_any_port(host);
    if (port < 0) {
      check_listen_host(host, o.host);  // names what is wrong with --host, if anything
      throw Error(fmt::format("--host: cannot listen on {}", printable(o.host)));
    }
  } else if (!server.bind_to_port(host, port)) {
    check_listen_host(host, o.host);
    throw Error(fmt::format("--port: cannot listen on {}:{} (in use?)", printable(o.host), port));
  }
  if (!loopback)
    std::cerr << fmt::format(
        "hpsearch dashboard: WARNING: --allow-remote: listening on {}:{}, not a loopback address. "
        "Anyone who can reach this port can read the whole study: its params, values, settings "
        "(space.json, which may hold the objective's command line and its arguments), worker "
        "names and failure messages. There is no password and no encryption (plain HTTP); "
        "prefer the loopback default and an SSH tunnel (ssh -L 8080:127.0.0.1:8080 HOST).\n",
        bound, port);
  std::atomic<bool>* stop = install_stop_handlers(false);
  std::thread listener([&] { server.listen_after_bind(); });
  std::cout << fmt::format("hpsearch dashboard: serving http://{}:{}/ (read-only; Ctrl-C stops)\n",
                           bound, port)
            << std::flush;
  while (!stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.stop();
  listener.join();
  return kExitOk;
}

}  // namespace hps::cli
