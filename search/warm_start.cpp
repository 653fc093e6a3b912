#include "search/warm_start.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "search/caching_storage.h"
#include "search/errors.h"
#include "search/printable.h"
#include "search/sqlite_storage.h"
#include "search/study_name.h"
#include "search/util/storage_url.h"

namespace hps {

namespace {

namespace fs = std::filesystem;

// The names of the studies in `storage`, quoted and comma-separated.
std::string study_names(Storage& storage) {
  std::vector<std::string> names;
  for (const auto& info : storage.list_studies()) names.push_back(info.name);
  return study_name_list(names);
}

// The same file, whether named by two paths or not (an absent file compares
// by its absolute path).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(fs::absolute(a), ec) == fs::weakly_canonical(fs::absolute(b), ec);
}

// Throws ConfigError("warm_start.study", ...) unless the earlier study
// optimizes in the new study's direction.
void check_direction(StudyDirection earlier, StudyDirection now, const std::string& source_study,
                     const std::string& source_label, const std::string& study_name) {
  if (earlier != now)
    throw ConfigError("warm_start.study",
                      fmt::format("study '{}' in {} is to {}, the new study '{}' to {}: its "
                                  "values are no observations of the new objective",
                                  printable_excerpt(source_study), source_label, to_string(earlier),
                                  printable_excerpt(study_name), to_string(now)));
}

// The new trial that copies `from` (which fits, as `params`).
NewTrial warm_trial(const FrozenTrial& from, const SearchSpace& space, Params params,
                    const std::string& source_label, const std::string& source_study) {
  NewTrial init;
  init.state = TrialState::kComplete;
  for (const auto& spec : space.params())
    if (params.count(spec.name)) init.distributions.emplace(spec.name, spec.distribution);
  init.params = std::move(params);
  init.value = from.value;
  init.datetime_start = from.datetime_start;
  init.datetime_complete = from.datetime_complete;
  init.user_attrs = from.user_attrs.is_object() ? from.user_attrs : Json::object();
  init.worker = "warm start: " + source_study + " #" + std::to_string(from.number);
  init.system_attrs[kAttrWarmStart] =
      Json{{"storage", source_label}, {"study", source_study}, {"trial", from.number}};
  return init;
}

}  // namespace

WarmStartFit warm_start_fit(const SearchSpace& space, const Params& params, Params* fitted) {
  Params out;
  for (const auto& spec : space.params()) {
    if (!SearchSpace::is_active(spec, out)) continue;
    auto it = params.find(spec.name);
    if (it == params.end()) return WarmStartFit::kMissingParam;
    if (!spec.distribution.contains(it->second)) return WarmStartFit::kOutOfBounds;
    out[spec.name] = spec.distribution.to_external(spec.distribution.to_internal(it->second));
  }
  if (fitted) *fitted = std::move(out);
  return WarmStartFit::kFits;
}

namespace {

// "1 trial", "2 trials".
std::string trials(std::int64_t n) { return fmt::format("{} trial{}", n, n == 1 ? "" : "s"); }

}  // namespace

std::string WarmStartSummary::message() const {
  if (already_done)
    return fmt::format("warm start: already done ({} from {} in {})", trials(copied), study,
                       storage);
  return fmt::format(
      "warm start: {} from {} in {}; {} left out ({} out of bounds, {} "
      "missing params, {} without a value)",
      trials(copied), study, storage, left_out(), out_of_bounds, missing_params, no_value);
}

WarmStartSummary copy_warm_start(Study& study, Storage& source, const std::string& source_label,
                                 const std::string& source_study) {
  if (!study.space())
    throw ConfigError("warm_start",
                      "needs a declared search space (space.json's \"space\"): the earlier "
                      "trials are checked against it");
  const SearchSpace& space = *study.space();
  const std::optional<std::int64_t> source_id = source.find_study(source_study);
  if (!source_id)
    throw ConfigError("warm_start.study", "no study '" + printable_excerpt(source_study) + "' in " +
                                              source_label +
                                              " (studies there: " + study_names(source) + ")");
  check_direction(source.get_study(*source_id).direction, study.direction(), source_study,
                  source_label, study.name());

  WarmStartSummary summary;
  summary.storage = source_label;
  summary.study = source_study;
  std::vector<NewTrial> copies;
  for (const auto& t : source.get_all_trials(*source_id, {TrialState::kComplete})) {
    if (!t->value || std::isnan(*t->value)) {
      ++summary.no_value;
      continue;
    }
    Params fitted;
    switch (warm_start_fit(space, t->params, &fitted)) {
      case WarmStartFit::kFits:
        copies.push_back(warm_trial(*t, space, std::move(fitted), source_label, source_study));
        break;
      case WarmStartFit::kOutOfBounds:
        ++summary.out_of_bounds;
        break;
      case WarmStartFit::kMissingParam:
        ++summary.missing_params;
        break;
    }
  }

  Storage& storage = study.storage();
  storage.run_in_transaction([&] {
    // Checked inside the transaction: of two runs starting at once, one copies.
    const StudyInfo info = storage.get_study(study.study_id());
    if (info.system_attrs.is_object() && info.system_attrs.contains(kAttrWarmStart)) {
      summary.already_done = true;
      summary.copied = warm_start_copies(info);
      return;
    }
    for (const auto& init : copies) storage.create_trial(study.study_id(), init);
    summary.copied = static_cast<std::int64_t>(copies.size());
    storage.set_study_system_attr(study.study_id(), kAttrWarmStart,
                                  Json{{"storage", source_label},
                                       {"study", source_study},
                                       {"copied", summary.copied},
                                       {"left_out", summary.left_out()},
                                       {"out_of_bounds", summary.out_of_bounds},
                                       {"missing_params", summary.missing_params},
                                       {"no_value", summary.no_value}});
  });
  return summary;
}

