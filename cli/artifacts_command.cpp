// hpsearch artifacts DB [--trial N] | hpsearch artifacts get DB --trial N -o DIR:
// the trials' checkpoint snapshots and user artifacts (search/checkpoints.h),
// read-only on the store. The snapshots live under the coordinator's
// checkpoint root, <study>.logs/checkpoints beside the store (as `hpsearch
// run` keeps them), the user artifacts beside it in <study>.logs/artifacts
// (with artifacts.path: <path>/artifacts).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/commands.h"
#include "cli/table.h"
#include "search/checkpoints.h"
#include "search/printable.h"
#include "search/storage.h"
#include "search/util/storage_url.h"
#include "workers/worker.h"

namespace hps::cli {

namespace fs = std::filesystem;

namespace {

// The study's artifacts.path (relative to the store's folder), else
// <study>.logs/checkpoints beside the store (run_command.cpp's root).
// `shared`: whether it is artifacts.path.
std::string checkpoint_root_of(const std::string& storage_path, const StudyInfo& study,
                               bool* shared = nullptr) {
  std::string parent = ".";
  if (util::StorageUrl url = util::parse_storage_url(storage_path); !url.in_memory)
    parent = fs::path(url.path).parent_path().string();
  if (parent.empty()) parent = ".";
  if (study.config.is_object() && study.config.contains("artifacts")) {
    try {
      const auto artifacts = checkpoints::ArtifactOptions::from_json(study.config["artifacts"]);
      if (!artifacts.path.empty()) {
        if (shared) *shared = true;
        return fs::absolute(fs::path(parent) / artifacts.path).lexically_normal().string();
      }
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): a hand-edited section
    }
  }
  return (fs::absolute(study_log_dir(study.name, parent)) / "checkpoints")
      .lexically_normal()
      .string();
}

struct Row {
  std::int64_t number = -1;
  std::string state;
  std::int64_t lineage = -1;
  std::optional<std::int64_t> step;  // the newest snapshot the store names
  bool deleted = false;              // retention removed the lineage's folder
  bool exists = false;               // the lineage's folder is there
  bool snapshot_exists = false;      // snapshot-<step> is there
  std::uint64_t bytes = 0;           // of the lineage's folder
  // User artifacts: what the store names (system attr artifacts), and
  // whether their folder is there.
  std::optional<checkpoints::ArtifactSummary> artifacts;
  bool artifacts_exist = false;
  std::string artifact_warning;  // user attr artifact_warning
};

// The trials' user artifacts root, beside the checkpoint root.
std::string artifact_root_of(const std::string& storage_path, const StudyInfo& study) {
  bool shared = false;
  const std::string root = checkpoint_root_of(storage_path, study, &shared);
  return checkpoints::artifact_root_for(root, shared);
}

// Trial `number` of the study, or a --trial error naming the numbers
// there are.
TrialPtr trial_or_refuse(Storage& storage, std::int64_t study_id, std::int64_t number) {
  const std::int64_t n = storage.count_trials(study_id);
  if (number < 0 || number >= n)
    throw ConfigError("--trial",
                      "no trial " + std::to_string(number) + " in the study (" +
                          (n == 0 ? std::string("it has no trials")
                                  : "trials are numbered 0 to " + std::to_string(n - 1)) +
                          ")");
  return storage.get_trial_by_number(study_id, number);
}

// Whether `inner` is `outer` or lies under it, after resolving links.
bool lies_under(const fs::path& inner, const fs::path& outer) {
  std::error_code ec;
  const fs::path a = fs::weakly_canonical(fs::absolute(inner), ec);
  if (ec) return false;
  const fs::path b = fs::weakly_canonical(fs::absolute(outer), ec);
  if (ec) return false;
  const auto [end, _] = std::mismatch(b.begin(), b.end(), a.begin(), a.end());
  return end == b.end();
}

Row row_of(const FrozenTrial& t, const std::string& root, const std::string& artifact_root) {
  Row r;
  if (auto a = t.system_attrs.find(checkpoints::kAttrArtifacts);
      a != t.system_attrs.end() && a->is_object()) {
    checkpoints::ArtifactSummary s;
    s.files = a->value("files", std::uint64_t{0});
    s.bytes = a->value("bytes", std::uint64_t{0});
    r.artifacts = s;
    std::error_code ec;
    r.artifacts_exist = fs::is_directory(
        fs::symlink_status(checkpoints::trial_artifact_path(artifact_root, t.number), ec));
  }
  if (auto w = t.user_attrs.find(checkpoints::kAttrArtifactWarning);
      w != t.user_attrs.end() && w->is_string())
    r.artifact_warning = w->get<std::string>();
  r.number = t.number;
  r.state = to_string(t.state);
  r.lineage = checkpoints::lineage_of(t);
  auto it = t.system_attrs.find(checkpoints::kAttrCheckpoint);
  if (it != t.system_attrs.end() && it->is_object()) {
    if (it->contains("step") && (*it)["step"].is_number_integer())
      r.step = (*it)["step"].get<std::int64_t>();
    r.deleted = it->value("deleted", false);
  }
  if (!r.step) r.step = checkpoints::resume_step_of(t);
  const std::string path = checkpoints::lineage_path(root, r.lineage);
  std::error_code ec;
  r.exists = fs::is_directory(fs::symlink_status(path, ec));
  if (r.exists) r.bytes = checkpoints::folder_bytes(path);
  if (r.exists && r.step)
    r.snapshot_exists = fs::is_directory(
        fs::symlink_status(fs::path(path) / ("snapshot-" + std::to_string(*r.step)), ec));
  return r;
}

// `hpsearch artifacts --format json`: one object per trial.
Json rows_json(const std::vector<Row>& rows, const std::string& root,
               const std::string& artifact_root) {
  Json out = Json::array();
  for (const Row& r : rows) {
    Json j{{"trial", r.number},         {"state", r.state},
           {"lineage", r.lineage},      {"checkpoint_step", r.step ? Json(*r.step) : Json()},
           {"deleted", r.deleted},      {"folder", checkpoints::lineage_path(root, r.lineage)},
           {"folder_exists", r.exists}, {"snapshot_exists", r.snapshot_exists},
           {"bytes", r.bytes}};
    // The trial's user artifacts (null: none kept).
    j["user_artifacts"] =
        r.artifacts ? Json{{"files", r.artifacts->files},
                           {"bytes", r.artifacts->bytes},
                           {"folder", checkpoints::trial_artifact_path(artifact_root, r.number)},
                           {"folder_exists", r.artifacts_exist}}
                    : Json();
    if (!r.artifact_warning.empty()) j["artifact_warning"] = r.artifact_warning;
    out.push_back(std::move(j));
  }
  return out;
}

// `hpsearch artifacts`: the snapshots' table, then the user artifacts'.
void print_tables(const std::vector<Row>& rows, const std::string& root,
                  const std::string& artifact_root) {
  Table t({"trial", "state", "lineage", "checkpoint step", "folder", "bytes"});
  for (const Row& r : rows)
    t.add_row({std::to_string(r.number), r.state, std::to_string(r.lineage),
               r.step ? std::to_string(*r.step) + (r.deleted ? " (deleted)" : "") : "-",
               r.exists ? (r.snapshot_exists || !r.step ? "yes" : "yes (no snapshot)") : "no",
               std::to_string(r.bytes)});
  std::cout << "Checkpoint snapshots\n" << t.render();
  std::cout << "checkpoint root: " << root << "\n";
  Table u({"trial", "state", "files", "bytes", "folder"});
  std::size_t n_user = 0;
  for (const Row& r : rows) {
    if (!r.artifacts && r.artifact_warning.empty()) continue;
    ++n_user;
    u.add_row({std::to_string(r.number), r.state,
               r.artifacts ? std::to_string(r.artifacts->files) : "-",
               r.artifacts ? std::to_string(r.artifacts->bytes) : "-",
               r.artifacts ? (r.artifacts_exist ? "yes" : "no (removed by hand?)")
               : r.artifact_warning.rfind("not ", 0) == 0
                   ? printable_excerpt(r.artifact_warning)
                   : "not kept: " + printable_excerpt(r.artifact_warning)});
  }
  std::cout << "\nUser artifacts\n";
  if (n_user > 0)
    std::cout << u.render();
  else
    std::cout << "(none)\n";
  std::cout << "artifact root: " << artifact_root << "\n";
}

}  // namespace

