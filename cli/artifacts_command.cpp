// hpsearch artifacts DB [--trial N] | hpsearch artifacts get DB --trial N -o DIR:
// the trials' checkpoint snapshots (search/checkpoints.h), read-only on the
// store. The snapshots live under the coordinator's checkpoint root,
// <study>.logs/checkpoints beside the store (as `hpsearch run` keeps them).
#include <filesystem>
#include <iostream>

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
std::string checkpoint_root_of(const std::string& storage_path, const StudyInfo& study) {
  std::string parent = ".";
  if (util::StorageUrl url = util::parse_storage_url(storage_path); !url.in_memory)
    parent = fs::path(url.path).parent_path().string();
  if (parent.empty()) parent = ".";
  if (study.config.is_object() && study.config.contains("artifacts")) {
    try {
      const auto artifacts = checkpoints::ArtifactOptions::from_json(study.config["artifacts"]);
      if (!artifacts.path.empty())
        return fs::absolute(fs::path(parent) / artifacts.path).lexically_normal().string();
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): a hand-edited section
    }
  }
  return (fs::absolute(study_log_dir(study.name, parent)) / "checkpoints").string();
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
};

Row row_of(const FrozenTrial& t, const std::string& root) {
  Row r;
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

}  // namespace

int artifacts_command(const ArtifactsOptions& o) {
  if (o.format != "table" && o.format != "json")
    throw ConfigError("--format", "must be table or json, got '" + o.format + "'");
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  const std::string root = checkpoint_root_of(o.storage, storage->get_study(id));
  std::vector<Row> rows;
  if (o.trial) {
    auto t = storage->get_trial_by_number(id, *o.trial);
    if (!t) throw ConfigError("--trial", "no trial " + std::to_string(*o.trial) + " in the study");
    rows.push_back(row_of(*t, root));
  } else {
    for (const auto& t : storage->get_all_trials(id)) rows.push_back(row_of(*t, root));
  }
  if (o.format == "json") {
    Json out = Json::array();
    for (const Row& r : rows) {
      Json j{{"trial", r.number},         {"state", r.state},
             {"lineage", r.lineage},      {"checkpoint_step", r.step ? Json(*r.step) : Json()},
             {"deleted", r.deleted},      {"folder", checkpoints::lineage_path(root, r.lineage)},
             {"folder_exists", r.exists}, {"snapshot_exists", r.snapshot_exists},
             {"bytes", r.bytes}};
      out.push_back(std::move(j));
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  Table t({"trial", "state", "lineage", "checkpoint step", "folder", "bytes"});
  for (const Row& r : rows)
    t.add_row({std::to_string(r.number), r.state, std::to_string(r.lineage),
               r.step ? std::to_string(*r.step) + (r.deleted ? " (deleted)" : "") : "-",
               r.exists ? (r.snapshot_exists || !r.step ? "yes" : "yes (no snapshot)") : "no",
               std::to_string(r.bytes)});
  std::cout << t.render();
  std::cout << "checkpoint root: " << root << "\n";
  return kExitOk;
}

int artifacts_get_command(const ArtifactsOptions& o) {
  if (!o.trial) throw ConfigError("--trial", "is required");
  if (o.output.empty()) throw ConfigError("-o", "is required (the folder to copy into)");
  std::error_code ec;
  const auto st = fs::symlink_status(o.output, ec);
  if (fs::exists(st) && (!fs::is_directory(st) || !fs::is_empty(o.output, ec)))
    throw ConfigError(
        "-o", printable(o.output) + " exists and is not an empty folder: refused (nothing copied)");
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  const std::string root = checkpoint_root_of(o.storage, storage->get_study(id));
  auto t = storage->get_trial_by_number(id, *o.trial);
  if (!t) throw ConfigError("--trial", "no trial " + std::to_string(*o.trial) + " in the study");
  Row r = row_of(*t, root);
  if (!r.step || r.deleted)
    throw Error("trial " + std::to_string(*o.trial) + " has no snapshot" +
                (r.deleted ? " (retention removed its lineage's folder)" : ""));
  const std::string lineage = checkpoints::lineage_path(root, r.lineage);
  checkpoints::copy_snapshot(lineage, *r.step, o.output);
  std::cout << "copied the snapshot of step " << *r.step << " of trial " << *o.trial << " (lineage "
            << r.lineage << ", " << checkpoints::folder_bytes(o.output) << " bytes) to " << o.output
            << "\n";
  return kExitOk;
}

}  // namespace hps::cli
