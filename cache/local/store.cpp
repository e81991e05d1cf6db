// Lookups, inserts and recorded use of the local store.
#include "cache/local/store.h"

#include "cache/entry_codec.h"
#include "cache/local/rows.h"
#include "cache/local/sqlite.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace kiln::cache::local {
namespace {

using sql::Transaction;

bool disables_cache(int code) {
  return code == sql::k_readonly || code == sql::k_full || code == sql::k_ioerr ||
         code == sql::k_cantopen;
}

}  // namespace

void Store::note_write_failure(const Error& error) {
  m_pending[static_cast<int>(Counter::errors)] += 1;
  if (m_db && disables_cache(m_db->last_code())) return disable("writing failed: " + error.message);
  warn(error.message);
}

Error Store::disabled_error() const { return make_error("cache: disabled: ", m_disabled_reason); }

// True when a read of `want` may need payloads kept apart (and so a second statement).
static bool may_want_apart(const PayloadSelection& want) {
  if (want.all) return true;
  for (const std::string& n : want.names)
    if (stored_apart(n)) return true;
  for (const std::string& p : want.prefixes)
    if (stored_apart(p) || std::string(k_payload_ptx_prefix).compare(0, p.size(), p) == 0)
      return true;
  return false;
}

Store::Checked Store::read_checked(const std::string& key, const PayloadSelection& want,
                                   Keep keep, const std::vector<KeyField>* request_fields) {
  Checked out;
  auto failure = [&](const Error& e) {
    out.kind = Checked::Kind::failure;
    out.reason = e.message;
    return std::move(out);
  };
  auto bad = [&](const std::string& why) {
    out.kind = Checked::Kind::bad;
    out.reason = why;
    return std::move(out);
  };
  // The hit path reads one row with one statement; a read that also wants PTX, source or log
  // reads their rows in the same snapshot.
  std::optional<Transaction> txn;
  if (may_want_apart(want) && !m_db->in_transaction()) {
    auto begun = Transaction::begin(*m_db, Transaction::Kind::read);
    if (!begun) return failure(begun.error());
    txn.emplace(std::move(*begun));
  }
  {
    static const std::string k_sql = "SELECT record, last_used_ms, " + bounded_count("hits") +
                                     ", " + bounded_size("stored_bytes") +
                                     " FROM entries WHERE key = ?";
    auto st = m_db->prepare(k_sql);
    if (!st) return failure(st.error());
    st->bind_text(1, key);
    auto row = st->step();
    if (!row) return failure(row.error());
    if (!*row) return out;
    std::string_view record = st->column_blob_view(0);
    out.mark.size = static_cast<int64_t>(record.size());
    out.mark.tail = record.substr(record.size() > 8 ? record.size() - 8 : 0);
    auto decoded = decode_entry(record);
    if (!decoded) return bad(decoded.error().message);
    out.stored = std::move(*decoded);
    out.stored.info.last_used_ms = st->column_int64(1);
    out.stored.info.hits = st->column_int64(2);
    out.stored.info.stored_bytes = static_cast<uint64_t>(st->column_int64(3));
  }
  if (out.stored.info.key != key) return bad("the record belongs to key " + out.stored.info.key);
  if (request_fields && !same_fields(*request_fields, out.stored.info.fields))
    return bad("stored key fields differ from the request");
  // Payloads the caller does not want are not decoded (their bytes still count to the record's
  // checksum, which held); wanted ones kept apart are read now, checked against the record.
  for (StoredPayload& p : out.stored.payloads) {
    if (p.apart && want.wants(p.name)) {
      auto st = m_db->prepare("SELECT data FROM apart WHERE key = ? AND name = ?");
      if (!st) return failure(st.error());
      st->bind_text(1, key).bind_text(2, p.name);
      auto row = st->step();
      if (!row) return failure(row.error());
      if (!*row) return bad("payload '" + p.name + "' is missing");
      p.encoded.data = st->column_blob(0);
      p.apart = false;
    }
  }
  if (txn) {
    if (Status s = txn->commit(); !s) return failure(s.error());
  }
  // Native code is checked against its own checksum even here: the process links and runs it,
  // so a record rewritten with a matching record checksum must not reach the linker. These
  // payloads are small (FORMAT.md, "Reading an entry").
  for (StoredPayload& p : out.stored.payloads)
    if (is_native_payload(p.name)) p.covered = false;
  auto entry = keep == Keep::entry
                   ? verify_stored(std::move(out.stored), want,
                                   request_fields ? KeyCheck::matches_request : KeyCheck::rehash)
                   : verify_stored(out.stored, want);
  if (!entry) return bad(entry.error().message);
  out.kind = Checked::Kind::good;
  out.entry = std::move(*entry);
  return out;
}

