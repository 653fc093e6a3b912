#include "coordinator/artifact_server.h"

#include <dirent.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "protocol/curve_keys.h"
#include "protocol/zmq_util.h"
#include "search/errors.h"
#include "search/printable.h"

namespace hps {

namespace proto = hps::protocol;

namespace {

// This process's threads, by thread id.
std::set<int> threads() {
  std::set<int> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    try {
      out.insert(std::stoi(e.path().filename().string()));
    } catch (const std::exception&) {
    }
  }
  return out;
}

std::string random_token() {
  std::random_device rd;
  std::string out;
  char buf[9];
  for (int i = 0; i < 4; ++i) {
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
    out += buf;
  }
  return out;
}

}  // namespace

ArtifactServer::ArtifactServer(const std::string& where, const std::string& curve_secret_key,
                               const std::map<std::string, std::string>& authorized) {
  // libzmq starts a context's threads with its first socket: the threads
  // that appear now are this context's (its I/O thread carries the pieces'
  // bytes) and its ZAP handler's, lowered to the artifact threads' priority.
  // (Not by name: a new thread may not have named itself yet.)
  const std::set<int> before = threads();
  if (!curve_secret_key.empty()) zap_ = std::make_unique<ZapAuthenticator>(context_, authorized);
  socket_ = zmq::socket_t(context_, zmq::socket_type::router);
  for (int tid : threads())
    if (!before.count(tid)) lower_thread_priority(tid);
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(proto::kMaxFrameBytes));
  socket_.set(zmq::sockopt::sndhwm, 1000);
  socket_.set(zmq::sockopt::rcvhwm, 1000);
  if (zap_) {
    socket_.set(zmq::sockopt::curve_server, true);
    socket_.set(zmq::sockopt::curve_secretkey, curve_secret_key);
    socket_.set(zmq::sockopt::zap_domain, curve::kZapDomain);
    // Before the endpoint is bound, so that no peer goes unseen.
    monitor_ = std::make_unique<HandshakeMonitor>(context_, socket_, "");
  }
  socket_.set(zmq::sockopt::ipv6, zmq_util::ipv6_endpoint(where));
  if (const std::string rule = zmq_util::ipc_path_refusal(where); !rule.empty())
    throw Error("coordinator: the artifact endpoint " + where + ": " + rule);
  try {
    endpoint_ = zmq_util::bind_owner_only(socket_, where);  // ipc: owner-only
  } catch (const zmq::error_t& e) {
    throw Error("coordinator: cannot bind the artifact endpoint '" + where + "': " + e.what());
  }
  ipc_file_ = zmq_util::IpcSocketFile::of(endpoint_);  // removed by the destructor
}

ArtifactServer::~ArtifactServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  monitor_.reset();
  socket_.close();
  ipc_file_.remove();
}

void ArtifactServer::start(ArtifactStore& store) {
  if (thread_.joinable()) return;
  store_ = &store;
  thread_ = std::thread([this] { run(); });
}

std::string ArtifactServer::grant(Grant grant) {
  std::string token = random_token();
  std::lock_guard lock(mutex_);
  // One transfer per trial and direction at a time: a new first piece
  // replaces an unfinished transfer's token.
  for (auto it = grants_.begin(); it != grants_.end();)
    if (it->second.number == grant.number && it->second.kind == grant.kind &&
        it->second.user == grant.user)
      it = grants_.erase(it);
    else
      ++it;
  grants_[token] = std::move(grant);
  return token;
}

void ArtifactServer::revoke_trial(std::int64_t number) {
  std::lock_guard lock(mutex_);
  for (auto it = grants_.begin(); it != grants_.end();)
    if (it->second.number == number)
      it = grants_.erase(it);
    else
      ++it;
}

std::optional<ArtifactServer::Grant> ArtifactServer::find(const std::string& token) {
  std::lock_guard lock(mutex_);
  auto it = grants_.find(token);
  if (it == grants_.end()) return std::nullopt;
  return it->second;
}