std::int64_t warm_start_copies(const StudyInfo& info) {
  if (!info.system_attrs.is_object()) return 0;
  const auto attr = info.system_attrs.find(kAttrWarmStart);
  if (attr == info.system_attrs.end() || !attr->is_object()) return 0;
  const auto copied = attr->find("copied");
  if (copied == attr->end() || !copied->is_number_integer()) return 0;
  const auto n = copied->get<std::int64_t>();  // an unsigned above int64 reads negative
  return n >= 0 ? n : 0;
}

bool warm_started(Storage& storage, const std::string& study_name) {
  const std::optional<std::int64_t> id = storage.find_study(study_name);
  if (!id) return false;
  const StudyInfo info = storage.get_study(*id);
  return info.system_attrs.is_object() && info.system_attrs.contains(kAttrWarmStart);
}

namespace {

// open_warm_start_source's checks once `path` (config.storage's file) is
// known to be a non-empty regular file. The COMPLETE trials are read here
// once, so that a store that cannot be decoded is refused before the new
// study is created (CachingStorage keeps them for copy_warm_start).
WarmStartSource open_checked_source(const WarmStartConfig& config, const std::string& path,
                                    const std::string& study_name, StudyDirection direction,
                                    const std::string& study_storage) {
  // Only read: a store of an older schema is read through an upgraded copy
  // in memory, so the hpsearch that made it can still open it.
  SqliteOptions options;
  options.upgrade_file = false;
  WarmStartSource source{
      std::make_shared<CachingStorage>(std::make_shared<SqliteStorage>(path, options)),
      config.storage, config.study};
  if (source.study.empty()) {
    const std::vector<StudyInfo> studies = source.storage->list_studies();
    if (studies.size() != 1)
      throw ConfigError("warm_start.study",
                        fmt::format("is required: {} holds {} studies ({})", path, studies.size(),
                                    study_names(*source.storage)));
    source.study = studies[0].name;
  }
  const std::optional<std::int64_t> id = source.storage->find_study(source.study);
  if (!id)
    throw ConfigError("warm_start.study",
                      "no study '" + printable_excerpt(source.study) + "' in " + path +
                          " (studies there: " + study_names(*source.storage) + ")");
  const util::StorageUrl own = util::parse_storage_url(study_storage);
  if (!own.in_memory && source.study == study_name && same_file(path, own.path))
    throw ConfigError("warm_start.study", "is the new study itself ('" + study_name + "' in " +
                                              path + "): name an earlier study, or another store");
  check_direction(source.storage->get_study(*id).direction, direction, source.study, path,
                  study_name);
  source.storage->get_all_trials(*id, {TrialState::kComplete});
  return source;
}

}  // namespace

WarmStartSource open_warm_start_source(const WarmStartConfig& config, const std::string& study_name,
                                       StudyDirection direction, const std::string& study_storage) {
  if (config.storage.empty()) throw ConfigError("warm_start.storage", "must not be empty");
  const util::StorageUrl url = util::parse_storage_url(config.storage);
  if (url.in_memory || url.path.empty())
    throw ConfigError("warm_start.storage", "must name the SQLite file of an earlier study, got '" +
                                                config.storage + "'");
  // open_storage would make an empty file a new store: it is refused unread.
  util::check_existing_store_file(url.path, "warm_start.storage");
  try {
    return open_checked_source(config, url.path, study_name, direction, study_storage);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    // A broken or foreign file (StorageError): named by the field that
    // pointed at it.
    throw ConfigError("warm_start.storage", "cannot read " + url.path + ": " + e.what());
  }
}

WarmStartSummary warm_start(Study& study, const WarmStartConfig& config,
                            const std::string& study_storage) {
  if (warm_started(study.storage(), study.name())) {
    const Json done = study.storage().get_study(study.study_id()).system_attrs[kAttrWarmStart];
    WarmStartSummary summary;
    summary.already_done = true;
    summary.storage = done.value("storage", config.storage);
    summary.study = done.value("study", config.study);
    summary.copied = done.value("copied", std::int64_t{0});
    return summary;
  }
  const WarmStartSource source =
      open_warm_start_source(config, study.name(), study.direction(), study_storage);
  return copy_warm_start(study, *source.storage, source.label, source.study);
}

}  // namespace hps
