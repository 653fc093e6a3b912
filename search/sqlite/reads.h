// Private to SqliteStorage: the queries that read studies and trials back
// from the file into StudyInfo and FrozenTrial snapshots (through the row
// codec, sqlite/codec.h). Errors name the file, the table and the row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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

// The columns of a trial's row that writes check.
struct TrialRow {
  std::int64_t study_id;
  std::int64_t number;
  TrialState state;
};
// Throws StorageError "no trial with id N" if absent.
TrialRow trial_row(Connection& conn, std::int64_t trial_id);

}  // namespace hps::sqlite
