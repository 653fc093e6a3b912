// Trial checkpoints (long trials): a trial and its retries form a lineage,
// and the lineage owns one checkpoint folder, so a retry (a lost or
// preempted worker, Ctrl-C, a coordinator restart) continues where its
// trial stopped instead of training again from step 0.
//
// On disk, under a checkpoint root (`hpsearch run`: <study>.logs/checkpoints,
// owner-only):
//
//   lineage-<L>/                 L: the number of the lineage's first trial
//     work/                      the folder the objective writes
//                                (HPSEARCH_CHECKPOINT_DIR, Trial::checkpoint_dir)
//     snapshot-<S>/              a copy of work/ taken when step S was reported
//     snapshot-<S>.manifest      its files: name, kind, size, XXH3 64 of the bytes
//
// The rule for programs: save the checkpoint, then report the step. When a
// trial reports step S, its runner copies work/ to snapshot-<S> (files that
// did not change since the previous snapshot are hard links to it, so an
// unchanged 1 GB data file costs nothing), then reports; once the store has
// recorded the step (system attr "checkpoint": {"step": S}), older
// snapshots are removed. A retry restores work/ from the snapshot of the
// step the store names, so the folder holds the files as they were at the
// last reported step, whatever the program wrote after it.
//
// Like Ray Tune's trial checkpoints (Tuner.restore, FailureConfig), and the
// snapshot-per-report of its train.report(checkpoint=...), here taken by the
// framework from a folder the program writes in place.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "search/json_util.h"
#include "search/trial.h"

namespace hps::checkpoints {

// System attrs (trial.system_attrs):
// The number of the lineage's first trial (set on every retry; a trial
// without it is the first of its own lineage).
inline constexpr const char* kAttrLineage = "lineage";
// The newest snapshot the store knows of for this trial: {"step": S}. Set
// when a report of step S arrived with its snapshot taken; {"step": S,
// "deleted": true} once retention removed the lineage's folder.
inline constexpr const char* kAttrCheckpoint = "checkpoint";
// On a retry that continues a trial: {"trial": N, "step": S}: the trial it
// continues and the step whose snapshot it starts from. Once its runner
// restored the snapshot, "restored": true is added and its intermediate
// values at steps <= S are copied from trial N (the curve is whole); when
// the snapshot could not be used, "restored": false and "warning": why, and
// nothing is copied (the trial trains from step 0).
inline constexpr const char* kAttrResumedFrom = "resumed_from";

// The value of the system attr checkpoint for a snapshot of `step`:
// {"step": step}.
Json checkpoint_attr(std::int64_t step);

// Trial `t`'s checkpoint attr with {"deleted": true} set (retention removed
// its lineage folder); an attr that is not an object becomes {"deleted":
// true}.
Json deleted_checkpoint_attr(const FrozenTrial& t);

// The lineage of `trial`: its system attr lineage, else its own number.
std::int64_t lineage_of(const FrozenTrial& trial);

// The step of the newest snapshot of `trial`'s lineage as of `trial`: its
// "checkpoint" step unless deleted, else its "resumed_from" step (a retry
// that restored step S and was lost before its next report still has the
// snapshot of S); nullopt if neither.
std::optional<std::int64_t> snapshot_step(const FrozenTrial& trial);

// The step a WAITING or RUNNING retry starts from (its resumed_from step),
// if any and not marked "restored": false.
std::optional<std::int64_t> resume_step_of(const FrozenTrial& trial);

// The trial that `trial` continues: its resumed_from trial number once the
// restore took effect ("restored": true); nullopt otherwise (no
// resumed_from, not restored yet, or the restore failed).
std::optional<std::int64_t> continued_trial(const FrozenTrial& trial);

// "<root>/lineage-<L>".
std::string lineage_path(const std::string& root, std::int64_t lineage);

// Checkpoints on or off, what is kept, and size limits (space.json
// "artifacts"; docs "Long trials").
struct ArtifactOptions {
  // Give each trial its lineage's checkpoint folder and continue retries
  // from it. Default true. False: trials get no folder and a retry starts
  // from step 0 (the behaviour before checkpoints; bench/ compares both).
  bool checkpoints = true;
  // Keep the snapshots of the best K COMPLETE trials (by the study's
  // direction) after they end; the others' lineage folders are removed.
  // Default 3; 0 keeps none.
  int keep_best = 3;
  // Keep the folders of PRUNED trials and of FAIL trials that are not
  // retried. Default false (removed when the trial ends).
  bool keep_pruned = false;
  bool keep_failed = false;
  // The largest snapshot taken, bytes. Default 16 GiB. A larger work/
  // folder is not snapshot at that step (a warning; the step is reported
  // without a checkpoint, so a retry starts from the previous snapshot).
  std::uint64_t max_snapshot_bytes = 16ULL << 30;
  // The most bytes of snapshots the coordinator keeps for the study's
  // uploads (remote workers that share no folder with it), bytes. Default
  // 100 GiB. An upload that would pass it is refused (a warning naming
  // artifacts.max_study_bytes; the step's checkpoint is not recorded, so a
  // retry starts from the lineage's previous snapshot). Counts the newest
  // snapshot of each lineage folder, as found at start and as uploaded.
  std::uint64_t max_study_bytes = 100ULL << 30;
  // The most bytes of user artifacts one trial keeps (Trial::upload_artifact,
  // HPSEARCH_ARTIFACT_DIR), bytes. Default 16 GiB. An upload_artifact call
  // that would pass it throws; a folder over it when the trial ends is not
  // kept (the trial keeps its value; user attr artifact_warning says why).
  // Uploads from remote workers count against max_study_bytes too.
  std::uint64_t max_artifact_bytes = 16ULL << 30;
  // A folder on a filesystem every worker reaches (NFS, Lustre, a shared
  // volume) to hold the lineages' folders, instead of <study>.logs/checkpoints
  // beside the store: workers use it in place (the coordinator's token in
  // it tells them they share it) and nothing travels through the
  // coordinator. A relative path is relative to the folder of the study's
  // store. Default "": <study>.logs/checkpoints. At most 4,095 bytes.
  std::string path{};

