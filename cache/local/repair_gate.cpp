// flock on one lasting gate file, polled up to a bound (cache/key_lock.h's flock_until).
#include "cache/local/repair_gate.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kiln::cache::local {

KeyLock::Result RepairGate::enter(const std::string& locks_dir, Mode mode,
                                  std::chrono::milliseconds wait, std::string& error) {
  leave();
  std::string path = locks_dir + "/kiln.db-repair.gate";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    error = "cannot open '" + path + "': " +
            (errno == ELOOP ? std::string("it is a symbolic link") : std::strerror(errno));
    return KeyLock::Result::failed;
  }
  auto got = flock_until(fd, mode == Mode::shared ? LOCK_SH : LOCK_EX,
                         std::chrono::steady_clock::now() + wait, path, error);
  if (got != KeyLock::Result::acquired) {
    ::close(fd);
    return got;
  }
  m_fd = fd;
  return got;
}

void RepairGate::leave() {
  if (m_fd < 0) return;
  ::close(m_fd);  // closing drops the flock
  m_fd = -1;
}

}  // namespace kiln::cache::local
