// The local fill's thread: one insert at a time, in the order the remote hits came.
#include "cache/local_fill.h"

#include "cache/local/store.h"

#include <system_error>

namespace kiln::cache {

LocalFill::~LocalFill() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_changed.notify_all();
  if (m_thread.joinable()) m_thread.join();  // the thread stores what is queued before it stops
}

void LocalFill::add(StoredEntry entry) {
  std::unique_lock lock(m_mutex);
  if (!m_thread.joinable()) {
    try {
      m_thread = std::thread([this] { run(); });
    } catch (const std::system_error&) {
      // No thread to be had: store it here and now, as before there was a fill thread.
      lock.unlock();
      (void)m_store.insert(std::move(entry), local::Store::Checkpoint::no,
                           local::Store::IfPresent::keep);
      return;
    }
  }
  m_keys.insert(entry.info.key);
  m_queue.push_back(std::move(entry));
  m_changed.notify_all();
}

void LocalFill::wait_for(const std::string& key) {
  std::unique_lock lock(m_mutex);
  m_changed.wait(lock, [&] { return m_keys.count(key) == 0; });
}

void LocalFill::drain() {
  std::unique_lock lock(m_mutex);
  m_changed.wait(lock, [&] { return m_keys.empty(); });
}

void LocalFill::run() {
  std::unique_lock lock(m_mutex);
  while (true) {
    m_changed.wait(lock, [&] { return m_stop || !m_queue.empty(); });
    if (m_queue.empty()) return;  // stopping, and nothing left to store
    StoredEntry entry = std::move(m_queue.front());
    m_queue.pop_front();
    lock.unlock();
    std::string key = entry.info.key;
    Status stored = m_store.insert(std::move(entry), local::Store::Checkpoint::no,
                                   local::Store::IfPresent::keep);
    if (!stored) m_store.warn("storing remote entry " + key + ": " + stored.error().message);
    lock.lock();
    m_keys.erase(m_keys.find(key));
    m_changed.notify_all();
  }
}

}  // namespace kiln::cache