  // Throws ConfigError naming "artifacts.<field>".
  void validate() const;
  // From the "artifacts" section of space.json (absent or null: defaults).
  // Unknown keys and wrong types throw ConfigError("artifacts.<field>").
  static ArtifactOptions from_json(const Json& section);
};

// What LineageFolder::prepare did.
struct Prepared {
  // The step the folder was restored to; nullopt: work/ is empty (a first
  // run, or a resume whose snapshot could not be used).
  std::optional<std::int64_t> resume_step;
  // Why a resume asked for could not be used ("" when none was asked for
  // or it was): names the file and the rule ("snapshot-4/model.pt: 1048576
  // bytes, the manifest says 2097152 (truncated?)").
  std::string warning;
};

// A lineage's folder on this machine. Not thread-safe; one runner uses it.
class LineageFolder {
 public:
  // Opens (creating, 0700) <root> and <root>/lineage-<lineage>. Throws Error
  // "<path>: <rule>" when either is a symbolic link, another user's, or
  // writable by others (search/private_files.h: OwnerOnlyFolder).
  LineageFolder(const std::string& root, std::int64_t lineage,
                std::uint64_t max_snapshot_bytes = ArtifactOptions{}.max_snapshot_bytes);

  std::int64_t lineage() const { return lineage_; }
  // Absolute path of lineage-<L>.
  const std::string& path() const { return path_; }
  // Absolute path of lineage-<L>/work.
  const std::string& work_dir() const { return work_; }

  // Makes work/ ready for a run. Without `resume_step`: work/ emptied (made
  // if missing). With it: work/ replaced by a copy of snapshot-<step>,
  // after checking it against its manifest (every file there, sizes and
  // hashes equal, nothing that is a link to a folder outside); when the
  // snapshot is missing, damaged, larger than max_snapshot_bytes, or
  // work/ or the snapshot was replaced by a symbolic link, work/ is emptied
  // and the warning says which file and which rule (a run from scratch).
  // Throws Error only when work/ cannot be made at all.
  Prepared prepare(std::optional<std::int64_t> resume_step);

