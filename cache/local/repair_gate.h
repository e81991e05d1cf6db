// The gate between opening the database and repairing it: openers pass shared, the repair of a
// malformed database exclusive, so that no process opens `kiln.db` (and with it whatever -wal and
// -shm lie beside it) while another renames it and removes them.
#pragma once

#include "cache/key_lock.h"

#include <chrono>
#include <string>

namespace kiln::cache::local {

class RepairGate {
public:
  enum class Mode { shared, exclusive };

  RepairGate() = default;
  RepairGate(const RepairGate&) = delete;
  RepairGate& operator=(const RepairGate&) = delete;
  ~RepairGate() { leave(); }

  // Waits up to `wait` to pass `locks_dir`/kiln.db-repair.gate (created 0600, never through a
  // symbolic link, never removed) in `mode`; `error` gets the reason when the result is `failed`.
  // The kernel lets go of a dead process's hold.
  KeyLock::Result enter(const std::string& locks_dir, Mode mode, std::chrono::milliseconds wait,
                        std::string& error);
  void leave();

private:
  int m_fd = -1;
};

}  // namespace kiln::cache::local
