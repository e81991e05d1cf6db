// Lookups, inserts and the batched bookkeeping (hit counts, last-used times, counters).
#include "cache/cache.h"

#include "cache/sqlite.h"

#include <algorithm>

namespace kiln::cache {
namespace {

using sql::Transaction;

// Batched bookkeeping is written after this many touched entries or this much time.
constexpr size_t k_flush_touches = 64;
constexpr int64_t k_flush_interval_ms = 1000;

bool disables_cache(int code) {
  return code == sql::k_readonly || code == sql::k_full || code == sql::k_ioerr ||
         code == sql::k_cantopen;
}

// True when `requested` (in any order) equals `stored` (sorted); copies only an unsorted request.
bool same_fields(const std::vector<KeyField>& requested, const std::vector<KeyField>& stored) {
  if (requested.size() != stored.size()) return false;
  if (fields_sorted(requested)) return requested == stored;
  std::vector<KeyField> sorted = requested;
  sort_fields(sorted);
  return sorted == stored;
}

}  // namespace

void Cache::note_write_failure(const Error& error) {
  ++m_pending.errors;
  if (m_db && disables_cache(m_db->last_code())) return disable("writing failed: " + error.message);
  warn(error.message);
}

Expected<std::optional<StoredEntry>> Cache::read_stored(const std::string& key,
                                                        const PayloadSelection& want,
                                                        bool* rows_missing) {
  // One read transaction: the three tables come from one snapshot even while others write.
  auto txn = Transaction::begin(*m_db, Transaction::Kind::read);
  if (!txn) return txn.error();
  StoredEntry out;
  int64_t field_count = 0, payload_count = 0;
  {
    auto st = m_db->prepare(
        "SELECT summary, compile_ms, stored_bytes, raw_bytes, field_count, payload_count,"
        " created_ms, last_used_ms, hits FROM entries WHERE key = ?");
    if (!st) return st.error();
    st->bind_text(1, key);
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) return std::optional<StoredEntry>();
    EntryInfo& info = out.info;
    info.key = key;
    info.summary = st->column_text(0);
    info.compile_ms = st->column_int64(1);
    info.stored_bytes = st->column_int64(2);
    info.raw_bytes = st->column_int64(3);
    field_count = st->column_int64(4);
    payload_count = st->column_int64(5);
    info.created_ms = st->column_int64(6);
    info.last_used_ms = st->column_int64(7);
    info.hits = st->column_int64(8);
  }
  {
    auto st = m_db->prepare("SELECT name, value FROM fields WHERE key = ? ORDER BY name");
    if (!st) return st.error();
    st->bind_text(1, key);
    for (;;) {
      auto row = st->step();
      if (!row) return row.error();
      if (!*row) break;
      out.info.fields.push_back({st->column_text(0), st->column_blob(1)});
    }
  }
  // Every payload row is listed (and counted); a partial read leaves the data of the others
  // unread and fetches the selected ones by their position.
  int64_t payload_rows = 0;
  std::vector<int64_t> selected_ords;
  {
    auto st = m_db->prepare(
        want.all ? "SELECT name, raw_size, checksum, ord, data FROM payloads WHERE key = ?"
                   " ORDER BY ord"
                 : "SELECT name, raw_size, checksum, ord FROM payloads WHERE key = ? ORDER BY ord");
    if (!st) return st.error();
    st->bind_text(1, key);
    for (;;) {
      auto row = st->step();
      if (!row) return row.error();
      if (!*row) break;
      ++payload_rows;
      StoredPayload p;
      p.name = st->column_text(0);
      if (!want.wants(p.name)) continue;
      p.encoded.raw_size = static_cast<uint64_t>(st->column_int64(1));
      p.encoded.checksum = static_cast<uint64_t>(st->column_int64(2));
      if (want.all)
        p.encoded.compressed = st->column_blob(4);
      else
        selected_ords.push_back(st->column_int64(3));
      out.payloads.push_back(std::move(p));
    }
  }
  for (size_t i = 0; i < selected_ords.size(); ++i) {
    auto st = m_db->prepare("SELECT data FROM payloads WHERE key = ? AND ord = ?");
    if (!st) return st.error();
    st->bind_text(1, key).bind(2, selected_ords[i]);
    auto row = st->step();
    if (!row) return row.error();
    if (*row) out.payloads[i].encoded.compressed = st->column_blob(0);
  }
  if (Status s = txn->commit(); !s) return s.error();
  // Counts that disagree with the rows mean rows went missing: a bad entry, like a bad checksum.
  *rows_missing = static_cast<int64_t>(out.info.fields.size()) != field_count ||
                  payload_rows != payload_count;
  return std::optional<StoredEntry>(std::move(out));
}

