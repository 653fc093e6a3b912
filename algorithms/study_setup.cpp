#include "algorithms/study_setup.h"

#include <utility>

#include "algorithms/factory.h"

namespace hps {

Study create_study(const StudyConfig& config, std::shared_ptr<Storage> storage) {
  StudyOptions so;
  so.sampler = make_sampler(config.sampler);
  so.pruner = make_pruner(config.pruner);
  so.space = config.space;
  return Study::create(std::move(storage), config.name, config.direction, so, config.source);
}

std::string stored_column(const StudyInfo& info, std::string_view column) {
  return "studies row study_id=" + std::to_string(info.study_id) + ": column " +
         std::string(column);
}

std::string stored_settings_where(const StudyInfo& info) {
  return stored_column(info, "config_json") + ": ";
}

std::string stored_settings_error(const StudyInfo& info) {
  if (!info.config_error.empty()) return info.config_error;
  if (info.config.is_null()) return "";
  if (!info.config.is_object())
    return stored_settings_where(info) +
           "must be a JSON object (the study's space.json document), got " +
           std::string(info.config.type_name());
  try {
    const StudyConfig config = StudyConfig::from_json(info.config);
    (void)make_sampler(config.sampler);
    (void)make_pruner(config.pruner);
    // The study's direction is its row's (studies.direction); settings that
    // say the other one are not this study's.
    if (config.direction != info.direction)
      return stored_settings_where(info) + "study.direction: says " + to_string(config.direction) +
             ", but the study was created to " + to_string(info.direction);
  } catch (const ConfigError& e) {
    return stored_settings_where(info) + e.what();
  }
  return "";
}

}  // namespace hps
