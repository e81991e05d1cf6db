// Opening the cache: directory resolution, permissions, SQLite settings, schema migrations, and
// the degraded modes (no directory, unwritable directory, a file that is not a database).
#include "cache/local/store.h"

#include "cache/local/repair_gate.h"
#include "cache/local/migrate.h"
#include "cache/local/sqlite.h"
#include "cache/units.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

namespace kiln::cache {
namespace {

constexpr const char* k_db_name = "kiln.db";


std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// Creates `dir` (0700 for the folders made here); fails with the reason.
Status make_dir(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return Status::success();
  std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return make_error("cannot create '", dir, "': ", std::strerror(errno));
  if (!std::filesystem::is_directory(dir, ec)) return make_error("'", dir, "' is not a directory");
  return Status::success();
}

// Whether a group-writable file is still the owner's alone: its group is the owner's user-private
// group (named as the user, the user's primary group, no other members listed). A shared primary
// group such as "users" lists nobody in gr_mem, so the name must match too.
bool private_group(gid_t gid) {
  const passwd* me = ::getpwuid(::geteuid());
  const group* g = ::getgrgid(gid);
  if (!g || !me || gid != me->pw_gid || std::strcmp(g->gr_name, me->pw_name) != 0) return false;
  for (char** member = g->gr_mem; *member; ++member)
    if (std::strcmp(*member, me->pw_name) != 0) return false;
  return true;
}

}  // namespace

Status local::check_private(const std::string& path, const struct stat& st, const char* what) {
  if (st.st_uid != ::geteuid())
    return make_error(what, " '", path, "' belongs to another user (uid ", std::to_string(st.st_uid),
                      "): it could hold code kiln would run as you; use a cache folder of your own");
  bool others_write = (st.st_mode & S_IWOTH) != 0;
  bool group_write = (st.st_mode & S_IWGRP) != 0 && !private_group(st.st_gid);
  if (others_write || group_write) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return make_error(what, " '", path, "' is writable by other users (mode ", mode,
                      "): anyone who can write it could replace the code kiln runs; fix it with "
                      "`chmod go-w '", path, "'`");
  }
  return Status::success();
}

std::string resolve_cache_dir(const std::string& dir) {
  if (!dir.empty()) return dir;
  if (std::string v = env("KILN_CACHE_DIR"); !v.empty()) return v;
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return v + "/kiln";
  if (std::string v = env("HOME"); !v.empty()) return v + "/.cache/kiln";
  return "";
}

}  // namespace kiln::cache

