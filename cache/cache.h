// The kernel cache: one SQLite database of opaque, checksummed entries, shared by processes.
//
// A miss is not an error: lookup answers hit, miss, or a failure. Faults degrade: when the cache
// directory cannot be written or the disk fills up, the cache warns once and turns itself off
// (enabled() is false) and callers go on without it. Entry and database formats: FORMAT.md.
#pragma once

#include "cache/entry.h"
#include "cache/key.h"
#include "support/expected.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cache {

namespace sql {
class Db;
}

inline constexpr uint64_t k_default_max_size = uint64_t{2} << 30;  // 2 GiB

struct Options {
  std::string dir;  // --cache-dir; empty: $KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln, ~/.cache/kiln
  std::optional<uint64_t> max_size;  // size cap; unset: $KILN_CACHE_MAX_SIZE or 2 GiB; 0: no cap
  std::chrono::milliseconds lock_wait{30000};  // longest wait for another process's producer
  int busy_timeout_ms = 10000;                 // SQLite busy timeout
  // Receives warnings (one line, no prefix); default: "kiln: cache: <message>" on stderr.
  std::function<void(const std::string&)> warn;
  // Unix time in milliseconds; default: the system clock. Tests pin it.
  std::function<int64_t()> now_ms;
  // Runs inside an insert's write transaction just before it commits. Tests use it to kill a
  // process in the middle of a write.
  std::function<void()> before_commit;
};

// The directory the cache would use for `dir` (see Options::dir); "" when none can be found.
std::string resolve_cache_dir(const std::string& dir);

enum class LookupStatus { hit, miss, failure };

struct Lookup {
  LookupStatus status = LookupStatus::miss;
  Entry entry;          // valid on a hit
  std::string failure;  // why, on a failure
  bool hit() const { return status == LookupStatus::hit; }
};

enum class FetchSource {
  hit,               // read from the cache (possibly after waiting for another process)
  produced,          // produced here and stored
  produced_uncached  // produced here; the cache is off or the store failed
};

struct Fetched {
  FetchSource source = FetchSource::produced_uncached;
  Entry entry;
};

using Producer = std::function<Expected<Contents>()>;

struct Stats {
  uint64_t entries = 0;
  uint64_t bytes = 0;      // stored bytes (what the cap counts)
  uint64_t raw_bytes = 0;  // uncompressed payload bytes
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t errors = 0;         // bad entries dropped, failed reads and writes
  uint64_t time_saved_ms = 0;  // sum of compile_ms over served hits
  int64_t zeroed_ms = 0;       // when the counters were last zeroed (0: never)
};

struct BadEntry {
  std::string key;
  std::string reason;
};

struct VerifyReport {
  uint64_t checked = 0;
  std::vector<BadEntry> bad;
  bool removed = false;  // the bad entries were dropped
};

struct PruneReport {
  uint64_t removed = 0;
  uint64_t freed_bytes = 0;
};

struct ImportReport {
  uint64_t imported = 0;
  uint64_t already_present = 0;
};

// An entry sharing one field value with a request, and how its other fields differ.
struct Nearest {
  EntryInfo info;
  std::vector<FieldDiff> diffs;
};

enum class Fix { no, yes };

// One cache database. Safe to share between threads (calls are serialised) and, through SQLite
// and per-key lock files, between processes.
class Cache {
public:
  // Never fails: a cache that cannot be opened comes back disabled, after one warning.
  static std::unique_ptr<Cache> open(Options options = {});
  ~Cache();  // writes out batched bookkeeping
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // False once the cache has turned itself off (see the file comment); may change during use.
  bool enabled() const { return m_enabled.load(); }
  std::string disabled_reason() const;
  const std::string& dir() const { return m_dir; }
  std::string db_path() const;
  uint64_t max_size() const { return m_max_size; }

  // Looks `key` up and checks that the entry's fields equal `fields`, that they hash to the key,
  // that all the entry's rows are there, and that the checksum of every payload it returns holds.
  // Only the payloads in `want` are read, decompressed and checked (a damaged payload left out
  // does not fail the lookup; verify() and full reads still catch it). A bad entry is dropped,
  // counted and reported through the warning callback: a miss.
  Lookup lookup(const std::string& key, const std::vector<KeyField>& fields,
                const PayloadSelection& want = {});
  // As lookup, by key alone (for display): the stored fields must still hash to the key.
  // Does not count as a hit or a miss.
  Lookup read(const std::string& key);

  // Inserts or replaces the entry for `key`; evicts least-recently-used entries if the insert
  // crosses the cap. Fails on a disabled cache, duplicate field names, or a database error (a
  // full disk or read-only database also disables the cache, after one warning).
  Status store(const std::string& key, const std::vector<KeyField>& fields,
               const Contents& contents);

