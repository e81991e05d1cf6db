// The local tier: one SQLite database of checksummed entry records, shared by processes.
//
// A hit is one indexed read of one row (the entry record holds the fields, the artifact and the
// cubins) and writes nothing: use is recorded in the memory-mapped usage file (usage.h). A miss
// is not an error. Faults degrade: when the directory cannot be written or the disk fills up, the
// store warns once and turns itself off (enabled() is false). Formats: FORMAT.md.
#pragma once

#include "cache/local/usage.h"
#include "cache/types.h"
#include "support/expected.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

struct stat;
#include <string>
#include <vector>

namespace kiln::cache {
namespace sql {
class Db;
}

namespace local {

// Fails, saying why and how to fix it, when `path` (described as `what`) belongs to another user
// or can be written by other users: a checksum catches damage, not someone rewriting an entry.
Status check_private(const std::string& path, const struct stat& st, const char* what);

// `entry` with each payload in the encoding the store keeps it in (cubins and artifact raw, the
// rest zstd), re-encoding where it came otherwise (bundles, the remote tier).
Expected<StoredEntry> prepared_for_store(StoredEntry entry);

class Store {
public:
  // Never fails: a store that cannot be opened comes back disabled, after one warning.
  static std::unique_ptr<Store> open(const Options& options);
  ~Store();  // writes use kept in memory only when the usage file could not take it
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  bool enabled() const { return m_enabled.load(); }
  std::string disabled_reason() const;
  const std::string& dir() const { return m_dir; }
  std::string db_path() const;
  uint64_t max_size() const { return m_max_size; }

  enum class Count { no, yes };
  // The entry for `key`, checked: the record's checksum, its fields against `fields` (when given)
  // and against the key, and each payload in `want` (decoded one at a time). A bad entry is
  // dropped, counted and reported through the warning callback: a miss. With Count::yes a hit
  // or miss is counted.
  Lookup lookup(const std::string& key, const std::vector<KeyField>* fields, Count count,
                const PayloadSelection& want);
  // Inserts or replaces an entry (payload data present); evicts least-recently-used entries if
  // the insert crosses the cap. With Checkpoint::yes (after a compile, which dwarfs it) the WAL
  // is emptied too; a remote hit's fill leaves that to the next compile.
  enum class Checkpoint { no, yes };
  // What an insert does when the key is already stored: replace that entry, or keep it (a remote
  // entry never replaces a local one; checked inside the write transaction).
  enum class IfPresent { replace, keep };
  Status insert(StoredEntry entry, Checkpoint checkpoint = Checkpoint::yes,
                IfPresent if_present = IfPresent::replace);
  // Encodes `contents` (cubins and artifact raw, the rest zstd) into a StoredEntry.
  Expected<StoredEntry> encode_contents(const std::string& key, std::vector<KeyField> fields,
                                        const Contents& contents) const;
  // The stored entry with every payload read (for push, export, verify), or nullopt when absent.
  // Fails on a database error or a bad entry (which is not dropped here).
  Expected<std::optional<StoredEntry>> read_full(const std::string& key);
  bool contains(const std::string& key);
  void count(Counter counter, uint64_t value = 1);
  // Counts a hit of `entry` (and its time saved) and records its use; writes nothing.
  void record_hit(Entry& entry);