Lookup Store::lookup(const std::string& key, const std::vector<KeyField>* fields, Count count,
                     const PayloadSelection& want) {
  std::lock_guard lock(m_mutex);
  Lookup result;
  if (!m_db) {
    result.status = LookupStatus::failure;
    result.failure = "the cache is disabled: " + m_disabled_reason;
    return result;
  }
  forget_last_code();
  Checked checked = read_checked(key, want, Keep::entry, fields);
  if (checked.kind == Checked::Kind::failure && recover_if_malformed_locked()) {
    // The database was malformed: moved aside, and this key is a miss in the new one.
    count_locked(Counter::errors);
    if (count == Count::yes) count_locked(Counter::misses);
    result.status = LookupStatus::miss;
    return result;
  }
  if (checked.kind == Checked::Kind::failure) {
    if (m_usage) m_usage->add(Counter::errors, 1);
    result.status = LookupStatus::failure;
    result.failure = checked.reason;
    return result;
  }
  if (checked.kind != Checked::Kind::good) {
    if (checked.kind == Checked::Kind::bad) drop_bad(key, checked.mark, checked.reason);
    if (count == Count::yes) count_locked(Counter::misses);
    result.status = LookupStatus::miss;
    return result;
  }
  result.status = LookupStatus::hit;
  result.entry = std::move(checked.entry);
  if (count == Count::yes) count_hit_locked(result.entry);
  return result;
}

void Store::count(Counter counter, uint64_t value) {
  std::lock_guard lock(m_mutex);
  count_locked(counter, value);
}

void Store::count_locked(Counter counter, uint64_t value) {
  if (m_usage && m_usage->mapped()) return m_usage->add(counter, value);
  m_pending[static_cast<int>(counter)] += value;
}

void Store::record_hit(Entry& entry) {
  std::lock_guard lock(m_mutex);
  count_hit_locked(entry);
}

void Store::count_hit_locked(Entry& entry) {
  int64_t t = now();
  auto saved = static_cast<uint64_t>(std::max<int64_t>(0, entry.info.compile_ms));
  count_locked(Counter::hits);
  count_locked(Counter::time_saved_ms, saved);
  entry.info.hits += 1;
  entry.info.last_used_ms = t;
  // Recorded in shared memory: no write, no fsync, no lock (FORMAT.md, "Usage file").
  if (m_usage && m_usage->touch(entry.info.key, t)) return;
  auto& touch = m_pending_touches[entry.info.key];
  touch.first += 1;
  touch.second = std::max(touch.second, t);
}

Status Store::drop(const std::string& key) { return drop_rows(*m_db, key); }

Expected<Store::Dropped> Store::drop_if_same(const std::string& key, const RecordMark& mark) {
  {
    // As a blob: a record stored as text (damage to its type) is measured in bytes too.
    auto st = m_db->prepare(
        "SELECT length(CAST(record AS BLOB)), substr(CAST(record AS BLOB), -8) FROM entries"
        " WHERE key = ?");
    if (!st) return st.error();
    st->bind_text(1, key);
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) return Dropped::gone;
    if (st->column_int64(0) != mark.size || st->column_blob_view(1) != mark.tail)
      return Dropped::replaced;
  }
  if (Status s = drop(key); !s) return s.error();
  return Dropped::yes;
}

void Store::drop_bad(const std::string& key, const RecordMark& mark, const std::string& reason) {
  count_locked(Counter::errors);
  Expected<Dropped> dropped = Dropped::gone;
  {
    auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
    dropped = txn ? drop_if_same(key, mark) : Expected<Dropped>(txn.error());
    if (dropped) {
      if (Status s = txn->commit(); !s) dropped = s.error();
    }
  }  // rolled back here unless committed: before a failure's report may close the database
  if (!dropped) return note_write_failure(dropped.error());
  // Replaced since it was read (another process compiled it again: not this record), or dropped
  // by another process that read it too and said so.
  if (*dropped != Dropped::yes) return;
  m_pending_touches.erase(key);
  warn("dropped bad entry " + key + ": " + reason);
}

