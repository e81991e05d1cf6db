// The tiered facade: opening, the remote tier's health, remote reads and writes, push and pull.
#include "cache/cache.h"

#include "cache/entry_codec.h"
#include "cache/local_fill.h"
#include "cache/local/store.h"
#include "cache/remote/backend.h"
#include "cache/remote/envelope.h"
#include "cache/remote/redis.h"
#include "cache/units.h"

#include <cstdlib>

namespace kiln::cache {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// A graph's marker in the remote tier: `graph:<graph hash>:<key>`, so that `pull --graph`
// lists and fetches only that graph's entries. A hint: every entry it names is verified.
std::string graph_marker(const std::string& graph_hash, const std::string& key) {
  return "graph:" + graph_hash + ":" + key;
}

}  // namespace

Expected<std::string> remote_secret(const std::optional<std::string>& remote_key) {
  const char* variable = std::getenv("KILN_REMOTE_KEY");
  if (!remote_key && !variable) return std::string();
  std::string secret = remote_key ? *remote_key : variable;
  const char* where = remote_key ? "the remote cache key" : "KILN_REMOTE_KEY";
  if (secret.empty())
    return make_error(where, " is set but empty; set it to a secret of at least ",
                      std::to_string(k_min_remote_key_bytes),
                      " bytes, or unset it to use the remote tier unsigned");
  if (secret.size() < k_min_remote_key_bytes)
    return make_error(where, " is ", std::to_string(secret.size()),
                      " bytes long; a secret needs at least ", std::to_string(k_min_remote_key_bytes));
  return secret;
}

std::unique_ptr<Cache> Cache::open(Options options) {
  std::unique_ptr<Cache> cache(new Cache());
  cache->m_options = std::move(options);
  cache->m_local = local::Store::open(cache->m_options);
  cache->m_fill = std::make_unique<LocalFill>(*cache->m_local);
  cache->configure_remote();
  return cache;
}

std::unique_ptr<Cache> Cache::open_with_remote(Options options, BackendFactory factory) {
  options.remote = "";
  auto cache = open(std::move(options));
  cache->m_remote_factory = std::move(factory);
  cache->configure_remote();
  return cache;
}

Cache::~Cache() = default;

void Cache::configure_remote() {
  const Options& o = m_options;
  std::string url = o.remote ? *o.remote : env("KILN_REMOTE_CACHE");
  auto secret = remote_secret(o.remote_key);
  if (!secret) {
    // Fail closed: without the secret meant, nothing would be signed or checked.
    if (m_remote_factory || !url.empty())
      m_local->warn(secret.error().message + "; continuing without the remote cache");
    m_remote_factory = nullptr;
    return;
  }
  m_remote_secret = *secret;
  // 1 byte to the largest entry the codec decodes; anything else falls back to the default.
  auto usable = [](uint64_t bytes) { return bytes > 0 && bytes <= k_max_entry_bytes; };
  if (o.remote_max_bytes && usable(*o.remote_max_bytes)) {
    m_remote_max_bytes = *o.remote_max_bytes;
  } else if (o.remote_max_bytes) {
    m_local->warn("remote_max_bytes: expected 1 byte to 512 MiB; using 64 MiB");
  } else if (std::string v = env("KILN_REMOTE_MAX_BYTES"); !v.empty()) {
    auto bytes = parse_size(v);
    if (bytes && usable(*bytes))
      m_remote_max_bytes = *bytes;
    else
      m_local->warn("KILN_REMOTE_MAX_BYTES: expected a size from 1 to 512M, such as 64M; using 64M");
  }
  if (o.remote_ttl_ms) {
    m_remote_ttl_ms = *o.remote_ttl_ms;
  } else if (std::string v = env("KILN_REMOTE_TTL"); !v.empty()) {
    auto seconds = parse_duration(v);
    if (seconds && *seconds > 0 && *seconds < uint64_t{1} << 40)
      m_remote_ttl_ms = static_cast<int64_t>(*seconds) * 1000;
    else
      m_local->warn("KILN_REMOTE_TTL: expected a duration such as 30d or 12h; using 30d");
  }
  if (!m_remote_factory) {
    if (url.empty()) return;
    auto parsed = remote::parse_redis_url(url);
    if (!parsed) {
      m_local->warn(parsed.error().message + "; continuing without the remote cache");
      return;
    }
    remote::RedisOptions redis;
    redis.connect_timeout = o.remote_connect_timeout;
    redis.op_timeout = o.remote_op_timeout;
    redis.max_reply_bytes = m_remote_max_bytes + (64 << 10);  // room for the protocol around it
    m_remote_factory = [url = *parsed, redis] { return remote::make_redis_backend(url, redis); };
  }
  m_remote = m_remote_factory();
  m_remote_description = m_remote->describe();
}

