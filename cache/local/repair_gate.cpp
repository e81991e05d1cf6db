// flock on one lasting gate file, polled up to a bound.
#include "cache/local/repair_gate.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace kiln::cache::local {

RepairGate::Result RepairGate::enter(const std::string& locks_dir, Mode mode,
                                     std::chrono::milliseconds wait, std::string& error) {
  leave();
  std::string path = locks_dir + "/kiln.db-repair.gate";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    error = "cannot open '" + path + "': " +
            (errno == ELOOP ? std::string("it is a symbolic link") : std::strerror(errno));
    return Result::failed;
  }
  int operation = (mode == Mode::shared ? LOCK_SH : LOCK_EX) | LOCK_NB;
  auto deadline = std::chrono::steady_clock::now() + wait;
  auto pause = std::chrono::milliseconds(1);
  while (::flock(fd, operation) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      error = "cannot lock '" + path + "': " + std::strerror(errno);
      ::close(fd);
      return Result::failed;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      return Result::timed_out;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  m_fd = fd;
  return Result::entered;
}

void RepairGate::leave() {
  if (m_fd < 0) return;
  ::close(m_fd);  // closing drops the flock
  m_fd = -1;
}

}  // namespace kiln::cache::local