void ArtifactServer::revoke(const std::string& token) {
  std::lock_guard lock(mutex_);
  grants_.erase(token);
}

void ArtifactServer::run() {
  lower_thread_priority(static_cast<int>(::gettid()));
  const int socket_fd = socket_.get(zmq::sockopt::fd);
  while (!stop_) {
    // Read what is there; the socket's ZMQ_FD wakes on an edge, so sleep
    // only once it is empty.
    for (int i = 0; i < 64; ++i) {
      zmq::message_t rid;
      try {
        if (!zmq_util::no_eintr([&] { return socket_.recv(rid, zmq::recv_flags::dontwait); }))
          break;
        zmq::message_t frame;
        int parts = 0;
        for (bool more = rid.more(); more; ++parts) {
          zmq::message_t part;
          (void)zmq_util::no_eintr([&] { return socket_.recv(part); });
          more = part.more();
          if (parts == 0) frame = std::move(part);
        }
        if (parts != 1) continue;  // exactly [routing id][one frame]; else dropped
        on_frame(rid.to_string(), frame.to_string());
      } catch (const zmq::error_t& e) {
        spdlog::debug("coordinator: artifact endpoint: {}", e.what());
        break;
      }
    }
    on_results();
    if ((socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0) continue;
    pollfd fds[2] = {{socket_fd, POLLIN, 0}, {store_->transfer_fd(), POLLIN, 0}};
    (void)::poll(fds, 2, 100);
  }
}

void ArtifactServer::on_frame(const std::string& rid, const std::string& frame) {
  proto::Message m;
  try {
    m = proto::decode(frame);
  } catch (const std::exception& e) {
    spdlog::debug("coordinator: artifact endpoint: a bad frame from {} dropped: {}", printable(rid),
                  e.what());
    return;
  }
  if (auto* put = std::get_if<proto::ArtifactPut>(&m))
    on_put(rid, *put);
  else if (auto* get = std::get_if<proto::ArtifactGet>(&m))
    on_get(rid, *get);
  else
    spdlog::debug(
        "coordinator: artifact endpoint: a message from {} dropped (only pieces travel here)",
        printable(rid));
}

std::string ArtifactServer::queue_refusal(const std::string& token) const {
  if (auto it = queued_.find(token); it != queued_.end() && it->second >= kMaxQueuedPerToken)
    return "more than " + std::to_string(kMaxQueuedPerToken) +
           " pieces of this transfer in flight (a worker sends at most 4 at a time): refused";
  if (queued_total_ >= kMaxQueued)
    return "the coordinator has " + std::to_string(kMaxQueued) +
           " pieces queued (busy writing): refused";
  return "";
}

void ArtifactServer::submit(ArtifactStore::Job job) {
  ++queued_[job.token];
  ++queued_total_;
  store_->submit(std::move(job));
}

void ArtifactServer::on_put(const std::string& rid, proto::ArtifactPut& m) {
  proto::ArtifactPutReply reply;
  reply.number = m.number;
  reply.step = m.step;
  reply.kind = m.kind;
  const bool user = m.kind == proto::ArtifactKind::kUser;
  const std::optional<Grant> g = find(m.token);
  if (!g || g->kind != Grant::Kind::kPut || g->number != m.number || g->step != m.step ||
      g->user != user || m.offset == 0 || m.total != g->total ||
      m.manifest_bytes != g->manifest_bytes) {
    reply.error = "a piece of trial " + std::to_string(m.number) +
                  " with an unknown or expired token, or not the upload it was granted for " +
                  "(trial, step, kind, offset > 0, total, manifest length): refused";
    send(rid, reply);
    return;
  }
  if (std::string why = queue_refusal(m.token); !why.empty()) {
    // The upload ends: the loop frees what it reserved and says so.
    revoke(m.token);
    ArtifactStore::Result r;
    r.kind = ArtifactStore::Job::Kind::kPut;
    r.rid = g->rid;
    r.number = g->number;
    r.lineage = g->lineage;
    r.step = g->step;
    r.user = g->user;
    r.route = ArtifactStore::Job::Route::kTransfer;
    r.token = m.token;
    r.error = why;
    store_->post(std::move(r));
    reply.error = why;
    send(rid, reply);
    return;
  }
  ArtifactStore::Job job;
  job.kind = ArtifactStore::Job::Kind::kPut;
  job.rid = g->rid;
  job.number = g->number;
  job.lineage = g->lineage;
  job.step = g->step;
  job.offset = m.offset;
  job.total = m.total;
  job.manifest_bytes = m.manifest_bytes;
  job.checksum = m.checksum;
  job.user = user;
  job.data = std::move(m.data);
  job.route = ArtifactStore::Job::Route::kTransfer;
  job.token = m.token;
  job.reply_to = rid;
  submit(std::move(job));
}

void ArtifactServer::on_get(const std::string& rid, const proto::ArtifactGet& m) {
  proto::ArtifactGetReply reply;
  reply.number = m.number;
  reply.step = m.step;
  const std::optional<Grant> g = find(m.token);
  if (!g || g->kind != Grant::Kind::kGet || g->number != m.number || g->step != m.step) {
    reply.error =
        "a request for trial " + std::to_string(m.number) +
        " with an unknown or expired token, or not the snapshot it was granted for: " + "refused";
    send(rid, reply);
    return;
  }
  if (std::string why = queue_refusal(m.token); !why.empty()) {
    reply.error = why;
    send(rid, reply);
    return;
  }
  ArtifactStore::Job job;
  job.kind = ArtifactStore::Job::Kind::kGet;
  job.rid = g->rid;
  job.number = g->number;
  job.lineage = g->lineage;
  job.step = g->step;
  job.offset = m.offset;
  job.route = ArtifactStore::Job::Route::kTransfer;
  job.token = m.token;
  job.reply_to = rid;
  submit(std::move(job));
}

void ArtifactServer::on_results() {
  for (ArtifactStore::Result& r : store_->take_transfer()) {
    if (auto it = queued_.find(r.token); it != queued_.end()) {
      --queued_total_;
      if (--it->second <= 0) queued_.erase(it);
    }
    if (r.kind == ArtifactStore::Job::Kind::kGet) {
      proto::ArtifactGetReply reply;
      reply.number = r.number;
      reply.step = r.step;
      reply.ok = r.ok;
      reply.error = r.error;
      if (r.ok) {
        reply.offset = r.offset;
        reply.total = r.total;
        reply.manifest_bytes = r.manifest_bytes;
        reply.data = std::move(r.data);
        reply.checksum = r.checksum;
        if (reply.offset + reply.data.size() >= reply.total) revoke(r.token);
      } else {
        revoke(r.token);
        spdlog::warn("coordinator: trial {}: cannot send the snapshot of step {}: {}", r.number,
                     r.step, r.error);
      }
      send(r.reply_to, reply);
      continue;
    }
    if (r.ok && !r.done) {
      proto::ArtifactPutReply reply;
      reply.number = r.number;
      reply.step = r.step;
      reply.ok = true;
      reply.next_offset = r.next_offset;
      reply.kind = r.user ? proto::ArtifactKind::kUser : proto::ArtifactKind::kSnapshot;
      send(r.reply_to, reply);
      continue;
    }
    // The upload's end (installed, or refused): the loop records it and
    // answers on the main socket.
    revoke(r.token);
    store_->post(std::move(r));
  }
}

void ArtifactServer::send(const std::string& rid, const proto::Message& m) {
  const std::string frame = proto::encode(m);
  try {
    zmq_util::no_eintr([&] {
      return socket_.send(zmq::buffer(rid), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    });
    zmq_util::no_eintr([&] { return socket_.send(zmq::buffer(frame), zmq::send_flags::dontwait); });
  } catch (const zmq::error_t& e) {
    spdlog::debug("coordinator: artifact endpoint: cannot send to {}: {}", printable(rid),
                  e.what());
  }
}

}  // namespace hps
