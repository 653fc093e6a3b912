// Private to SqliteStorage: the statements that write rows (one function
// per kind of change), values encoded by the row codec (sqlite/codec.h).
// Checks that need no read of their own are folded into the statement
// (the trial exists, is unfinished); SqliteStorage finds out why a write
// changed nothing only then. All throw StorageError.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
// trial_param_sets / distributions (byte layout in sqlite/param_set.h)

// The trial's trial_param_sets blob ("" when it has no row).
std::string read_param_set(Connection& conn, std::int64_t trial_id);
// Inserts or replaces the trial's trial_param_sets row.
void write_param_set(Connection& conn, std::int64_t trial_id, std::string_view blob);

// Writes trial_param_sets rows and interns distributions: keeps the
// distribution_json text last stored per param name (a study's trials
// mostly repeat their distributions), so it is not encoded again, and the
// distribution_id of each text, so it is not looked up again (dropped when
// the connection rolls back: the row may be gone).
class ParamWriter {
 public:
  struct Row {
    const std::string* name;
    const Json* value;
    const Distribution* distribution;  // may be null
  };

  // Inserts the row of a new trial, its params `rows` in name order, each
  // name once (as Params keeps them), refusing invalid UTF-8 names and NaN
  // values. Returns each value as reading it back gives it, in row order.
  std::vector<Json> insert(Connection& conn, std::int64_t trial_id, const std::vector<Row>& rows);

  // What set() did.
  enum class SetOutcome {
    kAdded,     // the param was new: `value` is the value as stored
    kReplaced,  // it had the same value: only its distribution was replaced
    kConflict,  // it has another value (`value`): nothing was written
  };
  struct SetResult {
    SetOutcome outcome;
    Json value;
  };
  // set_trial_param's write, in the trial's trial_param_sets row: adds
  // param `name` with `value` and distribution `d`, in name order; when the
  // trial has `name` with the same value (same_value), only replaces its
  // distribution; with another value, writes nothing. Throws StorageError
  // for an invalid UTF-8 name, a NaN value, a value that cannot be stored,
  // or a damaged row.
  SetResult set(Connection& conn, std::int64_t trial_id, const std::string& name, const Json& value,
                const Distribution& d);

 private:
  // The distribution_id of `d` (param `name`; `what` names it in errors),
  // inserting its text into distributions when it is new.
  std::int64_t distribution_id(Connection& conn, const std::string& name, const Distribution& d,
                               const std::string& what);
  // The distribution_json text of `d` (param `name`; `what` names it in
  // errors). The reference stays valid until the next call.
  const std::string& distribution_text(const std::string& name, const Distribution& d,
                                       const std::string& what);
  // Checks and appends one new param (key and value) to `out`; returns the
  // value as stored.
  Json append_new(Connection& conn, std::string& out, const Row& row);

  // Numeric distributions only, compared bit for bit (-0.0 and 0.0 are
  // stored differently).
  std::unordered_map<std::string, std::pair<Distribution, std::string>> texts_;
  std::string scratch_;
  // distribution_json text -> distribution_id, valid while
  // conn.rollbacks == rollbacks_.
  std::unordered_map<std::string, std::int64_t> ids_;
  std::uint64_t rollbacks_ = 0;
  std::string blob_;
};

}  // namespace hps::sqlite
