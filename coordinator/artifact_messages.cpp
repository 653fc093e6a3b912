// Coordinator::Impl: snapshots that travel (artifact_store.h). A remote
// worker uploads the snapshot of each step it reports (ArtifactPut) and
// downloads the one a retry resumes (ArtifactGet). Only the session that
// holds the trial may do either, for that trial's lineage only; the files
// are written and read on the store's I/O thread, and the trial's
// checkpoint attr is set once the whole snapshot arrived and was verified.
#include <spdlog/spdlog.h>
#include <sys/un.h>

#include <filesystem>
#include <utility>

#include "coordinator/coordinator_impl.h"
#include "search/printable.h"

namespace hps {

namespace proto = hps::protocol;

void Coordinator::Impl::open_artifact_store() {
  if (options.checkpoint_root.empty() || !options.artifacts.checkpoints) return;
  try {
    store_id = checkpoints::ensure_store_id(options.checkpoint_root);
  } catch (const std::exception& e) {
    spdlog::warn(
        "coordinator: no artifact store for remote workers ({}): their retries start from "
        "scratch",
        e.what());
    return;
  }
  // The snapshots kept from earlier runs count against max_study_bytes.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(options.checkpoint_root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("lineage-", 0) != 0) continue;
    try {
      const std::int64_t lineage = std::stoll(name.substr(8));
      if (lineage >= 0) stored_bytes[lineage] = checkpoints::folder_bytes(e.path().string());
    } catch (const std::exception&) {
    }
  }
  // The trials' user artifacts, beside the checkpoint root.
  artifact_root =
      checkpoints::artifact_root_for(options.checkpoint_root, !options.artifacts.path.empty());
  user_stored_bytes = checkpoints::folder_bytes(artifact_root);
  artifacts =
      std::make_unique<ArtifactStore>(options.checkpoint_root, options.artifacts.max_snapshot_bytes,
                                      artifact_root, options.artifacts.max_artifact_bytes);
  // The artifact endpoint: the pieces after the first travel there, off
  // this loop (artifact_server.h).
  const std::string where = transport.artifact_bind();
  if (where.empty()) return;
  if (where.rfind("ipc://", 0) == 0 && where.size() - 6 >= sizeof(sockaddr_un{}.sun_path)) {
    spdlog::warn(
        "coordinator: no artifact endpoint: '{}' is too long for an ipc path; the pieces of "
        "snapshots travel on the main socket",
        where);
    return;
  }
  try {
    artifact_server = std::make_unique<ArtifactServer>(
        where, transport.curve_on() ? options.curve_secret_key : "", options.authorized_keys);
  } catch (const Error& e) {
    throw ConfigError("coordinator.endpoint",
                      std::string(e.what()) +
                          ": remote workers send the pieces of snapshots and artifacts to this "
                          "second endpoint (the endpoint's port + 1; for ipc, its path + "
                          "\".artifacts\"); free it, or bind the coordinator to another port");
  }
  artifact_server->start(*artifacts);
  spdlog::debug("coordinator: artifact endpoint {}", artifact_server->endpoint());
}

void Coordinator::Impl::grant_transfer(const ArtifactStore::Result& r, std::string& token) {
  if (!artifact_server || !r.ok || r.route != ArtifactStore::Job::Route::kMain) return;
  ArtifactServer::Grant g;
  g.rid = r.rid;
  g.number = r.number;
  g.lineage = r.lineage;
  g.step = r.step;
  if (r.kind == ArtifactStore::Job::Kind::kGet) {
    if (r.offset != 0 || r.data.size() >= r.total) return;  // one piece: nothing more to ask
    g.kind = ArtifactServer::Grant::Kind::kGet;
  } else {
    if (!r.first || r.done) return;
    g.kind = ArtifactServer::Grant::Kind::kPut;
    g.total = r.total;
    g.manifest_bytes = r.manifest_bytes;
    g.user = r.user;
  }
  token = artifact_server->grant(std::move(g));
}

std::uint64_t Coordinator::Impl::study_bytes_but(std::int64_t lineage) const {
  std::uint64_t total = user_stored_bytes;
  for (const auto& [l, b] : stored_bytes)
    if (l != lineage) total += b;
  for (const auto& [l, b] : pending_bytes)
    if (l != lineage) total += b;
  for (const auto& [n, b] : user_pending_bytes) total += b;
  return total;
}

