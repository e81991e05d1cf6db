// Bytes on disk: what the database's pages take, giving free pages back to the file system, and
// emptying the WAL (FORMAT.md, "Size cap and eviction").
#include "cache/local/store.h"

#include "cache/local/sqlite.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

namespace kiln::cache::local {
namespace {

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

Expected<Store::Space> Store::space_locked() {
  Space out;
  for (auto [sql, slot] : {std::pair{"PRAGMA page_size", &out.page_size},
                           std::pair{"PRAGMA page_count", &out.pages},
                           std::pair{"PRAGMA freelist_count", &out.free_pages},
                           // Page 1 and one root page per table and index: an empty database.
                           std::pair{"SELECT 1 + count(*) FROM sqlite_master WHERE rootpage > 0",
                                     &out.fixed_pages},
                           std::pair{"PRAGMA auto_vacuum", &out.auto_vacuum}}) {
    auto value = m_db->query_int(sql);
    if (!value) return value.error();
    *slot = static_cast<uint64_t>(*value);
  }
  // With auto_vacuum, page 2 maps where the others belong (as does every (page size / 5 + 1)th
  // page after it, which grow with the entries and count with them).
  if (out.auto_vacuum != 0 && out.pages >= 2) out.fixed_pages += 1;
  return out;
}

Store::DiskFiles Store::disk_files() const {
  return {file_size(db_path()), file_size(db_path() + "-wal")};
}

bool Store::give_back_locked(GiveBack how) {
  if (!m_db) return false;
  auto space = space_locked();
  if (!space || space->free_pages == 0) return false;
  uint64_t free_bytes = space->free_pages * space->page_size;
  uint64_t file_bytes = space->pages * space->page_size;
  // Free pages are reused by the next insert, so a few are left where they are; the file is
  // shrunk when they take it past the cap, or when they are a large share of it.
  bool over_cap = m_max_size != 0 && file_bytes > m_max_size + space->fixed_pages * space->page_size;
  bool large = free_bytes >= k_large_free_bytes && free_bytes * 4 >= file_bytes;
  if (how == GiveBack::if_due && !over_cap && !large) return false;
  // Failures (busy, say) are harmless: the pages stay free and the next write tries again.
  if (space->auto_vacuum == k_auto_vacuum_incremental) {
    (void)m_db->exec("PRAGMA incremental_vacuum");
    return true;
  }
  // A database made before kiln set auto_vacuum: VACUUM rewrites it once, incremental from then
  // on (the setting is in the file's header; the schema and its version are unchanged).
  if (Status s = m_db->exec("PRAGMA auto_vacuum=INCREMENTAL"); !s) return false;
  (void)m_db->exec("VACUUM");
  return true;
}

void Store::checkpoint_locked(Wait wait) {
  // A writer empties the WAL while it is here anyway, so that a reader's open finds nothing to
  // recover and the WAL never holds more than the last writes. The compile path never waits:
  // another process's reads keep it for the next write; prune and clear wait for them.
  if (!m_db) return;
  if (wait == Wait::no) m_db->set_busy_timeout(0);
  (void)m_db->exec("PRAGMA wal_checkpoint(TRUNCATE)");
  if (wait == Wait::no) m_db->set_busy_timeout(m_options.busy_timeout_ms);
}

void Store::settle_locked(uint64_t written, Checkpoint checkpoint) {
  bool gave_back = give_back_locked(GiveBack::if_due);
  if (gave_back || checkpoint == Checkpoint::yes || written >= k_large_write_bytes)
    checkpoint_locked();
}

Expected<uint64_t> Store::counted_bytes_locked(uint64_t stored_bytes) {
  auto space = space_locked();
  if (!space) return space.error();
  uint64_t used = space->pages - std::min(space->pages, space->free_pages + space->fixed_pages);
  return std::max(stored_bytes, used * space->page_size);
}

}  // namespace kiln::cache::local