bool Cache::enabled() const { return m_local->enabled(); }
std::string Cache::disabled_reason() const { return m_local->disabled_reason(); }
const std::string& Cache::dir() const { return m_local->dir(); }
std::string Cache::db_path() const { return m_local->db_path(); }
uint64_t Cache::max_size() const { return m_local->max_size(); }
std::string Cache::remote_description() const { return m_remote_description; }

remote::Backend* Cache::remote_now() {
  if (!m_remote) return nullptr;
  if (m_remote_down_until_ms != 0 && m_local->now() < m_remote_down_until_ms) return nullptr;
  return m_remote.get();
}

void Cache::remote_failed(const std::string& what) {
  m_local->count(local::Counter::remote_errors);
  m_remote_slow = 0;
  m_remote_down_until_ms = m_local->now() + m_options.remote_down_for.count();
  m_remote_failure = what;
  if (m_remote_warned) return;
  m_remote_warned = true;
  m_local->warn("remote cache: " + what + "; going on with the local cache (retried after " +
                std::to_string(m_options.remote_down_for.count() / 1000) + " s)");
}

void Cache::remote_answered(std::chrono::steady_clock::time_point started, uint64_t bytes,
                            Bulk bulk) {
  if (bulk == Bulk::yes || bytes > k_slow_exempt_bytes || m_options.remote_slow_in_a_row <= 0)
    return;
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  auto slow = m_options.remote_slow_after.value_or(m_options.remote_op_timeout / 2);
  if (took < slow) {
    m_remote_slow = 0;
    return;
  }
  if (++m_remote_slow < m_options.remote_slow_in_a_row) return;
  remote_failed(m_remote_description + " answered slowly: " +
                std::to_string(m_options.remote_slow_in_a_row) + " operations in a row took " +
                std::to_string(slow.count()) + " ms or more (the operation timeout is " +
                std::to_string(m_options.remote_op_timeout.count()) + " ms; the last took " +
                std::to_string(took.count()) + " ms)");
}

