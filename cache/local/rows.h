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

// SQL reading an entry's size or time column (stored_bytes, raw_bytes, compile_ms) within 0..2^36,
// and a count (hits, a stats counter) within 0..2^62. kiln writes nothing outside them; a value
// edited in by hand (-1, 2^63 - 1) reads as the nearer bound, so that sums and increments of
// such values cannot overflow (SQLite fails an integer overflow) and nothing shows as negative.
std::string bounded_size(const std::string& column);
std::string bounded_count(const std::string& column);
// The entries' stored bytes, summed so bounded.
const std::string& total_stored_sql();

// How the rows `ls`, `why` and `pull` read instead of the record (the key's fields rows, and the
// entry row's summary, compile_ms, created_ms and raw_bytes) differ from `entry`, the record
// as verified: "" when they agree, else the first difference ("its index says arch = sm_80,
// its record sm_90"). Only a database edited by hand has one.
Expected<std::string> index_disagreement(sql::Db& db, const Entry& entry);

// Whether an entry row for `key` exists (in the caller's transaction, if any).
Expected<bool> has_entry(sql::Db& db, const std::string& key);

// Removes every row of `key`.
Status drop_rows(sql::Db& db, const std::string& key);

}  // namespace kiln::cache::local
