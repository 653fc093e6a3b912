// hpsearch export --format optuna | hpsearch import: a study to and from
// Optuna's RDB storage (search/sqlite/optuna_rdb.h).
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "search/printable.h"
#include "search/sqlite/optuna_rdb.h"
#include "search/util/storage_url.h"
#include "search/writer_lock.h"

namespace hps::cli {

int export_command(const ExportOptions& o) {
  if (o.format != "optuna") throw ConfigError("--format", "must be optuna, got '" + o.format + "'");
  auto storage = open_existing(o.storage);
  auto id = pick_study(*storage, o.study, o.storage);
  sqlite::export_optuna(*storage, id, o.output, o.force);
  auto info = storage->get_study(id);
  std::cout << fmt::format(
      "Wrote study '{}' ({} trials) to {} in Optuna's storage format; open it with\n"
      "  optuna.load_study(study_name={}, storage=\"sqlite:///{}\")\n",
      printable_excerpt(info.name), storage->count_trials(id), o.output,
      Json(info.name).dump(-1, ' ', true, Json::error_handler_t::replace), o.output);
  return kExitOk;
}

int import_command(const ImportOptions& o) {
  // A store that this command creates is removed again when the import
  // fails: nothing is left behind (the import itself writes all or nothing).
  std::error_code ec;
  const util::StorageUrl url = util::parse_storage_url(o.into);
  const bool existed = url.in_memory || std::filesystem::exists(url.path, ec);
  if (!url.in_memory) util::check_store_file_if_present(url.path, "--into");
  auto storage = open_storage(o.into);
  sqlite::OptunaImport result;
  try {
    result = sqlite::import_optuna(o.file, o.study, *storage, o.as);
  } catch (...) {
    if (!existed) {
      const std::string file = storage_file(*storage);
      storage.reset();
      for (const char* suffix : {"", "-wal", "-shm", "-journal", ".lock"})
        std::filesystem::remove(file + suffix, ec);
    }
    throw;
  }
  std::cout << fmt::format("Imported study '{}' ({} {}) from {} into {} as '{}'\n",
                           printable(result.study_name), result.n_trials,
                           result.n_trials == 1 ? "trial" : "trials", o.file, o.into,
                           printable(o.as.value_or(result.study_name)));
  return kExitOk;
}

}  // namespace hps::cli
