// A per-key lock file shared between processes: flock(2), so a dead owner releases it at once.
#pragma once

#include "support/expected.h"

#include <chrono>
#include <string>

namespace kiln::cache {

// Holds the lock on `<locks_dir>/<key>.lock` while alive; unlinks the file on release so lock
// files do not pile up (acquire notices a file that was unlinked under it and retries).
class KeyLock {
public:
  enum class Result { acquired, timed_out, failed };

  KeyLock() = default;
  KeyLock(KeyLock&& other) noexcept;
  KeyLock& operator=(KeyLock&& other) noexcept;
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  ~KeyLock();

  // Waits up to `wait` for the lock; `error` gets the reason when the result is `failed`.
  Result acquire(const std::string& locks_dir, const std::string& key,
                 std::chrono::milliseconds wait, std::string& error);
  void release();

private:
  int m_fd = -1;
  std::string m_path;
};

// Polls flock(fd, operation | LOCK_NB) until it holds (acquired) or `deadline` passes
// (timed_out); `error` names `path` when the result is `failed`. Never closes `fd`.
KeyLock::Result flock_until(int fd, int operation, std::chrono::steady_clock::time_point deadline,
                            const std::string& path, std::string& error);

}  // namespace kiln::cache
