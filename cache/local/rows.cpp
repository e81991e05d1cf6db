// Writing and dropping one entry's rows: the record, its apart payloads, its field index.
#include "cache/local/rows.h"

#include "cache/entry_codec.h"
#include "cache/local/sqlite.h"

namespace kiln::cache::local {

Status drop_rows(sql::Db& db, const std::string& key) {
  for (const char* sql : {"DELETE FROM apart WHERE key = ?", "DELETE FROM fields WHERE key = ?",
                          "DELETE FROM entries WHERE key = ?"}) {
    auto st = db.prepare(sql);
    if (!st) return st.error();
    st->bind_text(1, key);
    if (Status s = st->run(); !s) return s;
  }
  return Status::success();
}

std::string bounded_size(const std::string& column) {
  return "max(0, min(" + column + ", 68719476736))";
}

std::string bounded_count(const std::string& column) {
  return "max(0, min(" + column + ", 4611686018427387904))";
}

const std::string& total_stored_sql() {
  static const std::string sql =
      "SELECT coalesce(sum(" + bounded_size("stored_bytes") + "), 0) FROM entries";
  return sql;
}

Expected<bool> has_entry(sql::Db& db, const std::string& key) {
  auto st = db.prepare("SELECT 1 FROM entries WHERE key = ?");
  if (!st) return st.error();
  st->bind_text(1, key);
  return st->step();
}

Status insert_rows(sql::Db& db, StoredEntry& entry) {
  auto inserted = insert_rows_within(db, entry, 0);
  return inserted ? Status::success() : Status(inserted.error());
}

Expected<bool> insert_rows_within(sql::Db& db, StoredEntry& entry, uint64_t max_bytes) {
  EntryInfo& info = entry.info;
  // The record and the size first: an entry over the limit writes nothing.
  StoredEntry record_view;
  record_view.info = info;
  uint64_t apart_bytes = 0;
  for (const StoredPayload& p : entry.payloads) {
    if (p.apart) return make_error("cache: storing ", info.key, ": payload '", p.name, "' is missing");
    StoredPayload described{p.name, {}, false};
    described.encoded.encoding = p.encoded.encoding;
    described.encoded.raw_size = p.encoded.raw_size;
    described.encoded.checksum = p.encoded.checksum;
    if (stored_apart(p.name)) {
      described.apart = true;
      apart_bytes += p.encoded.data.size();
    } else {
      described.encoded.data = p.encoded.data;
    }
    record_view.payloads.push_back(std::move(described));
  }
  std::string record = encode_entry(record_view);
  info.stored_bytes = record.size() + apart_bytes;
  if (max_bytes != 0 && info.stored_bytes > max_bytes) return false;
  if (Status s = drop_rows(db, info.key); !s) return s.error();
  for (const StoredPayload& p : entry.payloads) {
    if (!stored_apart(p.name)) continue;
    auto st = db.prepare("INSERT INTO apart(key, name, data) VALUES(?, ?, ?)");
    if (!st) return st.error();
    st->bind_text(1, info.key).bind_text(2, p.name).bind_blob(3, p.encoded.data);
    if (Status s = st->run(); !s) return s.error();
  }
  info.raw_bytes = 0;
  for (const StoredPayload& p : entry.payloads) info.raw_bytes += p.encoded.raw_size;
  auto st = db.prepare(
      "INSERT INTO entries(key, record, summary, compile_ms, stored_bytes, raw_bytes, created_ms,"
      " last_used_ms, hits) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!st) return st.error();
  st->bind_text(1, info.key).bind_blob(2, record).bind_text(3, info.summary);
  st->bind(4, info.compile_ms).bind(5, static_cast<int64_t>(info.stored_bytes));
  st->bind(6, static_cast<int64_t>(info.raw_bytes)).bind(7, info.created_ms);
  st->bind(8, info.last_used_ms).bind(9, info.hits);
  if (Status s = st->run(); !s) return s.error();
  for (const KeyField& f : info.fields) {
    auto fs = db.prepare("INSERT INTO fields(key, name, value) VALUES(?, ?, ?)");
    if (!fs) return fs.error();
    fs->bind_text(1, info.key).bind_text(2, f.name).bind_blob(3, f.value);
    if (Status s = fs->run(); !s) return s.error();
  }
  return true;
}

}  // namespace kiln::cache::local
