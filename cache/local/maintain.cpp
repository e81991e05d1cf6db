// Whole-cache operations: listing, prefix and field queries, verification, eviction, pruning,
// and moving entries in and out (for bundles).
#include "cache/local/store.h"

#include "cache/key_lock.h"

#include "cache/local/rows.h"
#include "cache/local/sqlite.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <cstdint>
#include <map>

namespace kiln::cache::local {
namespace {

using sql::Transaction;

// Key, size and last-used time of every entry, least recently used first.
struct EntryAge {
  std::string key;
  uint64_t bytes;
  int64_t last_used_ms;
};

Expected<std::vector<EntryAge>> entries_oldest_first(sql::Db& db) {
  auto st = db.prepare(
      "SELECT key, " + bounded_size("stored_bytes") + ", last_used_ms FROM entries"
      " ORDER BY last_used_ms, rowid");
  if (!st) return st.error();
  std::vector<EntryAge> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) return out;
    out.push_back(
        {st->column_text(0), static_cast<uint64_t>(st->column_int64(1)), st->column_int64(2)});
  }
}

}  // namespace

Expected<StoredEntry> prepared_for_store(StoredEntry entry) {
  StoredEntry out = std::move(entry);
  for (StoredPayload& p : out.payloads) {
    Encoding wanted = stored_apart(p.name) ? Encoding::zstd : Encoding::raw;
    if (p.encoded.encoding == wanted) continue;
    auto raw = decode(p.encoded);
    if (!raw) return make_error("payload '", p.name, "': ", raw.error().message);
    auto encoded = encode(*raw, wanted);
    if (!encoded) return encoded.error();
    p.encoded = std::move(*encoded);
  }
  return out;
}

Expected<std::vector<EntryInfo>> Store::list() {
  std::lock_guard lock(m_mutex);
  return recovering([&]() -> Expected<std::vector<EntryInfo>> {
    if (!m_db) return disabled_error();
    if (Status s = merge_before_read(); !s) return s.error();
    return list_locked(nullptr);
  });
}

Expected<std::vector<EntryInfo>> Store::list_where(const KeyField& where) {
  std::lock_guard lock(m_mutex);
  return recovering([&]() -> Expected<std::vector<EntryInfo>> {
    if (!m_db) return disabled_error();
    return list_locked(&where);
  });
}

Expected<bool> Store::has_field(const std::string& name) {
  std::lock_guard lock(m_mutex);
  return recovering([&]() -> Expected<bool> {
    if (!m_db) return disabled_error();
    auto st = m_db->prepare("SELECT 1 FROM fields WHERE name = ?1 LIMIT 1");
    if (!st) return st.error();
    st->bind_text(1, name);
    auto row = st->step();
    if (!row) return row.error();
    return *row;
  });
}

Expected<std::vector<EntryInfo>> Store::list_locked(const KeyField* where) {
  auto txn = Transaction::begin(*m_db, Transaction::Kind::read);
  if (!txn) return txn.error();
  std::vector<EntryInfo> out;
  std::map<std::string, size_t> index;
  // With `where`, the entries come from the fields_by_value index alone (an "?1 IS NULL OR"
  // form would scan both tables).
  {
    const std::string columns = "SELECT key, summary, " + bounded_size("compile_ms") + ", " +
                                bounded_size("stored_bytes") + ", " + bounded_size("raw_bytes") +
                                ", created_ms, last_used_ms, " + bounded_count("hits") +
                                " FROM entries";
    auto st = m_db->prepare(
        where ? columns +
                    " WHERE key IN (SELECT key FROM fields WHERE name = ?1 AND value = ?2)"
                    " ORDER BY last_used_ms DESC, key"
              : columns + " ORDER BY last_used_ms DESC, key");
    if (!st) return st.error();
    if (where) st->bind_text(1, where->name).bind_blob(2, where->value);
    for (;;) {
      auto row = st->step();
      if (!row) return row.error();
      if (!*row) break;
      EntryInfo info;
      info.key = st->column_text(0);
      info.summary = st->column_text(1);
      info.compile_ms = st->column_int64(2);
      info.stored_bytes = st->column_int64(3);
      info.raw_bytes = st->column_int64(4);
      info.created_ms = st->column_int64(5);
      info.last_used_ms = st->column_int64(6);
      info.hits = st->column_int64(7);
      index[info.key] = out.size();
      out.push_back(std::move(info));
    }
  }
  auto st = m_db->prepare(
      where ? "SELECT key, name, value FROM fields"
              " WHERE key IN (SELECT key FROM fields WHERE name = ?1 AND value = ?2)"
              " ORDER BY key, name"
            : "SELECT key, name, value FROM fields ORDER BY key, name");
  if (!st) return st.error();
  if (where) st->bind_text(1, where->name).bind_blob(2, where->value);
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) break;
    auto it = index.find(st->column_text(0));
    if (it != index.end())
      out[it->second].fields.push_back({st->column_text(1), st->column_blob(2)});
  }
  if (Status s = txn->commit(); !s) return s.error();
  return out;
}