void Coordinator::Impl::record_artifacts_in_place(std::int64_t number) {
  const FrozenTrial& t = mirror.at(number);
  try {
    if (artifact_root.empty()) throw Error("this coordinator keeps no user artifacts");
    const checkpoints::ArtifactSummary kept =
        checkpoints::read_artifact_summary(artifact_root, number);
    storage.set_trial_system_attr(t.trial_id, checkpoints::kAttrArtifacts, kept.to_json());
  } catch (const std::exception& e) {
    spdlog::warn("coordinator: trial {}: its artifacts are not recorded: {}", number, e.what());
    storage.set_trial_user_attr(t.trial_id, checkpoints::kAttrArtifactWarning,
                                std::string("not recorded: ") + e.what());
  }
  mirror.refresh(number);
}

std::string Coordinator::Impl::artifact_job_refusal(const Session& s) const {
  auto it = artifact_jobs.find(s.routing_id);
  if (it != artifact_jobs.end() && it->second >= kMaxArtifactJobsPerSession)
    return "more than " + std::to_string(kMaxArtifactJobsPerSession) +
           " snapshot pieces in flight from this worker (it sends at most 4 at a time): "
           "refused";
  if (artifact_jobs_total >= kMaxArtifactJobs)
    return "the coordinator has " + std::to_string(kMaxArtifactJobs) +
           " snapshot pieces queued (busy writing); try again later";
  return "";
}

void Coordinator::Impl::submit_artifact_job(ArtifactStore::Job job) {
  ++artifact_jobs[job.rid];
  ++artifact_jobs_total;
  artifacts->submit(std::move(job));
}

void Coordinator::Impl::on_artifact_put(Session& s, proto::ArtifactPut& m) {
  proto::ArtifactPutReply reply;
  reply.number = m.number;
  reply.step = m.step;
  reply.kind = m.kind;
  const bool user = m.kind == proto::ArtifactKind::kUser;
  auto refuse = [&](const std::string& why) {
    if (user)
      spdlog::warn("coordinator: trial {}: the artifacts from worker {} are not kept: {}", m.number,
                   s.name, why);
    else
      spdlog::warn("coordinator: trial {}: the snapshot of step {} from worker {} is not kept: {}",
                   m.number, m.step, s.name, why);
    reply.ok = false;
    reply.error = why;
    send(s, reply);
  };
  if (!artifacts) {
    refuse(
        "this coordinator keeps no checkpoints (no checkpoint root, or artifacts.checkpoints "
        "is false)");
    return;
  }
  if (!owns(s, m.number, "ArtifactPut")) {
    reply.error = "trial " + std::to_string(m.number) + " is not held by this worker: refused";
    send(s, reply);
    return;
  }
  const std::int64_t lineage = checkpoints::lineage_of(mirror.at(m.number));
  if (std::string why = artifact_job_refusal(s); !why.empty()) {
    if (user)
      user_pending_bytes.erase(m.number);
    else
      pending_bytes.erase(lineage);
    if (late_log.allow(Steady::now()))  // a flood: a few lines a second
      spdlog::warn("coordinator: trial {}: a snapshot piece from worker {} is refused: {}",
                   m.number, s.name, why);
    reply.error = why;
    send(s, reply);
    return;
  }
  if (m.offset == 0) {
    const std::uint64_t bytes = m.total - m.manifest_bytes;
    if (user) user_pending_bytes.erase(m.number);
    const std::uint64_t others = study_bytes_but(user ? -1 : lineage);
    if (others + bytes > options.artifacts.max_study_bytes) {
      if (user) {
        refuse("the study's artifacts would take " + std::to_string(others + bytes) +
               " bytes, over " + std::to_string(options.artifacts.max_study_bytes) +
               " (artifacts.max_study_bytes)");
        return;
      }
      pending_bytes.erase(lineage);
      refuse("the study's snapshots would take " + std::to_string(others + bytes) +
             " bytes, over " + std::to_string(options.artifacts.max_study_bytes) +
             " (artifacts.max_study_bytes); a retry starts from the lineage's previous snapshot");
      return;
    }
    (user ? user_pending_bytes[m.number] : pending_bytes[lineage]) = bytes;
  }
  ArtifactStore::Job job;
  job.kind = ArtifactStore::Job::Kind::kPut;
  job.rid = s.routing_id;
  job.number = m.number;
  job.lineage = lineage;
  job.step = m.step;
  job.offset = m.offset;
  job.total = m.total;
  job.manifest_bytes = m.manifest_bytes;
  job.checksum = m.checksum;
  job.user = user;
  job.data = std::move(m.data);  // 1 MiB: not copied
  submit_artifact_job(std::move(job));
}

