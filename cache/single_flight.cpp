// get_or_create: one producer per key across processes; the others wait, then read its entry.
#include "cache/cache.h"

#include "cache/key_lock.h"

namespace kiln::cache {

Expected<Fetched> Cache::get_or_create(const std::string& key, const std::vector<KeyField>& fields,
                                       const Producer& producer, const PayloadSelection& want) {
  // The in-process mutex is never held while waiting or producing: the other party may be
  // another thread of this process.
  std::unique_lock lock(m_mutex);
  if (!m_db) {
    lock.unlock();
    return produce(key, fields, producer, Store::no, want);
  }
  Lookup first = lookup_locked(key, &fields, Count::no, want);
  if (first.hit()) {
    count_hit(first.entry);
    return Fetched{FetchSource::hit, std::move(first.entry)};
  }
  lock.unlock();
  if (first.status == LookupStatus::failure)
    return produce(key, fields, producer, Store::no, want);

  // Missed: take the key's lock, so that only one process produces it.
  KeyLock key_lock;
  std::string error;
  KeyLock::Result got = key_lock.acquire(m_dir + "/locks", key, m_options.lock_wait, error);
  if (got == KeyLock::Result::timed_out)
    warn(make_error("waited ", std::to_string(m_options.lock_wait.count()),
                    " ms for another process to produce ", key, "; producing it here")
             .message);
  if (got == KeyLock::Result::failed) warn(error);

  lock.lock();
  if (m_db && got == KeyLock::Result::acquired) {
    // The holder before us may have stored it while we waited.
    Lookup second = lookup_locked(key, &fields, Count::no, want);
    if (second.hit()) {
      count_hit(second.entry);
      return Fetched{FetchSource::hit, std::move(second.entry)};
    }
  }
  if (m_db) ++m_pending.misses;
  lock.unlock();
  // Still holding the key's lock, released on return.
  return produce(key, fields, producer, Store::yes, want);
}

Expected<Fetched> Cache::produce(const std::string& key, const std::vector<KeyField>& fields,
                                 const Producer& producer, Store store,
                                 const PayloadSelection& want) {
  auto contents = producer();
  if (!contents) return contents.error();
  Fetched out;
  out.entry.info.key = key;
  out.entry.info.fields = fields;
  sort_fields(out.entry.info.fields);
  out.entry.info.summary = contents->summary;
  out.entry.info.compile_ms = contents->compile_ms;
  out.entry.info.created_ms = out.entry.info.last_used_ms = now();
  for (const Payload& p : contents->payloads) out.entry.info.raw_bytes += p.bytes.size();
  if (store == Store::yes) {
    std::lock_guard lock(m_mutex);
    if (m_db && insert_locked(key, fields, *contents)) out.source = FetchSource::produced;
  }
  for (Payload& p : contents->payloads)
    if (want.wants(p.name)) out.entry.payloads.push_back(std::move(p));
  return out;
}

}  // namespace kiln::cache
