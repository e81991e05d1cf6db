// Thin RAII wrappers over SQLite: a connection with cached prepared statements, and transactions.
#pragma once

#include "support/expected.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::cache::sql {

// SQLite result codes the cache reacts to (values of SQLite's primary result codes).
inline constexpr int k_busy = 5;
inline constexpr int k_readonly = 8;
inline constexpr int k_ioerr = 10;
inline constexpr int k_error = 1;  // SQLITE_ERROR: an SQL error (no such table, ...)
inline constexpr int k_corrupt = 11;
inline constexpr int k_full = 13;
inline constexpr int k_cantopen = 14;
inline constexpr int k_notadb = 26;

// The codes with which SQLite calls a database file malformed.
inline bool is_malformed_code(int code) { return code == k_notadb || code == k_corrupt; }

class Db;

// A prepared statement borrowed from its Db's statement cache; resets itself and clears its
// bindings when it goes out of scope, so the next user starts clean.
class Statement {
public:
  Statement(Db& db, sqlite3_stmt* stmt) : m_db(&db), m_stmt(stmt) {}
  Statement(Statement&& other) noexcept : m_db(other.m_db), m_stmt(other.m_stmt) {
    other.m_stmt = nullptr;
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Parameters are 1-based, as in SQLite.
  Statement& bind(int index, int64_t value);
  Statement& bind_text(int index, std::string_view text);
  Statement& bind_blob(int index, std::string_view bytes);

  // true: a row is ready; false: done. Fails with SQLite's message (the Db keeps the code).
  Expected<bool> step();
  // Steps to completion, ignoring rows.
  Status run();

  int64_t column_int64(int column) const;
  std::string column_text(int column) const;
  std::string column_blob(int column) const;
  // Valid until the next step, reset or column call on this statement.
  std::string_view column_blob_view(int column) const;

private:
  Db* m_db;
  sqlite3_stmt* m_stmt;
};

// One connection. Not thread-safe: its owner serialises access.
class Db {
public:
  // Opens (creating if absent) the database file at `path` for reading and writing. Closing the
  // connection never checkpoints and keeps the WAL file, so that a reader's exit writes nothing.
  static Expected<std::unique_ptr<Db>> open(const std::string& path);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs SQL text without parameters (one or more statements).
  Status exec(const std::string& sql);
  // A statement from the cache, preparing it on first use.
  Expected<Statement> prepare(const char* sql);
  Expected<Statement> prepare(const std::string& sql) { return prepare(sql.c_str()); }
  // Runs a query returning one integer (e.g. PRAGMA user_version).
  Expected<int64_t> query_int(const char* sql);
  Expected<int64_t> query_int(const std::string& sql) { return query_int(sql.c_str()); }
  // What PRAGMA integrity_check reports (at most 20 lines); empty when the database is sound.
  Expected<std::vector<std::string>> integrity_problems();

  // Rolls back an open transaction, if any; does not touch last_code().
  void rollback();
  void set_busy_timeout(int ms);
  bool in_transaction() const;
  // Primary result code of the last failure seen on this connection (0 if none yet).
  int last_code() const { return m_last_code; }
  // As last_code(), and forgets it: the next failure starts afresh.
  int take_last_code() { return std::exchange(m_last_code, 0); }
  // SQLite's message for the last call that failed ("table apart already exists"), without
  // the statement that failed.
  std::string last_message() const;
  Error fail(std::string_view what);  // records the current error code and builds the message
  sqlite3* handle() { return m_db; }

private:
  explicit Db(sqlite3* db) : m_db(db) {}
  sqlite3* m_db;
  std::map<std::string, sqlite3_stmt*, std::less<>> m_statements;
  int m_last_code = 0;
};

// BEGIN IMMEDIATE (a write transaction, taking the write lock at once) or a deferred read
// transaction; rolls back in the destructor unless committed.
class Transaction {
public:
  enum class Kind { read, write };
  static Expected<Transaction> begin(Db& db, Kind kind);
  Transaction(Transaction&& other) noexcept : m_db(other.m_db) { other.m_db = nullptr; }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();
  Status commit();

private:
  explicit Transaction(Db& db) : m_db(&db) {}
  Db* m_db;
};

}  // namespace kiln::cache::sql