  // What snapshot() did.
  struct Snapshot {
    bool taken = false;  // snapshot-<step> exists now, with its manifest
    std::string why;     // not taken: why ("" when work/ is empty: nothing to keep)
    // Taken without some entries of work/, each "<path>: <why>; ...";
    // each path is named once per LineageFolder (not at every step).
    std::string skipped;
  };
  // Copies work/ to snapshot-<step> (a temporary folder renamed into
  // place, with its manifest). Not taken when work/ is empty (a program
  // that keeps no checkpoint costs nothing), larger than
  // max_snapshot_bytes, or on a disk error; no snapshot of that step exists
  // then. Links inside work/ are kept as links (never followed) when their
  // target is relative and stays inside work/; a link that leads outside
  // (an absolute target, or one through "..") is not kept, nor are FIFOs,
  // sockets, device files and names that are not UTF-8 (Snapshot::skipped
  // names them).
  Snapshot snapshot(std::int64_t step);

  // Removes every snapshot except that of `step` (after the store recorded
  // it) and any temporary folder left by an interrupted snapshot.
  void keep_only(std::int64_t step);

  // The steps of the complete snapshots present, ascending.
  std::vector<std::int64_t> snapshot_steps() const;

  // When the trial ended: removes the lineage's folder if it holds no
  // snapshot (nothing a retry or retention could use: an objective that
  // keeps no checkpoint leaves no folder behind). Returns true if removed;
  // never throws.
  bool remove_if_unused();

 private:
  std::int64_t lineage_;
  std::uint64_t max_bytes_;
  std::string path_;
  std::string work_;
  std::set<std::string> skipped_said_;  // Snapshot::skipped paths already named
};

// The earlier trials of `t`'s lineage (its retry_of chain; `trials` by
// number, trials[i]->number == i) whose checkpoint attr names a snapshot of
// another step than `t`'s, not marked deleted: once `t` recorded its
// snapshot, the runner removed theirs (LineageFolder::keep_only), so the
// coordinator marks them deleted.
std::vector<const FrozenTrial*> superseded_by(const std::vector<TrialPtr>& trials,
                                              const FrozenTrial& t);

// Removes <root>/lineage-<L> (a link there is removed, never followed).
// Returns true if something was removed; never throws.
bool remove_lineage(const std::string& root, std::int64_t lineage);

// The lineages whose folders retention removes once `ended` has ended
// (`trials`: the study's trials, any order, `ended` among them in its
// final state): `ended`'s own lineage when it is PRUNED (unless
// keep_pruned) or FAIL and not retried (unless keep_failed); when it is
// COMPLETE, the lineage of every COMPLETE trial with a kept snapshot that
// is no longer among the best keep_best (`ended`'s own included). Only
// trials whose "checkpoint" attr is set and not deleted are considered.
std::vector<const FrozenTrial*> retention_victims(const std::vector<TrialPtr>& trials,
                                                  const FrozenTrial& ended,
                                                  StudyDirection direction,
                                                  const ArtifactOptions& options);

// ------------------------------------------------------------ snapshots that travel
//
// A worker that does not share the coordinator's checkpoint root (no same
// token in <root>/.store-id) uploads each snapshot it takes to the
// coordinator and downloads the one a retry resumes (protocol ArtifactPut /
// ArtifactGet). A snapshot travels as one byte stream: the text of its
// manifest, then the bytes of its files (kind "file") in manifest order.

// The file in a checkpoint root that names its artifact store.
inline constexpr const char* kStoreIdFile = ".store-id";

// The deepest nesting of folders a checkpoint snapshot, a user artifact
// folder or a manifest may hold (levels below the top folder): deeper
// trees are refused, naming the path, since copying and checking them
// costs depth x entries while a program is paused for its snapshot.
inline constexpr int kMaxTreeDepth = 64;

// The token of the artifact store at `root` (created owner-only as
// OwnerOnlyFolder when missing): the text of <root>/.store-id, 32 random hex
// digits written (0600) when the file is missing or not such a token.
// Throws Error "<path>: <why>".
std::string ensure_store_id(const std::string& root);

// The token in <root>/.store-id; "" when there is none or it cannot be read
// (a missing root, a link, another user's file). Never throws.
std::string read_store_id(const std::string& root);

// Reads the stream of <lineage_dir>/snapshot-<step>.
class SnapshotReader {
 public:
  // Reads and checks the manifest. Throws Error "<file>: <why>" when the
  // snapshot or its manifest is missing or not valid.
  SnapshotReader(const std::string& lineage_dir, std::int64_t step);
  // The stream of trial `number`'s user artifacts: <root>/trial-<N> and its
  // manifest (same layout; step() is then the trial number). Throws as the
  // constructor.
  static SnapshotReader user_artifacts(const std::string& root, std::int64_t number);
  std::int64_t step() const { return step_; }
  // The stream's length and its manifest's length, bytes.
  std::uint64_t total() const { return total_; }
  std::uint64_t manifest_bytes() const { return manifest_.size(); }
  // The sum of the file sizes (total() - manifest_bytes()).
  std::uint64_t file_bytes() const { return total_ - manifest_.size(); }
  // Up to `max` bytes of the stream from `offset` (fewer only at its end).
  // Throws Error naming the file when one changed size or cannot be read.
  std::string read(std::uint64_t offset, std::size_t max) const;

