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

namespace {

// A field's value as a message shows it: printable ASCII as it is, at most 40 characters.
std::string shown(const std::string& value) {
  std::string out;
  for (char c : value.substr(0, 40))
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return value.size() > 40 ? out + "..." : out;
}

}  // namespace

Expected<std::string> index_disagreement(sql::Db& db, const Entry& entry) {
  const EntryInfo& info = entry.info;
  uint64_t raw = 0;
  for (const Payload& p : entry.payloads) raw += p.bytes.size();
  auto st =
      db.prepare("SELECT summary, compile_ms, created_ms, raw_bytes FROM entries WHERE key = ?");
  if (!st) return st.error();
  st->bind_text(1, info.key);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::string();  // removed meanwhile: nothing to disagree
  if (st->column_text(0) != info.summary) return std::string("its summary column is not its record's");
  auto column = [&](const char* name, int64_t indexed, int64_t recorded) {
    return "its " + std::string(name) + " column says " + std::to_string(indexed) +
           ", its record " + std::to_string(recorded);
  };
  if (st->column_int64(1) != info.compile_ms)
    return column("compile_ms", st->column_int64(1), info.compile_ms);
  if (st->column_int64(2) != info.created_ms)
    return column("created_ms", st->column_int64(2), info.created_ms);
  if (st->column_int64(3) != static_cast<int64_t>(raw))
    return column("raw_bytes", st->column_int64(3), static_cast<int64_t>(raw));
  auto fs = db.prepare("SELECT name, value FROM fields WHERE key = ? ORDER BY name");
  if (!fs) return fs.error();
  fs->bind_text(1, info.key);
  std::vector<KeyField> indexed;
  for (;;) {
    auto r = fs->step();
    if (!r) return r.error();
    if (!*r) break;
    indexed.push_back({fs->column_text(0), fs->column_blob(1)});
  }
  // Both sorted by name (the record's fields are kept sorted).
  size_t i = 0;
  for (; i < indexed.size() && i < info.fields.size(); ++i) {
    const KeyField& a = indexed[i];
    const KeyField& b = info.fields[i];
    if (a.name != b.name) {
      const std::string& first = std::min(a.name, b.name);
      return "its index " + std::string(a.name < b.name ? "has" : "lacks") + " field '" +
             shown(first) + "', its record " + (a.name < b.name ? "not" : "has it");
    }
    if (a.value != b.value)
      return "its index says " + shown(a.name) + " = " + shown(a.value) + ", its record " +
             shown(b.value);
  }
  if (i < indexed.size()) return "its index has field '" + shown(indexed[i].name) + "', its record not";
  if (i < info.fields.size())
    return "its index lacks field '" + shown(info.fields[i].name) + "', its record has it";
  return std::string();
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