void Coordinator::Impl::on_artifact_get(Session& s, const proto::ArtifactGet& m) {
  proto::ArtifactGetReply reply;
  reply.number = m.number;
  reply.step = m.step;
  if (!artifacts) {
    reply.error = "this coordinator keeps no checkpoints";
    send(s, reply);
    return;
  }
  if (!owns(s, m.number, "ArtifactGet")) {
    reply.error = "trial " + std::to_string(m.number) + " is not held by this worker: refused";
    send(s, reply);
    return;
  }
  // Only the snapshot the trial resumes from, of its own lineage.
  const FrozenTrial& t = mirror.at(m.number);
  const std::optional<std::int64_t> resume = checkpoints::resume_step_of(t);
  if (!resume || *resume != m.step) {
    reply.error = "trial " + std::to_string(m.number) + " does not resume from step " +
                  std::to_string(m.step) + ": refused";
    send(s, reply);
    return;
  }
  if (std::string why = artifact_job_refusal(s); !why.empty()) {
    reply.error = why;
    send(s, reply);
    return;
  }
  ArtifactStore::Job job;
  job.kind = ArtifactStore::Job::Kind::kGet;
  job.rid = s.routing_id;
  job.number = m.number;
  job.lineage = checkpoints::lineage_of(t);
  job.step = m.step;
  job.offset = m.offset;
  submit_artifact_job(std::move(job));
}

void Coordinator::Impl::on_user_artifact_result(const ArtifactStore::Result& r,
                                                proto::ArtifactPutReply& reply) {
  reply.kind = proto::ArtifactKind::kUser;
  if (!r.ok || r.done) user_pending_bytes.erase(r.number);
  if (!r.ok) {
    spdlog::warn("coordinator: trial {}: its artifacts are not kept: {}", r.number, r.error);
    return;
  }
  if (!r.done) return;
  user_stored_bytes += r.file_bytes;
  // The store names them only now that they are whole and verified, and
  // only while the trial runs.
  if (const TrialPtr t = mirror.ptr(r.number); t && t->state == TrialState::kRunning) {
    checkpoints::ArtifactSummary kept;
    kept.files = r.files;
    kept.bytes = r.file_bytes;
    storage.set_trial_system_attr(t->trial_id, checkpoints::kAttrArtifacts, kept.to_json());
    mirror.refresh(r.number);
    reply.done = true;
  } else {
    reply.ok = false;
    reply.error = "trial " + std::to_string(r.number) + " ended before its artifacts arrived";
  }
}

void Coordinator::Impl::on_artifact_results() {
  for (ArtifactStore::Result& r : artifacts->take()) {
    // The pieces the artifact endpoint carried were not counted here.
    if (auto it = artifact_jobs.find(r.rid);
        r.route == ArtifactStore::Job::Route::kMain && it != artifact_jobs.end()) {
      --artifact_jobs_total;
      if (--it->second <= 0) artifact_jobs.erase(it);
    }
    Session* s = sessions.find(r.rid);
    if (r.kind == ArtifactStore::Job::Kind::kGet) {
      if (!s) continue;
      proto::ArtifactGetReply reply;
      reply.number = r.number;
      reply.step = r.step;
      reply.ok = r.ok;
      reply.error = r.error;
      grant_transfer(r, reply.token);
      if (r.ok) {
        reply.offset = r.offset;
        reply.total = r.total;
        reply.manifest_bytes = r.manifest_bytes;
        reply.data = std::move(r.data);
        reply.checksum = r.checksum;
      } else {
        spdlog::warn("coordinator: trial {}: cannot send the snapshot of step {}: {}", r.number,
                     r.step, r.error);
      }
      send(*s, reply);
      continue;
    }
    proto::ArtifactPutReply reply;
    reply.number = r.number;
    reply.step = r.step;
    reply.ok = r.ok;
    reply.error = r.error;
    reply.next_offset = r.next_offset;
    if (s) grant_transfer(r, reply.token);
    if (r.user) {
      on_user_artifact_result(r, reply);
      if (s) send(*s, reply);
      continue;
    }
    if (!r.ok) {
      pending_bytes.erase(r.lineage);
      spdlog::warn("coordinator: trial {}: the snapshot of step {} is not kept: {}", r.number,
                   r.step, r.error);
    } else if (r.done) {
      pending_bytes.erase(r.lineage);
      stored_bytes[r.lineage] = r.file_bytes;
      // The store names the snapshot only now that it is whole and verified,
      // and only while the trial runs (its end may have been recorded meanwhile).
      if (const TrialPtr t = mirror.ptr(r.number); t && t->state == TrialState::kRunning) {
        record_checkpoint(r.number, r.step);
        reply.done = true;
      } else {
        reply.ok = false;
        reply.error = "trial " + std::to_string(r.number) + " ended before its snapshot arrived";
      }
    }
    if (s) send(*s, reply);
  }
}

}  // namespace hps
