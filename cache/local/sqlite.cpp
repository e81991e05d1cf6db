// RAII wrappers over SQLite: the only translation unit besides the schema that talks to sqlite3.
#include "cache/local/sqlite.h"

#include <sqlite3.h>

namespace kiln::cache::sql {

Statement::~Statement() {
  if (!m_stmt) return;
  sqlite3_reset(m_stmt);
  sqlite3_clear_bindings(m_stmt);
}

Statement& Statement::bind(int index, int64_t value) {
  sqlite3_bind_int64(m_stmt, index, value);
  return *this;
}

Statement& Statement::bind_text(int index, std::string_view text) {
  sqlite3_bind_text64(m_stmt, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}

Statement& Statement::bind_blob(int index, std::string_view bytes) {
  // A zero-length blob still binds as a blob, not NULL.
  static const char k_empty = 0;
  sqlite3_bind_blob64(m_stmt, index, bytes.empty() ? &k_empty : bytes.data(), bytes.size(),
                      SQLITE_TRANSIENT);
  return *this;
}

Expected<bool> Statement::step() {
  int rc = sqlite3_step(m_stmt);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return m_db->fail(sqlite3_sql(m_stmt));
}

Status Statement::run() {
  for (;;) {
    auto row = step();
    if (!row) return row.error();
    if (!*row) return Status::success();
  }
}

int64_t Statement::column_int64(int column) const { return sqlite3_column_int64(m_stmt, column); }

std::string Statement::column_text(int column) const {
  const unsigned char* text = sqlite3_column_text(m_stmt, column);
  int size = sqlite3_column_bytes(m_stmt, column);
  return text ? std::string(reinterpret_cast<const char*>(text), size) : std::string();
}

std::string_view Statement::column_blob_view(int column) const {
  const void* data = sqlite3_column_blob(m_stmt, column);
  int size = sqlite3_column_bytes(m_stmt, column);
  return data ? std::string_view(static_cast<const char*>(data), size) : std::string_view();
}

std::string Statement::column_blob(int column) const {
  const void* data = sqlite3_column_blob(m_stmt, column);
  int size = sqlite3_column_bytes(m_stmt, column);
  return data ? std::string(static_cast<const char*>(data), size) : std::string();
}

Expected<std::unique_ptr<Db>> Db::open(const std::string& path) {
  sqlite3* handle = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &handle,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
                          SQLITE_OPEN_NOFOLLOW,
                      nullptr);
  if (rc != SQLITE_OK) {
    std::string message = handle ? sqlite3_errmsg(handle) : sqlite3_errstr(rc);
    sqlite3_close_v2(handle);
    return make_error("sqlite: opening '", path, "' failed: ", message);
  }
  sqlite3_extended_result_codes(handle, 0);
  // Closing must not write: no checkpoint on close, and the WAL file stays (deleting it, then
  // recreating it on the next open, costs writes and syncs on every process's exit).
  sqlite3_db_config(handle, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  int persist = 1;
  sqlite3_file_control(handle, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  return std::unique_ptr<Db>(new Db(handle));
}

Db::~Db() {
  for (auto& [sql, stmt] : m_statements) sqlite3_finalize(stmt);
  sqlite3_close_v2(m_db);
}

Error Db::fail(std::string_view what) {
  m_last_code = sqlite3_errcode(m_db) & 0xff;
  return make_error("sqlite: ", what, ": ", sqlite3_errmsg(m_db));
}

std::string Db::last_message() const { return sqlite3_errmsg(m_db); }

Status Db::exec(const std::string& sql) {
  if (sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) return fail(sql);
  return Status::success();
}

Expected<Statement> Db::prepare(const char* sql) {
  auto it = m_statements.find(std::string_view(sql));
  if (it != m_statements.end()) return Statement(*this, it->second);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(m_db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) != SQLITE_OK)
    return fail(sql);
  m_statements.emplace(sql, stmt);
  return Statement(*this, stmt);
}

Expected<std::vector<std::string>> Db::integrity_problems() {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(m_db, "PRAGMA integrity_check(20)", -1, &stmt, nullptr) != SQLITE_OK)
    return fail("PRAGMA integrity_check");
  std::vector<std::string> out;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(stmt, 0);
    std::string line = text ? reinterpret_cast<const char*>(text) : "";
    if (line != "ok") out.push_back(std::move(line));
  }
  if (rc != SQLITE_DONE) {
    Error error = fail("PRAGMA integrity_check");
    sqlite3_finalize(stmt);
    return error;
  }
  sqlite3_finalize(stmt);
  return out;
}

Expected<int64_t> Db::query_int(const char* sql) {
  auto stmt = prepare(sql);
  if (!stmt) return stmt.error();
  auto row = stmt->step();
  if (!row) return row.error();
  if (!*row) return make_error("sqlite: ", sql, ": no row");
  return stmt->column_int64(0);
}

void Db::rollback() {
  // SQLite may already have rolled back by itself (e.g. after SQLITE_FULL); keep the error code
  // of the failure that got us here rather than "no transaction is active".
  if (!sqlite3_get_autocommit(m_db)) sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Db::set_busy_timeout(int ms) { sqlite3_busy_timeout(m_db, ms); }

bool Db::in_transaction() const { return !sqlite3_get_autocommit(m_db); }

Expected<Transaction> Transaction::begin(Db& db, Kind kind) {
  auto begin = db.prepare(kind == Kind::write ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED");
  if (!begin) return begin.error();
  if (Status s = begin->run(); !s) return s.error();
  return Transaction(db);
}

Transaction::~Transaction() {
  if (m_db) m_db->rollback();
}

Status Transaction::commit() {
  Db* db = m_db;
  m_db = nullptr;
  auto commit = db->prepare("COMMIT");
  Status status = commit ? commit->run() : Status(commit.error());
  if (!status) db->rollback();
  return status;
}

}  // namespace kiln::cache::sql
