// Helpers for cache tests: a scratch directory and small entries.
#pragma once

#include "cache/cache.h"
#include "cache/entry_codec.h"
#include "cache/local/sqlite.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kiln::cache::testing {

// What an empty cache's database takes and the cap does not count: page 1, one root page per
// table and index, the first pointer map (11 pages of 4 KiB).
inline constexpr uint64_t k_empty_database = 11 * 4096;

// The size of the file at `path`; 0 when there is none.
inline uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// The root page of table or index `name` in the database at `db_path`, after a checkpoint (so
// that page is in the database file itself, where tests damage it).
inline int64_t root_page(const std::string& db_path, const std::string& name) {
  auto db = sql::Db::open(db_path);
  EXPECT_TRUE(db.ok());
  EXPECT_TRUE((*db)->exec("PRAGMA wal_checkpoint(TRUNCATE)").ok());
  auto st = (*db)->prepare("SELECT rootpage FROM sqlite_master WHERE name = ?");
  EXPECT_TRUE(st.ok());
  st->bind_text(1, name);
  auto row = st->step();
  EXPECT_TRUE(row.ok() && *row) << name;
  return st->column_int64(0);
}

// A fresh directory under the system temp dir, removed with everything in it at the end.
class TempDir {
public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kiln-cache-test-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    m_path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  const std::string& path() const { return m_path; }
  std::string sub(const std::string& name) const { return m_path + "/" + name; }

private:
  std::string m_path;
};

inline std::vector<KeyField> fields_for(const std::string& graph,
                                        const std::string& arch = "sm_90") {
  return {{"graph", "canonical:" + graph},
          {"graph_hash", "h-" + graph},
          {"arch", arch},
          {"precision", "high"},
          {"nvrtc_version", "13.0"},
          {"codegen_version", "cg1"},
          {"options", ""}};
}

inline Contents contents_for(const std::string& graph, size_t payload_bytes = 1000) {
  Contents c;
  c.summary = R"({"graph":")" + graph + R"("})";
  c.compile_ms = 250;
  std::string ptx;
  for (size_t i = 0; ptx.size() < payload_bytes; ++i) ptx += graph + ":" + std::to_string(i) + ";";
  ptx.resize(payload_bytes);
  c.payloads = {{"source", "// source of " + graph}, {"ptx:mm_0", ptx}, {"log", ""}};
  return c;
}

// Options for a cache in `dir` whose warnings are collected into `warnings`.
inline Options options_in(const std::string& dir, std::vector<std::string>* warnings) {
  Options o;
  o.dir = dir;
  o.warn = [warnings](const std::string& w) { warnings->push_back(w); };
  return o;
}

// The record column of `key` (the entry record of FORMAT.md), read and written with SQL.
inline std::string read_record(sql::Db& db, const std::string& key) {
  auto st = db.prepare("SELECT record FROM entries WHERE key = ?");
  EXPECT_TRUE(st.ok());
  st->bind_text(1, key);
  auto row = st->step();
  EXPECT_TRUE(row.ok() && *row) << "no entry " << key;
  return row.ok() && *row ? st->column_blob(0) : std::string();
}

inline void write_record(sql::Db& db, const std::string& key, const std::string& record) {
  auto st = db.prepare("UPDATE entries SET record = ? WHERE key = ?");
  ASSERT_TRUE(st.ok());
  st->bind_blob(1, record).bind_text(2, key);
  ASSERT_TRUE(st->run().ok());
}

// Flips the bits of the byte at `offset` of `bytes` (from the end when negative).
inline void flip(std::string& bytes, long offset) {
  size_t at = offset < 0 ? bytes.size() - static_cast<size_t>(-offset) : static_cast<size_t>(offset);
  bytes[at] = static_cast<char>(~bytes[at]);
}

// Where `needle` starts in `bytes` (asserting it is there).
inline size_t find_in(const std::string& bytes, const std::string& needle) {
  size_t at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos) << "not found: " << needle;
  return at == std::string::npos ? 0 : at;
}

// Stores `key`'s entry again with each payload `which` names holding `bytes`, its checksums
// made anew (what a damaged build, or an entry a keyholder signed, leaves): how many payloads it
// replaced, or -1 when the entry is not there or the store fails.
inline int replace_payloads(Cache& cache, const std::string& key,
                            const std::function<bool(const std::string&)>& which,
                            const std::string& bytes) {
  Lookup found = cache.read(key);
  if (!found.hit()) return -1;
  Contents replaced{found.entry.info.summary, found.entry.payloads, found.entry.info.compile_ms};
  int count = 0;
  for (Payload& p : replaced.payloads) {
    if (!which(p.name)) continue;
    p.bytes = bytes;
    ++count;
  }
  if (!cache.store(key, found.entry.info.fields, replaced).ok()) return -1;
  return count;
}

}  // namespace kiln::cache::testing