Expected<std::vector<std::string>> Store::keys_with_prefix(const std::string& prefix, int limit) {
  std::lock_guard lock(m_mutex);
  return recovering([&]() -> Expected<std::vector<std::string>> {
    if (!m_db) return disabled_error();
    // Keys are lower-case hex, so a range scan on the primary key finds the prefix.
    auto st =
        m_db->prepare("SELECT key FROM entries WHERE key >= ? AND key < ? ORDER BY key LIMIT ?");
    if (!st) return st.error();
    st->bind_text(1, prefix).bind_text(2, prefix + "\x7f").bind(3, limit);
    std::vector<std::string> out;
    for (;;) {
      auto row = st->step();
      if (!row) return row.error();
      if (!*row) return out;
      out.push_back(st->column_text(0));
    }
  });
}

Expected<std::vector<Nearest>> Store::nearest(const std::vector<KeyField>& request,
                                              const std::string& anchor) {
  KeyField where{anchor, ""};
  for (const KeyField& f : request)
    if (f.name == anchor) where.value = f.value;
  std::lock_guard lock(m_mutex);
  return recovering([&]() -> Expected<std::vector<Nearest>> {
    if (!m_db) return disabled_error();
    if (Status s = merge_before_read(); !s) return s.error();
    auto matching = list_locked(&where);  // through the fields_by_value index
    if (!matching) return matching.error();
    std::vector<Nearest> out;
    for (EntryInfo& info : *matching) {
      Nearest n;
      n.diffs = diff_fields(request, info.fields);
      n.info = std::move(info);
      out.push_back(std::move(n));
    }
    std::stable_sort(out.begin(), out.end(), [](const Nearest& a, const Nearest& b) {
      return a.diffs.size() < b.diffs.size();
    });
    return out;
  });
}

