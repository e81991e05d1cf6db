// Opening the cache: directory resolution, permissions, SQLite settings, schema migrations, and
// the degraded modes (no directory, unwritable directory, a file that is not a database).
#include "cache/cache.h"

#include "cache/key_lock.h"
#include "cache/sqlite.h"
#include "cache/units.h"

#include <fcntl.h>
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

// Schema migrations: k_migrations[v] takes a database from user_version v to v + 1. The last
// entry's target is the current schema version. Never edit a released step; append one.
constexpr const char* k_migrations[] = {
    // 0 -> 1: the first schema.
    "CREATE TABLE IF NOT EXISTS entries("
    "  key TEXT PRIMARY KEY NOT NULL,"
    "  summary TEXT NOT NULL,"
    "  compile_ms INTEGER NOT NULL,"
    "  stored_bytes INTEGER NOT NULL,"
    "  raw_bytes INTEGER NOT NULL,"
    "  field_count INTEGER NOT NULL,"
    "  payload_count INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL,"
    "  last_used_ms INTEGER NOT NULL,"
    "  hits INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS entries_by_last_used ON entries(last_used_ms);"
    "CREATE TABLE IF NOT EXISTS fields("
    "  key TEXT NOT NULL, name TEXT NOT NULL, value BLOB NOT NULL,"
    "  PRIMARY KEY(key, name)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS fields_by_value ON fields(name, value);"
    "CREATE TABLE IF NOT EXISTS payloads("
    "  key TEXT NOT NULL, ord INTEGER NOT NULL, name TEXT NOT NULL,"
    "  raw_size INTEGER NOT NULL, checksum INTEGER NOT NULL, data BLOB NOT NULL,"
    "  PRIMARY KEY(key, ord));"
    "CREATE TABLE IF NOT EXISTS stats(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);",
};
constexpr int64_t k_schema_version = std::size(k_migrations);

bool is_corruption(int code) { return code == sql::k_notadb || code == sql::k_corrupt; }

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

}  // namespace

std::string resolve_cache_dir(const std::string& dir) {
  if (!dir.empty()) return dir;
  if (std::string v = env("KILN_CACHE_DIR"); !v.empty()) return v;
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return v + "/kiln";
  if (std::string v = env("HOME"); !v.empty()) return v + "/.cache/kiln";
  return "";
}

std::unique_ptr<Cache> Cache::open(Options options) {
  std::unique_ptr<Cache> cache(new Cache());
  cache->m_options = std::move(options);
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
  cache->open_db();
  cache->m_last_flush_ms = cache->now();
  return cache;
}

Cache::~Cache() {
  std::lock_guard lock(m_mutex);
  if (m_db) (void)flush_locked();
}

std::string Cache::db_path() const { return m_dir + "/" + k_db_name; }

void Cache::warn(const std::string& message) const {
  if (m_options.warn) return m_options.warn(message);
  std::fprintf(stderr, "kiln: cache: %s\n", message.c_str());
}

int64_t Cache::now() const {
  if (m_options.now_ms) return m_options.now_ms();
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string Cache::disabled_reason() const {
  std::lock_guard lock(m_mutex);
  return m_disabled_reason;
}

void Cache::disable(const std::string& reason) {
  m_db.reset();
  m_enabled = false;
  m_disabled_reason = reason;
  warn(reason + "; continuing without a cache");
}

void Cache::open_db() {
  if (m_dir.empty())
    return disable("no cache directory (set KILN_CACHE_DIR or HOME, or pass --cache-dir)");
  if (Status made = make_dir(m_dir); !made) return disable(made.error().message);
  if (Status made = make_dir(m_dir + "/locks"); !made) return disable(made.error().message);
  for (int attempt = 0; attempt < 2; ++attempt) {
    // Create the file ourselves so that it starts out 0600 (SQLite gives -wal/-shm the same mode).
    int fd = ::open(db_path().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
      return disable(std::string("cannot open '") + db_path() + "': " + std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    ::close(fd);
    const FileId opened{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
    auto db = sql::Db::open(db_path());
    if (!db) return disable(db.error().message);
    m_db = std::move(*db);
    Status configured = configure_db();
    if (configured) {
      m_enabled = true;
      return;
    }
    int code = m_db->last_code();
    if (attempt == 0 && is_corruption(code)) {
      m_db.reset();
      if (Status moved = move_aside_corrupt_db(opened); !moved)
        return disable(moved.error().message);
      continue;
    }
    return disable(std::string("opening '") + db_path() +
                   "' failed: " + configured.error().message);
  }
}

Status Cache::configure_db() {
  m_db->set_busy_timeout(m_options.busy_timeout_ms);
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

Status Cache::migrate() {
  auto version = m_db->query_int("PRAGMA user_version");
  if (!version) return version.error();
  if (*version == k_schema_version) return Status::success();
  auto txn = sql::Transaction::begin(*m_db, sql::Transaction::Kind::write);
  if (!txn) return txn.error();
  version = m_db->query_int("PRAGMA user_version");  // another process may have migrated
  if (!version) return version.error();
  if (*version > k_schema_version)
    return make_error("the database has schema version ", std::to_string(*version),
                      ", newer than this kiln's ", std::to_string(k_schema_version));
  for (int64_t v = *version; v < k_schema_version; ++v)
    if (Status s = m_db->exec(k_migrations[v]); !s) return s;
  // PRAGMA takes no bound parameters; the value is our own constant.
  if (Status s = m_db->exec(std::string("PRAGMA user_version=") + std::to_string(k_schema_version));
      !s)
    return s;
  return txn->commit();
}

Status Cache::move_aside_corrupt_db(const FileId& bad) {
  // One process at a time, and only the file this process found bad: another may have moved it
  // and created a good database already, which must be left alone (and its -wal/-shm with it).
  KeyLock lock;
  std::string error;
  auto got = lock.acquire(m_dir + "/locks", "kiln.db-repair",
                          std::chrono::milliseconds(m_options.busy_timeout_ms), error);
  if (got != KeyLock::Result::acquired)
    return make_error("'", db_path(), "' is not a valid database and could not be repaired",
                      error.empty() ? "" : ": ", error);
  struct stat named {};
  if (::stat(db_path().c_str(), &named) != 0 ||
      !(FileId{static_cast<uint64_t>(named.st_dev), static_cast<uint64_t>(named.st_ino)} == bad))
    return Status::success();  // already replaced
  std::string aside = db_path() + ".corrupt-" + std::to_string(now() / 1000);
  if (std::rename(db_path().c_str(), aside.c_str()) != 0)
    return make_error("'", db_path(), "' is not a valid database and moving it to '", aside,
                      "' failed: ", std::strerror(errno));
  std::remove((db_path() + "-wal").c_str());
  std::remove((db_path() + "-shm").c_str());
  warn(make_error("'", db_path(), "' is not a valid database; moved it to '", aside,
                  "' and started a new one")
           .message);
  return Status::success();
}

}  // namespace kiln::cache