Expected<StoredEntry> Store::encode_contents(const std::string& key, std::vector<KeyField> fields,
                                             const Contents& contents) const {
  sort_fields(fields);
  for (size_t i = 1; i < fields.size(); ++i)
    if (fields[i].name == fields[i - 1].name)
      return make_error("cache: duplicate key field '", fields[i].name, "'");
  // Every stored entry's fields hash to its key, so that a lookup finding them equal to the
  // request's need not hash them again.
  if (make_key(fields) != key)
    return make_error("cache: key ", key, " is not the hash of its fields");
  StoredEntry entry;
  entry.info.key = key;
  entry.info.summary = contents.summary;
  entry.info.compile_ms = contents.compile_ms;
  entry.info.fields = std::move(fields);
  for (const Payload& p : contents.payloads) {
    // Read on every hit: raw (FORMAT.md, "Payload encodings"); the rest compressed.
    auto encoded = encode(p.bytes, stored_apart(p.name) ? Encoding::zstd : Encoding::raw);
    if (!encoded) return make_error("cache: storing ", key, ": ", encoded.error().message);
    entry.info.raw_bytes += encoded->raw_size;
    entry.payloads.push_back({p.name, std::move(*encoded), false});
  }
  if (std::string twice = repeated_payload(entry.payloads); !twice.empty())
    return make_error("cache: storing ", key, ": payload '", twice, "' appears twice");
  entry.info.created_ms = entry.info.last_used_ms = now();
  return entry;
}

Status Store::insert(StoredEntry entry, Checkpoint checkpoint, IfPresent if_present) {
  std::lock_guard lock(m_mutex);
  return insert_locked(std::move(entry), checkpoint, if_present);
}

Status Store::insert_locked(StoredEntry entry, Checkpoint checkpoint, IfPresent if_present) {
  if (!m_db) return disabled_error();
  forget_last_code();
  bool over_cap = false;
  bool kept = false;
  bool too_large = false;
  auto attempt = [&]() -> Status {
    auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
    if (!txn) return txn.error();
    if (if_present == IfPresent::keep) {
      // Checked under the write lock: another process may have stored this key meanwhile.
      auto present = has_entry(*m_db, entry.info.key);
      if (!present) return present.error();
      if (*present) {
        kept = true;
        return Status::success();  // the transaction rolls back: nothing written
      }
    }
    // An entry larger than the cap would hold the files past it on its own: not stored.
    auto inserted = insert_rows_within(*m_db, entry, m_max_size);
    if (!inserted) return inserted.error();
    if (!*inserted) {
      too_large = true;
      return Status::success();  // nothing written
    }
    if (m_max_size != 0) {
      auto total = m_db->query_int(total_stored_sql());
      if (!total) return total.error();
      auto counted = counted_bytes_locked(static_cast<uint64_t>(*total));
      if (!counted) return counted.error();
      over_cap = *counted > m_max_size;
    }
    if (m_options.before_commit) m_options.before_commit();
    return txn->commit();
  };
  Status inserted = attempt();
  // A malformed database is moved aside; the entry goes into the new one.
  if (!inserted && recover_if_malformed_locked()) inserted = attempt();
  if (!inserted) {
    note_write_failure(inserted.error());
    return inserted;
  }
  if (kept) return Status::success();
  if (too_large) {
    Error error = make_error("not storing entry ", entry.info.key, ": its ",
                             std::to_string(entry.info.stored_bytes),
                             " bytes are more than the size cap of ", std::to_string(m_max_size));
    warn(error.message);
    return error;
  }
  if (over_cap) {
    auto evicted = evict_locked(m_max_size, entry.info.key);
    if (!evicted) note_write_failure(evicted.error());
  }
  settle_locked(entry.info.stored_bytes, checkpoint);
  return Status::success();
}

bool Store::contains(const std::string& key) {
  std::lock_guard lock(m_mutex);
  if (!m_db) return false;
  auto present = has_entry(*m_db, key);
  return present && *present;
}

Expected<std::optional<StoredEntry>> Store::read_full(const std::string& key) {
  std::lock_guard lock(m_mutex);
  return recovering([&]() -> Expected<std::optional<StoredEntry>> {
    if (!m_db) return disabled_error();
    auto txn = Transaction::begin(*m_db, Transaction::Kind::read);
    if (!txn) return txn.error();
    Checked checked = read_checked(key, PayloadSelection());
    if (checked.kind == Checked::Kind::failure) return make_error(checked.reason);
    if (checked.kind == Checked::Kind::bad)
      return make_error("bad entry ", key, ": ", checked.reason);
    if (checked.kind == Checked::Kind::absent) return std::optional<StoredEntry>();
    return std::optional<StoredEntry>(std::move(checked.stored));
  });
}

Status Store::flush() {
  std::lock_guard lock(m_mutex);
  return recovering([&] { return flush_locked(); });
}