std::optional<Entry> Cache::remote_fetch(const std::string& key,
                                         const std::vector<KeyField>* fields,
                                         const PayloadSelection& want, Outcome* outcome,
                                         const std::string* only_graph, const RemoteFetchHow& how) {
  Outcome ignored;
  if (!outcome) outcome = &ignored;
  *outcome = Outcome::failed;
  std::string value;
  {
    std::lock_guard lock(m_remote_mutex);
    remote::Backend* backend = remote_now();
    if (!backend) return std::nullopt;
    // The time to live is reset only once the entry is verified (below).
    remote::ValueLimits limits{m_remote_max_bytes,
                               m_remote_secret.empty() ? "" : remote::signed_prefix()};
    auto started = std::chrono::steady_clock::now();
    auto got = backend->get(key, 0, limits);
    if (got || got.failure().kind == remote::Failure::Kind::refused)
      remote_answered(started, got && *got ? (*got)->size() : 0,
                      how.pulling ? Bulk::yes : Bulk::no);
    if (!got && got.failure().kind == remote::Failure::Kind::refused) {
      *outcome = Outcome::rejected;
      // With a secret, only values that start as signed ones are asked for.
      bool unsigned_value = got.failure().refusal == remote::Failure::Refusal::prefix;
      std::string why = unsigned_value
                            ? std::string(remote::describe(remote::Opened::unsigned_entry)) +
                                  " (refused before its body was read)"
                            : got.failure().message;
      if (how.rejection) *how.rejection = why;
      if (how.report_rejection && !how.check_only) remote_rejected(key, why);
      return std::nullopt;
    }
    if (!got) {
      remote_failed(got.failure().message);
      return std::nullopt;
    }
    if (!*got) {
      if (how.count_miss && !how.check_only) m_local->count(local::Counter::remote_misses);
      *outcome = Outcome::miss;
      return std::nullopt;
    }
    value = std::move(**got);
  }
  uint64_t verified_bytes = value.size();  // for the refresh, once verified
  auto reject = [&](const std::string& why,
                    Rejection kind = Rejection::reported) -> std::optional<Entry> {
    bool needs_key = kind == Rejection::unsigned_host_code;
    *outcome = needs_key ? Outcome::needs_key : Outcome::rejected;
    if (how.rejection) *how.rejection = why;
    // A pull leaves host code it may not take without a secret, and says so in its report.
    if (how.report_rejection && !how.check_only && !(needs_key && how.pulling))
      remote_rejected(key, why, kind);
    return std::nullopt;
  };
  std::string_view record;
  remote::Opened opened = remote::open(key, value, m_remote_secret, record);
  if (opened != remote::Opened::good) return reject(remote::describe(opened));
  auto stored = decode_entry(record);
  value = std::string();  // decoded: the payloads are copies, so the value is held once
  if (!stored) return reject(stored.error().message);
  // Host machine code runs as the user: taken only when this machine checked its signature.
  for (const StoredPayload& p : stored->payloads)
    if (is_native_payload(p.name) && m_remote_secret.empty())
      return reject("it holds host machine code (payload '" + p.name +
                        "'), which is taken from the remote tier only when signed",
                    Rejection::unsigned_host_code);
  if (stored->info.key != key) return reject("it is the entry of key " + stored->info.key);
  for (const StoredPayload& p : stored->payloads)
    if (p.apart) return reject("payload '" + p.name + "' is missing");
  if (fields && !same_fields(*fields, stored->info.fields))
    return reject("its key fields differ from the request");
  // The fields hash to the key; the payloads `want` selects decode and match their checksums (the
  // record's checksum, or its signature, covers the bytes of the rest, checked when they are read).
  auto entry = verify_stored(*stored, want);
  if (!entry) return reject(entry.error().message);
  if (only_graph && entry->info.field("graph_hash") != *only_graph) {
    *outcome = Outcome::other_graph;
    return std::nullopt;
  }
  // What the cache layer cannot see (the runtime's check: what would fail every run of it).
  if (const ForeignCheck& check = how.check ? *how.check : m_options.check_foreign) {
    std::string why = check(*stored, &*entry);
    if (!why.empty()) return reject(why);
  }
  *outcome = Outcome::hit;
  if (how.check_only) return std::move(*entry);
  {
    std::lock_guard lock(m_remote_mutex);
    if (remote::Backend* backend = remote_now()) {
      std::string graph = entry->info.field("graph_hash");
      auto started = std::chrono::steady_clock::now();
      auto refreshed = backend->refresh(key, verified_bytes, m_remote_ttl_ms,
                                        graph.empty() ? std::string() : graph_marker(graph, key));
      if (!refreshed)
        remote_failed(refreshed.failure().message);
      else
        remote_answered(started, 0, how.pulling ? Bulk::yes : Bulk::no);
    }
  }
  m_local->count(local::Counter::remote_hits);
  m_local->count(local::Counter::time_saved_ms,
                 static_cast<uint64_t>(std::max<int64_t>(0, entry->info.compile_ms)));
  if (m_local->enabled()) {
    // Stored off this path (LocalFill), which keeps a local entry that exists by then: a verified
    // local entry is never replaced by a remote one.
    auto prepared = local::prepared_for_store(std::move(*stored));
    if (prepared) {
      prepared->info.created_ms = prepared->info.last_used_ms = m_local->now();
      m_fill->add(std::move(*prepared));
    }
  }
  return std::move(*entry);
}

void Cache::remote_rejected(const std::string& key, const std::string& why, Rejection kind) {
  m_local->count(local::Counter::remote_rejected);
  if (kind == Rejection::reported) {
    m_local->warn("rejected remote entry " + key + ": " + why);
    return;
  }
  if (m_native_warned) return;
  m_native_warned = true;
  m_local->warn("rejected remote entry " + key + ": " + why + "; set KILN_REMOTE_KEY (a secret " +
                "of at least " + std::to_string(k_min_remote_key_bytes) +
                " bytes shared by the fleet) on every machine to share CPU-target entries (further " +
                "such rejections are counted in remote_rejected, not reported)");
}

