// Stores verified remote entries in the local tier on a thread of its own, so that a remote hit
// returns as soon as the entry is fetched and checked (writing a fresh entry into SQLite's WAL
// costs about as much as the fetch itself). Nothing queued is lost: wait_for(key) blocks until
// that key's entry is stored, drain() until every queued one is, and the destructor drains.
#pragma once

#include "cache/entry.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace kiln::cache {

namespace local {
class Store;
}

class LocalFill {
public:
  explicit LocalFill(local::Store& store) : m_store(store) {}
  ~LocalFill();
  LocalFill(const LocalFill&) = delete;
  LocalFill& operator=(const LocalFill&) = delete;

  // Queues `entry` (in the encodings the store keeps); it is stored unless the local tier holds
  // the key by then (a local entry is never replaced by a remote one). Starts the thread on first
  // use; a failed insert is a warning.
  void add(StoredEntry entry);
  // Returns once `key` is not queued or being stored.
  void wait_for(const std::string& key);
  // Returns once nothing is queued or being stored.
  void drain();

private:
  void run();

  local::Store& m_store;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::deque<StoredEntry> m_queue;
  std::multiset<std::string> m_keys;  // queued or being stored, once per queued entry
  bool m_stop = false;
  std::thread m_thread;
};

}  // namespace kiln::cache
