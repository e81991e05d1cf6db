// The rows of one entry in the local store's schema (FORMAT.md, "Schema"): written and dropped
// inside the caller's write transaction.
#pragma once

#include "cache/entry.h"
#include "support/expected.h"

#include <cstdint>
#include <string>

namespace kiln::cache::sql {
class Db;
}

namespace kiln::cache::local {

// Replaces the rows of `entry.info.key`: the entry row with its record (payloads named by
// stored_apart() as descriptors, their bytes in `apart` rows) and the field index rows. Every
// payload's data must be present. Sets `entry.info.stored_bytes` to the bytes written.
Status insert_rows(sql::Db& db, StoredEntry& entry);
// As insert_rows, unless the entry would take more than `max_bytes` (0: no limit): then nothing
// is written, the rows of the key are left as they were, and the answer is false.
// `entry.info.stored_bytes` is set either way.
Expected<bool> insert_rows_within(sql::Db& db, StoredEntry& entry, uint64_t max_bytes);

// Whether an entry row for `key` exists (in the caller's transaction, if any).
Expected<bool> has_entry(sql::Db& db, const std::string& key);

// Removes every row of `key`.
Status drop_rows(sql::Db& db, const std::string& key);

}  // namespace kiln::cache::local
