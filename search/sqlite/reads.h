// Private to SqliteStorage: the queries that read studies and trials back
// from the file into StudyInfo and FrozenTrial snapshots (through the row
// codec, sqlite/codec.h). Errors name the file, the table and the row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "search/sqlite/connection.h"
#include "search/storage.h"
#include "search/trial.h"

namespace hps::sqlite {

// Studies with their attrs, by id: all of them, or the one `study_id`
// (empty if there is none).
std::vector<StudyInfo> load_studies(Connection& conn,
                                    std::optional<std::int64_t> study_id = std::nullopt);
// The study's id, or nullopt.
std::optional<std::int64_t> find_study_id(Connection& conn, const std::string& name);
// Throws StorageError "no study with id N" unless the study exists.
void require_study(Connection& conn, std::int64_t study_id);

// Loads trials in number order: every trial of a study, or one trial.
std::vector<TrialPtr> load_study_trials(Connection& conn, std::int64_t study_id);
// Throws StorageError "no trial with id N" if absent.
TrialPtr load_trial(Connection& conn, std::int64_t trial_id);
// The trial of a study with that number, or null.
TrialPtr load_trial_by_number(Connection& conn, std::int64_t study_id, std::int64_t number);
// How many trials of the study are in `states` (all if empty).
std::int64_t count_study_trials(Connection& conn, std::int64_t study_id,
                                const std::vector<TrialState>& states);

// The study's trials counted by state, and those that count as finished
// (FrozenTrial::counts_as_finished, in SQL). Without checking the study.
TrialCounts count_trials_by_state(Connection& conn, std::int64_t study_id);
// The counts of every study that has trials, by study id.
std::vector<std::pair<std::int64_t, TrialCounts>> count_all_studies(Connection& conn);
// The best trial of the study (lifecycle::is_best_candidate and
// ranks_before, in SQL: two indexed lookups), or null.
TrialPtr load_best_trial(Connection& conn, std::int64_t study_id, StudyDirection direction);
// Calls `visit` for each trial that `query` selects (see
// Storage::read_trials), loading query.batch_size trials at a time. The
// caller holds the read transaction.
void read_study_trials(Connection& conn, std::int64_t study_id, StudyDirection direction,
                       const TrialQuery& query, const TrialVisitor& visit);

// The columns of a trial's row that writes check.
struct TrialRow {
  std::int64_t study_id;
  std::int64_t number;
  TrialState state;
};
// Throws StorageError "no trial with id N" if absent.
TrialRow trial_row(Connection& conn, std::int64_t trial_id);

}  // namespace hps::sqlite
