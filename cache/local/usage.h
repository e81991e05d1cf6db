// Use of the local store recorded without writing: counters and per-entry hits in a shared,
// memory-mapped side file (`usage` beside kiln.db), merged into the database by later writes.
//
// A hit must not write or fsync. Updating mapped memory is neither: the kernel writes the pages
// back on its own schedule, and SQLite is only touched when something writes anyway (a store, a
// prune, `kiln stats`). Processes share the file; every update is one atomic operation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cache::local {

// The counters kept for `kiln stats`, in the order of the file's header (FORMAT.md).
enum class Counter : int {
  hits,
  misses,
  errors,
  time_saved_ms,
  remote_hits,
  remote_misses,
  remote_errors,
  remote_rejected,
  remote_puts,
  count_  // number of counters
};
inline constexpr int k_counter_count = static_cast<int>(Counter::count_);
const char* counter_name(Counter counter);  // "hits", "remote_hits", ... (the stats table's names)

// One entry's use since the last merge.
struct Touch {
  std::string key_prefix;  // the first 16 hex digits of the key
  uint64_t hits = 0;
  int64_t last_used_ms = 0;
};

class Usage {
public:
  // Maps `<dir>/usage`, creating it; an unusable file leaves the object unmapped (mapped() is
  // false) and callers keep use in memory instead.
  explicit Usage(const std::string& dir);
  ~Usage();
  Usage(const Usage&) = delete;
  Usage& operator=(const Usage&) = delete;

  bool mapped() const { return m_base != nullptr; }
  void add(Counter counter, uint64_t value);
  // Records one hit of `key` at `now_ms`; false when the entry table has no room for it.
  bool touch(const std::string& key, int64_t now_ms);
  // Takes (and zeroes) the counters and touches recorded so far, for merging into the database.
  // put_back() returns them when the merge failed.
  void take(uint64_t counters[k_counter_count], std::vector<Touch>& touches);
  void put_back(const uint64_t counters[k_counter_count], const std::vector<Touch>& touches);
  // Counters recorded and not yet taken.
  void peek(uint64_t counters[k_counter_count]) const;

private:
  unsigned char* m_base = nullptr;
};

}  // namespace kiln::cache::local
