// Options and result types shared by the cache facade and its local store.
#pragma once

#include "cache/entry.h"
#include "cache/key.h"
#include "support/expected.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cache {

inline constexpr uint64_t k_default_max_size = uint64_t{2} << 30;          // 2 GiB
inline constexpr int64_t k_default_remote_ttl_ms = int64_t{30} * 86400000;  // 30 days
inline constexpr uint64_t k_default_remote_max_bytes = uint64_t{64} << 20;   // 64 MiB
// The shortest secret KILN_REMOTE_KEY (or Options::remote_key) may be.
inline constexpr size_t k_min_remote_key_bytes = 16;

// Checks an entry from another machine (Options::check_foreign): `stored` as it came, and
// `verified`, when not null, the same entry with the payloads its lookup selected decoded and
// checked (a remote value; null for a bundle's entry), which the check may read instead of
// decoding them again. "" when it may be taken, else why not.
using ForeignCheck = std::function<std::string(const StoredEntry& stored, const Entry* verified)>;

struct Options {
  std::string dir;  // --cache-dir; empty: $KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln, ~/.cache/kiln
  // False for commands that only read: a folder without a database is left alone (the cache
  // comes back disabled, its reason "no cache at 'DIR'") instead of being created.
  bool create = true;
  std::optional<uint64_t> max_size;  // size cap; unset: $KILN_CACHE_MAX_SIZE or 2 GiB; 0: no cap
  std::chrono::milliseconds lock_wait{30000};  // longest wait for another producer (any machine)
  int busy_timeout_ms = 10000;                 // SQLite busy timeout

  // The remote tier (FORMAT.md, "Remote tier"). `remote`: a redis:// URL; unset: the
  // KILN_REMOTE_CACHE variable; empty: no remote tier. `remote_key`: the HMAC secret; unset:
  // KILN_REMOTE_KEY. `remote_ttl_ms`: unset: KILN_REMOTE_TTL, else 30 days.
  std::optional<std::string> remote;
  std::optional<std::string> remote_key;
  std::optional<int64_t> remote_ttl_ms;
  // The largest remote value taken (an entry's sealed record); unset: KILN_REMOTE_MAX_BYTES,
  // else 64 MiB (kiln's own entries are below 1 MiB). A larger value is refused by the server
  // before it is sent, and counted as rejected.
  std::optional<uint64_t> remote_max_bytes;
  std::chrono::milliseconds remote_connect_timeout{100};
  // Bounds each remote operation as a whole (see cache/remote/redis.h).
  std::chrono::milliseconds remote_op_timeout{1000};
  std::chrono::milliseconds remote_lease{10000};      // a compile's lease, renewed while it runs
  std::chrono::milliseconds remote_down_for{30000};   // how long a failing remote is skipped
  // Answers in a row that each took remote_slow_after or more (unset: half remote_op_timeout)
  // before the tier is marked down as slow (Cache::remote_answered); 0: never.
  int remote_slow_in_a_row = 3;
  std::optional<std::chrono::milliseconds> remote_slow_after;
  // The longest a pull fetches for: a server that answers every read just inside the operation
  // timeout cannot hold `kiln pull` for days (2^20 keys); a pull stopped there says how far it
  // got, and the next one goes on (it skips the keys already here).
  std::chrono::milliseconds remote_pull_budget{600000};

  // Receives warnings (one line, no prefix), one call at a time, from whichever thread meets
  // them (the local fill's included, so it must not call back into this cache); default:
  // "kiln: cache: <message>" on stderr.
  std::function<void(const std::string&)> warn;
  // Unix time in milliseconds; default: the system clock. Tests pin it.
  std::function<int64_t()> now_ms;
  // Runs inside an insert's write transaction just before it commits. Tests use it to kill a
  // process in the middle of a write.
  std::function<void()> before_commit;
  // Checks an entry that comes from another machine (a remote value, a bundle's entry) once its
  // checksums, key and any signature hold, for what the cache layer cannot see: "" when it may be
  // served and stored here, else why not. A remote value that fails is rejected as a badly signed
  // one is (counted, reported, a miss: compiled again and overwritten); a bundle holding one is
  // not imported (ImportReport::refused). Unset: nothing more is checked, but by a call given a
  // check of its own (Cache::get_or_create's `check`, which runs in place of this one). The
  // runtime's (runtime::cache_options) checks what would fail every run of it: the artifact
  // against its key, and its cubins as the launcher checks them.
  ForeignCheck check_foreign;
};

