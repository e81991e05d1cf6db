// Migration steps: 0 -> 1 creates the first schema; 1 -> 2 moves each entry's rows into one
// checksummed record (cubins and artifact raw) with PTX, source and log kept apart.
#include "cache/local/migrate.h"

#include "cache/local/rows.h"
#include "cache/local/sqlite.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cache::local {
namespace {

constexpr const char* k_schema_1 =
    "CREATE TABLE IF NOT EXISTS entries("
    "  key TEXT PRIMARY KEY NOT NULL,"
    "  summary TEXT NOT NULL,"
    "  compile_ms INTEGER NOT NULL,"
    "  stored_bytes INTEGER NOT NULL,"
    "  raw_bytes INTEGER NOT NULL,"
    "  field_count INTEGER NOT NULL,"
    "  payload_count INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL,"
    "  last_used_ms INTEGER NOT NULL,"
    "  hits INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS entries_by_last_used ON entries(last_used_ms);"
    "CREATE TABLE IF NOT EXISTS fields("
    "  key TEXT NOT NULL, name TEXT NOT NULL, value BLOB NOT NULL,"
    "  PRIMARY KEY(key, name)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS fields_by_value ON fields(name, value);"
    "CREATE TABLE IF NOT EXISTS payloads("
    "  key TEXT NOT NULL, ord INTEGER NOT NULL, name TEXT NOT NULL,"
    "  raw_size INTEGER NOT NULL, checksum INTEGER NOT NULL, data BLOB NOT NULL,"
    "  PRIMARY KEY(key, ord));"
    "CREATE TABLE IF NOT EXISTS stats(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);";

constexpr const char* k_schema_2_tables =
    "ALTER TABLE entries RENAME TO entries_v1;"
    "DROP INDEX IF EXISTS entries_by_last_used;"
    "CREATE TABLE entries("
    "  key TEXT PRIMARY KEY NOT NULL,"
    "  record BLOB NOT NULL,"
    "  summary TEXT NOT NULL,"
    "  compile_ms INTEGER NOT NULL,"
    "  stored_bytes INTEGER NOT NULL,"
    "  raw_bytes INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL,"
    "  last_used_ms INTEGER NOT NULL,"
    "  hits INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX entries_by_last_used ON entries(last_used_ms);"
    "CREATE TABLE apart(key TEXT NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL,"
    "  PRIMARY KEY(key, name));";

// One version-1 entry with its fields and payloads, or nullopt when its rows are not all there.
Expected<std::optional<StoredEntry>> read_v1(sql::Db& db, sql::Statement& row) {
  StoredEntry e;
  e.info.key = row.column_text(0);
  e.info.summary = row.column_text(1);
  e.info.compile_ms = row.column_int64(2);
  int64_t field_count = row.column_int64(3), payload_count = row.column_int64(4);
  e.info.created_ms = row.column_int64(5);
  e.info.last_used_ms = row.column_int64(6);
  e.info.hits = row.column_int64(7);
  auto fields = db.prepare("SELECT name, value FROM fields WHERE key = ? ORDER BY name");
  if (!fields) return fields.error();
  fields->bind_text(1, e.info.key);
  for (;;) {
    auto r = fields->step();
    if (!r) return r.error();
    if (!*r) break;
    e.info.fields.push_back({fields->column_text(0), fields->column_blob(1)});
  }
  auto payloads = db.prepare(
      "SELECT name, raw_size, checksum, data FROM payloads WHERE key = ? ORDER BY ord");
  if (!payloads) return payloads.error();
  payloads->bind_text(1, e.info.key);
  for (;;) {
    auto r = payloads->step();
    if (!r) return r.error();
    if (!*r) break;
    StoredPayload p;
    p.name = payloads->column_text(0);
    p.encoded.encoding = Encoding::zstd;
    p.encoded.raw_size = static_cast<uint64_t>(payloads->column_int64(1));
    p.encoded.checksum = static_cast<uint64_t>(payloads->column_int64(2));
    p.encoded.data = payloads->column_blob(3);
    e.payloads.push_back(std::move(p));
  }
  if (static_cast<int64_t>(e.info.fields.size()) != field_count ||
      static_cast<int64_t>(e.payloads.size()) != payload_count)
    return std::optional<StoredEntry>();
  return std::optional<StoredEntry>(std::move(e));
}

// Version-1 entries into version-2 rows; a bad entry (rows missing, checksums off) is dropped.
Status convert_1_to_2(sql::Db& db, MigrationReport& report) {
  if (Status s = db.exec(k_schema_2_tables); !s) return s;
  std::vector<std::string> keys;
  {
    auto st = db.prepare("SELECT key FROM entries_v1 ORDER BY rowid");
    if (!st) return st.error();
    for (;;) {
      auto r = st->step();
      if (!r) return r.error();
      if (!*r) break;
      keys.push_back(st->column_text(0));
    }
  }
  // One entry at a time, so that memory holds one entry's payloads, not the whole cache's.
  for (const std::string& key : keys) {
    auto st = db.prepare(
        "SELECT key, summary, compile_ms, field_count, payload_count, created_ms, last_used_ms,"
        " hits FROM entries_v1 WHERE key = ?");
    if (!st) return st.error();
    st->bind_text(1, key);
    auto r = st->step();
    if (!r) return r.error();
    auto old = read_v1(db, *st);
    if (!old) return old.error();
    std::optional<StoredEntry> converted;
    if (*old) {
      if (auto entry = verify_stored(**old)) {
        converted = std::move(**old);
        for (size_t i = 0; i < converted->payloads.size(); ++i) {
          StoredPayload& p = converted->payloads[i];
          if (stored_apart(p.name)) continue;  // stays a zstd frame
          auto raw = encode(entry->payloads[i].bytes, Encoding::raw);
          if (!raw) return raw.error();
          p.encoded = std::move(*raw);
        }
      }
    }
    if (!converted) {
      ++report.dropped;
      if (Status s = drop_rows(db, key); !s) return s;  // its field rows
      continue;
    }
    if (Status s = insert_rows(db, *converted); !s) return s;
    ++report.converted;
  }
  return db.exec("DROP TABLE entries_v1; DROP TABLE payloads;");
}

}  // namespace

Expected<std::string> missing_table(sql::Db& db) {
  auto tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'");
  if (!tables) return tables.error();
  std::vector<std::string> found;
  for (;;) {
    auto r = tables->step();
    if (!r) return r.error();
    if (!*r) break;
    found.push_back(tables->column_text(0));
  }
  for (const char* name : {"entries", "apart", "fields", "stats"})
    if (std::find(found.begin(), found.end(), name) == found.end()) return std::string(name);
  return std::string();
}

Status migrate_schema(sql::Db& db, int64_t from, MigrationReport& report) {
  for (int64_t v = from; v < k_schema_version; ++v) {
    Status s = v == 0 ? db.exec(k_schema_1) : convert_1_to_2(db, report);
    if (!s) return s;
  }
  // PRAGMA takes no bound parameters; the value is our own constant.
  return db.exec("PRAGMA user_version=" + std::to_string(k_schema_version));
}

}  // namespace kiln::cache::local