  Expected<Stats> stats();
  Status zero_stats();
  Expected<std::vector<EntryInfo>> list();
  // The entries holding field `where` (an indexed query; no recorded use is merged first).
  Expected<std::vector<EntryInfo>> list_where(const KeyField& where);
  // Whether any entry has a field named `name` (one probe of the fields index).
  Expected<bool> has_field(const std::string& name);
  Expected<std::vector<std::string>> keys_with_prefix(const std::string& prefix, int limit);
  Expected<std::vector<Nearest>> nearest(const std::vector<KeyField>& request,
                                         const std::string& anchor);
  Expected<VerifyReport> verify(Fix fix, const EntryCheck& check);
  Expected<PruneReport> prune(std::optional<uint64_t> max_size,
                              std::optional<uint64_t> older_than_s);
  Expected<PruneReport> clear();
  Expected<std::vector<StoredEntry>> export_entries();
  // The good entries one at a time, oldest used first, to `take` (a failure of which stops
  // there and is returned); a bad one is warned about and skipped. The number taken.
  Expected<uint64_t> export_to(const std::function<Status(const StoredEntry&)>& take);
  Expected<ImportReport> import_entries(const std::vector<StoredEntry>& entries);
  // As import_entries, taking the entries from `next` one at a time (ImportReport::stopped).
  // `next` is called outside the store's lock and any transaction; it must not call the store.
  Expected<ImportReport> import_from(const EntrySource& next);
  // Merges recorded use (usage file and memory) into the database now.
  Status flush();
  int64_t now() const;
  void warn(const std::string& message) const;

private:
  Store() = default;
  // `create`: make kiln.db when it is missing (Options::create, or a replacement of a malformed
  // database, which the cache had).
  void open_db(bool create);
  Status configure_db(bool new_file);
  Status migrate();
  // Set by migrate() where the database's schema does not hold (a user_version below 0, a
  // migration that fails on the tables found, a table of this version missing): why. Such a
  // database is moved aside as a malformed one is.
  std::string m_damaged;
  struct FileId {
    uint64_t device = 0, inode = 0;
    bool operator==(const FileId&) const = default;
  };
  // What becomes of a database that is replaced: a malformed one is moved aside (kept beside the
  // new one, with a warning), one `clear` cannot empty on a full disk is removed.
  enum class Replace { move_aside, remove };
  // `bad`: the file this process found bad.
  // `why` goes into the warning ("SQLite: malformed", or m_damaged).
  Status move_aside_corrupt_db(const FileId& bad, Replace how = Replace::move_aside,
                               const std::string& why = "SQLite: malformed");
  FileId m_opened;  // the database file this store opened
  // Turns the store off; the reason is warned about unless `quiet` (a read of a cache that is
  // not there, which the caller reports).
  enum class Quiet { no, yes };
  void disable(const std::string& reason, Quiet quiet = Quiet::no);
  Status check_cache_dir();
  // Removes the lock files a killed producer left in locks/ (a holder removes its own): each that
  // no process holds is taken and released, which unlinks it as a holder's release does; one
  // held is left alone. prune and clear run it.
  void sweep_locks_locked();
  Status check_folder();
  // After a failed operation: a malformed database is moved aside and a new one started (its
  // entries are lost: they are a cache). True when that happened and the store is usable again.
  bool recover_if_malformed_locked();
  // Moves the database this store opened aside (or removes it) and opens a new, empty one.
  Status replace_malformed_db(Replace how = Replace::move_aside);
  void forget_last_code();
  // Deletes the databases moved aside as malformed (kiln.db.corrupt-*): `clear` leaves nothing.
  void remove_moved_aside();
  // Runs `op` (the lock held); when it fails on a malformed database, that database is moved
  // aside and a new one started before the failure is returned.
  template <typename Op>
  auto recovering(Op&& op) {
    forget_last_code();  // only a failure of `op` itself may move the database aside
    auto result = op();
    if (!result) recover_if_malformed_locked();
    return result;
  }
  void note_write_failure(const Error& error);
  Error disabled_error() const;

  // Which record a read found: its length and last 8 bytes (a well-formed record's checksum of
  // all the others). An entry found bad is dropped only while its record is still this one: another
  // process may have replaced it since (drop_if_same).
  struct RecordMark {
    int64_t size = -1;
    std::string tail;
  };
  // One entry read and checked (see lookup); `stored` keeps the bytes as stored.
  struct Checked {
    enum class Kind { good, absent, bad, failure } kind = Kind::absent;
    StoredEntry stored;
    Entry entry;         // when good
    std::string reason;  // when bad or failure
    RecordMark mark;     // unless absent or failure to read
  };
  // What a good read keeps: the verified entry only (its payloads moved out of the record, no
  // copy), or the stored form as well.
  enum class Keep { entry, entry_and_stored };
  // With `request_fields`, a record whose fields differ from them is bad, and equal ones are not
  // hashed again (KeyCheck::matches_request): the caller's key is make_key of those fields.
  Checked read_checked(const std::string& key, const PayloadSelection& want,
                       Keep keep = Keep::entry_and_stored,
                       const std::vector<KeyField>* request_fields = nullptr);
  Status drop(const std::string& key);
  // Drops the entry at `key` if its record is still the one `mark` names, in the caller's write
  // transaction: yes; replaced when the record there is another; gone when none is.
  enum class Dropped { yes, replaced, gone };
  Expected<Dropped> drop_if_same(const std::string& key, const RecordMark& mark);
  void count_locked(Counter counter, uint64_t value = 1);
  void count_hit_locked(Entry& entry);
  void drop_bad(const std::string& key, const RecordMark& mark, const std::string& reason);
  Status insert_locked(StoredEntry entry, Checkpoint checkpoint,
                       IfPresent if_present = IfPresent::replace);
  Status flush_locked();
  // flush_locked() before a read that reports what it merges (stats, ls, verify, export, why).
  // A merge that fails for want of a write (a full disk, a read-only folder) warns once and the
  // read goes on without it: the uses stay in the usage file for a later merge. A malformed
  // database is still an error, for recovering() to repair.
  Status merge_before_read();