  // The entry for `key`, running `producer` at most once across all processes that ask at the
  // same time. Waits at most Options::lock_wait for another live producer; a dead one is noticed
  // at once. Fails only when the producer fails. The entry holds the payloads in `want` (checked
  // as by lookup), also when produced here.
  Expected<Fetched> get_or_create(const std::string& key, const std::vector<KeyField>& fields,
                                  const Producer& producer, const PayloadSelection& want = {});

  Expected<Stats> stats();
  Status zero_stats();
  // All entries, most recently used first (fields included, payloads not).
  Expected<std::vector<EntryInfo>> list();
  // Keys starting with `prefix` (at most `limit`).
  Expected<std::vector<std::string>> keys_with_prefix(const std::string& prefix, int limit = 2);
  // Entries whose field `anchor` equals the request's, fewest differing fields first.
  Expected<std::vector<Nearest>> nearest(const std::vector<KeyField>& request,
                                         const std::string& anchor);
  // Checks every entry's checksums and key; with Fix::yes drops the bad ones.
  Expected<VerifyReport> verify(Fix fix);
  // Drops entries unused for `older_than_s` seconds, then least-recently-used ones until the
  // stored bytes are at most `max_size` (0 empties the cache).
  Expected<PruneReport> prune(std::optional<uint64_t> max_size,
                              std::optional<uint64_t> older_than_s);
  Expected<PruneReport> clear();
  // Every good entry as stored (bad ones are skipped and reported through the warning callback).
  Expected<std::vector<StoredEntry>> export_entries();
  // Inserts entries (already verified) that are not present yet, in one transaction.
  Expected<ImportReport> import_entries(const std::vector<StoredEntry>& entries);
  // Writes batched hit counts, last-used times and counters now.
  Status flush();

private:
  struct Pending {
    std::map<std::string, std::pair<int64_t, int64_t>> touches;  // key -> (hits, last used)
    uint64_t hits = 0, misses = 0, errors = 0, saved_ms = 0;
    bool empty() const { return touches.empty() && !hits && !misses && !errors && !saved_ms; }
  };
  enum class Count { no, yes };

  Cache() = default;
  void open_db();
  Status configure_db();
  Status migrate();
  struct FileId {
    uint64_t device = 0, inode = 0;
    bool operator==(const FileId&) const = default;
  };
  Status move_aside_corrupt_db(const FileId& bad);  // `bad`: the file this process found bad
  void disable(const std::string& reason);
  void note_write_failure(const Error& error);
  void warn(const std::string& message) const;
  int64_t now() const;

  Lookup lookup_locked(const std::string& key, const std::vector<KeyField>* fields, Count count,
                       const PayloadSelection& want);
  // One entry read in one snapshot and checked (rows present, fields hash to the key, the
  // payloads in `want` decode with matching checksums); `stored` keeps the bytes as stored.
  struct Checked {
    enum class Kind { good, absent, bad, failure } kind = Kind::absent;
    StoredEntry stored;
    Entry entry;         // when good
    std::string reason;  // when bad or failure
  };
  Checked read_checked(const std::string& key, const PayloadSelection& want = {});
  // The entry row, its fields and the payloads in `want`; `rows_missing` is set when the field
  // or payload rows (all of them, selected or not) disagree with the counts in the entry row.
  Expected<std::optional<StoredEntry>> read_stored(const std::string& key,
                                                   const PayloadSelection& want,
                                                   bool* rows_missing);
  Error disabled_error() const;
  void count_hit(Entry& entry);
  Status drop(const std::string& key);
  void drop_bad(const std::string& key, const std::string& reason);
  Status insert_locked(const std::string& key, std::vector<KeyField> fields,
                       const Contents& contents);
  Status insert_rows(const StoredEntry& entry);  // inside the caller's write transaction
  Status flush_locked();
  void maybe_flush_locked();
  Expected<PruneReport> evict_locked(uint64_t cap, const std::string& keep);
  // All entries, or those whose field `where->name` equals `where->value`.
  Expected<std::vector<EntryInfo>> list_locked(const KeyField* where);
  enum class Store { no, yes };
  Expected<Fetched> produce(const std::string& key, const std::vector<KeyField>& fields,
                            const Producer& producer, Store store, const PayloadSelection& want);

  Options m_options;
  std::string m_dir;
  std::string m_disabled_reason;
  uint64_t m_max_size = k_default_max_size;
  std::unique_ptr<sql::Db> m_db;  // null once disabled
  std::atomic<bool> m_enabled{false};
  mutable std::recursive_mutex m_mutex;
  Pending m_pending;
  int64_t m_last_flush_ms = 0;
};

}  // namespace kiln::cache