// The remote tier's secret: `remote_key` if set, else $KILN_REMOTE_KEY; "" when neither is set
// (entries go unsigned). Fails, naming where it came from, for a secret that is set but empty or
// shorter than k_min_remote_key_bytes: an empty variable (a missing secret file in
// `KILN_REMOTE_KEY=$(cat FILE)`) must not turn signing off unnoticed.
Expected<std::string> remote_secret(const std::optional<std::string>& remote_key);

// How a disabled cache's reason begins when Options::create was false and there was no cache.
inline constexpr const char* k_no_cache_reason = "no cache at ";

// The directory the cache would use for `dir` (see Options::dir); "" when none can be found.
std::string resolve_cache_dir(const std::string& dir);

enum class LookupStatus { hit, miss, failure };

struct Lookup {
  LookupStatus status = LookupStatus::miss;
  Entry entry;          // valid on a hit
  std::string failure;  // why, on a failure
  bool hit() const { return status == LookupStatus::hit; }
};

struct Stats {
  uint64_t entries = 0;
  uint64_t bytes = 0;      // the entries' stored bytes
  uint64_t raw_bytes = 0;  // uncompressed payload bytes
  // On disk: kiln.db and kiln.db-wal as the file system sees them (SQLite's pages, free ones
  // included, and the WAL's frames), and the database's free pages within kiln.db.
  uint64_t database_file_bytes = 0;
  uint64_t wal_file_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t hits = 0;       // local hits
  uint64_t misses = 0;     // local misses
  uint64_t errors = 0;     // bad entries dropped, failed reads and writes
  uint64_t time_saved_ms = 0;  // sum of compile_ms over served hits (either tier)
  uint64_t remote_hits = 0;      // local misses served by the remote tier
  uint64_t remote_misses = 0;    // absent there too
  uint64_t remote_errors = 0;    // failed or timed-out remote operations
  uint64_t remote_rejected = 0;  // remote entries refused: damaged, unsigned, badly signed, foreign
  uint64_t remote_puts = 0;      // entries uploaded
  int64_t zeroed_ms = 0;         // when the counters were last zeroed (0: never)
};

struct BadEntry {
  std::string key;
  std::string reason;
  // Fix::yes only: another process replaced the entry after it was checked, so it was left alone
  // (what is there now was not checked). One removed meanwhile counts as removed.
  bool replaced = false;
};

struct VerifyReport {
  uint64_t checked = 0;
  std::vector<BadEntry> bad;
  // Set when SQLite's own check (PRAGMA integrity_check) finds the database malformed: what it
  // said. Its entries are then not checked one by one; with Fix::yes the database is moved aside
  // and a new one started.
  std::string database;
  // Fix::yes: the malformed database was moved aside, or bad entries were dropped (every one but
  // those `replaced` meanwhile).
  bool removed = false;
};

struct PruneReport {
  uint64_t removed = 0;
  uint64_t freed_bytes = 0;
  // clear() only: the database was malformed, so it was moved aside and a new one started; or,
  // with disk_full, the disk had no room to log the removals, so it was removed instead.
  bool replaced_database = false;
  bool disk_full = false;
  // kiln.db and kiln.db-wal together, before and after (prune and clear give free pages back).
  uint64_t disk_bytes_before = 0;
  uint64_t disk_bytes_after = 0;
};

struct ImportReport {
  uint64_t imported = 0;
  uint64_t already_present = 0;
  uint64_t too_large = 0;  // entries larger than the size cap alone, not imported (warned about)
  // Entries evicted to keep the cache within its size cap as the import went: the oldest used,
  // which may be entries just imported.
  uint64_t evicted = 0;
  // Why nothing was imported: "entry KEY: <why>" for the first entry Options::check_foreign
  // refused ("" when none was).
  std::string refused;
  // From a source of entries (Cache::import_from): why it stopped before its end ("" when it
  // did not); the entries before stay imported.
  std::string stopped;
};

// Entries one at a time: the next, nullopt after the last, or why there is none (a bundle
// found damaged part of the way through).
using EntrySource = std::function<Expected<std::optional<StoredEntry>>()>;

// An entry sharing one field value with a request, and how its other fields differ.
struct Nearest {
  EntryInfo info;
  std::vector<FieldDiff> diffs;
};

enum class Fix { no, yes };

// A check verify() runs on each entry whose checksums and key hold, for what the cache layer
// cannot see (whether its artifact decodes): "" when the entry is good, else why it is bad.
using EntryCheck = std::function<std::string(Entry entry)>;

}  // namespace kiln::cache