Cache::Checked Cache::read_checked(const std::string& key, const PayloadSelection& want) {
  Checked out;
  bool rows_missing = false;
  auto stored = read_stored(key, want, &rows_missing);
  if (!stored) {
    out.kind = Checked::Kind::failure;
    out.reason = stored.error().message;
    return out;
  }
  if (!stored->has_value()) return out;
  out.stored = std::move(**stored);
  auto entry = rows_missing ? Expected<Entry>(make_error("rows of the entry are missing"))
                            : verify_stored(out.stored);
  if (!entry) {
    out.kind = Checked::Kind::bad;
    out.reason = entry.error().message;
    return out;
  }
  out.kind = Checked::Kind::good;
  out.entry = std::move(*entry);
  return out;
}

Error Cache::disabled_error() const { return make_error("cache: disabled: ", m_disabled_reason); }

Lookup Cache::lookup(const std::string& key, const std::vector<KeyField>& fields,
                     const PayloadSelection& want) {
  std::lock_guard lock(m_mutex);
  return lookup_locked(key, &fields, Count::yes, want);
}

Lookup Cache::read(const std::string& key) {
  std::lock_guard lock(m_mutex);
  return lookup_locked(key, nullptr, Count::no, PayloadSelection());
}

Lookup Cache::lookup_locked(const std::string& key, const std::vector<KeyField>* fields,
                            Count count, const PayloadSelection& want) {
  Lookup result;
  if (!m_db) {
    result.status = LookupStatus::failure;
    result.failure = "the cache is disabled: " + m_disabled_reason;
    return result;
  }
  Checked checked = read_checked(key, want);
  if (checked.kind == Checked::Kind::failure) {
    ++m_pending.errors;
    result.status = LookupStatus::failure;
    result.failure = checked.reason;
    return result;
  }
  if (checked.kind == Checked::Kind::good && fields &&
      !same_fields(*fields, checked.entry.info.fields)) {
    checked.kind = Checked::Kind::bad;
    checked.reason = "stored key fields differ from the request";
  }
  if (checked.kind != Checked::Kind::good) {
    if (checked.kind == Checked::Kind::bad) drop_bad(key, checked.reason);
    if (count == Count::yes) ++m_pending.misses;
    result.status = LookupStatus::miss;
    return result;
  }
  result.status = LookupStatus::hit;
  result.entry = std::move(checked.entry);
  if (count == Count::yes) count_hit(result.entry);
  return result;
}

void Cache::count_hit(Entry& entry) {
  int64_t t = now();
  auto& touch = m_pending.touches[entry.info.key];
  touch.first += 1;
  touch.second = std::max(touch.second, t);
  ++m_pending.hits;
  m_pending.saved_ms += static_cast<uint64_t>(std::max<int64_t>(0, entry.info.compile_ms));
  entry.info.hits += 1;
  entry.info.last_used_ms = t;
  maybe_flush_locked();
}

Status Cache::drop(const std::string& key) {
  for (const char* sql : {"DELETE FROM payloads WHERE key = ?", "DELETE FROM fields WHERE key = ?",
                          "DELETE FROM entries WHERE key = ?"}) {
    auto st = m_db->prepare(sql);
    if (!st) return st.error();
    st->bind_text(1, key);
    if (Status s = st->run(); !s) return s;
  }
  return Status::success();
}

