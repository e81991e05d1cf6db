// Schema migrations of the local store: each step takes `user_version` v to v + 1.
#pragma once

#include "support/expected.h"

#include <cstdint>

namespace kiln::cache::sql {
class Db;
}

namespace kiln::cache::local {

inline constexpr int64_t k_schema_version = 2;

struct MigrationReport {
  uint64_t converted = 0;  // entries carried into the new schema
  uint64_t dropped = 0;    // bad entries left behind
};

// Runs every step from `from` to k_schema_version and sets user_version, inside the caller's
// write transaction. Released steps are never edited; new ones are appended.
Status migrate_schema(sql::Db& db, int64_t from, MigrationReport& report);

// The first table of k_schema_version that is not there ("" when every one is); an error when
// the query itself fails (a busy or unreadable database, which is no sign of damage).
Expected<std::string> missing_table(sql::Db& db);

}  // namespace kiln::cache::local