int artifacts_command(const ArtifactsOptions& o) {
  if (o.format != "table" && o.format != "json")
    throw ConfigError("--format", "must be table or json, got '" + o.format + "'");
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  const StudyInfo study = storage->get_study(id);
  const std::string root = checkpoint_root_of(o.storage, study);
  const std::string artifact_root = artifact_root_of(o.storage, study);
  std::vector<Row> rows;
  if (o.trial) {
    auto t = trial_or_refuse(*storage, id, *o.trial);
    rows.push_back(row_of(*t, root, artifact_root));
  } else {
    for (const auto& t : storage->get_all_trials(id))
      rows.push_back(row_of(*t, root, artifact_root));
  }
  if (o.format == "json") {
    std::cout << rows_json(rows, root, artifact_root).dump(2) << "\n";
    return kExitOk;
  }
  print_tables(rows, root, artifact_root);
  return kExitOk;
}

int artifacts_get_command(const ArtifactsOptions& o) {
  if (!o.trial) throw ConfigError("--trial", "is required");
  if (o.output.empty()) throw ConfigError("-o", "is required (the folder to copy into)");
  if (o.kind != "auto" && o.kind != "user" && o.kind != "snapshot")
    throw ConfigError("--kind", "must be auto, user or snapshot, got '" + o.kind + "'");
  std::error_code ec;
  const auto st = fs::symlink_status(o.output, ec);
  if (fs::is_symlink(st))
    throw ConfigError("-o", printable(o.output) +
                                " is a symbolic link: refused (name the folder itself; nothing "
                                "is written through a link)");
  if (fs::exists(st) && !fs::is_directory(st))
    throw ConfigError("-o", printable(o.output) + " exists and is not a folder: refused");
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  const StudyInfo study = storage->get_study(id);
  const std::string root = checkpoint_root_of(o.storage, study);
  const std::string artifact_root = artifact_root_of(o.storage, study);
  // A copy into the study's own folders would change the snapshots and
  // artifacts it copies (and retention would later remove it).
  for (const std::string& own : {root, artifact_root})
    if (lies_under(o.output, own))
      throw ConfigError("-o", printable(o.output) + " lies inside the study's folder " +
                                  printable(own) + ": refused (copy to a folder outside it)");
  auto t = trial_or_refuse(*storage, id, *o.trial);
  Row r = row_of(*t, root, artifact_root);
  if (o.kind == "user" || (o.kind == "auto" && r.artifacts)) {
    if (!r.artifacts)
      throw Error("trial " + std::to_string(*o.trial) + " has no user artifacts" +
                  (r.artifact_warning.empty() ? std::string()
                                              : " (" + printable(r.artifact_warning) + ")"));
    const checkpoints::ArtifactSummary got =
        checkpoints::copy_artifacts(artifact_root, *o.trial, o.output, o.overwrite);
    std::cout << "copied the artifacts of trial " << *o.trial << " (" << got.files << " files, "
              << got.bytes << " bytes, checksums verified) to " << o.output << "\n";
    return kExitOk;
  }
  if (fs::exists(st) && !fs::is_empty(o.output, ec))
    throw ConfigError(
        "-o", printable(o.output) + " exists and is not an empty folder: refused (nothing copied)");
  if (!r.step || r.deleted) {
    // A retry that continued the lineage replaced this trial's snapshot:
    // name the trial that holds the lineage's newest one.
    std::optional<Row> newer;
    for (const auto& other : storage->get_all_trials(id)) {
      if (other->number <= *o.trial || checkpoints::lineage_of(*other) != r.lineage) continue;
      Row o_row = row_of(*other, root, artifact_root);
      if (o_row.step && !o_row.deleted) newer = o_row;
    }
    std::string why;
    if (newer)
      why = " of its own: a retry continued its lineage " + std::to_string(r.lineage) +
            " and replaced it; trial " + std::to_string(newer->number) +
            " holds the lineage's newest snapshot (step " + std::to_string(*newer->step) +
            "): --trial " + std::to_string(newer->number);
    else if (r.deleted)
      why = " (retention removed its lineage's folder)";
    throw Error("trial " + std::to_string(*o.trial) + " has no snapshot" + why);
  }
  const std::string lineage = checkpoints::lineage_path(root, r.lineage);
  checkpoints::copy_snapshot(lineage, *r.step, o.output);
  std::cout << "copied the snapshot of step " << *r.step << " of trial " << *o.trial << " (lineage "
            << r.lineage << ", " << checkpoints::folder_bytes(o.output) << " bytes) to " << o.output
            << "\n";
  return kExitOk;
}

}  // namespace hps::cli
