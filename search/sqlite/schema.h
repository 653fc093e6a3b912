// Private to SqliteStorage: the schema (one migration per version, applied
// in order) and the checks made before a file is changed. The tables and
// their columns are described in search/sqlite_storage.h.
#pragma once

#include <cstdint>

namespace hps::sqlite {

class Connection;

// Reads the file's schema version and table count in one read transaction
// and refuses (StorageError) a file that is not a SQLite database, a damaged
// one (cut short or overwritten: "the file is damaged ..."), one of another
// program (tables but no version) or one newer than this build.
// Returns the version (0 for a new file).
std::int64_t inspect_schema(Connection& conn);

// Applies the migrations the file lacks, in one transaction (another
// process may have migrated it meanwhile: checked again inside).
void migrate(Connection& conn);

}  // namespace hps::sqlite