Expected<bool> Cache::remote_put(const StoredEntry& entry, Bulk bulk, bool leased) {
  if (m_remote_secret.empty() && holds_native_code(entry)) return false;
  std::string value = remote::seal(entry.info.key, encode_entry(entry), m_remote_secret);
  std::lock_guard lock(m_remote_mutex);
  remote::Backend* backend = leased ? m_remote.get() : remote_now();
  if (!backend) return make_error("the remote tier is down (", m_remote_failure, ")");
  // Without a secret, a signed value is kept: a machine that cannot sign must not replace the
  // entries of the machines that can (they would reject its value and compile again).
  auto started = std::chrono::steady_clock::now();
  auto put = backend->put(entry.info.key, value, m_remote_ttl_ms,
                          m_remote_secret.empty() ? remote::signed_prefix() : std::string());
  if (!put) {
    remote_failed(put.failure().message);
    return make_error(put.failure().message);
  }
  remote_answered(started, value.size(), bulk);
  if (std::string graph = entry.info.field("graph_hash"); !graph.empty()) {
    started = std::chrono::steady_clock::now();
    auto marked = backend->put(graph_marker(graph, entry.info.key), "", m_remote_ttl_ms);
    if (!marked) {
      remote_failed(marked.failure().message);
      return make_error(marked.failure().message);
    }
    remote_answered(started, 0, bulk);
  }
  m_local->count(local::Counter::remote_puts);
  return true;
}

Status Cache::replace_bad(const std::string& key, const std::vector<KeyField>& fields,
                          const Contents& contents, const std::string& why) {
  m_local->count(local::Counter::errors);
  m_local->warn("replaced bad entry " + key + ": " + why);
  return store(key, fields, contents);
}

Lookup Cache::lookup(const std::string& key, const std::vector<KeyField>& fields,
                     const PayloadSelection& want) {
  m_fill->wait_for(key);
  Lookup local = m_local->lookup(key, &fields, local::Store::Count::yes, want);
  if (local.hit() || !m_remote) return local;
  if (auto entry = remote_fetch(key, &fields, want)) {
    local.status = LookupStatus::hit;
    local.entry = std::move(*entry);
  }
  return local;
}

Lookup Cache::read(const std::string& key) {
  m_fill->wait_for(key);
  (void)m_local->flush();  // for display: hit counts and last use as of now
  return m_local->lookup(key, nullptr, local::Store::Count::no, PayloadSelection());
}

Status Cache::store(const std::string& key, const std::vector<KeyField>& fields,
                    const Contents& contents) {
  if (!m_local->enabled() && !m_remote) return make_error("cache: disabled: ", disabled_reason());
  auto entry = m_local->encode_contents(key, fields, contents);
  if (!entry) return entry.error();
  if (m_remote) (void)remote_put(*entry);  // a failed put is a warning, never a failed store
  if (!m_local->enabled()) return make_error("cache: disabled: ", disabled_reason());
  return m_local->insert(std::move(*entry));
}

std::string Cache::remote_verdict(const std::string& key, const std::vector<KeyField>& fields,
                                  std::string& why) {
  if (!m_remote) return "unavailable";
  Outcome outcome;
  RemoteFetchHow how;
  how.check_only = true;
  how.rejection = &why;
  (void)remote_fetch(key, &fields, PayloadSelection(), &outcome, nullptr, how);
  switch (outcome) {
    case Outcome::hit: return "present";
    case Outcome::miss: return "absent";
    case Outcome::rejected:
    case Outcome::needs_key: return "rejected";
    case Outcome::failed:
    case Outcome::other_graph: break;
  }
  return "unavailable";
}

Expected<PushReport> Cache::push() {
  if (!m_remote) return make_error("no remote cache configured (KILN_REMOTE_CACHE or --remote)");
  m_fill->drain();
  auto entries = m_local->list();
  if (!entries) return entries.error();
  PushReport report;
  for (const EntryInfo& info : *entries) {
    auto stored = m_local->read_full(info.key);
    if (!stored || !*stored) {
      ++report.skipped_bad;
      continue;
    }
    auto put = remote_put(**stored, Bulk::yes);
    if (!put) return make_error("remote cache: ", put.error().message);
    ++(*put ? report.pushed : report.skipped_native);
  }
  return report;
}

