// Private to SqliteStorage: the statements that write rows (one function
// per kind of change), values encoded by the row codec (sqlite/codec.h).
// Checks that need no read of their own are folded into the statement
// (the trial exists, is unfinished); SqliteStorage finds out why a write
// changed nothing only then. All throw StorageError.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "search/distributions.h"
#include "search/sqlite/connection.h"
#include "search/trial.h"

namespace hps::sqlite {

// studies / study_attrs
std::int64_t insert_study(Connection& conn, const std::string& name, StudyDirection direction,
                          const std::string& config_json, double created);
void update_study_config(Connection& conn, std::int64_t study_id, const std::string& config_json);
// Inserts or replaces the attr `key` of kind kKindUser / kKindSystem.
void upsert_study_attr(Connection& conn, std::int64_t study_id, int kind, const std::string& key,
                       const std::string& value_json);

// trials
// max(number) + 1 of the study's trials (0 for none); nullopt if there is
// no such study.
std::optional<std::int64_t> next_trial_number(Connection& conn, std::int64_t study_id);
// Returns the new trial_id.
std::int64_t insert_trial(Connection& conn, std::int64_t study_id, std::int64_t number,
                          TrialState state, std::optional<double> datetime_start,
                          const std::string& worker);
// The lowest-numbered WAITING trial's id, or nullopt.
std::optional<std::int64_t> first_waiting_trial(Connection& conn, std::int64_t study_id);
// WAITING -> RUNNING with the start time and worker.
void mark_running(Connection& conn, std::int64_t trial_id, double datetime_start,
                  const std::string& worker);
// Sets state, value (NULL if none), datetime_complete (NULL if none) and
// fail_reason of an unfinished trial; a move to RUNNING sets datetime_start
// = `now` if unset. false (nothing written) if the trial is finished or
// absent.
bool update_trial_state(Connection& conn, std::int64_t trial_id, TrialState state,
                        std::optional<double> value, double now,
                        std::optional<double> datetime_complete, const std::string& fail_reason);
// Inserts (upsert: or replaces) the attr `key` of kind kKindUser /
// kKindSystem. false (nothing written) if there is no such trial.
bool write_trial_attr(Connection& conn, std::int64_t trial_id, int kind, const std::string& key,
                      const std::string& value_json, bool upsert);
// Stores an intermediate value (NaN as NULL) of an unfinished trial; false
// (nothing written) if the step already has one, or the trial is finished or
// absent.
bool insert_intermediate_value(Connection& conn, std::int64_t trial_id, std::int64_t step,
                               double value);
// The stored value of a param (as a read decodes it), or nullopt.
std::optional<Json> stored_param(Connection& conn, std::int64_t trial_id, const std::string& name);
void update_param_distribution(Connection& conn, std::int64_t trial_id, const std::string& name,
                               const std::string& distribution_json);

// Writes trial_params rows, up to kRowsPerInsert per statement, and keeps
// the distribution_json text last stored per param name (a study's trials
// mostly repeat their distributions), so it is not encoded again.
class ParamWriter {
 public:
  struct Row {
    const std::string* name;
    const Json* value;
    const Distribution* distribution;  // may be null
  };
  static constexpr std::size_t kRowsPerInsert = 16;

  // Inserts the rows of one trial (refusing invalid UTF-8 names and NaN
  // values). Returns each value as reading its row back gives it
  // (value_real for floats, else the parsed value_json), in row order.
  std::vector<Json> insert(Connection& conn, std::int64_t trial_id, const std::vector<Row>& rows);

  // The distribution_json text of `d` (param `name`; `what` names it in
  // errors). The reference stays valid until the next call.
  const std::string& distribution_text(const std::string& name, const Distribution& d,
                                       const std::string& what);

 private:
  // Numeric distributions only, compared bit for bit (-0.0 and 0.0 are
  // stored differently).
  std::unordered_map<std::string, std::pair<Distribution, std::string>> texts_;
  std::string scratch_;
};

}  // namespace hps::sqlite