 private:
  SnapshotReader(const std::string& dir, const std::string& name, const char* key, std::int64_t id);
  struct File {
    std::string path;         // relative to snapshot-<step>
    std::uint64_t start = 0;  // offset in the stream
    std::uint64_t size = 0;
  };
  std::string name_;  // "snapshot-<S>" or "trial-<N>"
  std::string snapshot_dir_;
  std::int64_t step_;
  std::string manifest_;
  std::vector<File> files_;
  std::uint64_t total_ = 0;
};

// Installs the stream in the file `stream_path` (of which the first
// `manifest_bytes` bytes are the manifest) as <lineage_dir>/snapshot-<step>
// and its manifest, replacing any snapshot of that step. Checks first that
// the manifest is one of `step` whose entries are plain relative paths
// (no "..", ".", empty or absolute components) each inside a folder the
// manifest lists (nothing under a link), that the stream's length is the
// manifest plus its files' sizes, at most `max_bytes` of files
// (artifacts.max_snapshot_bytes), and that each file's bytes have the
// manifest's hash (XXH3 64). Files are written 0600 with O_EXCL |
// O_NOFOLLOW into a fresh temporary folder renamed into place: nothing
// outside lineage_dir is written. Throws Error "snapshot-<S>/<file>: <why>"
// and leaves no snapshot of `step` behind on any failure.
void install_snapshot(const std::string& lineage_dir, std::int64_t step,
                      const std::string& stream_path, std::uint64_t manifest_bytes,
                      std::uint64_t max_bytes);

// "<lineage_dir>/.tmp-<what>-<step>": where a stream being received is
// written (removed by LineageFolder::prepare and keep_only as a leftover).
std::string stream_path(const std::string& lineage_dir, const std::string& what, std::int64_t step);

// The bytes of the regular files under `path` (links not followed); 0 when
// it is missing. Never throws.
std::uint64_t folder_bytes(const std::string& path);

// Copies <lineage_dir>/snapshot-<step> (checked against its manifest, as
// LineageFolder::prepare does) into the folder `to`, created owner-only if
// missing. Throws Error naming the file and the rule.
void copy_snapshot(const std::string& lineage_dir, std::int64_t step, const std::string& to);

// ------------------------------------------------------------ user artifacts
//
// Files a trial keeps (plots, a final model, predictions), apart from its
// checkpoints (like Optuna's upload_artifact, MLflow's log_artifact). Each
// trial has its own folder under an artifact root (`hpsearch run`:
// <study>.logs/artifacts, owner-only; with artifacts.path: <path>/artifacts):
//
//   trial-<N>/            what the trial kept (Trial::upload_artifact, or what
//                         a program left in HPSEARCH_ARTIFACT_DIR)
//   trial-<N>.manifest    its files: path, kind (file or dir), size, XXH3 64
//
// When the trial ends its runner writes the manifest (finish()); only then
// does the store name them (system attr "artifacts"), so the store never
// names files that are not all there. Retention never removes them.

// System attr: {"files": n, "bytes": b}: trial N's user artifacts are
// complete under <artifact root>/trial-<N> with their manifest.
inline constexpr const char* kAttrArtifacts = "artifacts";
// User attr: why a trial's user artifacts were not kept (over
// artifacts.max_artifact_bytes, an upload refused, a disk error).
inline constexpr const char* kAttrArtifactWarning = "artifact_warning";

// "trial-<N>".
std::string trial_artifact_name(std::int64_t number);
// "<root>/trial-<N>".
std::string trial_artifact_path(const std::string& root, std::int64_t number);
// The artifact root beside a checkpoint root: <checkpoint root>/artifacts
// when `shared_path` (artifacts.path, which holds the lineage folders
// directly), else the folder "artifacts" beside it (<study>.logs/artifacts
// for <study>.logs/checkpoints).
std::string artifact_root_for(const std::string& checkpoint_root, bool shared_path);

// What a trial's user artifacts hold.
struct ArtifactSummary {
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  // {"files": files, "bytes": bytes} (the system attr artifacts).
  Json to_json() const;
};

// A trial's user artifact folder on this machine. Not thread-safe.
class ArtifactFolder {
 public:
  // Opens (creating, 0700) <root> and <root>/trial-<number>, emptied, and
  // removes any manifest of an earlier run of it. Throws Error "<path>:
  // <rule>" when either folder is a symbolic link, another user's, or
  // writable by others (OwnerOnlyFolder), or number < 0.
  ArtifactFolder(const std::string& root, std::int64_t number,
                 std::uint64_t max_bytes = ArtifactOptions{}.max_artifact_bytes);

