// get_or_create: one producer per key across threads, processes (a per-host flock) and machines
// (a lease in the remote tier); the others wait for its entry.
#include "cache/cache.h"

#include "cache/key_lock.h"
#include "cache/local_fill.h"
#include "cache/local/store.h"
#include "cache/remote/backend.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <random>
#include <thread>

namespace kiln::cache {
namespace {

std::string lease_name(const std::string& key) { return "lock:" + key; }

// Identifies this producer in its lease: host, process, and a random part for threads.
std::string lease_owner() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  return std::string(host) + ":" + std::to_string(::getpid()) + ":" + std::to_string(rd());
}

// Renews a lease from its own thread and connection while the producer runs.
class LeaseKeeper {
public:
  LeaseKeeper(std::unique_ptr<remote::Backend> backend, std::string name, std::string owner,
              std::chrono::milliseconds lease)
      : m_backend(std::move(backend)), m_name(std::move(name)), m_owner(std::move(owner)),
        m_lease(lease), m_thread([this] { run(); }) {}
  ~LeaseKeeper() {
    {
      std::lock_guard lock(m_mutex);
      m_stop = true;
    }
    m_wake.notify_all();
    m_thread.join();
    (void)m_backend->release_lease(m_name, m_owner);
  }

private:
  void run() {
    std::unique_lock lock(m_mutex);
    while (!m_wake.wait_for(lock, m_lease / 3, [this] { return m_stop; }))
      (void)m_backend->renew_lease(m_name, m_owner, m_lease.count());
  }

  std::unique_ptr<remote::Backend> m_backend;
  std::string m_name, m_owner;
  std::chrono::milliseconds m_lease;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  std::thread m_thread;  // last: starts once the rest is built
};

}  // namespace

Expected<Fetched> Cache::get_or_create(const std::string& key, const std::vector<KeyField>& fields,
                                       const Producer& producer, const PayloadSelection& want,
                                       const ForeignCheck& check) {
  using local::Store;
  // Each call counts once: a local hit, or a local miss (served remotely or produced).
  auto local_hit = [&]() -> std::optional<Fetched> {
    m_fill->wait_for(key);  // a remote hit of this key still being stored here
    Lookup found = m_local->lookup(key, &fields, Store::Count::no, want);
    if (!found.hit()) return std::nullopt;
    m_local->record_hit(found.entry);
    return Fetched{FetchSource::hit, std::move(found.entry)};
  };
  // A rejected remote value is read again only while another machine may be replacing it, and
  // is reported (and counted) once per call however often it is read.
  Outcome last = Outcome::miss;
  bool rejected = false;
  // A remote miss counts once per call, and not at all when a later read hits (a read again
  // while another machine holds the lease is no new lookup): counted as the call returns.
  struct RemoteMiss {
    local::Store& store;
    bool missed = false, hit = false;
    ~RemoteMiss() {
      if (missed && !hit) store.count(local::Counter::remote_misses);
    }
  } remote_miss{*m_local};
  auto remote_hit = [&](bool waiting = false) -> std::optional<Fetched> {
    bool was_rejected = last == Outcome::rejected || last == Outcome::needs_key;
    if (!m_remote || (was_rejected && !waiting)) return std::nullopt;
    RemoteFetchHow how;
    how.report_rejection = !rejected;
    how.count_miss = false;
    if (check) how.check = &check;
    auto entry = remote_fetch(key, &fields, want, &last, nullptr, how);
    rejected = rejected || last == Outcome::rejected || last == Outcome::needs_key;
    remote_miss.missed = remote_miss.missed || last == Outcome::miss;
    if (!entry) return std::nullopt;
    remote_miss.hit = true;
    m_local->count(local::Counter::misses);
    return Fetched{FetchSource::remote_hit, std::move(*entry)};
  };

  if (!m_local->enabled() && !m_remote) return produce(key, fields, producer, false, want);
  if (m_local->enabled()) {
    if (auto hit = local_hit()) return std::move(*hit);
  }
  if (auto hit = remote_hit()) return std::move(*hit);

  // Missed in both tiers: one producer per host (the key's lock file), then per fleet (a lease).
  KeyLock key_lock;
  if (m_local->enabled()) {
    std::string error;
    KeyLock::Result got =
        key_lock.acquire(m_local->dir() + "/locks", key, m_options.lock_wait, error);
    if (got == KeyLock::Result::timed_out)
      m_local->warn(make_error("waited ", std::to_string(m_options.lock_wait.count()),
                               " ms for another process to produce ", key, "; producing it here")
                        .message);
    if (got == KeyLock::Result::failed) m_local->warn(error);
    if (got == KeyLock::Result::acquired) {
      // The holder before us may have stored it while we waited.
      if (auto hit = local_hit()) return std::move(*hit);
    }
  }
  if (auto hit = remote_hit()) return std::move(*hit);

  std::unique_ptr<LeaseKeeper> lease;
  if (m_remote) {
    std::string owner = lease_owner();
    auto deadline = std::chrono::steady_clock::now() + m_options.lock_wait;
    auto pause = std::chrono::milliseconds(10);
    for (;;) {
      std::optional<bool> taken;
      {
        std::lock_guard lock(m_remote_mutex);
        if (remote::Backend* backend = remote_now()) {
          auto started = std::chrono::steady_clock::now();
          auto got = backend->acquire_lease(lease_name(key), owner, m_options.remote_lease.count());
          if (got) {
            taken = *got;
            remote_answered(started, 0, Bulk::no);
          } else {
            remote_failed(got.failure().message);
          }
        }
      }
      if (!taken) break;  // the remote tier is down: produce here
      if (*taken) {
        lease = std::make_unique<LeaseKeeper>(m_remote_factory(), lease_name(key), owner,
                                              m_options.remote_lease);
        // The previous holder may have put it just before its lease went.
        if (auto hit = remote_hit()) return std::move(*hit);
        break;
      }
      // Another machine is producing it: wait for its entry, or for its lease to lapse.
      if (std::chrono::steady_clock::now() >= deadline) {
        m_local->warn(make_error("waited ", std::to_string(m_options.lock_wait.count()),
                                 " ms for another machine to produce ", key, "; producing it here")
                          .message);
        break;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
      if (auto hit = remote_hit(true)) return std::move(*hit);
    }
  }
  if (m_local->enabled()) m_local->count(local::Counter::misses);
  // Still holding the key's lock and lease, released on return (after the entry is stored).
  return produce(key, fields, producer, true, want, lease != nullptr);
}

Expected<Fetched> Cache::produce(const std::string& key, const std::vector<KeyField>& fields,
                                 const Producer& producer, bool store,
                                 const PayloadSelection& want, bool leased) {
  auto contents = producer();
  if (!contents) return contents.error();
  Fetched out;
  out.entry.info.key = key;
  out.entry.info.fields = fields;
  sort_fields(out.entry.info.fields);
  out.entry.info.summary = contents->summary;
  out.entry.info.compile_ms = contents->compile_ms;
  out.entry.info.created_ms = out.entry.info.last_used_ms = m_local->now();
  for (const Payload& p : contents->payloads) out.entry.info.raw_bytes += p.bytes.size();
  if (store) {
    auto entry = m_local->encode_contents(key, fields, *contents);
    if (entry) {
      if (m_remote) (void)remote_put(*entry, Bulk::no, leased);  // a failed put is a warning
      if (m_local->enabled() && m_local->insert(std::move(*entry)))
        out.source = FetchSource::produced;
    }
  }
  for (Payload& p : contents->payloads)
    if (want.wants(p.name)) out.entry.payloads.push_back(std::move(p));
  return out;
}

}  // namespace kiln::cache