void Cache::drop_bad(const std::string& key, const std::string& reason) {
  ++m_pending.errors;
  m_pending.touches.erase(key);
  warn("dropped bad entry " + key + ": " + reason);
  auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
  Status s = txn ? drop(key) : Status(txn.error());
  if (s) s = txn->commit();
  if (!s) note_write_failure(s.error());
}

Status Cache::store(const std::string& key, const std::vector<KeyField>& fields,
                    const Contents& contents) {
  std::lock_guard lock(m_mutex);
  return insert_locked(key, fields, contents);
}

Status Cache::insert_locked(const std::string& key, std::vector<KeyField> fields,
                            const Contents& contents) {
  if (!m_db) return disabled_error();
  sort_fields(fields);
  for (size_t i = 1; i < fields.size(); ++i)
    if (fields[i].name == fields[i - 1].name)
      return make_error("cache: duplicate key field '", fields[i].name, "'");
  StoredEntry entry;
  entry.info.key = key;
  entry.info.summary = contents.summary;
  entry.info.compile_ms = contents.compile_ms;
  entry.info.stored_bytes = contents.summary.size();
  for (const KeyField& f : fields) entry.info.stored_bytes += f.name.size() + f.value.size();
  entry.info.fields = std::move(fields);
  // Compress before taking the write lock, so other processes wait only for the insert.
  for (const Payload& p : contents.payloads) {
    auto encoded = encode(p.bytes);
    if (!encoded) return make_error("cache: storing ", key, ": ", encoded.error().message);
    entry.info.stored_bytes += p.name.size() + encoded->compressed.size();
    entry.info.raw_bytes += encoded->raw_size;
    entry.payloads.push_back({p.name, std::move(*encoded)});
  }
  entry.info.created_ms = entry.info.last_used_ms = now();
  bool over_cap = false;
  Status inserted = [&]() -> Status {
    auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
    if (!txn) return txn.error();
    if (Status s = insert_rows(entry); !s) return s;
    auto total = m_db->query_int("SELECT coalesce(sum(stored_bytes), 0) FROM entries");
    if (!total) return total.error();
    over_cap = m_max_size != 0 && static_cast<uint64_t>(*total) > m_max_size;
    if (m_options.before_commit) m_options.before_commit();
    return txn->commit();
  }();
  if (!inserted) {
    note_write_failure(inserted.error());
    return inserted;
  }
  if (!over_cap) return Status::success();
  auto evicted = evict_locked(m_max_size, key);
  if (!evicted) note_write_failure(evicted.error());
  return Status::success();
}