  // Free pages worth giving back to the file system when no cap asks for it (a quarter of the
  // file at least), and writes after which the WAL is emptied even on the remote fill.
  static constexpr uint64_t k_large_free_bytes = uint64_t{1} << 20;
  static constexpr uint64_t k_large_write_bytes = uint64_t{1} << 20;
  // Entries an import writes per transaction, in bytes: the WAL and the overshoot past the cap
  // stay below this (or a quarter of the cap) between its evictions.
  static constexpr uint64_t k_import_batch_bytes = uint64_t{8} << 20;
  static constexpr uint64_t k_auto_vacuum_incremental = 2;  // PRAGMA auto_vacuum's value

  // Bytes on disk (space.cpp). The database's pages: all, free, and those of no entry (page 1,
  // each table's and index's root, auto_vacuum's first pointer map: what an empty database
  // takes); auto_vacuum as SQLite numbers it.
  struct Space {
    uint64_t page_size = 0, pages = 0, free_pages = 0, fixed_pages = 0, auto_vacuum = 0;
  };
  Expected<Space> space_locked();
  struct DiskFiles {
    uint64_t database = 0, wal = 0;
    uint64_t total() const { return database + wal; }
  };
  DiskFiles disk_files() const;  // kiln.db and kiln.db-wal as the file system sees them
  // What the cap counts, given the sum of the entries' stored bytes: that sum, or the bytes of
  // the pages entries take, whichever is more.
  Expected<uint64_t> counted_bytes_locked(uint64_t stored_bytes);
  // Gives free pages back to the file system: all of them, or (if_due) only when they take the
  // file past the cap or are a large share of it. Failures leave them for the next write. True
  // when pages were given back (the WAL then holds the moves: checkpoint it).
  enum class GiveBack { if_due, all };
  bool give_back_locked(GiveBack how);
  // Empties the WAL into the database (wal_checkpoint(TRUNCATE)); Wait::no gives up at once when
  // another process is reading.
  enum class Wait { no, yes };
  void checkpoint_locked(Wait wait = Wait::no);
  // After a write of `written` bytes (and any eviction): free pages given back when due and the
  // WAL emptied when the write was large, gave pages back or `checkpoint` asks for it.
  void settle_locked(uint64_t written, Checkpoint checkpoint);
  Expected<PruneReport> evict_locked(uint64_t cap, const std::string& keep);
  Expected<PruneReport> prune_locked(std::optional<uint64_t> max_size,
                                     std::optional<uint64_t> older_than_s);
  Expected<std::vector<EntryInfo>> list_locked(const KeyField* where);

  Options m_options;
  std::string m_dir;
  std::string m_disabled_reason;
  uint64_t m_max_size = k_default_max_size;
  std::unique_ptr<sql::Db> m_db;  // null once disabled
  std::unique_ptr<Usage> m_usage;
  std::atomic<bool> m_enabled{false};
  mutable std::mutex m_mutex;
  mutable std::mutex m_warn_mutex;  // one warning at a time, whichever thread sends it
  // Use the usage file could not take (it is missing or full): written at the next write.
  uint64_t m_pending[k_counter_count] = {};
  std::map<std::string, std::pair<uint64_t, int64_t>> m_pending_touches;  // key -> (hits, last)
  bool m_merge_warned = false;  // merge_before_read() has warned of a failed merge
};

}  // namespace local
}  // namespace kiln::cache