Expected<VerifyReport> Store::verify(Fix fix, const EntryCheck& check) {
  std::lock_guard lock(m_mutex);
  if (!m_db) return disabled_error();
  // SQLite's own check first: damage to its pages or indexes that no entry's checksum sees.
  VerifyReport report;
  forget_last_code();
  auto problems = m_db->integrity_problems();
  // The check failing to run (busy, out of memory) is an error; only damage it reports, or
  // SQLite calling the file malformed, makes the database malformed.
  if (!problems && !sql::is_malformed_code(m_db->last_code())) return problems.error();
  if (!problems || !problems->empty()) {
    std::string what = problems ? problems->front() : problems.error().message;
    size_t more = problems ? problems->size() - 1 : 0;
    report.database = "the database is malformed (SQLite: " + what +
                      (more ? "; " + std::to_string(more) + " more" : "") + ")";
    if (fix == Fix::no) return report;
    // Its entries cannot be trusted to be all there: the database is moved aside and a new
    // one started (they are a cache; the old file is kept beside it).
    if (Status s = replace_malformed_db(); !s) return s.error();
    report.removed = true;
    return report;
  }
  if (Status s = merge_before_read(); !s) return s.error();
  auto ages = entries_oldest_first(*m_db);
  if (!ages) return ages.error();
  std::vector<RecordMark> marks;  // of report.bad's records, to drop only those
  for (const EntryAge& v : *ages) {
    // The record and the rows beside it from one snapshot: an entry another process replaces
    // meanwhile is never compared with its successor's rows.
    auto snapshot = Transaction::begin(*m_db, Transaction::Kind::read);
    if (!snapshot) return snapshot.error();
    Checked checked = read_checked(v.key, PayloadSelection(), Keep::entry);
    if (checked.kind == Checked::Kind::failure) return make_error(checked.reason);
    if (checked.kind == Checked::Kind::absent) continue;  // removed meanwhile
    ++report.checked;
    if (checked.kind == Checked::Kind::bad) {
      report.bad.push_back({v.key, checked.reason});
      marks.push_back(std::move(checked.mark));
      continue;
    }
    auto disagreement = index_disagreement(*m_db, checked.entry);
    if (!disagreement) return disagreement.error();
    if (Status s = snapshot->commit(); !s) return s.error();
    std::string why = std::move(*disagreement);
    if (why.empty() && check) why = check(std::move(checked.entry));
    if (!why.empty()) {
      report.bad.push_back({v.key, std::move(why)});
      marks.push_back(std::move(checked.mark));
    }
  }
  if (fix == Fix::no || report.bad.empty()) return report;
  // Only the records found bad: one that another process replaced (or removed) since it was
  // checked is left to it, unchecked here.
  auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
  if (!txn) return txn.error();
  for (size_t i = 0; i < report.bad.size(); ++i) {
    auto dropped = drop_if_same(report.bad[i].key, marks[i]);
    if (!dropped) return dropped.error();
    report.bad[i].replaced = *dropped == Dropped::replaced;
    report.removed = report.removed || !report.bad[i].replaced;  // gone: removed meanwhile
  }
  if (Status s = txn->commit(); !s) return s.error();
  count_locked(Counter::errors, report.bad.size());
  settle_locked(0, Checkpoint::yes);
  return report;
}

Expected<PruneReport> Store::evict_locked(uint64_t cap, const std::string& keep) {
  if (Status s = flush_locked(); !s) return s.error();
  auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
  if (!txn) return txn.error();
  auto total = m_db->query_int(total_stored_sql());
  if (!total) return total.error();
  PruneReport report;
  auto bytes = static_cast<uint64_t>(*total);
  // The cap counts the entries' pages too (what the files hold once free pages are given back),
  // so each drop is measured again.
  auto counted = counted_bytes_locked(bytes);
  if (!counted) return counted.error();
  if (*counted > cap) {
    auto ages = entries_oldest_first(*m_db);
    if (!ages) return ages.error();
    for (const EntryAge& v : *ages) {
      if (*counted <= cap) break;
      if (v.key == keep) continue;
      if (Status s = drop(v.key); !s) return s.error();
      bytes -= std::min(bytes, v.bytes);
      ++report.removed;
      report.freed_bytes += v.bytes;
      counted = counted_bytes_locked(bytes);
      if (!counted) return counted.error();
    }
  }
  if (Status s = txn->commit(); !s) return s.error();
  return report;
}

Expected<PruneReport> Store::prune(std::optional<uint64_t> max_size,
                                   std::optional<uint64_t> older_than_s) {
  std::lock_guard lock(m_mutex);
  uint64_t before = disk_files().total();
  auto report = recovering([&]() -> Expected<PruneReport> {
    return prune_locked(max_size, older_than_s);
  });
  if (!report && m_db && m_db->last_code() == sql::k_full)
    return make_error(report.error().message,
                      " (SQLite needs room on the disk to remove entries one by one; `kiln "
                      "clear` removes the database instead, which frees the space kiln holds)");
  if (!report) return report;
  report->disk_bytes_before = before;
  report->disk_bytes_after = disk_files().total();
  return report;
}

void Store::sweep_locks_locked() {
  const std::string locks = m_dir + "/locks";
  std::error_code ec;
  std::filesystem::directory_iterator it(locks, ec), end;
  std::vector<std::string> keys;
  for (; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() <= 5 || name.size() > 133 || name.compare(name.size() - 5, 5, ".lock") != 0)
      continue;
    std::string key = name.substr(0, name.size() - 5);
    if (std::all_of(key.begin(), key.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
        }))
      keys.push_back(std::move(key));
  }
  for (const std::string& key : keys) {
    KeyLock lock;
    std::string error;
    if (lock.acquire(locks, key, std::chrono::milliseconds(0), error) == KeyLock::Result::acquired)
      lock.release();  // unlinks it, as a holder's release does
  }
}

