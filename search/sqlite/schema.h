// Private to SqliteStorage: the schema (one migration per version, applied
// in order) and the checks made before a file is changed. The tables and
// their columns are described in search/sqlite_storage.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hps::sqlite {

class Connection;

// Reads the file's schema version and table count in one read transaction
// and refuses (StorageError) a file that is not a SQLite database or a
// damaged one (cut short or overwritten: "the file is damaged ..."), and
// (StoreRefused) one of another program (tables but no version) or one
// newer than this build.
// Returns the version (0 for a new file).
std::int64_t inspect_schema(Connection& conn);

// The SQL of migration `i` (0-based: it brings user_version i to i + 1)
// as released, for tests that build a file of an older version. Throws
// std::out_of_range for i >= SqliteStorage::kSchemaVersion.
const char* migration_sql(std::size_t i);

// Applies the migrations the file lacks, in one transaction (another
// process may have migrated it meanwhile: checked again inside). Throws
// StoreRefused, changing nothing, for an older file while a coordinator
// runs one of its studies or its writer lock cannot be asked.
void migrate(Connection& conn);

}  // namespace hps::sqlite
