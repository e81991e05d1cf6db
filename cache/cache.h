// The kernel cache: a local tier (SQLite, one per machine) in front of an optional remote tier
// (Redis, shared by a fleet), with single flight across threads, processes and machines.
//
// A miss is not an error: lookups answer hit, miss, or a failure. Faults degrade: a local store
// that cannot be written turns itself off after one warning; a remote tier that fails or times
// out is skipped for a while after one warning per process, and the work goes on locally.
// Formats: FORMAT.md.
#pragma once

#include "cache/types.h"
#include "support/expected.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cache {

class LocalFill;
namespace local {
class Store;
}
namespace remote {
class Backend;
}

enum class FetchSource {
  hit,               // read from the local tier (possibly after waiting for another process)
  remote_hit,        // read from the remote tier, verified, and stored locally
  produced,          // produced here and stored
  produced_uncached  // produced here; the cache is off or the store failed
};

struct Fetched {
  FetchSource source = FetchSource::produced_uncached;
  Entry entry;
};

using Producer = std::function<Expected<Contents>()>;

struct PushReport {
  uint64_t pushed = 0;
  uint64_t skipped_bad = 0;  // local entries that failed their checks
  // Entries holding host machine code, not pushed without a secret: no machine would take them.
  uint64_t skipped_native = 0;
};

struct PullReport {
  uint64_t pulled = 0;
  uint64_t already_present = 0;
  uint64_t rejected = 0;  // damaged, unsigned, badly signed or foreign remote entries
  // Entries holding host code (the CPU target's) left there: without KILN_REMOTE_KEY such an
  // entry is taken only signed, so a keyless machine does not pull it (not a failure).
  uint64_t needs_key = 0;
  uint64_t listed = 0;   // the keys the listing named
  uint64_t read = 0;     // of those, the keys looked at before the pull ended
  bool stopped = false;  // Options::remote_pull_budget ran out before every key was fetched
};

// Makes a remote backend; the cache calls it once for its own use and once per compile that holds
// a lease (the lease is renewed from another thread, on its own connection).
using BackendFactory = std::function<std::unique_ptr<remote::Backend>()>;

// How Cache::remote_fetch reads a value (a class of its own: a default argument of the class
// that nests it could not use its member initializers).
struct RemoteFetchHow {
  bool report_rejection = true;
  bool pulling = false;
  // A miss is counted unless false (get_or_create counts one per call, not per read).
  bool count_miss = true;
  // Verify only: nothing stored here, counted or refreshed (`kiln why`).
  bool check_only = false;
  std::string* rejection = nullptr;  // why the value was rejected, when it was
  // Run in place of Options::check_foreign when set (get_or_create's `check`).
  const ForeignCheck* check = nullptr;
};

class Cache {
public:
  // Never fails: a local tier that cannot be opened comes back disabled, and a remote tier that
  // is misconfigured is left out, each after one warning.
  static std::unique_ptr<Cache> open(Options options = {});
  // As open, with a given remote backend factory (tests); Options::remote is then ignored.
  static std::unique_ptr<Cache> open_with_remote(Options options, BackendFactory factory);
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // False once the local tier has turned itself off (see the file comment).
  bool enabled() const;
  std::string disabled_reason() const;
  const std::string& dir() const;
  std::string db_path() const;
  uint64_t max_size() const;

  // True when a remote tier is configured (it may be down for now).
  bool has_remote() const { return m_remote_factory != nullptr; }
  // "redis 127.0.0.1:6379/0 (prefix kiln:)", or "" without a remote tier.
  std::string remote_description() const;

  // The entry for `key`: the local tier, then the remote one (a verified remote entry is stored
  // locally). `key` must be make_key(fields), as store() requires. Checks that the entry's fields
  // equal `fields` (so they hash to the key: a local entry's are not hashed again) and that every
  // payload in `want` decodes with its checksum. A bad local entry is dropped and reported; a bad
  // remote one is rejected and counted. Either is a miss.
  Lookup lookup(const std::string& key, const std::vector<KeyField>& fields,
                const PayloadSelection& want = {});
  // As lookup, by key alone and locally (for display); not counted as a hit or a miss.
  Lookup read(const std::string& key);