Expected<PruneReport> Store::prune_locked(std::optional<uint64_t> max_size,
                                          std::optional<uint64_t> older_than_s) {
  if (!m_db) return disabled_error();
  if (Status s = flush_locked(); !s) return s.error();
  PruneReport report;
  if (older_than_s) {
    int64_t cutoff =
        now() - static_cast<int64_t>(std::min<uint64_t>(*older_than_s, INT64_MAX / 1000) * 1000);
    auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
    if (!txn) return txn.error();
    auto ages = entries_oldest_first(*m_db);
    if (!ages) return ages.error();
    for (const EntryAge& v : *ages) {
      if (v.last_used_ms >= cutoff) break;
      if (Status s = drop(v.key); !s) return s.error();
      ++report.removed;
      report.freed_bytes += v.bytes;
    }
    if (Status s = txn->commit(); !s) return s.error();
  }
  if (max_size) {
    auto evicted = evict_locked(*max_size, "");
    if (!evicted) return evicted.error();
    report.removed += evicted->removed;
    report.freed_bytes += evicted->freed_bytes;
  }
  // What was freed goes back to the file system, and the WAL that holds the moves is emptied.
  give_back_locked(GiveBack::all);
  checkpoint_locked(Wait::yes);
  sweep_locks_locked();
  return report;
}

Expected<PruneReport> Store::clear() {
  std::lock_guard lock(m_mutex);
  if (!m_db) return disabled_error();
  uint64_t before = disk_files().total();
  forget_last_code();
  auto report = prune_locked(0, std::nullopt);  // gives every page back
  if (!report) {
    // A malformed database, which cannot be cleared row by row, is moved aside and a new, empty
    // one started; on a full disk, where SQLite has no room to log the removals, the database is
    // removed and a new one started: clearing always works, and frees the space kiln holds.
    // Any other failure (busy, a read-only folder) is reported.
    if (!m_db) return report;
    int code = m_db->last_code();
    bool full = code == sql::k_full;
    if (!sql::is_malformed_code(code) && !full) return report;
    if (Status s = replace_malformed_db(full ? Replace::remove : Replace::move_aside); !s)
      return s.error();
    remove_moved_aside();  // clearing means the old entries go too
    sweep_locks_locked();
    PruneReport replaced;
    replaced.replaced_database = true;
    replaced.disk_full = full;
    report = replaced;
  }
  report->disk_bytes_before = before;
  report->disk_bytes_after = disk_files().total();
  return report;
}

Expected<std::vector<StoredEntry>> Store::export_entries() {
  std::vector<StoredEntry> out;
  auto taken = export_to([&](const StoredEntry& e) {
    out.push_back(e);
    return Status::success();
  });
  if (!taken) return taken.error();
  return out;
}

Expected<uint64_t> Store::export_to(const std::function<Status(const StoredEntry&)>& take) {
  std::lock_guard lock(m_mutex);
  // A failure of `take` (the bundle's file) is not the database's: it is not for recovering()
  // to judge.
  std::optional<Error> taking;
  auto result = recovering([&]() -> Expected<uint64_t> {
    if (!m_db) return disabled_error();
    if (Status s = merge_before_read(); !s) return s.error();
    auto ages = entries_oldest_first(*m_db);
    if (!ages) return ages.error();
    uint64_t count = 0;
    for (const EntryAge& v : *ages) {
      Checked checked = read_checked(v.key, PayloadSelection());
      if (checked.kind == Checked::Kind::failure) return make_error(checked.reason);
      if (checked.kind == Checked::Kind::bad)
        warn("not exporting bad entry " + v.key + ": " + checked.reason);
      if (checked.kind != Checked::Kind::good) continue;
      if (Status s = take(checked.stored); !s) {
        taking = s.error();
        return count;
      }
      ++count;
    }
    return count;
  });
  if (taking) return *taking;
  return result;
}