namespace kiln::cache::local {

std::unique_ptr<Store> Store::open(const Options& options) {
  std::unique_ptr<Store> cache(new Store());
  cache->m_options = options;
  cache->m_dir = resolve_cache_dir(cache->m_options.dir);
  if (!cache->m_dir.empty()) {
    std::error_code ec;
    auto absolute = std::filesystem::absolute(cache->m_dir, ec);
    if (!ec) cache->m_dir = absolute.lexically_normal().string();
    if (cache->m_dir.size() > 1 && cache->m_dir.back() == '/') cache->m_dir.pop_back();
  }
  if (cache->m_options.max_size) {
    cache->m_max_size = *cache->m_options.max_size;
  } else if (std::string v = env("KILN_CACHE_MAX_SIZE"); !v.empty()) {
    auto size = parse_size(v);
    if (size)
      cache->m_max_size = *size;
    else
      cache->warn(std::string("KILN_CACHE_MAX_SIZE: ") + size.error().message + "; using 2 GiB");
  }
  cache->open_db(cache->m_options.create);
  return cache;
}

Store::~Store() {
  std::lock_guard lock(m_mutex);
  bool pending = !m_pending_touches.empty();
  for (uint64_t v : m_pending) pending = pending || v != 0;
  if (m_db && pending) (void)flush_locked();
}

std::string Store::db_path() const { return m_dir + "/" + k_db_name; }

void Store::warn(const std::string& message) const {
  std::lock_guard lock(m_warn_mutex);  // callers on many threads, and the local fill's
  if (m_options.warn) return m_options.warn(message);
  std::fprintf(stderr, "kiln: cache: %s\n", message.c_str());
}

int64_t Store::now() const {
  if (m_options.now_ms) return m_options.now_ms();
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string Store::disabled_reason() const {
  std::lock_guard lock(m_mutex);
  return m_disabled_reason;
}

void Store::disable(const std::string& reason, Quiet quiet) {
  m_db.reset();
  m_enabled = false;
  m_disabled_reason = reason;
  if (quiet == Quiet::no) warn(reason + "; continuing without a cache");
}

// The cache folder must be a directory of the user's alone (FORMAT.md, "Trust"): checked before
// kiln writes anything into it.
Status Store::check_cache_dir() {
  struct stat st {};
  if (::stat(m_dir.c_str(), &st) != 0)
    return make_error("cannot read '", m_dir, "': ", std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return make_error("'", m_dir, "' is not a directory");
  return check_private(m_dir, st, "cache folder");
}

// The cache folder, its locks folder and the database must be the user's alone (FORMAT.md,
// "Trust"), and nothing inside the folder is reached through a symbolic link.
Status Store::check_folder() {
  if (Status s = check_cache_dir(); !s) return s;
  struct stat st {};
  std::string locks = m_dir + "/locks";
  if (::lstat(locks.c_str(), &st) != 0)
    return make_error("cannot read '", locks, "': ", std::strerror(errno));
  if (S_ISLNK(st.st_mode))
    return make_error("'", locks, "' is a symbolic link; kiln follows no links in its cache folder");
  if (!S_ISDIR(st.st_mode))
    return make_error("'", locks, "' is not a directory (kiln keeps its locks there: is '", m_dir,
                      "' a cache folder?)");
  if (Status s = check_private(locks, st, "lock folder"); !s) return s;
  // SQLite reads the WAL and shared-memory files beside the database, and the usage file is
  // mapped: each, when there, must be a regular file of the user's alone too (one left from a
  // time the folder was shared would otherwise feed the cache).
  for (const char* name : {"kiln.db-wal", "kiln.db-shm", "usage"}) {
    std::string path = m_dir + "/" + name;
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode))
      return make_error("'", path, "' is a symbolic link; kiln follows no links in its cache "
                                   "folder");
    if (!S_ISREG(st.st_mode)) return make_error("'", path, "' is not a regular file");
    if (Status s = check_private(path, st, "cache file"); !s) return s;
  }
  return Status::success();
}

void Store::open_db(bool create) {
  if (m_dir.empty())
    return disable("no cache directory (set KILN_CACHE_DIR or HOME, or pass --cache-dir)");
  if (!create) {
    struct stat st {};
    if (::stat(db_path().c_str(), &st) != 0)
      return disable(k_no_cache_reason + ("'" + m_dir + "'"), Quiet::yes);
  }
  if (Status made = make_dir(m_dir); !made) return disable(made.error().message);
  // A folder refused is left as it was: no locks folder made in it.
  if (Status trusted = check_cache_dir(); !trusted) return disable(trusted.error().message);
  if (Status made = make_dir(m_dir + "/locks"); !made) return disable(made.error().message);
  if (Status trusted = check_folder(); !trusted) return disable(trusted.error().message);
  for (int attempt = 0; attempt < 2; ++attempt) {
    m_damaged.clear();
    // Shared with other openers, never open while a repair renames the file and removes its
    // -wal and -shm: SQLite would pair the new file with the old journal.
    RepairGate gate;
    std::string gate_error;
    auto passed = gate.enter(m_dir + "/locks", RepairGate::Mode::shared,
                             std::chrono::milliseconds(m_options.busy_timeout_ms), gate_error);
    if (passed == KeyLock::Result::failed) return disable(gate_error);
    if (passed == KeyLock::Result::timed_out)
      return disable("another process has been repairing '" + db_path() + "' for over " +
                     std::to_string(m_options.busy_timeout_ms) + " ms");
    // Create the file ourselves so that it starts out 0600 (SQLite gives -wal/-shm the same mode).
    int fd = ::open(db_path().c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == ELOOP)
      return disable("'" + db_path() + "' is a symbolic link; kiln follows no links in its cache "
                     "folder");
    if (fd < 0)
      return disable(std::string("cannot open '") + db_path() + "': " + std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    ::close(fd);
    if (!S_ISREG(st.st_mode)) return disable("'" + db_path() + "' is not a regular file");
    if (Status s = check_private(db_path(), st, "cache database"); !s)
      return disable(s.error().message);
    const FileId opened{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
    auto db = sql::Db::open(db_path());
    if (!db) return disable(db.error().message);
    m_db = std::move(*db);
    Status configured = configure_db(st.st_size == 0);
    if (configured) {
      if (!m_usage) m_usage = std::make_unique<Usage>(m_dir);
      m_opened = opened;
      m_enabled = true;
      return;
    }
    int code = m_db->last_code();
    if (attempt == 0 && (sql::is_malformed_code(code) || !m_damaged.empty())) {
      std::string why = m_damaged.empty() ? "SQLite: malformed" : m_damaged;
      m_db.reset();
      gate.leave();  // the repair needs the gate to itself
      if (Status moved = move_aside_corrupt_db(opened, Replace::move_aside, why); !moved)
        return disable(moved.error().message);
      continue;
    }
    return disable(std::string("opening '") + db_path() +
                   "' failed: " + configured.error().message);
  }
}

Status Store::configure_db(bool new_file) {
  m_db->set_busy_timeout(m_options.busy_timeout_ms);
  // A new database gives freed pages back without a rewrite (FORMAT.md, "Size cap and
  // eviction"). The setting must come before the first table, and before WAL, which writes the
  // file's first page; on an existing database the pragma would write, so it is left out there
  // (an empty file's database may already be in its WAL: then it has pages).
  if (new_file) {
    auto pages = m_db->query_int("PRAGMA page_count");
    if (!pages) return pages.error();
    if (*pages == 0) {
      if (Status s = m_db->exec("PRAGMA auto_vacuum=INCREMENTAL"); !s) return s;
    }
  }
  // Switching to WAL can answer "database is locked" without calling the busy handler while
  // another process creates or converts the same database: retry, within the busy timeout.
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(m_options.busy_timeout_ms);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    Status s = m_db->exec("PRAGMA journal_mode=WAL");
    if (s) break;
    if (m_db->last_code() != sql::k_busy || std::chrono::steady_clock::now() >= deadline) return s;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  if (Status s = m_db->exec("PRAGMA synchronous=NORMAL"); !s) return s;
  return migrate();
}

Status Store::migrate() {
  auto damaged = [&](const std::string& why) {
    m_damaged = why;
    return make_error("the database's schema is damaged: ", why);
  };
  int64_t version = 0;
  {
    // The version and the tables from one snapshot: a newer kiln's migration committed between
    // two reads would look like a table gone.
    auto read = sql::Transaction::begin(*m_db, sql::Transaction::Kind::read);
    if (!read) return read.error();
    auto read_version = m_db->query_int("PRAGMA user_version");
    if (!read_version) return read_version.error();
    version = *read_version;
    if (version == k_schema_version) {
      auto missing = missing_table(*m_db);
      if (!missing) return missing.error();  // a query that failed (busy, I/O): not damage
      if (!missing->empty()) return damaged("no table '" + *missing + "'");
      return Status::success();
    }
  }
  if (version < 0) return damaged("schema version " + std::to_string(version));
  auto txn = sql::Transaction::begin(*m_db, sql::Transaction::Kind::write);
  if (!txn) return txn.error();
  auto again = m_db->query_int("PRAGMA user_version");  // another process may have migrated
  if (!again) return again.error();
  version = *again;
  if (version == k_schema_version) return Status::success();
  if (version > k_schema_version)
    return make_error("the database has schema version ", std::to_string(version),
                      ", newer than this kiln's ", std::to_string(k_schema_version));
  MigrationReport report;
  (void)m_db->take_last_code();  // the code below is this migration's
  if (Status s = migrate_schema(*m_db, version, report); !s) {
    // An SQL error (not a busy, full or read-only database): the tables are not what the
    // version says (a table of the next version already there, one of this version gone).
    if (m_db->last_code() != sql::k_error) return s;
    return damaged("schema version " + std::to_string(version) +
                   " does not migrate: " + m_db->last_message());
  }
  if (Status s = txn->commit(); !s) return s;
  give_back_locked(GiveBack::all);  // the tables a migration dropped (auto_vacuum keeps them)
  if (report.converted || report.dropped)
    warn(make_error("migrated '", db_path(), "' from schema version ", std::to_string(version),
                    " to ", std::to_string(k_schema_version), ": ",
                    std::to_string(report.converted), " entries kept, ",
                    std::to_string(report.dropped), " bad ones dropped")
             .message);
  return Status::success();
}

void Store::remove_moved_aside() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(m_dir, ec)) {
    if (e.path().filename().string().rfind("kiln.db.corrupt-", 0) != 0) continue;
    std::filesystem::remove(e.path(), ec);
  }
}

void Store::forget_last_code() {
  if (m_db) (void)m_db->take_last_code();
}

bool Store::recover_if_malformed_locked() {
  // Other failures keep their code: a full disk or read-only file turns the store off after.
  if (!m_db || !sql::is_malformed_code(m_db->last_code())) return false;
  (void)m_db->take_last_code();
  return replace_malformed_db().ok();
}

Status Store::replace_malformed_db(Replace how) {
  m_db.reset();
  m_enabled = false;
  if (Status moved = move_aside_corrupt_db(m_opened, how); !moved) {
    disable(moved.error().message);
    return moved;
  }
  // Created whatever Options::create says: the cache was there, and is replaced.
  open_db(true);
  if (!m_db) return disabled_error();
  checkpoint_locked();  // the new database's first pages, out of the WAL
  return Status::success();
}

Status Store::move_aside_corrupt_db(const FileId& bad, Replace how, const std::string& why) {
  // One process at a time, with no process opening the database meanwhile, and only the file
  // this process found bad: another may have moved it and created a good database already, which
  // must be left alone (and its -wal/-shm with it).
  RepairGate gate;
  std::string error;
  auto got = gate.enter(m_dir + "/locks", RepairGate::Mode::exclusive,
                        std::chrono::milliseconds(m_options.busy_timeout_ms), error);
  if (got != KeyLock::Result::acquired)
    return make_error("'", db_path(), "' is not a valid database and could not be repaired",
                      error.empty() ? "" : ": ", error);
  struct stat named {};
  if (::stat(db_path().c_str(), &named) != 0 ||
      !(FileId{static_cast<uint64_t>(named.st_dev), static_cast<uint64_t>(named.st_ino)} == bad))
    return Status::success();  // already replaced
  if (how == Replace::remove) {
    // Unlinked, the file's space comes back once the processes that have it open close it.
    if (std::remove(db_path().c_str()) != 0)
      return make_error("removing '", db_path(), "' failed: ", std::strerror(errno));
    std::remove((db_path() + "-wal").c_str());
    std::remove((db_path() + "-shm").c_str());
    return Status::success();
  }
  std::string aside = db_path() + ".corrupt-" + std::to_string(now() / 1000);
  if (std::rename(db_path().c_str(), aside.c_str()) != 0)
    return make_error("'", db_path(), "' is not a valid database and moving it to '", aside,
                      "' failed: ", std::strerror(errno));
  std::remove((db_path() + "-wal").c_str());
  std::remove((db_path() + "-shm").c_str());
  warn(make_error("'", db_path(), "' is not a valid database (", why, "); moved it to '",
                  aside, "' and started a new one")
           .message);
  return Status::success();
}

}  // namespace kiln::cache::local