Expected<PullReport> Cache::pull(const std::optional<std::string>& graph_hash) {
  if (!m_remote) return make_error("no remote cache configured (KILN_REMOTE_CACHE or --remote)");
  if (!m_local->enabled()) return make_error("cache: disabled: ", disabled_reason());
  std::vector<std::string> keys;
  {
    std::lock_guard lock(m_remote_mutex);
    // Keys are 32 hex digits; lock names and anything else under the prefix are left alone.
    // With a graph, only the keys its markers name are fetched.
    std::string marker = graph_hash ? graph_marker(*graph_hash, "") : std::string();
    auto listed = m_remote->list(marker, size_t{1} << 20);
    if (!listed) return make_error("remote cache: ", listed.failure().message);
    for (std::string& k : *listed) {
      std::string key = k.substr(marker.size());
      if (key.size() == 32 && is_key_prefix(key)) keys.push_back(std::move(key));
    }
  }
  PullReport report;
  report.listed = keys.size();
  auto deadline = std::chrono::steady_clock::now() + m_options.remote_pull_budget;
  for (const std::string& key : keys) {
    if (std::chrono::steady_clock::now() >= deadline) {
      report.stopped = true;
      break;
    }
    ++report.read;
    if (m_local->contains(key)) {
      ++report.already_present;
      continue;
    }
    Outcome outcome;
    // Every payload is decoded and checked before the entry is stored here.
    RemoteFetchHow how;
    how.pulling = true;
    (void)remote_fetch(key, nullptr, PayloadSelection(), &outcome,
                       graph_hash ? &*graph_hash : nullptr, how);
    if (outcome == Outcome::hit) ++report.pulled;
    if (outcome == Outcome::rejected) ++report.rejected;
    if (outcome == Outcome::needs_key) ++report.needs_key;
    if (outcome == Outcome::failed) {
      m_fill->drain();
      std::lock_guard lock(m_remote_mutex);
      return make_error("remote cache: unavailable (", m_remote_failure, ")");
    }
  }
  m_fill->drain();  // pulled means stored
  return report;
}

Expected<Stats> Cache::stats() {
  m_fill->drain();
  return m_local->stats();
}
Status Cache::zero_stats() {
  m_fill->drain();
  return m_local->zero_stats();
}
Expected<std::vector<EntryInfo>> Cache::list() {
  m_fill->drain();
  return m_local->list();
}
Expected<std::vector<EntryInfo>> Cache::list_where(const KeyField& where) {
  return m_local->list_where(where);
}
Expected<bool> Cache::has_field(const std::string& name) { return m_local->has_field(name); }
Expected<std::vector<std::string>> Cache::keys_with_prefix(const std::string& prefix, int limit) {
  m_fill->drain();
  return m_local->keys_with_prefix(prefix, limit);
}
Expected<std::vector<Nearest>> Cache::nearest(const std::vector<KeyField>& request,
                                              const std::string& anchor) {
  m_fill->drain();
  return m_local->nearest(request, anchor);
}
Expected<VerifyReport> Cache::verify(Fix fix, const EntryCheck& check) {
  m_fill->drain();
  return m_local->verify(fix, check);
}
Expected<PruneReport> Cache::prune(std::optional<uint64_t> max_size,
                                   std::optional<uint64_t> older_than_s) {
  m_fill->drain();
  return m_local->prune(max_size, older_than_s);
}
Expected<PruneReport> Cache::clear() {
  m_fill->drain();
  return m_local->clear();
}
Expected<std::vector<StoredEntry>> Cache::export_entries() {
  m_fill->drain();
  return m_local->export_entries();
}

Expected<uint64_t> Cache::export_to(const std::function<Status(const StoredEntry&)>& take) {
  m_fill->drain();
  return m_local->export_to(take);
}
Expected<ImportReport> Cache::import_entries(const std::vector<StoredEntry>& entries) {
  // Every entry first: a bundle holding one that fails imports nothing.
  if (m_options.check_foreign) {
    for (const StoredEntry& entry : entries) {
      std::string why = m_options.check_foreign(entry, nullptr);
      if (!why.empty()) {
        ImportReport refused;
        refused.refused = "entry " + entry.info.key + ": " + why;
        return refused;
      }
    }
  }
  m_fill->drain();
  return m_local->import_entries(entries);
}

Expected<ImportReport> Cache::import_from(const EntrySource& next) {
  m_fill->drain();
  if (!m_options.check_foreign) return m_local->import_from(next);
  return m_local->import_from([&]() -> Expected<std::optional<StoredEntry>> {
    auto got = next();
    if (!got || !*got) return got;
    if (std::string why = m_options.check_foreign(**got, nullptr); !why.empty())
      return make_error("entry ", (*got)->info.key, ": ", why);
    return got;
  });
}
Status Cache::flush() {
  m_fill->drain();
  return m_local->flush();
}

}  // namespace kiln::cache