Expected<ImportReport> Store::import_entries(const std::vector<StoredEntry>& entries) {
  size_t at = 0;
  return import_from([&]() -> Expected<std::optional<StoredEntry>> {
    if (at == entries.size()) return std::optional<StoredEntry>();
    return std::optional<StoredEntry>(entries[at++]);
  });
}

Expected<ImportReport> Store::import_from(const EntrySource& next) {
  {
    std::lock_guard lock(m_mutex);
    if (!m_db) return disabled_error();
  }
  ImportReport report;
  // In batches of a few MiB of raw payload bytes, each stored in one transaction followed by
  // eviction to the cap, giving back and emptying the WAL: entries that a bundle holds
  // compressed may take a thousand times their size here, and one transaction for all of them
  // would take it all on disk (twice, with the WAL) before evicting anything. A batch is read
  // from `next` (the bundle's file, decoding, checks) before its transaction begins, outside the
  // store's lock: other writers and readers wait for the inserts alone.
  uint64_t batch_limit = k_import_batch_bytes;
  if (m_max_size != 0) batch_limit = std::max<uint64_t>(1, std::min(batch_limit, m_max_size / 4));
  auto raw_of = [](const StoredEntry& e) {
    uint64_t raw = 0;
    for (const StoredPayload& p : e.payloads) raw += p.encoded.raw_size;
    return raw;
  };
  std::optional<StoredEntry> pending;  // the entry that would have taken a batch past the limit
  for (bool more = true; more || pending;) {
    std::vector<StoredEntry> batch;
    uint64_t raw = 0;
    if (pending) {
      raw = raw_of(*pending);
      batch.push_back(std::move(*pending));
      pending.reset();
    }
    while (more && raw < batch_limit) {
      auto got = next();
      if (!got || !*got) {
        if (!got) report.stopped = got.error().message;
        more = false;
        break;
      }
      uint64_t size = raw_of(**got);
      if (!batch.empty() && raw + size > batch_limit) {  // in the next batch, alone if large
        pending = std::move(**got);
        break;
      }
      raw += size;
      batch.push_back(std::move(**got));
    }
    if (batch.empty()) break;
    std::lock_guard lock(m_mutex);
    Status stored = recovering([&]() -> Status {
      if (!m_db) return disabled_error();
      uint64_t written = 0;
      ImportReport counted;  // this batch's, added to the report once committed
      {
        auto txn = Transaction::begin(*m_db, Transaction::Kind::write);
        if (!txn) return txn.error();
        for (StoredEntry& entry : batch) {
          auto present = has_entry(*m_db, entry.info.key);
          if (!present) return present.error();
          if (*present) {
            ++counted.already_present;
            continue;
          }
          std::string key = entry.info.key;
          auto fresh = prepared_for_store(std::move(entry));
          if (!fresh) return fresh.error();
          fresh->info.hits = 0;
          fresh->info.last_used_ms = now();
          auto inserted = insert_rows_within(*m_db, *fresh, m_max_size);
          if (!inserted) return inserted.error();
          if (!*inserted) {
            warn("not importing entry " + key + ": its " +
                 std::to_string(fresh->info.stored_bytes) +
                 " bytes are more than the size cap of " + std::to_string(m_max_size));
            ++counted.too_large;
            continue;
          }
          written += fresh->info.stored_bytes;
          ++counted.imported;
        }
        if (Status s = txn->commit(); !s) return s.error();
      }
      report.imported += counted.imported;
      report.already_present += counted.already_present;
      report.too_large += counted.too_large;
      if (written == 0) return Status::success();
      if (m_max_size != 0) {
        auto evicted = evict_locked(m_max_size, "");
        if (!evicted) return evicted.error();
        report.evicted += evicted->removed;
      }
      settle_locked(written, Checkpoint::yes);
      return Status::success();
    });
    if (!stored) {
      // What earlier batches committed stays imported: said, not lost with the error.
      if (report.imported == 0 && report.already_present == 0) return stored.error();
      report.stopped = stored.error().message +
                       (report.stopped.empty() ? "" : " (after: " + report.stopped + ")");
      return report;
    }
  }
  return report;
}

}  // namespace kiln::cache::local
