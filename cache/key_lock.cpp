// Per-key lock files: flock with polling up to a bound; the kernel drops a dead holder's lock.
#include "cache/key_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace kiln::cache {

KeyLock::KeyLock(KeyLock&& other) noexcept : m_fd(other.m_fd), m_path(std::move(other.m_path)) {
  other.m_fd = -1;
}

KeyLock& KeyLock::operator=(KeyLock&& other) noexcept {
  if (this != &other) {
    release();
    m_fd = other.m_fd;
    m_path = std::move(other.m_path);
    other.m_fd = -1;
  }
  return *this;
}

KeyLock::~KeyLock() { release(); }

void KeyLock::release() {
  if (m_fd < 0) return;
  // Unlink while still holding the lock: a waiter that then gets the old file sees it unlinked.
  ::unlink(m_path.c_str());
  ::close(m_fd);
  m_fd = -1;
}

KeyLock::Result KeyLock::acquire(const std::string& locks_dir, const std::string& key,
                                 std::chrono::milliseconds wait, std::string& error) {
  release();
  std::string path = locks_dir + "/" + key + ".lock";
  auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    // Never through a symbolic link: a link planted here must not create or lock its target.
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      error = "cannot open lock file '" + path + "': " +
              (errno == ELOOP ? std::string("it is a symbolic link") : std::strerror(errno));
      return Result::failed;
    }
    // Poll the lock until it is ours, the file is replaced, or time runs out.
    if (Result got = flock_until(fd, LOCK_EX, deadline, path, error); got != Result::acquired) {
      ::close(fd);
      return got;
    }
    struct stat held, named;
    bool same = ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
                held.st_ino == named.st_ino && held.st_dev == named.st_dev;
    if (same) {
      m_fd = fd;
      m_path = std::move(path);
      return Result::acquired;
    }
    ::close(fd);  // the previous holder unlinked it after we opened it: take the new file
  }
}

KeyLock::Result flock_until(int fd, int operation, std::chrono::steady_clock::time_point deadline,
                            const std::string& path, std::string& error) {
  auto pause = std::chrono::milliseconds(1);
  while (::flock(fd, operation | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      error = "cannot lock '" + path + "': " + std::strerror(errno);
      return KeyLock::Result::failed;
    }
    if (std::chrono::steady_clock::now() >= deadline) return KeyLock::Result::timed_out;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return KeyLock::Result::acquired;
}

}  // namespace kiln::cache
