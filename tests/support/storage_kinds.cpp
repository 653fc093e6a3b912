#include "tests/support/storage_kinds.h"

#include "search/caching_storage.h"
#include "search/sqlite_storage.h"

namespace hps::testsupport {

// A trial as a comparable text: what a reader can see of it.
std::string describe(const FrozenTrial& t) {
  Json j = {{"id", t.trial_id},
            {"number", t.number},
            {"state", to_string(t.state)},
            {"params", Json(t.params)},
            {"user", t.user_attrs},
            {"system", t.system_attrs},
            {"steps", t.intermediate_values.size()}};
  if (t.value) j["value"] = *t.value;
  return j.dump();
}

std::vector<std::string> describe_all(const std::vector<TrialPtr>& trials) {
  std::vector<std::string> out;
  for (const auto& t : trials) out.push_back(describe(*t));
  return out;
}

void PrintTo(const StorageKind& kind, std::ostream* os) { *os << kind.name; }

std::vector<StorageKind> storage_kinds() {
  return {
      {"InMemory", [](const std::string&) { return std::make_shared<InMemoryStorage>(); }},
      {"CachingSqlite",
       [](const std::string& f) {
         return std::make_shared<CachingStorage>(std::make_shared<SqliteStorage>(f));
       }},
      {"CachingInMemory",
       [](const std::string&) {
         return std::make_shared<CachingStorage>(std::make_shared<InMemoryStorage>());
       }},
      {"PlainSqlite", [](const std::string& f) { return std::make_shared<SqliteStorage>(f); }},
      {"UserStorageWithoutFeed",
       [](const std::string&) { return std::make_shared<PlainStorage>(); }},
  };
}

void random_write(Storage& s, std::int64_t study, std::mt19937_64& rng) {
  auto trials = s.get_all_trials(study, {TrialState::kRunning});
  const auto kind = rng() % 6;
  const auto dist = Distribution::make_float(0.0, 1.0, false, std::nullopt, "x");
  if (trials.empty() || kind == 0) {
    NewTrial init;
    init.state = rng() % 3 == 0 ? TrialState::kWaiting : TrialState::kRunning;
    s.create_trial(study, init);
    return;
  }
  const TrialPtr& t = trials[rng() % trials.size()];
  switch (kind) {
    case 1:
      if (!t->params.count("x")) s.set_trial_param(t->trial_id, "x", 0.25, dist);
      break;
    case 2:
      s.set_trial_intermediate_value(t->trial_id, static_cast<std::int64_t>(rng() % 5), 0.5);
      break;
    case 3:
      s.set_trial_state(t->trial_id, TrialState::kComplete, static_cast<double>(rng() % 100));
      break;
    case 4:
      s.set_trial_user_attr(t->trial_id, "k", static_cast<int>(rng() % 7));
      break;
    default:
      s.claim_waiting_trial(study, "w");
      break;
  }
}

}  // namespace hps::testsupport