  // Stores the entry locally (replacing any) and puts it to the remote tier. Fails on a disabled
  // local tier, duplicate field names, a key that is not make_key(fields), or a database error; a
  // failed put is only a warning.
  Status store(const std::string& key, const std::vector<KeyField>& fields,
               const Contents& contents);

  // An entry served as good whose contents its user could not decode or load (checksums and
  // signature held, so the damage is older than them, or the entry came from a machine trusted to
  // sign): counted as an error, reported with `why`, and replaced by `contents`, a fresh compile,
  // as store() does, remotely too. Without a secret a signed remote value is kept, as by any put.
  Status replace_bad(const std::string& key, const std::vector<KeyField>& fields,
                     const Contents& contents, const std::string& why);

  // The entry for `key`, running `producer` once across the threads, processes and (with a
  // remote tier) machines that ask at the same time. Waits at most Options::lock_wait for another
  // producer; a dead one is noticed at once on this machine and when its lease expires on
  // another. Fails only when the producer fails. The entry holds the payloads in `want`. A remote
  // value is checked with `check` when it is set, in place of Options::check_foreign: a caller
  // that holds more of the request than its key fields (the runtime: the graph itself) checks
  // with it what it would otherwise read back from the entry.
  Expected<Fetched> get_or_create(const std::string& key, const std::vector<KeyField>& fields,
                                  const Producer& producer, const PayloadSelection& want = {},
                                  const ForeignCheck& check = {});

  // What a compile's remote lookup would make of the fleet's value of `key`, verified as a
  // compile verifies it but not taken (nothing stored here, counted or refreshed): "present",
  // "absent", "rejected" (with `why`), or "unavailable" (no remote tier, or it is down).
  std::string remote_verdict(const std::string& key, const std::vector<KeyField>& fields,
                             std::string& why);
  // Uploads every good local entry to the remote tier.
  Expected<PushReport> push();
  // Fills the local tier from the remote one: every remote entry, or those of one graph (its
  // `graph_hash` field). Entries already present locally are kept.
  Expected<PullReport> pull(const std::optional<std::string>& graph_hash);