Status Store::flush_locked() {
  if (!m_db) return Status::success();
  uint64_t counters[k_counter_count] = {};
  std::vector<Touch> touches;
  if (m_usage) m_usage->take(counters, touches);
  auto give_back = [&] {
    if (m_usage && m_usage->mapped()) return m_usage->put_back(counters, touches);
    for (int i = 0; i < k_counter_count; ++i) m_pending[i] += counters[i];
  };
  for (int i = 0; i < k_counter_count; ++i) counters[i] += std::exchange(m_pending[i], 0);
  for (const auto& [key, touch] : m_pending_touches)
    touches.push_back({key, touch.first, touch.second});
  bool any = !touches.empty();
  for (uint64_t v : counters) any = any || v != 0;
  if (!any) return Status::success();
  Status written = [&]() -> Status {
    auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
    if (!txn) return txn.error();
    for (const Touch& t : touches) {
      // A key or the first 16 hex digits of one (from the usage file): a range on the key.
      static const std::string k_sql = "UPDATE entries SET hits = " + bounded_count("hits") +
                                       " + ?, last_used_ms = max(last_used_ms, ?)"
                                       " WHERE key >= ? AND key < ?";
      auto st = m_db->prepare(k_sql);
      if (!st) return st.error();
      st->bind(1, static_cast<int64_t>(std::min<uint64_t>(t.hits, uint64_t{1} << 62))).bind(2, t.last_used_ms);
      st->bind_text(3, t.key_prefix).bind_text(4, t.key_prefix + "\x7f");
      if (Status s = st->run(); !s) return s;
    }
    for (int i = 0; i < k_counter_count; ++i) {
      if (counters[i] == 0) continue;
      static const std::string k_sql = "INSERT INTO stats(name, value) VALUES(?, ?)"
                                       " ON CONFLICT(name) DO UPDATE SET value = " +
                                       bounded_count("value") + " + excluded.value";
      auto st = m_db->prepare(k_sql);
      if (!st) return st.error();
      st->bind_text(1, counter_name(static_cast<Counter>(i)))
          .bind(2, static_cast<int64_t>(std::min<uint64_t>(counters[i], uint64_t{1} << 62)));
      if (Status s = st->run(); !s) return s;
    }
    return txn->commit();
  }();
  if (written) {
    m_pending_touches.clear();
    return written;
  }
  // Kept for the next merge.
  m_pending_touches.clear();
  give_back();
  for (const Touch& t : touches)
    if (t.key_prefix.size() > 16) m_pending_touches[t.key_prefix] = {t.hits, t.last_used_ms};
  return written;
}

Status Store::merge_before_read() {
  Status merged = flush_locked();
  if (merged || !m_db || sql::is_malformed_code(m_db->last_code())) return merged;
  if (!std::exchange(m_merge_warned, true))
    warn("could not record the uses since the last write (" + merged.error().message +
         "); going on without them, which a later write records");
  return Status::success();
}

Expected<Stats> Store::stats() {
  std::lock_guard lock(m_mutex);
  return recovering([&]() -> Expected<Stats> {
    if (!m_db) return disabled_error();
    if (Status s = merge_before_read(); !s) return s.error();
    Stats out;
    auto st = m_db->prepare(
        "SELECT count(*), coalesce(sum(" + bounded_size("stored_bytes") + "), 0), coalesce(sum(" +
        bounded_size("raw_bytes") + "), 0) FROM entries");
    if (!st) return st.error();
    auto row = st->step();
    if (!row) return row.error();
    out.entries = st->column_int64(0);
    out.bytes = st->column_int64(1);
    out.raw_bytes = st->column_int64(2);
    auto space = space_locked();
    if (!space) return space.error();
    out.free_bytes = space->free_pages * space->page_size;
    DiskFiles files = disk_files();
    out.database_file_bytes = files.database;
    out.wal_file_bytes = files.wal;
    auto counters = m_db->prepare("SELECT name, " + bounded_count("value") + " FROM stats");
    if (!counters) return counters.error();
    uint64_t* slots[k_counter_count] = {&out.hits,          &out.misses,        &out.errors,
                                        &out.time_saved_ms, &out.remote_hits,   &out.remote_misses,
                                        &out.remote_errors, &out.remote_rejected, &out.remote_puts};
    for (;;) {
      auto r = counters->step();
      if (!r) return r.error();
      if (!*r) break;
      std::string name = counters->column_text(0);
      auto value = static_cast<uint64_t>(counters->column_int64(1));
      if (name == "zeroed_ms") out.zeroed_ms = static_cast<int64_t>(value);
      for (int i = 0; i < k_counter_count; ++i)
        if (name == counter_name(static_cast<Counter>(i))) *slots[i] = value;
    }
    return out;
  });
}

Status Store::zero_stats() {
  std::lock_guard lock(m_mutex);
  return recovering([&]() -> Status {
    if (!m_db) return disabled_error();
    if (Status s = flush_locked(); !s) return s;
    auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
    if (!txn) return txn.error();
    if (Status s = m_db->exec("DELETE FROM stats"); !s) return s;
    auto st = m_db->prepare("INSERT INTO stats(name, value) VALUES('zeroed_ms', ?)");
    if (!st) return st.error();
    st->bind(1, now());
    if (Status s = st->run(); !s) return s;
    return txn->commit();
  });
}

}  // namespace kiln::cache::local