Status Cache::insert_rows(const StoredEntry& entry) {
  const EntryInfo& info = entry.info;
  if (Status s = drop(info.key); !s) return s;
  auto st = m_db->prepare(
      "INSERT INTO entries(key, summary, compile_ms, stored_bytes, raw_bytes, field_count,"
      " payload_count, created_ms, last_used_ms, hits) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!st) return st.error();
  st->bind_text(1, info.key).bind_text(2, info.summary).bind(3, info.compile_ms);
  st->bind(4, static_cast<int64_t>(info.stored_bytes))
      .bind(5, static_cast<int64_t>(info.raw_bytes));
  st->bind(6, static_cast<int64_t>(info.fields.size()));
  st->bind(7, static_cast<int64_t>(entry.payloads.size()));
  st->bind(8, info.created_ms).bind(9, info.last_used_ms).bind(10, info.hits);
  if (Status s = st->run(); !s) return s;
  for (const KeyField& f : info.fields) {
    auto fs = m_db->prepare("INSERT INTO fields(key, name, value) VALUES(?, ?, ?)");
    if (!fs) return fs.error();
    fs->bind_text(1, info.key).bind_text(2, f.name).bind_blob(3, f.value);
    if (Status s = fs->run(); !s) return s;
  }
  int64_t ord = 0;
  for (const StoredPayload& p : entry.payloads) {
    auto ps = m_db->prepare(
        "INSERT INTO payloads(key, ord, name, raw_size, checksum, data) VALUES(?, ?, ?, ?, ?, ?)");
    if (!ps) return ps.error();
    ps->bind_text(1, info.key).bind(2, ord++).bind_text(3, p.name);
    ps->bind(4, static_cast<int64_t>(p.encoded.raw_size));
    ps->bind(5, static_cast<int64_t>(p.encoded.checksum)).bind_blob(6, p.encoded.compressed);
    if (Status s = ps->run(); !s) return s;
  }
  return Status::success();
}

void Cache::maybe_flush_locked() {
  if (m_pending.touches.size() < k_flush_touches && now() - m_last_flush_ms < k_flush_interval_ms)
    return;
  // On the hit path: never wait for another process's write; try again on a later hit.
  m_db->set_busy_timeout(0);
  Status s = flush_locked();
  if (m_db) m_db->set_busy_timeout(m_options.busy_timeout_ms);
  if (!s && m_db && m_db->last_code() != sql::k_busy) note_write_failure(s.error());
}

Status Cache::flush() {
  std::lock_guard lock(m_mutex);
  return flush_locked();
}

Status Cache::flush_locked() {
  m_last_flush_ms = now();
  if (!m_db || m_pending.empty()) return Status::success();
  auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
  if (!txn) return txn.error();
  for (const auto& [key, touch] : m_pending.touches) {
    auto st = m_db->prepare(
        "UPDATE entries SET hits = hits + ?, last_used_ms = max(last_used_ms, ?) WHERE key = ?");
    if (!st) return st.error();
    st->bind(1, touch.first).bind(2, touch.second).bind_text(3, key);
    if (Status s = st->run(); !s) return s;
  }
  std::pair<const char*, uint64_t> counters[] = {{"hits", m_pending.hits},
                                                 {"misses", m_pending.misses},
                                                 {"errors", m_pending.errors},
                                                 {"time_saved_ms", m_pending.saved_ms}};
  for (const auto& [name, value] : counters) {
    if (value == 0) continue;
    auto st = m_db->prepare(
        "INSERT INTO stats(name, value) VALUES(?, ?)"
        " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value");
    if (!st) return st.error();
    st->bind_text(1, name).bind(2, static_cast<int64_t>(value));
    if (Status s = st->run(); !s) return s;
  }
  // Cleared only once written: a failed flush keeps its counts for the next one.
  if (Status s = txn->commit(); !s) return s;
  m_pending = Pending();
  return Status::success();
}

Expected<Stats> Cache::stats() {
  std::lock_guard lock(m_mutex);
  if (!m_db) return disabled_error();
  if (Status s = flush_locked(); !s) return s.error();
  Stats out;
  auto st = m_db->prepare(
      "SELECT count(*), coalesce(sum(stored_bytes), 0), coalesce(sum(raw_bytes), 0) FROM entries");
  if (!st) return st.error();
  auto row = st->step();
  if (!row) return row.error();
  out.entries = st->column_int64(0);
  out.bytes = st->column_int64(1);
  out.raw_bytes = st->column_int64(2);
  auto counters = m_db->prepare("SELECT name, value FROM stats");
  if (!counters) return counters.error();
  for (;;) {
    auto r = counters->step();
    if (!r) return r.error();
    if (!*r) break;
    std::string name = counters->column_text(0);
    auto value = static_cast<uint64_t>(counters->column_int64(1));
    if (name == "hits")
      out.hits = value;
    else if (name == "misses")
      out.misses = value;
    else if (name == "errors")
      out.errors = value;
    else if (name == "time_saved_ms")
      out.time_saved_ms = value;
    else if (name == "zeroed_ms")
      out.zeroed_ms = static_cast<int64_t>(value);
  }
  return out;
}

Status Cache::zero_stats() {
  std::lock_guard lock(m_mutex);
  if (!m_db) return disabled_error();
  m_pending.hits = m_pending.misses = m_pending.errors = m_pending.saved_ms = 0;
  auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
  if (!txn) return txn.error();
  if (Status s = m_db->exec("DELETE FROM stats"); !s) return s;
  auto st = m_db->prepare("INSERT INTO stats(name, value) VALUES('zeroed_ms', ?)");
  if (!st) return st.error();
  st->bind(1, now());
  if (Status s = st->run(); !s) return s;
  return txn->commit();
}

}  // namespace kiln::cache