  std::int64_t number() const { return number_; }
  const std::string& root() const { return root_; }
  // Absolute path of trial-<N> (HPSEARCH_ARTIFACT_DIR).
  const std::string& path() const { return path_; }

  // Copies the regular file or folder `from` into path() under its own
  // name (an entry of that name is replaced). Throws Error "<from>: <why>"
  // when it is missing, a symbolic link (or a folder holding one), neither
  // a regular file nor a folder, or when the folder would then hold more
  // than max_bytes (artifacts.max_artifact_bytes); nothing is copied then.
  void upload(const std::string& from);

  // When the trial ended: writes trial-<N>.manifest and returns what it
  // lists. Symbolic links and special files (FIFOs, sockets) left in the
  // folder are removed first (never kept). An empty folder is removed
  // (files = 0, no manifest). Throws Error naming the folder and
  // artifacts.max_artifact_bytes when it holds more (the folder is removed
  // then: nothing is kept), or on a disk error.
  ArtifactSummary finish();

 private:
  std::int64_t number_;
  std::uint64_t max_bytes_;
  std::string root_;
  std::string path_;
};

// Reads <root>/trial-<N>.manifest (sizes not checked against the files).
// Throws Error "<file>: <why>" when missing or not valid.
ArtifactSummary read_artifact_summary(const std::string& root, std::int64_t number);

// Installs the stream of a trial's user artifacts (as install_snapshot:
// checked entries, sizes, hashes, at most max_bytes of files; no links)
// as <root>/trial-<N> with its manifest; <root> is made owner-only when
// missing. Throws Error "trial-<N>/<file>: <why>", leaving nothing behind.
ArtifactSummary install_artifacts(const std::string& root, std::int64_t number,
                                  const std::string& stream_path, std::uint64_t manifest_bytes,
                                  std::uint64_t max_bytes);

// Copies <root>/trial-<N> into `to` (created owner-only when missing),
// after checking every file against the manifest (sizes, XXH3 64) and every
// entry's name (a plain relative path inside a folder the manifest lists;
// no "..", absolute path or link). A file already in `to` is refused
// (nothing copied) unless `overwrite`. Throws Error naming the file and the
// rule.
ArtifactSummary copy_artifacts(const std::string& root, std::int64_t number, const std::string& to,
                               bool overwrite);

}  // namespace hps::checkpoints