  Expected<Stats> stats();
  Status zero_stats();
  Expected<std::vector<EntryInfo>> list();
  // The local entries holding field `where` (e.g. the tuning records of one device): an indexed
  // query that writes nothing.
  Expected<std::vector<EntryInfo>> list_where(const KeyField& where);
  // Whether any local entry has a field named `name` (e.g. any tuning record at all): one probe of
  // an index.
  Expected<bool> has_field(const std::string& name);
  Expected<std::vector<std::string>> keys_with_prefix(const std::string& prefix, int limit = 2);
  Expected<std::vector<Nearest>> nearest(const std::vector<KeyField>& request,
                                         const std::string& anchor);
  // SQLite's check, then every entry's checksums and key; `check`, when given, on each entry
  // that holds (the runtime's decode). Fix::yes drops the bad ones.
  Expected<VerifyReport> verify(Fix fix, const EntryCheck& check = {});
  Expected<PruneReport> prune(std::optional<uint64_t> max_size,
                              std::optional<uint64_t> older_than_s);
  Expected<PruneReport> clear();
  Expected<std::vector<StoredEntry>> export_entries();
  // The good entries one at a time to `take` (a BundleWriter's add), holding one in memory; a
  // failure of `take` stops there and is returned. The number taken. `take` runs under the
  // store's lock and must not call this cache.
  Expected<uint64_t> export_to(const std::function<Status(const StoredEntry&)>& take);
  // Adds the entries not present here. With Options::check_foreign, every entry is checked first,
  // and one that fails imports nothing (the report's `refused` says which and why).
  Expected<ImportReport> import_entries(const std::vector<StoredEntry>& entries);
  // As import_entries, the entries taken from `next` one at a time, so that one is in memory
  // rather than all (a bundle read by BundleReader). Each is checked with
  // Options::check_foreign as it comes; a refusal, or a failure of `next`, stops the import
  // there (ImportReport::stopped): the entries before stay imported. A caller that must import
  // nothing from a bad source checks it through first. `next` must not call this cache.
  Expected<ImportReport> import_from(const EntrySource& next);
  // Stores the remote hits still being filled in, and merges recorded use into the local
  // database now.
  Status flush();

private:
  Cache() = default;
  void configure_remote();
  // The remote backend when it is usable now (configured and not marked down).
  remote::Backend* remote_now();
  void remote_failed(const std::string& what);
  // After an operation the backend answered, begun at `started` and moving `bytes` of value: one
  // that took Options::remote_slow_after (half the operation timeout) or more is slow, and
  // Options::remote_slow_in_a_row slow ones in a row mark the tier down as a failure would (a
  // server that always answers just in time costs every lookup most of a second); a prompt one
  // starts the count again. A value over
  // k_slow_exempt_bytes takes the time of its transfer and counts neither way, and neither do a
  // bulk command's operations (push, pull: they have their own budget).
  static constexpr uint64_t k_slow_exempt_bytes = uint64_t{1} << 20;
  enum class Bulk { no, yes };
  void remote_answered(std::chrono::steady_clock::time_point started, uint64_t bytes, Bulk bulk);
  // needs_key: host code refused for want of a secret (a rejection that is not the entry's fault).
  enum class Outcome { hit, miss, rejected, needs_key, failed, other_graph };
  // A verified remote entry for `key`, stored locally; nullopt on a miss, a rejection or a
  // failure (counted and reported; a rejection only with `report_rejection`, and host code
  // refused for want of a secret not while `pulling`: the pull's report counts it). With
  // `only_graph`, an entry of another graph is left alone. Only a verified entry has its time to
  // live reset (and its graph's marker with it): a rejected value is left to expire.
  std::optional<Entry> remote_fetch(const std::string& key, const std::vector<KeyField>* fields,
                                    const PayloadSelection& want, Outcome* outcome = nullptr,
                                    const std::string* only_graph = nullptr,
                                    const RemoteFetchHow& how = {});
  // Puts `entry` (sealed) to the remote tier; a failure marks the tier down (one warning).
  // Without a secret, an entry holding host machine code is not put (answers false: no machine
  // takes it unsigned), and a signed value already there is kept.
  // `leased`: this process holds the fleet's lease on the key, so the others wait for this put:
  // it is tried even while the tier is marked down.
  Expected<bool> remote_put(const StoredEntry& entry, Bulk bulk = Bulk::no, bool leased = false);
  // Rejects a remote value: counted and reported, except host code refused for want of a secret,
  // which is reported once per cache, with how to enable signing.
  enum class Rejection { reported, unsigned_host_code };
  void remote_rejected(const std::string& key, const std::string& why,
                       Rejection kind = Rejection::reported);
  Expected<Fetched> produce(const std::string& key, const std::vector<KeyField>& fields,
                            const Producer& producer, bool store, const PayloadSelection& want,
                            bool leased = false);

  Options m_options;
  std::unique_ptr<local::Store> m_local;
  // Remote hits stored locally off the caller's path; destroyed (drained) before m_local.
  std::unique_ptr<LocalFill> m_fill;
  BackendFactory m_remote_factory;
  std::string m_remote_secret;
  int64_t m_remote_ttl_ms = k_default_remote_ttl_ms;
  uint64_t m_remote_max_bytes = k_default_remote_max_bytes;
  bool m_native_warned = false;
  // The remote tier's connection and health; guarded by m_remote_mutex, never held while waiting
  // or producing.
  std::mutex m_remote_mutex;
  std::unique_ptr<remote::Backend> m_remote;
  std::string m_remote_description;
  int64_t m_remote_down_until_ms = 0;
  int m_remote_slow = 0;  // slow answers in a row
  bool m_remote_warned = false;
  std::string m_remote_failure;  // what the last remote failure was, for a later error
};

}  // namespace kiln::cache
